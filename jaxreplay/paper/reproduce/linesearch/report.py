"""What the reproduction writes besides the figures: ``metric_grid.csv``, ``report.md`` and the headline numbers."""

from __future__ import annotations

import csv
import pathlib

from jaxreplay._files import replacing
from jaxreplay.paper.reproduce.linesearch.figures import FIGURES
from jaxreplay.paper.reproduce.linesearch.settings import (
    AER_K,
    AER_M,
    AER_N0,
    AER_NOLD,
    ALPHA_GRID,
    CSV_COLUMNS,
    MONOTONE_TOL,
    WHITE_THRESHOLD,
    Design,
)
from jaxreplay.paper.reproduce.linesearch.stages import Stages


def metric_rows(s: Stages) -> list[tuple]:
    """The rows of ``metric_grid.csv`` (:data:`CSV_COLUMNS`): every ODE solve, then every experiment
    configuration (M of the seed-averaged curve, ``seeds`` the seeds it averages: those that did not diverge)."""
    rows = []
    for solves, sampler in ((s.er, "uniform"), (s.per, "prioritized")):
        for i, (N, m, a, g) in enumerate(solves.registry.keys):
            rows.append((sampler, g, N, m, a, "theory", float(solves.metric[i]), 0))
    rows.append(("adaptive", 0.0, AER_N0, AER_M, ALPHA_GRID, "theory", s.aer.metric, 0))
    for ex, sampler in ((s.ex_er, "uniform"), (s.ex_per, "prioritized"), (s.ex_aer, "adaptive")):
        for i, (N, m, a, g) in enumerate(ex.registry.keys):
            rows.append((sampler, g, N, m, a, "experiment", ex.metric_at(i), ex.seeds_averaged_at(i)))
    return rows


def write_metric_grid(path: pathlib.Path, rows: list[tuple]) -> pathlib.Path:
    """Write ``rows`` (:func:`metric_rows`) as CSV (floats in full precision)."""
    with replacing(path, text=True, newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            w.writerow([r[0], f"{r[1]:g}", r[2], r[3], f"{r[4]:g}", r[5], repr(float(r[6])), r[7]])
    return path


def diverged(s: Stages) -> dict[str, int]:
    """Diverged experiment runs per sampler."""
    return {name: int(ex.diverged.sum()) for name, ex in (("ER", s.ex_er), ("pER", s.ex_per), ("aER", s.ex_aer))}


def direction_changed(s: Stages) -> int:
    """ODE solves whose θ1 changed sign (the monotone-motion model left)."""
    return int(s.er.changed.sum() + s.per.changed.sum() + s.aer.direction_changed)


def numbers(s: Stages, claims: list[dict]) -> dict:
    """The flat dict of headline numbers: each claim's ``value`` (or ``aer``), then the named ones."""
    by_id = {c["id"]: c for c in claims}
    out = {c["id"]: c.get("value", c.get("aer")) for c in claims}
    er, per, g5 = s.thresholds_er, s.thresholds_per, s.thresholds_er_gamma05
    cusp_sets = (("ER", s.cusps.er), ("pER", s.cusps.per), ("ER_gamma0.5", s.cusps.er_gamma05))
    agreements = (s.agreement_er, s.agreement_per, s.agreement_gamma05)
    c = s.adaptive
    out.update(
        optimal_N_m10=by_id["optimal_N_m10_theory"]["value"],
        optimal_N_m10_experiment=by_id["optimal_N_m10_experiment"]["value"],
    )
    # er_threshold, per_threshold, gamma05_threshold, then the same with _global, _grid, _global_grid.
    for suffix, field in (("", "strict"), ("_global", "glob"), ("_grid", "strict_grid"), ("_global_grid", "glob_grid")):
        for name, thresholds in (("er", er), ("per", per), ("gamma05", g5)):
            out[f"{name}_threshold{suffix}"] = getattr(thresholds, field)["threshold"]
    out.update(
        optimal_N_m10_grid=s.cusps.er[s.batch_index(10)].grid_best_memory,
        optimal_memory={name: [float(x.best_memory) for x in cs] for name, cs in cusp_sets},
        optimal_memory_grid={name: [float(x.grid_best_memory) for x in cs] for name, cs in cusp_sets},
        optimal_metric={name: [float(x.best_metric) for x in cs] for name, cs in cusp_sets},
        optimal_metric_grid={name: [float(x.grid_best_metric) for x in cs] for name, cs in cusp_sets},
        fixed_slope_steps=s.appendix.slope_steps,
        fixed_intercept_best_steps=by_id["fixed_intercept_steps"]["value"],
        fixed_intercept_best_N=by_id["fixed_intercept_steps"]["best_memory"],
        optimal_N_vs_K_drop=by_id["optimal_N_vs_K"]["k_drop"],
        max_error_er=max(v[0] for v in agreements[0].values()),
        max_error_per=max(v[0] for v in agreements[1].values()),
        max_error_gamma05=max(v[0] for v in agreements[2].values()),
        max_error_er_late=max(v[1] for v in agreements[0].values()),
        max_error_per_late=max(v[1] for v in agreements[1].values()),
        aer_M=c.metric,
        fixed_M=c.fixed_metric,
        aer_fraction=c.fraction,
        aer_fraction_paired=c.fraction_paired,
        aer_theory_M=s.aer.metric,
        fixed_theory_M=c.theory_fixed_metric,
        aer_mean_final_memory=float(s.aer.mean_memory[-1]),
        theta1_away_start=by_id["overshoot_theta1_N100"]["start"],
        theta1_away_t10=by_id["overshoot_theta1_N100"]["t10"],
        theta1_away_end=by_id["overshoot_theta1_N100"]["end"],
        dtheta2_600=by_id["overshoot_theta2_N100"]["value"],
        diverged=diverged(s),
        direction_changed=direction_changed(s),
    )
    return out


def report_markdown(
    design: Design, claims, figs, runtime, n_div, n_changed, n_rows, timings, batch_sizes=(), cusp_tables=None
) -> str:
    """The text of ``report.md``: settings, the claims table, the figures, the cusp tables and the stage timings."""

    def cell(s):
        return str(s).replace("|", "\\|").replace("\n", " ")

    lines = [
        "# LineSearch reproduction: Liu & Zou (2018), arXiv:1710.06574",
        "",
        f"Mode `{design.mode}`: theory grid N = {design.grid_memory_sizes[0]}…{design.grid_memory_sizes[-1]} "
        f"({len(design.grid_memory_sizes)} values) × m ∈ {{{', '.join(map(str, design.grid_batch_sizes))}}}; "
        f"experiment seeds per configuration: ER {design.er_seeds}, pER {design.per_seeds}, aER {design.aer_seeds}. "
        f"Runtime {runtime:.0f} s.",
        "",
        "Game: x0 = −5, v = 0.01, β = (0.1, 0.5), θ⁰ = (0, 1), T = 1000, M = |Δθ1(T)| + |Δθ2(T)|. "
        "Theory: the replay ODE (`jaxreplay.paper.theory`, float64); experiment: `jaxreplay.experiments.linesearch`, "
        "M of the seed-averaged curve.",
        "",
        "## Choices where the paper is silent",
        "",
        "- Fig. 2a/2b do not state N: N = 100 (docs/paper_readings.md §10: the overshoot narrative fits N ≈ 100); "
        "N = 1000 is also shown.",
        "- Fig. 2c–2f, Fig. 3 and Fig. 2DExplain use α = 1e-3; Fig. 2a/2b and the γ = 0.5 curves α = 0.01, m = 5.",
        "- γ = 0.5 (the caption's 0.7: docs/paper_readings.md §6): (0.1, 0.5) read as reward weights β; "
        "Δθ from the TD fixed point θ* (docs/paper_readings.md §8).",
        "- pER: P(i) ∝ |δ_i|² (priority exponent 2), TD errors recomputed before every draw.",
        f"- aER on LineSearch: k = {AER_K}, n_old = N0/2 = {AER_NOLD} "
        "(the paper's DQN rule; not given for LineSearch), "
        "exact sums, Algorithm 2 with ε = 0, shrink recompute on the 'new' reading (docs/paper_readings.md §9).",
        "- aER theory (not in the paper): the ODE with window n̄(t), the seed mean of the number of transitions "
        "step t replayed from (the live size, which lags a grown capacity N(t) for k steps).",
        "- Appendix 1-D figures: m = 5, α = 2e-5 (Fig. 1DLearning's values) also for steps-to-K and optimal N vs K; "
        "the target Δθ/Δθ⁰ = 0.05 is K = ln 20 ≈ 3.00. Fixed-slope example: α = 2e-5 (docs/paper_readings.md §2); "
        "fixed-intercept example: α = 5e-5.",
        f"- Monotonicity: M(N) is decreasing within {MONOTONE_TOL:g} when it never rises more than that above its "
        f"lowest value at a smaller N, and has its optimum at N_max when M(N_max) − min_N M ≤ {MONOTONE_TOL:g} "
        "(over the grid and the cusps of M(N), where a component of Δθ(T) changes sign, located in continuous N); "
        f"Fig. 2e white band |M_ER − M_pER| < {WHITE_THRESHOLD:g}.",
        "",
        "## Claims",
        "",
        "| claim | paper | ours | agrees? | source |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in claims:
        lines.append(f"| {cell(c['claim'])} | {cell(c['paper'])} | {cell(c['ours'])} | {c['agrees']} | {c['source']} |")
    lines += [
        "",
        f"Diverged experiment runs: {n_div}. "
        f"ODE solves whose θ1 changed sign (monotone-motion model left): {n_changed}.",
        f"`metric_grid.csv`: {n_rows} rows (columns {', '.join(CSV_COLUMNS)}).",
        "",
        "## Figures",
        "",
    ]
    for name, desc in FIGURES.items():
        if name in figs:
            lines.append(f"- `{name}`: {desc}")
    for title, cusps in (cusp_tables or {}).items():
        lines += [
            "",
            f"## Cusps of M(N): {title}, α = {ALPHA_GRID:g} (theory)",
            "",
            "Sign changes of Δθ1(T) / Δθ2(T) between grid neighbours, refined in continuous N "
            "(`jaxreplay.paper.theory.memory_cusps`); the optimum is over the grid and these cusps.",
            "",
            "| m | cusps: N (component) | optimum N*, M* | grid alone N*, M* | M(N_max) |",
            "| --- | --- | --- | --- | --- |",
        ]
        for m, c in zip(batch_sizes, cusps):
            where = ", ".join(f"{x:.1f} (Δθ{k + 1})" for x, k in zip(c.cusp_memory, c.cusp_component)) or "none"
            lines.append(
                f"| {int(m)} | {where} | {c.best_memory:.5g}, {c.best_metric:.2g} | "
                f"{c.grid_best_memory:g}, {c.grid_best_metric:.2g} | {c.grid_metric[-1]:.2g} |"
            )
    lines += ["", "## Stage timings (s)", ""]
    lines += [f"- {k}: {v:.1f}" for k, v in timings.items()]
    return "\n".join(lines) + "\n"
