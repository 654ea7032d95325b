"""What a stage's runs measured, selected by setting label, and the statistics over seeds.

A stage's :class:`Runs` holds the per-run numbers of one sweep (arrays ``[setting, seed]``);
:func:`select` gives one setting's runs by its label, never by its row. The statistics over
seeds: :func:`seed_mean` (of a curve), :func:`ci` (IQM or mean with its 95% interval),
:func:`paired` (the mean paired difference of two settings on the same seeds), :func:`paired_iqm`
(the difference of their IQMs, seeds resampled in pairs), :func:`optimum` (the best and worst
static size) and :func:`differ_test` (whether settings differ at all, by relabelling them within seeds).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

CSV_COUNTS = {
    "checks": "adaptive_checks",
    "grows": "adaptive_grows",
    "shrinks": "adaptive_shrinks",
    "straddle_checks": "adaptive_straddle_checks",
    "straddle_grows": "adaptive_straddle_grows",
}
"""runs.csv's columns of aER's check counts, each with the summary entry it holds (written by the study's
writer, read back by :func:`~jaxreplay.paper.reproduce.study.stages.from_csv`)."""

CSV_ADDED_COUNTS = {"invalid": "adaptive_invalid", "forced": "adaptive_forced"}
"""Counts written after the committed studies ran: written like :data:`CSV_COUNTS`, read only where the file
has them (without them the diagnostics that need them are left out)."""

# A statistic over seeds with its 95% interval, as :func:`~jaxreplay.engine.results.seed_interval`
# returns it: ``{"estimate", "low", "high"}``, a ``None`` with its ``"<key>_null_reason"``;
# :func:`paired` adds ``"significant"``.
Interval = dict[str, Any]


class Setting(NamedTuple):
    """One setting of a stage: its label (unique within the stage) and its sweep point
    (:func:`~jaxreplay.paper.reproduce.study.settings.point`)."""

    label: str
    point: dict

    @property
    def configuration(self) -> str:
        """The sweep point as one string: two settings with one configuration (two controls whose runs averaged
        the same memory size) have the same one and share their runs."""
        return json.dumps(self.point, sort_keys=True, default=float)


class SettingRuns(NamedTuple):
    """The runs of one setting (from :func:`select`); arrays of shape ``[seeds]``.

    Attributes:
        setting: the setting.
        ds: its runs in the stage's sweep dataset (the ``config`` dimension selected).
        auc: score, the mean training return over segments (NaN: diverged, or no training episode ended).
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

    @property
    def run_count(self) -> int:
        """The stage's runs as its sweep computed them: configurations × seeds, fewer than settings × seeds where
        two settings share a :attr:`Setting.configuration` (so that :attr:`runs_resumed` is a part of it)."""
        return len({s.configuration for s in self.settings}) * int(self.auc.shape[1])

    @classmethod
    def of(cls, stage: str, settings: tuple[Setting, ...], ds) -> Runs:
        """The numbers of stage ``stage``'s sweep dataset ``ds``, whose configs are ``settings`` in order."""
        from jaxreplay.paper.reproduce.dqn import final_returns, run_scores

        return cls(
            stage=stage,
            settings=tuple(settings),
            ds=ds,
            auc=run_scores(ds),
            final=final_returns(ds)[1],
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

    # Two settings may be one configuration (two rules whose runs averaged the same memory size give the same
    # fixed-at-mean point): the engine refuses a repeated point, so each configuration runs once and every
    # setting reads its row (a run's key depends on its seed only: the runs are the same).
    keys = [s.configuration for s in settings]
    configurations = list(dict.fromkeys(keys))  # each once, in first-seen order
    row_of = [configurations.index(k) for k in keys]
    sweep = sweep_lib.Sweep(
        "dqn",
        seeds=seeds,
        seed=0,
        fixed=common,
        points=[settings[keys.index(k)].point for k in configurations],
        setup=setup,  # Sweep.setup takes a Setup too; annotated Mapping only
    )
    result = sweep_lib.run(sweep, _sweep_dir(out, label, sweep), **run_options)
    ds = result.dataset if len(configurations) == len(settings) else result.dataset.isel(config=row_of)
    return dataclasses.replace(Runs.of(label, settings, ds), runs_resumed=result.stats.runs_resumed)


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
    """Mean over seeds (axis 0) of the finite values (NaN: segments without a finished episode); NaN where
    none is (:func:`~jaxreplay.paper.reproduce.dqn.finite_mean`)."""
    from jaxreplay.paper.reproduce.dqn import finite_mean

    return finite_mean(curves, axis=0)


def ci(values: np.ndarray, statistic: str = "iqm", seed: int = 0) -> Interval:
    """``statistic`` of per-seed ``values`` (shape ``[seeds]``) with a 95% interval
    (:func:`~jaxreplay.engine.results.seed_interval`: Student-t for a mean, the expanded bootstrap with 2000
    resamples for an IQM): a ``None`` (no finite value; too few seeds for an interval) comes with its
    ``*_null_reason``."""
    from jaxreplay.engine import results

    return results.seed_interval(values, statistic, resamples=2000, seed=seed)


@np.errstate(over="ignore", invalid="ignore")  # (values that overflow float64 give None and the reason, not warnings)
def paired(a: np.ndarray, b: np.ndarray) -> Interval:
    """Mean over seeds of ``a - b`` (same seed index: common random numbers) with its paired Student-t 95%
    interval (:func:`ci`; the percentile bootstrap used before called 15% of null differences of 6 seeds
    significant, this 4–6%).

    Seeds where ``a`` or ``b`` is not finite (a diverged or unscored run) are left out; a difference of two
    finite values that overflows float64 is not: the result is then ``None`` with the reason.

    ``significant``: whether the interval excludes 0; ``None`` (with ``significant_null_reason``)
    where there is no interval, e.g. too few seeds."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    diff = a[both] - b[both]  # (overflow: under the decorator's errstate)
    if not np.isfinite(diff).all():  # (it used to drop such a seed without a word, a probe)
        return _overflowed(("estimate", "low", "high", "significant"), a[both], b[both])
    out = ci(diff, "mean")
    if out["low"] is None:
        out.update(significant=None, significant_null_reason=out["low_null_reason"])
    else:
        out["significant"] = out["low"] > 0 or out["high"] < 0
    return out


@np.errstate(over="ignore", invalid="ignore")  # (values that overflow float64 give None and the reason, not warnings)
def paired_iqm(a: np.ndarray, b: np.ndarray, resamples: int = 2000, seed: int = 0) -> Interval:
    """IQM of ``a`` minus IQM of ``b`` over the seeds where both are finite (same seed index: common
    random numbers), with a 95% expanded percentile-bootstrap interval that resamples the seeds in pairs
    (``scipy.stats.bootstrap(paired=True)`` read at :func:`~jaxreplay.engine.results.expanded_confidence`):
    the difference of the scores the study reports, so a setting ranked above another by its IQM has a
    positive estimate. It called 3–5% of null differences of 6 or 10 seeds significant (the plain percentile
    interval, 6–10%).

    ``significant``: whether the interval excludes 0; ``None`` (with ``*_null_reason``) where there is
    no interval (fewer seeds than :func:`~jaxreplay.engine.results.min_seeds_for_interval`)."""
    from scipy import stats

    from jaxreplay.engine.results import _iqm_numpy, check_resamples, expanded_confidence, min_seeds_for_interval

    check_resamples(resamples)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    a, b, n = a[both], b[both], int(both.sum())
    if n == 0:
        why = "no seed has a finite value in both settings"
        return {k: None for k in ("estimate", "low", "high", "significant")} | {
            f"{k}_null_reason": why for k in ("estimate", "low", "high", "significant")
        }
    estimate = float(_iqm_numpy(a) - _iqm_numpy(b))
    if n < min_seeds_for_interval():
        why = f"too few seeds (n = {n}) for an interval"
        return {"estimate": estimate, "low": None, "high": None, "significant": None} | {
            f"{k}_null_reason": why for k in ("low", "high", "significant")
        }
    if np.ptp(a - b) == 0 and np.ptp(a) == 0:  # nothing to resample: every resample gives the estimate
        low = high = estimate
    else:
        res = stats.bootstrap(
            (a, b),
            lambda x, y, axis: _iqm_numpy(x, axis) - _iqm_numpy(y, axis),
            paired=True,
            confidence_level=expanded_confidence(n),
            n_resamples=resamples,
            method="percentile",
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
        low, high = (float(x) for x in res.confidence_interval)
        if not np.isfinite(res.bootstrap_distribution).all():  # (a resample overflowed: its interval is not one)
            low = math.nan
    if not all(math.isfinite(x) for x in (estimate, low, high)):  # (it said "significant" at inf, a probe)
        return _overflowed(("estimate", "low", "high", "significant"), a, b)
    return {"estimate": estimate, "low": low, "high": high, "significant": bool(low > 0 or high < 0)}


def _overflowed(keys: tuple[str, ...], *values: np.ndarray) -> dict:
    """``None`` for each of ``keys``, each with the reason: values of these sizes overflow float64 in the
    differences and sums a statistic takes."""
    largest = max((float(np.max(np.abs(v))) for v in values if v.size), default=float("nan"))
    why = f"not finite in float64 (the values reach {largest:.3g}: rescale them)"
    return {k: None for k in keys} | {f"{k}_null_reason": why for k in keys}


@np.errstate(over="ignore", invalid="ignore")  # (values that overflow float64 give None and the reason, not warnings:
# the observed spread and every relabelled one are checked)
def differ_test(scores: np.ndarray, resamples: int = 1999, seed: int = 0) -> dict:
    """Whether settings differ at all: a permutation test of the spread of their IQMs (largest minus
    smallest) against relabelling the settings within each seed (the seeds that are finite in every
    setting; ``scipy.stats.permutation_test``, ``permutation_type="samples"``).

    The question "does memory size matter" is about every size at once; testing only the best against
    the worst, both chosen by the same data, finds a difference among equal sizes more often than 5%.

    Args:
        scores: ``[settings, seeds]``.

    Returns:
        ``{"statistic": "IQM range", "observed", "p_value", "seeds", "resamples"}``; ``p_value`` ``None``
        (with ``p_value_null_reason``) with fewer seeds than an interval needs or fewer than 2 settings.
    """
    from scipy import stats

    from jaxreplay.engine.results import _iqm_numpy, min_seeds_for_interval

    x = np.asarray(scores, np.float64)
    unscored = [i for i, row in enumerate(x) if not np.isfinite(row).any()]
    x = x[:, np.isfinite(x).all(0)]
    out: dict = {"statistic": "IQM range", "observed": None, "p_value": None, "seeds": int(x.shape[1])}
    out["resamples"] = resamples
    if x.shape[0] < 2 or x.shape[1] == 0:
        # (say which: "no finite seed" read as no data where 7 of 8 sizes had every run scored, a probe)
        why = "fewer than 2 settings" if x.shape[0] < 2 else "no seed has a score in every setting"
        if x.shape[0] >= 2 and unscored:
            why += " (one setting has none)" if len(unscored) == 1 else f" ({len(unscored)} settings have none)"
        out["p_value_null_reason"] = out["observed_null_reason"] = why
        return out

    def spread(*samples, axis):
        iqms = np.stack([_iqm_numpy(s, axis) for s in samples])
        return iqms.max(0) - iqms.min(0)

    observed = float(spread(*x, axis=-1))
    if not math.isfinite(observed):  # (the test said p = 0 from inf − inf, a probe)
        return out | _overflowed(("observed", "p_value"), x)
    out["observed"] = observed
    if x.shape[1] < min_seeds_for_interval():
        out["p_value_null_reason"] = f"too few seeds (n = {x.shape[1]}) for a test"
        return out
    res = stats.permutation_test(
        tuple(x),
        spread,
        permutation_type="samples",
        vectorized=True,
        n_resamples=resamples,
        alternative="greater",
        rng=np.random.default_rng(seed),
    )
    if not np.isfinite(res.null_distribution).all():  # (relabelled seeds can overflow where the observed did not:
        return out | _overflowed(("p_value",), x)  # the p-value moved without a word, a probe)
    out["p_value"] = float(res.pvalue)
    return out


MAX_DIVERGED_SHARE = 0.25
"""The largest share of a setting's runs without a score (diverged or unscored) for it to be ranked: the
IQM trims a quarter of the runs at each end, so :func:`ranking_iqm`, which counts such runs as the lowest
scores, trims up to this share of them as it would have trimmed the lowest scores."""


def diverged(runs: SettingRuns | Runs) -> int:
    """The runs of ``runs`` that diverged (the engine's flag: their weights became non-finite); they have no
    score."""
    return int(np.count_nonzero(np.asarray(runs.ds.diverged.values, bool)))


def unscored(runs: SettingRuns | Runs) -> int:
    """The runs of ``runs`` without a score that did not diverge: no training episode ended within the run (it
    is shorter than an episode can last, as a ``--steps`` cut can be). They are left out of every number, as a
    diverged run is, but they need not have failed: in CartPole they are the runs whose pole never fell."""
    return int(np.count_nonzero(~np.isfinite(runs.auc) & ~np.asarray(runs.ds.diverged.values, bool)))


def soft_diverged(runs: Mapping[str, Runs]) -> dict[str, int] | None:
    """By stage label, the runs with a score that soft-diverged (their Q-values went beyond every
    discounted return of the rewards they saw: the DQN summary's ``soft_diverged``, van Hasselt et al.
    2018); they keep their scores. ``None`` where a stage's runs do not record the flag (runs.csv
    written before it)."""
    if not all("soft_diverged" in r.ds for r in runs.values()):
        return None
    return {
        label: int(np.sum(np.asarray(r.ds.soft_diverged.values, bool) & np.isfinite(r.auc)))
        for label, r in runs.items()
    }


def ranking_iqm(values: np.ndarray) -> float:
    """A setting's IQM for ranking it: its runs without a score (``[seeds]``, non-finite: diverged or unscored)
    counted as its lowest scores, then ``trim_mean(·, 0.25)`` over all its runs; ``-inf`` where they are more
    than the ``floor(n / 4)`` it trims (more than :data:`MAX_DIVERGED_SHARE`).

    The IQM the tables report stands on the scored runs alone, so a size whose lowest quarter diverged scored
    higher than its runs gave (10.27 over 100 runs, 10.98 over the 75 left) and was ranked best (a probe).
    Counted as the lowest, up to a quarter of such runs are trimmed as the lowest scores would have been.
    """
    from scipy import stats

    x = np.asarray(values, np.float64)
    if x.size == 0:
        return -np.inf
    return float(stats.trim_mean(np.where(np.isfinite(x), x, -np.inf), 0.25))


def optimum(response: Runs) -> tuple[int, int]:
    """The best and the worst static memory size of the response stage ``response`` by :func:`ranking_iqm`.

    So a size of which more than :data:`MAX_DIVERGED_SHARE` of the runs have no score is never the best,
    unless every size is such (then the best IQM of the scored runs; the smallest where none has one), nor
    the worst where two sizes or more are ranked; a size whose runs all diverged (no IQM) is never the worst;
    a tie goes to the smaller size. Without runs lacking a score, the ranking IQM is the reported IQM."""
    from jaxreplay.engine.results import _iqm_numpy

    sizes = [s.point["memory_size"] for s in response.settings]
    runs = [select(response, s.label).auc for s in response.settings]
    with np.errstate(over="ignore", invalid="ignore"):  # (over the scored runs, the tables' IQM: no interval)
        iqms = np.array([_iqm_numpy(r) for r in runs])
    iqms = np.where(np.isfinite(iqms), iqms, -np.inf)
    ranking = np.array([ranking_iqm(r) for r in runs])
    ranked = np.isfinite(ranking)
    best = int(np.argmax(ranking) if ranked.any() else np.argmax(iqms))
    # The worst among the same candidates as the best (from all sizes, the only ranked size could be both
    # best and worst, read as "every size has the same IQM": a probe), unless one size alone is ranked.
    worst = int(
        np.argmin(np.where(ranked, ranking, np.inf))
        if ranked.sum() >= 2
        else np.argmin(np.where(np.isfinite(iqms), iqms, np.inf))
    )
    return sizes[best], sizes[worst]
