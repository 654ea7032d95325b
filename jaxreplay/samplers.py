"""Stateless samplers over the live window of a :class:`~jaxreplay.buffer.BufferState`.

Each sampler returns a :class:`Sample`: the storage slots drawn, the
probability with which each was drawn, and an importance weight. Fetch the
transitions with :func:`jaxreplay.buffer.get`.

* :func:`uniform`: uniform with replacement over the live transitions (ER);
  :func:`uniform_draws` and :func:`uniform_from_draws` are its two halves, the
  random numbers and the slots they pick, for loops that make draws ahead.
* :func:`exact_prioritized`: P(i) ∝ |δ_i|^β over the live transitions, from
  TD errors the caller has just computed for *all* of them (the paper's pER).
* :func:`combined`: combined experience replay (CER, Zhang & Sutton 2017): the
  newest transition plus ``batch_size - 1`` uniform draws.

Stored-priority replay (Schaul et al. 2016), which keeps priorities between
steps, lives in :mod:`jaxreplay.prioritized`.

Sampling from an empty memory is not an error inside ``jit`` (it cannot be
detected at trace time): the returned slots are arbitrary and their
probabilities *and weights* are 0 (nothing valid was sampled), in every
sampler here and in :func:`jaxreplay.prioritized.sample`, so a weighted loss
over them is 0. Start learning only once ``size >= 1``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation
from jaxreplay import buffer as buffer_lib
from jaxreplay._typing import ArrayLike

MAX_PRIORITY_EXPONENT = 1e30
"""The largest pER exponent β: ``β · log max(|δ|, floor)`` stays finite in float32 (``|log|`` of a float32 is at
most 104). A larger one (4e36 overflowed) drew a slot of probability 0 with weight 0, or NaN weights."""

_EXPONENT = _validation.Bounds(integer=False, low=0.0, high=MAX_PRIORITY_EXPONENT)  # (the pER exponent β)


class Sample(NamedTuple):
    """A minibatch of slots.

    Attributes:
        indices: ``int32[batch_size]``; storage slots (pass to
            :func:`jaxreplay.buffer.get`).
        probabilities: ``float32[batch_size]``; the probability with which
            each entry was drawn (per draw, over the live window; the uniform samplers
            give the nominal ``1 / size``: :func:`uniform` says how close it is).
        weights: ``float32[batch_size]``; importance-sampling weights to
            multiply the per-transition losses with (all ones where the
            sampler makes no correction).
    """

    indices: jax.Array
    probabilities: jax.Array
    weights: jax.Array


FLOAT_GRID_SIZES = 2**15
"""Live sizes up to which :func:`uniform_from_draws` picks a slot from the float32 uniform in its random bits
(each offset's probability then within ``size / 2**23`` of ``1 / size``, relative: 0.4 % at most); above,
from the 32 bits themselves (``floor(bits · size / 2**32)``: within ``size / 2**32``, 0.023 % at 10^6, 0.23 % at
10^7). A float32 uniform takes 2^23 values: its bound grows with the size (12 % at 10^6), and above 2^23 some
offsets are never drawn. The switch is on the traced size (a run's draws do not depend on ``max_capacity``);
it kept the bits of every memory size up to it."""


def uniform_draws(key: jax.Array, batch_size: int) -> jax.Array:
    """The random numbers of :func:`uniform`: ``uint32[batch_size]``, uniform random bits.

    They do not depend on the memory, so a loop can make many steps' draws at
    once, ahead of the steps, and hand each step's to :func:`uniform_from_draws`:
    the same slots as :func:`uniform` with the same key. (On XLA:CPU that is
    faster when the draws would otherwise be computed inside the gather of the
    minibatch: see :data:`jaxreplay.experiments.linesearch.DRAW_BLOCK`.) They are
    ``jax.random.bits(key, (batch_size,), jnp.uint32)``, the bits of ``jax.random.uniform(key, (batch_size,))``.
    """
    batch_size = _validation.check_static_int("batch_size", batch_size, low=1)
    return jax.random.bits(key, (batch_size,), jnp.uint32)


def _float_of_bits(bits: jax.Array) -> jax.Array:
    """``float32`` in [0, 1) from ``uint32`` random bits, as ``jax.random.uniform`` makes it: the top 23 bits as
    the mantissa of a number in [1, 2), less 1."""
    one = jnp.asarray(np.array(1.0, np.float32).view(np.uint32))
    return jax.lax.bitcast_convert_type((bits >> 9) | one, jnp.float32) - jnp.float32(1.0)


def _scaled_bits(bits: jax.Array, size: jax.Array) -> jax.Array:
    """``floor(bits · size / 2**32)`` exactly, both ``uint32``: the high word of their product, from 16-bit halves
    (no 64-bit integers without x64; a remainder ``bits mod size`` made the LineSearch kernel 1.5 times slower on
    XLA:CPU, which has no vector integer division)."""
    low = jnp.uint32(0xFFFF)
    a1, a0, b1, b0 = bits >> 16, bits & low, size >> 16, size & low
    cross1, cross0 = a1 * b0, a0 * b1
    carry = ((a0 * b0) >> 16) + (cross1 & low) + (cross0 & low)  # (< 3 · 2**16)
    return a1 * b1 + (cross1 >> 16) + (cross0 >> 16) + (carry >> 16)


def uniform_from_draws(state: buffer_lib.BufferState, draws: ArrayLike) -> Sample:
    """:func:`uniform`'s minibatch from its random numbers (``draws``, from :func:`uniform_draws`).

    Args:
        state: the memory.
        draws: ``uint32[batch_size]`` random bits (:func:`uniform_draws`), or ``float32[batch_size]`` uniforms
            in [0, 1) (concrete ones outside are refused; traced ones are clipped into the live window, NaN:
            its oldest transition, unflagged). From float32 uniforms the offset is always ``floor(u · size)``,
            whose probabilities are within ``size / 2**23`` of ``1 / size`` (relative) and leave offsets
            undrawn above 2^23 live transitions; from bits, :data:`FLOAT_GRID_SIZES` says how.

    Returns:
        A :class:`Sample` as :func:`uniform`'s. Cost: O(batch_size).
    """
    draws = jnp.asarray(draws)
    if draws.ndim != 1 or draws.dtype not in (jnp.uint32, jnp.float32):
        raise ValueError(
            f"draws must be uint32[batch_size] (uniform_draws) or float32[batch_size] uniforms in [0, 1), got "
            f"{draws.dtype}{list(draws.shape)}."
        )
    size = state.size
    if draws.dtype == jnp.uint32:
        uniforms = _float_of_bits(draws)
        wide = _scaled_bits(draws, jnp.maximum(size, 0).astype(jnp.uint32)).astype(jnp.int32)
    else:
        _validation.check_float("draws", draws, low=0.0, high=1.0, high_inclusive=False)
        uniforms, wide = draws, None
    # One draw per index is cheaper than randint (which needs two bit draws to stay unbiased for a traced span);
    # up to FLOAT_GRID_SIZES the offset is the float uniform's (the bits every committed result drew).
    # (Clipped below too: a traced draw outside [0, 1) must not reach a forgotten slot behind the window.)
    offsets = jnp.clip((uniforms * size.astype(jnp.float32)).astype(jnp.int32), 0, size - 1)
    if wide is not None:
        offsets = jnp.where(size <= FLOAT_GRID_SIZES, offsets, wide)
    batch_size = draws.shape[0]
    probability = jnp.where(size > 0, 1.0 / jnp.maximum(size, 1).astype(jnp.float32), 0.0)
    return Sample(
        indices=buffer_lib.slot_of(state, offsets),
        probabilities=jnp.full((batch_size,), probability, jnp.float32),
        weights=jnp.full((batch_size,), size > 0, jnp.float32),
    )


def uniform(key: jax.Array, state: buffer_lib.BufferState, batch_size: int) -> Sample:
    """Draw ``batch_size`` live transitions uniformly, with replacement.

    Args:
        key: PRNG key.
        state: the memory.
        batch_size: static number of draws (>= 1).

    Returns:
        A :class:`Sample` (``int32[batch_size]`` slots, ``float32[batch_size]``
        probabilities ``1 / size`` and weights 1; both 0 from an empty
        memory). Each live offset's probability is within ``size / 2**23`` of
        ``1 / size`` (relative) up to :data:`FLOAT_GRID_SIZES` live transitions,
        within ``size / 2**32`` above. Cost: O(batch_size). Equal to
        ``uniform_from_draws(state, uniform_draws(key, batch_size))``.
    """
    return uniform_from_draws(state, uniform_draws(key, batch_size))


def combined(key: jax.Array, state: buffer_lib.BufferState, batch_size: int) -> Sample:
    """Combined experience replay: the newest transition plus uniform draws.

    Entry 0 is always the newest live transition (probability 1); entries
    ``1 .. batch_size - 1`` are uniform with replacement over the live window
    (probability ``1 / size`` each, as :func:`uniform` draws them). Weights are 1 (0 from an empty memory).

    Args:
        key: PRNG key.
        state: the memory.
        batch_size: static minibatch size (>= 1; with 1 only the newest is used).

    Returns:
        A :class:`Sample` (``int32[batch_size]`` slots, ``float32[batch_size]``
        probabilities and weights 1). Cost: O(batch_size).
    """
    batch_size = _validation.check_static_int("batch_size", batch_size, low=1)
    rest = uniform(key, state, batch_size - 1) if batch_size > 1 else None
    newest = buffer_lib.newest_index(state)[None]
    has_any = (state.size > 0).astype(jnp.float32)[None]
    if rest is None:
        return Sample(newest, has_any, has_any)
    return Sample(
        indices=jnp.concatenate([newest, rest.indices]),
        probabilities=jnp.concatenate([has_any, rest.probabilities]),
        weights=jnp.concatenate([has_any, rest.weights]),
    )


def exact_priorities(
    state: buffer_lib.BufferState,
    td_errors: ArrayLike,
    priority_exponent: ArrayLike,
    error_floor: ArrayLike = 1e-6,
) -> jax.Array:
    """Exact pER probabilities P(i) ∝ max(|δ_i|, floor)^β over the live window.

    Args:
        state: the memory.
        td_errors: ``float[max_capacity]``, the TD error of the transition in
            each slot (entries of slots that are not live are ignored).
        priority_exponent: β >= 0; may be traced. β = 0 is uniform.
        error_floor: a clamp, ``max(|δ|, error_floor)`` (not the *added*
            ``priority_floor`` of :func:`jaxreplay.prioritized.update_priorities`):
            |δ| below it counts as it, so that a transition whose TD error is
            exactly zero keeps a (tiny) chance of being replayed. A window whose
            every priority is 0 (a floor of 0 and no TD error) is sampled
            uniformly, as :mod:`jaxreplay.prioritized` does; |δ| = inf counts
            as the largest float32.

    Returns:
        ``float32[max_capacity]`` probabilities per slot, zero outside the live
        window, summing to 1 (when ``size >= 1``). Computed in log space, so any
        β up to :data:`MAX_PRIORITY_EXPONENT` is safe from overflow and
        underflow. A traced β or floor that is NaN, infinite, negative or (β)
        above that bound (jitted code cannot raise) gives all-NaN
        probabilities, and so NaN draws' probabilities and weights in
        :func:`exact_prioritized`: never a silent fallback. The total is summed
        in age order and read at the newest live transition, so nothing
        depends on ``max_capacity`` (a sum over every slot rounded otherwise at
        another length). Cost: O(max_capacity).
    """
    shifted, settings_valid = _shifted_priorities(state, td_errors, priority_exponent, error_floor)
    total = _at_newest(state, _age_cumsum(state, shifted))
    return _normalised(shifted, total, settings_valid)


def _shifted_priorities(
    state: buffer_lib.BufferState, td_errors: ArrayLike, priority_exponent: ArrayLike, error_floor: ArrayLike
) -> tuple[jax.Array, jax.Array]:
    """``(shifted, valid)``: each slot's priority divided by the largest live one (0 outside the live window;
    every live one 1 where all are 0), and whether the (possibly traced) settings are valid. Refuses concrete
    bad settings and ``td_errors`` of another shape."""
    # (as run: 1e39 would run as inf, 1e-40 as 0; outside_bounds flags a traced one the same way)
    _validation.check_bounds("priority_exponent", priority_exponent, _EXPONENT, scalar=True)
    _validation.check_bounds("error_floor", error_floor, _validation.NONNEGATIVE, scalar=True)
    td_errors = jnp.asarray(td_errors)
    if td_errors.shape != (state.max_capacity,):
        raise ValueError(f"td_errors must have shape ({state.max_capacity},) (one per slot), got {td_errors.shape}.")
    live = buffer_lib.valid_mask(state)
    # |δ| = inf counts as the largest float32 (its log is finite); β = 0 is uniform even where
    # max(|δ|, floor) is 0 (0 · log 0 would be NaN).
    error = jnp.minimum(jnp.maximum(jnp.abs(td_errors), error_floor), _validation.FLOAT32_MAX)
    log_priority = jnp.where(priority_exponent == 0, 0.0, priority_exponent * jnp.log(error))
    log_priority = jnp.where(live, log_priority, -jnp.inf)
    # Shift by the largest *live* log-priority (non-live slots are −inf and must
    # not enter the max, or a window of tiny priorities would underflow to 0).
    top = jnp.max(log_priority)
    shifted = jnp.exp(log_priority - jnp.where(jnp.isfinite(top), top, 0.0))
    # Every live priority 0 (a floor of 0 and no TD error): uniform over the live window, as the
    # stored-priority sampler does, rather than probabilities that sum to 0.
    shifted = jnp.where(live, jnp.where(top == -jnp.inf, 1.0, shifted), 0.0)
    valid = ~(
        _validation.outside_bounds(priority_exponent, _EXPONENT)
        | _validation.outside_bounds(error_floor, _validation.NONNEGATIVE)
    )
    return shifted, valid


def _normalised(shifted: jax.Array, total: jax.Array, valid: jax.Array) -> jax.Array:
    """``shifted / total`` as float32, all NaN where the settings are not ``valid`` (never a silent fallback)."""
    probabilities = shifted / jnp.maximum(total, jnp.finfo(shifted.dtype).tiny)
    return jnp.where(valid, probabilities, jnp.nan).astype(jnp.float32)


def _age_cumsum(state: buffer_lib.BufferState, per_slot: jax.Array) -> jax.Array:
    """The cumulative sum of ``per_slot`` in age order (oldest first): the live window is its prefix."""
    offsets = jnp.arange(state.max_capacity, dtype=jnp.int32)
    return jnp.cumsum(per_slot[buffer_lib.slot_of(state, offsets)])


def _at_newest(state: buffer_lib.BufferState, cumulative: jax.Array) -> jax.Array:
    """The sum of the live window: ``cumulative`` (:func:`_age_cumsum`) at the newest live transition. Its last
    entry is not: the scan adds the trailing zeros in an order that depends on the length, and rounds otherwise."""
    return cumulative[jnp.maximum(state.size - 1, 0)]


def exact_prioritized(
    key: jax.Array,
    state: buffer_lib.BufferState,
    td_errors: ArrayLike,
    batch_size: int,
    priority_exponent: ArrayLike,
    importance_exponent: ArrayLike = 0.0,
    error_floor: ArrayLike = 1e-6,
) -> Sample:
    """The paper's prioritized replay: draw with P(i) ∝ |δ_i|^β from current TD errors.

    The caller computes the TD error of every slot with the current
    parameters (the paper recomputes them before each draw); nothing is stored
    between calls. For priorities kept between steps see
    :mod:`jaxreplay.prioritized`.

    Args:
        key: PRNG key.
        state: the memory.
        td_errors: ``float[max_capacity]`` TD error per slot.
        batch_size: static number of draws, with replacement.
        priority_exponent: β >= 0 (traced or not; a traced invalid one gives NaN, see
            :func:`exact_priorities`).
        importance_exponent: exponent of the importance weights
            ``(size · P(i))^-exponent``, normalised by their batch maximum;
            0 (the paper, default) gives weights of 1.
        error_floor: see :func:`exact_priorities`.

    Returns:
        A :class:`Sample`. Cost: O(max_capacity + batch_size · log max_capacity)
        (a cumulative sum in age order and a binary search per draw; one
        uniform number per draw). The sample's ``probabilities`` are the exact
        P(i) (and so are the importance weights'); the draws follow them only
        to the resolution of one float32 uniform scaled by the total (2⁻²³ of
        it), so a slot whose P(i) is near or below 2⁻²³ is drawn with
        probability 0 or a multiple of 2⁻²³. Measured over all 2²³ draws with
        standard-Cauchy TD errors and β = 1 (seeds 0-2): the total variation
        from P is 2e-5 at 1,000 slots, 2e-4 at 10⁴ and 2e-3 at 10⁵, and slots
        with P(i) >= 1 / size are within 1.5% of it, but the worst slot is off
        by 31% to 214% at 1,000 slots, 2 to 8 times at 10⁴ (15 to 40 slots of
        positive P(i) never drawn) and 30 times at 10⁵ (3,217 never drawn).
        Beyond ~10³ slots, or with heavy-tailed priorities, use the
        stored-priority sampler, whose draws resolve P(i) level by level.
    """
    batch_size = _validation.check_static_int("batch_size", batch_size, low=1)
    _validation.check_bounds("importance_exponent", importance_exponent, _validation.NONNEGATIVE, scalar=True)
    shifted, settings_valid = _shifted_priorities(state, td_errors, priority_exponent, error_floor)
    # One cumulative sum in age order (the live window is its prefix): the draws search it, and its value at
    # the newest transition is the total that normalises the drawn probabilities, as exact_priorities does.
    cdf = _age_cumsum(state, shifted)
    total = _at_newest(state, cdf)
    u = jax.random.uniform(key, (batch_size,), jnp.float32) * total
    chosen = jnp.searchsorted(cdf, u, side="right").astype(jnp.int32)
    chosen = jnp.clip(chosen, 0, jnp.maximum(state.size - 1, 0))
    indices = buffer_lib.slot_of(state, chosen)
    drawn = _normalised(shifted[indices], total, settings_valid)
    return Sample(indices, drawn, importance_weights(drawn, state.size, importance_exponent))


def importance_weights(probabilities: ArrayLike, size: ArrayLike, exponent: ArrayLike) -> jax.Array:
    """Importance-sampling weights ``(size · P(i))^-exponent / max_batch``.

    Normalising by the largest weight in the batch (Schaul et al. 2016) keeps
    every weight in [0, 1] so they only ever scale updates down: the entry of
    smallest ``size · P(i)`` gets exactly 1, jitted or not, and a weight is 0
    only where it underflows float32 (``(ratio)^-exponent`` below ~1e-45, as
    with a very large ``exponent``). Entries with probability 0 get weight 0.
    ``float32``, shape of ``probabilities``.

    Invalid input that jitted code cannot refuse is made loud, not silent: an
    ``exponent`` that is NaN, infinite or negative (possible only when traced;
    a concrete one raises in the samplers) makes *every* weight NaN, and a NaN
    probability gives a NaN weight. A loss multiplied by them turns NaN, which
    the experiments report as diverged -- rather than training on inverted
    weights (> 1) or on weights of 0.
    """
    exponent = jnp.asarray(exponent, jnp.float32)
    scaled = jnp.maximum(size, 1).astype(jnp.float32) * probabilities
    positive = scaled > 0
    # Each weight is (scaled / smallest)^-exponent: the ratio is >= 1, and exactly 1 at the batch's smallest,
    # whose weight is exp(-exponent * 0) = 1 whatever XLA fuses. The form exp(log_w - max(log_w)) computed
    # -exponent * log twice, once inside a fused multiply-add, so the largest weight came out 1 +- ulps under
    # jit, and at exponents near 1e10 whole batches of 0 or of inf (a probe).
    smallest = jnp.min(jnp.where(positive, scaled, jnp.inf))
    ratio = jnp.where(positive, scaled / jnp.where(positive, smallest, 1.0), 1.0)
    weights = jnp.where(positive, jnp.exp(-exponent * jnp.log(ratio)), 0.0)
    invalid = _validation.outside_bounds(exponent, _validation.NONNEGATIVE) | jnp.isnan(probabilities)
    return jnp.where(invalid, jnp.nan, weights).astype(jnp.float32)
