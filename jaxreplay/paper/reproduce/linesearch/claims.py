"""The claim registry: one function per quantitative claim of the paper, in the report's order.

Each function takes the :class:`~jaxreplay.paper.reproduce.linesearch.stages.Stages`
and returns the claim's row: ``id``, ``claim`` (what the paper says), ``paper``
(its number), ``ours``, ``agrees`` (``"yes"`` / ``"partly"`` / ``"no"``),
``source`` and the numbers behind ``ours``. :data:`CLAIMS` maps the ids to the
functions in registration order; :data:`CLAIM_IDS` is its keys.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from jaxreplay.paper.reproduce.linesearch.numerics import largest_rise, monotone_threshold, nonmonotone, optimal_memory
from jaxreplay.paper.reproduce.linesearch.settings import (
    MONOTONE_TOL,
    WHITE_THRESHOLD,
)
from jaxreplay.paper.reproduce.linesearch.stages import Key, Stages

if TYPE_CHECKING:
    from jaxreplay.paper.theory import MemoryCusps

ClaimFn = Callable[[Stages], dict]

CLAIMS: dict[str, ClaimFn] = {}
"""Claim id → its function, in the report's order."""


def _register(cid: str) -> Callable[[Callable[[Stages], dict]], ClaimFn]:
    """Register a function returning a row without its id under ``cid``; the registered function adds the id."""

    def register(fn: Callable[[Stages], dict]) -> ClaimFn:
        @functools.wraps(fn)
        def row(s: Stages) -> dict:
            return {"id": cid, **fn(s)}

        if cid in CLAIMS:
            raise ValueError(f"claim {cid!r} registered twice")
        CLAIMS[cid] = row
        return row

    return register


def _row(claim: str, paper: str, ours: str, agrees: str, source: str, **numbers) -> dict:
    return dict(claim=claim, paper=paper, ours=ours, agrees=agrees, source=source, **numbers)


def _agree(ok: bool | None, partly: bool = False) -> str:
    if ok:
        return "yes"
    return "partly" if partly else "no"


def _fmt(x, digits=3) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "n/a"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.{digits}g}"


def evaluate(s: Stages) -> list[dict]:
    """Every claim's row, in the registry's order."""
    return [fn(s) for fn in CLAIMS.values()]


# ---------------------------------------------------------------- Fig. 2c/2d: optimal memory size


@_register("optimal_N_m10_theory")
def optimal_memory_m10_theory(s: Stages) -> dict:
    """Optimal N for m = 10 from the grid and the cusps of M(N)."""
    c10 = s.cusps.er[s.batch_index(10)]
    n10 = float(c10.best_memory)
    return _row(
        "Optimal memory size for m = 10 (ER, γ = 0, α = 1e-3)",
        "≈ 250",
        (
            f"N* = {n10:.4g}, M ≈ 0 (a cusp: Δθ(T) changes sign there; M = {c10.best_metric:.1g} where the root "
            "search stopped)"
            if n10 != c10.grid_best_memory
            else f"N* = {n10:.4g}, M = {c10.best_metric:.3g} (a grid point)"
        )
        + f"; grid alone (N {s.grid_step}): N* = {c10.grid_best_memory:g}, M = {c10.grid_best_metric:.4g}",
        _agree(200 <= n10 <= 300, 150 <= n10 <= 400),
        "theory",
        value=n10,
        grid_value=c10.grid_best_memory,
    )


@_register("optimal_N_m10_experiment")
def optimal_memory_m10_experiment(s: Stages) -> dict:
    """Optimal N for m = 10 over the ER experiment's spot grid."""
    n10e = float(s.spot_memory[int(np.nanargmin(s.spot_metric[(0.0, 10)]))])
    return _row(
        "Optimal memory size for m = 10 (ER experiment, spot N grid)",
        "≈ 250",
        f"N* = {n10e:g} among N = {list(map(int, s.spot_memory))} ({s.design.er_seeds} seeds)",
        _agree(200 <= n10e <= 300, 100 < n10e < 1000),
        "experiment",
        value=n10e,
    )


@_register("monotone_m40_theory")
def monotone_m40_theory(s: Stages) -> dict:
    """M(N) for m = 40 over the grid and its cusps: no rise, optimum at N_max."""
    c40 = s.cusps.er[s.batch_index(40)]
    curve40 = c40.curve()[1]
    rise40 = float(largest_rise(curve40))
    mono40 = not bool(nonmonotone(curve40, strict=False)[()])
    return _row(
        "M decreases with N for m = 40 (ER, γ = 0, α = 1e-3)",
        "monotone decrease",
        f"M(N_max) − min M = {c40.grid_metric[-1] - c40.best_metric:.2g} (cusps of M(N) at N = "
        + (", ".join(f"{x:.1f}" for x in np.unique(np.round(c40.cusp_memory, 1))) or "none")
        + f" included); largest rise above the lowest M at a smaller N {rise40:.2g}; N* = {c40.best_memory:.4g} "
        f"(grid alone {c40.grid_best_memory:g})",
        _agree(mono40 and rise40 <= MONOTONE_TOL, mono40),
        "theory",
        value=float(mono40),
    )


@_register("monotone_m40_experiment")
def monotone_m40_experiment(s: Stages) -> dict:
    """M(N) for m = 40 over the ER experiment's spot grid."""
    e40 = s.spot_metric[(0.0, 40)]
    mono40e = not bool(nonmonotone(e40))  # (no rise > tol above a smaller N's M)
    return _row(
        "M decreases with N for m = 40 (ER experiment, spot N grid)",
        "monotone decrease",
        "M = [" + ", ".join(f"{x:.3g}" for x in e40) + f"] at N = {list(map(int, s.spot_memory))}",
        _agree(mono40e, float(s.spot_memory[int(np.nanargmin(e40))]) == float(s.spot_memory[-1])),
        "experiment",
        value=float(mono40e),
    )


# ---------------------------------------------------------------- monotone boundaries in m


def _moved_text(s: Stages, cusps: list[MemoryCusps], glob: dict, glob_grid: dict) -> str:
    """The m whose optimum leaves N_max once the cusps are located, with the cusp N*."""
    moved = [
        (m, c)
        for m, c in zip(s.grid_batch, cusps)
        if int(m) in glob["nonmonotone_m"] and int(m) not in glob_grid["nonmonotone_m"]
    ]
    if not moved:
        return ""
    return (
        "; the cusps move the optimum off N_max for "
        + ", ".join(
            f"m = {int(m)} (N* = {c.best_memory:.1f}, "
            + "M* = {} vs M(N_max) = {})".format(*_apart(c.best_metric, c.grid_metric[-1]))
            for m, c in moved
        )
        + " (an M* at a cusp is 0 up to where the root search stopped)"
    )


def _apart(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` printed with the fewest significant digits (2 to 6) that tell them apart: M* at one digit
    and M(N_max) at two read 0.3 vs 0.26 for 0.2555 vs 0.2593, the optimum worse than N_max (found by a probe)."""
    for digits in range(2, 7):
        shown = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if shown[0] != shown[1]:
            return shown
    return shown


def _tolerance_text(s: Stages, cusps: list[MemoryCusps]) -> str:
    """Where the boundary lies at other tolerances: every M(N) dips to a cusp, so "monotone" means "no rise
    above the tolerance", and the boundary is a reading at a resolution (the paper's: its plot's)."""
    curves = [c.curve()[1] for c in cusps]
    at = {tol: monotone_threshold(s.grid_batch, curves, tol=tol)["threshold"] for tol in (1e-3, 1e-5, 1e-6)}
    return "; at other tolerances: " + ", ".join(
        (f"m ≥ {_fmt(m)}" if np.isfinite(m) else "no m") + f" ({tol:g})" for tol, m in at.items()
    )


def _threshold_row(s: Stages, text: str, paper_m: int, cusps: list[MemoryCusps], thr) -> dict:
    strict, glob, strict_g, glob_g = thr
    ok_s = np.isfinite(strict["threshold"]) and abs(strict["threshold"] - paper_m) <= 5
    ok_g = np.isfinite(glob["threshold"]) and abs(glob["threshold"] - paper_m) <= 5
    near = np.isfinite(strict["threshold"]) and abs(strict["threshold"] - paper_m) <= 12
    ours = (
        f"with the cusps of M(N) located (sign changes of Δθ(T), refined in continuous N): decreasing within "
        f"{MONOTONE_TOL:g} (no rise > {MONOTONE_TOL:g} above the lowest M at a smaller N, grid + cusps) for all m ≥ "
        f"{_fmt(strict['threshold'])}{_tolerance_text(s, cusps)}; non-monotone m: {strict['nonmonotone_m']}; "
        f"optimum at N_max (within {MONOTONE_TOL:g}) for all m ≥ {_fmt(glob['threshold'])}"
        f"{_moved_text(s, cusps, glob, glob_g)}. Grid alone (N {s.grid_step}): decreasing within {MONOTONE_TOL:g} for "
        f"m ≥ {_fmt(strict_g['threshold'])}, optimum at N_max for m ≥ {_fmt(glob_g['threshold'])}"
    )
    return _row(
        text,
        f"boundary m ≈ {paper_m}",
        ours,
        _agree(ok_s and strict["all_below_nonmonotone"], ok_s or ok_g or near),
        "theory",
        value=strict["threshold"],
        global_threshold=glob["threshold"],
        grid_threshold=strict_g["threshold"],
        grid_global_threshold=glob_g["threshold"],
    )


@_register("er_monotone_threshold")
def er_monotone_threshold(s: Stages) -> dict:
    """The m from which ER's M(N) decreases (paper: 20)."""
    return _threshold_row(
        s, "ER: M(N) non-monotone for m < 20, monotone for m > 20 (γ = 0, α = 1e-3)", 20, s.cusps.er, s.thresholds_er
    )


@_register("per_monotone_threshold")
def per_monotone_threshold(s: Stages) -> dict:
    """The m from which pER's M(N) decreases (paper: 15)."""
    return _threshold_row(
        s, "pER: M(N) non-monotone for m < 15, monotone above (γ = 0, α = 1e-3)", 15, s.cusps.per, s.thresholds_per
    )


@_register("gamma05_nonmonotone")
def gamma05_nonmonotone(s: Stages) -> dict:
    """γ = 0.5 (Fig. 2f): non-monotone at small m, monotone at large m."""
    strict5, glob5, strict5_grid, glob5_grid = s.thresholds_er_gamma05
    n10 = s.cusps.er_gamma05[s.batch_index(10)].best_memory
    return _row(
        "γ = 0.5: qualitatively like γ = 0 (non-monotone at small m, monotone at large m)",
        "similar to γ = 0",
        f"with the cusps of M(N): decreasing within {MONOTONE_TOL:g} for all m ≥ {_fmt(strict5['threshold'])}"
        f"{_tolerance_text(s, s.cusps.er_gamma05)}; "
        f"non-monotone m: {strict5['nonmonotone_m']}; optimum at N_max for all m ≥ {_fmt(glob5['threshold'])}; "
        f"N*(m = 10) = {n10:.4g}. Grid alone: decreasing within {MONOTONE_TOL:g} for m ≥ "
        f"{_fmt(strict5_grid['threshold'])}, optimum at N_max for m ≥ {_fmt(glob5_grid['threshold'])}",
        _agree(
            len(strict5["nonmonotone_m"]) > 0 and np.isfinite(strict5["threshold"]), len(strict5["nonmonotone_m"]) > 0
        ),
        "theory",
        value=strict5["threshold"],
        global_threshold=glob5["threshold"],
        grid_threshold=strict5_grid["threshold"],
        grid_global_threshold=glob5_grid["threshold"],
    )


# ---------------------------------------------------------------- Fig. 2e: pER vs ER


@_register("per_worse_region_theory")
def per_worse_region_theory(s: Stages) -> dict:
    """Where on the (N, m) grid pER is worse than ER by more than the white band."""
    dM = s.delta_metric
    worse = dM < -WHITE_THRESHOLD
    better = dM > WHITE_THRESHOLD
    NN, mm = np.meshgrid(s.grid_memory, s.grid_batch, indexing="ij")
    if worse.any():
        wN, wm = NN[worse], mm[worse]
        small_cells = (NN <= 250) & (mm <= 10)
        desc = (
            f"pER worse (ΔM < −{WHITE_THRESHOLD:g}) in {worse.mean():.0%} of cells: "
            f"N ∈ [{wN.min():g}, {wN.max():g}], m ∈ [{wm.min():g}, {wm.max():g}] (mean N {wN.mean():.0f} vs grid "
            f"{NN.mean():.0f}, mean m {wm.mean():.1f} vs grid {mm.mean():.1f}); {worse[small_cells].mean():.0%} of "
            f"the cells with N ≤ 250, m ≤ 10 are pER-worse, {worse[~small_cells].mean():.0%} of the others; "
            f"pER better in {better.mean():.0%}, white {(~worse & ~better).mean():.0%}"
        )
        # The paper: pER is worse "when the memory size is small, particularly when the minibatch size is not
        # large". Two tests of the pER-worse share, each of which can fail: smaller N against larger N, and among
        # the smaller N, smaller m against larger m (halves at the grid's medians).
        small_N, small_m = NN <= np.median(s.grid_memory), mm <= np.median(s.grid_batch)
        by_N = (worse[small_N].mean(), worse[~small_N].mean())
        by_m = (worse[small_N & small_m].mean(), worse[small_N & ~small_m].mean())
        desc += (
            f". pER-worse share, N ≤ {np.median(s.grid_memory):g} vs larger: {by_N[0]:.0%} vs {by_N[1]:.0%}; "
            f"among those N, m ≤ {np.median(s.grid_batch):g} vs larger: {by_m[0]:.0%} vs {by_m[1]:.0%}"
        )
        small = bool(by_N[0] > by_N[1] and by_m[0] > by_m[1])
        partly = bool(by_N[0] > by_N[1] or by_m[0] > by_m[1])
    else:
        desc = f"pER never worse by more than {WHITE_THRESHOLD:g}; pER better in {better.mean():.0%} of cells"
        small = partly = False
    return _row(
        "pER is worse than ER for small N with small m (Fig. 2e)",
        "small N and small m",
        desc,
        _agree(small, partly),
        "theory",
        fraction_worse=float(worse.mean()),
        fraction_better=float(better.mean()),
    )


@_register("per_worse_region_experiment")
def per_worse_region_experiment(s: Stages) -> dict:
    """The sign of M_ER − M_pER at the experiment spots against the theory's: the simulation's check of the
    ODE's region map (the paper's region itself is tested on the ODE's grid, :func:`per_worse_region_theory`)."""
    rows = s.per_spot_checks
    spot_txt = "; ".join(f"(N={N}, m={m}): ΔM_exp={d:+.3g}, ΔM_th={dt:+.3g}" for N, m, d, dt in rows if np.isfinite(d))
    sign_ok = [
        np.sign(d) == np.sign(dt) or (abs(d) < WHITE_THRESHOLD and abs(dt) < WHITE_THRESHOLD)
        for _, _, d, dt in rows
        if np.isfinite(d) and np.isfinite(dt)
    ]
    return _row(
        "pER vs ER at spot checks (ΔM = M_ER − M_pER, > 0: pER better): the simulation's sign against the ODE's",
        "(the ODE's region map, Fig. 2e; the paper: pER worse at small N, small m)",
        (spot_txt or "no spot checks") + f" ({s.design.per_seeds} pER / {s.design.er_seeds} ER seeds)",
        _agree(bool(sign_ok) and all(sign_ok), any(sign_ok)),
        "experiment",
        sign_agreement=float(np.mean(sign_ok)) if sign_ok else math.nan,
    )


# ---------------------------------------------------------------- appendix: 1-D closed forms


@_register("fixed_slope_steps")
def fixed_slope_example(s: Stages) -> dict:
    """The fixed-slope example's steps to Δθ/Δθ⁰ = 0.05 (docs/paper_readings.md §2)."""
    a = s.appendix
    return _row(
        "Fixed slope: Δθ/Δθ⁰ = 0.05 after ln 20/(mα) steps, m = 5, α = 2e-5 (docs/paper_readings.md §2)",
        "30,000 steps (printed with α = 5e-5)",
        f"{a.slope_steps:.0f} steps at α = 2e-5 (ln20/(mα) = {math.log(20) / (5 * 2e-5):.0f}); "
        f"{a.slope_steps_printed:.0f} at the printed α = 5e-5",
        _agree(abs(a.slope_steps - 30000) / 30000 < 0.01),
        "theory",
        value=a.slope_steps,
    )


@_register("fixed_intercept_steps")
def fixed_intercept_example(s: Stages) -> dict:
    """The fixed-intercept example's steps to K = ln 20 at the best N."""
    a = s.appendix
    best_a5 = float(np.nanmin(a.steps_fast))
    best_N_a5 = float(a.memory_sizes[int(np.nanargmin(a.steps_fast))])
    best_a2 = float(np.nanmin(a.steps_to_target[a.target]))
    return _row(
        "Fixed intercept: best N reaches Δθ/Δθ⁰ = 0.05 (K = ln 20) in < 1200 steps, m = 5, α = 5e-5",
        "< 1200 steps",
        f"{best_a5:.0f} steps at N* = {best_N_a5:g} (α = 5e-5; every N ≥ {best_N_a5:g} ties: the whole "
        f"history); {best_a2:.0f} steps at α = 2e-5 "
        f"(N* = {optimal_memory(a.memory_sizes, a.steps_to_target[a.target]):g})",
        _agree(best_a5 < 1200, best_a5 < 1400),
        "theory",
        value=best_a5,
        best_memory=best_N_a5,
    )


@_register("optimal_N_vs_K")
def optimal_memory_vs_target(s: Stages) -> dict:
    """The optimal N against the target K: rises, falls abruptly to 1, stays 1."""
    a = s.appendix
    optN = a.optimal_memory
    imax = int(np.nanargmax(optN))
    ones = np.nonzero(optN <= 1.0)[0]
    drop = [i for i in ones if i > imax]
    k_drop = float(a.targets[drop[0]]) if drop else math.nan
    rising = bool(np.all(np.diff(optN[: imax + 1]) >= 0))
    stays = bool(drop) and bool(np.all(optN[drop[0] :] <= 1.0))
    abrupt = bool(drop) and drop[0] == imax + 1
    # Below the drop every N from the smallest optimal N up reaches K at the same step (the memory then holds the
    # whole history): the optimum is that half-line, and N* its smallest member, the one that rises with K.
    tied = a.optimal_memory_largest[: imax + 1] > optN[: imax + 1]
    return _row(
        "Optimal N rises with K, abruptly falls to 1 and stays 1 (fixed intercept, m = 5, α = 2e-5)",
        "rise, abrupt fall to 1, then 1",
        f"max N* = {optN[imax]:g} at K = {a.targets[imax]:g} (N*: the smallest optimal N; every larger N up to "
        f"N_max ties at {int(tied.sum())} of the {imax + 1} K up to it: the memory holds the whole history); "
        f"falls to 1 at K = {_fmt(k_drop)} (rising: {rising}, by construction: below the drop N* is the steps "
        f"to K, which rise with K; abrupt: {abrupt}, stays 1: {stays}); "
        f"N*(K = ln20) = {optimal_memory(a.memory_sizes, a.steps_to_target[a.target]):g}",
        _agree(rising and abrupt and stays, stays),
        "theory",
        k_drop=k_drop,
        max_optimal=float(optN[imax]),
    )


@_register("per_1d_faster")
def per_1d_faster(s: Stages) -> dict:
    """pER's exponent against ER's in the fixed-intercept case."""
    a = s.appendix
    # k_pri − k is an integral of a sum of squares: ≥ 0 by construction, so it cannot test the claim. The
    # test: the ODE itself (pER against ER, intercept frozen), and the closed form against that ODE.
    lead = a.ode_ratio_er[1:] - a.ode_ratio_per[1:]  # > 0: pER is closer to its target
    closed = np.exp(-np.interp(a.ode_times, a.pri_times, a.exponent_per))
    gap = float(np.max(np.abs(closed - a.ode_ratio_per)))
    faster = bool(np.all(lead > 0))
    return _row(
        "Fixed intercept: pER always converges faster than ER (k_pri ≥ k), N = 500, m = 5",
        "k_pri − k > 0 for t > 0",
        f"the ODE: Δθ1/Δθ1⁰ of ER − of pER > 0 at every t ∈ (0, 2000] on a 10-step grid: {faster} (min "
        f"{lead.min():.3g}; at t = 2000: ER {a.ode_ratio_er[-1]:.3g}, pER {a.ode_ratio_per[-1]:.3g}); the closed "
        f"form exp(−k_pri) within {gap:.2g} of it",
        _agree(faster and gap < 1e-4, faster),
        "theory",
        value=float(lead.min()),
    )


# ---------------------------------------------------------------- Fig. 2a narrative


@_register("overshoot_theta1_N100")
def overshoot_theta1_n100(s: Stages) -> dict:
    """When |Δθ1| rises after the first stage at N = 100 (paper: t ≈ 200 → 500)."""
    ov = s.overshoot_100
    if ov.rise:
        r = ov.rise
        ok = abs(r["t10"] - 200) <= 100 and abs(r["end"] - 500) <= 100
        part = r["start"] < 500 and r["end"] > 200
        txt = (
            f"|Δθ1| rises from the first-stage plateau {ov.plateau:.3g} (Eq. BeginningConv) after "
            f"t ≈ {r['start']:.0f} to its peak {r['peak']:.3g} at t = {r['end']:.0f}; slowly at first: "
            f"10% of the rise by t = {r['t10']:.0f}"
        )
        main_iv = (r["t10"], r["end"])
        begins = r["start"]
    else:
        ok = part = False
        txt, main_iv, begins = "|Δθ1| never rises after the first stage", (math.nan, math.nan), math.nan
    return _row(
        "Fig. 2a: θ1 moves away from β1 between t ≈ 200 and 500 (theory, N = 100)",
        "t ≈ 200 → 500",
        txt,
        _agree(ok, part),
        "theory",
        # (the verdict reads the rise from the time 10 % of it is done: |Δθ1| rises from t ≈ 4, slowly)
        start=begins,
        t10=main_iv[0],
        end=main_iv[1],
    )


@_register("overshoot_theta2_N100")
def overshoot_theta2_n100(s: Stages) -> dict:
    """The sign of Δθ2 near t = 600 at N = 100."""
    ov = s.overshoot_100
    d2_600 = float(ov.dtheta[600, 1])
    return _row(
        "Fig. 2a: θ2 overshoots, negative bias Δθ2 < 0 near t = 600 (theory, N = 100)",
        "Δθ2(600) < 0",
        f"Δθ2(600) = {d2_600:+.3g}, θ2(600) = {d2_600 + 0.5:.3g}; Δθ2 < 0 over "
        + (", ".join(f"[{a:.0f}, {b:.0f}]" for a, b in ov.negative) or "never"),
        _agree(d2_600 < 0, bool(ov.negative)),
        "theory",
        value=d2_600,
    )


@_register("overshoot_N1000")
def overshoot_n1000(s: Stages) -> dict:
    """The same narrative at N = 1000 (docs/paper_readings.md §10: it should not fit)."""
    ov = s.overshoot_1000
    d2 = ov.dtheta[600, 1]
    fits1k = ov.rise is not None and bool(ov.rise) and abs(ov.rise["end"] - 500) <= 100 and float(d2) < 0
    return _row(
        "Fig. 2a narrative at N = 1000 instead (docs/paper_readings.md §10: fits N ≈ 100, not 1000)",
        "narrative does not fit N = 1000",
        (f"|Δθ1| peaks at t = {ov.rise['end']:.0f} ({ov.rise['peak']:.3g})" if ov.rise else "|Δθ1| never rises")
        + f"; Δθ2(600) = {d2:+.3g}"
        + (
            ", Δθ2 < 0 over " + ", ".join(f"[{a:.0f}, {b:.0f}]" for a, b in ov.negative)
            if ov.negative
            else ", Δθ2 never < 0"
        ),
        _agree(not fits1k),
        "theory",
        value=float(d2),
    )


# ---------------------------------------------------------------- theory vs experiment


def _agreement_row(s: Stages, errs: dict[Key, tuple[float, float]], nseeds: int, what: str, extra: str = "") -> dict:
    worst = max(v[0] for v in errs.values())
    # Decided after the first 10 steps: before them the gap is the discrete update's own offset from the
    # continuum (0.0096 at α = 0.01, the same in every seed), which sat 4e-4 under the 1e-2 bound and made the
    # verdict flip with the seed count.
    late = max(v[1] for v in errs.values())
    txt = "; ".join(f"N={k[0]}, m={k[1]}, α={k[2]:g}: {v[0]:.2g} ({v[1]:.2g} for t ≥ 10)" for k, v in errs.items())
    return _row(
        f"Theory–experiment agreement, max_t |Δθ_exp − Δθ_ode| ({what}, {nseeds} seeds averaged)",
        "excellent agreement",
        txt + " (decided on t ≥ 10: before, the discrete first steps' offset from the continuum)" + extra,
        _agree(late < 1e-2, late < 3e-2),
        "experiment + theory",
        value=worst,
        late=late,
    )


@_register("agreement_er")
def agreement_er(s: Stages) -> dict:
    """ER experiment against the ODE: curves, and M over the spot grid."""
    return _agreement_row(
        s,
        s.agreement_er,
        s.design.er_seeds,
        "ER, γ = 0",
        f"; max |M_exp − M_ode| over the ER spot grid: {s.spot_error:.2g}",
    )


@_register("agreement_per")
def agreement_per(s: Stages) -> dict:
    """pER experiment against the ODE."""
    return _agreement_row(s, s.agreement_per, s.design.per_seeds, "pER, γ = 0")


@_register("agreement_gamma05")
def agreement_gamma05(s: Stages) -> dict:
    """ER at γ = 0.5 against the ODE."""
    return _agreement_row(s, s.agreement_gamma05, s.design.er_seeds, "ER, γ = 0.5")


# ---------------------------------------------------------------- Fig. 3: aER


@_register("aer_vs_fixed_M")
def aer_vs_fixed_metric(s: Stages) -> dict:
    """aER from N0 = 100 against fixed N = 100, seed-averaged curves."""
    c = s.adaptive
    mean_final = float(s.aer.mean_memory[-1])
    return _row(
        "aER from N0 = 100 beats fixed N = 100 (m = 10, α = 1e-3; k = 20, n_old = 50 assumed)",
        "aER better (no number)",
        f"M_aER = {c.metric:.4g} vs M_fixed = {c.fixed_metric:.4g} (seed-averaged curves, "
        f"{s.design.aer_seeds} seeds); mean final N = {s.aer.mean_memory[-1]:.0f}",
        _agree(c.metric < c.fixed_metric),
        "experiment",
        aer=c.metric,
        fixed=c.fixed_metric,
        mean_final_memory=mean_final,
    )


@_register("aer_seed_fraction")
def aer_seed_fraction(s: Stages) -> dict:
    """The share of seeds in which aER ends below the fixed memory."""
    c = s.adaptive
    return _row(
        "Share of seeds where aER's M is below the averaged fixed-memory M",
        "not given for LineSearch (71% for CartPole)",
        f"{c.fraction:.0%} vs the averaged fixed run; {c.fraction_paired:.0%} paired by seed",
        _agree(c.fraction > 0.5, c.fraction_paired > 0.5),
        "experiment",
        value=c.fraction,
        paired=c.fraction_paired,
    )


@_register("aer_vs_fixed_theory")
def aer_vs_fixed_theory(s: Stages) -> dict:
    """The ODE driven by aER's mean live size n(t) against the fixed-100 ODE (not in the paper)."""
    c = s.adaptive
    return _row(
        "ODE driven by aER's mean live size n(t) vs fixed-100 ODE (not in the paper)",
        "aER better (not computed in the paper)",
        f"M_ode(aER n(t)) = {s.aer.metric:.4g} vs M_ode(N=100) = {c.theory_fixed_metric:.4g}; "
        f"max_t |Δθ_exp,aER − Δθ_ode,driven| = "
        f"{np.nanmax(np.abs(np.nanmean(c.dtheta, 0) - s.aer.dtheta[1:])):.2g}",
        _agree(s.aer.metric < c.theory_fixed_metric),
        "theory",
        aer=s.aer.metric,
        fixed=c.theory_fixed_metric,
    )


CLAIM_IDS = tuple(CLAIMS)
"""The claim ids in the report's order."""
