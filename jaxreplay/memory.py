"""A replay memory as one record of pure functions, its hyperparameters bound by a factory.

Agents see a memory only through a :class:`Memory`: ``init / add / sample /
update / resize`` plus ``buffer`` (the underlying
:class:`~jaxreplay.buffer.BufferState`, for :func:`jaxreplay.buffer.get` and
the aER controller). :func:`make` builds the record from a static kind and
binds that kind's hyperparameters, the way ``optax.adam(learning_rate)``
builds a ``GradientTransformation`` or ``flashbax.make_prioritised_buffer``
a buffer, so an agent's loop never branches on the kind of sampler and never
passes sampler-specific keywords::

    memory = jaxreplay.memory.make("prioritized", importance_exponent=0.4, priority_exponent=0.6)
    state = memory.init(example, max_capacity, capacity)        # capacity may be traced
    state = memory.add(state, transition)
    sample = memory.sample(key, state, batch_size)
    batch = jaxreplay.buffer.get(memory.buffer(state), sample.indices)
    state = memory.update(state, sample.indices, td_errors)     # the identity without priorities
    state = memory.resize(state, new_capacity)

Every function is pure and jits and vmaps. A hyperparameter may be traced:
call :func:`make` inside the traced function with the traced values (as
``optax.inject_hyperparams`` rebuilds its transformation at every step);
building the record costs nothing at run time. :data:`HYPERPARAMETERS` names
what each kind takes, so one loop serves every kind::

    memory = jaxreplay.memory.make(kind, **{name: hparams[name] for name in jaxreplay.memory.HYPERPARAMETERS[kind]})

A keyword the kind does not take (a typo such as ``importance_exponant``, or
``importance_exponent`` for uniform replay) is refused with a ``ValueError``
naming it, never ignored.

Kinds (:data:`KINDS`) and their hyperparameters:

* ``"uniform"``: :func:`jaxreplay.samplers.uniform` over a
  :class:`~jaxreplay.buffer.BufferState`; weights 1. None.
* ``"cer"``: :func:`jaxreplay.samplers.combined` (the newest transition plus
  uniform draws). None.
* ``"prioritized"``: stored priorities on a sum tree
  (:mod:`jaxreplay.prioritized`) with importance weights; ``update`` stores
  ``(|δ| + priority_floor)^priority_exponent`` for the replayed slots (slot
  ``-1`` is skipped inside ``jit``; a concrete -1 is refused, naming
  ``indices``). ``importance_exponent`` β >= 0 (default 0: weights 1),
  ``priority_exponent`` α >= 0 (default 1), ``priority_floor`` ε >= 0
  (default 1e-6); each one number (an array is refused: sweep with ``vmap``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax

from jaxreplay import _validation, prioritized, samplers
from jaxreplay import buffer as buffer_lib
from jaxreplay._typing import ArrayLike

KINDS = ("uniform", "prioritized", "cer")
"""The replay memories :func:`make` builds: uniform, stored-priority (PER) and combined (CER)."""

HYPERPARAMETERS: dict[str, tuple[str, ...]] = {
    "uniform": (),
    "prioritized": ("importance_exponent", "priority_exponent", "priority_floor"),
    "cer": (),
}
"""The keyword arguments :func:`make` takes for each kind (each a real scalar >= 0, may be traced)."""

MemoryState = buffer_lib.BufferState | prioritized.PrioritizedState
"""A memory's state: a :class:`~jaxreplay.buffer.BufferState` (uniform, cer) or a
:class:`~jaxreplay.prioritized.PrioritizedState` (prioritized)."""


class Memory(NamedTuple):
    """A replay memory's pure functions, its hyperparameters bound (see the module docstring).

    Attributes:
        init: ``(example, max_capacity, capacity) -> state``.
        add: ``(state, transition) -> state``.
        sample: ``(key, state, batch_size) -> samplers.Sample`` (``batch_size`` static).
        update: ``(state, indices int32[B], td_errors float[B]) -> state``; stores
            priorities for prioritized replay (slot ``-1`` skipped when traced, refused when
            concrete), the identity otherwise.
        resize: ``(state, capacity) -> state``.
        buffer: ``state -> buffer.BufferState``.
    """

    # Callable[..., ]: each kind takes its own state type.
    init: Callable[..., MemoryState]
    add: Callable[..., MemoryState]
    sample: Callable[..., samplers.Sample]
    update: Callable[..., MemoryState]
    resize: Callable[..., MemoryState]
    buffer: Callable[[MemoryState], buffer_lib.BufferState]


def buffer_of(state: MemoryState) -> buffer_lib.BufferState:
    """The :class:`~jaxreplay.buffer.BufferState` inside any memory's state (itself for uniform and cer)."""
    return state.buffer if isinstance(state, prioritized.PrioritizedState) else state


def _unchanged(state: buffer_lib.BufferState, indices: ArrayLike, td_errors: ArrayLike) -> buffer_lib.BufferState:
    """``update`` of a memory without priorities: ``state`` itself."""
    return state


def _plain(sampler: Callable[[jax.Array, buffer_lib.BufferState, int], samplers.Sample]) -> Memory:
    return Memory(
        init=buffer_lib.init,
        add=buffer_lib.add,
        sample=sampler,
        update=_unchanged,
        resize=buffer_lib.resize,
        buffer=buffer_of,
    )


def _prioritized(
    importance_exponent: ArrayLike = 0.0, priority_exponent: ArrayLike = 1.0, priority_floor: ArrayLike = 1e-6
) -> Memory:
    prioritized.check_floor_power(priority_floor, priority_exponent)  # (concrete: refused here, before any call)

    def sample(key: jax.Array, state: prioritized.PrioritizedState, batch_size: int) -> samplers.Sample:
        return prioritized.sample(key, state, batch_size, importance_exponent)

    def update(
        state: prioritized.PrioritizedState, indices: ArrayLike, td_errors: ArrayLike
    ) -> prioritized.PrioritizedState:
        return prioritized.update_priorities(state, indices, td_errors, priority_exponent, priority_floor)

    return Memory(
        init=prioritized.init,
        add=prioritized.add,
        sample=sample,
        update=update,
        resize=prioritized.resize,
        buffer=buffer_of,
    )


def make(kind: str, **hyperparameters: ArrayLike) -> Memory:
    """The :class:`Memory` of ``kind`` with ``hyperparameters`` bound.

    Args:
        kind: one of :data:`KINDS` (static).
        **hyperparameters: exactly the names in ``HYPERPARAMETERS[kind]`` may
            be given (the others keep their defaults, module docstring); each
            a real scalar >= 0, concrete or traced. Concrete values are checked
            here; a traced one that is out of range is flagged where it is used
            (:func:`jaxreplay.prioritized.sample`'s NaN weights,
            :func:`jaxreplay.prioritized.update_priorities`'s
            ``invalid_parameters``).

    Returns:
        The record. Cost: none at run time (closures over the values).

    Raises:
        ValueError: an unknown ``kind``; a keyword ``kind`` does not take
            (named, with the ones it takes); a concrete value that is
            negative, not finite or subnormal, or a priority floor whose
            ``ε^α`` would run as 0 (``prioritized.floor_power_underflows``).
    """
    _validation.check_choice("kind", kind, KINDS)
    unknown = sorted(set(hyperparameters) - set(HYPERPARAMETERS[kind]))
    if unknown:
        takes = ", ".join(HYPERPARAMETERS[kind]) or "no hyperparameters"
        raise ValueError(f"memory.make({kind!r}) got unknown keyword(s) {', '.join(unknown)}; {kind!r} takes {takes}.")
    for name, value in hyperparameters.items():
        # (as run: 1e-40 would run as 0, a floor of 0 never replayed)
        _validation.check_bounds(name, value, _validation.NONNEGATIVE, scalar=True)
    if kind == "prioritized":
        return _prioritized(**hyperparameters)
    return _plain(samplers.uniform if kind == "uniform" else samplers.combined)
