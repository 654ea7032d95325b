"""The study's analysis: from the stages' runs to a typed :class:`Analysis` (no I/O).

:func:`analyse` reads every setting by its label (:func:`~jaxreplay.paper.reproduce.study.runs.select`
with the labels of :mod:`~jaxreplay.paper.reproduce.study.stages`). Scores: ``auc`` (the mean
training return over segments) summarised per setting by its IQM over seeds with a 95% expanded
bootstrap interval; comparisons are differences of IQMs paired by seed index (the same random numbers:
:func:`~jaxreplay.paper.reproduce.study.runs.paired_iqm`), and whether memory size matters at all is
a permutation test over every size (:func:`~jaxreplay.paper.reproduce.study.runs.differ_test`).
Diverged runs have no score: they are counted, never silently dropped. The labels derived from these
numbers (aER's direction, the verdict) are :mod:`~jaxreplay.paper.reproduce.study.verdict`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from jaxreplay.paper.reproduce.study import stages
from jaxreplay.paper.reproduce.study.runs import (
    Interval,
    Runs,
    SettingRuns,
    ci,
    differ_test,
    diverged,
    optimum,
    paired_iqm,
    select,
    soft_diverged,
    unscored,
)
from jaxreplay.paper.reproduce.study.settings import StudyDesign
from jaxreplay.paper.reproduce.study.stages import aer, fixed, walk


class StaticScore(NamedTuple):
    """One static memory size of a response curve: its score and, on the main reading, its final return."""

    memory_size: int
    score: Interval
    final: Interval | None  # None: the other reading reports scores only
    diverged: int = 0  # runs that diverged (no score: left out of it)
    unscored: int = 0  # runs without a score that did not diverge (no training episode ended; left out too)


class AdaptiveScore(NamedTuple):
    """aER from one start, and its paired comparisons (aER − other, same seeds) with the static
    optimum, the static memory it started at and its two controls."""

    initial_size: int
    final_size_mean: float  # seed mean of the size at the end
    mean_size: float  # seed mean of the time-averaged size
    grow_fraction: float | None  # share of checks that grew the memory (None: no check)
    score: Interval
    final: Interval
    vs_best_static: Interval
    vs_start_static: Interval
    vs_random_walk: Interval
    vs_fixed_at_mean: Interval
    diagnostics: dict  # :func:`~jaxreplay.experiments.dqn.adaptive_diagnostics`


class Control(NamedTuple):
    """aER's two controls from one start: the random ±k walk, and a fixed memory at aER's time-averaged size."""

    initial_size: int
    random_walk_mean_size: float
    random_walk_final_size_mean: float
    random_walk_grow_fraction: float | None
    random_walk: Interval  # score
    fixed_at_mean_size: int
    fixed_at_mean: Interval  # score


class Variant(NamedTuple):
    """One sensitivity variant (or default aER, its reference) from the smallest start."""

    variant: str
    initial_size: int
    seeds: int
    final_size_mean: float
    grow_fraction: float | None
    score: Interval
    vs_default: Interval | None  # paired with default aER; None for default aER itself
    diagnostics: dict


class PaperShare(NamedTuple):
    """The paper's statistic for aER from one start: the share of its seeds whose score beats the
    mean score of every static run (:func:`~jaxreplay.paper.reproduce.dqn.beats_static_average`)."""

    initial_size: int
    static_sizes: list[int]
    share: dict


class ReadingAdaptive(NamedTuple):
    """aER from one start under the other optimizer reading."""

    initial_size: int
    final_size_mean: float
    grow_fraction: float | None
    score: Interval


class OtherReading(NamedTuple):
    """The response curve and aER under the other optimizer reading."""

    reading: str
    response: tuple[StaticScore, ...]
    adaptive: tuple[ReadingAdaptive, ...]


class Analysis(NamedTuple):
    """Everything the study concludes from its runs (:func:`analyse`); one entry per size or start,
    in increasing order."""

    starts: tuple[int, ...]
    response: tuple[StaticScore, ...]
    best_static: int
    worst_static: int
    memory_size_effect: Interval  # IQM of the best − IQM of the worst static size, paired
    memory_size_test: dict  # do the static sizes differ at all (runs.differ_test)
    adaptive: tuple[AdaptiveScore, ...]
    controls: tuple[Control, ...]
    sensitivity: tuple[Variant, ...]
    paper_share: tuple[PaperShare, ...]
    other_reading: OtherReading | None
    diverged: dict[str, int]  # runs that diverged (no score), by stage
    soft_diverged: dict[str, int] | None = None  # scored runs flagged soft-diverged, by stage (None: not recorded)
    unscored: dict[str, int] = {}  # runs without a score that did not diverge (no episode ended), by stage


def _diagnostics(runs: SettingRuns) -> dict:
    from jaxreplay.experiments import dqn

    return dqn.adaptive_diagnostics(runs.ds)


def _adaptive(start: int, best: int, runs: Mapping[str, Runs]) -> AdaptiveScore:
    a = select(runs[stages.ADAPTIVE], aer(start))
    diagnostics = _diagnostics(a)
    return AdaptiveScore(
        initial_size=int(start),
        final_size_mean=float(np.nanmean(a.final_size)),
        mean_size=float(np.nanmean(a.mean_size)),
        grow_fraction=diagnostics["grow_fraction"],
        score=ci(a.auc),
        final=ci(a.final),
        vs_best_static=paired_iqm(a.auc, select(runs[stages.RESPONSE], fixed(best)).auc),
        vs_start_static=paired_iqm(a.auc, select(runs[stages.RESPONSE], fixed(start)).auc),
        vs_random_walk=paired_iqm(a.auc, select(runs[stages.ADAPTIVE], walk(start)).auc),
        vs_fixed_at_mean=paired_iqm(a.auc, select(runs[stages.FIXED_AT_MEAN], stages.fixed_at_mean(start)).auc),
        diagnostics=diagnostics,
    )


def _control(start: int, runs: Mapping[str, Runs]) -> Control:
    w = select(runs[stages.ADAPTIVE], walk(start))
    f = select(runs[stages.FIXED_AT_MEAN], stages.fixed_at_mean(start))
    return Control(
        initial_size=int(start),
        random_walk_mean_size=float(np.nanmean(w.mean_size)),
        random_walk_final_size_mean=float(np.nanmean(w.final_size)),
        random_walk_grow_fraction=_diagnostics(w)["grow_fraction"],
        random_walk=ci(w.auc),
        fixed_at_mean_size=f.setting.point["memory_size"],
        fixed_at_mean=ci(f.auc),
    )


def _variant(name: str, start: int, seeds: int, sensitivity: Runs) -> Variant:
    v = select(sensitivity, name)
    diagnostics = _diagnostics(v)
    default = select(sensitivity, stages.DEFAULT_AER)
    return Variant(
        variant=name,
        initial_size=int(start),
        seeds=seeds,
        final_size_mean=float(np.nanmean(v.final_size)),
        grow_fraction=diagnostics["grow_fraction"],
        score=ci(v.auc),
        vs_default=None if name == stages.DEFAULT_AER else paired_iqm(v.auc, default.auc),
        diagnostics=diagnostics,
    )


def _static(runs: SettingRuns, *, final: bool) -> StaticScore:
    """The :class:`StaticScore` of one static size's runs (its final return too where ``final``)."""
    size = int(runs.setting.point["memory_size"])
    return StaticScore(size, ci(runs.auc), ci(runs.final) if final else None, diverged(runs), unscored(runs))


def _other_reading(design: StudyDesign, starts: list[int], runs: Runs) -> OtherReading:
    def adaptive(start: int) -> ReadingAdaptive:
        a = select(runs, aer(start))
        final_size_mean = float(np.nanmean(a.final_size))
        return ReadingAdaptive(int(start), final_size_mean, _diagnostics(a)["grow_fraction"], ci(a.auc))

    return OtherReading(
        reading=str(design.other_reading),
        response=tuple(_static(select(runs, fixed(n)), final=False) for n in design.sizes),
        adaptive=tuple(adaptive(n) for n in starts),
    )


def analyse(design: StudyDesign, runs: Mapping[str, Runs]) -> Analysis:
    """The study's conclusions from the runs of every stage of
    :func:`~jaxreplay.paper.reproduce.study.stages.declare` (``runs``, by stage label).

    Raises:
        ValueError: a stage lacks a setting the analysis reads (names the stage and the label).
    """
    from jaxreplay.paper.reproduce.dqn import beats_static_average

    response = runs[stages.RESPONSE]
    best, worst = optimum(response)
    begin = stages.starts(design.sizes, best)
    static_all = response.auc.ravel()  # every static run: the paper's average
    sensitivity = runs[stages.SENSITIVITY]
    return Analysis(
        starts=tuple(int(n) for n in begin),
        response=tuple(_static(select(response, fixed(n)), final=True) for n in design.sizes),
        best_static=int(best),
        worst_static=int(worst),
        memory_size_effect=paired_iqm(select(response, fixed(best)).auc, select(response, fixed(worst)).auc),
        memory_size_test=differ_test(np.stack([select(response, fixed(n)).auc for n in design.sizes])),
        adaptive=tuple(_adaptive(n, best, runs) for n in begin),
        controls=tuple(_control(n, runs) for n in begin),
        sensitivity=tuple(
            _variant(name, min(begin), design.sensitivity_seeds, sensitivity)
            for name in (stages.DEFAULT_AER, *design.sensitivity)
        ),
        paper_share=tuple(
            PaperShare(
                int(n),
                [int(s) for s in design.sizes],
                # (a diverged aER run counts as a loss; one unscored, no episode ended, is left out and counted)
                beats_static_average(
                    (a := select(runs[stages.ADAPTIVE], aer(n))).auc,
                    static_all,
                    adaptive_diverged=np.asarray(a.ds.diverged.values, bool),
                ),
            )
            for n in begin
        ),
        other_reading=None
        if design.other_reading is None
        else _other_reading(design, begin, runs[stages.reading(design.other_reading)]),
        diverged={label: diverged(r) for label, r in runs.items()},
        soft_diverged=soft_diverged(runs),
        unscored={label: unscored(r) for label, r in runs.items()},
    )
