"""Adaptive memory size (aER, Algorithm 2 of Liu & Zou 2018) as a pure controller.

The controller decides the logical capacity ``N`` of a replay memory from the
change in the absolute TD errors of its *oldest* transitions. It knows nothing
of agents: it receives ``td_error_fn(transitions) -> float[L]`` (the agent
closes over its current parameters) and reads the memory with the helpers of
:mod:`jaxreplay.buffer`. It does **not** resize the memory; it returns the new
capacity and the caller applies it::

    ctrl, capacity = adaptive.update(key, ctrl, memory, td_error_fn, step,
                                     interval=k, num_old=n_old, max_num_old=...)
    memory = buffer.resize(memory, capacity)

All reads happen on the memory as it is *before* a shrink, which is what makes
this split possible (the offsets below are from its oldest live transition).

Algorithm. ``step`` is the 1-based step count ``t``; write ``N`` for the
memory's capacity, ``k`` for ``interval``, ``n_old`` for ``num_old`` and
``S(a)`` for the sum of ``|δ|`` over the live transitions at age offsets
``a, a + 1, ..., a + n_old - 1`` (offset 0 = oldest live; offsets at or past
``size`` are not live and count 0). The reference sum ``|δ_old|`` starts at 0.
When ``t mod k == 0`` and the memory is full (``size == N``) the check fires:

1. ``|δ_old|' = S(0)``: the ``n_old`` oldest transitions, with the current
   parameters.
2. Shrink if ``|δ_old|' <= |δ_old|`` (``tolerance=None``: Algorithm 2 as
   printed) or ``|δ_old|' < |δ_old| - ε`` (``tolerance=ε``: the paper's
   ε criterion), *and* ``N >= 2k``. Otherwise enlarge.
3. Enlarge: ``N ← min(N + k, max_capacity)`` and ``|δ_old| ← |δ_old|'``.
   At ``max_capacity`` the capacity stays where it is, but the branch is
   otherwise taken in full (``|δ_old|`` is updated and it counts as a grow).
4. Shrink: ``N ← N - k`` (the caller's ``resize`` drops the ``k`` oldest) and
   ``|δ_old| ← S(start)`` with the current parameters, where ``start``
   depends on ``shrink_reading`` (below).

When the check does not fire, the state and capacity are returned unchanged.

Boundaries. The paper forces an enlargement when ``N = k``, which keeps
``N >= k`` only when ``N`` is a multiple of ``k``. Here the forcing condition
is ``N - k < k`` (a shrink would leave fewer than ``k`` transitions): the same
rule for multiples of ``k`` (every setting in the paper), and one that keeps
``N`` in ``[k, max_capacity]`` from the first check on for any initial
capacity (an initial ``N < k`` is enlarged at the first check). A shrink
therefore always drops exactly ``k`` transitions.

The ε criterion and the band between the two conditions. The paper proposes
``|δ_old|' < |δ_old| - ε`` as the condition to *shrink*, to counter the
tendency of plain aER to shrink. When ``|δ_old| - ε <= |δ_old|' <= |δ_old|``
neither "enlarge" (``|δ_old|' > |δ_old|``) nor "shrink" holds; this module
**enlarges** there (the ε only makes shrinking harder; the pseudo-code's
``else`` is the shrink branch, so everything that is not a shrink is an
enlargement, ``|δ_old| ← |δ_old|'`` included). Ties: Algorithm 2 as printed
shrinks when ``|δ_old|' == |δ_old|`` while the ε criterion with ε = 0 enlarges.
``tolerance=None`` (default) gives the former, ``tolerance=0.0`` the latter;
they differ only on exact ties (e.g. an all-zero TD error signal).

Shrink reading (ERRATA item 9). After ``N ← N - k`` the paper recomputes
``|δ_old| = Σ_{i=t-N+k+1}^{t-N+k+n_old} |δ_i|`` without saying which ``N``:

* ``"new"`` (default): the literal reading; the assignment ``N = N - k`` comes
  first, so the sum runs over ``i = t - N_new + k + 1 ...``. These are the
  transitions that will be the oldest ones at the next check (the memory then
  holds ``t + k - N_new + 1 ... t + k``), so the next comparison is between
  the *same* transitions ``k`` steps apart, as it is after an enlargement
  (where the memory grows by ``k`` and refills in ``k`` steps, so the oldest
  stay the oldest). In offsets from the oldest of the pre-shrink memory:
  ``start = 2k``. Default because it is the literal order of the pseudo-code
  and the only one under which every comparison is like for like.
* ``"shrunk"``: the sum uses the pre-shrink ``N``, i.e. the ``n_old`` oldest
  of the shrunk memory: ``start = k``. The next comparison then involves
  transitions ``k`` steps newer than the ones summed here.

Offsets at or past the newest transition are not live and count 0 (with
``"new"`` and ``N_new < k + n_old`` fewer than ``n_old`` transitions are
summed; the paper's index range would run past ``t``).

Subsampling. The paper's DQN experiments estimate the sums from a random
sample of the checked transitions (50 for CartPole, 1000 otherwise). With
``subsample_size=s`` each sum ``S(a)`` is estimated as ``m / s · Σ_j |δ_{o_j}|``
where ``m`` is the number of live transitions among the ``n_old`` checked
ones and ``o_1 ... o_s`` are drawn uniformly *with replacement* from them.
The estimate is unbiased, exact when all ``|δ|`` are equal, and has variance
``m² σ² / s`` (``σ²``: the population variance of ``|δ|`` over the ``m``
transitions). Both sums of a check (``|δ_old|'`` and the shrink recompute) use
independent draws from ``key``. Draws use one float per index (as
:mod:`jaxreplay.samplers`; the bias of that is below ``2**-24``).

Cost of a check. ``td_error_fn`` is called on ``L`` transitions, ``L =
subsample_size`` if given, else ``max_num_old`` (the entries beyond
``num_old`` or past the newest transition are masked out, after the call:
``td_error_fn`` must not fail on whatever the unused slots hold). Once per
check when enlarging, twice when shrinking; ``O(L)`` besides. Steps where the
check does not fire cost ``O(1)``: the evaluation is inside ``lax.cond``.

vmap. Under ``vmap`` with a *batched* predicate, ``lax.cond`` becomes a
``select`` that evaluates both branches: the TD errors (and the shrink
recompute) are then computed at every step for every run. The predicate
includes ``is_full(memory)``, which is batched whenever the memory is. To keep
the saving in a vmapped sweep, gate on a shared, unbatched step counter
outside the ``vmap`` (``interval`` must then be shared too)::

    def maybe_update(keys, ctrl, memories, step):
        return jax.lax.cond(
            step % k == 0,
            lambda: jax.vmap(lambda key, c, m: adaptive.update(
                key, c, m, td_error_fn, step, interval=k, ...))(keys, ctrl, memories),
            lambda: (ctrl, memories.capacity))

All functions are pure, jit and vmap with a single compilation; concrete
arguments are validated in plain Python before tracing.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxreplay import _validation
from jaxreplay import buffer as buffer_lib

Transition = Any  # a pytree of arrays
TDErrorFn = Callable[[Transition], jax.Array]

SHRINK_READINGS = ("new", "shrunk")


class AdaptiveState(NamedTuple):
    """State of the aER controller (a pytree; fields may gain leading vmap axes).

    Attributes:
        delta_old: ``float32[]``; the reference sum ``|δ_old|`` (0 initially).
        delta_new: ``float32[]``; ``|δ_old|'`` computed at the latest check
            (0 before the first); diagnostic only.
        num_checks: ``int32[]``; checks that fired.
        num_grows: ``int32[]``; checks that took the enlarge branch (including
            those at ``max_capacity``, where the capacity stays).
        num_shrinks: ``int32[]``; checks that shrank the memory by ``k``.
    """

    delta_old: jax.Array
    delta_new: jax.Array
    num_checks: jax.Array
    num_grows: jax.Array
    num_shrinks: jax.Array


def init() -> AdaptiveState:
    """The initial :class:`AdaptiveState`: ``|δ_old| = 0`` (``float32[]``), all counters 0 (``int32[]``). O(1)."""
    zero_f = jnp.zeros((), jnp.float32)
    zero_i = jnp.zeros((), jnp.int32)
    return AdaptiveState(zero_f, zero_f, zero_i, zero_i, zero_i)


# ----------------------------------------------------------------------------
# Validation


def _check_td_error_fn(td_error_fn: Any) -> None:
    if not callable(td_error_fn):
        raise ValueError(f"td_error_fn must be callable (transitions -> float[L]), got {td_error_fn!r}.")


def _check_common(
    buffer_state: buffer_lib.BufferState,
    num_old: Any,
    max_num_old: Any,
    subsample_size: Any,
    key: Any,
) -> tuple[int, int | None]:
    max_num_old = _validation.check_static_int("max_num_old", max_num_old, low=1)
    if subsample_size is not None:
        subsample_size = _validation.check_static_int("subsample_size", subsample_size, low=1)
        if key is None:
            raise ValueError("key must be a PRNG key when subsample_size is given (the subsample is random).")
    _validation.check_int("num_old", num_old, low=1, high=max_num_old)
    if not isinstance(buffer_state, buffer_lib.BufferState):
        raise ValueError(
            f"buffer_state must be a jaxreplay.buffer.BufferState, got {type(buffer_state).__name__}."
        )
    return max_num_old, subsample_size


# ----------------------------------------------------------------------------
# The sum of |δ| over old transitions


def _td_sum(
    key: jax.Array | None,
    buffer_state: buffer_lib.BufferState,
    td_error_fn: TDErrorFn,
    start: jax.Array,
    num_old: jax.Array,
    max_num_old: int,
    subsample_size: int | None,
) -> jax.Array:
    """Σ|δ| (or its subsample estimate) over live offsets ``start .. start+num_old-1``."""
    start = jnp.asarray(start, jnp.int32)
    num_old = jnp.asarray(num_old, jnp.int32)
    if subsample_size is None:
        positions = jnp.arange(max_num_old, dtype=jnp.int32)
        offsets = start + positions
        valid = (positions < num_old) & (offsets < buffer_state.size)
        length = max_num_old
    else:
        # m live transitions among the checked ones; draw s of them uniformly.
        live = jnp.clip(jnp.minimum(num_old, buffer_state.size - start), 0, None)
        u = jax.random.uniform(key, (subsample_size,))
        drawn = jnp.clip((u * live).astype(jnp.int32), 0, jnp.maximum(live - 1, 0))
        offsets = start + drawn
        valid = jnp.broadcast_to(live > 0, (subsample_size,))
        length = subsample_size
    slots = buffer_lib.slot_of(buffer_state, offsets)
    td = jnp.asarray(td_error_fn(buffer_lib.get(buffer_state, slots)))
    if td.shape != (length,):
        raise ValueError(
            f"td_error_fn must return one TD error per transition, shape ({length},); got shape {td.shape}."
        )
    total = jnp.sum(jnp.where(valid, jnp.abs(td), 0.0)).astype(jnp.float32)
    if subsample_size is None:
        return total
    return (live.astype(jnp.float32) / subsample_size) * total


def old_td_error_sum(
    key: jax.Array | None,
    buffer_state: buffer_lib.BufferState,
    td_error_fn: TDErrorFn,
    *,
    num_old: Any,
    max_num_old: int,
    start: Any = 0,
    subsample_size: int | None = None,
) -> jax.Array:
    """Sum of ``|δ|`` over the transitions at age offsets ``start .. start + num_old - 1``.

    This is the quantity Algorithm 2 compares (``start = 0``: the ``num_old``
    oldest; see the module docstring for the shrink recompute's ``start``).
    Offsets at or past ``size`` are not live and count 0.

    Args:
        key: PRNG key; only used (and then required) with ``subsample_size``.
        buffer_state: the memory.
        td_error_fn: maps a transition pytree with leading axis ``L`` on every
            leaf to TD errors ``float[L]`` (absolute values are taken here).
        num_old: ``n_old``, an integer in ``[1, max_num_old]``; may be traced.
        max_num_old: static upper bound of ``num_old`` (an array length).
        start: age offset of the first summed transition (0 = oldest live);
            a non-negative integer, may be traced.
        subsample_size: static ``s``; if given, return the unbiased estimate
            ``m / s · Σ`` over ``s`` draws with replacement from the ``m`` live
            transitions among the checked ones (0 if ``m = 0``).

    Returns:
        ``float32[]``. Cost: one ``td_error_fn`` call on ``L = subsample_size``
        or ``max_num_old`` transitions, plus O(L).

    Raises:
        ValueError: concrete bad arguments (``num_old`` outside
            ``[1, max_num_old]``, ``start < 0``, ``subsample_size < 1``, a
            missing key, a non-callable ``td_error_fn``) or a ``td_error_fn``
            output of the wrong shape (at trace time).
    """
    max_num_old, subsample_size = _check_common(buffer_state, num_old, max_num_old, subsample_size, key)
    _validation.check_int("start", start, low=0)
    _check_td_error_fn(td_error_fn)
    return _td_sum(key, buffer_state, td_error_fn, start, num_old, max_num_old, subsample_size)


# ----------------------------------------------------------------------------
# The controller


def update(
    key: jax.Array | None,
    state: AdaptiveState,
    buffer_state: buffer_lib.BufferState,
    td_error_fn: TDErrorFn,
    step: Any,
    *,
    interval: Any,
    num_old: Any,
    max_num_old: int,
    subsample_size: int | None = None,
    tolerance: Any = None,
    shrink_reading: str = "new",
) -> tuple[AdaptiveState, jax.Array]:
    """One step of Algorithm 2: check every ``interval`` steps and return the new capacity.

    Call once per environment step *after* storing that step's transition(s),
    then apply ``buffer.resize(buffer_state, new_capacity)``. See the module
    docstring for the algorithm, the boundary rule, ties, ε and the readings.

    Args:
        key: PRNG key for the subsample; may be ``None`` without
            ``subsample_size``.
        state: the controller state (from :func:`init`).
        buffer_state: the memory after this step's adds (its ``capacity`` is
            ``N``).
        td_error_fn: ``transitions -> float[L]`` with the agent's current
            parameters; transitions carry a leading axis ``L`` on every leaf.
            Called only when the check fires (unless vmapped with a batched
            predicate, see the module docstring).
        step: the 1-based step count ``t`` (integer >= 1; may be traced).
        interval: ``k``, integer in ``[1, max_capacity]``; may be traced.
        num_old: ``n_old``, integer in ``[1, max_num_old]``; may be traced.
        max_num_old: static upper bound of ``num_old`` (an array length).
        subsample_size: static ``s`` (>= 1) to estimate each sum from ``s``
            uniform draws with replacement among the checked transitions
            (the paper's DQN setting); ``None`` (default) sums exactly.
        tolerance: ``None`` (default): shrink iff ``|δ_old|' <= |δ_old|``
            (Algorithm 2 as printed). A number ``ε >= 0`` (may be traced):
            shrink iff ``|δ_old|' < |δ_old| - ε``, enlarge otherwise.
        shrink_reading: ``"new"`` (default) or ``"shrunk"``: which
            transitions the shrink branch's recompute sums (age offsets
            ``2k ...`` or ``k ...`` of the pre-shrink memory).

    Returns:
        ``(new_state, new_capacity)``; ``new_capacity`` is ``int32[]``, equal
        to ``buffer_state.capacity`` unless the check fired. Cost: O(1) when
        the check does not fire; otherwise one (enlarge) or two (shrink)
        ``td_error_fn`` calls on ``L = subsample_size or max_num_old``
        transitions, plus O(L).

    Raises:
        ValueError: a concrete ``interval`` outside ``[1, max_capacity]``,
            ``num_old`` outside ``[1, max_num_old]``, ``step < 1``, a
            negative or non-finite ``tolerance``, an unknown
            ``shrink_reading``, ``max_num_old`` or ``subsample_size`` not a
            Python int >= 1, a missing key with ``subsample_size``, a
            non-callable ``td_error_fn``, or (at trace time) a
            ``td_error_fn`` output of the wrong shape. Traced values are not
            checked: an out-of-range traced ``num_old`` is clipped to
            ``[1, max_num_old]``, a traced ``interval`` below 1 acts as 1.
    """
    max_num_old, subsample_size = _check_common(buffer_state, num_old, max_num_old, subsample_size, key)
    _validation.check_int("interval", interval, low=1, high=buffer_state.max_capacity)
    _validation.check_int("step", step, low=1)
    if tolerance is not None:
        _validation.check_float("tolerance", tolerance, low=0.0)
    if shrink_reading not in SHRINK_READINGS:
        raise ValueError(f"shrink_reading must be one of {SHRINK_READINGS}, got {shrink_reading!r}.")
    _check_td_error_fn(td_error_fn)

    k = jnp.maximum(jnp.asarray(interval, jnp.int32), 1)
    num_old = jnp.clip(jnp.asarray(num_old, jnp.int32), 1, max_num_old)
    step = jnp.asarray(step, jnp.int32)
    capacity = buffer_state.capacity
    fire = (step % k == 0) & buffer_lib.is_full(buffer_state)

    def total(key_, start):
        return _td_sum(key_, buffer_state, td_error_fn, start, num_old, max_num_old, subsample_size)

    def check(state: AdaptiveState) -> tuple[AdaptiveState, jax.Array]:
        # Split inside the branch: steps without a check draw no random numbers.
        key_new, key_recompute = (None, None) if subsample_size is None else jax.random.split(key)
        delta_new = total(key_new, 0)
        if tolerance is None:
            decreased = delta_new <= state.delta_old
        else:
            decreased = delta_new < state.delta_old - jnp.asarray(tolerance, jnp.float32)
        shrink = decreased & (capacity - k >= k)
        start = 2 * k if shrink_reading == "new" else k
        delta_old = jax.lax.cond(shrink, lambda: total(key_recompute, start), lambda: delta_new)
        new_capacity = jnp.where(shrink, capacity - k, jnp.minimum(capacity + k, buffer_state.max_capacity))
        shrink_i = shrink.astype(jnp.int32)
        return (
            AdaptiveState(
                delta_old=delta_old,
                delta_new=delta_new,
                num_checks=state.num_checks + 1,
                num_grows=state.num_grows + 1 - shrink_i,
                num_shrinks=state.num_shrinks + shrink_i,
            ),
            new_capacity.astype(jnp.int32),
        )

    def skip(state: AdaptiveState) -> tuple[AdaptiveState, jax.Array]:
        return state, capacity

    state = jax.tree.map(jnp.asarray, state)
    return jax.lax.cond(fire, check, skip, state)
