"""The replay study's files: ``study.json`` (:func:`study_json` lays out an
:class:`~jaxreplay.paper.reproduce.replay_study.analysis.Analysis`, :func:`write` writes it with
``report.md``), ``runs.csv`` and ``curves.csv`` (:func:`write_csvs`), reading a ``study.json`` back
(:func:`read_study`) and the README's block of several games (:func:`update_readme`)."""

from __future__ import annotations

import csv
import dataclasses
import json
import pathlib
from collections.abc import Mapping

from jaxreplay import experiments
from jaxreplay._files import atomic_write_text, read_json, replacing
from jaxreplay.paper.reproduce.replay_study.analysis import AdaptiveScore, Analysis, Contrast, Walk
from jaxreplay.paper.reproduce.replay_study.report import label, report, summary_table
from jaxreplay.paper.reproduce.replay_study.settings import GAMES, POINT_KEYS, ReplayDesign
from jaxreplay.paper.reproduce.replay_study.stages import ADAPTIVE_RATIO
from jaxreplay.paper.reproduce.replay_study.verdict import verdict
from jaxreplay.paper.reproduce.study.runs import CSV_ADDED_COUNTS, CSV_COUNTS, Interval, Runs, seed_mean

BLOCK = "replay-study"
"""The README block the study's summary goes into: ``<!-- replay-study:begin -->`` … ``<!-- replay-study:end -->``."""


def iqm(ci: Interval, prefix: str) -> dict:
    """``ci`` as a study.json entry's ``{prefix}_iqm``, ``{prefix}_ci_low`` and ``{prefix}_ci_high``, each
    ``None`` with its ``*_null_reason``."""
    out = {}
    for key, name in (("estimate", f"{prefix}_iqm"), ("low", f"{prefix}_ci_low"), ("high", f"{prefix}_ci_high")):
        out[name] = ci[key]
        if f"{key}_null_reason" in ci:
            out[f"{name}_null_reason"] = ci[f"{key}_null_reason"]
    return out


def _contrast(c: Contrast) -> dict:
    return {"n_step": c.n_step, **c.effect, "pairs": [list(p) for p in c.pairs], "seeds": c.seeds}


def _rule(a: AdaptiveScore) -> dict:
    fields = a._asdict()
    fields.update(iqm(fields.pop("score"), "score"), **iqm(fields.pop("final"), "final"))
    return fields


def _walk(w: Walk) -> dict:
    fields = w._asdict()
    fields.update(iqm(fields.pop("score"), "score"))
    return fields


def study_json(design: ReplayDesign, analysis: Analysis, steps: int | None) -> dict:
    """``study.json``'s content of ``analysis`` (before :func:`write` makes it strict JSON), with the answers
    of :func:`~jaxreplay.paper.reproduce.replay_study.verdict.verdict`; ``steps``: the ``--steps`` cut, if any."""
    a = analysis
    result = {
        "env": design.env_id,
        "quick": design.quick,
        "seeds": design.seeds,
        "total_steps": design.total_steps,
        "steps_override": steps,
        "reduced": design.reduced,
        "capacities": list(design.capacities),
        "ratios": list(design.ratios),
        "n_steps": list(design.n_steps),
        "cells": [
            # (``unscored`` only where some are: the studies written before it had none)
            {k: v for k, v in c._asdict().items() if k not in ("auc", "final") and (k != "unscored" or v)}
            | iqm(c.auc, "auc")
            | iqm(c.final, "final")
            for c in a.cells
        ],
        "capacity_effect": [_contrast(c) for c in a.capacity],
        "interaction": a.interaction | {"seeds": a.interaction_seeds},
        "ratio_at_equal_age": [_contrast(c) for c in a.ratio_at_equal_age],
        "age_at_equal_ratio": [_contrast(c) for c in a.age_at_equal_ratio],
        "adaptive": {
            "n_step": a.adaptive_n_step,
            "replay_ratio": ADAPTIVE_RATIO,
            "static": [{"memory_size": size, **iqm(score, "score")} for size, score in a.static],
            "rules": [_rule(r) for r in a.adaptive],
            "walks": [_walk(w) for w in a.walks],
        },
        "diverged": a.diverged,
    }
    if a.soft_diverged is not None:
        result["soft_diverged"] = a.soft_diverged
    if any(a.unscored.values()):
        result["unscored"] = a.unscored
    result["verdict"] = verdict(result)
    dqn_experiment = experiments.get("dqn")
    result["settings"] = {
        "unit_setup": dqn_experiment.without_added_defaults(dataclasses.asdict(design.unit_setup)),
        "adaptive_setup": dqn_experiment.without_added_defaults(dataclasses.asdict(design.adaptive_setup)),
        "common": dqn_experiment.without_added_defaults(design.common),
    }
    return result


def write(out: pathlib.Path, result: dict) -> dict:
    """Write ``result`` as strict JSON (NaN as ``null``) into ``out/study.json`` and its report into
    ``out/report.md``; returns what was written."""
    from jaxreplay.engine.results import jsonable

    result = jsonable(result, strict=True)
    atomic_write_text(out / "study.json", json.dumps(result, indent=1, allow_nan=False))
    atomic_write_text(out / "report.md", report(result))
    return result


def refresh(study_dir) -> dict:
    """Rewrite ``study_dir``'s ``study.json`` and ``report.md`` by today's analysis, from its ``runs.csv``. Reruns
    nothing.

    Every statistic is recomputed from the runs (:func:`~jaxreplay.paper.reproduce.replay_study.stages.from_csv`,
    :func:`~jaxreplay.paper.reproduce.replay_study.analysis.analyse`), then the answers; the run time, the run
    counts and the figures' names are kept (the figures are not redrawn). A runs.csv written before it held aER's
    check counts (the studies before 2026-11-30) cannot give the adaptive stage's grow shares: there only the
    answers are recomputed, from the numbers study.json holds (a rerun of the study's command recomputes the
    rest from its sweeps).

    Raises:
        ValueError: no study.json (the study running there or interrupted is said so); a study.json or runs.csv
            of another shape; the study's design (its settings) no longer what this jaxreplay declares for it.
    """
    from jaxreplay.paper.reproduce.study.writer import refreshed

    def recompute(out: pathlib.Path, stored: dict) -> dict:
        return _reanalysed(out, stored) if runs_csv_has_counts(out) else stored | {"verdict": verdict(stored)}

    return refreshed(study_dir, "study replay", read_study, recompute, write)


# runs.csv's header before it held aER's check counts (and, earlier still, before soft_diverged); :func:`write_csvs`
# writes it followed by the counts.
_BEFORE_COUNTS = ["env", "stage", "setting", *POINT_KEYS, "oldest_policy_age", "seed", "auc", "final_return"] + [
    "mean_memory_size",
    "final_memory_size",
    "gradient_steps",
    "diverged",
    "soft_diverged",
]


def runs_csv_has_counts(study_dir) -> bool:
    """Whether ``study_dir``'s runs.csv holds aER's check counts, so that :func:`refresh` recomputes the study from
    it; False where there is no runs.csv, or one written before the counts (its header exactly that of then).

    Raises:
        ValueError: (one line naming the file) a runs.csv with any other header: empty, cut short, a column
            missing, another study's. (A fall back to study.json's numbers would have hidden it: found by a probe.)
    """
    path = pathlib.Path(study_dir) / "runs.csv"
    if not path.exists():
        return False
    try:
        with open(path, newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{path} cannot be read ({type(e).__name__}: {e}): rerun the study's command.") from None
    if set(CSV_COUNTS) | set(CSV_ADDED_COUNTS) <= set(header):
        return True
    if header in (_BEFORE_COUNTS, _BEFORE_COUNTS[:-1]):
        return False
    raise ValueError(
        f"{path} is not a runs.csv that `jaxreplay study replay` wrote (its header is "
        f"{','.join(header)[:80] or 'empty'}...): rerun the study's command to write it again."
    )


def _reanalysed(out: pathlib.Path, stored: dict) -> dict:
    """``stored`` (a study.json) analysed again from ``out/runs.csv`` (:func:`refresh`)."""
    from jaxreplay.paper.reproduce.replay_study import analysis, stages
    from jaxreplay.paper.reproduce.replay_study.settings import design
    from jaxreplay.paper.reproduce.study.writer import as_stored

    steps = stored.get("steps_override")
    chosen = design(stored["env"], quick=stored["quick"], seeds=stored["seeds"], steps=steps)
    result = study_json(chosen, analysis.analyse(chosen, stages.from_csv(chosen, out / "runs.csv")), steps)
    return as_stored(out, stored, result, "study replay")


def write_csvs(out: pathlib.Path, design: ReplayDesign, runs: Mapping[str, Runs]) -> None:
    """``runs.csv`` (one row per run: its setting's label and point, its scores and sizes) and
    ``curves.csv`` (seed means per setting and segment) of every stage."""
    with (
        replacing(out / "runs.csv", text=True, newline="") as f_runs,
        replacing(out / "curves.csv", text=True, newline="") as f_curves,
    ):
        per_run, curves = csv.writer(f_runs), csv.writer(f_curves)
        # (aER's check counts last: what `study refresh` recomputes the grow shares from)
        per_run.writerow(_BEFORE_COUNTS + [*CSV_COUNTS, *CSV_ADDED_COUNTS])
        curves.writerow(["env", "stage", "setting", "step", "train_return_mean", "memory_size_mean"])
        for stage, r in runs.items():
            ds = r.ds
            for c, setting in enumerate(r.settings):
                keys = [setting.point[k] for k in POINT_KEYS]
                for s in range(ds.sizes["seed"]):
                    per_run.writerow(
                        [design.env_id, stage, setting.label, *keys, f"{float(ds.oldest_policy_age.values[c, s]):.6g}"]
                        + [s, f"{r.auc[c, s]:.17g}", f"{r.final[c, s]:.17g}", f"{r.mean_size[c, s]:.17g}"]
                        + [int(r.final_size[c, s]), int(ds.gradient_steps.values[c, s]), bool(ds.diverged.values[c, s])]
                        + [bool(ds.soft_diverged.values[c, s])]
                        + [int(ds[n].values[c, s]) for n in (*CSV_COUNTS.values(), *CSV_ADDED_COUNTS.values())]
                    )
                ret = seed_mean(ds.train_return.values[c])
                cap = ds.capacity.values[c].astype(float).mean(0)
                for step, a, b in zip(ds.segment.values, ret, cap):
                    curves.writerow([design.env_id, stage, setting.label, int(step), f"{a:.6g}", f"{b:.6g}"])


_STUDY_KEYS = (
    "env",
    "quick",
    "seeds",
    "total_steps",
    "capacities",
    "n_steps",
    "cells",
    "capacity_effect",
    "interaction",
    "ratio_at_equal_age",
    "age_at_equal_ratio",
    "adaptive",
    "verdict",
)


def read_study(path, *, env: str | None = None) -> dict:
    """The ``study.json`` at ``path``, checked to be one :func:`~jaxreplay.paper.reproduce.replay_study.study` wrote
    (of the game ``env``, where given).

    Raises:
        ValueError: one line naming the file, when it is unreadable, of another shape, or of another game
            than ``env``.
    """
    from jaxreplay.paper.reproduce.study.writer import check_game

    dqn_study = (("response", "best_static", "controls"), "it is a `jaxreplay study dqn` result (use `study readme`).")
    result = read_json(path, "the replay study result", _STUDY_KEYS, elsewhere=dqn_study)
    try:
        verdict(result)
        summary_table([result])
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        raise ValueError(
            f"the study result {path} is not one `jaxreplay study replay` wrote ({type(e).__name__}: {e})."
        ) from None
    check_game(path, result, env)
    return result


def update_readme(readme, study_dirs, note: str = "") -> pathlib.Path:
    """Write :func:`~jaxreplay.paper.reproduce.replay_study.report.summary_table` of ``study_dirs/*/study.json``
    (or ``DIR/study.json``) into the :data:`BLOCK` block of ``readme``, the games in the order of
    :data:`~jaxreplay.paper.reproduce.replay_study.settings.GAMES`.

    Raises:
        ValueError: a folder without a study.json, a file of another shape, a study given twice, one whose
            stored verdict is not today's, or ``readme`` without the block.
    """
    from jaxreplay.paper.reproduce.paper import read_readme, replace_block
    from jaxreplay.paper.reproduce.study.writer import refuse_duplicates, sort_for_readme, study_files

    results = []
    sources = []  # (folder given, its study.json) per result
    for d in study_dirs:
        d = pathlib.Path(d)
        files = study_files(d, "study replay")
        results += [read_study(f) for f in files]
        sources += [(d, f) for f in files]
    refuse_duplicates(sources, results, label)
    for (_, path), result in zip(sources, results):
        if verdict(result) != result["verdict"]:  # the README is never another verdict than report.md's
            raise ValueError(
                f"{path}: its stored verdict is not what today's rules give from its numbers: run jaxreplay "
                f"study refresh {path.parent} (it recomputes study.json and report.md, without runs)."
            )
    sort_for_readme(results, GAMES, label)
    readme = pathlib.Path(readme)
    text = read_readme(readme, BLOCK)
    atomic_write_text(readme, replace_block(text, BLOCK, f"{note}\n\n{summary_table(results)}".strip()), True)
    return readme
