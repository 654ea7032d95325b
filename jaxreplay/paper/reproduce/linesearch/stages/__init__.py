"""The computing stages of the reproduction, in order, each a function returning a named result.

:func:`run_stages` runs them in the order of :data:`STAGE_NAMES` into one
:class:`Stages`, which also derives, once and on demand, the quantities that
several claims, figures or the headline numbers share (the spot-grid metric,
the monotone thresholds, the Fig. 2a overshoot, the theory–experiment errors,
aER against a fixed memory). The stages, one function each:

1. :func:`theory_er`: ER theory, the contour grids and every curve, in one batched solve;
2. :func:`theory_per`: pER theory, likewise;
3. :func:`cusps`: the sign changes of Δθ(T) on the grids, refined in continuous N;
4. :func:`appendix`: the appendix's closed forms;
5. :func:`experiment_er`: the ER experiments;
6. :func:`experiment_per`: the pER experiments;
7. :func:`experiment_aer`: the aER experiment;
8. :func:`theory_aer`: the ODE driven by aER's memory size;

and the last, :func:`jaxreplay.paper.reproduce.linesearch.reproduce`'s claims,
figures, CSV and report. They live in one module per figure group:
:mod:`~jaxreplay.paper.reproduce.linesearch.stages.er_per` (Fig. 2 and the
appendix's two-dimensional figures: stages 1, 2, 3, 5, 6),
:mod:`~jaxreplay.paper.reproduce.linesearch.stages.closed_forms` (the
appendix's one-dimensional figures: stage 4) and
:mod:`~jaxreplay.paper.reproduce.linesearch.stages.aer` (Fig. 3: stages 7, 8),
each going through the batched runners of
:mod:`~jaxreplay.paper.reproduce.linesearch.stages.batched` (one compile per
distinct shape).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import sys
import time
from collections.abc import Iterator

import numpy as np

from jaxreplay.paper.reproduce.linesearch.settings import ALPHA_GRID, EXPLAIN_MEMORY, GAMMA_NONZERO, Design, T
from jaxreplay.paper.reproduce.linesearch.stages.aer import (
    AdaptiveComparison,
    AdaptiveTheory,
    adaptive_comparison,
    experiment_aer,
    theory_aer,
)
from jaxreplay.paper.reproduce.linesearch.stages.batched import Experiments, Key, TheorySolves
from jaxreplay.paper.reproduce.linesearch.stages.closed_forms import Appendix, appendix
from jaxreplay.paper.reproduce.linesearch.stages.er_per import (
    Cusps,
    Overshoot,
    Thresholds,
    agreement,
    cusps,
    experiment_er,
    experiment_per,
    explain_keys,
    learning_curve_keys,
    overshoot,
    theory_er,
    theory_per,
    thresholds,
)

__all__ = [
    "STAGE_NAMES",
    "Stages",
    "StageClock",
    "run_stages",
    "Key",
    # the stages, in order, and their results
    "theory_er",
    "theory_per",
    "TheorySolves",
    "cusps",
    "Cusps",
    "appendix",
    "Appendix",
    "experiment_er",
    "experiment_per",
    "experiment_aer",
    "Experiments",
    "theory_aer",
    "AdaptiveTheory",
]

STAGE_NAMES = (
    "theory: ER grid + curves",
    "theory: pER grid + curves",
    "theory: cusps of M(N)",
    "appendix closed forms",
    "experiment: ER",
    "experiment: pER",
    "experiment: aER",
    "theory: ODE driven by aER's live size n(t)",
    "claims, figures, CSV, report",
)
"""The stages as the progress bar and the report's timings name them (the last one is :func:`reproduce`'s)."""


@dataclasses.dataclass(frozen=True)
class Stages:
    """The results of every stage, and (cached properties) what claims, figures and numbers derive from them."""

    design: Design
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
        return np.asarray(self.design.grid_memory_sizes)

    @property
    def grid_batch(self) -> np.ndarray:
        return np.asarray(self.design.grid_batch_sizes)

    @property
    def spot_memory(self) -> np.ndarray:
        return np.asarray(self.design.spot_memory_sizes)

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
            for m in self.design.spot_batch_sizes
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
        for N, m in list(self.design.per_spots) + [(N, 10) for N in EXPLAIN_MEMORY]:
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
        return agreement(self.er, self.ex_er, learning_curve_keys(0.0) + explain_keys())

    @functools.cached_property
    def agreement_per(self) -> dict[Key, tuple[float, float]]:
        """pER: Fig. 2b's curves and Fig. 2DExplain's."""
        return agreement(self.per, self.ex_per, learning_curve_keys(0.0) + explain_keys())

    @functools.cached_property
    def agreement_gamma05(self) -> dict[Key, tuple[float, float]]:
        """ER, γ = 0.5: the two learning curves."""
        return agreement(self.er, self.ex_er, learning_curve_keys(GAMMA_NONZERO))

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

        self.bar = tqdm(
            total=len(STAGE_NAMES),
            desc="reproduce linesearch",
            disable=not progress or sys.stderr is None,
            unit="stage",
        )
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.bar.set_postfix_str(name)
        start = time.perf_counter()
        yield
        self.seconds[name] = time.perf_counter() - start
        self.bar.update(1)


def run_stages(design: Design, seed: int = 0, clock: StageClock | None = None) -> Stages:
    """Run the computing stages of ``design`` (every stage of :data:`STAGE_NAMES` but the last) in order."""
    clock = clock or StageClock(progress=False)
    times = np.linspace(0.0, float(T), T + 1)
    with clock(STAGE_NAMES[0]):
        er = theory_er(design, times)
    with clock(STAGE_NAMES[1]):
        per = theory_per(design, times)
    with clock(STAGE_NAMES[2]):
        cusps_ = cusps(design, er, per)
    with clock(STAGE_NAMES[3]):
        appendix_ = appendix(design)
    with clock(STAGE_NAMES[4]):
        ex_er = experiment_er(design, seed)
    with clock(STAGE_NAMES[5]):
        ex_per = experiment_per(design, seed)
    with clock(STAGE_NAMES[6]):
        ex_aer = experiment_aer(design, seed)
    with clock(STAGE_NAMES[7]):
        aer = theory_aer(ex_aer, times)
    return Stages(design, times, er, per, cusps_, appendix_, ex_er, ex_per, ex_aer, aer)
