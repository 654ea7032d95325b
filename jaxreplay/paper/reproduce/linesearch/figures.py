"""The figures: :data:`FIGURES` (file name → description) and :data:`FIGURE_MAKERS` (file name → function).

Each maker takes the :class:`~jaxreplay.paper.reproduce.linesearch.stages.Stages`
and returns a Matplotlib figure (:mod:`jaxreplay.paper.plots`); the two
mappings have the same names in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxreplay.paper.reproduce.linesearch.settings import (
    AER_M,
    AER_N0,
    ALPHA_CURVES,
    ALPHA_GRID,
    EXPLAIN_MEMORY,
    GAMMA_NONZERO,
    M_CURVES,
    MONOTONE_TOL,
    WHITE_THRESHOLD,
)
from jaxreplay.paper.reproduce.linesearch.stages import Stages

if TYPE_CHECKING:
    from jaxreplay.paper.theory import MemoryCusps

FIGURES = {
    "fig2a_er_learning_curves_N100.png": (
        "Fig. 2a: ER learning curves, N = 100, m = 5, α = 0.01 (theory lines, experiment markers)"
    ),
    "fig2a_er_learning_curves_N1000.png": "Fig. 2a variant: ER learning curves, N = 1000, m = 5, α = 0.01",
    "fig2b_per_learning_curves_N100.png": "Fig. 2b: pER learning curves, N = 100, m = 5, α = 0.01",
    "fig2b_per_learning_curves_N1000.png": "Fig. 2b variant: pER learning curves, N = 1000, m = 5, α = 0.01",
    "fig2c_metric_vs_memory_size.png": (
        "Fig. 2c (= appendix Fig. 2DMetricVsSize2): M vs N for m = 5, 10, 40, α = 1e-3 (theory lines through the "
        "grid and the cusps of M(N), experiment markers)"
    ),
    "fig2d_contour_er_gamma0.png": (
        "Fig. 2d (= appendix Fig. 2D2D2): M over (N, m), ER, γ = 0, stars at the optimal N per m (grid and cusps "
        "of M(N); hollow: less than 1e-4 below M(N_max))"
    ),
    "fig2e_er_vs_per_map.png": (
        "Fig. 2e: where pER (red) or ER (blue) is better, white where |ΔM| < 1.5e-3 (theory; diamonds: experiment"
        " spot checks)"
    ),
    "fig2f_contour_er_gamma0.5.png": (
        "Fig. 2f: M over (N, m), ER, γ = 0.5 (caption says 0.7: docs/paper_readings.md §6)"
    ),
    "figA1a_exponent_k_fixed_intercept.png": (
        "Appendix Fig. 1DLearning(a): k(t), fixed intercept, N = 1, 50, 500, 1000, m = 5, α = 2e-5"
    ),
    "figA1b_metric_ratio_fixed_intercept.png": "Appendix Fig. 1DLearning(b): Δθ/Δθ⁰ = e^{−k}, same settings",
    "figA2a_steps_to_K_vs_memory_size.png": "Appendix Fig. 1DStepsVsSize: steps to reach k = K vs N (m = 5, α = 2e-5)",
    "figA2b_optimal_memory_vs_K.png": "Appendix Fig. 1DOptSize: optimal N vs target K",
    "figA3_per_vs_er_1d_N500.png": "Appendix Fig. 1DPriLearning: pER vs ER, fixed intercept, N = 500, m = 5, α = 2e-5",
    "figA4b_contour_per_gamma0.png": "Appendix Fig. 2D2DPri: M over (N, m), pER, γ = 0",
    "figA4c_er_minus_per_contour.png": "Appendix Fig. 2DComp: M_ER − M_pER over (N, m)",
    "figA5b_per_vs_er_curves_N100_m10.png": "Appendix Fig. 2DExplain(b): ER vs pER curves, N = 100, m = 10, α = 1e-3",
    "figA5c_per_vs_er_curves_N250_m10.png": "Appendix Fig. 2DExplain(c): ER vs pER curves, N = 250, m = 10, α = 1e-3",
    "figA5d_per_vs_er_curves_N1000_m10.png": "Appendix Fig. 2DExplain(d): ER vs pER curves, N = 1000, m = 10, α = 1e-3",
    "figA6_er_learning_curves_gamma0.5_N100.png": (
        "Appendix Fig. 2DDiscountLearning: ER, γ = 0.5, N = 100, m = 5, α = 0.01"
    ),
    "figA6_er_learning_curves_gamma0.5_N1000.png": "Appendix Fig. 2DDiscountLearning variant: N = 1000",
    "fig3a_aer_learning_curves.png": (
        "Fig. 3a: aER from N0 = 100 (solid) vs fixed N = 100 (dashed), m = 10, α = 1e-3; ODE driven by the mean "
        "live size n(t) (dotted) vs fixed-N ODE"
    ),
    "fig3b_aer_memory_size.png": "Fig. 3b: aER memory size N(t) (mean, 10–90% band, single seeds)",
}
"""File name → what the figure shows (the report's figure list)."""

FigureMaker = Callable[[Stages], Any]

FIGURE_MAKERS: dict[str, FigureMaker] = {}
"""File name → the function drawing it, in :data:`FIGURES`' order."""


def _figure(name: str) -> Callable[[FigureMaker], FigureMaker]:
    def register(fn: FigureMaker) -> FigureMaker:
        FIGURE_MAKERS[name] = fn
        return fn

    return register


def _shallow(cusps: list[MemoryCusps]) -> np.ndarray:
    """Optimum less than MONOTONE_TOL below M(N_max): "monotone" in the claims (hollow stars)."""
    return np.array([c.grid_metric[-1] - c.best_metric <= MONOTONE_TOL for c in cusps])


_SHALLOW_LABEL = f"optimal N, < {MONOTONE_TOL:g} below M(N_max)"


def _learning_curves(N: int) -> tuple[FigureMaker, FigureMaker, FigureMaker]:
    """Fig. 2a (ER), Fig. 2b (pER) and Fig. 2DDiscountLearning (ER, γ = 0.5) at memory size N."""
    key = (N, M_CURVES, ALPHA_CURVES, 0.0)
    key5 = (N, M_CURVES, ALPHA_CURVES, GAMMA_NONZERO)
    return (
        _theory_vs_experiment(key, False, f"Fig. 2a: ER, N = {N}, m = 5, α = 0.01, γ = 0"),
        _theory_vs_experiment(key, True, f"Fig. 2b: pER (β = 2), N = {N}, m = 5, α = 0.01"),
        _theory_vs_experiment(key5, False, f"ER, γ = 0.5 (β = (0.1, 0.5) reward weights), N = {N}, m = 5, α = 0.01"),
    )


def _theory_vs_experiment(key, prioritized: bool, title: str) -> FigureMaker:
    """The ODE's Δθ(t) and the seed-averaged experiment's at ``key``, ER or pER; the title gets the seed count."""
    from jaxreplay.paper import plots

    def make(s: Stages):
        theory, experiment = (s.per, s.ex_per) if prioritized else (s.er, s.ex_er)
        seeds = s.design.per_seeds if prioritized else s.design.er_seeds
        return plots.learning_curves(
            s.times, theory.curve(*key), s.exp_times, experiment.mean(*key), title=f"{title} ({seeds} seeds)"
        )

    return make


def _explain(N: int) -> FigureMaker:
    """Fig. 2DExplain: ER vs pER curves at memory size N, m = 10."""
    from jaxreplay.paper import plots

    key = (N, 10, ALPHA_GRID, 0.0)

    def make(s: Stages):
        return plots.compare_learning_curves(
            s.times,
            {"ER": s.er.curve(*key), "pER": s.per.curve(*key)},
            s.exp_times,
            {"ER": s.ex_er.mean(*key), "pER": s.ex_per.mean(*key)},
            title=f"ER vs pER, N = {N}, m = 10, α = 1e-3 ({s.design.er_seeds}/{s.design.per_seeds} seeds)",
        )

    return make


for _N in (100, 1000):
    _er, _per, _er5 = _learning_curves(_N)
    FIGURE_MAKERS[f"fig2a_er_learning_curves_N{_N}.png"] = _er
    FIGURE_MAKERS[f"fig2b_per_learning_curves_N{_N}.png"] = _per
    FIGURE_MAKERS[f"figA6_er_learning_curves_gamma0.5_N{_N}.png"] = _er5
for _N, _sub in zip(EXPLAIN_MEMORY, "bcd"):
    FIGURE_MAKERS[f"figA5{_sub}_per_vs_er_curves_N{_N}_m10.png"] = _explain(_N)


@_figure("fig2c_metric_vs_memory_size.png")
def metric_vs_memory(s: Stages):
    """Fig. 2c: M(N) through the grid and the cusps (theory), spot-grid experiment markers."""
    from jaxreplay.paper import plots

    return plots.metric_vs_memory(
        s.grid_memory,
        {f"m = {m}": s.cusps.er[s.batch_index(m)].curve() for m in (5, 10, 40)},
        s.spot_memory,
        {f"m = {m}": s.spot_metric[(0.0, m)] for m in (5, 10, 40)},
        title=f"Fig. 2c: M vs N, ER, α = 1e-3, γ = 0 ({s.design.er_seeds} seeds)",
    )


def _contour(s: Stages, metric: np.ndarray, cusps: list[MemoryCusps], title: str):
    """M over the contour grid with the optimal N per m (grid and cusps; hollow where shallow)."""
    from jaxreplay.paper import plots

    return plots.metric_contour(
        s.grid_memory,
        s.grid_batch,
        metric,
        np.array([c.best_memory for c in cusps]),
        title=title,
        shallow=_shallow(cusps),
        shallow_label=_SHALLOW_LABEL,
    )


@_figure("fig2d_contour_er_gamma0.png")
def contour_er(s: Stages):
    """Fig. 2d: M(N, m), ER, γ = 0, with the optimal N per m."""
    return _contour(s, s.metric_er, s.cusps.er, "Fig. 2d: M(N, m), ER, γ = 0, α = 1e-3 (theory)")


@_figure("fig2f_contour_er_gamma0.5.png")
def contour_er_gamma05(s: Stages):
    """Fig. 2f: M(N, m), ER, γ = 0.5."""
    return _contour(s, s.metric_er_gamma05, s.cusps.er_gamma05, "Fig. 2f: M(N, m), ER, γ = 0.5, α = 1e-3 (theory)")


@_figure("fig2e_er_vs_per_map.png")
def er_vs_per_map(s: Stages):
    """Fig. 2e: the sign of M_ER − M_pER, with the experiment spot checks."""
    from jaxreplay.paper import plots

    # Every spot check, a NaN one (every seed diverged) too: comparison_map draws it grey and says so in its
    # legend; filtered out here, it vanished without a word (found by a probe).
    points = [(N, m, d) for N, m, d, _ in s.per_spot_checks]
    return plots.comparison_map(
        s.grid_memory,
        s.grid_batch,
        s.delta_metric,
        WHITE_THRESHOLD,
        experiment_points=points,
        title="Fig. 2e: pER (red) vs ER (blue), α = 1e-3, γ = 0",
    )


@_figure("figA4b_contour_per_gamma0.png")
def contour_per(s: Stages):
    """Appendix Fig. 2D2DPri: M(N, m), pER."""
    return _contour(s, s.metric_per, s.cusps.per, "M(N, m), pER (β = 2), γ = 0, α = 1e-3 (theory)")


@_figure("figA4c_er_minus_per_contour.png")
def er_minus_per(s: Stages):
    """Appendix Fig. 2DComp: M_ER − M_pER."""
    from jaxreplay.paper import plots

    return plots.difference_contour(
        s.grid_memory, s.grid_batch, s.delta_metric, title=r"$M_{ER} - M_{pER}$, γ = 0, α = 1e-3 (theory)"
    )


@_figure("figA1a_exponent_k_fixed_intercept.png")
def exponent_fixed_intercept(s: Stages):
    """Appendix Fig. 1DLearning(a): k(t)."""
    from jaxreplay.paper import plots

    a = s.appendix
    return plots.exponent_curves(
        a.times, {f"N = {N}": k for N, k in a.exponent.items()}, title="Fixed intercept: k(t), m = 5, α = 2e-5"
    )


@_figure("figA1b_metric_ratio_fixed_intercept.png")
def metric_ratio_fixed_intercept(s: Stages):
    """Appendix Fig. 1DLearning(b): Δθ/Δθ⁰ = e^{−k}."""
    from jaxreplay.paper import plots

    a = s.appendix
    return plots.metric_ratio_curves(
        a.times,
        {f"N = {N}": np.exp(-k) for N, k in a.exponent.items()},
        title=r"Fixed intercept: $\Delta\theta/\Delta\theta^0 = e^{-k}$, m = 5, α = 2e-5",
    )


@_figure("figA2a_steps_to_K_vs_memory_size.png")
def steps_vs_memory(s: Stages):
    """Appendix Fig. 1DStepsVsSize: steps to k = K against N."""
    from jaxreplay.paper import plots

    a = s.appendix
    return plots.steps_vs_memory(
        a.memory_sizes,
        {(f"K = {K:g}" if K != a.target else "K = ln 20 ≈ 3.00"): t for K, t in a.steps_to_target.items()},
        title="Fixed intercept: steps to reach k = K, m = 5, α = 2e-5",
    )


@_figure("figA2b_optimal_memory_vs_K.png")
def optimal_memory_vs_target(s: Stages):
    """Appendix Fig. 1DOptSize: the optimal N against K."""
    from jaxreplay.paper import plots

    a = s.appendix
    return plots.optimal_memory_vs_target(
        a.targets,
        a.optimal_memory,
        largest=a.optimal_memory_largest,
        title="Fixed intercept: optimal N vs target K, m = 5, α = 2e-5",
    )


@_figure("figA3_per_vs_er_1d_N500.png")
def per_vs_er_1d(s: Stages):
    """Appendix Fig. 1DPriLearning: pER vs ER, fixed intercept."""
    from jaxreplay.paper import plots

    a = s.appendix
    return plots.prioritized_vs_uniform_1d(
        a.pri_times, np.exp(-a.exponent_er), np.exp(-a.exponent_per), title="Fixed intercept, N = 500, m = 5, α = 2e-5"
    )


@_figure("fig3a_aer_learning_curves.png")
def aer_learning_curves(s: Stages):
    """Fig. 3a: aER vs fixed memory, experiment and ODE."""
    from jaxreplay.paper import plots

    c = s.adaptive
    return plots.adaptive_learning_curves(
        s.exp_times,
        np.nanmean(c.dtheta, 0),
        np.nanmean(c.fixed_dtheta, 0),
        s.times,
        s.aer.dtheta,
        s.er.curve(AER_N0, AER_M, ALPHA_GRID, 0.0),
        title=f"Fig. 3a: aER from N0 = 100 vs fixed 100, m = 10, α = 1e-3 (k = 20, n_old = 50; "
        f"{s.design.aer_seeds} seeds)",
    )


@_figure("fig3b_aer_memory_size.png")
def aer_memory_size(s: Stages):
    """Fig. 3b: aER's memory size N(t)."""
    from jaxreplay.paper import plots

    mem = s.aer.memory_size
    return plots.adaptive_memory(
        s.exp_times,
        s.aer.mean_memory,
        np.percentile(mem, 10, axis=0),
        np.percentile(mem, 90, axis=0),
        samples=list(mem[: min(5, mem.shape[0])]),
        title=f"Fig. 3b: aER memory size from N0 = 100, m = 10, α = 1e-3 ({s.design.aer_seeds} seeds)",
    )


if set(FIGURE_MAKERS) != set(FIGURES):
    raise RuntimeError(f"figures without a maker or a description: {sorted(set(FIGURES) ^ set(FIGURE_MAKERS))}")
FIGURE_MAKERS = {name: FIGURE_MAKERS[name] for name in FIGURES}  # in FIGURES' order
