"""The study's files: ``study.json`` (:func:`study_json` lays out an
:class:`~jaxreplay.paper.reproduce.study.analysis.Analysis`, :func:`write` writes it with
``report.md``), ``runs.csv`` and ``curves.csv`` (:func:`write_csvs`), reading a ``study.json``
back (:func:`read_study`, :func:`refresh`) and the README's study block (:func:`update_readme`)."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import pathlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from jaxreplay import experiments
from jaxreplay._files import atomic_write_text, read_json, replacing
from jaxreplay.paper.reproduce.study.analysis import (
    AdaptiveScore,
    Analysis,
    Control,
    OtherReading,
    StaticScore,
    Variant,
)
from jaxreplay.paper.reproduce.study.report import label, report, summary_table
from jaxreplay.paper.reproduce.study.runs import CSV_ADDED_COUNTS, CSV_COUNTS, Interval, Runs, seed_mean
from jaxreplay.paper.reproduce.study.settings import ENVS, POINT_KEYS, StudyDesign
from jaxreplay.paper.reproduce.study.verdict import relabel, toward, verdict


def _renamed(ci: Interval, estimate="score_iqm", low: str | None = "score_ci_low", high: str | None = "score_ci_high"):
    """``ci``'s ``estimate``, ``low`` and ``high`` (each with its ``*_null_reason``, if any) under the
    names a study.json entry gives them; a name ``None`` leaves that value out."""
    out = {}
    for key, name in (("estimate", estimate), ("low", low), ("high", high)):
        if name is not None:
            out[name] = ci[key]
            if f"{key}_null_reason" in ci:
                out[f"{name}_null_reason"] = ci[f"{key}_null_reason"]
    return out


def _response(rows: tuple[StaticScore, ...]) -> list[dict]:
    def entry(r: StaticScore) -> dict:
        final = {} if r.final is None else _renamed(r.final, "final_iqm", "final_ci_low", "final_ci_high")
        # (``unscored`` only where some are: the studies written before it had none)
        return {"memory_size": r.memory_size, **_renamed(r.score), **final, "diverged": r.diverged} | (
            {"unscored": r.unscored} if r.unscored else {}
        )

    return [entry(r) for r in rows]


def _adaptive(a: AdaptiveScore, best: int) -> dict:
    return {
        "initial_size": a.initial_size,
        "final_size_mean": a.final_size_mean,
        "mean_size": a.mean_size,
        "grow_fraction": a.grow_fraction,
        **_renamed(a.score),
        **_renamed(a.final, "final_iqm", None, None),
        "moves_toward_optimum": toward(a.initial_size, a.mean_size, best),
        "vs_best_static": a.vs_best_static,
        "vs_start_static": a.vs_start_static,
        "vs_random_walk": a.vs_random_walk,
        "vs_fixed_at_mean": a.vs_fixed_at_mean,
        "diagnostics": a.diagnostics,
    }


def _control(c: Control) -> dict:
    return {
        "initial_size": c.initial_size,
        "random_walk_mean_size": c.random_walk_mean_size,
        "random_walk_final_size_mean": c.random_walk_final_size_mean,
        "random_walk_grow_fraction": c.random_walk_grow_fraction,
        **_renamed(c.random_walk, "random_walk_score_iqm", "random_walk_ci_low", "random_walk_ci_high"),
        "fixed_at_mean_size": c.fixed_at_mean_size,
        **_renamed(c.fixed_at_mean, "fixed_at_mean_score_iqm", "fixed_at_mean_ci_low", "fixed_at_mean_ci_high"),
    }


def _variant(v: Variant) -> dict:
    return {
        "variant": v.variant,
        "initial_size": v.initial_size,
        "seeds": v.seeds,
        "final_size_mean": v.final_size_mean,
        "grow_fraction": v.grow_fraction,
        **_renamed(v.score),
        "vs_default": v.vs_default,
        "diagnostics": v.diagnostics,
    }


def _other_reading(o: OtherReading | None) -> dict | None:
    if o is None:
        return None
    return {
        "reading": o.reading,
        "response": _response(o.response),
        "adaptive": [
            {
                "initial_size": a.initial_size,
                "final_size_mean": a.final_size_mean,
                "grow_fraction": a.grow_fraction,
                **_renamed(a.score),
            }
            for a in o.adaptive
        ],
    }


def study_json(design: StudyDesign, analysis: Analysis, steps: int | None) -> dict:
    """``study.json``'s content of ``analysis`` (before :func:`write` makes it strict JSON), with the labels
    of :mod:`~jaxreplay.paper.reproduce.study.verdict`; ``steps``: the ``--steps`` cut, if any."""
    result = {
        "env": design.env_id,
        "quick": design.quick,
        "seeds": design.seeds,
        "total_steps": int(design.setup.total_steps),
        "steps_override": steps,
        "optimizer_reading": design.reading,
        "starts": list(analysis.starts),
        "response": _response(analysis.response),
        "best_static": analysis.best_static,
        "worst_static": analysis.worst_static,
        "memory_size_effect": analysis.memory_size_effect,
        "memory_size_test": analysis.memory_size_test,
        "adaptive": [_adaptive(a, analysis.best_static) for a in analysis.adaptive],
        "controls": [_control(c) for c in analysis.controls],
        "sensitivity": [_variant(v) for v in analysis.sensitivity],
        "paper_share": [
            {"initial_size": p.initial_size, "static_sizes": p.static_sizes, **p.share} for p in analysis.paper_share
        ],
        "other_reading": _other_reading(analysis.other_reading),
        "diverged": analysis.diverged,
    }
    if analysis.soft_diverged is not None:  # (runs.csv written before the flag: not known, not said)
        result["soft_diverged"] = analysis.soft_diverged
    if any(analysis.unscored.values()):
        result["unscored"] = analysis.unscored
    result["verdict"] = verdict(result)
    # (Without the DQN fields newer than the committed studies while they hold their defaults: the same file.)
    dqn_experiment = experiments.get("dqn")
    result["settings"] = {
        "setup": dqn_experiment.without_added_defaults(dataclasses.asdict(design.setup)),
        "common": dqn_experiment.without_added_defaults(design.common),
    }
    return result


def write(out: pathlib.Path, result: dict) -> dict:
    """Write ``result`` as strict JSON (NaN as ``null``) into ``out/study.json`` and its
    :func:`~jaxreplay.paper.reproduce.study.report.report` into ``out/report.md``; returns what was written."""
    from jaxreplay.engine.results import jsonable

    result = jsonable(result, strict=True)
    atomic_write_text(out / "study.json", json.dumps(result, indent=1, allow_nan=False))
    atomic_write_text(out / "report.md", report(result))
    return result


def write_csvs(out: pathlib.Path, design: StudyDesign, runs: Mapping[str, Runs]) -> None:
    """``runs.csv`` (one row per run) and ``curves.csv`` (seed means per setting and segment) of every stage."""
    with (
        replacing(out / "runs.csv", text=True, newline="") as f_runs,
        replacing(out / "curves.csv", text=True, newline="") as f_curves,
    ):
        per_run, curves = csv.writer(f_runs), csv.writer(f_curves)
        per_run.writerow(
            ["env", "stage", *POINT_KEYS, "seed", "auc", "final_return", "mean_memory_size", "final_memory_size"]
            + [*CSV_COUNTS, *CSV_ADDED_COUNTS, "diverged", "soft_diverged"]
        )
        curves.writerow(
            ["env", "stage", "memory_size", "adaptive_rule", "config", "step", "train_return_mean", "memory_size_mean"]
        )
        for stage, r in runs.items():
            ds = r.ds
            for c in range(ds.sizes["config"]):
                keys = [ds[k].values[c].item() if k in ds else "" for k in POINT_KEYS]
                for s in range(ds.sizes["seed"]):
                    per_run.writerow(
                        # (every digit: study refresh recomputes study.json from these)
                        [design.env_id, stage, *keys, s, f"{r.auc[c, s]:.17g}", f"{r.final[c, s]:.17g}"]
                        + [f"{r.mean_size[c, s]:.17g}", int(r.final_size[c, s])]
                        + [int(ds[n].values[c, s]) for n in (*CSV_COUNTS.values(), *CSV_ADDED_COUNTS.values())]
                        + [bool(ds.diverged.values[c, s]), bool(ds.soft_diverged.values[c, s])]
                    )
                ret = seed_mean(ds.train_return.values[c])
                cap = ds.capacity.values[c].astype(float).mean(0)
                for step, a, b in zip(ds.segment.values, ret, cap):
                    curves.writerow([design.env_id, stage, keys[0], keys[1], c, int(step), f"{a:.6g}", f"{b:.6g}"])


# What relabel, summary_table and the report read of a study.json.
_STUDY_KEYS = (
    "env",
    "seeds",
    "total_steps",
    "response",
    "best_static",
    "worst_static",
    "memory_size_effect",
    "adaptive",
    "controls",
    "verdict",
)


def read_study(path, relabelled: bool = False, *, env: str | None = None) -> dict:
    """The ``study.json`` at ``path`` as stored (with ``relabelled``, as
    :func:`~jaxreplay.paper.reproduce.study.verdict.relabel` rewrites it), checked to be one
    :func:`~jaxreplay.paper.reproduce.study.study` wrote (of the game ``env``, where given).

    Raises:
        ValueError: one line naming the file, when it is unreadable, of another shape, or of another game
            than ``env``.
    """
    replay_study = (
        ("capacities", "n_steps", "cells"),
        "it is a `jaxreplay study replay` result (use `study replay-readme`).",
    )
    result = read_json(path, "the study result", _STUDY_KEYS, elsewhere=replay_study)
    try:
        fresh = relabel(result)
        summary_table([result])
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        raise ValueError(
            f"the study result {path} is not one `jaxreplay study dqn` wrote ({type(e).__name__}: {e})."
        ) from None
    check_game(path, result, env)
    return fresh if relabelled else result


def check_game(path, result: dict, env: str | None) -> None:
    """Refuse a study result (read from ``path``) of another game than ``env`` (None: any game): a study
    copied into another game's folder would be shown under that game's name."""
    if env is not None and result["env"] != env:
        raise ValueError(f"the study result {path} is a study of {result['env']}, not of {env}.")


def refresh(study_dir) -> dict:
    """Rewrite ``study_dir``'s ``study.json`` and ``report.md`` by today's analysis, from its ``runs.csv``.

    Every statistic is recomputed from the runs (:func:`~jaxreplay.paper.reproduce.study.stages.from_csv`,
    :func:`~jaxreplay.paper.reproduce.study.analysis.analyse`), then the labels and the verdict; what
    runs.csv does not hold is kept from study.json: aER's TD-error diagnostics at its checks
    (``noisy_fraction``, ``change_mean``, ``noise_mean``), the run time and the figures' names (the figures
    are not redrawn). Without a runs.csv only the labels are recomputed from the stored numbers
    (:func:`~jaxreplay.paper.reproduce.study.verdict.relabel`). Reruns nothing.

    Raises:
        ValueError: no study.json; a study.json or runs.csv of another shape; the study's design
            (its settings) is no longer what this jaxreplay declares for it (rerun the study).
    """

    def recompute(out: pathlib.Path, stored: dict) -> dict:
        return _reanalysed(out, stored) if (out / "runs.csv").exists() else relabel(stored)

    return refreshed(study_dir, "study dqn", read_study, recompute, write)


RUN_RECORD = ("runtime_s", "figures", "runs", "runs_resumed")
"""What a study.json records of the call that ran it rather than of its runs: kept by a refresh."""


def refreshed(study_dir, command: str, read: Callable, recompute: Callable, write_result: Callable) -> dict:
    """Both studies' ``study refresh``: ``study_dir``'s study.json read (``read(path)``), recomputed
    (``recompute(out, stored)``) and written (``write_result(out, result)``, which returns what it wrote), under
    the folder's lock (not while a study writes it: its study.json and report.md could then mix). A folder
    without study.json is refused, a study running there or interrupted said so (its advice differs)."""
    from jaxreplay.engine.store import lock_folder

    out = pathlib.Path(study_dir)
    path = out / "study.json"
    if not path.exists():
        refuse_unfinished(out, command)
        raise ValueError(f"{out}: no study.json; run jaxreplay {command} --out {out} first.")
    with lock_folder(out):
        return write_result(out, recompute(out, read(path)))


def as_stored(out: pathlib.Path, stored: dict, result: dict, command: str) -> dict:
    """``result`` (``stored`` recomputed from ``out/runs.csv``) with ``stored``'s :data:`RUN_RECORD`; refused where
    the study ran with other settings than this jaxreplay declares for its design (its runs are not the design's)."""
    from jaxreplay.engine.results import jsonable

    if "settings" in stored and jsonable(result["settings"], strict=True) != stored["settings"]:
        raise ValueError(
            f"{out}: the study was run with other settings than this jaxreplay declares for "
            f"{stored['env']} ({'quick' if stored['quick'] else 'full'}): rerun jaxreplay {command} to analyse it."
        )
    return result | {key: value for key, value in stored.items() if key in RUN_RECORD}  # (in stored's order)


# aER's diagnostics that need the TD-error sums at its checks, which runs.csv does not hold.
_KEPT_DIAGNOSTICS = ("noisy_fraction", "change_mean", "noise_mean")


def _reanalysed(out: pathlib.Path, stored: dict) -> dict:
    """``stored`` (a study.json) analysed again from ``out/runs.csv`` (:func:`refresh`)."""
    from jaxreplay.engine.results import jsonable
    from jaxreplay.paper.reproduce.study import analysis, stages
    from jaxreplay.paper.reproduce.study.settings import design

    chosen = design(
        stored["env"],
        quick=stored["quick"],
        seeds=stored["seeds"],
        steps=stored.get("steps_override"),
        optimizer_reading=stored.get("optimizer_reading", "adam"),
    )
    result = study_json(
        chosen, analysis.analyse(chosen, stages.from_csv(chosen, out / "runs.csv")), stored.get("steps_override")
    )
    result = as_stored(out, stored, result, "study dqn")
    for key in ("adaptive", "sensitivity"):
        for entry, old in zip(result[key], stored[key]):
            for name in _KEPT_DIAGNOSTICS:
                entry["diagnostics"][name] = old.get("diagnostics", {}).get(name)
    result["verdict"] = verdict(result)
    return jsonable(result, strict=True)


def sort_for_readme(results: list[dict], games, label=label) -> None:
    """Sort ``results`` in place as a README block lists them: by game (in ``games``' order), then by row label
    (:func:`~jaxreplay.paper.reproduce.study.report.label`), then by content: two studies of one game followed the
    order their folders were given in, so one set of studies wrote two blocks (found by a probe)."""
    order = {env: i for i, env in enumerate(games)}
    results.sort(key=lambda r: (order.get(r["env"], len(order)), label(r), json.dumps(r, sort_keys=True, default=str)))


def refuse_duplicates(sources: list, results: list[dict], label=label) -> None:
    """Refuse a study given twice to :func:`update_readme`: one study.json reached twice (a folder
    given twice, or a folder and its parent), or two of the same game and design (:func:`label`),
    whose rows the table could not tell apart. ``sources``: ``(folder given, study.json path)``
    per result; ``label``: a result's design in words (the replay study passes its own)."""
    by_file: dict[pathlib.Path, pathlib.Path] = {}
    by_plan: dict[tuple, pathlib.Path] = {}
    for (folder, path), result in zip(sources, results):
        real, design = path.resolve(), (result["env"], label(result))
        if real in by_file:
            raise ValueError(f"{path} is given twice (as {by_file[real]} and {folder}); give each study once.")
        if design in by_plan:
            raise ValueError(
                f"{by_plan[design]} and {path} are the same study ({design[0]}, {design[1]}); give each study once."
            )
        by_file[real], by_plan[design] = folder, path


def refuse_unfinished(folder: pathlib.Path, command: str) -> None:
    """Refuse ``folder`` if it holds a study's traces (its owner marker, its sweeps or its lock) but no
    ``study.json``: a study running there, or one a kill interrupted after it cleared its earlier outputs."""
    from jaxreplay._files import OWNER_FILE

    traces = any((folder / name).exists() for name in (OWNER_FILE, "sweeps", "sweep.lock"))
    if traces and not (folder / "study.json").exists():
        raise ValueError(
            f"{folder} holds a study without its study.json: one is running there, or was interrupted; let it "
            f"finish or rerun its `jaxreplay {command}` command (finished runs are kept), or move the folder away."
        )


def study_files(folder, command: str) -> list[pathlib.Path]:
    """The ``study.json`` files a README gathers from ``folder``: its own and its subfolders' (a folder may hold
    both, none left out).

    Raises:
        ValueError: there is none; or ``folder`` or a subfolder is unfinished (:func:`refuse_unfinished`): its
            game would silently be missing from the table (found by a probe).
    """
    folder = pathlib.Path(folder)
    folders = [folder, *sorted(p for p in folder.iterdir() if p.is_dir())] if folder.is_dir() else []
    for d in folders:
        refuse_unfinished(d, command)
    files = [d / "study.json" for d in folders if (d / "study.json").exists()]
    if not files:
        raise ValueError(
            f"{folder}: no study.json in it or in its subfolders; run jaxreplay {command} --out {folder} first."
        )
    return files


def update_readme(readme, study_dirs, note: str = "") -> pathlib.Path:
    """Write :func:`summary_table` of ``study_dirs/*/study.json`` (or ``DIR/study.json``) into the
    ``<!-- study:begin -->`` … ``<!-- study:end -->`` block of ``readme``, each row labelled with its
    study's mode and size (:func:`label`). A study given twice is refused (:func:`refuse_duplicates`)."""
    from jaxreplay.paper.reproduce.paper import read_readme, replace_block

    results = []
    sources = []  # (folder given, its study.json) per result
    for d in study_dirs:
        d = pathlib.Path(d)
        files = study_files(d, "study dqn")
        results += [read_study(f) for f in files]
        sources += [(d, f) for f in files]
    refuse_duplicates(sources, results)
    for (_, path), result in zip(sources, results):
        if relabel(result)["verdict"] != result["verdict"]:  # the README is never another verdict than report.md's
            raise ValueError(
                f"{path}: its stored verdict is not what today's rules give from its numbers: run "
                f"jaxreplay study refresh {path.parent} first (it recomputes study.json and report.md, no runs)."
            )
    sort_for_readme(results, ENVS)
    readme = pathlib.Path(readme)
    text = read_readme(readme, "study")
    atomic_write_text(readme, replace_block(text, "study", f"{note}\n\n{summary_table(results)}".strip()), True)
    return readme


class StudyParts(NamedTuple):
    """A study package's modules as :func:`run_study` drives them (the DQN study's and the replay study's
    have the same functions: ``stages.run``, ``analysis.analyse``, ``figures.draw``, ``writer.study_json``,
    ``writer.write_csvs`` and ``writer.write``)."""

    stages: Any
    analysis: Any
    figures: Any
    writer: Any


def run_study(out_dir, owner: str, outputs: tuple[str, ...], chosen, parts: StudyParts, steps, progress, chunk_size):
    """The study command ``owner`` of design ``chosen`` into ``out_dir``: its stages' sweeps (resumable), the
    analysis, then the figures, CSV files, study.json and report.md (:func:`writing` holds the folder and clears
    ``outputs`` first). Returns study.json's content; its ``runtime_s`` is this call's, and ``runs`` /
    ``runs_resumed`` say how many runs an earlier call computed."""
    t0 = time.perf_counter()
    with writing(out_dir, owner, outputs) as (out, clear):
        # One chunk size for every stage (design.md §5); resumed at the one the folder's sweeps recorded (the
        # default replaced a missing --chunk-size, so a study begun at another was refused, "or none" advised).
        chunk = chunk_size or recorded_chunk_size(out) or 4 * chosen.seeds
        runs = parts.stages.run(chosen, out, progress=progress, chunk_size=chunk)
        result = parts.writer.study_json(chosen, parts.analysis.analyse(chosen, runs), steps)
        clear()
        parts.writer.write_csvs(out, chosen, runs)  # (first: the runs are kept whatever a figure does)
        names = parts.figures.draw(out, chosen, result, runs)
        result["runtime_s"] = time.perf_counter() - t0
        result["runs"] = sum(r.run_count for r in runs.values())  # (a run read by two settings counted once)
        result["runs_resumed"] = sum(r.runs_resumed for r in runs.values())
        result["figures"] = sorted(names)
        return parts.writer.write(out, result)


def recorded_chunk_size(out: pathlib.Path) -> int | None:
    """The chunk size the stage sweeps under ``out/sweeps/`` recorded (their ``sweep.json``'s batch), or None
    where none recorded one."""
    from jaxreplay.engine.batch import Batch

    for manifest in sorted(out.glob("sweeps/*/sweep.json")):
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            stored = json.loads(manifest.read_text()).get("batch")
            if stored is not None:
                return Batch.from_dict(stored).chunk_size
    return None


@contextlib.contextmanager
def writing(out_dir, owner: str, outputs: tuple[str, ...]) -> Iterator[tuple[pathlib.Path, Callable[[], None]]]:
    """``out_dir`` claimed for ``owner`` (:func:`~jaxreplay._files.claim_folder`: another command's folder, known
    by its owner marker or, written before markers, by its files, is refused: the studies and the reproductions
    write files of the same names) and locked while the command writes it, with its earlier ``outputs`` (and
    their temporary files) deleted as it starts writing them: a rerun with other options killed part way left
    the earlier run's study.json and report.md beside the new run's figures, and two such commands at once,
    whose stage sweeps lock folders of their own, both wrote the folder's files. A claim that wrote nothing is
    taken back when the call fails (:func:`_unclaim_if_nothing_written`). A folder no command wrote that holds a
    file named as one of ``outputs`` (the user's report.md) is refused: the command would replace it.

    Yields ``(out, clear)``: the folder, and the function to call before writing the first output (after the
    runs: a kill while they run leaves the earlier outputs whole).
    """
    from jaxreplay._files import claim_folder, clear_outputs
    from jaxreplay.engine.store import lock_folder

    before = _entries(pathlib.Path(out_dir))
    out = claim_folder(out_dir, owner, outputs)
    try:
        with lock_folder(out):
            yield out, lambda: clear_outputs(out, outputs)
    except BaseException:
        _unclaim_if_nothing_written(out, before)  # (refused for memory, interrupted: the folder as it was)
        raise


def _entries(folder: pathlib.Path) -> set[pathlib.Path] | None:
    """The paths under ``folder`` and itself (None where it does not exist)."""
    return {folder, *folder.rglob("*")} if folder.exists() else None


def _unclaim_if_nothing_written(out: pathlib.Path, before: set[pathlib.Path] | None) -> None:
    """Take back a claim that wrote nothing: where the paths added under ``out`` since ``before`` (:func:`_entries`)
    are its owner marker and folders, they are removed (``out`` too where the call created it). A command refused
    or interrupted before its first file left the folder claimed, and another command then refused it ("would
    overwrite its files") though it held none of the command's."""
    from jaxreplay._files import OWNER_FILE

    with contextlib.suppress(OSError):
        added = (_entries(out) or set()) - (before or set())
        if out / OWNER_FILE not in added or any(p != out / OWNER_FILE and not p.is_dir() for p in added):
            return
        for path in sorted(added, key=lambda p: len(p.parts), reverse=True):  # (deepest first: folders empty)
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink()
