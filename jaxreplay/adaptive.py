"""Adaptive memory size (aER, Algorithm 2 of Liu & Zou 2018) as a pure controller.

The controller decides the logical capacity ``N`` of a replay memory from the change in the absolute TD errors
of its *oldest* transitions. It knows nothing of agents: it receives ``td_error_fn(transitions) -> float[L]``
(the agent closes over its current parameters) and reads the memory with the helpers of :mod:`jaxreplay.buffer`.
It does **not** resize the memory; it returns the new capacity and the caller applies it. Its settings are bound
once, the way ``optax.adam(learning_rate)`` builds a ``GradientTransformation``; traced settings are fine (build
it inside the traced function)::

    aer = adaptive.controller(interval=k, num_old=n_old, max_num_old=...)
    ctrl = aer.init()  # then, every step:
    ctrl, capacity = aer.update(key, ctrl, memory, td_error_fn, step)
    memory = buffer.resize(memory, capacity)

A check is four small pure steps: estimate ``|δ_old|'`` (and its change against the reference), decide (shrink,
enlarge or keep), choose the next reference, and record the diagnostics; all read the memory as it is *before* a
shrink (offsets below are from its oldest live transition). The state is its :class:`Reference`, its
:class:`Diagnostics` and the votes' evidence (:func:`evidence_controller`). (:func:`update`, the earlier
one-call form, warns and stays for one release.)

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

Boundaries. The paper forces an enlargement when ``N = k``, which keeps ``N >= k`` only when ``N`` is a multiple
of ``k``. Here the forcing condition is ``N - k < k`` (a shrink would leave fewer than ``k`` transitions): the
same rule for multiples of ``k`` (every setting in the paper), and one that keeps ``N`` in ``[k, max_capacity]``
from the first check on for any initial capacity (an initial ``N < k`` is enlarged at the first check). A shrink
therefore always drops exactly ``k`` transitions. The rule's enlargements are counted apart (``num_forced``).

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

Shrink reading (docs/paper_readings.md §9). After ``N ← N - k`` the paper recomputes
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

Equal counts (``equal_counts=True``, default). Read literally, the two sums
of a comparison can cover different numbers of transitions: after a shrink at
``N_new < k + n_old`` the recompute runs past the newest transition and sums
fewer than the next check will, which makes the next check likely to enlarge
(a floor near ``n_old + 2k`` that has nothing to do with the TD errors). Here
the controller remembers how many transitions its reference covers
(``Reference.window``) and the next check sums exactly that many of the oldest. The
reference is always taken over the transitions that will be the oldest at the
next check: offset ``N + k - N_new`` of the current memory (0 after an
enlargement, ``2k`` after a shrink; at ``max_capacity`` the memory forgets, so
``k``), ``min(n_old, live)`` of them; under the ``"shrunk"`` reading a
shrink's reference starts at offset ``k`` as above. ``equal_counts=False``
keeps the literal index ranges (live transitions only) for comparison.

Estimating the sums. The paper's DQN experiments estimate the sums from a
random sample of the checked transitions (50 for CartPole, 1000 otherwise).
With ``subsample_size=s`` a sum over ``m`` live transitions is estimated as
``m / s · Σ_j |δ_{o_j}|`` over ``s`` draws with replacement (unbiased, variance
``m² σ² / s``). Algorithm 2 compares the *same* transitions at two times, so:

* ``paired=True`` (default): the next check evaluates the reference's own
  draws again (the same transitions ``k`` steps later), so the comparison
  sees only how their TD errors changed; when ``m <= s`` every transition is
  summed once (exact: CartPole's 50 of 50).
* ``paired=False``: independent draws at every sum. An enlargement then keeps
  the *winning* noisy estimate as the reference while a shrink recomputes it:
  when the errors do not trend, the next check is more likely to shrink (the
  tests measure a grow share of 0.45 instead of 0.5).

Diagnostics. Every check that has a reference records the estimated change ``|δ_old|' - |δ_old|`` and its
standard error (0 for exact sums; from the paired differences, or both sums' errors combined for independent
draws), so a run reports how large the changes it must detect were against the noise of the estimate
(:class:`Diagnostics`: ``sum_abs_change``, ``sum_noise``, ``num_noisy``).

Non-finite TD errors. A check whose sums are NaN or infinite keeps the capacity, drops the reference (the
next check starts afresh, like the first), casts no vote and counts in ``num_invalid`` (a NaN comparison would
enlarge).

Invalid traced settings. Concrete bad ``tolerance`` and ``relative_tolerance`` values are refused
(``ValueError``); traced ones cannot be. A traced ``ε`` that is NaN, infinite or negative, ``ρ`` NaN or
outside ``[0, 1]``, an evidence setting out of range, an ``n_old`` not an integer in ``[1, max_num_old]`` or a
``k`` not an integer in ``[1, max_capacity]`` would bias every decision without a trace (``n_old`` = 10 and
1000 ran as 4 under their own labels; a ``k`` above ``max_capacity`` forced every check up to it). Instead it
sets the sticky flag ``invalid_parameters`` and its checks are treated like non-finite ones.

The random-walk control (``random_walk=True``). A fair coin instead of the comparison, same boundaries,
interval and bookkeeping: aER's trajectory if the TD errors carried no information.

Accumulated evidence (:func:`evidence_controller`). Each valid check votes
(its comparison, or the coin; the first, against ``|δ_old| = 0``, grows); ``N``
changes only when the votes' two-sided CUSUM (:mod:`jaxreplay.evidence`)
reaches ``h``. A check that keeps ``N`` takes the next reference ``k`` newer
(as at ``max_capacity``); at the floor a check enlarges and restarts the CUSUM.

Cost of a check. ``td_error_fn`` is called on ``L = subsample_size`` (else ``max_num_old``) transitions, once,
and again for a next reference not starting at the oldest (a shrink; an enlargement at ``max_capacity`` or after a
shrink; a kept size), plus ``O(L)``; entries past ``num_old`` or the newest are masked after the call, so
it must not fail on whatever unused slots hold. Steps where the check does
not fire cost ``O(1)`` (the evaluation is inside ``lax.cond``).

vmap. The check is a ``_cond.cond_any``, not a ``lax.cond`` (a ``select`` of
both branches under vmap): it costs only at steps where some run checks.

All functions are pure, jit and vmap with a single compilation; concrete
arguments are validated in plain Python before tracing.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _cond, _deprecated, _td_sums, _validation
from jaxreplay import buffer as buffer_lib
from jaxreplay import evidence as evidence_lib
from jaxreplay._typing import ArrayLike

Transition = buffer_lib.Transition
"""One transition, or a batch of them: a pytree of arrays (as :data:`jaxreplay.buffer.Transition`)."""
TDErrorFn = _td_sums.TDErrorFn
"""Maps a batch of transitions (leaves ``[n, ...]``) to their TD errors, ``[n]``; the result is made
an array (``jnp.asarray``) and its shape checked."""

SHRINK_READINGS = ("new", "shrunk")
"""The two readings of Algorithm 2's shrink step, the values of ``shrink_reading`` (see :func:`controller`)."""


class Config(NamedTuple):
    """aER's settings, bound once by :func:`controller` (each described there).

    ``max_num_old``, ``subsample_size`` and ``shrink_reading`` are static (they
    fix array lengths or the program); the others may be traced.
    """

    interval: ArrayLike
    num_old: ArrayLike
    max_num_old: int
    subsample_size: int | None = None
    tolerance: ArrayLike | None = None
    relative_tolerance: ArrayLike | None = None
    shrink_reading: str = "new"
    paired: ArrayLike = True
    equal_counts: ArrayLike = True
    random_walk: ArrayLike = False
    evidence_threshold: ArrayLike = 1.0
    evidence_allowance: ArrayLike = 0.0


class Reference(NamedTuple):
    """The reference sum ``|δ_old|`` the next check compares with (a pytree).

    ``s`` below is the ``subsample_size`` given to :func:`init` (0 for exact
    sums, which need no record of their draws).

    Attributes:
        delta_old: ``float32[]``; the reference sum ``|δ_old|`` (0 initially
            and after an invalid check).
        valid: ``bool[]``; a reference from an earlier check exists (False
            before the first check and after an invalid one).
        window: ``int32[]``; how many of the oldest transitions it covers
            (what the next check compares with equal counts).
        positions: ``int32[s]``; positions (within the reference's window) of
            its draws, reused by the next check with paired draws.
        values: ``float32[s]``; ``|δ|`` of those draws (0 where unused).
        se: ``float32[]``; standard error of ``delta_old`` (0: exact).
    """

    delta_old: jax.Array
    valid: jax.Array
    window: jax.Array
    positions: jax.Array
    values: jax.Array
    se: jax.Array


class Diagnostics(NamedTuple):
    """What the checks did and how noisy their sums were (a pytree; read after a run).

    Attributes:
        delta_new: ``float32[]``; ``|δ_old|'`` computed at the latest check
            (0 before the first).
        num_checks: ``int32[]``; checks that fired.
        num_grows: ``int32[]``; checks that took the enlarge branch (including
            those at ``max_capacity``, where the capacity stays).
        num_shrinks: ``int32[]``; checks that shrank the memory by ``k``.
        num_forced: ``int32[]``; valid checks the boundary rule decided (``N - k < k``: an enlargement whatever the
            sums); ``num_grows - num_forced`` of the ``num_checks - num_invalid - num_forced`` free ones grew.
        num_compared: ``int32[]``; valid checks that had a reference.
        num_noisy: ``int32[]``; of those, checks where the change ``|δ_old|' - |δ_old|`` was within two
            standard errors of 0: the estimator's noise decided, or, with exact sums (error 0), the two sums
            were equal (as at the floor after a shrink from ``2k``, whose next reference window is empty).
        num_invalid: ``int32[]``; checks that could not decide: their sums
            were not finite (NaN or inf TD errors) or the (traced) tolerances
            were invalid. The capacity was kept and the reference dropped.
        invalid_parameters: ``bool[]``; set (and kept) by a traced invalid ``tolerance``, ``relative_tolerance``,
            evidence setting, ``num_old`` or ``interval`` (module docstring): a flag to read after a jitted run,
            like ``buffer.capacity_clipped``.
        sum_abs_change: ``float32[]``; Σ over compared checks of the estimated
            ``| |δ_old|' - |δ_old| |``.
        sum_noise: ``float32[]``; Σ over compared checks of the standard error
            of that estimated change.
    """

    delta_new: jax.Array
    num_checks: jax.Array
    num_grows: jax.Array
    num_shrinks: jax.Array
    num_forced: jax.Array
    num_compared: jax.Array
    num_noisy: jax.Array
    num_invalid: jax.Array
    invalid_parameters: jax.Array
    sum_abs_change: jax.Array
    sum_noise: jax.Array


class AdaptiveState(NamedTuple):
    """State of the aER controller (a pytree; fields may gain leading vmap axes).

    Attributes:
        reference: the :class:`Reference` the next check compares with.
        diagnostics: the :class:`Diagnostics` counted so far.
        evidence: ``float32[2]``; the votes' CUSUM statistic ``(U, D)``
            since the last resize (:mod:`jaxreplay.evidence`; 0 with aER).
    """

    reference: Reference
    diagnostics: Diagnostics
    evidence: jax.Array


class Controller(NamedTuple):
    """aER's pure functions with its :class:`Config` bound (from :func:`controller`).

    Attributes:
        init: ``() -> AdaptiveState``, sized for the bound ``subsample_size``.
        update: ``(key, state, buffer_state, td_error_fn, step) -> (state,
            new_capacity)``: one step of Algorithm 2 (:func:`controller`).
    """

    init: Callable[[], AdaptiveState]
    update: Callable[[jax.Array | None, AdaptiveState, buffer_lib.BufferState, TDErrorFn, ArrayLike], tuple]


def init(subsample_size: int | None = None) -> AdaptiveState:
    """The initial :class:`AdaptiveState`: ``|δ_old| = 0``, no reference, all counters 0.

    ``Controller.init()`` calls this with the bound ``subsample_size``.

    Args:
        subsample_size: the ``subsample_size`` of the controller that will use
            this state (``None``: exact sums). The state keeps the reference's
            ``s`` draws (``O(s)`` memory; nothing for exact sums).
    """
    length = 0 if subsample_size is None else _validation.check_static_int("subsample_size", subsample_size, low=1)
    zero_f = jnp.zeros((), jnp.float32)
    zero_i = jnp.zeros((), jnp.int32)
    reference = Reference(
        delta_old=zero_f,
        valid=jnp.zeros((), jnp.bool_),
        window=zero_i,
        positions=jnp.zeros((length,), jnp.int32),
        values=jnp.zeros((length,), jnp.float32),
        se=zero_f,
    )
    diagnostics = Diagnostics(
        delta_new=zero_f,
        num_checks=zero_i,
        num_grows=zero_i,
        num_shrinks=zero_i,
        num_forced=zero_i,
        num_compared=zero_i,
        num_noisy=zero_i,
        num_invalid=zero_i,
        invalid_parameters=jnp.zeros((), jnp.bool_),
        sum_abs_change=zero_f,
        sum_noise=zero_f,
    )
    return AdaptiveState(reference, diagnostics, evidence_lib.init())


# ----------------------------------------------------------------------------
# Validation


def _check_td_error_fn(td_error_fn: object) -> None:
    if not callable(td_error_fn):
        raise ValueError(f"td_error_fn must be callable (transitions -> float[L]), got {td_error_fn!r}.")


# ----------------------------------------------------------------------------
# The sum of |δ| over old transitions (estimated in jaxreplay._td_sums)


def old_td_error_sum(
    key: jax.Array | None,
    buffer_state: buffer_lib.BufferState,
    td_error_fn: TDErrorFn,
    *,
    num_old: ArrayLike,
    max_num_old: int,
    start: ArrayLike = 0,
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
    config = _check_config(Config(1, num_old, max_num_old, subsample_size))  # the controller's checks of these
    if key is None and config.subsample_size is not None:
        raise ValueError("key must be a PRNG key when subsample_size is given (the subsample is random).")
    if not isinstance(buffer_state, buffer_lib.BufferState):
        raise ValueError(f"buffer_state must be a jaxreplay.buffer.BufferState, got {type(buffer_state).__name__}.")
    _validation.check_int("start", start, low=0)
    _check_td_error_fn(td_error_fn)
    return _td_sums.td_sum(key, buffer_state, td_error_fn, start, num_old, config.max_num_old, config.subsample_size)


# ----------------------------------------------------------------------------
# The controller


def _valid_tolerances(tolerance: ArrayLike | None, relative_tolerance: ArrayLike | None) -> jax.Array:
    """``bool[]``: ``ε`` finite and ``>= 0``, ``ρ`` finite in ``[0, 1]`` (``None`` is valid)."""
    valid = jnp.bool_(True)
    if tolerance is not None:
        eps = jnp.asarray(tolerance, jnp.float32)
        valid = valid & jnp.isfinite(eps) & (eps >= 0)
    if relative_tolerance is not None:
        rho = jnp.asarray(relative_tolerance, jnp.float32)
        valid = valid & jnp.isfinite(rho) & (rho >= 0) & (rho <= 1)
    return valid


# The four steps of a check. Each takes the config as arrays (:func:`_as_arrays`).

# ``(start, positions int32[L], valid bool[L]) -> float32[L]``: ``_td_sums.abs_td_errors`` with the memory bound.
_Evaluate = Callable[[ArrayLike, jax.Array, jax.Array], jax.Array]


class _Estimate(NamedTuple):
    """``|δ_old|'`` at a check and its comparison with the reference."""

    window: jax.Array  # int32[]: how many of the oldest transitions it covers
    positions: jax.Array  # int32[L]: where it evaluated them (offsets from the oldest)
    values: jax.Array  # float32[L]: their |δ| (0 where unused)
    total: jax.Array  # float32[]: |δ_old|'
    se: jax.Array  # float32[]: standard error of total (0: exact)
    change: jax.Array  # float32[]: |δ_old|' - |δ_old|
    se_change: jax.Array  # float32[]: standard error of change


class _Decision(NamedTuple):
    """What a check does to ``N``."""

    ok: jax.Array  # bool[]: the check could decide (finite sums, valid tolerances)
    shrink: jax.Array  # bool[]
    grow: jax.Array  # bool[]: every valid check that acts and does not shrink
    forced: jax.Array  # bool[]: a valid check at the floor (N - k < k), which grows whatever the sums
    capacity: jax.Array  # int32[]: the new N
    evidence: jax.Array  # float32[2]: the votes' statistic after this check (jaxreplay.evidence)


def _estimate(config: Config, key: jax.Array, reference: Reference, size: jax.Array, evaluate: _Evaluate) -> _Estimate:
    """Estimate ``|δ_old|'`` over as many of the oldest transitions as the reference covers (equal counts)."""
    subsample_size = config.subsample_size
    length = config.max_num_old if subsample_size is None else subsample_size
    n_full = jnp.minimum(config.num_old, size)
    window = jnp.where(reference.valid & config.equal_counts, jnp.minimum(reference.window, n_full), n_full)
    positions, valid, scale, drawn = _td_sums.draw_positions(key, window, length, subsample_size, config.paired)
    reuse_draws = config.paired & reference.valid & drawn & (window == reference.window)
    if subsample_size is not None:
        positions = jnp.where(reuse_draws, reference.positions, positions)
    values = evaluate(0, positions, valid)
    total = scale * jnp.sum(values)
    se = _td_sums.standard_error(values, valid, scale, drawn, subsample_size)
    change = total - reference.delta_old
    if subsample_size is not None:
        se_paired = _td_sums.standard_error(values - reference.values, valid, scale, drawn, subsample_size)
        se_change = jnp.where(reuse_draws, se_paired, jnp.sqrt(se**2 + reference.se**2))
    else:
        se_change = jnp.float32(0.0)
    return _Estimate(window, positions, values, total, se, change, se_change)


def _decide(
    config: Config,
    key: jax.Array,
    estimate: _Estimate,
    state: AdaptiveState,
    buffer_state: buffer_lib.BufferState,
    valid_parameters: jax.Array,
) -> _Decision:
    """Shrink, enlarge or keep ``N``: steps 2 to 4 of Algorithm 2, acting when the votes' evidence reaches ``h``."""
    delta_old = state.reference.delta_old
    if config.tolerance is None and config.relative_tolerance is None:
        decreased = estimate.total <= delta_old
    else:
        eps = jnp.asarray(0.0 if config.tolerance is None else config.tolerance, jnp.float32)
        rho = jnp.asarray(0.0 if config.relative_tolerance is None else config.relative_tolerance, jnp.float32)
        decreased = estimate.total < (1.0 - rho) * delta_old - eps
    coin = jax.random.uniform(key, (), jnp.float32) < 0.5
    wants_shrink = jnp.where(config.random_walk, coin, decreased)
    ok = jnp.isfinite(estimate.total) & jnp.isfinite(delta_old) & valid_parameters
    k, capacity = config.interval, buffer_state.capacity
    floor = capacity - k < k  # the boundary rule: here every valid check enlarges and casts no vote
    counted, act = evidence_lib.update(
        state.evidence, wants_shrink, config.evidence_threshold, config.evidence_allowance
    )
    evidence = jnp.where(ok, jnp.where(floor, 0.0, counted), state.evidence)  # an invalid check casts no vote
    shrink = ok & ~floor & (act < 0)
    grow = ok & (floor | (act > 0))
    grown = jnp.minimum(capacity + k, buffer_state.max_capacity)
    new_capacity = jnp.where(shrink, capacity - k, jnp.where(grow, grown, capacity))
    return _Decision(ok, shrink, grow, ok & floor, new_capacity.astype(jnp.int32), evidence)


def _next_reference(
    config: Config,
    key: jax.Array,
    estimate: _Estimate,
    decision: _Decision,
    previous: Reference,
    buffer_state: buffer_lib.BufferState,
    evaluate: _Evaluate,
) -> Reference:
    """The reference for the next check: the transitions that will then be the oldest.

    Equal counts: they sit at offset ``N + k - N'`` now (0 after a plain
    enlargement, ``2k`` after a shrink ("new"), ``N + k - max_capacity`` at
    the ceiling); "shrunk" reads ``k``. ``|δ_old|'`` is reused when it already
    covers them (a second ``td_error_fn`` call otherwise).
    """
    k, shrink, subsample_size = config.interval, decision.shrink, config.subsample_size
    length = config.max_num_old if subsample_size is None else subsample_size
    start_equal = jnp.where(
        shrink & (config.shrink_reading == "shrunk"), k, buffer_state.capacity + k - decision.capacity
    )
    held = decision.ok & ~decision.grow  # (where not shrinking) no resize: the oldest move on by k
    start_literal = jnp.where(shrink, 2 * k if config.shrink_reading == "new" else k, jnp.where(held, k, 0))
    start = jnp.where(config.equal_counts, start_equal, start_literal)
    ref_window = jnp.minimum(config.num_old, jnp.clip(buffer_state.size - start, 0, None))
    same = (start == 0) & (ref_window == estimate.window)
    # Literal counts keep |δ_old|' after an enlargement whatever the count (Algorithm 2 as printed).
    keep = same | (~jnp.asarray(config.equal_counts) & decision.grow)

    def recompute():
        pos, val, sc, dr = _td_sums.draw_positions(key, ref_window, length, subsample_size, config.paired)
        vals = evaluate(start, pos, val)
        return sc * jnp.sum(vals), pos, vals, _td_sums.standard_error(vals, val, sc, dr, subsample_size)

    def reuse():
        return estimate.total, estimate.positions, estimate.values, estimate.se

    ok = decision.ok
    total, positions, values, se = jax.lax.cond(keep | ~ok, reuse, recompute)
    if subsample_size is None:  # exact sums need no record of their draws
        positions, values = previous.positions, previous.values
    return Reference(
        delta_old=jnp.where(ok, total, 0.0).astype(jnp.float32),
        valid=ok,
        window=jnp.where(ok, jnp.where(keep, estimate.window, ref_window), 0).astype(jnp.int32),
        positions=jnp.asarray(positions, jnp.int32),
        values=jnp.where(ok, values, 0.0).astype(jnp.float32),
        se=jnp.where(ok, se, 0.0).astype(jnp.float32),
    )


def _record(
    diagnostics: Diagnostics, estimate: _Estimate, decision: _Decision, had_reference: jax.Array
) -> Diagnostics:
    """Count the check, its branch, and (with a reference) its change against the estimator's noise."""
    compared = decision.ok & had_reference
    noisy = jnp.abs(estimate.change) <= 2.0 * estimate.se_change
    return Diagnostics(
        delta_new=estimate.total.astype(jnp.float32),
        num_checks=diagnostics.num_checks + 1,
        num_grows=diagnostics.num_grows + decision.grow.astype(jnp.int32),
        num_shrinks=diagnostics.num_shrinks + decision.shrink.astype(jnp.int32),
        num_forced=diagnostics.num_forced + decision.forced.astype(jnp.int32),
        num_compared=diagnostics.num_compared + compared.astype(jnp.int32),
        num_noisy=diagnostics.num_noisy + (compared & noisy).astype(jnp.int32),
        num_invalid=diagnostics.num_invalid + 1 - decision.ok.astype(jnp.int32),
        invalid_parameters=diagnostics.invalid_parameters,
        sum_abs_change=diagnostics.sum_abs_change
        + jnp.where(compared, jnp.abs(estimate.change), 0.0).astype(jnp.float32),
        sum_noise=diagnostics.sum_noise + jnp.where(compared, estimate.se_change, 0.0).astype(jnp.float32),
    )


def _check(
    config: Config,
    key: jax.Array,
    state: AdaptiveState,
    buffer_state: buffer_lib.BufferState,
    evaluate: _Evaluate,
    valid_parameters: jax.Array,
) -> tuple[AdaptiveState, jax.Array]:
    """A check that fires: estimate, decide, choose the next reference, record."""
    # Split inside the branch: steps without a check draw no random numbers.
    key_new, key_ref, key_coin = jax.random.split(key, 3)
    reference = state.reference
    estimate = _estimate(config, key_new, reference, buffer_state.size, evaluate)
    decision = _decide(config, key_coin, estimate, state, buffer_state, valid_parameters)
    next_reference = _next_reference(config, key_ref, estimate, decision, reference, buffer_state, evaluate)
    diagnostics = _record(state.diagnostics, estimate, decision, reference.valid)
    return AdaptiveState(next_reference, diagnostics, decision.evidence), decision.capacity


# ----------------------------------------------------------------------------
# The controller record


def _check_config(config: Config) -> Config:
    """Refuse concrete bad settings (``ValueError`` naming the setting); the static ones normalized."""
    max_num_old = _validation.check_static_int("max_num_old", config.max_num_old, low=1)
    subsample_size = config.subsample_size
    if subsample_size is not None:
        subsample_size = _validation.check_static_int("subsample_size", subsample_size, low=1)
    _validation.check_int("num_old", config.num_old, low=1, high=max_num_old)
    _validation.check_int("interval", config.interval, low=1)
    if config.tolerance is not None:
        _validation.check_float("tolerance", config.tolerance, low=0.0)
    if config.relative_tolerance is not None:
        _validation.check_float("relative_tolerance", config.relative_tolerance, low=0.0, high=1.0)
    _validation.check_choice("shrink_reading", config.shrink_reading, SHRINK_READINGS)
    for name in ("paired", "equal_counts", "random_walk"):  # a string "False" or NaN would run as True
        _validation.check_bool(name, getattr(config, name))
    evidence_lib.check(config.evidence_threshold, config.evidence_allowance)
    return config._replace(max_num_old=max_num_old, subsample_size=subsample_size)


def _check_call(config: Config, key, state: object, buffer_state: object, td_error_fn: object, step) -> None:
    """Refuse a concrete bad call of ``Controller.update`` (``ValueError`` naming the argument)."""
    random_walk = _validation.concrete_value(config.random_walk)
    if key is None and (random_walk is None or bool(np.any(random_walk))):
        when = "may be traced" if random_walk is None else "is set"
        raise ValueError(f"key must be a PRNG key when random_walk {when} (the coin is random).")
    if key is None and config.subsample_size is not None:
        raise ValueError("key must be a PRNG key when subsample_size is given (the subsample is random).")
    if not isinstance(buffer_state, buffer_lib.BufferState):
        raise ValueError(f"buffer_state must be a jaxreplay.buffer.BufferState, got {type(buffer_state).__name__}.")
    _validation.check_int("interval", config.interval, low=1, high=buffer_state.max_capacity)
    _validation.check_int("step", step, low=1)
    _check_td_error_fn(td_error_fn)
    subsample_size = config.subsample_size
    if not isinstance(state, AdaptiveState):
        raise ValueError(
            f"state must be an adaptive.AdaptiveState (from adaptive.init({subsample_size})), "
            f"got {type(state).__name__}."
        )
    values = state.reference.values
    stored = jnp.shape(values)[-1] if jnp.ndim(values) else -1
    if stored != (subsample_size or 0):
        raise ValueError(
            f"state was made for subsample_size={stored or None}, this call uses "
            f"subsample_size={subsample_size}: make it with adaptive.init({subsample_size})."
        )


def _as_arrays(config: Config) -> tuple[Config, jax.Array]:
    """The traceable settings as arrays (``k >= 1``, ``n_old`` clipped to ``[1, max_num_old]``, flags bool), and
    whether a traced ``k`` or ``n_old`` was clipped (an invalid setting: 10 and 1000 ran as 4, unflagged)."""
    interval, k_clipped = _validation.clip_traced_int(config.interval, 1, _validation.INT32_MAX, fallback=1)
    num_old, n_clipped = _validation.clip_traced_int(config.num_old, 1, config.max_num_old, fallback=1)
    return config._replace(
        interval=interval,
        num_old=num_old,
        paired=jnp.asarray(config.paired, jnp.bool_),
        equal_counts=jnp.asarray(config.equal_counts, jnp.bool_),
        random_walk=jnp.asarray(config.random_walk, jnp.bool_),
        evidence_threshold=jnp.asarray(config.evidence_threshold, jnp.float32),
        evidence_allowance=jnp.asarray(config.evidence_allowance, jnp.float32),
    ), k_clipped | n_clipped


def _update(
    config: Config,
    key: jax.Array | None,
    state: AdaptiveState,
    buffer_state: buffer_lib.BufferState,
    td_error_fn: TDErrorFn,
    step: ArrayLike,
) -> tuple[AdaptiveState, jax.Array]:
    """``Controller.update`` with ``config`` bound (:func:`controller` documents it)."""
    _check_call(config, key, state, buffer_state, td_error_fn, step)
    if key is None:
        key = jax.random.key(0)  # unused: exact sums, no coin
    arrays, counts_clipped = _as_arrays(config)
    length = config.max_num_old if config.subsample_size is None else config.subsample_size
    evaluate = functools.partial(_td_sums.abs_td_errors, buffer_state, td_error_fn, length)
    valid_evidence = evidence_lib.valid(config.evidence_threshold, config.evidence_allowance)
    valid_parameters = _valid_tolerances(config.tolerance, config.relative_tolerance) & valid_evidence & ~counts_clipped
    # A k above max_capacity forced every check up to max_capacity, unflagged (a probe); a concrete one is refused.
    valid_parameters = valid_parameters & (jnp.asarray(arrays.interval) <= buffer_state.max_capacity)
    fire = (jnp.asarray(step, jnp.int32) % arrays.interval == 0) & buffer_lib.is_full(buffer_state)

    def check(state: AdaptiveState) -> tuple[AdaptiveState, jax.Array]:
        return _check(arrays, key, state, buffer_state, evaluate, valid_parameters)

    def skip(state: AdaptiveState) -> tuple[AdaptiveState, jax.Array]:
        return state, buffer_state.capacity

    state = jax.tree.map(jnp.asarray, state)
    # Sticky at every call, whether or not the check fires.
    flagged = state.diagnostics.invalid_parameters | ~valid_parameters
    state = state._replace(diagnostics=state.diagnostics._replace(invalid_parameters=flagged))
    # Under vmap a plain cond would compute the check for every run at every step (a select).
    return _cond.cond_any(fire, check, skip, state)


def controller(
    *,
    interval: ArrayLike,
    num_old: ArrayLike,
    max_num_old: int,
    subsample_size: int | None = None,
    tolerance: ArrayLike | None = None,
    relative_tolerance: ArrayLike | None = None,
    shrink_reading: str = "new",
    paired: ArrayLike = True,
    equal_counts: ArrayLike = True,
    random_walk: ArrayLike = False,
) -> Controller:
    """The aER :class:`Controller` with its settings bound: ``init()`` and ``update(key, state, memory, td_fn, step)``.

    ``update`` is one step of Algorithm 2: call it once per environment step
    *after* storing that step's transition(s), then apply
    ``buffer.resize(buffer_state, new_capacity)``. See the module docstring
    for the algorithm, the boundary rule, ties, ε, the readings, and the
    estimator (equal counts, paired draws). Build the controller where its
    traced settings live (inside the jitted or vmapped function); building it
    costs nothing at run time.

    Args:
        interval: ``k``, integer in ``[1, max_capacity]``; may be traced.
        num_old: ``n_old``, integer in ``[1, max_num_old]``; may be traced.
        max_num_old: static upper bound of ``num_old`` (an array length).
        subsample_size: static ``s`` (>= 1) to estimate each sum from ``s``
            uniform draws with replacement among the checked transitions
            (the paper's DQN setting); ``None`` (default) sums exactly.
        tolerance: ``None`` (default, with ``relative_tolerance=None``):
            shrink iff ``|δ_old|' <= |δ_old|`` (Algorithm 2 as printed). A
            number ``ε >= 0`` (may be traced): shrink iff
            ``|δ_old|' < (1 - ρ) |δ_old| - ε``.
        relative_tolerance: ``ρ`` in ``[0, 1]`` of the rule above (may be
            traced; ``None`` is 0): the ε variant as a fraction of ``|δ_old|``,
            free of the TD errors' scale.
        shrink_reading: ``"new"`` (default) or ``"shrunk"``: which
            transitions the shrink branch's recompute sums (age offsets
            ``2k ...`` or ``k ...`` of the pre-shrink memory).
        paired: (default True; may be traced) reuse the reference's draws at
            the next check, so both sums of a comparison cover the *same*
            transitions; with ``window <= s`` sum every transition once
            (exact). ``False``: independent draws with replacement at every
            sum (the earlier estimator; noisy, and biased toward shrinking).
        equal_counts: (default True; may be traced) compare sums over equally
            many transitions: the next check sums the ``window`` oldest of
            the reference. ``False``: the literal index ranges (``n_old`` at every
            check, the live part of them after a shrink), which biases small
            memories toward growing.
        random_walk: (default False; may be traced) a control: decide by a
            fair coin instead of the TD errors (same boundaries, same
            bookkeeping).

    ``update``'s arguments:
        key: PRNG key for the subsample and the random walk; may be ``None``
            without ``subsample_size`` and with ``random_walk=False``.
        state: the controller state (from ``init()``).
        buffer_state: the memory after this step's adds (its ``capacity`` is
            ``N``).
        td_error_fn: ``transitions -> float[L]`` with the agent's current
            parameters; transitions carry a leading axis ``L`` on every leaf.
            Called only when the check fires (unless vmapped with a batched
            predicate, see the module docstring).
        step: the 1-based step count ``t`` (integer >= 1; may be traced).

    ``update`` returns ``(new_state, new_capacity)``; ``new_capacity`` is
    ``int32[]``, equal to ``buffer_state.capacity`` unless the check fired
    (the cost of a check: module docstring).

    Raises:
        ValueError: here, a concrete ``interval < 1``, ``num_old`` outside
            ``[1, max_num_old]``, a negative or non-finite ``tolerance``,
            ``relative_tolerance`` outside ``[0, 1]``, an unknown
            ``shrink_reading``, ``max_num_old`` or ``subsample_size`` not a
            Python int >= 1. From ``update``: a concrete ``interval`` above
            ``max_capacity``, ``step < 1``, a missing key where randomness
            is needed, a ``state`` that is not an :class:`AdaptiveState` of
            length ``s``, a non-callable ``td_error_fn``, or (at trace time) a
            ``td_error_fn`` output of the wrong shape. Traced values cannot raise: a ``num_old`` outside
            ``[1, max_num_old]``, an ``interval`` below 1 or above ``max_capacity`` and invalid tolerances are flagged
            (``Diagnostics.invalid_parameters``, module docstring) and their checks keep the capacity.
    """
    settings = (interval, num_old, max_num_old, subsample_size, tolerance, relative_tolerance, shrink_reading)
    config = _check_config(Config(*settings, paired, equal_counts, random_walk))  # in Config's field order
    return Controller(init=functools.partial(init, config.subsample_size), update=functools.partial(_update, config))


def evidence_controller(
    *, evidence_threshold: ArrayLike, evidence_allowance: ArrayLike = 0.0, **settings: ArrayLike | str | None
) -> Controller:
    """:func:`controller` with ``settings``, resizing only on accumulated evidence (module docstring; the state's
    ``evidence``, ``float32[2]``): ``h = evidence_threshold >= 1``, ``δ = evidence_allowance`` in ``[0, 1)``, both may
    be traced. ``h = 1, δ = 0`` is :func:`controller`. ``ValueError`` also for a bad ``h``, ``δ`` or keyword."""
    evidence = {"evidence_threshold": evidence_threshold, "evidence_allowance": evidence_allowance}
    config = _check_config(Config(**_known(settings, "adaptive.evidence_controller"), **evidence))  # type: ignore[arg-type]
    return Controller(init=functools.partial(init, config.subsample_size), update=functools.partial(_update, config))


def _known(settings: dict, where: str) -> dict:
    """``settings``, if :func:`controller` takes each keyword (else ``ValueError`` naming them and ``where``)."""
    takes = Config._fields[:-2]  # every setting but the evidence rule's pair
    if unknown := sorted(set(settings) - set(takes)):
        raise ValueError(f"{where} got unknown keyword(s) {', '.join(unknown)}; it takes {', '.join(takes)}.")
    return settings


def update(
    key: jax.Array | None,
    state: AdaptiveState,
    buffer_state: buffer_lib.BufferState,
    td_error_fn: TDErrorFn,
    step: ArrayLike,
    **settings: ArrayLike | str | None,
) -> tuple[AdaptiveState, jax.Array]:
    """Deprecated (removed after 0.1): ``controller(**settings).update(key, state, buffer_state, td_error_fn, step)``.

    The same ``(new_state, new_capacity int32[])``, bit for bit. ``settings`` are
    :func:`controller`'s keywords; one it does not take raises ``ValueError``.
    """
    _deprecated.warn(
        "adaptive.update(key, state, memory, td_error_fn, step, **settings) is deprecated: build the controller "
        "once with adaptive.controller(**settings) and call its update(key, state, memory, td_error_fn, step)."
    )
    bound = controller(**_known(settings, "adaptive.update"))  # each value's type is checked by _check_config
    return bound.update(key, state, buffer_state, td_error_fn, step)
