"""A replay memory as one record of pure functions, chosen once from a static name.

Agents see a memory only through a :class:`Memory`: ``init / add / sample /
update / resize`` plus ``buffer`` (the underlying
:class:`~jaxreplay.buffer.BufferState`, for :func:`jaxreplay.buffer.get` and
the aER controller). The record is built once from a static name, the way
``optax`` builds a ``GradientTransformation`` or ``flashbax`` a buffer, so an
agent's loop never branches on the kind of sampler, and a new sampler is a new
record, not an edit of every agent::

    memory = jaxreplay.memory.make("prioritized")
    state = memory.init(example, max_capacity, capacity)        # capacity may be traced
    state = memory.add(state, transition)
    sample = memory.sample(key, state, batch_size, importance_exponent=0.4)
    batch = jaxreplay.buffer.get(memory.buffer(state), sample.indices)
    state = memory.update(state, sample.indices, td_errors, priority_exponent=0.6, priority_floor=1e-6)
    state = memory.resize(state, new_capacity)

Every function is pure and jits and vmaps. Keyword arguments a kind does not
use are accepted and ignored (uniform replay stores no priorities, so its
``update`` returns the state unchanged), which is what lets one loop serve
every kind; each may be traced.

Kinds (:data:`KINDS`):

* ``"uniform"``: :func:`jaxreplay.samplers.uniform` over a
  :class:`~jaxreplay.buffer.BufferState`; weights 1.
* ``"cer"``: :func:`jaxreplay.samplers.combined` (the newest transition plus
  uniform draws).
* ``"prioritized"``: stored priorities on a sum tree
  (:mod:`jaxreplay.prioritized`) with importance weights; ``update`` stores
  ``(|δ| + floor)^α`` for the replayed slots (slot ``-1`` is skipped).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax

from jaxreplay import buffer as buffer_lib
from jaxreplay import prioritized, samplers
from jaxreplay._typing import ArrayLike

KINDS = ("uniform", "prioritized", "cer")

MemoryState = buffer_lib.BufferState | prioritized.PrioritizedState
"""A memory's state: a :class:`~jaxreplay.buffer.BufferState` (uniform, cer) or a
:class:`~jaxreplay.prioritized.PrioritizedState` (prioritized)."""


class Memory(NamedTuple):
    """A replay memory's pure functions (see the module docstring for their signatures).

    Attributes:
        init: ``(example, max_capacity, capacity) -> state``.
        add: ``(state, transition) -> state``.
        sample: ``(key, state, batch_size, **traced) -> samplers.Sample``
            (``importance_exponent`` for prioritized replay).
        update: ``(state, indices int32[B], td_errors float[B], **traced) -> state``
            (``priority_exponent``, ``priority_floor`` for prioritized replay;
            the identity otherwise).
        resize: ``(state, capacity) -> state``.
        buffer: ``state -> buffer.BufferState``.
    """

    # Callable[..., ]: each kind takes its own state type (and sample / update their own keywords).
    init: Callable[..., MemoryState]
    add: Callable[..., MemoryState]
    sample: Callable[..., samplers.Sample]
    update: Callable[..., MemoryState]
    resize: Callable[..., MemoryState]
    buffer: Callable[[MemoryState], buffer_lib.BufferState]


def buffer_of(state: MemoryState) -> buffer_lib.BufferState:
    """The :class:`~jaxreplay.buffer.BufferState` inside any memory's state (itself for uniform and cer)."""
    return state.buffer if isinstance(state, prioritized.PrioritizedState) else state


def _plain(sampler: Callable[[jax.Array, buffer_lib.BufferState, int], samplers.Sample]) -> Memory:
    def sample(key: jax.Array, state: buffer_lib.BufferState, batch_size: int, **_: ArrayLike) -> samplers.Sample:
        return sampler(key, state, batch_size)

    def update(
        state: buffer_lib.BufferState, indices: ArrayLike, td_errors: ArrayLike, **_: ArrayLike
    ) -> buffer_lib.BufferState:
        return state

    return Memory(
        init=buffer_lib.init,
        add=buffer_lib.add,
        sample=sample,
        update=update,
        resize=buffer_lib.resize,
        buffer=buffer_of,
    )


def _prioritized() -> Memory:
    def sample(
        key: jax.Array,
        state: prioritized.PrioritizedState,
        batch_size: int,
        importance_exponent: ArrayLike = 0.0,
        **_: ArrayLike,
    ) -> samplers.Sample:
        return prioritized.sample(key, state, batch_size, importance_exponent)

    def update(
        state: prioritized.PrioritizedState,
        indices: ArrayLike,
        td_errors: ArrayLike,
        priority_exponent: ArrayLike = 1.0,
        priority_floor: ArrayLike = 1e-6,
        **_: ArrayLike,
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


def make(kind: str) -> Memory:
    """The :class:`Memory` of ``kind`` (one of :data:`KINDS`; a static choice).

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind == "uniform":
        return _plain(samplers.uniform)
    if kind == "cer":
        return _plain(samplers.combined)
    if kind == "prioritized":
        return _prioritized()
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
