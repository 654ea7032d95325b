"""The replay study's analysis: from the stages' runs to a typed :class:`Analysis` (no I/O).

Scores, as in the DQN study (:mod:`jaxreplay.paper.reproduce.study`): ``auc``, the mean training return
over segments, and ``final``, the greedy return at the end, each summarised per setting by its IQM
over seeds with a 95% expanded bootstrap interval (:func:`~jaxreplay.paper.reproduce.study.runs.ci`). Every
answer is a paired contrast of ``auc`` (:func:`~jaxreplay.paper.reproduce.study.runs.paired`: the mean
over seeds of a per-seed difference with its Student-t interval, the same seed index sharing its random
numbers across settings).
The words said of these numbers are :mod:`~jaxreplay.paper.reproduce.replay_study.verdict`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

from jaxreplay.paper.reproduce.replay_study import stages
from jaxreplay.paper.reproduce.replay_study.settings import CAPACITY_FACTOR, ReplayDesign, age
from jaxreplay.paper.reproduce.replay_study.stages import ADAPTIVE_RATIO, STAGE_RULES, AdaptiveRule, cell_runs
from jaxreplay.paper.reproduce.study.runs import (
    Interval,
    Runs,
    ci,
    diverged,
    paired,
    select,
    soft_diverged,
    unscored,
)


class Cell(NamedTuple):
    """One cell of the grid: its coordinates, its oldest-policy age (capacity × ratio, gradient updates),
    its two scores (IQM over seeds, 95% interval) and its runs without a score, which the scores leave out
    (they stand on the other seeds): ``diverged`` ones and ``unscored`` ones (no training episode ended)."""

    memory_size: int
    replay_ratio: float
    n_step: int
    oldest_policy_age: float
    auc: Interval
    final: Interval
    diverged: int
    unscored: int = 0


class Contrast(NamedTuple):
    """A paired contrast at one n: ``effect`` is the mean over seeds of the per-seed difference, and
    ``pairs`` the cells it compares, ``(cell, cell)`` labels, each pair's first minus its second,
    averaged over the pairs per seed. ``seeds``: the seeds it stands on (a seed with a diverged run in any
    of its cells drops out)."""

    n_step: int
    effect: Interval
    pairs: tuple[tuple[str, str], ...]
    seeds: int


class AdaptiveScore(NamedTuple):
    """One adaptive rule from one start, and its paired comparisons (rule − other, same seeds)."""

    rule: str
    initial_size: int
    mean_size: float  # seed mean of the time-averaged size
    final_size_mean: float  # seed mean of the size at the end
    grow_fraction: float | None  # share of checks that grew the memory (None: no check)
    score: Interval
    final: Interval
    vs_start_static: Interval  # the fixed memory it started at
    vs_best_static: Interval  # the better (by IQM) of the smallest and the largest fixed memory
    vs_random_walk: Interval  # the random ±k walk from the same start
    fixed_at_mean_size: int
    vs_fixed_at_mean: Interval  # a fixed memory at its time-averaged size
    # the grow share of the checks the floor did not force (None: no such check; dqn.adaptive_diagnostics)
    free_grow_fraction: float | None = None


class Walk(NamedTuple):
    """The random ±k walk from one start (the adaptive rules' first control)."""

    initial_size: int
    mean_size: float
    final_size_mean: float
    grow_fraction: float | None
    score: Interval


class Analysis(NamedTuple):
    """Everything the study concludes from its runs (:func:`analyse`).

    Attributes:
        cells: every grid cell, in :meth:`~jaxreplay.paper.reproduce.replay_study.settings.ReplayDesign.cells`' order.
        capacity: per n, largest − smallest capacity at ratio 1.
        interaction: (the capacity effect at the largest n) − (at n = 1), per seed.
        interaction_seeds: the seeds the interaction stands on (finite in its four cells).
        ratio_at_equal_age: per n, the higher ratio − the lower at equal oldest-policy age.
        age_at_equal_ratio: per n, the older − the younger (capacity × 4) at equal ratio.
        adaptive_n_step: the n of the adaptive stage (the larger capacity effect).
        static: the adaptive stage's fixed memories, ``(size, score)`` (the smallest and the largest).
        adaptive: each rule of :data:`~jaxreplay.paper.reproduce.replay_study.stages.STAGE_RULES` from each start.
        walks: the random walk from each start.
        diverged: runs that diverged, by stage label (no score: each left out of every number above).
        unscored: runs without a score that did not diverge (no training episode ended), by stage label;
            left out as the diverged ones are.
        soft_diverged: runs with a score whose Q-values went beyond every return (kept in every number), by
            stage label; ``None`` where the runs do not record the flag.
    """

    cells: tuple[Cell, ...]
    capacity: tuple[Contrast, ...]
    interaction: Interval
    interaction_seeds: int
    ratio_at_equal_age: tuple[Contrast, ...]
    age_at_equal_ratio: tuple[Contrast, ...]
    adaptive_n_step: int
    static: tuple[tuple[int, Interval], ...]
    adaptive: tuple[AdaptiveScore, ...]
    walks: tuple[Walk, ...]
    diverged: dict[str, int]
    soft_diverged: dict[str, int] | None = None
    unscored: dict[str, int] = {}


Key = tuple[int, float, int]
"""A grid cell's coordinates: ``(memory_size, replay_ratio, n_step)``."""


def contrast(runs: Mapping[str, Runs], n_step: int, pairs: list[tuple[Key, Key]]) -> Contrast:
    """The paired contrast of ``pairs`` (first − second, averaged over the pairs per seed) at ``n_step``.
    A seed with a diverged run in any pair drops out."""
    diffs = [cell_runs(runs, *a).auc - cell_runs(runs, *b).auc for a, b in pairs]
    per_seed = np.mean(diffs, axis=0)
    labels = tuple((stages.cell(*a), stages.cell(*b)) for a, b in pairs)
    return Contrast(n_step, paired(per_seed, np.zeros_like(per_seed)), labels, _seeds_left(per_seed))


def _seeds_left(per_seed: np.ndarray) -> int:
    """The seeds a paired contrast stands on: those whose per-seed difference is finite (no diverged run)."""
    return int(np.isfinite(per_seed).sum())


def _cell(runs: Mapping[str, Runs], c: int, r: float, n: int) -> Cell:
    found = cell_runs(runs, c, r, n)
    return Cell(c, float(r), n, age(c, r), ci(found.auc), ci(found.final), diverged(found), unscored(found))


def _pairs(design: ReplayDesign, n: int, same: Callable[[Key, Key], bool]) -> list[tuple[Key, Key]]:
    """Pairs ``(a, b)`` of cells at ``n`` with ``same(a, b)``, ``a``'s capacity ``b``'s divided or
    multiplied by :data:`CAPACITY_FACTOR`, ``a`` the one of the higher ratio, or at equal ratio the larger."""
    keys = [k for k in design.cells() if k[2] == n]
    return [
        (a, b)
        for a in keys
        for b in keys
        if same(a, b) and (a[1] > b[1] or (a[1] == b[1] and a[0] == b[0] * CAPACITY_FACTOR))
    ]


def equal_age_pairs(design: ReplayDesign, n: int) -> list[tuple[Key, Key]]:
    """Cells at ``n`` of equal oldest-policy age, the ratio a factor 4 apart: (higher ratio, lower ratio)."""
    return _pairs(
        design, n, lambda a, b: a[1] == b[1] * CAPACITY_FACTOR and bool(np.isclose(age(a[0], a[1]), age(b[0], b[1])))
    )


def equal_ratio_pairs(design: ReplayDesign, n: int) -> list[tuple[Key, Key]]:
    """Cells at ``n`` of equal ratio, the capacity (and so the age) a factor 4 apart: (older, younger)."""
    return _pairs(design, n, lambda a, b: a[1] == b[1])


def _capacity_diff(design: ReplayDesign, runs: Mapping[str, Runs], n: int) -> np.ndarray:
    top, low = max(design.capacities), min(design.capacities)
    return cell_runs(runs, top, ADAPTIVE_RATIO, n).auc - cell_runs(runs, low, ADAPTIVE_RATIO, n).auc


def _adaptive(design: ReplayDesign, runs: Mapping[str, Runs], rule: AdaptiveRule, start: int) -> AdaptiveScore:
    from jaxreplay.experiments import dqn

    stage = runs[stages.ADAPTIVE]
    a = select(stage, stages.adaptive(rule, start))
    ends = [select(stage, stages.fixed(s)) for s in stages.starts(design)]
    best = max(ends, key=lambda e: -np.inf if ci(e.auc)["estimate"] is None else ci(e.auc)["estimate"])
    at_mean = select(runs[stages.FIXED_AT_MEAN], stages.fixed_at_mean(rule, start))
    shares = dqn.adaptive_diagnostics(a.ds)
    return AdaptiveScore(
        rule=rule.name,
        initial_size=int(start),
        mean_size=float(np.nanmean(a.mean_size)),
        final_size_mean=float(np.nanmean(a.final_size)),
        grow_fraction=shares["grow_fraction"],
        score=ci(a.auc),
        final=ci(a.final),
        vs_start_static=paired(a.auc, select(stage, stages.fixed(start)).auc),
        vs_best_static=paired(a.auc, best.auc),
        vs_random_walk=paired(a.auc, select(stage, stages.walk(start)).auc),
        fixed_at_mean_size=int(at_mean.setting.point["memory_size"]),
        vs_fixed_at_mean=paired(a.auc, at_mean.auc),
        free_grow_fraction=shares["free_grow_fraction"],
    )


def _walk(runs: Mapping[str, Runs], start: int) -> Walk:
    from jaxreplay.experiments import dqn

    w = select(runs[stages.ADAPTIVE], stages.walk(start))
    mean_size, final_size = float(np.nanmean(w.mean_size)), float(np.nanmean(w.final_size))
    return Walk(int(start), mean_size, final_size, dqn.adaptive_diagnostics(w.ds)["grow_fraction"], ci(w.auc))


def analyse(design: ReplayDesign, runs: Mapping[str, Runs]) -> Analysis:
    """The study's conclusions from the runs of every stage of
    :func:`~jaxreplay.paper.reproduce.replay_study.stages.declare` (``runs``, by stage label).

    Raises:
        ValueError: a stage lacks a setting the analysis reads (names the stage and the label).
    """
    top, low = max(design.capacities), min(design.capacities)
    high, low_n = _capacity_diff(design, runs, max(design.n_steps)), _capacity_diff(design, runs, min(design.n_steps))
    ends = stages.starts(design)
    return Analysis(
        cells=tuple(_cell(runs, c, r, n) for c, r, n in design.cells()),
        capacity=tuple(
            contrast(runs, n, [((top, ADAPTIVE_RATIO, n), (low, ADAPTIVE_RATIO, n))]) for n in design.n_steps
        ),
        interaction=paired(high, low_n),
        interaction_seeds=_seeds_left(high - low_n),
        ratio_at_equal_age=tuple(contrast(runs, n, equal_age_pairs(design, n)) for n in design.n_steps),
        age_at_equal_ratio=tuple(contrast(runs, n, equal_ratio_pairs(design, n)) for n in design.n_steps),
        adaptive_n_step=stages.adaptive_n_step(design, runs),
        static=tuple((int(s), ci(select(runs[stages.ADAPTIVE], stages.fixed(s)).auc)) for s in ends),
        adaptive=tuple(_adaptive(design, runs, rule, s) for rule in STAGE_RULES for s in ends),
        walks=tuple(_walk(runs, s) for s in ends),
        diverged={label: diverged(r) for label, r in runs.items()},
        soft_diverged=soft_diverged(runs),
        unscored={label: unscored(r) for label, r in runs.items()},
    )
