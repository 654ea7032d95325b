"""Reproduction of every LineSearch figure and claim of Liu & Zou (2018, arXiv:1710.06574).

Entry point: :func:`reproduce` (``jaxreplay reproduce linesearch --out DIR [--full]``).
It writes into ``out_dir``:

* one PNG per (sub)figure (theory as lines, experiment as markers where the
  paper has both), see :data:`FIGURES`;
* ``metric_grid.csv``: tidy table of the final metric
  M = |Δθ1(T)| + |Δθ2(T)| with the columns :data:`CSV_COLUMNS` (theory rows:
  every ODE solve, including the contour grids; experiment rows: M of the
  seed-averaged curve, ``seeds`` = the seeds it averages: those that did not diverge);
* ``report.md``: each quantitative claim of the paper next to our number.

Modes (``mode=`` or ``full=True``):

* ``"default"``: coarse grids (N step 30, 20 values of m), 32 ER/aER seeds,
  8 pER seeds; about 50 s on a 2-core CPU including compiles (budget: 2 min).
* ``"full"``: the paper's resolution (N = 10 … 1000 step 10, m = 1 … 50),
  128 ER/aER seeds, 32 pER seeds, a finer experiment spot grid.
* ``"tiny"``: for tests only (a handful of grid points, 2/1 seeds).

Cost structure: every distinct experiment ``Setup`` and every distinct shape of
a theory solve is one XLA compile (2–10 s each on CPU, tracing included), so all
ER theory requests go through one :func:`jaxreplay.paper.theory.solve_grid` call, all
pER ones through another (each in fixed batches of
:data:`jaxreplay.paper.theory.cusps.CHUNK` configurations, the compile that the cusp
refinement reuses), and all ER experiments through one uniform ``Setup``
(``max_batch_size=50``, masking handles m < 50); pER and aER have one Setup each.
The appendix's 1-D results use the closed forms of
:mod:`jaxreplay.paper.theory.analytic` (no compile).
Records on demand: each experiment sweep keeps only the records read (Δθ per
seed; aER's memory size too), and on an accelerator the ER spot checks keep
Δθ(T) alone (:func:`~jaxreplay.paper.reproduce.linesearch.stages.er_per.finals_apart`);
the numbers are bit-identical either way (``benchmarks/README.md``).

Cusps of M(N): where a component of Δθ(T) changes sign between two grid
memory sizes, M(N) has a V-shaped dip (for m ≥ 5 both components vanish at
nearly the same N ≈ 95–330, so M falls to ~1e-9 there) that an N grid steps
over. :func:`jaxreplay.paper.theory.memory_cusps` brackets those sign changes on the
contour grid and refines them in continuous N (about ten batched solves each
for ER and pER, no extra compile); the optimal N per m (Fig. 2d and
the contour stars), Fig. 2c's curves and the monotonicity/boundary claims use
the grid plus the cusps, and the boundary claims also state the grid-only
boundary.

Choices where the paper is silent (also listed in the report):

* Fig. 2a/2b do not state N: N = 100 (docs/paper_readings.md §10: the narrative fits it);
  N = 1000 is shown as well. Fig. 2c–2f use α = 1e-3 (text).
* γ = 0.5 (docs/paper_readings.md §6): the real weights (0.1, 0.5) are read as reward weights
  β (the appendix's wording; ``Setup.weights="reward"``); Δθ is measured from
  the TD fixed point θ* (§8). Its learning curves use N = 100 and 1000.
* pER uses priority exponent β = 2 (the theory's pER model, P ∝ |δ|²).
* aER on LineSearch: k = 20 and n_old = N0/2 = 50 (the paper's DQN rule;
  not given for LineSearch), exact sums, Algorithm 2 with ε = 0 and the "new"
  shrink reading (the library defaults).
* The appendix's 1-D figures (fixed intercept) use m = 5, α = 2e-5 (the
  values given for Fig. 1DLearning) for Fig. 1DStepsVsSize/1DOptSize too, and
  the target "Δθ/Δθ⁰ = 0.05", i.e. K = ln 20 ≈ 3.
* The ODE of aER is driven by the seed mean of the number of transitions each
  step replayed from (the live size), not by its capacity N(t): after a growth
  the real buffer holds fewer than N(t) transitions for k steps.

Layout: :mod:`~jaxreplay.paper.reproduce.linesearch.settings` (constants, the
:class:`Design` of each mode), :mod:`~jaxreplay.paper.reproduce.linesearch.numerics`
(NumPy helpers on the closed forms), :mod:`~jaxreplay.paper.reproduce.linesearch.stages`
(the ordered stage list, one function per computing stage in a module per
figure group, each returning a named result, gathered in
:class:`~jaxreplay.paper.reproduce.linesearch.stages.Stages`),
:mod:`~jaxreplay.paper.reproduce.linesearch.claims` (:data:`CLAIMS`: one function
per claim, registered under its id), :mod:`~jaxreplay.paper.reproduce.linesearch.figures`
(:data:`FIGURES` and :data:`FIGURE_MAKERS`) and
:mod:`~jaxreplay.paper.reproduce.linesearch.report` (CSV, report, numbers).
"""

from __future__ import annotations

from jaxreplay import _extras  # noqa: E402

_extras.require("jaxreplay.paper.reproduce.linesearch", "paper")

import dataclasses  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402

from jaxreplay._files import atomic_write_text  # noqa: E402
from jaxreplay.paper.reproduce.linesearch import claims as _claims  # noqa: E402
from jaxreplay.paper.reproduce.linesearch import report as _report  # noqa: E402
from jaxreplay.paper.reproduce.linesearch.claims import CLAIM_IDS, CLAIMS  # noqa: E402
from jaxreplay.paper.reproduce.linesearch.figures import FIGURE_MAKERS, FIGURES  # noqa: E402
from jaxreplay.paper.reproduce.linesearch.numerics import (  # noqa: E402
    first_crossing,
    fixed_slope_steps,
    monotone_threshold,
    nonmonotone,
    optimal_memory,
    prioritized_exponent_1d,
    seed_average_metric,
    steps_to_exponent,
    true_intervals,
)
from jaxreplay.paper.reproduce.linesearch.settings import (  # noqa: E402
    AER_K,
    AER_M,
    AER_N0,
    AER_NOLD,
    ALPHA_1D,
    ALPHA_CURVES,
    ALPHA_GRID,
    CSV_COLUMNS,
    EXPLAIN_MEMORY,
    FIG1D_MEMORY,
    GAMMA_NONZERO,
    M_1D,
    M_CURVES,
    MODES,
    MONOTONE_TOL,
    PRIORITY_EXPONENT,
    TARGET_RATIO,
    WHITE_THRESHOLD,
    Design,
    T,
    design,
)
from jaxreplay.paper.reproduce.linesearch.stages import STAGE_NAMES, StageClock, Stages, run_stages  # noqa: E402

__all__ = [
    "CSV_COLUMNS",
    "CLAIM_IDS",
    "CLAIMS",
    "FIGURES",
    "FIGURE_MAKERS",
    "MODES",
    "STAGE_NAMES",
    "Design",
    "Stages",
    "design",
    "run_stages",
    "reproduce",
    "first_crossing",
    "steps_to_exponent",
    "fixed_slope_steps",
    "prioritized_exponent_1d",
    "optimal_memory",
    "nonmonotone",
    "monotone_threshold",
    "true_intervals",
    "seed_average_metric",
    # the settings of the figures (module constants)
    "T",
    "ALPHA_GRID",
    "ALPHA_CURVES",
    "M_CURVES",
    "GAMMA_NONZERO",
    "PRIORITY_EXPONENT",
    "WHITE_THRESHOLD",
    "MONOTONE_TOL",
    "AER_N0",
    "AER_M",
    "AER_K",
    "AER_NOLD",
    "ALPHA_1D",
    "M_1D",
    "TARGET_RATIO",
    "EXPLAIN_MEMORY",
    "FIG1D_MEMORY",
]


def reproduce(
    out_dir: str | pathlib.Path,
    *,
    full: bool = False,
    seeds: int | None = None,
    progress: bool = True,
    mode: str | None = None,
    seed: int = 0,
) -> dict:
    """Reproduce every LineSearch figure and claim of the paper into ``out_dir``.

    Args:
        out_dir: output folder (created): the PNGs of :data:`FIGURES`,
            ``metric_grid.csv`` (columns :data:`CSV_COLUMNS`) and ``report.md``.
        full: the paper's resolution (N step 10, m = 1 … 50, 128/32 seeds);
            shorthand for ``mode="full"``.
        seeds: ER and aER seeds per configuration (pER gets ``max(1, seeds // 4)``);
            None: the mode's default (32/8 default, 128/32 full).
        progress: show a tqdm bar over the stages.
        mode: ``"default"``, ``"full"`` or ``"tiny"`` (tests only); overrides ``full``.
        seed: base PRNG seed of the experiments.

    Returns:
        A dict: ``out_dir``, ``mode``, ``runtime_s``, ``figures`` (name → path),
        ``csv``, ``report``, ``claims`` (list of dicts: id, claim, paper,
        ours, agrees, source, and the numbers behind them, see :data:`CLAIMS`),
        ``numbers`` (a flat dict of the headline numbers), ``stage_seconds``,
        ``plan`` (the :class:`Design`, under the key that the committed
        ``summary.json`` files use) and ``sweeps`` (per experiment sweep: ``name``, ``record`` (what
        it kept, records on demand), ``runs``, ``result_bytes_per_run``).
    """
    from jaxreplay.paper import plots

    t_start = time.perf_counter()
    mode = mode or ("full" if full else "default")
    chosen = design(mode, seeds)
    from jaxreplay.paper.reproduce.study.writer import writing

    # One writer at a time (another call's files would mix with this one's).
    with writing(out_dir, "reproduce linesearch", (*FIGURE_MAKERS, "metric_grid.csv", "report.md")) as (out, clear):
        clock = StageClock(progress)
        for need in (5, 10, 40):
            if need not in chosen.grid_batch_sizes or need not in chosen.spot_batch_sizes:
                raise ValueError(f"the design must contain m = {need} in the theory grid and the spot grid")

        stages = run_stages(chosen, seed, clock)
        with clock(STAGE_NAMES[-1]):
            # An earlier run's files go first (report.md is written last): a rerun killed while writing leaves
            # some of its own figures and no report, never its figures beside the earlier run's report.
            clear()
            claims = _claims.evaluate(stages)
            figs = {name: plots.save(make(stages), out / name) for name, make in FIGURE_MAKERS.items()}
            rows = _report.metric_rows(stages)
            csv_path = _report.write_metric_grid(out / "metric_grid.csv", rows)
        runtime = time.perf_counter() - t_start
        clock.bar.close()
        cusp_tables = {
            "ER, γ = 0": stages.cusps.er,
            "pER (β = 2), γ = 0": stages.cusps.per,
            f"ER, γ = {GAMMA_NONZERO:g}": stages.cusps.er_gamma05,
        }
        report_path = out / "report.md"
        atomic_write_text(
            report_path,
            _report.report_markdown(
                chosen,
                claims,
                figs,
                runtime,
                _report.diverged(stages),
                _report.direction_changed(stages),
                len(rows),
                clock.seconds,
                stages.grid_batch,
                cusp_tables,
            ),
        )
        return dict(
            out_dir=str(out),
            mode=mode,
            runtime_s=runtime,
            figures={k: str(v) for k, v in figs.items()},
            csv=str(csv_path),
            report=str(report_path),
            claims=claims,
            numbers=_report.numbers(stages, claims),
            stage_seconds=clock.seconds,
            plan=dataclasses.asdict(chosen),
            sweeps=[r._asdict() for ex in (stages.ex_er, stages.ex_per, stages.ex_aer) for r in ex.sweeps],
        )
