"""A DQN replay study that can answer the paper's question: does aER find a good memory size?

Entry point: :func:`study` (``jaxreplay study dqn --env ENV --out DIR [--quick]
[--seeds S]``). Per game, every run goes through the sweep engine
(:mod:`jaxreplay.engine.sweep`, persisted under ``DIR/sweeps/``, so a rerun resumes)
and every run of a game shares one compiled program: the study's setup has
aER compiled in, and a fixed memory is the rule ``adaptive_rule = 0`` of the
same program (:data:`jaxreplay.experiments.dqn.ADAPTIVE_RULES`). Runs with the
same seed index share their random numbers across settings (the engine's
common random numbers), so comparisons are *paired* by seed.

Stages (each a sweep; later ones depend on earlier results):

1. **Response curve**: static memories on a log grid from about 100 to the run
   length (8 sizes; 5 with ``quick``), the memory-size response of the score.
2. **aER** from three starts: the smallest size, the static optimum and the
   largest (the grid's middle replaces an end that is the optimum), plus the
   **random ±k walk** control from the same starts and the **sensitivity**
   variants (one change at a time, from the smallest start): target-network
   TD errors, independent draws, literal counts, k = 100 and 500, n_old
   halved and doubled, the ε variant as a relative tolerance of 5%.
3. **Fixed at aER's time-averaged size**, per start (the control for "aER
   helps because it moves, not because of the size it sits at").
4. CartPole only: the response curve and aER under the **other optimizer
   reading** (Algorithm 1's per-transition SGD step vs Adam on the mean loss).

Scores. ``auc``: the mean over segments of the mean training-episode return
(the area under the learning curve, what the paper's figures compare);
``final``: the greedy evaluation return at the end. Per setting: the IQM over
seeds with a 95% expanded percentile-bootstrap interval
(:func:`~jaxreplay.engine.results.expanded_confidence`, which keeps 95% at a
few seeds where the plain one covered 89–92%). Paired comparisons: the
difference of two settings' IQMs, seeds resampled in pairs. Below 6 finite
seeds there is no interval (an interval of a mean or IQM within the seeds'
range cannot reach 95% coverage there:
:func:`~jaxreplay.engine.results.min_seeds_for_interval`): its bounds are
``null`` with a ``*_null_reason`` ("too few seeds (n = 2) for an interval")
and the verdict says "cannot tell (too few seeds)" instead of yes or no. The paper's
statistic (share of aER seeds above the mean of every static run) is reported
beside them with the static sizes that enter the average.

Outputs in ``DIR``: ``report.md``, ``study.json`` (``response``, ``adaptive``,
``controls``, ``sensitivity``, ``paper_share``, ``verdict``), ``runs.csv`` (one
row per run), ``curves.csv`` (seed means per setting and segment), and the
figures ``response.png`` (the response curve with aER's N(t) drawn under it on
the same memory-size axis), ``learning_curves.png`` and ``memory_size.png``.

Layout (one concern per module): :mod:`~jaxreplay.paper.reproduce.study.settings` (the
:class:`StudyDesign` and each setting's sweep point), :mod:`~jaxreplay.paper.reproduce.study.stages`
(the stages, declared in one place, and their runner), :mod:`~jaxreplay.paper.reproduce.study.runs`
(a stage's per-run numbers, selected by setting label, and the statistics over seeds),
:mod:`~jaxreplay.paper.reproduce.study.analysis` (the pure analysis: runs in, a typed
:class:`~jaxreplay.paper.reproduce.study.analysis.Analysis` out),
:mod:`~jaxreplay.paper.reproduce.study.verdict` (the labels derived from the numbers, and
:func:`relabel`), and the writers: :mod:`~jaxreplay.paper.reproduce.study.writer` (``study.json``,
the CSV files, the README block), :mod:`~jaxreplay.paper.reproduce.study.report` (``report.md``
and the README's table) and :mod:`~jaxreplay.paper.reproduce.study.figures`.
"""

from __future__ import annotations

from jaxreplay.paper.reproduce.study import analysis, figures, stages, writer
from jaxreplay.paper.reproduce.study.report import summary_table
from jaxreplay.paper.reproduce.study.settings import (
    DEFAULT_SEEDS,
    ENVS,
    POINT_KEYS,
    QUICK_SENSITIVITY,
    SENSITIVITY,
    StudyDesign,
    design,
)
from jaxreplay.paper.reproduce.study.verdict import relabel
from jaxreplay.paper.reproduce.study.writer import read_study, refresh, update_readme

__all__ = [
    "DEFAULT_SEEDS",
    "ENVS",
    "POINT_KEYS",
    "QUICK_SENSITIVITY",
    "SENSITIVITY",
    "StudyDesign",
    "design",
    "read_study",
    "refresh",
    "relabel",
    "study",
    "summary_table",
    "update_readme",
]


def study(
    out_dir,
    env_id: str,
    *,
    quick: bool = False,
    seeds: int | None = None,
    steps: int | None = None,
    progress: bool = True,
    optimizer_reading: str = "adam",
    chunk_size: int | None = None,
) -> dict:
    """Run the study of ``env_id`` into ``out_dir`` (module docstring) and return ``study.json``'s content.

    The stages of :func:`~jaxreplay.paper.reproduce.study.stages.declare` run first (each a sweep,
    resumable), then :func:`~jaxreplay.paper.reproduce.study.analysis.analyse` reads them and the
    writers write the figures, the CSV files, ``study.json`` and ``report.md``.

    Args:
        out_dir: output folder (created; a rerun resumes finished sweeps).
        env_id: one of :data:`ENVS`.
        quick: the CPU quick mode.
        seeds: seeds per setting (default 3 quick, 100 otherwise).
        steps: cut every run to this many environment steps (tests, smoke runs).
        progress: progress bars on stderr.
        optimizer_reading: the main optimizer reading (``"adam"`` or ``"sgd"``).
        chunk_size: runs per compiled call in every stage (default: four
            settings' worth, ``4 × seeds``; on an accelerator more runs per
            call go faster, e.g. ``8 × seeds``). One value for every stage compiles the
            program once and runs every setting in identically shaped programs
            (XLA's kernels may round differently at another batch size, and RL
            amplifies one ulp into another trajectory); the engine pads a
            stage with fewer or not a multiple of ``chunk_size`` runs.

    Raises:
        ValueError: ``env_id`` not one of :data:`ENVS`, or ``seeds`` below 1.
    """
    chosen = design(env_id, quick=quick, seeds=seeds, steps=steps, optimizer_reading=optimizer_reading)
    return writer.run_study(out_dir, "study dqn", OUTPUTS, chosen, PARTS, steps, progress, chunk_size)


PARTS = writer.StudyParts(stages, analysis, figures, writer)
"""The modules the study runs through (:func:`~jaxreplay.paper.reproduce.study.writer.run_study`)."""

OUTPUTS = (
    "response.png",
    "learning_curves.png",
    "memory_size.png",
    "runs.csv",
    "curves.csv",
    "study.json",
    "report.md",
)
"""The files a study writes in its folder (study.json and report.md last)."""
