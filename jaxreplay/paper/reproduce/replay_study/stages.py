"""The replay study's stages, declared in one place (:func:`declare`), the adaptive rules it tests
(:data:`STAGE_RULES`, one row each), the runner (:func:`run`) and the reader of a finished study's runs
(:func:`from_csv`).

A :class:`Stage` is one sweep through the engine (persisted under ``DIR/sweeps/``, so a rerun resumes):

1. ``grid-ratio-R``, one per replay ratio R: every cell of capacity × n-step at that ratio, one
   compiled program per ratio. (Capacity and n are traced; a program pays for the update slots of its
   largest ratio in every run, masked, so one program per ratio costs (0.25 + 1 + 4) / 12 = 44% of one
   program for the whole grid. The engine would group one sweep's runs by ratio the same way; a sweep
   per ratio also gives each ratio its own folder, resumed and reported apart.)
2. ``adaptive``: in the n-step setting with the larger capacity effect (at ratio 1), each rule of
   :data:`STAGE_RULES` from the smallest and the largest capacity, the random ±k walk from both,
   and the two static capacities themselves (the same program, ``adaptive_rule = 0``).
3. ``fixed-at-mean``: a fixed memory at each adaptive run's time-averaged size (the control for "it
   helps because it moves, not because of the size it sits at").

Settings are :class:`~jaxreplay.paper.reproduce.study.runs.Setting` (label and sweep point), selected
later by label (:func:`~jaxreplay.paper.reproduce.study.runs.select`), never by row.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from jaxreplay.paper.reproduce.replay_study.settings import ReplayDesign, point
from jaxreplay.paper.reproduce.study.runs import Runs, Setting, SettingRuns, paired, select

if TYPE_CHECKING:
    from jaxreplay.experiments.dqn import Setup

ADAPTIVE, FIXED_AT_MEAN = "adaptive", "fixed-at-mean"
ADAPTIVE_RATIO = 1.0
"""The replay ratio of the adaptive stage, and of the capacity contrasts it follows."""


class AdaptiveRule(NamedTuple):
    """One adaptive rule of the adaptive stage (a row of :data:`STAGE_RULES`).

    Attributes:
        name: its label in the study's outputs (``"aER"``).
        rule: the name of its ``adaptive_rule`` constant in :mod:`jaxreplay.experiments.dqn` (``"RULE_AER"``).
        relative: its relative tolerance ρ (``adaptive_relative_tolerance``; 0: none).
    """

    name: str
    rule: str
    relative: float = 0.0


STAGE_RULES = (
    AdaptiveRule("aER", "RULE_AER"),
    AdaptiveRule("aER, relative ε = 5%", "RULE_AER", relative=0.05),
    # Ours: resizes only when a two-sided CUSUM over the checks' votes crosses h (the experiment's
    # defaults h = 4, δ = 0.25), so coin-toss votes leave the memory where it started (jaxreplay.evidence).
    AdaptiveRule("aER with accumulated evidence", "RULE_EVIDENCE"),
)
"""The adaptive rules the adaptive stage runs from each start; a new rule is one more row. (Not
:data:`jaxreplay.experiments.dqn.ADAPTIVE_RULES`, the experiment's rule codes: these rows name a code and
its settings.)"""


def rule_value(rule: AdaptiveRule) -> int:
    """The ``adaptive_rule`` value of ``rule`` (its constant in :mod:`jaxreplay.experiments.dqn`)."""
    from jaxreplay.experiments import dqn

    return int(getattr(dqn, rule.rule))


def grid(ratio: float) -> str:
    """The label of the grid stage of replay ratio ``ratio``."""
    return f"grid-ratio-{ratio:g}"


def cell(memory_size: int, ratio: float, n_step: int) -> str:
    """The label of the grid cell of ``memory_size`` at ``ratio`` with ``n_step`` targets."""
    return f"capacity {memory_size}, ratio {ratio:g}, n = {n_step}"


def fixed(size: int) -> str:
    """The label of a fixed memory of ``size`` in the adaptive stage."""
    return f"fixed {size}"


def adaptive(rule: AdaptiveRule, start: int) -> str:
    """The label of ``rule`` from ``start``."""
    return f"{rule.name} from {start}"


def walk(start: int) -> str:
    """The label of the random ±k walk from ``start``."""
    return f"random walk from {start}"


def fixed_at_mean(rule: AdaptiveRule, start: int) -> str:
    """The label of a fixed memory at the time-averaged size of ``rule`` from ``start``."""
    return f"fixed at the mean size of {adaptive(rule, start)}"


Done = Mapping[str, Runs]
"""The runs of the stages run so far, by stage label."""


class Stage(NamedTuple):
    """One declared stage (:func:`declare`): its label (sweep folder, rows in the CSV files), its seeds per
    setting (the design's), its compiled program, and ``settings(design, done)``, its settings from the runs
    of the stages before it."""

    label: str
    seeds: int
    setup: Setup
    settings: Callable[[ReplayDesign, Done], tuple[Setting, ...]]


def cell_runs(done: Done, memory_size: int, ratio: float, n_step: int) -> SettingRuns:
    """The runs of a grid cell (from its ratio's stage in ``done``)."""
    return select(done[grid(ratio)], cell(memory_size, ratio, n_step))


def capacity_effect(design: ReplayDesign, done: Done, n_step: int) -> dict:
    """The paired capacity effect at ratio 1 with ``n_step`` targets: largest − smallest capacity, per seed."""
    top, low = max(design.capacities), min(design.capacities)
    return paired(cell_runs(done, top, ADAPTIVE_RATIO, n_step).auc, cell_runs(done, low, ADAPTIVE_RATIO, n_step).auc)


def adaptive_n_step(design: ReplayDesign, done: Done) -> int:
    """The n of the adaptive stage: the one with the larger capacity effect (a tie, or no estimate: the larger n)."""
    effects = {n: capacity_effect(design, done, n)["estimate"] for n in design.n_steps}
    return max(design.n_steps, key=lambda n: (-np.inf if effects[n] is None else effects[n], n))


def starts(design: ReplayDesign) -> tuple[int, int]:
    """The adaptive rules' starts: the smallest and the largest capacity of the grid."""
    return min(design.capacities), max(design.capacities)


def _grid(ratio: float) -> Callable[[ReplayDesign, Done], tuple[Setting, ...]]:
    def settings(design: ReplayDesign, done: Done) -> tuple[Setting, ...]:
        from jaxreplay.experiments.dqn import RULE_FIXED

        return tuple(Setting(cell(c, r, n), point(c, r, n, RULE_FIXED)) for c, r, n in design.cells() if r == ratio)

    return settings


def _adaptive(design: ReplayDesign, done: Done) -> tuple[Setting, ...]:
    from jaxreplay.experiments.dqn import RULE_FIXED, RULE_RANDOM

    n = adaptive_n_step(design, done)
    out = [
        Setting(adaptive(rule, s), point(s, ADAPTIVE_RATIO, n, rule_value(rule), relative=rule.relative))
        for rule in STAGE_RULES
        for s in starts(design)
    ]
    out += [Setting(walk(s), point(s, ADAPTIVE_RATIO, n, RULE_RANDOM)) for s in starts(design)]
    out += [Setting(fixed(s), point(s, ADAPTIVE_RATIO, n, RULE_FIXED)) for s in starts(design)]
    return tuple(out)


def _fixed_at_mean(design: ReplayDesign, done: Done) -> tuple[Setting, ...]:
    from jaxreplay.experiments.dqn import RULE_FIXED

    n = adaptive_n_step(design, done)

    def mean_size(rule: AdaptiveRule, start: int) -> int:
        size = np.nanmean(select(done[ADAPTIVE], adaptive(rule, start)).mean_size)
        # At least n: a fixed memory's size bounds n (dqn.check refuses more; no window holds more transitions).
        return int(min(max(round(size), n), design.adaptive_setup.max_capacity))

    return tuple(
        Setting(fixed_at_mean(rule, s), point(mean_size(rule, s), ADAPTIVE_RATIO, n, RULE_FIXED))
        for rule in STAGE_RULES
        for s in starts(design)
    )


def declare(design: ReplayDesign) -> tuple[Stage, ...]:
    """The study's stages in the order they run (the module docstring says what each is for)."""
    seeds = design.seeds
    return tuple(Stage(grid(r), seeds, design.grid_setup(r), _grid(r)) for r in design.ratios) + (
        Stage(ADAPTIVE, seeds, design.adaptive_setup, _adaptive),
        Stage(FIXED_AT_MEAN, seeds, design.adaptive_setup, _fixed_at_mean),
    )


def run(design: ReplayDesign, out: pathlib.Path, *, progress: bool = True, chunk_size: int) -> dict[str, Runs]:
    """Run every stage of :func:`declare` in order, each a sweep persisted under ``out/sweeps/`` (a rerun
    resumes finished sweeps), ``chunk_size`` runs per compiled call.

    Returns:
        The runs of each stage, by stage label, in the order they ran.
    """
    from jaxreplay.paper.reproduce.study.stages import run_stages

    return run_stages(design, declare(design), out, progress=progress, chunk_size=chunk_size)


def from_csv(design: ReplayDesign, path) -> dict[str, Runs]:
    """The runs of every stage of :func:`declare` as a finished study's ``runs.csv`` at ``path`` holds them, each
    stage's settings declared again from the stages before it (the adaptive stage's n from the grid's scores, the
    fixed-at-mean sizes from the adaptive runs), so that ``jaxreplay study refresh`` recomputes the analysis
    without the sweeps (:func:`~jaxreplay.paper.reproduce.study.stages.runs_from_csv`).

    Raises:
        ValueError: (one line naming the file) a declared setting without one row per seed, rows of no setting
            or of another game, a column missing (a runs.csv written before it held aER's check counts).
    """
    from jaxreplay.paper.reproduce.replay_study.settings import POINT_KEYS
    from jaxreplay.paper.reproduce.study.stages import runs_from_csv

    return runs_from_csv(design, path, declare(design), POINT_KEYS, "study replay")
