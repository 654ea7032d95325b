"""The LineSearch reproduction's settings: the paper's constants and the :class:`Design` of each mode.

A *design* is what a reproduction computes (grids, seeds, runs per compiled call); how
the engine then splits a sweep into chunks is its *plan* (:mod:`jaxreplay.engine.plan`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxreplay import _validation

__all__ = [
    "CSV_COLUMNS",
    "MODES",
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
    "Design",
    "design",
]

CSV_COLUMNS = ("sampler", "discount", "memory_size", "batch_size", "step_size", "source", "final_metric", "seeds")
MODES = ("tiny", "default", "full")

T = 1000  # steps per game (paper)
ALPHA_GRID = 1e-3  # Fig. 2c–2f, Fig. 3, Fig. 2DExplain
ALPHA_CURVES = 1e-2  # Fig. 2a/2b, γ = 0.5 curves
M_CURVES = 5
GAMMA_NONZERO = 0.5
PRIORITY_EXPONENT = 2.0
WHITE_THRESHOLD = 1.5e-3  # Fig. 2e
MONOTONE_TOL = 1e-4  # M(N_max) − min_N M above this: a non-monotone (interior-optimum) curve
AER_N0, AER_M, AER_K, AER_NOLD = 100, 10, 20, 50
ALPHA_1D, M_1D = 2e-5, 5  # Fig. 1DLearning
TARGET_RATIO = 0.05  # Δθ/Δθ⁰ target of the appendix → K = ln 20
EXPLAIN_MEMORY = (100, 250, 1000)
FIG1D_MEMORY = (1, 50, 500, 1000)


@dataclasses.dataclass(frozen=True)
class Design:
    """What one reproduction run computes at its mode: the grids' resolution and the seeds.

    Attributes:
        mode: ``"tiny"``, ``"default"`` or ``"full"``.
        grid_memory_sizes, grid_batch_sizes: the theory contour grid (α = 1e-3).
        spot_memory_sizes, spot_batch_sizes: ER experiment spot grid (γ = 0
            and 0.5, α = 1e-3); must contain m = 5, 10, 40 and N = 100, 250, 1000.
        per_spots: extra (N, m) pER experiment spot checks at α = 1e-3.
        er_seeds, per_seeds, aer_seeds: seeds per experiment configuration.
        appendix_memory_sizes: N values of the 1-D steps-to-K analysis.
        appendix_targets: K values of the optimal-N-vs-K curve.
        er_chunk, per_chunk: runs per compiled experiment call (ER's curves and finals keep one
            chunk size, so the split sweeps of an accelerator run in programs of one shape). aER's
            stage, one sweep of ``aer_seeds`` runs, is one chunk of exactly those runs.
    """

    mode: str
    grid_memory_sizes: tuple[int, ...]
    grid_batch_sizes: tuple[int, ...]
    spot_memory_sizes: tuple[int, ...]
    spot_batch_sizes: tuple[int, ...]
    per_spots: tuple[tuple[int, int], ...]
    er_seeds: int
    per_seeds: int
    aer_seeds: int
    appendix_memory_sizes: tuple[int, ...]
    appendix_targets: tuple[float, ...]
    er_chunk: int = 4096
    per_chunk: int = 64


def design(mode: str = "default", seeds: int | None = None) -> Design:
    """The :class:`Design` of ``mode``; ``seeds`` overrides the ER and aER seed count
    (pER then gets ``max(1, seeds // 4)``)."""
    _validation.check_choice("mode", mode, MODES)
    if mode == "tiny":
        chosen = Design(
            mode=mode,
            grid_memory_sizes=(10, 100, 250, 500, 1000),
            grid_batch_sizes=(1, 5, 10, 20, 40),
            spot_memory_sizes=(100, 250, 1000),
            spot_batch_sizes=(5, 10, 40),
            per_spots=(),
            er_seeds=2,
            per_seeds=1,
            aer_seeds=2,
            appendix_memory_sizes=tuple(range(1, 2001, 10)),
            appendix_targets=tuple(np.round(np.linspace(0.25, 8.0, 32), 4)),
            er_chunk=64,  # its few dozen ER runs, not padded to 4,096 (the tests' reproduction)
        )
    elif mode == "default":
        chosen = Design(
            mode=mode,
            grid_memory_sizes=tuple(range(10, 1001, 30)),
            grid_batch_sizes=(1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 18, 20, 22, 25, 30, 35, 40, 45, 50),
            spot_memory_sizes=(10, 50, 100, 250, 500, 1000),
            spot_batch_sizes=(1, 5, 10, 20, 40),
            per_spots=((10, 2), (50, 5)),
            er_seeds=32,
            per_seeds=8,
            aer_seeds=32,
            appendix_memory_sizes=tuple(range(1, 2001)),
            appendix_targets=tuple(np.round(np.linspace(0.1, 8.0, 80), 4)),
        )
    else:
        chosen = Design(
            mode=mode,
            grid_memory_sizes=tuple(range(10, 1001, 10)),
            grid_batch_sizes=tuple(range(1, 51)),
            spot_memory_sizes=(10, 25, 50, 100, 150, 200, 250, 300, 400, 500, 700, 1000),
            spot_batch_sizes=(1, 2, 5, 10, 15, 20, 30, 40, 50),
            per_spots=((10, 1), (10, 2), (10, 5), (50, 2), (50, 5), (50, 10), (500, 5), (500, 10)),
            er_seeds=128,
            per_seeds=32,
            aer_seeds=128,
            appendix_memory_sizes=tuple(range(1, 2001)),
            appendix_targets=tuple(np.round(np.linspace(0.05, 10.0, 400), 4)),
        )
    if seeds is not None:
        if int(seeds) != seeds or seeds < 1:
            raise ValueError(f"seeds must be a positive integer, got {seeds!r}.")
        chosen = dataclasses.replace(
            chosen, er_seeds=int(seeds), aer_seeds=int(seeds), per_seeds=max(1, int(seeds) // 4)
        )
    return chosen
