"""Numeric helpers of the reproduction: pure NumPy on top of the closed forms of the theory."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from jaxreplay import _validation
from jaxreplay.paper.reproduce.linesearch.settings import ALPHA_1D, M_1D, MONOTONE_TOL, TARGET_RATIO


def first_crossing(
    fn: Callable[[np.ndarray], np.ndarray], target: Any, t_high: float, t_low: float = 0.0, iterations: int = 100
) -> np.ndarray:
    """Smallest t in [t_low, t_high] with ``fn(t) >= target``, for ``fn`` non-decreasing in t.

    Vectorised bisection: ``fn`` maps an array of times (broadcast with
    ``target``) to values of the same shape. Returns float64 of the broadcast
    shape; NaN where ``fn(t_high) < target``; ``t_low`` where ``fn(t_low) >= target``.
    """
    target = np.asarray(target, dtype=np.float64)
    hi_val = np.asarray(fn(np.full(target.shape, float(t_high))), dtype=np.float64)
    shape = np.broadcast_shapes(target.shape, hi_val.shape)
    target = np.broadcast_to(target, shape)
    lo = np.full(shape, float(t_low))
    hi = np.full(shape, float(t_high))
    reached = np.broadcast_to(hi_val, shape) >= target
    at_low = np.broadcast_to(np.asarray(fn(lo), dtype=np.float64), shape) >= target
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        up = np.broadcast_to(np.asarray(fn(mid), dtype=np.float64), shape) >= target
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    out = np.where(at_low, float(t_low), hi)
    return np.where(reached, out, np.nan)


def steps_to_exponent(
    target: Any,
    memory_size: Any,
    batch_size: Any = M_1D,
    step_size: Any = ALPHA_1D,
    t_high: float = 1e5,
    initial_position: float = -5.0,
    speed: float = 0.01,
) -> np.ndarray:
    """Learning steps t at which the fixed-intercept exponent k(t) (Eq. 1Dk) reaches ``target`` = K.

    Root of the closed form :func:`jaxreplay.paper.theory.fixed_intercept_exponent`
    (non-decreasing in t) by bisection; all arguments broadcast. Continuous t
    (steps); NaN if not reached by ``t_high``.
    """
    from jaxreplay.paper import theory

    shape = np.broadcast_shapes(np.shape(target), np.shape(memory_size), np.shape(batch_size), np.shape(step_size))
    N = np.broadcast_to(np.asarray(memory_size, dtype=np.float64), shape)
    m = np.broadcast_to(np.asarray(batch_size, dtype=np.float64), shape)
    a = np.broadcast_to(np.asarray(step_size, dtype=np.float64), shape)

    def fn(t):
        exponent = theory.fixed_intercept_exponent(np.broadcast_to(t, shape), N, m, a, initial_position, speed)
        return np.asarray(exponent)

    return first_crossing(fn, np.broadcast_to(np.asarray(target, np.float64), shape), t_high, iterations=64)


def fixed_slope_steps(
    ratio: Any = TARGET_RATIO, batch_size: Any = M_1D, step_size: Any = ALPHA_1D, t_high: float = 1e8
) -> np.ndarray:
    """Steps at which the fixed-slope metric Δθ/Δθ⁰ = e^{−mαt} falls to ``ratio`` (numerically).

    Root-finds :func:`jaxreplay.paper.theory.fixed_slope_solution`; the closed form
    is ln(1/ratio)/(mα) (docs/paper_readings.md §2: ≈ 30,000 steps at m = 5, α = 2e-5).
    """
    from jaxreplay.paper import theory

    shape = np.broadcast_shapes(np.shape(ratio), np.shape(batch_size), np.shape(step_size))
    m = np.broadcast_to(np.asarray(batch_size, dtype=np.float64), shape)
    a = np.broadcast_to(np.asarray(step_size, dtype=np.float64), shape)
    fn = lambda t: -np.asarray(theory.fixed_slope_solution(np.broadcast_to(t, shape), m, a, 1.0))  # noqa: E731
    return first_crossing(fn, -np.broadcast_to(np.asarray(ratio, np.float64), shape), t_high)


def prioritized_exponent_1d(
    t: np.ndarray, memory_size: float, batch_size: float = M_1D, step_size: float = ALPHA_1D
) -> tuple[np.ndarray, np.ndarray]:
    """(k(t), k_pri(t)) in the fixed-intercept case (pER with β = 2) on the grid ``t`` (from 0).

    k is the closed form (Eq. 1Dk); k_pri = k + ∫₀ᵗ d(k_pri − k)/dt' dt' with
    the rate difference of :func:`jaxreplay.paper.theory.prioritized_rate_difference`
    (docs/paper_readings.md §5), integrated by the trapezoid rule on ``t`` (use a fine grid).
    """
    from scipy.integrate import cumulative_trapezoid

    from jaxreplay.paper import theory

    t = np.asarray(t, dtype=np.float64)
    k = np.asarray(theory.fixed_intercept_exponent(t, memory_size, batch_size, step_size))
    rate = np.asarray(theory.prioritized_rate_difference(t, memory_size, batch_size, step_size))
    return k, k + cumulative_trapezoid(rate, t, initial=0.0)


def optimal_memory(memory_sizes: npt.ArrayLike, metric: np.ndarray, largest: bool = False) -> np.ndarray:
    """The smallest memory size minimising ``metric`` along axis 0 (``metric``: [nN, ...], N increasing); NaNs
    ignored. With ``largest``, the largest one: where the two differ, every N between them that attains the same
    minimum ties (the fixed-intercept case: every N past the steps to K holds the whole history)."""
    # (A permuted grid gave other answers: a decreasing M(N) called non-monotone; found by a probe.)
    sizes = _validation.check_increasing("memory_sizes", memory_sizes)
    metric = np.asarray(metric, dtype=np.float64)
    filled = np.where(np.isfinite(metric), metric, np.inf)
    index = np.argmin(filled[::-1], axis=0) if largest else np.argmin(filled, axis=0)
    return sizes[len(sizes) - 1 - index] if largest else sizes[index]


def largest_rise(metric: np.ndarray) -> np.ndarray:
    """``max_j (M_j − min_{i ≤ j} M_i)`` along axis 0 (N increasing): how far M(N) rises above its lowest value
    at a smaller N (0 for a curve that never rises); NaNs skipped."""
    metric = np.asarray(metric, dtype=np.float64)
    lowest = np.fmin.accumulate(metric, axis=0)  # (fmin: a NaN does not reset the lowest value)
    return np.nanmax(metric - lowest, axis=0)


def nonmonotone(metric: np.ndarray, tol: float = MONOTONE_TOL, strict: bool = True) -> np.ndarray:
    """Whether M(N) (axis 0, N increasing) fails to decrease monotonically.

    ``strict=True``: M rises by more than ``tol`` above its lowest value at a
    smaller N, :func:`largest_rise` > ``tol`` (any local bump counts,
    however many grid steps it takes: a test of neighbouring N alone passes a
    rise made of steps below ``tol``, so its answer followed the grid's step and
    every curve passed on a fine enough grid; a probe). ``strict=False``: only
    the global optimum matters, M(N_max) − min_N M > ``tol`` (an interior or
    small-N optimum). NaNs are skipped.
    """
    if strict:
        return largest_rise(metric) > tol
    metric = np.asarray(metric, dtype=np.float64)
    return (metric[-1] - np.nanmin(metric, axis=0)) > tol


def monotone_threshold(
    batch_sizes: npt.ArrayLike,
    metric: np.ndarray | Sequence[np.ndarray],
    tol: float = MONOTONE_TOL,
    strict: bool = True,
) -> dict:
    """Where M(N) turns monotone (decreasing) in m. ``metric``: [nN, nm], N and m increasing,
    or a list of nm curves M(N) of their own lengths (e.g. each m's grid with its cusps,
    :meth:`jaxreplay.paper.theory.MemoryCusps.curve`).

    Returns ``threshold`` (smallest m from which every larger m is monotone;
    NaN if the largest m is non-monotone), ``largest_nonmonotone`` (NaN if
    none), ``nonmonotone_m`` (list) and ``all_below_nonmonotone`` (every m
    below the threshold is non-monotone). ``strict``: see :func:`nonmonotone`.
    """
    m = _validation.check_increasing("batch_sizes", batch_sizes).astype(np.float64)
    if isinstance(metric, (list, tuple)):
        nm = np.array([bool(nonmonotone(np.asarray(c, dtype=np.float64), tol, strict)) for c in metric], dtype=bool)
    else:
        nm = nonmonotone(np.asarray(metric), tol, strict)
    if nm[-1]:
        threshold = math.nan
    else:
        idx = np.nonzero(nm)[0]
        threshold = float(m[idx[-1] + 1]) if idx.size else float(m[0])
    below = m < threshold if np.isfinite(threshold) else np.ones_like(nm)
    return dict(
        threshold=threshold,
        largest_nonmonotone=float(m[nm].max()) if nm.any() else math.nan,
        nonmonotone_m=[int(x) for x in m[nm]],
        all_below_nonmonotone=bool(np.all(nm[below])),
    )


def true_intervals(t: np.ndarray, mask: np.ndarray) -> list[tuple[float, float]]:
    """Maximal intervals [t_start, t_end] of ``t`` over which ``mask`` is True."""
    t, mask = np.asarray(t), np.asarray(mask, dtype=bool)
    out, start = [], None
    for i, flag in enumerate(mask):
        if flag and start is None:
            start = i
        if not flag and start is not None:
            out.append((float(t[start]), float(t[i - 1])))
            start = None
    if start is not None:
        out.append((float(t[start]), float(t[-1])))
    return out


def seed_average_metric(dtheta: np.ndarray) -> float:
    """M of the seed-averaged curve: |⟨Δθ1(T)⟩| + |⟨Δθ2(T)⟩| for ``dtheta`` [seeds, T, 2]."""
    mean = np.nanmean(np.asarray(dtheta, dtype=np.float64)[:, -1, :], axis=0)
    return float(np.abs(mean).sum())
