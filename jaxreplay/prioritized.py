"""Stored-priority prioritized replay (Schaul et al. 2016) on a sum tree that does not drift.

Semantics. Each live transition ``i`` keeps a priority between steps::

    p_i = (|δ_i| + ε) ** α        α = priority_exponent >= 0, ε = priority_floor >= 0

set by :func:`update_priorities` from the last TD error ``δ_i`` the learner
computed for it. A new transition has no TD error yet and gets
``max_priority``: the running maximum of every priority stored so far (1.0
before the first update), so it is replayed at least about as often as the
most urgent one. Draws are independent, with replacement, with::

    P(i) = p_i / Σ_{j live} p_j

and each carries the importance weight ``(N · P(i)) ** -β`` divided by the
largest weight in its batch (``N`` = live size, ``β`` =
``importance_exponent``; :func:`jaxreplay.samplers.importance_weights`).

The transitions live in a :mod:`jaxreplay.buffer` ring whose logical
capacity is a traced scalar; this module only adds the priorities. A slot
outside the buffer's live window -- never written, forgotten by :func:`add`
on a full memory, or forgotten by a shrinking :func:`resize` -- always has
priority exactly 0, so it is never drawn and cannot be revived by
:func:`update_priorities`.

Sum tree. The priorities are the leaves of a complete binary tree stored as
one ``float32[2P]`` array, ``P`` the smallest power of two ``>=
max_capacity``: node 1 is the root, node ``n`` has children ``2n`` and ``2n
+ 1``, slot ``s`` is leaf ``P + s`` (node 0 and the leaves past
``max_capacity`` stay 0). Every internal node holds the float32 sum of its
two children *as stored*: writes set leaves and then recompute the ancestors
of the touched leaves from their children, level by level; no delta is ever
added. So the tree is a deterministic function of its leaves (the same
leaves give the same tree bit for bit, whatever operations led to them) and
the root is the pairwise float32 sum of the leaves, within about ``log2(P) ·
2^-24`` relative of the exact sum (``1e-6`` at ``P = 2^17``, typically far
less) *however many updates were made*. A tree that propagates float32
deltas upwards (flashbax's ``sum_tree``) adds one rounding error per update
to every ancestor, so its total drifts away from its leaves (flashbax issue
#52); Dopamine's sum tree also adds deltas, but in float64, where the drift
is about 2^-29 times smaller. Measured after 10^6 updates of batch 50 on 1000
leaves with priorities spanning 5 orders of magnitude: this tree's root is
within 1.1e-8 relative of the float64 sum of its leaves; flashbax 0.1.3's
``set_batch_bincount`` tree is off by 2.6e-5.

Why a sum tree, compiled per platform (measured; the tables are in
``benchmarks/README.md``, "Sum tree vs cumsum"). A per-slot cumulative sum
with a binary search at every draw is O(N) per batch against the tree's
O(batch · log N): on XLA:CPU the two tie at ``N = 10^3`` and the tree wins
3-4x at ``10^4`` and 8-20x at ``10^5``; on an H200 it wins 3-5x at
``10^3``-``10^4``. How the tree is compiled is a static choice,
:class:`TreeMode` (``tree="auto"``: chosen per platform when lowering, with
:func:`jax.lax.platform_dependent`; every mode gives a bit-identical tree).
On CPU the descent and the ancestor refresh are ``fori_loop`` s, as unrolled
gather chains fuse into code 2-5x slower, and :func:`sample` reads the tree
only inside its loop, so that no read is left to be scheduled after the
caller's next in-place update (which would copy the whole tree per step). On
accelerators both are unrolled, and the few leaves an :func:`add` writes
refresh their ancestors with one scatter of precomputed path sums
(:func:`_write_leaves`): a loop there pays kernel launches per level.

Costs (``M = max_capacity``, ``P <= 2M``): :func:`add` O(log M),
:func:`add_batch` O(k log M), :func:`sample` O(batch · log M),
:func:`update_priorities` O(|indices| · log M), :func:`resize` and
:func:`probabilities` O(M). Nothing depends on the traced capacity: shapes
depend on ``max_capacity`` only, so everything jits and vmaps over seeds
*and* capacities with a single compilation.

Numerics. Priorities are float32. One above ``2^100 / P`` is clipped to it,
so every node, the total (the root) included, is at most ``2^100 ≈ 1.3e30``:
finite, and with a reciprocal (``>= 2^-100``) that is a normal float32. A
saturated memory -- all-``inf`` TD errors, or ``1e30`` raised to ``α = 2``
-- thus keeps probabilities that sum to 1 and importance weights in (0, 1]
(clipping at ``finfo(float32).max / (2P)``, as before, let the total reach
``1.7e38``, whose reciprocal is subnormal and flushed to 0 on CPU: every
probability and weight became 0 and learning stopped). One below the smallest normal
float32 (~1.2e-38) is stored as 0 (so every node is 0 or normal, and a
flush-to-zero CPU cannot disagree with the sampler about which subtrees are
empty). A draw descends the tree taking a fresh uniform number every 8
levels, scaled to the subtree it is in, and never enters a subtree whose sum
is 0. A single uniform scaled by the total (the usual scheme) resolves
``P(i)`` only to ``2^-23`` absolute: with ``N`` equal priorities some slots
get ``⌈2^23 / N⌉`` grid points and others ``⌊2^23 / N⌋`` (at ``N = 10^6``, 9
or 8 where 8.39 are due: +7.3% or -4.6%; at most ``N / 2^23`` relative). Here each 8-level block resolves its own branch
probability ``q`` to ``~2^-22`` absolute, so ``P(i)`` is within about
``Σ_blocks 2^-22 / q`` relative (``6e-5`` per block for equal priorities).

Draws follow ``max_capacity``. The descent walks the slots in ring order, and the ring's layout (where the
live window sits, whether it wraps) and the tree's depth (so the uniform numbers a draw takes) follow the
static ``max_capacity``: the same key, priorities and logical capacity in a memory of another
``max_capacity`` draw other transitions, with the same probabilities. A sum tree indexed by slot cannot
avoid it (its partial sums round by layout). So a prioritized run depends on its program's
``max_capacity`` as well as on its seed and hyperparameters; :func:`jaxreplay.samplers.uniform`,
``combined`` (CER) and ``exact_prioritized`` index the live window from its oldest slot and do not
(tested).

Edge cases. If every live priority is 0 (only with ``priority_floor = 0`` and
zero TD errors, or underflow at a large ``α``) sampling and
:func:`probabilities` fall back to uniform over the live window, like
:func:`jaxreplay.samplers.exact_priorities`. Sampling an empty memory is not
an error inside ``jit``: the slots are arbitrary and their probabilities and
weights 0 (as in :mod:`jaxreplay.samplers`).
"""

from __future__ import annotations

import types
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation, samplers
from jaxreplay import buffer as buffer_lib
from jaxreplay._typing import ArrayLike

Transition = buffer_lib.Transition
"""One transition, or a batch of them: a pytree of arrays (as :data:`jaxreplay.buffer.Transition`)."""

_FLOAT = jnp.float32
# Largest total priority (the root): finite, with a normal float32 reciprocal (Numerics).
_MAX_TOTAL = 2.0**100
# Tree levels a draw descends per uniform number (see the module docstring, Numerics).
_LEVELS_PER_UNIFORM = 8


class TreeMode(NamedTuple):
    """How the sum-tree code is compiled: a static choice; every mode gives bit-identical trees and draws.

    Pass one (or its name in :data:`TREE_MODES`) as ``tree=`` to :func:`add`,
    :func:`add_batch`, :func:`update_priorities` and :func:`sample`. It is part
    of the traced program, so a function jitted with one mode keeps it.

    Attributes:
        unroll: the per-level loops (the descent, the ancestor refresh):
            ``None`` picks by platform when lowering (a ``fori_loop`` on CPU,
            unrolled elsewhere, :func:`_over_levels`); ``True`` / ``False``
            force unrolled / looped.
        refresh: how a few written leaves refresh their ancestors: ``None``
            by platform (``"levels"`` on CPU, ``"paths"`` elsewhere,
            :func:`_write_leaves`), or ``"levels"`` / ``"paths"``.
        rebuild_factor: rebuild the whole tree when ``P <= rebuild_factor ·
            (leaves written)`` (cheaper than refreshing paths); 0 never does.
    """

    unroll: bool | None = None
    refresh: str | None = None
    rebuild_factor: int = 64


TREE_MODES = {
    "auto": TreeMode(),
    "cpu": TreeMode(unroll=False, refresh="levels"),
    "accelerator": TreeMode(unroll=True, refresh="paths"),
}
"""Named modes: ``"auto"`` (default: each platform its fastest), and the CPU and accelerator choices forced."""


def _tree_mode(tree: str | TreeMode) -> TreeMode:
    """``tree`` as a :class:`TreeMode` (ValueError naming ``tree`` otherwise)."""
    if isinstance(tree, TreeMode):
        if tree.unroll not in (None, True, False) or tree.refresh not in (None, "levels", "paths"):
            raise ValueError(f"tree has an unknown unroll / refresh: {tree!r}.")
        _validation.check_static_int("tree.rebuild_factor", tree.rebuild_factor, low=0)
        return tree
    if isinstance(tree, str) and tree in TREE_MODES:
        return TREE_MODES[tree]
    raise ValueError(f"tree must be one of {tuple(TREE_MODES)} or a prioritized.TreeMode, got {tree!r}.")


class PrioritizedState(NamedTuple):
    """State of a prioritized memory (a pytree; every field may gain leading vmap axes).

    Attributes:
        buffer: the underlying :class:`jaxreplay.buffer.BufferState`.
        sum_tree: ``float32[2P]``, ``P`` the smallest power of two
            ``>= max_capacity``. Leaf ``P + s`` is the priority of slot ``s``
            (0 for every slot outside the live window); internal node ``n``
            is ``sum_tree[2n] + sum_tree[2n + 1]`` exactly (as float32);
            ``sum_tree[1]`` is the total; ``sum_tree[0]`` is unused (0).
        max_priority: ``float32[]``; the priority given to new transitions:
            the running maximum of all priorities stored by
            :func:`update_priorities`, starting at 1.0. It never decreases.
        invalid_parameters: ``bool[]``; set (and kept) when
            :func:`update_priorities` was given a traced ``priority_exponent``
            or ``priority_floor`` that is NaN, infinite, negative or subnormal, or
            a floor whose ``ε^α`` is below the smallest normal float32 (it would run
            as 0). That update was ignored (no priority changed), like
            ``buffer.capacity_clipped`` a flag to check after a jitted run, since
            jitted code cannot raise.
    """

    buffer: buffer_lib.BufferState
    sum_tree: jax.Array
    max_priority: jax.Array
    invalid_parameters: jax.Array

    @property
    def max_capacity(self) -> int:
        """The static number of slots."""
        return self.buffer.max_capacity


# ----------------------------------------------------------------------------
# Sum-tree primitives (all shapes static)


def _num_leaves(max_capacity: int) -> int:
    """Smallest power of two >= max_capacity."""
    return 1 << (max_capacity - 1).bit_length()


def _tree_shape(tree: jax.Array) -> tuple[int, int]:
    """``(P, depth)`` of a tree array of length ``2P``."""
    leaves = tree.shape[-1] // 2
    return leaves, leaves.bit_length() - 1


def _over_levels(depth: int, body, carry, mode: TreeMode = TreeMode()):
    """``carry = body(level, carry)`` for ``level`` in ``0 .. depth-1``, compiled per platform.

    On CPU a ``fori_loop``: XLA:CPU fuses an unrolled chain of dependent
    gathers into code about 5x slower than the loop. On GPU (and other
    accelerators) the levels are unrolled: XLA then fuses the whole chain into
    a few kernels, where a loop costs kernel launches (and a trip-count
    check) per level. Both compute the same operations in the same order; the
    choice is made when lowering (:func:`jax.lax.platform_dependent`), so one
    traced function serves every backend.
    """

    def looped(carry):
        return jax.lax.fori_loop(0, depth, body, carry)

    def unrolled(carry):
        for level in range(depth):
            carry = body(level, carry)
        return carry

    if mode.unroll is None:
        return jax.lax.platform_dependent(carry, cpu=looped, default=unrolled)
    return unrolled(carry) if mode.unroll else looped(carry)


_MAX_PATHS = 64  # more written leaves than this: "levels" on every platform
_ELEMENTWISE_PATHS = 8  # up to this many: path crossings found without reductions


def _write_leaves(
    tree: jax.Array, leaf_nodes: jax.Array, leaf_values: jax.Array | None = None, mode: TreeMode = TreeMode()
) -> jax.Array:
    """Write leaves, then make every ancestor of them the float32 sum of its children.

    Args:
        tree: ``float32[2P]``, every internal node the sum of its children
            (except, if ``leaf_values`` is None, on the paths of ``leaf_nodes``).
        leaf_nodes: ``int32[T]`` node numbers in ``[P, 2P)``; duplicates
            allowed.
        leaf_values: ``float32[T]`` the new values of those leaves (duplicate
            nodes must come with equal values), or None if the leaves are
            already written into ``tree``.

    Returns:
        The tree with those leaves and every node on their paths consistent.
        Cost: O(min(T · log P, P)).

    For a small tree relative to ``T`` a full rebuild from the leaves is
    cheaper than ``log P`` dependent scatters (measured on CPU: 3.0 vs 9.8 µs
    per update of 50 at P = 1024). Otherwise, per platform:

    * ``levels`` (CPU, and any platform for ``T > 64``): one scatter per
      level (a ``fori_loop`` on CPU, see :func:`_over_levels`), each parent
      recomputed from its already refreshed children;
    * ``paths`` (accelerators): all ``T · (log P + 1)`` new values are
      computed first, walking the paths upwards over the *old* tree -- a
      sibling that lies on another path takes that path's new value (found
      by comparing the ``T`` nodes of a level with each other) -- and are
      written by one scatter: a few fused kernels instead of two per level.
      Measured on an H200 (``benchmarks/buffer.py`` step, B = 100, N = 1000):
      the whole add + sample + update step takes 47 µs instead of 57.

    All compute every parent as the same float32 sum of the same two
    children, so the result is bit-identical.
    """
    num_leaves, depth = _tree_shape(tree)
    count = leaf_nodes.shape[0]
    prewritten = leaf_values is None
    new_values = tree[leaf_nodes] if leaf_values is None else leaf_values

    def write(tree):
        return tree if prewritten else tree.at[leaf_nodes].set(new_values)

    if num_leaves <= mode.rebuild_factor * count:
        return _build_tree(write(tree)[num_leaves:])

    def levels(tree):
        def refresh(_, carry):
            tree, nodes = carry
            nodes = nodes // 2
            return tree.at[nodes].set(tree[2 * nodes] + tree[2 * nodes + 1]), nodes

        tree, _ = _over_levels(depth, refresh, (write(tree), leaf_nodes), mode)
        return tree

    def paths(tree):
        nodes, values = leaf_nodes, new_values
        written_nodes, written_values = [nodes], [values]
        for _ in range(depth):
            sibling = nodes ^ 1
            sibling_value = tree[sibling]
            if count <= _ELEMENTWISE_PATHS:  # elementwise: fuses with the gathers
                for j in range(count):
                    sibling_value = jnp.where(sibling == nodes[j], values[j], sibling_value)
            else:
                on_path = sibling[:, None] == nodes[None, :]  # [T, T]
                found = values[jnp.argmax(on_path, axis=1)]
                sibling_value = jnp.where(jnp.any(on_path, axis=1), found, sibling_value)
            is_right = (nodes & 1) == 1
            values = jnp.where(is_right, sibling_value, values) + jnp.where(is_right, values, sibling_value)
            nodes = nodes // 2
            written_nodes.append(nodes)
            written_values.append(values)
        return tree.at[jnp.concatenate(written_nodes)].set(jnp.concatenate(written_values))

    how = "levels" if count > _MAX_PATHS else mode.refresh
    if how is None:
        return jax.lax.platform_dependent(tree, cpu=levels, default=paths)
    return {"levels": levels, "paths": paths}[how](tree)


def _build_tree(leaves: jax.Array) -> jax.Array:
    """The tree (``float32[2P]``) over ``leaves`` (``float32[P]``), from scratch. O(P)."""
    levels = [leaves]
    while levels[-1].shape[-1] > 1:
        below = levels[-1]
        levels.append(below[0::2] + below[1::2])
    return jnp.concatenate([jnp.zeros((1,), leaves.dtype), *reversed(levels)])


def _leaf_values(state: PrioritizedState) -> jax.Array:
    num_leaves, _ = _tree_shape(state.sum_tree)
    return state.sum_tree[num_leaves : num_leaves + state.max_capacity]


def _clean_priorities(priorities: jax.Array, num_leaves: int) -> jax.Array:
    """Clip into ``{0} ∪ [smallest normal, 2^100 / P]`` (see the module docstring, Numerics)."""
    info = jnp.finfo(_FLOAT)
    ceiling = _MAX_TOTAL / num_leaves  # a power of two: P leaves at the ceiling sum to exactly _MAX_TOTAL
    priorities = jnp.minimum(priorities, ceiling)
    return jnp.where(priorities < info.tiny, 0.0, priorities).astype(_FLOAT)


# ----------------------------------------------------------------------------
# Construction and writing


def init(example: Transition, max_capacity: int, capacity: ArrayLike | None = None) -> PrioritizedState:
    """Allocate an empty prioritized memory.

    Args:
        example: one transition (a pytree of arrays, no batch axis); see
            :func:`jaxreplay.buffer.init`.
        max_capacity: static number of slots (>= 1).
        capacity: logical capacity ``N`` in ``[1, max_capacity]``, defaults to
            ``max_capacity``; may be traced (then clipped and flagged, see
            :func:`jaxreplay.buffer.init`).

    Returns:
        An empty :class:`PrioritizedState`: all priorities 0, ``max_priority``
        1.0. Cost: O(max_capacity) memory; the tree adds ``2P <= 4 ·
        max_capacity`` float32.

    Raises:
        ValueError: as :func:`jaxreplay.buffer.init`.
    """
    buffer = buffer_lib.init(example, max_capacity, capacity)
    num_leaves = _num_leaves(buffer.max_capacity)
    return PrioritizedState(
        buffer=buffer,
        sum_tree=jnp.zeros((2 * num_leaves,), _FLOAT),
        max_priority=jnp.ones((), _FLOAT),
        invalid_parameters=jnp.zeros((), bool),
    )


def _after_write(
    state: PrioritizedState, new_buffer: buffer_lib.BufferState, k: int, mode: TreeMode = TreeMode()
) -> PrioritizedState:
    """Priorities after ``k`` transitions were written into ``state.buffer``, giving ``new_buffer``.

    Zeroes the leaves of the transitions that left the live window, then sets
    the ``min(k, max_capacity)`` written slots to ``max_priority`` (0 for the
    ones that are already outside the window because ``k > capacity``), then
    refreshes the ancestors of all touched leaves. O(min(k, max_capacity) · log P).
    """
    old = state.buffer
    max_capacity = old.max_capacity
    num_leaves, _ = _tree_shape(state.sum_tree)
    keep = min(k, max_capacity)
    offsets = jnp.arange(keep, dtype=jnp.int32)
    # The old live window, oldest first, followed by the k new transitions:
    # the new window is the last new_buffer.size of them, so the oldest
    # min(size, size + k - new_size) old ones are forgotten (always <= keep).
    num_forgotten = jnp.minimum(old.size, old.size + k - new_buffer.size)
    forgotten_slots = buffer_lib.slot_of(old, offsets)
    # Written slots are distinct (keep <= max_capacity); the last new_size are live.
    new_values = jnp.where(offsets >= keep - new_buffer.size, state.max_priority, 0.0).astype(_FLOAT)
    # A forgotten slot may be one of the written ones (the ring wrapped onto
    # it): then it takes the written value, so that duplicate nodes carry
    # equal values. Candidates past num_forgotten keep their priority.
    as_written = (forgotten_slots - old.write_position) % max_capacity
    forgotten_values = jnp.where(
        as_written < keep,
        new_values[jnp.minimum(as_written, keep - 1)],
        jnp.where(offsets < num_forgotten, 0.0, state.sum_tree[num_leaves + forgotten_slots]),
    ).astype(_FLOAT)
    written_nodes = num_leaves + (old.write_position + offsets) % max_capacity
    tree = _write_leaves(
        state.sum_tree,
        jnp.concatenate([num_leaves + forgotten_slots, written_nodes]),
        jnp.concatenate([forgotten_values, new_values]),
        mode,
    )
    return state._replace(buffer=new_buffer, sum_tree=tree)


def add(state: PrioritizedState, transition: Transition, *, tree: str | TreeMode = "auto") -> PrioritizedState:
    """Write one transition with priority ``max_priority``.

    If the memory is full the oldest transition is forgotten and its priority
    set to 0 (when ``capacity == max_capacity`` that is the slot being
    overwritten, whose old priority is replaced).

    Args:
        state: the memory.
        transition: one transition matching the ``example`` given to :func:`init`
            (every leaf without the leading ``max_capacity`` axis).
        tree: how the sum tree is compiled (static; ``"auto"``, ``"cpu"``,
            ``"accelerator"`` or a :class:`TreeMode`; results are the same).

    Returns:
        The new :class:`PrioritizedState`. Cost: O(log max_capacity) (two leaves and their paths).

    Raises:
        ValueError: ``transition`` does not match the stored pytree.
    """
    mode = _tree_mode(tree)
    return _after_write(state, buffer_lib.add(state.buffer, transition), 1, mode)


def add_batch(state: PrioritizedState, transitions: Transition, *, tree: str | TreeMode = "auto") -> PrioritizedState:
    """Write ``k`` transitions at once (oldest first), each with priority ``max_priority``.

    Same result as ``k`` calls of :func:`add` (for ``k > max_capacity`` up to
    the slot layout, see :func:`jaxreplay.buffer.add_batch`), with one scatter
    per leaf of the transition pytree and per tree level. If ``k >
    capacity``, the first ``k - capacity`` are forgotten at once and get
    priority 0.

    Args:
        state: the memory.
        transitions: a transition pytree with a leading axis ``k`` (static) on
            every leaf.
        tree: how the sum tree is compiled (static; ``"auto"``, ``"cpu"``,
            ``"accelerator"`` or a :class:`TreeMode`; results are the same).

    Returns:
        The new :class:`PrioritizedState`. Cost: O(min(k, max_capacity) · log max_capacity).

    Raises:
        ValueError: ``transitions`` do not match the stored pytree.
    """
    mode = _tree_mode(tree)
    new_buffer = buffer_lib.add_batch(state.buffer, transitions)
    k = jax.tree.leaves(transitions)[0].shape[0]
    if k == 0:
        return state
    return _after_write(state, new_buffer, k, mode)


def resize(state: PrioritizedState, new_capacity: ArrayLike) -> PrioritizedState:
    """Change the logical capacity (:func:`jaxreplay.buffer.resize`).

    Shrinking below the current size forgets the oldest ``size -
    new_capacity`` transitions: their priorities become 0 and they are never
    drawn again (their slots come back only when :func:`add` overwrites them,
    with a new transition at ``max_priority``). Growing changes no priority.
    ``max_priority`` is kept.

    Args:
        state: the memory.
        new_capacity: integer in ``[1, max_capacity]``; may be traced (then
            clipped and ``buffer.capacity_clipped`` is set).

    Returns:
        The new state. Cost: O(max_capacity): the number of forgotten
        transitions is traced, so every leaf is masked with the new live
        window and the tree is rebuilt (pairwise sums, log P vector adds).

    Raises:
        ValueError: a concrete ``new_capacity`` is outside ``[1, max_capacity]``.
    """
    new_buffer = buffer_lib.resize(state.buffer, new_capacity)
    num_leaves, _ = _tree_shape(state.sum_tree)
    live = buffer_lib.valid_mask(new_buffer)
    leaves = jnp.where(live, _leaf_values(state), 0.0)
    leaves = jnp.pad(leaves, (0, num_leaves - state.max_capacity))
    return state._replace(buffer=new_buffer, sum_tree=_build_tree(leaves))


def floor_power_underflows(
    priority_floor: ArrayLike, priority_exponent: ArrayLike, xp: types.ModuleType = jnp
) -> jax.Array:
    """``bool`` of the two arguments' broadcast shape: ``ε > 0`` whose ``ε^α``, in float32, is below the
    smallest normal float32 (``1.18e-38``), so that it runs as 0 and a transition whose TD error is 0 stores
    priority 0, never to be replayed, against the floor's promise. ``xp`` is ``jnp`` (traced values:
    :func:`update_priorities` flags them) or NumPy (concrete ones: :func:`check_floor_power` refuses them)."""
    floor = xp.asarray(priority_floor, xp.float32)
    with np.errstate(over="ignore", under="ignore"):  # (NumPy: 1e30 ** 1e30 is inf, 1e-20 ** 2 subnormal)
        power = xp.power(floor, xp.asarray(priority_exponent, xp.float32))
    return (floor > 0) & (power < _validation.FLOAT32_TINY)


def check_floor_power(priority_floor: ArrayLike, priority_exponent: ArrayLike) -> None:
    """Refuse (``ValueError`` naming ``priority_floor``) concrete values, scalars or arrays of any shape
    broadcast together, for which :func:`floor_power_underflows`; traced ones pass (:func:`update_priorities`
    flags them)."""
    floors, exponents = _validation.concrete_value(priority_floor), _validation.concrete_value(priority_exponent)
    if floors is None or exponents is None:
        return
    floors, exponents = np.broadcast_arrays(floors, exponents)
    bad = np.flatnonzero(floor_power_underflows(floors, exponents, np))
    if bad.size:
        floor, exponent = float(floors.reshape(-1)[bad[0]]), float(exponents.reshape(-1)[bad[0]])
        raise _validation.FieldError(
            "priority_floor",
            f"= {floor:g} raised to priority_exponent = {exponent:g} is {floor**exponent:.3g}, below float32's "
            f"smallest normal number ({_validation.FLOAT32_TINY:.3g}): it would run as 0, and a transition whose "
            "TD error is 0 would never be replayed; give a larger priority_floor (or 0, to mean no floor).",
        )


def update_priorities(
    state: PrioritizedState,
    indices: ArrayLike,
    td_errors: ArrayLike,
    priority_exponent: ArrayLike,
    priority_floor: ArrayLike = 1e-6,
    *,
    tree: str | TreeMode = "auto",
) -> PrioritizedState:
    """Store ``p_i = (|δ_i| + priority_floor)^priority_exponent`` for the slots ``indices``.

    Call it with the slots of a :class:`~jaxreplay.samplers.Sample` and the
    TD errors just computed for them. Rules, all deterministic:

    * duplicate slots (sampling is with replacement): the *largest* of their
      new priorities is stored (the same transition under the same
      parameters has the same TD error, so this only matters if the caller
      passes different errors for it);
    * a slot that is not live (e.g. forgotten by :func:`add` or
      :func:`resize` since it was sampled, or never written) or outside
      ``[0, max_capacity)`` when traced is ignored: a forgotten transition
      can never be revived. (A slot forgotten *and rewritten* since it was
      sampled holds a new transition, which gets the update.) An empty memory
      is left unchanged;
    * a NaN TD error (traced, so not caught) stores the current
      ``max_priority``, as for a new transition; ``inf`` and huge priorities
      are clipped and tiny ones flushed to 0 (module docstring, Numerics);
    * a traced ``priority_exponent`` or ``priority_floor`` that is NaN,
      infinite, negative or subnormal (it would run as 0), or a floor whose
      ``ε^α`` is below the smallest normal float32 (a TD error of 0 would
      store 0), makes the whole update a no-op and sets the
      sticky flag ``invalid_parameters`` (it does not reset every priority
      to ``max_priority``, nor invert them);
    * ``max_priority`` becomes the maximum of itself and the stored
      priorities. It never decreases, so it may be much larger than
      the current maximum after a change of ``priority_exponent``.

    Args:
        state: the memory.
        indices: integer slots, any static shape ``S``.
        td_errors: real TD errors, shape ``S``.
        priority_exponent: ``α >= 0``; may be traced. ``α = 0`` makes every
            priority 1 (uniform replay).
        priority_floor: ``ε >= 0``; may be traced. *Added* to ``|δ|`` (not a
            clamp, unlike :func:`jaxreplay.samplers.exact_priorities`'
            ``error_floor``), so every stored priority is at least ``ε^α`` and a
            transition whose TD error is 0 stays replayable.
        tree: how the sum tree is compiled (static; ``"auto"``, ``"cpu"``,
            ``"accelerator"`` or a :class:`TreeMode`; results are the same).

    Returns:
        The new state. Cost: O(|S| · log max_capacity).

    Raises:
        ValueError: shapes differ, ``indices`` is not integer or (concrete)
            out of range, ``td_errors`` (concrete) is not finite, or
            ``priority_exponent``/``priority_floor`` (concrete) is negative, not
            finite or not a normal float32, or ``ε^α`` is (:func:`check_floor_power`).
    """
    mode = _tree_mode(tree)
    max_capacity = state.max_capacity
    if not jnp.issubdtype(jnp.result_type(indices), jnp.integer):
        raise ValueError(f"indices must be an integer array, got dtype {jnp.result_type(indices)}.")
    if jnp.shape(indices) != jnp.shape(td_errors):
        raise ValueError(f"td_errors must have the shape of indices {jnp.shape(indices)}, got {jnp.shape(td_errors)}.")
    _validation.check_int("indices", indices, low=0, high=max_capacity - 1)
    _validation.check_float("td_errors", td_errors)
    # (as run: 1e39 would run as inf, 1e-40 as 0; outside_bounds flags a traced one the same way)
    _validation.check_bounds("priority_exponent", priority_exponent, _validation.NONNEGATIVE, scalar=True)
    _validation.check_bounds("priority_floor", priority_floor, _validation.NONNEGATIVE, scalar=True)
    check_floor_power(priority_floor, priority_exponent)
    num_leaves, _ = _tree_shape(state.sum_tree)
    indices = jnp.ravel(jnp.asarray(indices)).astype(jnp.int32)
    td_errors = jnp.ravel(jnp.asarray(td_errors)).astype(_FLOAT)
    if indices.size == 0:
        return state

    in_range = (indices >= 0) & (indices < max_capacity)
    safe = jnp.clip(indices, 0, max_capacity - 1)
    age_order = (safe - buffer_lib.oldest_index(state.buffer)) % max_capacity
    priority_floor = jnp.asarray(priority_floor, _FLOAT)
    priority_exponent = jnp.asarray(priority_exponent, _FLOAT)
    valid_parameters = ~(
        _validation.outside_bounds(priority_exponent, _validation.NONNEGATIVE)  # (NaN, inf, < 0, subnormal)
        | _validation.outside_bounds(priority_floor, _validation.NONNEGATIVE)
        # A floor whose ε^α runs as 0 stores 0 for a TD error of 0, never replayed, against its promise (a probe).
        | floor_power_underflows(priority_floor, priority_exponent)
    )
    accepted = in_range & (age_order < state.buffer.size) & valid_parameters
    priorities = jnp.power(jnp.abs(td_errors) + priority_floor, priority_exponent)
    # (A NaN TD error at α = 0 has priority NaN^0 = 1: tested on the error as well.)
    priorities = jnp.where(jnp.isnan(priorities) | jnp.isnan(td_errors), state.max_priority, priorities)
    priorities = _clean_priorities(priorities, num_leaves)

    nodes = num_leaves + safe
    target = jnp.where(accepted, nodes, 2 * num_leaves)  # out of bounds: dropped
    sum_tree = state.sum_tree.at[target].set(0.0, mode="drop").at[target].max(priorities, mode="drop")
    sum_tree = _write_leaves(sum_tree, nodes, mode=mode)
    max_priority = jnp.maximum(state.max_priority, jnp.max(jnp.where(accepted, priorities, 0.0)))
    return state._replace(
        sum_tree=sum_tree,
        max_priority=max_priority.astype(_FLOAT),
        invalid_parameters=state.invalid_parameters | ~valid_parameters,
    )


# ----------------------------------------------------------------------------
# Reading


def priorities(state: PrioritizedState) -> jax.Array:
    """``float32[max_capacity]``: the stored priority ``p_i`` of every slot (0 if not live).

    Cost: O(max_capacity).
    """
    return _leaf_values(state)


def total_priority(state: PrioritizedState) -> jax.Array:
    """``float32[]``: the sum of the live priorities (the tree root). O(1)."""
    return state.sum_tree[1]


def _normalise(priority: jax.Array, total: jax.Array) -> jax.Array:
    # One reciprocal, then a product: XLA may turn a division by a broadcast
    # scalar into exactly this in one fusion and not in another; doing it
    # explicitly makes sample() and probabilities() agree bit for bit.
    return priority * (1.0 / jnp.where(total > 0, total, 1.0))


def probabilities(state: PrioritizedState) -> jax.Array:
    """Exact per-draw sampling probability of every slot.

    Returns:
        ``float32[max_capacity]``: ``p_i / Σ_live p`` (``Σ`` the tree root),
        0 outside the live window; ``1 / size`` on the live window if every
        live priority is 0; all 0 for an empty memory. Cost: O(max_capacity).
    """
    total = total_priority(state)
    leaves = _leaf_values(state)
    live = buffer_lib.valid_mask(state.buffer)
    uniform = jnp.where(live, 1.0 / jnp.maximum(state.buffer.size, 1), 0.0)
    return jnp.where(total > 0, _normalise(leaves, total), uniform).astype(_FLOAT)


def sample(
    key: jax.Array,
    state: PrioritizedState,
    batch_size: int,
    importance_exponent: ArrayLike,
    *,
    tree: str | TreeMode = "auto",
) -> samplers.Sample:
    """Draw ``batch_size`` live transitions with replacement, ``P(i) = p_i / Σ_live p``.

    All draws descend the ``log2 P`` levels of the tree in parallel, taking
    a fresh uniform number every 8 levels (module docstring, Numerics), and
    never enter a subtree of sum 0: a slot of priority 0 -- in particular one
    outside the live window -- is never drawn.

    Args:
        key: PRNG key.
        state: the memory.
        batch_size: static number of draws (>= 1).
        importance_exponent: ``β >= 0``; may be traced. The weights are
            ``(size · P(i))^-β / max_batch``; ``β = 0`` gives weights of 1,
            ``β = 1`` the full correction.
        tree: how the sum tree is compiled (static; ``"auto"``, ``"cpu"``,
            ``"accelerator"`` or a :class:`TreeMode`; results are the same).

    Returns:
        A :class:`~jaxreplay.samplers.Sample` with ``int32[batch_size]``
        slots, their probabilities :func:`probabilities` and importance
        weights in [0, 1], exactly 1 at the batch's smallest probability and 0
        only where ``(size · P(i))^-importance_exponent`` underflows (all NaN if a traced
        ``importance_exponent`` is NaN, infinite or negative: see
        :func:`jaxreplay.samplers.importance_weights`).
        If all live priorities are 0, uniform over the live
        window; if the memory is empty, arbitrary slots with probability and
        weight 0. Cost: O(batch_size · log max_capacity), with
        ``batch_size · ceil(log2(P) / 8)`` uniform numbers.

    Raises:
        ValueError: ``batch_size`` is not a Python int >= 1, or a concrete
            ``importance_exponent`` is negative or not finite.
    """
    mode = _tree_mode(tree)
    batch_size = _validation.check_static_int("batch_size", batch_size, low=1)
    _validation.check_bounds("importance_exponent", importance_exponent, _validation.NONNEGATIVE, scalar=True)
    sum_tree = state.sum_tree
    num_leaves, depth = _tree_shape(sum_tree)
    num_blocks = max(1, -(-depth // _LEVELS_PER_UNIFORM))
    uniforms = jax.random.uniform(key, (num_blocks, batch_size), _FLOAT)
    children = sum_tree.reshape(-1, 2)  # row n: (sum_tree[2n], sum_tree[2n + 1])

    def descend(level, carry):
        nodes, target, value, total = carry
        pair = children[nodes]
        left, right = pair[:, 0], pair[:, 1]
        node_value = left + right  # == sum_tree[nodes], exactly
        # Every _LEVELS_PER_UNIFORM levels, a fresh uniform scaled to the
        # subtree the draw is in.
        fresh = uniforms[level // _LEVELS_PER_UNIFORM] * node_value
        target = jnp.where(level % _LEVELS_PER_UNIFORM == 0, fresh, target)
        go_right = (target >= left) & (right > 0)
        return (
            2 * nodes + go_right.astype(jnp.int32),
            jnp.where(go_right, target - left, target),
            jnp.where(go_right, right, left),
            jnp.where(level == 0, node_value, total),
        )

    zeros = jnp.zeros((batch_size,), _FLOAT)
    if depth == 0:  # max_capacity == 1: the root is the only leaf
        nodes, value, total = jnp.ones((batch_size,), jnp.int32), sum_tree[1] + zeros, sum_tree[1] + zeros
    else:
        # A loop on CPU, unrolled on accelerators (_over_levels). Everything
        # read from the tree comes out of the loop, so on CPU no read of it is
        # left to be scheduled after a following in-place update (which would
        # force a copy of the whole tree).
        start = (jnp.ones((batch_size,), jnp.int32), zeros, zeros, zeros)
        nodes, _, value, total = _over_levels(depth, descend, start, mode)
    positive = total > 0
    drawn = _normalise(value, total)
    # All priorities 0 (or empty memory): uniform over the live window, from the first row of uniforms
    # (floor(u · size): samplers.uniform's float grid, within size / 2**23 of uniform, at every size).
    size = state.buffer.size
    offsets = jnp.minimum((uniforms[0] * size.astype(_FLOAT)).astype(jnp.int32), size - 1)
    uniform_probability = jnp.where(size > 0, 1.0 / jnp.maximum(size, 1).astype(_FLOAT), 0.0)
    indices = jnp.where(positive, nodes - num_leaves, buffer_lib.slot_of(state.buffer, offsets))
    drawn = jnp.where(positive, drawn, uniform_probability).astype(_FLOAT)
    weights = samplers.importance_weights(drawn, size, importance_exponent)
    return samplers.Sample(indices.astype(jnp.int32), drawn, weights)
