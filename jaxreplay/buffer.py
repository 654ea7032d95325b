"""FIFO replay memory whose logical capacity is a traced value.

Storage is allocated once, at a static ``max_capacity`` (an array shape). The
*logical* capacity ``N`` — how many transitions the memory keeps before it
forgets the oldest — is an ordinary JAX scalar inside :class:`BufferState`.
Because of that one decision:

* a sweep over memory sizes is one compiled program (``vmap`` over the
  capacity as over a seed);
* the adaptive algorithm (aER) grows and shrinks the memory inside ``jit``.

Layout. Storage is a ring of ``max_capacity`` slots. Transitions are written
at consecutive slots (mod ``max_capacity``) and the live transitions are
always the ``size`` most recently written ones::

    oldest = (write_position - size) mod max_capacity
    live   = {oldest, oldest + 1, ..., write_position - 1}  (mod max_capacity)

``size <= capacity <= max_capacity`` always holds. Adding to a memory with
``size == capacity`` forgets the oldest transition (its slot simply leaves the
live window). Shrinking the capacity below ``size`` forgets the oldest; growing
it only makes room for future adds: a forgotten transition lies outside the
window and the window only ever extends forward over freshly written slots, so
it never comes back.

Each slot also records ``insertion_index``, the value of the global insertion
counter when its transition was written (``-1`` if never written), so the age
of every transition is known.

All functions are pure, jit and vmap (over seeds *and* capacities) with a
single compilation, and never change an array shape. Concrete arguments are
validated in plain Python before tracing; see each docstring for what happens
with traced ones.

Performance trap (XLA:CPU, under ``vmap`` in a ``lax.scan``). When one scan
iteration calls :func:`add` and then gathers a minibatch from the same state,
XLA may fuse the gather with the write and copy whole storage columns every
step: measured 4.5× slower at 10⁴ slots in the DQN experiment, growing with
``max_capacity``. Putting the sampling and training behind a ``lax.cond``
(always true there) keeps the write in place; ``jax.lax.optimization_barrier``
did not help. If a step's cost grows with ``max_capacity``, look for large
``copy(`` ops in the while body of ``jax.jit(f).lower(...).compile().as_text()``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation
from jaxreplay._typing import ArrayLike, PyTree

Transition = PyTree
"""One transition, or a batch of them: any pytree of arrays (a batch has a leading axis on every leaf)."""


class BufferState(NamedTuple):
    """State of a replay memory (a pytree; every field may gain leading vmap axes).

    Attributes:
        storage: the transition pytree with a leading axis of length
            ``max_capacity`` on every leaf.
        insertion_index: ``int32[max_capacity]``; for each slot, the insertion
            counter at the time its transition was written, ``-1`` if never.
        capacity: ``int32[]``; the logical capacity ``N`` in ``[1, max_capacity]``.
        size: ``int32[]``; the number of live transitions, ``<= capacity``.
        write_position: ``int32[]``; the slot the next transition goes to.
        total_added: ``int32[]``; transitions added since ``init`` (the
            insertion counter; valid up to 2**31 - 1 adds).
        capacity_clipped: ``bool[]``; set (and kept) when a traced capacity
            passed to :func:`init` or :func:`resize` was not an integer in
            ``[1, max_capacity]``: outside it (clipped), fractional
            (truncated) or NaN (replaced, see those functions).
    """

    storage: Transition
    insertion_index: jax.Array
    capacity: jax.Array
    size: jax.Array
    write_position: jax.Array
    total_added: jax.Array
    capacity_clipped: jax.Array

    @property
    def max_capacity(self) -> int:
        """The static number of slots (the length of the storage axis)."""
        return self.insertion_index.shape[-1]


# ----------------------------------------------------------------------------
# Construction and validation


def init(example: Transition, max_capacity: int, capacity: ArrayLike | None = None) -> BufferState:
    """Allocate an empty memory.

    Args:
        example: one transition (a pytree of arrays or numbers, *without* a
            leading batch axis). Only its structure, shapes and dtypes are used.
        max_capacity: static number of slots; storage has shape
            ``(max_capacity, *leaf.shape)`` per leaf.
        capacity: logical capacity ``N``, an integer in ``[1, max_capacity]``;
            defaults to ``max_capacity``. May be traced (e.g. vmapped over a
            sweep of memory sizes); a traced value outside the range is clipped
            and ``capacity_clipped`` is set. A traced NaN gives
            ``max_capacity`` (the default), flagged the same way: never a
            capacity of 0, which would store nothing.

    Returns:
        An empty :class:`BufferState`. Cost: O(max_capacity) memory.

    Raises:
        ValueError: ``max_capacity`` is not a positive Python int, or a
            concrete ``capacity`` is outside ``[1, max_capacity]``.
    """
    max_capacity = _validation.check_static_int("max_capacity", max_capacity, low=1)
    if capacity is None:
        capacity = max_capacity
    _validation.check_int("capacity", capacity, low=1, high=max_capacity, scalar=True)
    leaves = jax.tree.leaves(example)
    if not leaves:
        raise ValueError("example must be a pytree with at least one array leaf, got an empty pytree.")
    storage = jax.tree.map(
        lambda leaf: jnp.zeros((max_capacity, *jnp.shape(leaf)), dtype=jnp.result_type(leaf)), example
    )
    capacity, clipped = _clip_capacity(capacity, max_capacity, fallback=max_capacity)
    zero = jnp.zeros((), jnp.int32)
    return BufferState(
        storage=storage,
        insertion_index=jnp.full((max_capacity,), -1, jnp.int32),
        capacity=capacity,
        size=zero,
        write_position=zero,
        total_added=zero,
        capacity_clipped=clipped,
    )


def _clip_capacity(capacity: ArrayLike, max_capacity: int, fallback: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """``(int32[] capacity in [1, max_capacity], bool[] flag)`` for a possibly traced ``capacity``.

    Out of range: clipped; fractional: truncated; NaN: ``fallback`` (never a
    capacity of 0, which would store nothing). The flag is set whenever the
    result differs from ``capacity``.
    """
    return _validation.clip_traced_int(capacity, 1, max_capacity, fallback)


def _check_transitions(state: BufferState, transitions: Transition, batch_axis: bool) -> None:
    """Raise ValueError if ``transitions`` does not match the storage pytree."""
    storage_def = jax.tree.structure(state.storage)
    given_def = jax.tree.structure(transitions)
    # jax 0.10 types the treedef as an alias mypy cannot resolve (PyTreeDef?); warn_unused_ignores says when it can.
    if storage_def != given_def:  # type: ignore[operator]
        raise ValueError(f"transition pytree structure {given_def} does not match the buffer's {storage_def}.")
    batch_sizes = set()
    for path, stored, given in zip(
        jax.tree_util.tree_flatten_with_path(state.storage)[0],
        jax.tree.leaves(state.storage),
        jax.tree.leaves(transitions),
    ):
        name = jax.tree_util.keystr(path[0]) or "transition"
        item_shape = stored.shape[1:]
        given_shape = tuple(jnp.shape(given))
        if batch_axis:
            if len(given_shape) < 1:
                raise ValueError(f"transitions{name} needs a leading batch axis, got shape {given_shape}.")
            batch_sizes.add(given_shape[0])
            given_shape = given_shape[1:]
        if given_shape != tuple(item_shape):
            raise ValueError(
                f"transition leaf {name} has shape {given_shape}, the buffer stores shape {tuple(item_shape)}."
            )
        _check_storable(name, given, stored.dtype)
    if len(batch_sizes) > 1:
        raise ValueError(f"transitions have different batch sizes across leaves: {sorted(batch_sizes)}.")


def _check_storable(name: str, given: object, dtype: np.dtype) -> None:
    """Raise ValueError unless ``given`` is stored as itself in a leaf of ``dtype``.

    A type ``dtype`` holds every value of (NumPy's "safe" cast) always is; otherwise only concrete
    values are, when none of them changes: integers that fit (a Python 3 into ``uint8``), floats that
    do not overflow (0.1 into ``float16`` rounds, as float32 rounds it; 7e4 would be inf). A narrowing
    that could wrap or overflow is refused for traced values, whose values are not known here (int32
    300 stored in ``int8`` is 44): the caller casts them, deciding what a value out of range becomes.
    Traced integers go into a float type whose range holds their type's (int32 into float32: rounded
    above 2**24, as a concrete one is).
    """
    given_dtype = jnp.result_type(given)
    kind, into = _validation.dtype_kind(given_dtype), _validation.dtype_kind(dtype)
    if not (kind == into or (kind in "iu" and into in "iuf") or kind == "b" or (kind == "f" and into == "f")):
        raise ValueError(
            f"transition leaf {name} has dtype {given_dtype}, which cannot be stored as {dtype} "
            "without changing its kind; cast it first."
        )
    values = _validation.concrete_value(given)
    if values is None and kind in "iu" and into == "f":  # traced integers into a float type: they only round
        # (as concrete ones do) unless the type's range is smaller than theirs (int32 into float16 can overflow)
        lossless = float(np.iinfo(given_dtype).max) <= float(jnp.finfo(dtype).max)
    elif values is None:  # traced: only a type that holds every value of the given one
        lossless = np.can_cast(given_dtype, dtype, casting="safe")
    elif into == "f":  # (an integer or a float: only an overflow to inf changes more than the rounding)
        finite = values[np.isfinite(values)]
        lossless = finite.size == 0 or float(np.max(np.abs(finite))) <= float(jnp.finfo(dtype).max)
    elif values.dtype.kind in "iu":  # into an integer type
        info = np.iinfo(dtype)
        lossless = values.size == 0 or (int(values.min()) >= info.min and int(values.max()) <= info.max)
    else:  # a bool: 0 or 1 fits every type the kinds above allow
        lossless = True
    if not lossless:
        raise ValueError(
            f"transition leaf {name} has dtype {given_dtype}"
            + (" and values outside" if values is not None else ", whose values may fall outside")
            + f" what {dtype} holds (they would wrap or overflow); cast it first (e.g. .astype(jnp.{dtype}))."
        )


# ----------------------------------------------------------------------------
# Writing


def add(state: BufferState, transition: Transition) -> BufferState:
    """Write one transition, forgetting the oldest if the memory is full.

    Args:
        state: the memory.
        transition: one transition matching the ``example`` given to
            :func:`init` (same structure and per-leaf shapes, no batch axis).

    Returns:
        The new state. Cost: O(1) (one dynamic-update-slice per leaf).
    """
    _check_transitions(state, transition, batch_axis=False)
    slot = state.write_position
    storage = jax.tree.map(
        lambda buf, x: jax.lax.dynamic_update_index_in_dim(buf, jnp.asarray(x, buf.dtype), slot, 0),
        state.storage,
        transition,
    )
    insertion_index = state.insertion_index.at[slot].set(state.total_added)
    return state._replace(
        storage=storage,
        insertion_index=insertion_index,
        size=jnp.minimum(state.size + 1, state.capacity),
        write_position=(slot + 1) % state.max_capacity,
        total_added=state.total_added + 1,
    )


def add_batch(state: BufferState, transitions: Transition) -> BufferState:
    """Write ``k`` transitions at once (oldest first) with a single scatter per leaf.

    The live contents, their order, ``size`` and the insertion counter are
    those of ``k`` calls of :func:`add` in order. If ``k`` exceeds
    ``max_capacity`` only the last ``max_capacity`` are written (the earlier
    ones would be overwritten anyway), so the slot layout then differs from
    ``k`` single adds (the write position advances by ``max_capacity``).

    Args:
        state: the memory.
        transitions: a pytree like the example with a leading axis ``k`` on
            every leaf (``k`` static, from the shape).

    Returns:
        The new state. Cost: O(k).
    """
    _check_transitions(state, transitions, batch_axis=True)
    k = jax.tree.leaves(transitions)[0].shape[0]
    if k == 0:
        return state
    keep = min(k, state.max_capacity)
    transitions = jax.tree.map(lambda x: jnp.asarray(x)[k - keep :], transitions)
    slots = (state.write_position + jnp.arange(keep, dtype=jnp.int32)) % state.max_capacity
    # Slots are distinct (keep <= max_capacity), so the scatter is order-free.
    storage = jax.tree.map(
        lambda buf, x: buf.at[slots].set(x.astype(buf.dtype), unique_indices=True),
        state.storage,
        transitions,
    )
    first = state.total_added + (k - keep)
    insertion_index = state.insertion_index.at[slots].set(
        first + jnp.arange(keep, dtype=jnp.int32), unique_indices=True
    )
    return state._replace(
        storage=storage,
        insertion_index=insertion_index,
        size=jnp.minimum(state.size + k, state.capacity),
        write_position=(state.write_position + keep) % state.max_capacity,
        total_added=state.total_added + k,
    )


def resize(state: BufferState, new_capacity: ArrayLike) -> BufferState:
    """Change the logical capacity.

    Shrinking below the current size forgets the oldest ``size - new_capacity``
    transitions (the paper's aER "delete the oldest k"). Growing only makes
    room for future adds; forgotten transitions never come back.

    Args:
        state: the memory.
        new_capacity: integer in ``[1, max_capacity]``; may be traced. A traced
            value outside the range is clipped into it and
            ``capacity_clipped`` is set. A traced NaN keeps the current
            capacity (nothing is forgotten) and sets ``capacity_clipped``.

    Returns:
        The new state. Cost: O(1): only scalars change.

    Raises:
        ValueError: a concrete ``new_capacity`` is outside ``[1, max_capacity]``.
    """
    _validation.check_int("new_capacity", new_capacity, low=1, high=state.max_capacity, scalar=True)
    capacity, clipped = _clip_capacity(new_capacity, state.max_capacity, fallback=state.capacity)
    return state._replace(
        capacity=capacity,
        size=jnp.minimum(state.size, capacity),
        capacity_clipped=state.capacity_clipped | clipped,
    )


# ----------------------------------------------------------------------------
# Reading


def oldest_index(state: BufferState) -> jax.Array:
    """Slot of the oldest live transition (meaningless when empty). ``int32[]``, O(1)."""
    return (state.write_position - state.size) % state.max_capacity


def newest_index(state: BufferState) -> jax.Array:
    """Slot of the newest live transition (meaningless when empty). ``int32[]``, O(1)."""
    return (state.write_position - 1) % state.max_capacity


def slot_of(state: BufferState, offsets: ArrayLike) -> jax.Array:
    """Slots of the transitions at ``offsets`` in age order (0 = oldest live).

    Offsets are not checked against ``size``. Shape of ``offsets`` is kept.
    Cost: O(len(offsets)).
    """
    return (oldest_index(state) + jnp.asarray(offsets, jnp.int32)) % state.max_capacity


def oldest_indices(state: BufferState, num: ArrayLike, max_num: int | None = None) -> tuple[jax.Array, jax.Array]:
    """Slots of the ``num`` oldest live transitions, oldest first.

    Args:
        state: the memory.
        num: how many; a Python int (then the output has length ``num``) or a
            traced integer (then ``max_num`` gives the static output length).
        max_num: static output length; required when ``num`` is traced.

    Returns:
        ``(indices, valid)``, both of shape ``[max_num or num]``: ``int32``
        slots, and a ``bool`` mask that is true for the first
        ``min(num, size)`` entries. Cost: O(max_num).
    """
    _validation.check_int("num", num, low=0, high=state.max_capacity)
    if max_num is None:
        concrete = _validation.concrete_value(num)
        if concrete is None:
            raise ValueError("num is traced: pass max_num, the static length of the output.")
        max_num = int(concrete)
    max_num = _validation.check_static_int("max_num", max_num, low=0)
    offsets = jnp.arange(max_num, dtype=jnp.int32)
    valid = offsets < jnp.minimum(num, state.size)
    return slot_of(state, offsets), valid


def newest_indices(state: BufferState, num: int) -> tuple[jax.Array, jax.Array]:
    """Slots of the ``num`` (static) newest live transitions, newest first.

    Returns ``(indices, valid)`` of shape ``[num]``; ``valid`` is true for the
    first ``min(num, size)`` entries. Cost: O(num).
    """
    num = _validation.check_static_int("num", num, low=0)
    offsets = jnp.arange(num, dtype=jnp.int32)
    return (state.write_position - 1 - offsets) % state.max_capacity, offsets < state.size


def valid_mask(state: BufferState) -> jax.Array:
    """``bool[max_capacity]``: true at the slots of live transitions. Cost: O(max_capacity)."""
    slots = jnp.arange(state.max_capacity, dtype=jnp.int32)
    return (slots - oldest_index(state)) % state.max_capacity < state.size


def ages(state: BufferState, indices: ArrayLike | None = None) -> jax.Array:
    """Age of the transitions at ``indices`` (all slots if ``None``).

    The newest transition has age 0, the one before it 1, and so on; the
    value is meaningless for slots that are not live. ``int32``, shape of
    ``indices``. Cost: O(len(indices)).
    """
    inserted = state.insertion_index if indices is None else state.insertion_index[indices]
    return state.total_added - 1 - inserted


def get(state: BufferState, indices: ArrayLike) -> Transition:
    """Gather the transitions at slots ``indices`` (any shape ``S``).

    Returns the transition pytree with leading shape ``S`` on every leaf.
    Cost: O(len(indices)).

    Raises:
        ValueError: a concrete index outside ``[0, max_capacity)`` (a traced
            one is clamped by the gather: keep indices from a sampler).
    """
    _validation.check_int("indices", indices, low=0, high=state.max_capacity - 1)
    return jax.tree.map(lambda buf: buf[indices], state.storage)


def successors(state: BufferState, indices: ArrayLike, length: int) -> tuple[jax.Array, jax.Array]:
    """Slots of the transitions at ``indices`` and of the ``length - 1`` written after each.

    Entry ``[..., j]`` is the slot of the ``j``-th transition written after the
    one at ``indices[...]`` (``j = 0``: that one). It is *valid* when it is
    live and no newer than the newest transition: since the live window is
    always the ``size`` most recent writes, this holds exactly when the start
    is live and lies at least ``j`` transitions before the newest, whatever
    resizes happened. So a valid entry never crosses the write head (the slot
    after the newest holds the oldest live transition, a forgotten one, or
    nothing) and never leaves the live window. For n-step returns
    (:mod:`jaxreplay.returns`) the entries are consecutive steps of the
    stream; the caller's episode flags say where an episode ends.

    Args:
        state: the memory.
        indices: ``int`` slots in ``[0, max_capacity)``, any shape ``S`` (e.g.
            a :class:`~jaxreplay.samplers.Sample`'s ``indices``).
        length: static number of entries per start (>= 1).

    Returns:
        ``(slots, valid)``: ``int32[*S, length]`` slots (those of invalid
        entries are arbitrary but in range, safe to gather) and
        ``bool[*S, length]``; a start that is not live has no valid entry.
        Cost: O(|S| · length), no gather.

    Raises:
        ValueError: ``length`` is not a positive Python int; a concrete index
            outside ``[0, max_capacity)``.
    """
    length = _validation.check_static_int("length", length, low=1)
    _validation.check_int("indices", indices, low=0, high=state.max_capacity - 1)
    indices = jnp.asarray(indices, jnp.int32)
    steps = jnp.arange(length, dtype=jnp.int32).reshape((1,) * indices.ndim + (length,))  # (ranks made equal)
    age_offsets = (indices - oldest_index(state)) % state.max_capacity  # 0 = oldest live
    slots = (indices[..., None] + steps) % state.max_capacity
    return slots, age_offsets[..., None] + steps < state.size


def is_full(state: BufferState) -> jax.Array:
    """``bool[]``: the memory holds ``capacity`` transitions. O(1)."""
    return state.size >= state.capacity


def in_age_order(state: BufferState) -> tuple[Transition, jax.Array]:
    """All slots reordered oldest first: ``(transitions, valid)``.

    Entry ``j`` of every leaf is the ``j``-th oldest live transition for
    ``j < size``; ``valid`` (``bool[max_capacity]``) marks those. Useful for
    computations over the window in time order. Cost: O(max_capacity).
    """
    offsets = jnp.arange(state.max_capacity, dtype=jnp.int32)
    return get(state, slot_of(state, offsets)), offsets < state.size
