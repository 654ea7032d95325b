"""The replay study beyond the paper: capacity × replay ratio × n-step, after Fedus et al. 2020.

Entry point: :func:`study` (``jaxreplay study replay --env ENV --out DIR [--quick|--full] [--seeds S]
[--steps T]``). Fedus et al. (*Revisiting Fundamentals of Experience Replay*, ICML 2020,
arXiv:2007.06700) found on Atari that a larger replay memory helps Rainbow but not DQN, that n-step
returns are what makes the larger memory pay off, and separated the replay capacity from the age of
the oldest policy in the memory. This study asks the same questions of one game, with the seeds and
intervals of the DQN replay study (:mod:`jaxreplay.paper.reproduce.study`), whose statistics and text
helpers it imports:

1. **The grid** (one sweep per replay ratio, capacity and n traced): capacity (4 sizes a factor 4
   apart, the largest about half the run) × replay ratio (0.25, 1, 4 gradient updates per environment
   step) × n-step (1, 3). The oldest-policy age, capacity × ratio in gradient updates, is a derived
   coordinate; with both factors 4, cells of equal age and different ratio exist.
2. **The answers**, each a paired contrast of the score with a 95% Student-t interval and a line of
   words: does capacity help at n = 1 and at n = 3 (largest − smallest capacity at ratio 1)? Is the
   effect larger with n = 3 (the difference of the two per-seed differences)? Does the score follow
   the replay ratio (cells of equal age, ratio × 4) or the oldest-policy age (cells of equal ratio,
   age × 4)? Below 6 seeds, "cannot tell (too few seeds)".
3. **An adaptive stage** in the n with the larger capacity effect, at ratio 1: each rule of
   :data:`~jaxreplay.paper.reproduce.replay_study.stages.STAGE_RULES` (aER, its relative-tolerance
   variant and aER with accumulated evidence, :mod:`jaxreplay.evidence`) from the smallest and the
   largest capacity, with the random ±k walk and a fixed memory at each rule's time-averaged size as
   controls.

Games (:data:`GAMES`): CartPole-v1 (the tuned setting, which learns), Acrobot-v1 and MountainCar-v0
(the paper's settings), Breakout-MinAtar and SpaceInvaders-MinAtar (the MinAtar preset); full scale:
the presets' run lengths and 100 seeds, except where :attr:`Game.reduced` says otherwise. ``quick``: a
CPU mode of short runs and 3 seeds, labelled as such in every output.

Scores: ``auc``, the mean training return over segments, and ``final``, the greedy return at the end;
IQM over seeds with a 95% expanded bootstrap interval per cell; contrasts paired by seed index (the
engine's common random numbers).

Outputs in ``DIR``: ``report.md`` (answers, tables, the adaptive stage, compared with the literature),
``study.json``, ``runs.csv`` (one row per run), ``curves.csv`` (seed means per setting and segment),
``heatmap.png``, ``capacity.png`` and ``learning_curves.png``; the sweeps under ``DIR/sweeps/`` (a rerun
resumes them and computes nothing finished).

Layout: :mod:`~jaxreplay.paper.reproduce.replay_study.settings` (the design),
:mod:`~jaxreplay.paper.reproduce.replay_study.stages` (the stages and the adaptive rules' table),
:mod:`~jaxreplay.paper.reproduce.replay_study.analysis` (runs in,
:class:`~jaxreplay.paper.reproduce.replay_study.analysis.Analysis` out),
:mod:`~jaxreplay.paper.reproduce.replay_study.verdict` (the answers in words), and the writers
:mod:`~jaxreplay.paper.reproduce.replay_study.writer`, :mod:`~jaxreplay.paper.reproduce.replay_study.report`
and :mod:`~jaxreplay.paper.reproduce.replay_study.figures`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from jaxreplay.paper.reproduce.replay_study.settings import GAMES, Game, ReplayDesign, design

if TYPE_CHECKING:
    from jaxreplay.paper.reproduce.replay_study.stages import STAGE_RULES, AdaptiveRule
    from jaxreplay.paper.reproduce.replay_study.writer import read_study, refresh, runs_csv_has_counts, update_readme

# The rest loads on first use (PEP 562): the CLI's parser reads GAMES from this package, and the stages,
# analysis and writers import JAX and Matplotlib (`jaxreplay --help` would wait a second for them).
_LAZY = {
    "STAGE_RULES": "stages",
    "AdaptiveRule": "stages",
    "read_study": "writer",
    "refresh": "writer",
    "runs_csv_has_counts": "writer",
    "update_readme": "writer",
    "PARTS": None,
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "PARTS":
        return _parts()
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = [
    "STAGE_RULES",
    "GAMES",
    "AdaptiveRule",
    "Game",
    "ReplayDesign",
    "design",
    "read_study",
    "refresh",
    "runs_csv_has_counts",
    "study",
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
    chunk_size: int | None = None,
) -> dict:
    """Run the replay study of ``env_id`` into ``out_dir`` (module docstring) and return ``study.json``'s content.

    Args:
        out_dir: output folder (created; a rerun resumes finished sweeps).
        env_id: one of :data:`GAMES`.
        quick: the CPU quick mode.
        seeds: seeds per setting (default 3 quick, the game's :attr:`Game.full_seeds` otherwise).
        steps: cut every run to this many environment steps (a multiple of 20; tests, smoke runs).
        progress: progress bars on stderr.
        chunk_size: runs per compiled call (default ``4 × seeds``; on an accelerator more go faster).

    Raises:
        ValueError: ``env_id`` not one of :data:`GAMES`, ``seeds`` below 1, or ``steps`` not a
            positive multiple of 20 (before anything is compiled).
    """
    from jaxreplay.paper.reproduce.study.writer import run_study

    chosen = design(env_id, quick=quick, seeds=seeds, steps=steps)
    return run_study(out_dir, "study replay", OUTPUTS, chosen, _parts(), steps, progress, chunk_size)


def _parts():
    """``PARTS``: the modules the study runs through (:func:`~jaxreplay.paper.reproduce.study.writer.run_study`)."""
    from jaxreplay.paper.reproduce.replay_study import analysis, figures, stages, writer
    from jaxreplay.paper.reproduce.study.writer import StudyParts

    return StudyParts(stages, analysis, figures, writer)


OUTPUTS = ("heatmap.png", "capacity.png", "learning_curves.png", "runs.csv", "curves.csv", "study.json", "report.md")
"""The files a replay study writes in its folder (study.json and report.md last)."""
