"""The Fig. 3 group: adaptive experience replay (aER) from N0 = 100.

Fig. 3a and 3b: the stages :func:`experiment_aer` and :func:`theory_aer`
(the ODE driven by aER's mean memory size), and :func:`adaptive_comparison`
(aER against the fixed memory it starts from).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxreplay.paper.reproduce.linesearch.numerics import seed_average_metric
from jaxreplay.paper.reproduce.linesearch.settings import AER_K, AER_M, AER_N0, AER_NOLD, ALPHA_GRID, Design, T
from jaxreplay.paper.reproduce.linesearch.stages.batched import Experiments, Registry, TheorySolves, run_experiments


def experiment_aer(design: Design, seed: int) -> Experiments:
    """Stage 7: aER from N0 = 100 (m = 10, α = 1e-3, k = 20, n_old = 50)."""
    from jaxreplay.experiments import linesearch as ls

    setup = ls.Setup(steps=T, max_capacity=1000, max_batch_size=AER_M, sampler="adaptive", max_num_old=AER_NOLD)
    reg = Registry()
    reg.add(AER_N0, AER_M, ALPHA_GRID, 0.0)
    return run_experiments(
        reg,
        setup,
        design.aer_seeds,
        design.aer_seeds,  # its one configuration's seeds in one chunk (it was padded to er_chunk: 4,096 runs)
        seed,
        memory=True,
        adaptive_interval=np.int32(AER_K),
        adaptive_num_old=np.int32(AER_NOLD),
    )


class AdaptiveTheory(NamedTuple):
    """The ODE driven by the seed-mean number of transitions aER's replay drew from at each step, n̄(t).

    That is the memory's live size, not its capacity N(t): after a grow by k the memory refills one
    transition a step (:func:`~jaxreplay.experiments.linesearch.replayed_sizes`; driven by the capacity
    the ODE's M was 0.7 % off here, 40 % off with k = 200).

    Attributes:
        memory_size: aER's memory size (capacity) per seed, [seeds, T].
        mean_memory: N̄(t), its seed mean, [T] (Fig. 3a).
        mean_replayed: n̄(t), [T], what drives the ODE.
        dtheta: Δθ(t) of the driven ODE, [T + 1, 2].
        metric: its M.
        direction_changed: whether θ1 changed sign.
    """

    memory_size: np.ndarray
    mean_memory: np.ndarray
    mean_replayed: np.ndarray
    dtheta: np.ndarray
    metric: float
    direction_changed: bool


def theory_aer(aer: Experiments, times: np.ndarray) -> AdaptiveTheory:
    """Stage 8: the ODE driven by the mean number of transitions the aER experiment replayed from."""
    from jaxreplay.experiments import linesearch as ls
    from jaxreplay.paper import theory

    assert aer.memory_size is not None  # kept by experiment_aer
    mem = aer.memory_size[aer.curves[(AER_N0, AER_M, ALPHA_GRID, 0.0)]]  # [seeds, T]
    mean_n = ls.replayed_sizes(mem, AER_N0).mean(axis=0, dtype=np.float64)
    sched = theory.MemorySizeSchedule(times=np.arange(1.0, T + 1.0), sizes=mean_n)
    sol = theory.solve(memory_size=sched, batch_size=AER_M, step_size=ALPHA_GRID, times=times)
    return AdaptiveTheory(
        mem.astype(np.float64),
        mem.mean(axis=0, dtype=np.float64),
        mean_n,
        np.stack([np.asarray(sol.dtheta1), np.asarray(sol.dtheta2)], axis=-1),
        float(sol.metric),
        bool(sol.direction_changed),
    )


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
