"""Configurations and the batched runners every stage goes through.

A stage collects its configurations (N, m, α, γ) in a :class:`Registry` and
hands them to one batched call: :func:`solve_theory` (the replay ODE,
:class:`TheorySolves`) or :func:`run_experiments` (the sweep engine,
:class:`Experiments`). Every distinct experiment ``Setup`` and every distinct
shape of a theory solve is one XLA compile, so all ER theory requests go
through one :func:`jaxreplay.paper.theory.solve_grid` call, all pER ones
through another, and all ER experiments through one uniform ``Setup``
(``max_batch_size=50``, masking handles m < 50); pER and aER have one Setup
each.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from jaxreplay.paper.reproduce.linesearch.numerics import seed_average_metric
from jaxreplay.paper.reproduce.linesearch.settings import ALPHA_GRID, PRIORITY_EXPONENT, T

Key = tuple[int, int, float, float]
"""One configuration: (N, m, α, γ)."""


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
        """M of the seed-averaged curve of the configuration in row ``i`` of ``registry`` (over the seeds that
        did not diverge: :meth:`seeds_averaged_at`; NaN where none)."""
        return seed_average_metric(self.final[i][:, None, :])

    def seeds_averaged_at(self, i: int) -> int:
        """How many seeds :meth:`metric_at` averages for row ``i``: those that did not diverge."""
        return self.seeds - int(np.count_nonzero(self.diverged[i]))

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
