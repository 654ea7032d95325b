"""The Fig. 2 group: ER and pER in two dimensions, theory and experiment.

Fig. 2a–2f and the appendix's two-dimensional figures (2D2DPri, 2DComp,
2DExplain, 2DDiscountLearning): the stages :func:`theory_er`,
:func:`theory_per`, :func:`cusps`, :func:`experiment_er` and
:func:`experiment_per`, and what claims and figures derive from them
(:func:`thresholds`, :func:`overshoot`, :func:`agreement`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from jaxreplay.paper.reproduce.linesearch.numerics import monotone_threshold, true_intervals
from jaxreplay.paper.reproduce.linesearch.settings import (
    AER_M,
    AER_N0,
    ALPHA_CURVES,
    ALPHA_GRID,
    EXPLAIN_MEMORY,
    GAMMA_NONZERO,
    M_CURVES,
    PRIORITY_EXPONENT,
    Design,
    T,
)
from jaxreplay.paper.reproduce.linesearch.stages.batched import (
    Experiments,
    Key,
    Registry,
    TheorySolves,
    run_experiments,
    solve_theory,
)

if TYPE_CHECKING:
    from jaxreplay.paper.theory import MemoryCusps


def theory_er(design: Design, times: np.ndarray) -> TheorySolves:
    """ER theory (stage 1): the contour grids at γ = 0 and 0.5, Fig. 2a's and the γ = 0.5 curves,
    the experiment spots, the pER spots and aER's fixed-memory twin, in one batched solve."""
    reg = Registry()
    for g in (0.0, GAMMA_NONZERO):
        for N in design.grid_memory_sizes:
            for m in design.grid_batch_sizes:
                reg.add(N, m, ALPHA_GRID, g)
    for N in (100, 1000):
        reg.add(N, M_CURVES, ALPHA_CURVES, 0.0)
        reg.add(N, M_CURVES, ALPHA_CURVES, GAMMA_NONZERO)
    for N in EXPLAIN_MEMORY + tuple(design.spot_memory_sizes):
        for m in design.spot_batch_sizes:
            for g in (0.0, GAMMA_NONZERO):
                reg.add(N, m, ALPHA_GRID, g)
    for N, m in design.per_spots:
        reg.add(N, m, ALPHA_GRID, 0.0)
    reg.add(AER_N0, AER_M, ALPHA_GRID, 0.0)
    return solve_theory(reg, False, times)


def theory_per(design: Design, times: np.ndarray) -> TheorySolves:
    """pER theory (stage 2, β = 2, γ = 0): the contour grid, Fig. 2b's curves, Fig. 2DExplain's and the spots."""
    reg = Registry()
    for N in design.grid_memory_sizes:
        for m in design.grid_batch_sizes:
            reg.add(N, m, ALPHA_GRID, 0.0)
    for key in per_experiment_keys(design):
        reg.add(*key)
    return solve_theory(reg, True, times)


class Cusps(NamedTuple):
    """The cusps of M(N) per grid m (:class:`jaxreplay.paper.theory.MemoryCusps`, one per
    ``design.grid_batch_sizes``)."""

    er: list[MemoryCusps]  # ER, γ = 0
    er_gamma05: list[MemoryCusps]  # ER, γ = GAMMA_NONZERO
    per: list[MemoryCusps]  # pER, γ = 0


def cusps(design: Design, er: TheorySolves, per: TheorySolves) -> Cusps:
    """Stage 3: sign changes of Δθ(T) between grid neighbours, refined in continuous N
    (:func:`jaxreplay.paper.theory.memory_cusps`, no extra compile)."""
    from jaxreplay.paper import theory

    gridN, gridm = np.asarray(design.grid_memory_sizes), np.asarray(design.grid_batch_sizes)
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

    Both ER sweeps keep the chunk size ``design.er_chunk`` (the same program
    shape, so every number is bit-identical either way), and the split costs
    one more, padded, chunk. On a GPU a chunk's kernel is a fraction of what
    moving and assembling its per-step records costs, so the split
    saves most of the stage; on the CPU the records are already in host memory
    and the extra chunk is the larger cost (7 s in default mode on 2 cores).
    """
    import jax

    return jax.default_backend() != "cpu"


def experiment_er(design: Design, seed: int, apart: bool | None = None) -> Experiments:
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
        for N in design.spot_memory_sizes:
            for m in design.spot_batch_sizes:
                reg.add(N, m, ALPHA_GRID, g)
    for N in EXPLAIN_MEMORY:
        reg.add(N, 10, ALPHA_GRID, 0.0)
    for N, m in design.per_spots:
        reg.add(N, m, ALPHA_GRID, 0.0)
    apart = finals_apart() if apart is None else apart
    return run_experiments(reg, setup, design.er_seeds, design.er_chunk, seed, curves=er_curves() if apart else None)


def experiment_per(design: Design, seed: int) -> Experiments:
    """Stage 6: the pER experiments (β = 2; Fig. 2b, Fig. 2DExplain, the pER spots)."""
    from jaxreplay.experiments import linesearch as ls

    setup = ls.Setup(steps=T, max_capacity=1000, max_batch_size=10, sampler="prioritized")
    reg = Registry()
    for key in per_experiment_keys(design):
        reg.add(*key)
    return run_experiments(
        reg, setup, design.per_seeds, design.per_chunk, seed, priority_exponent=np.float32(PRIORITY_EXPONENT)
    )


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


def learning_curve_keys(gamma: float) -> list[Key]:
    """Fig. 2a/2b's learning curves (N = 100 and 1000, m = 5, α = 0.01) at discount ``gamma``."""
    return [(N, M_CURVES, ALPHA_CURVES, gamma) for N in (100, 1000)]


def explain_keys() -> list[Key]:
    """Fig. 2DExplain's curves (m = 10, α = 1e-3, γ = 0)."""
    return [(N, 10, ALPHA_GRID, 0.0) for N in EXPLAIN_MEMORY]


def per_experiment_keys(design: Design) -> list[Key]:
    """The pER configurations simulated (stage 6) and solved beside the grid (stage 2): Fig. 2b's
    curves, Fig. 2DExplain's and the design's pER spots, all at γ = 0."""
    return learning_curve_keys(0.0) + explain_keys() + [(N, m, ALPHA_GRID, 0.0) for N, m in design.per_spots]
