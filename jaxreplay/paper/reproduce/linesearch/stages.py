"""The computing stages of the reproduction, each a function returning a named result.

:func:`run_stages` runs them in order (ER theory, pER theory, the cusps of M(N),
the appendix's closed forms, the ER / pER / aER experiments, the ODE driven by
aER's memory size) into one :class:`Stages`, which also derives, once and on
demand, the quantities that several claims, figures or the headline numbers
share (the spot-grid metric, the monotone thresholds, the Fig. 2a overshoot,
the theory–experiment errors, aER against a fixed memory).

Cost structure: every distinct experiment ``Setup`` and every distinct shape of
a theory solve is one XLA compile, so all ER theory requests go through one
:func:`jaxreplay.paper.theory.solve_grid` call, all pER ones through another,
and all ER experiments through one uniform ``Setup`` (``max_batch_size=50``,
masking handles m < 50); pER and aER have one Setup each.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from jaxreplay.paper.reproduce.linesearch.numerics import (
    fixed_slope_steps,
    monotone_threshold,
    optimal_memory,
    prioritized_exponent_1d,
    seed_average_metric,
    steps_to_exponent,
    true_intervals,
)
from jaxreplay.paper.reproduce.linesearch.plan import (
    AER_K,
    AER_M,
    AER_N0,
    AER_NOLD,
    ALPHA_1D,
    ALPHA_CURVES,
    ALPHA_GRID,
    EXPLAIN_MEMORY,
    FIG1D_MEMORY,
    GAMMA_NONZERO,
    M_1D,
    M_CURVES,
    PRIORITY_EXPONENT,
    TARGET_RATIO,
    Plan,
    T,
)

if TYPE_CHECKING:
    from jaxreplay.paper.theory import MemoryCusps

Key = tuple[int, int, float, float]
"""One configuration: (N, m, α, γ)."""

STAGE_NAMES = (
    "theory: ER grid + curves",
    "theory: pER grid + curves",
    "theory: cusps of M(N)",
    "appendix closed forms",
    "experiment: ER",
    "experiment: pER",
    "experiment: aER",
    "theory: ODE driven by aER N(t)",
    "claims, figures, CSV, report",
)
"""The stages as the progress bar and the report's timings name them (the last one is :func:`reproduce`'s)."""


# ----------------------------------------------------------------------------
# Configurations and the batched runners
# ----------------------------------------------------------------------------


class Registry:
    """Distinct configurations (N, m, α, γ) collected for one batched call, in order of first request."""

    def __init__(self):
        self.keys: list[Key] = []
        self.index: dict[Key, int] = {}

    @staticmethod
    def key(N, m, alpha, gamma) -> Key:
        """The canonical (int, int, float, float) key of a configuration."""
        return (int(N), int(m), float(alpha), float(gamma))

    def add(self, N, m, alpha, gamma=0.0) -> Key:
        """Request a configuration (once: a repeat keeps its first row); returns its key."""
        k = self.key(N, m, alpha, gamma)
        if k not in self.index:
            self.index[k] = len(self.keys)
            self.keys.append(k)
        return k

    def __contains__(self, k) -> bool:
        return self.key(*k) in self.index

    def __getitem__(self, k) -> int:
        return self.index[self.key(*k)]

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The configurations as float64 columns (N, m, α, γ)."""
        arr = np.array(self.keys, dtype=np.float64).reshape(-1, 4)
        return arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]


class TheorySolves(NamedTuple):
    """The replay ODE solved for every configuration of ``registry`` (float64 NumPy).

    Attributes:
        registry: the configurations, row ``registry[key]`` of the arrays.
        dtheta: Δθ(t) on the reproduction's time grid, [configurations, T + 1, 2].
        metric: M = |Δθ1(T)| + |Δθ2(T)|, [configurations].
        changed: whether θ1 changed sign (the monotone-motion model left), [configurations].
    """

    registry: Registry
    dtheta: np.ndarray
    metric: np.ndarray
    changed: np.ndarray

    def curve(self, N, m, alpha, gamma=0.0) -> np.ndarray:
        """Δθ(t) of one configuration, [T + 1, 2]."""
        return self.dtheta[self.registry[(N, m, alpha, gamma)]]

    def final_metric(self, N, m, alpha, gamma=0.0) -> float:
        """M of one configuration."""
        return float(self.metric[self.registry[(N, m, alpha, gamma)]])

    def grid_metric(self, memory_sizes, batch_sizes, gamma) -> np.ndarray:
        """M over a grid at α = :data:`ALPHA_GRID`, [nN, nm]."""
        return np.array(
            [[self.metric[self.registry[(N, m, ALPHA_GRID, gamma)]] for m in batch_sizes] for N in memory_sizes]
        )

    def grid_final(self, memory_sizes, batch_sizes, gamma) -> np.ndarray:
        """Δθ(T) over a grid at α = :data:`ALPHA_GRID`, [nm, nN, 2]."""
        return np.array(
            [[self.dtheta[self.registry[(N, m, ALPHA_GRID, gamma)], -1, :] for N in memory_sizes] for m in batch_sizes]
        )


class SweepRecord(NamedTuple):
    """What one experiment sweep kept and moved to the host (:class:`jaxreplay.engine.sweep.SweepStats`).

    Attributes:
        name: ``"<sampler>"`` or ``"<sampler>: curves"`` / ``"<sampler>: finals"``.
        record: its :class:`jaxreplay.engine.records.Record` as a table (``{}``: everything, per run).
        runs: configurations × seeds.
        result_bytes_per_run: bytes of the kept results per run.
    """

    name: str
    record: dict
    runs: int
    result_bytes_per_run: int


class Experiments(NamedTuple):
    """Every configuration of ``registry`` × ``seeds`` simulated (common random numbers).

    Records on demand: only the configurations of ``curves`` keep their whole
    per-seed curves; the others (spot checks read through :meth:`metric` alone)
    keep Δθ at steps 1 and T only (``Record(keep=("dtheta",), stride=T - 1)``).
    Everything stays per seed, so every number is the host's float64 mean of
    the same float32 values as when all records were kept.

    Attributes:
        registry: the configurations, row ``registry[key]`` of ``final`` and ``diverged``.
        final: Δθ(T) per seed, NaN for diverged runs, [configurations, seeds, 2].
        diverged: [configurations, seeds].
        curves: the configurations with whole curves, row ``curves[key]`` of ``dtheta`` and ``memory_size``.
        dtheta: Δθ(t) for t = 1 … T, NaN for diverged runs, [curve configurations, seeds, T, 2].
        memory_size: the replay memory's size over time, [curve configurations, seeds, T]
            (None where not kept: it is constant unless aER).
        seeds: the number of seeds.
        sweeps: what each sweep kept and moved (:class:`SweepRecord`).
    """

    registry: Registry
    final: np.ndarray
    diverged: np.ndarray
    curves: Registry
    dtheta: np.ndarray
    memory_size: np.ndarray | None
    seeds: int
    sweeps: tuple[SweepRecord, ...]

    def runs(self, N, m, alpha, gamma=0.0) -> np.ndarray:
        """The per-seed Δθ(t) of one configuration with whole curves, [seeds, T, 2]."""
        key = self.curves.key(N, m, alpha, gamma)
        if key not in self.curves:
            raise KeyError(f"no curves kept for {key}: only Δθ(T) (request it among the stage's curves).")
        return self.dtheta[self.curves[key]]

    def mean(self, N, m, alpha, gamma=0.0) -> np.ndarray:
        """The seed-averaged Δθ(t) of one configuration, [T, 2]."""
        return np.nanmean(self.runs(N, m, alpha, gamma), axis=0)

    def metric(self, N, m, alpha, gamma=0.0) -> float:
        """M of the seed-averaged curve of one configuration."""
        return self.metric_at(self.registry[(N, m, alpha, gamma)])

    def metric_at(self, i: int) -> float:
        """M of the seed-averaged curve of the configuration in row ``i`` of ``registry``."""
        return seed_average_metric(self.final[i][:, None, :])

    @property
    def result_bytes(self) -> int:
        """Bytes of results the sweeps moved to the host (Σ runs × result bytes per run)."""
        return sum(r.runs * r.result_bytes_per_run for r in self.sweeps)


def solve_theory(registry: Registry, prioritized: bool, times: np.ndarray) -> TheorySolves:
    """Every configuration of ``registry`` through one :func:`jaxreplay.paper.theory.solve_grid` call
    (batches of :data:`jaxreplay.paper.theory.cusps.CHUNK`, the compile the cusp refinement reuses)."""
    from jaxreplay.paper import theory

    N, m, a, g = registry.columns()
    sol = theory.solve_grid(
        memory_size=N.astype(np.int64),
        batch_size=m.astype(np.int64),
        step_size=a,
        discount=g,
        priority_exponent=PRIORITY_EXPONENT if prioritized else None,
        times=times,
        options=theory.SolverOptions(chunk=theory.cusps.CHUNK),
    )
    return TheorySolves(
        registry,
        np.stack([np.asarray(sol.dtheta1), np.asarray(sol.dtheta2)], axis=-1),
        np.asarray(sol.metric),
        np.asarray(sol.direction_changed),
    )


def experiment_sweeps(
    registry: Registry, setup: Any, seeds: int, seed: int, curves: Registry | None = None, memory: bool = False, **fixed
) -> list[tuple[str, Any, list[Key]]]:
    """The :class:`~jaxreplay.engine.sweep.Sweep` s of :func:`run_experiments`, each with its name and keys.

    Records on demand (:class:`jaxreplay.engine.records.Record`): the configurations
    of ``curves`` (None: all of them) keep Δθ at every step, per seed (and the
    memory size too where ``memory``); the others keep Δθ at steps 1 and T only
    (stride T − 1), per seed, which is all that M of the seed-averaged curve
    reads. Nothing is reduced on the device: claims read per-seed values (the
    share of winning seeds, paired by seed) and NaN-aware host means.
    """
    from jaxreplay.engine import sweep as sweep_lib
    from jaxreplay.engine.records import Record

    def sweep(keys: list[Key], record: Record):
        points = [
            {"memory_size": int(n), "batch_size": int(b), "step_size": float(al), "discount": float(ga)}
            for n, b, al, ga in keys
        ]
        return sweep_lib.Sweep(
            "linesearch",
            seeds=seeds,
            seed=seed,
            setup=setup,
            fixed={k: np.asarray(v).item() for k, v in fixed.items()},
            points=points,
            record=record,
        )

    whole = Record(keep=("dtheta", "capacity") if memory else ("dtheta",))
    curve_keys = [k for k in registry.keys if curves is None or k in curves]
    final_keys = [k for k in registry.keys if k not in curve_keys]
    name = setup.sampler
    if not final_keys:
        return [(name, sweep(curve_keys, whole), curve_keys)]
    finals = Record(keep=("dtheta",), stride=max(T - 1, 1))
    out = [(f"{name}: curves", sweep(curve_keys, whole), curve_keys)] if curve_keys else []
    return out + [(f"{name}: finals", sweep(final_keys, finals), final_keys)]


def run_experiments(
    registry: Registry,
    setup: Any,
    seeds: int,
    chunk: int,
    seed: int,
    curves: Registry | None = None,
    memory: bool = False,
    **fixed: Any,
) -> Experiments:
    """Every configuration of ``registry`` × ``seeds`` through the sweep engine (common random numbers).

    The sweeps of :func:`experiment_sweeps` (whole curves for ``curves``, None: all;
    Δθ(T) alone for the rest), kept in memory (the reproduction is a one-minute
    job; its labeled numbers go to the CSV).
    """
    from jaxreplay.engine import sweep as sweep_lib

    n = len(registry.keys)
    final = np.full((n, seeds, 2), np.nan)
    diverged = np.zeros((n, seeds), dtype=bool)
    curve_reg, dtheta, memory_size = Registry(), np.zeros((0, seeds, T, 2)), None
    done = []
    for name, sweep, keys in experiment_sweeps(registry, setup, seeds, seed, curves, memory, **fixed):
        result = sweep_lib.run(sweep, None, chunk_size=chunk, progress=False)
        ds = result.dataset
        div = ds.diverged.values
        d = np.where(div[..., None, None], np.nan, ds.dtheta.values.astype(np.float64))
        if int(ds.step.values[-1]) != T:
            raise RuntimeError(f"sweep {name!r} kept up to step {int(ds.step.values[-1])}, not T = {T}.")
        rows = [registry[k] for k in keys]
        final[rows] = d[:, :, -1, :]
        diverged[rows] = div
        if sweep.record.stride == 1:  # whole curves
            for k in keys:
                curve_reg.add(*k)
            dtheta = d
            if memory:
                memory_size = ds.capacity.values
        stats = result.stats
        done.append(SweepRecord(name, sweep.record.to_table(), stats.runs, stats.result_bytes_per_run))
    return Experiments(registry, final, diverged, curve_reg, dtheta, memory_size, seeds, tuple(done))


# ----------------------------------------------------------------------------
# The stages
# ----------------------------------------------------------------------------


def theory_er(plan: Plan, times: np.ndarray) -> TheorySolves:
    """ER theory (stage 1): the contour grids at γ = 0 and 0.5, Fig. 2a's and the γ = 0.5 curves,
    the experiment spots, the pER spots and aER's fixed-memory twin, in one batched solve."""
    reg = Registry()
    for g in (0.0, GAMMA_NONZERO):
        for N in plan.grid_memory_sizes:
            for m in plan.grid_batch_sizes:
                reg.add(N, m, ALPHA_GRID, g)
    for N in (100, 1000):
        reg.add(N, M_CURVES, ALPHA_CURVES, 0.0)
        reg.add(N, M_CURVES, ALPHA_CURVES, GAMMA_NONZERO)
    for N in EXPLAIN_MEMORY + tuple(plan.spot_memory_sizes):
        for m in plan.spot_batch_sizes:
            for g in (0.0, GAMMA_NONZERO):
                reg.add(N, m, ALPHA_GRID, g)
    for N, m in plan.per_spots:
        reg.add(N, m, ALPHA_GRID, 0.0)
    reg.add(AER_N0, AER_M, ALPHA_GRID, 0.0)
    return solve_theory(reg, False, times)


def theory_per(plan: Plan, times: np.ndarray) -> TheorySolves:
    """pER theory (stage 2, β = 2, γ = 0): the contour grid, Fig. 2b's curves, Fig. 2DExplain's and the spots."""
    reg = Registry()
    for N in plan.grid_memory_sizes:
        for m in plan.grid_batch_sizes:
            reg.add(N, m, ALPHA_GRID, 0.0)
    for key in _per_experiment_keys(plan):
        reg.add(*key)
    return solve_theory(reg, True, times)


class Cusps(NamedTuple):
    """The cusps of M(N) per grid m (:class:`jaxreplay.paper.theory.MemoryCusps`, one per ``plan.grid_batch_sizes``)."""

    er: list[MemoryCusps]  # ER, γ = 0
    er_gamma05: list[MemoryCusps]  # ER, γ = GAMMA_NONZERO
    per: list[MemoryCusps]  # pER, γ = 0


def cusps(plan: Plan, er: TheorySolves, per: TheorySolves) -> Cusps:
    """Stage 3: sign changes of Δθ(T) between grid neighbours, refined in continuous N
    (:func:`jaxreplay.paper.theory.memory_cusps`, no extra compile)."""
    from jaxreplay.paper import theory

    gridN, gridm = np.asarray(plan.grid_memory_sizes), np.asarray(plan.grid_batch_sizes)
    nm = len(gridm)
    both = theory.memory_cusps(
        np.concatenate([gridm, gridm]),
        ALPHA_GRID,
        np.repeat([0.0, GAMMA_NONZERO], nm),
        memory_sizes=gridN,
        grid_dtheta=np.concatenate([er.grid_final(gridN, gridm, 0.0), er.grid_final(gridN, gridm, GAMMA_NONZERO)]),
    )
    per_cusps = theory.memory_cusps(
        gridm, ALPHA_GRID, 0.0, PRIORITY_EXPONENT, memory_sizes=gridN, grid_dtheta=per.grid_final(gridN, gridm, 0.0)
    )
    # Several batch sizes in, a list of MemoryCusps out (one per batch size).
    assert isinstance(both, list) and isinstance(per_cusps, list)
    return Cusps(both[:nm], both[nm:], per_cusps)


class Appendix(NamedTuple):
    """The appendix's 1-D results (fixed intercept / fixed slope), from the closed forms.

    Attributes:
        times: t of Fig. 1DLearning, 0 … 2000.
        exponent: N → k(t) for N in :data:`FIG1D_MEMORY` (m = 5, α = 2e-5).
        target: the main target K = ln 20 (Δθ/Δθ⁰ = 0.05).
        memory_sizes: the N of the steps-to-K analysis.
        steps_to_target: K → steps to reach k = K per N, for the plotted K.
        targets: the K of the optimal-N-vs-K curve.
        optimal_memory: the optimal N per target.
        steps_fast: steps to K = ln 20 per N at α = 5e-5.
        slope_steps: steps of the fixed-slope example at α = 2e-5.
        slope_steps_printed: the same at the printed α = 5e-5.
        pri_times: the fine t grid of Fig. 1DPriLearning.
        exponent_er, exponent_per: k(t) and k_pri(t) at N = 500.
    """

    times: np.ndarray
    exponent: dict[int, np.ndarray]
    target: float
    memory_sizes: np.ndarray
    steps_to_target: dict[float, np.ndarray]
    targets: np.ndarray
    optimal_memory: np.ndarray
    steps_fast: np.ndarray
    slope_steps: float
    slope_steps_printed: float
    pri_times: np.ndarray
    exponent_er: np.ndarray
    exponent_per: np.ndarray


def appendix(plan: Plan) -> Appendix:
    """Stage 4: the appendix's closed forms (no compile)."""
    from jaxreplay.paper import theory

    t1d = np.linspace(0.0, 2000.0, 2001)
    k_curves = {N: np.asarray(theory.fixed_intercept_exponent(t1d, N, M_1D, ALPHA_1D)) for N in FIG1D_MEMORY}
    K_main = math.log(1.0 / TARGET_RATIO)
    appN = np.asarray(plan.appendix_memory_sizes, dtype=np.float64)
    steps_K = {K: steps_to_exponent(K, appN) for K in (0.5, 1.0, 1.25, 2.0, K_main, 5.0)}
    targets = np.asarray(plan.appendix_targets, dtype=np.float64)
    steps_grid = steps_to_exponent(targets[:, None], appN[None, :])  # [nK, nN]
    t_pri = np.linspace(0.0, 2000.0, 20001)
    k_er1d, k_per1d = prioritized_exponent_1d(t_pri, 500, M_1D, ALPHA_1D)
    return Appendix(
        times=t1d,
        exponent=k_curves,
        target=K_main,
        memory_sizes=appN,
        steps_to_target=steps_K,
        targets=targets,
        optimal_memory=optimal_memory(appN, steps_grid.T),
        steps_fast=steps_to_exponent(K_main, appN, M_1D, 5e-5),
        slope_steps=float(fixed_slope_steps(TARGET_RATIO, M_1D, 2e-5)),
        slope_steps_printed=float(fixed_slope_steps(TARGET_RATIO, M_1D, 5e-5)),
        pri_times=t_pri,
        exponent_er=k_er1d,
        exponent_per=k_per1d,
    )


def er_curves() -> Registry:
    """The ER configurations whose whole per-seed curves the claims and figures read: Fig. 2a's and
    the γ = 0.5 curves, Fig. 2DExplain's and aER's fixed-memory twin (Fig. 3a, the seeds it wins)."""
    reg = Registry()
    for N in (100, 1000):
        reg.add(N, M_CURVES, ALPHA_CURVES, 0.0)
        reg.add(N, M_CURVES, ALPHA_CURVES, GAMMA_NONZERO)
    for N in EXPLAIN_MEMORY:
        reg.add(N, 10, ALPHA_GRID, 0.0)
    reg.add(AER_N0, AER_M, ALPHA_GRID, 0.0)
    return reg


def finals_apart() -> bool:
    """Whether the ER spot checks run as a sweep of their own that keeps Δθ(T) alone: on an accelerator.

    Both ER sweeps keep the chunk size ``plan.er_chunk`` (the same program
    shape, so every number is bit-identical either way), and the split costs
    one more, padded, chunk. On a GPU a chunk's kernel is a fraction of what
    moving and assembling its per-step records costs, so the split
    saves most of the stage; on the CPU the records are already in host memory
    and the extra chunk is the larger cost (7 s in default mode on 2 cores).
    """
    import jax

    return jax.default_backend() != "cpu"


def experiment_er(plan: Plan, seed: int, apart: bool | None = None) -> Experiments:
    """Stage 5: the ER experiments (Fig. 2a and γ = 0.5 curves, both spot grids, Fig. 2DExplain, pER spots).

    Δθ only (no capacity: it is constant); with ``apart`` (None: :func:`finals_apart`)
    whole curves only for :func:`er_curves` and Δθ(T) alone for the spot checks."""
    from jaxreplay.experiments import linesearch as ls

    setup = ls.Setup(steps=T, max_capacity=1000, max_batch_size=50, sampler="uniform")
    reg = Registry()
    for N in (100, 1000):
        reg.add(N, M_CURVES, ALPHA_CURVES, 0.0)
        reg.add(N, M_CURVES, ALPHA_CURVES, GAMMA_NONZERO)
    for g in (0.0, GAMMA_NONZERO):
        for N in plan.spot_memory_sizes:
            for m in plan.spot_batch_sizes:
                reg.add(N, m, ALPHA_GRID, g)
    for N in EXPLAIN_MEMORY:
        reg.add(N, 10, ALPHA_GRID, 0.0)
    for N, m in plan.per_spots:
        reg.add(N, m, ALPHA_GRID, 0.0)
    apart = finals_apart() if apart is None else apart
    return run_experiments(reg, setup, plan.er_seeds, plan.er_chunk, seed, curves=er_curves() if apart else None)


def experiment_per(plan: Plan, seed: int) -> Experiments:
    """Stage 6: the pER experiments (β = 2; Fig. 2b, Fig. 2DExplain, the pER spots)."""
    from jaxreplay.experiments import linesearch as ls

    setup = ls.Setup(steps=T, max_capacity=1000, max_batch_size=10, sampler="prioritized")
    reg = Registry()
    for key in _per_experiment_keys(plan):
        reg.add(*key)
    return run_experiments(
        reg, setup, plan.per_seeds, plan.per_chunk, seed, priority_exponent=np.float32(PRIORITY_EXPONENT)
    )


def experiment_aer(plan: Plan, seed: int) -> Experiments:
    """Stage 7: aER from N0 = 100 (m = 10, α = 1e-3, k = 20, n_old = 50)."""
    from jaxreplay.experiments import linesearch as ls

    setup = ls.Setup(steps=T, max_capacity=1000, max_batch_size=AER_M, sampler="adaptive", max_num_old=AER_NOLD)
    reg = Registry()
    reg.add(AER_N0, AER_M, ALPHA_GRID, 0.0)
    return run_experiments(
        reg,
        setup,
        plan.aer_seeds,
        plan.er_chunk,
        seed,
        memory=True,
        adaptive_interval=np.int32(AER_K),
        adaptive_num_old=np.int32(AER_NOLD),
    )


class AdaptiveTheory(NamedTuple):
    """The ODE driven by aER's seed-mean memory size N̄(t) (window n(t) = min(t, N̄(t))).

    Attributes:
        memory_size: aER's memory size per seed, [seeds, T].
        mean_memory: N̄(t), [T].
        dtheta: Δθ(t) of the driven ODE, [T + 1, 2].
        metric: its M.
        direction_changed: whether θ1 changed sign.
    """

    memory_size: np.ndarray
    mean_memory: np.ndarray
    dtheta: np.ndarray
    metric: float
    direction_changed: bool


def theory_aer(aer: Experiments, times: np.ndarray) -> AdaptiveTheory:
    """Stage 8: the ODE driven by the mean N(t) of the aER experiment."""
    from jaxreplay.paper import theory

    assert aer.memory_size is not None  # kept by experiment_aer
    mem = aer.memory_size[aer.curves[(AER_N0, AER_M, ALPHA_GRID, 0.0)]].astype(np.float64)  # [seeds, T]
    mean_N = mem.mean(axis=0)
    sched = theory.MemorySizeSchedule(times=np.arange(1.0, T + 1.0), sizes=mean_N)
    sol = theory.solve(memory_size=sched, batch_size=AER_M, step_size=ALPHA_GRID, times=times)
    return AdaptiveTheory(
        mem,
        mean_N,
        np.stack([np.asarray(sol.dtheta1), np.asarray(sol.dtheta2)], axis=-1),
        float(sol.metric),
        bool(sol.direction_changed),
    )


# ----------------------------------------------------------------------------
# Derived quantities shared by claims, figures and numbers
# ----------------------------------------------------------------------------


class Thresholds(NamedTuple):
    """:func:`monotone_threshold` of one set of cusps: with the cusps (strict, global), then on the grid alone."""

    strict: dict
    glob: dict
    strict_grid: dict
    glob_grid: dict


def thresholds(batch_sizes: np.ndarray, cusps: list[MemoryCusps]) -> Thresholds:
    """(strict, global) monotone thresholds with the cusps, then on the grid alone."""
    curves = [c.curve()[1] for c in cusps]
    grid = np.stack([c.grid_metric for c in cusps], axis=1)
    return Thresholds(
        monotone_threshold(batch_sizes, curves, strict=True),
        monotone_threshold(batch_sizes, curves, strict=False),
        monotone_threshold(batch_sizes, grid, strict=True),
        monotone_threshold(batch_sizes, grid, strict=False),
    )


class Overshoot(NamedTuple):
    """Fig. 2a's narrative on one ER curve (m = 5, α = 0.01, γ = 0).

    Attributes:
        dtheta: the theory curve, [T + 1, 2].
        rise: the longest rise of |Δθ1| after the first stage: ``start``, ``end`` (its peak time),
            ``t10`` (10% of the rise above the first-stage plateau) and ``peak``; None if none.
        negative: the intervals where Δθ2 < 0.
        plateau: the first-stage plateau of |Δθ1| (Eq. BeginningConv).
    """

    dtheta: np.ndarray
    rise: dict | None
    negative: list[tuple[float, float]]
    plateau: float


def overshoot(er: TheorySolves, times: np.ndarray, N: int) -> Overshoot:
    """Rise of |Δθ1| after the first stage and the Δθ2 < 0 intervals of the N curve."""
    from jaxreplay.paper import theory

    plateau1, _ = (float(x) for x in theory.first_stage_limit(-0.1, 0.5))  # Eq. (BeginningConv)
    dth = er.curve(N, M_CURVES, ALPHA_CURVES, 0.0)
    a1 = np.abs(dth[:, 0])
    t_fs = 5.0 / (M_CURVES * ALPHA_CURVES * (25.0 + 1.0))  # 5 first-stage relaxation times
    rising_t = (np.gradient(a1, times) > 0) & (times > t_fs)
    iv = [iv for iv in true_intervals(times, rising_t) if iv[1] - iv[0] >= 10]
    neg = true_intervals(times, dth[:, 1] < 0)
    if not iv:
        return Overshoot(dth, None, neg, plateau1)
    start, end = max(iv, key=lambda iv: iv[1] - iv[0])
    sel = (times >= start) & (times <= end)
    peak = float(a1[sel].max())
    t10 = float(times[sel][np.argmax(a1[sel] - plateau1 >= 0.1 * (peak - plateau1))])
    return Overshoot(dth, dict(start=start, end=end, t10=t10, peak=peak), neg, plateau1)


def agreement(theory_solves: TheorySolves, experiments: Experiments, keys: list[Key]) -> dict[Key, tuple[float, float]]:
    """key -> (max_t error, max error over t ≥ 10, i.e. after the discrete first steps)."""
    errs = {}
    for key in keys:
        e = experiments.mean(*key)
        o = theory_solves.curve(*key)[1:]
        diff = np.abs(e - o)
        errs[key] = (float(np.nanmax(diff)), float(np.nanmax(diff[9:])))
    return errs


def _learning_curve_keys(gamma: float) -> list[Key]:
    """Fig. 2a/2b's learning curves (N = 100 and 1000, m = 5, α = 0.01) at discount ``gamma``."""
    return [(N, M_CURVES, ALPHA_CURVES, gamma) for N in (100, 1000)]


def _explain_keys() -> list[Key]:
    """Fig. 2DExplain's curves (m = 10, α = 1e-3, γ = 0)."""
    return [(N, 10, ALPHA_GRID, 0.0) for N in EXPLAIN_MEMORY]


def _per_experiment_keys(plan: Plan) -> list[Key]:
    """The pER configurations simulated (stage 6) and solved beside the grid (stage 2): Fig. 2b's
    curves, Fig. 2DExplain's and the plan's pER spots, all at γ = 0."""
    return _learning_curve_keys(0.0) + _explain_keys() + [(N, m, ALPHA_GRID, 0.0) for N, m in plan.per_spots]


class AdaptiveComparison(NamedTuple):
    """aER from N0 = 100 against fixed N = 100 (m = 10, α = 1e-3).

    Attributes:
        metric, fixed_metric: M of the seed-averaged aER and fixed-memory curves.
        dtheta, fixed_dtheta: the per-seed curves, [seeds, T, 2].
        fraction, fraction_paired: the share of seeds whose M is below the averaged fixed M,
            and below the fixed M of the same seed.
        theory_fixed_metric: M of the fixed-memory ODE.
    """

    metric: float
    fixed_metric: float
    dtheta: np.ndarray
    fixed_dtheta: np.ndarray
    fraction: float
    fraction_paired: float
    theory_fixed_metric: float


def adaptive_comparison(er: TheorySolves, ex_er: Experiments, ex_aer: Experiments) -> AdaptiveComparison:
    """aER's experiment and ODE against the fixed-memory ones."""
    key = (AER_N0, AER_M, ALPHA_GRID, 0.0)
    fixed_metric = ex_er.metric(*key)
    aer_d = ex_aer.runs(*key)
    aer_seeds = np.abs(aer_d[:, -1, :]).sum(-1)
    fixed_d = ex_er.runs(*key)
    fixed_seeds = np.abs(fixed_d[:, -1, :]).sum(-1)
    return AdaptiveComparison(
        metric=seed_average_metric(aer_d),
        fixed_metric=fixed_metric,
        dtheta=aer_d,
        fixed_dtheta=fixed_d,
        fraction=float(np.nanmean(aer_seeds < fixed_metric)),
        fraction_paired=float(np.nanmean(aer_seeds < fixed_seeds)),
        theory_fixed_metric=er.final_metric(*key),
    )


@dataclasses.dataclass(frozen=True)
class Stages:
    """The results of every stage, and (cached properties) what claims, figures and numbers derive from them."""

    plan: Plan
    times: np.ndarray  # the theory's time grid, 0 … T
    er: TheorySolves
    per: TheorySolves
    cusps: Cusps
    appendix: Appendix
    ex_er: Experiments
    ex_per: Experiments
    ex_aer: Experiments
    aer: AdaptiveTheory

    @property
    def grid_memory(self) -> np.ndarray:
        return np.asarray(self.plan.grid_memory_sizes)

    @property
    def grid_batch(self) -> np.ndarray:
        return np.asarray(self.plan.grid_batch_sizes)

    @property
    def spot_memory(self) -> np.ndarray:
        return np.asarray(self.plan.spot_memory_sizes)

    @property
    def exp_times(self) -> np.ndarray:
        """The experiment's time steps, 1 … T."""
        return np.arange(1, T + 1, dtype=np.float64)

    def batch_index(self, m: int) -> int:
        """The position of ``m`` in the theory grid."""
        return int(np.nonzero(self.grid_batch == m)[0][0])

    @functools.cached_property
    def metric_er(self) -> np.ndarray:
        """M over the contour grid, ER, γ = 0, [nN, nm]."""
        return self.er.grid_metric(self.grid_memory, self.grid_batch, 0.0)

    @functools.cached_property
    def metric_er_gamma05(self) -> np.ndarray:
        """M over the contour grid, ER, γ = 0.5."""
        return self.er.grid_metric(self.grid_memory, self.grid_batch, GAMMA_NONZERO)

    @functools.cached_property
    def metric_per(self) -> np.ndarray:
        """M over the contour grid, pER, γ = 0."""
        return self.per.grid_metric(self.grid_memory, self.grid_batch, 0.0)

    @functools.cached_property
    def delta_metric(self) -> np.ndarray:
        """M_ER − M_pER over the contour grid (> 0: pER better)."""
        return self.metric_er - self.metric_per

    @functools.cached_property
    def grid_step(self) -> str:
        """How the N grid is described in the claims."""
        steps = np.diff(self.grid_memory)
        return f"step {steps[0]:g}" if steps.size and np.all(steps == steps[0]) else f"{len(self.grid_memory)} values"

    @functools.cached_property
    def spot_metric(self) -> dict[tuple[float, int], np.ndarray]:
        """(γ, m) → M of the ER experiment over the spot N grid."""
        return {
            (g, m): np.array([self.ex_er.metric(N, m, ALPHA_GRID, g) for N in self.spot_memory])
            for g in (0.0, GAMMA_NONZERO)
            for m in self.plan.spot_batch_sizes
        }

    @functools.cached_property
    def thresholds_er(self) -> Thresholds:
        return thresholds(self.grid_batch, self.cusps.er)

    @functools.cached_property
    def thresholds_per(self) -> Thresholds:
        return thresholds(self.grid_batch, self.cusps.per)

    @functools.cached_property
    def thresholds_er_gamma05(self) -> Thresholds:
        return thresholds(self.grid_batch, self.cusps.er_gamma05)

    @functools.cached_property
    def per_spot_checks(self) -> list[tuple[int, int, float, float]]:
        """(N, m, ΔM experiment, ΔM theory) at the pER spots and Fig. 2DExplain's (ΔM = M_ER − M_pER;
        the experiment's is NaN where ER was not run)."""
        rows = []
        for N, m in list(self.plan.per_spots) + [(N, 10) for N in EXPLAIN_MEMORY]:
            key = (N, m, ALPHA_GRID, 0.0)
            e_er = self.ex_er.metric(*key) if key in self.ex_er.registry else math.nan
            d_theory = self.er.final_metric(*key) - self.per.final_metric(*key)
            rows.append((N, m, e_er - self.ex_per.metric(*key), d_theory))
        return rows

    @functools.cached_property
    def overshoot_100(self) -> Overshoot:
        return overshoot(self.er, self.times, 100)

    @functools.cached_property
    def overshoot_1000(self) -> Overshoot:
        return overshoot(self.er, self.times, 1000)

    @functools.cached_property
    def agreement_er(self) -> dict[Key, tuple[float, float]]:
        """ER, γ = 0: Fig. 2a's curves and Fig. 2DExplain's."""
        return agreement(self.er, self.ex_er, _learning_curve_keys(0.0) + _explain_keys())

    @functools.cached_property
    def agreement_per(self) -> dict[Key, tuple[float, float]]:
        """pER: Fig. 2b's curves and Fig. 2DExplain's."""
        return agreement(self.per, self.ex_per, _learning_curve_keys(0.0) + _explain_keys())

    @functools.cached_property
    def agreement_gamma05(self) -> dict[Key, tuple[float, float]]:
        """ER, γ = 0.5: the two learning curves."""
        return agreement(self.er, self.ex_er, _learning_curve_keys(GAMMA_NONZERO))

    @functools.cached_property
    def spot_error(self) -> float:
        """max |M_exp − M_ode| over the ER spot grid."""
        return max(
            abs(self.spot_metric[(g, m)][i] - self.er.final_metric(N, m, ALPHA_GRID, g))
            for (g, m) in self.spot_metric
            for i, N in enumerate(self.spot_memory)
        )

    @functools.cached_property
    def adaptive(self) -> AdaptiveComparison:
        return adaptive_comparison(self.er, self.ex_er, self.ex_aer)


class StageClock:
    """Times the stages (:data:`STAGE_NAMES`) and advances a tqdm bar over them."""

    def __init__(self, progress: bool):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=len(STAGE_NAMES), desc="reproduce linesearch", disable=not progress, unit="stage")
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.bar.set_postfix_str(name)
        start = time.perf_counter()
        yield
        self.seconds[name] = time.perf_counter() - start
        self.bar.update(1)


def run_stages(plan: Plan, seed: int = 0, clock: StageClock | None = None) -> Stages:
    """Run the computing stages of ``plan`` (every stage of :data:`STAGE_NAMES` but the last) in order."""
    clock = clock or StageClock(progress=False)
    times = np.linspace(0.0, float(T), T + 1)
    with clock(STAGE_NAMES[0]):
        er = theory_er(plan, times)
    with clock(STAGE_NAMES[1]):
        per = theory_per(plan, times)
    with clock(STAGE_NAMES[2]):
        cusps_ = cusps(plan, er, per)
    with clock(STAGE_NAMES[3]):
        appendix_ = appendix(plan)
    with clock(STAGE_NAMES[4]):
        ex_er = experiment_er(plan, seed)
    with clock(STAGE_NAMES[5]):
        ex_per = experiment_per(plan, seed)
    with clock(STAGE_NAMES[6]):
        ex_aer = experiment_aer(plan, seed)
    with clock(STAGE_NAMES[7]):
        aer = theory_aer(ex_aer, times)
    return Stages(plan, times, er, per, cusps_, appendix_, ex_er, ex_per, ex_aer, aer)
