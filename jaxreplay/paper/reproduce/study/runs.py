"""What a stage's runs measured, selected by setting label, and the statistics over seeds.

A stage's :class:`Runs` holds the per-run numbers of one sweep (arrays ``[setting, seed]``);
:func:`select` gives one setting's runs by its label, never by its row. The statistics over
seeds: :func:`seed_mean` (of a curve), :func:`ci` (IQM or mean with a bootstrap interval),
:func:`paired` (the paired difference of two settings on the same seeds) and :func:`optimum`
(the best and worst static size).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

# A statistic over seeds with its 95% interval, as :func:`~jaxreplay.engine.results.seed_interval`
# returns it: ``{"estimate", "low", "high"}``, a ``None`` with its ``"<key>_null_reason"``;
# :func:`paired` adds ``"significant"``.
Interval = dict[str, Any]


class Setting(NamedTuple):
    """One setting of a stage: its label (unique within the stage) and its sweep point
    (:func:`~jaxreplay.paper.reproduce.study.settings.point`)."""

    label: str
    point: dict


class SettingRuns(NamedTuple):
    """The runs of one setting (from :func:`select`); arrays of shape ``[seeds]``.

    Attributes:
        setting: the setting.
        ds: its runs in the stage's sweep dataset (the ``config`` dimension selected).
        auc: score, the mean training return over segments (NaN: diverged).
        final: the greedy evaluation return at the end (the last training return without
            evaluation; NaN: diverged).
        mean_size: time-averaged memory size.
        final_size: memory size at the end.
    """

    setting: Setting
    ds: Any
    auc: np.ndarray
    final: np.ndarray
    mean_size: np.ndarray
    final_size: np.ndarray


@dataclasses.dataclass(frozen=True)
class Runs:
    """The per-run numbers of one stage: arrays ``[setting, seed]``, a row per setting in the
    order of ``settings`` (:meth:`of` builds it from the stage's sweep dataset)."""

    stage: str
    settings: tuple[Setting, ...]
    ds: Any  # the sweep's xarray Dataset, dims (config, seed, ...)
    auc: np.ndarray
    final: np.ndarray
    mean_size: np.ndarray
    final_size: np.ndarray
    runs_resumed: int = 0  # of the stage's runs, those an earlier call had computed into its folder

    @classmethod
    def of(cls, stage: str, settings: tuple[Setting, ...], ds) -> Runs:
        """The numbers of stage ``stage``'s sweep dataset ``ds``, whose configs are ``settings`` in order."""
        from jaxreplay.paper.reproduce.dqn import run_scores

        final = ds.eval_return.values[..., -1] if "eval_return" in ds else ds.train_return.values[..., -1]
        return cls(
            stage=stage,
            settings=tuple(settings),
            ds=ds,
            auc=run_scores(ds),
            final=np.where(ds.diverged.values, np.nan, final.astype(np.float64)),
            mean_size=ds.capacity_mean.values.astype(np.float64).mean(-1),
            final_size=ds.final_capacity.values.astype(np.float64),
        )


def run_stage(
    out, label: str, settings: tuple[Setting, ...], *, seeds: int, common: dict, setup, **run_options
) -> Runs:
    """The runs of one stage: its ``settings`` × ``seeds`` as one DQN sweep (the hyperparameters ``common``
    with each setting's point, the static ``setup``), persisted under ``out/sweeps/`` so a rerun resumes;
    ``run_options`` (``progress``, ``chunk_size``) go to :func:`jaxreplay.engine.sweep.run`."""
    from jaxreplay.engine import sweep as sweep_lib
    from jaxreplay.paper.reproduce.dqn import _sweep_dir

    sweep = sweep_lib.Sweep(
        "dqn",
        seeds=seeds,
        seed=0,
        fixed=common,
        points=[s.point for s in settings],
        setup=setup,  # Sweep.setup takes a Setup too; annotated Mapping only
    )
    result = sweep_lib.run(sweep, _sweep_dir(out, label, sweep), **run_options)
    return dataclasses.replace(Runs.of(label, settings, result.dataset), runs_resumed=result.stats.runs_resumed)


def select(runs: Runs, label: str) -> SettingRuns:
    """The runs of the setting labelled ``label`` in ``runs``.

    Raises:
        ValueError: no setting of that label in the stage (names the stage and its labels).
    """
    labels = [s.label for s in runs.settings]
    if label not in labels:
        raise ValueError(f"the study's stage {runs.stage!r} has no setting {label!r}; its settings: {labels}.")
    row = labels.index(label)
    return SettingRuns(
        setting=runs.settings[row],
        ds=runs.ds.isel(config=row),
        auc=runs.auc[row],
        final=runs.final[row],
        mean_size=runs.mean_size[row],
        final_size=runs.final_size[row],
    )


def seed_mean(curves: np.ndarray) -> np.ndarray:
    """Mean over seeds (axis 0) ignoring NaN (segments without a finished episode); NaN where all are."""
    curves = np.asarray(curves, np.float64)
    count = np.sum(np.isfinite(curves), 0)
    return np.where(count > 0, np.nansum(curves, 0) / np.maximum(count, 1), np.nan)


def ci(values: np.ndarray, statistic: str = "iqm", seed: int = 0) -> Interval:
    """``statistic`` of per-seed ``values`` (shape ``[seeds]``) with a 95% bootstrap interval
    (:func:`~jaxreplay.engine.results.seed_interval`, 2000 resamples): a ``None`` (no finite value;
    too few seeds for an interval) comes with its ``*_null_reason``."""
    from jaxreplay.engine import results

    return results.seed_interval(values, statistic, resamples=2000, seed=seed)


def paired(a: np.ndarray, b: np.ndarray) -> Interval:
    """Mean over seeds of ``a - b`` (same seed index: common random numbers) with a bootstrap CI.

    ``significant``: whether the interval excludes 0; ``None`` (with ``significant_null_reason``)
    where there is no interval, e.g. too few seeds."""
    diff = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    out = ci(diff[np.isfinite(diff)], "mean")
    if out["low"] is None:
        out.update(significant=None, significant_null_reason=out["low_null_reason"])
    else:
        out["significant"] = out["low"] > 0 or out["high"] < 0
    return out


def optimum(response: Runs) -> tuple[int, int]:
    """The best and the worst static memory size of the response stage ``response`` by IQM score.

    A size whose runs all diverged (no IQM) is never the worst, and the best only when every size's
    runs diverged (then the smallest); a tie goes to the smaller size."""
    sizes = [s.point["memory_size"] for s in response.settings]
    scores = [ci(select(response, s.label).auc)["estimate"] for s in response.settings]
    iqms = np.array([-np.inf if x is None else x for x in scores])
    best = int(np.argmax(iqms))
    worst = int(np.argmin(np.where(np.isfinite(iqms), iqms, np.inf)))
    return sizes[best], sizes[worst]
