"""The study's stages, declared in one place (:func:`declare`), the runner (:func:`run`), and their runs
read back from a finished study's ``runs.csv`` (:func:`from_csv`).

A :class:`Stage` is one sweep: its label, its seeds, its compiled program and the function that
lists its settings, each a :class:`~jaxreplay.paper.reproduce.study.runs.Setting` with a label
(:func:`fixed`, :func:`aer`, :func:`walk`, :func:`fixed_at_mean`, a sensitivity variant's name).
A later stage's settings may depend on the earlier stages' runs: aER's starts on the response
curve's optimum, the fixed-at-mean control on aER's time-averaged sizes.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from jaxreplay.paper.reproduce.study.runs import CSV_ADDED_COUNTS, CSV_COUNTS, Runs, Setting, optimum, run_stage, select
from jaxreplay.paper.reproduce.study.settings import StudyDesign, point, variant

if TYPE_CHECKING:
    from jaxreplay.experiments.dqn import Setup

# The stages' labels: each names its sweep folder (``sweeps/LABEL-<fingerprint>``) and its rows
# in runs.csv and curves.csv.
RESPONSE, ADAPTIVE, SENSITIVITY, FIXED_AT_MEAN = "response", "adaptive", "sensitivity", "fixed-at-mean"
DEFAULT_AER = "default (aER)"  # the sensitivity stage's reference: default aER on the variants' seeds


def reading(name: str) -> str:
    """The label of the stage that reruns the response curve and aER under optimizer reading ``name``."""
    return f"reading-{name}"


def fixed(size: int) -> str:
    """The label of a fixed memory of ``size``."""
    return f"fixed {size}"


def aer(start: int) -> str:
    """The label of default aER from ``start``."""
    return f"aER from {start}"


def walk(start: int) -> str:
    """The label of the random ±k walk from ``start`` (aER's first control)."""
    return f"random walk from {start}"


def fixed_at_mean(start: int) -> str:
    """The label of a fixed memory at the time-averaged size of aER from ``start`` (its second control)."""
    return f"fixed at the mean size of aER from {start}"


Done = Mapping[str, Runs]  # the runs of the stages run so far, by stage label


class Stage(NamedTuple):
    """One declared stage of the study (:func:`declare`).

    Attributes:
        label: names the stage (its sweep folder and its rows in the CSV files).
        seeds: seeds per setting.
        setup: the compiled program its runs share.
        settings: ``settings(design, done)``: the stage's settings, from the design and the runs of
            the stages before it (``done``, by stage label).
    """

    label: str
    seeds: int
    setup: Setup
    settings: Callable[[StudyDesign, Done], tuple[Setting, ...]]


def starts(sizes: tuple, best: int) -> list[int]:
    """aER's starts below, near and above the static optimum ``best`` (a size of the grid ``sizes``):
    the smallest, the optimum and the largest size; where the optimum is an end, the grid's middle too."""
    chosen = [min(sizes), best, max(sizes)]
    if best in (min(sizes), max(sizes)):
        chosen.append(sizes[len(sizes) // 2])
    return sorted(set(chosen))


def _starts(design: StudyDesign, done: Done) -> list[int]:
    return starts(design.sizes, optimum(done[RESPONSE])[0])


def _response(design: StudyDesign, done: Done) -> tuple[Setting, ...]:
    from jaxreplay.experiments.dqn import RULE_FIXED

    return tuple(Setting(fixed(n), point(n, RULE_FIXED)) for n in design.sizes)


def _adaptive(design: StudyDesign, done: Done) -> tuple[Setting, ...]:
    from jaxreplay.experiments.dqn import RULE_AER, RULE_RANDOM

    begin = _starts(design, done)
    return tuple(Setting(aer(n), point(n, RULE_AER)) for n in begin) + tuple(
        Setting(walk(n), point(n, RULE_RANDOM)) for n in begin
    )


def _sensitivity(design: StudyDesign, done: Done) -> tuple[Setting, ...]:
    from jaxreplay.experiments.dqn import RULE_AER

    start = min(_starts(design, done))
    return (Setting(DEFAULT_AER, point(start, RULE_AER)),) + tuple(
        Setting(name, variant(name, start)) for name in design.sensitivity
    )


def _fixed_at_mean(design: StudyDesign, done: Done) -> tuple[Setting, ...]:
    from jaxreplay.experiments.dqn import RULE_FIXED

    def mean_size(start: int) -> int:
        size = np.nanmean(select(done[ADAPTIVE], aer(start)).mean_size)
        return int(min(max(round(size), 1), design.setup.max_capacity))

    return tuple(Setting(fixed_at_mean(n), point(mean_size(n), RULE_FIXED)) for n in _starts(design, done))


def _other_reading(design: StudyDesign, done: Done) -> tuple[Setting, ...]:
    from jaxreplay.experiments.dqn import RULE_AER

    return _response(design, done) + tuple(Setting(aer(n), point(n, RULE_AER)) for n in _starts(design, done))


def declare(design: StudyDesign) -> tuple[Stage, ...]:
    """The study's stages in the order they run (the module docstring of
    :mod:`jaxreplay.paper.reproduce.study` says what each is for)."""
    stages = (
        Stage(RESPONSE, design.seeds, design.setup, _response),
        Stage(ADAPTIVE, design.seeds, design.setup, _adaptive),
        Stage(SENSITIVITY, design.sensitivity_seeds, design.setup, _sensitivity),
        Stage(FIXED_AT_MEAN, design.seeds, design.setup, _fixed_at_mean),
    )
    if design.other_reading is None:
        return stages
    # Algorithm 1's per-transition SGD step sums the batch's loss; Adam takes the mean.
    other = dataclasses.replace(
        design.setup, optimizer=design.other_reading, batch_reduction="sum" if design.other_reading == "sgd" else "mean"
    )
    return stages + (Stage(reading(design.other_reading), design.seeds, other, _other_reading),)


def run(design: StudyDesign, out: pathlib.Path, *, progress: bool = True, chunk_size: int) -> dict[str, Runs]:
    """Run every stage of :func:`declare` in order, each a sweep persisted under ``out/sweeps/``
    (a rerun resumes finished sweeps), with ``chunk_size`` runs per compiled call in every stage.

    Returns:
        The runs of each stage, by stage label, in the order they ran.
    """
    return run_stages(design, declare(design), out, progress=progress, chunk_size=chunk_size)


def run_stages(design, stages, out: pathlib.Path, *, progress: bool, chunk_size: int) -> dict[str, Runs]:
    """Run ``stages`` (a study's :func:`declare`) in order, each declaring its settings from the runs of the
    stages before it, each a sweep persisted under ``out/sweeps/`` (:func:`run`, and the replay study's).

    Returns:
        The runs of each stage, by stage label, in the order they ran.
    """
    done: dict[str, Runs] = {}
    for stage in stages:
        settings = stage.settings(design, done)
        done[stage.label] = run_stage(
            out,
            stage.label,
            settings,
            seeds=stage.seeds,
            common=design.common,
            setup=stage.setup,
            progress=progress,
            chunk_size=chunk_size,
        )
    return done


def from_csv(design: StudyDesign, path) -> dict[str, Runs]:
    """The runs of every stage of :func:`declare` as a finished study's ``runs.csv`` at ``path`` holds
    them (what :func:`run` returned when the study ran), each stage's settings declared again from the
    stages before it, so that the analysis can be recomputed without its sweeps.

    The datasets hold what runs.csv has: ``diverged``, aER's check counts, and where the file has them
    ``soft_diverged`` and the counts of :data:`~jaxreplay.paper.reproduce.study.runs.CSV_ADDED_COUNTS`; the
    sums of the TD-error changes at the checks (``adaptive_compared``, ``adaptive_noisy``,
    ``adaptive_change_sum``, ``adaptive_noise_sum``) are not in it and are NaN.

    Raises:
        ValueError: a declared setting has no rows, or not one per seed (names the stage, label and file).
    """
    from jaxreplay.paper.reproduce.study.settings import POINT_KEYS

    return runs_from_csv(design, path, declare(design), POINT_KEYS, "study dqn")


def runs_from_csv(design, path, stages, point_keys, command: str) -> dict[str, Runs]:
    """The runs of ``stages`` (a study's :func:`declare`, in order) as the runs.csv at ``path`` of the study
    command ``command`` holds them, each stage's settings declared again from the stages before it; a setting is
    found by its stage and its values of ``point_keys`` (:func:`from_csv`, and the replay study's).

    Raises:
        ValueError: (one line naming the file) a declared setting has no rows, or not one per seed; rows of
            another game or of no setting; a column missing or unreadable.
    """
    try:
        return _from_rows(design, path, stages, point_keys)
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
        if isinstance(e, ValueError) and str(e).startswith(f"{path}: "):
            raise
        raise ValueError(
            f"{path} is not a runs.csv that `jaxreplay {command}` wrote ({type(e).__name__}: {e}): rerun the "
            "study's command to write it again."
        ) from None


def _flag(text: str) -> bool:
    """A runs.csv flag as the writer wrote it (``True``/``False``; anything else is a damaged file)."""
    return {"True": True, "False": False}[text]


def _from_rows(design, path, stages, point_keys) -> dict[str, Runs]:
    """:func:`runs_from_csv`'s work (its errors said of the file by it)."""
    import csv

    import xarray as xr

    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))

    # A file with a setting column (the replay study's) is read by label too: two settings may share a point
    # (two rules whose time-averaged sizes round alike give two fixed-at-mean controls at one size).
    labelled = bool(rows) and "setting" in rows[0]

    def key(stage: str, values, label: str) -> tuple:
        return (stage, label if labelled else "", *(float(values[k]) for k in point_keys))

    games = sorted({row["env"] for row in rows} - {design.env_id})
    if games:  # (rows were matched by stage and point alone: another game's file refreshed this one)
        raise ValueError(
            f"{path}: rows of {', '.join(games)} in a study of {design.env_id}: not this study's runs.csv."
        )
    by_point: dict[tuple, list[dict]] = {}
    for row in rows:
        by_point.setdefault(key(row["stage"], row, row.get("setting", "")), []).append(row)
    used: set[int] = set()
    done: dict[str, Runs] = {}
    for stage in stages:
        settings = stage.settings(design, done)
        chosen = {key(stage.label, setting.point, "") for setting in settings}
        unchosen = {k for k in by_point if k[:2] == (stage.label, "")} - chosen  # (none in a file cut short)
        table = []
        for setting in settings:
            found = by_point.get(key(stage.label, setting.point, setting.label), [])
            found = sorted(found, key=lambda r: int(r["seed"]))
            used.update(id(r) for r in found)
            if not found and not labelled and unchosen and done:
                # (a stage whose settings the earlier stages choose: "not this study's runs.csv" misled where the
                # statistics that choose them had changed since the study ran, a probe)
                raise ValueError(
                    f"{path}: stage {stage.label!r} ran settings that the earlier stages' results no longer choose "
                    f"(none of its rows is at {setting.point}, where {setting.label!r} now is): how they are chosen "
                    "(the static optimum) changed since the study ran; rerun the study to run the settings chosen now."
                )
            if [int(r["seed"]) for r in found] != list(range(stage.seeds)):
                raise ValueError(
                    f"{path}: stage {stage.label!r}, setting {setting.label!r} ({setting.point}) has "
                    f"{len(found)} rows, not one for each of seeds 0..{stage.seeds - 1}: not this study's runs.csv."
                )
            table.append(found)

        def column(name: str, kind=float) -> np.ndarray:
            return np.array([[kind(r[name]) for r in found] for found in table])

        diverged = column("diverged", _flag)
        data = {entry: (("config", "seed"), column(name)) for name, entry in CSV_COUNTS.items()}
        for entry in ("adaptive_compared", "adaptive_noisy", "adaptive_change_sum", "adaptive_noise_sum"):
            data[entry] = (("config", "seed"), np.full(diverged.shape, np.nan))
        data["diverged"] = (("config", "seed"), diverged)
        # Columns written after the committed studies ran: read where the file has them.
        added = {name: (entry, float) for name, entry in CSV_ADDED_COUNTS.items()}
        for name, (entry, kind) in (added | {"soft_diverged": ("soft_diverged", _flag)}).items():
            if rows and name in rows[0]:
                data[entry] = (("config", "seed"), column(name, kind))
        ds = xr.Dataset(data)
        done[stage.label] = Runs(
            stage=stage.label,
            settings=settings,
            ds=ds,
            auc=column("auc"),
            final=column("final_return"),
            mean_size=column("mean_memory_size"),
            final_size=column("final_memory_size"),
        )
    stray = [r for r in rows if id(r) not in used]
    if stray:  # (they were dropped without a word)
        raise ValueError(
            f"{path}: {len(stray)} rows belong to no setting of this study (the first: stage {stray[0]['stage']!r}, "
            f"seed {stray[0]['seed']}): not this study's runs.csv."
        )
    return done
