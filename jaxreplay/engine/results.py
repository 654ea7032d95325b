"""Statistics and plots over labeled sweep results (``xarray`` objects from :mod:`jaxreplay.engine.sweep`).

Everything here reduces over the ``seed`` dimension by default and keeps every
other label, so ``mean_ci(ds.final_metric)`` is indexed by the grid axes.

* :func:`mean_ci`: mean and a Student-t confidence interval over seeds.
* :func:`iqm` and :func:`bootstrap_ci`: the interquartile mean (rliable's
  robust aggregate, as its code computes it: ``scipy.stats.trim_mean(x, 0.25)``,
  which cuts ``floor(n / 4)`` values at each end, so 4 of 6 seeds are kept and
  at n <= 3 it is the plain mean; not the fractional weights at the quartiles of
  Agarwal et al.'s text) and a bootstrap interval of any statistic (SciPy's
  ``scipy.stats.bootstrap``), by default the expanded percentile interval
  (:func:`expanded_confidence`), which keeps its coverage from 6 seeds on.
* :func:`seed_interval`: one setting's mean (Student-t interval) or IQM
  (expanded bootstrap interval), or ``None`` bounds with a reason where the
  seeds are too few for an interval (:func:`min_seeds_for_interval`).
* :func:`best`: the best setting along each axis, and overall.
* :func:`plot_metric`: a metric against one axis (mean ± CI, one line per
  value of a second axis) or a filled contour over two axes.

Non-finite values are ignored by the statistics (a run whose weights became
non-finite has non-finite metrics); ``count`` in :func:`mean_ci` says how many
seeds entered each mean. A run flagged ``diverged`` can still be finite (a
LineSearch error past ``linesearch.DIVERGED_GROWTH`` times its start, ~1e28)
and then enters them: leave such runs out with
``ds.final_metric.where(~ds.diverged)`` where a statistic should.

:func:`strict_json` is the convention of every ``--json`` output: strict JSON,
where a value that cannot be given is ``null`` and has a sibling
``"<key>_null_reason"`` saying why.
"""

from __future__ import annotations

from jaxreplay import _extras  # noqa: E402

_extras.require("jaxreplay.engine.results", "sweep", "xarray", "scipy")


import math
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "mean_ci",
    "iqm",
    "bootstrap_ci",
    "expanded_confidence",
    "seed_interval",
    "min_seeds_for_interval",
    "check_resamples",
    "best",
    "plot_metric",
    "strict_json",
    "null_reasons",
]

SEED_DIM = "seed"
"""The dim of a sweep's results that indexes seeds (:mod:`jaxreplay.engine.assemble` labels it; the
statistics here reduce over it by default)."""

CONFIG_DIM = "config"
"""The dim that indexes configurations, in results of explicit ``points`` (a grid has one dim per axis)."""


def mean_ci(data, dim: str = SEED_DIM, confidence: float = 0.95):
    """Mean over ``dim`` with a Student-t interval: a Dataset with ``mean``, ``low``, ``high``, ``count``.

    Args:
        data: an ``xarray.DataArray`` (e.g. ``ds.final_metric``).
        dim: the dimension to reduce (default ``"seed"``).
        confidence: two-sided level in (0, 1).

    Non-finite entries are dropped; where fewer than two remain the interval is NaN. Computed in float64 (in
    the records' float32, four finite seeds of 2e38 had an infinite mean). The coverage is the nominal one for
    normal seeds at any count and close to it for symmetric ones (93–96% at 6 seeds); a two-mode metric (30%
    of seeds learning) is covered 90% at 6 seeds, 94% at 10, a strongly right-skewed one less (lognormal: 83%
    at 6 seeds, 85% at 20). Their :func:`iqm` (:func:`bootstrap_ci`) keeps 95%.
    """
    import xarray as xr
    from scipy import stats

    _check_confidence(confidence)
    data = data.astype(np.float64)
    finite = data.where(np.isfinite(data))
    count = finite.count(dim)
    mean = finite.mean(dim)
    sem = finite.std(dim, ddof=1) / np.sqrt(count)
    t = xr.apply_ufunc(lambda n: stats.t.ppf(0.5 + confidence / 2, np.maximum(n - 1, 1)), count)
    half = xr.where(count >= 2, t * sem, np.nan)
    return xr.Dataset({"mean": mean, "low": mean - half, "high": mean + half, "count": count})


def _iqm_numpy(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """``scipy.stats.trim_mean(x, 0.25)`` along ``axis`` (``floor(n / 4)`` values cut at each end of the
    ``n`` finite ones: the middle half when 4 divides ``n``), non-finite entries dropped per slice."""
    from scipy import stats

    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    if x.shape[-1] and np.isfinite(x).all():  # one vectorised call (a bootstrap passes 2000 resamples at once)
        return np.asarray(stats.trim_mean(x, 0.25, axis=-1), np.float64)
    out = np.full(x.shape[:-1], np.nan)
    for idx in np.ndindex(out.shape):
        v = x[idx]
        v = v[np.isfinite(v)]
        if v.size:
            out[idx] = stats.trim_mean(v, 0.25)
    return out


def iqm(data, dim: str = SEED_DIM):
    """Interquartile mean over ``dim`` (scipy's ``trim_mean(·, 0.25)``; non-finite entries dropped)."""
    import xarray as xr

    return xr.apply_ufunc(_iqm_numpy, data, input_core_dims=[[dim]], kwargs={"axis": -1})


_BOOTSTRAP_METHODS = ("expanded", "percentile", "basic", "BCa")


def expanded_confidence(n: int, confidence: float = 0.95) -> float:
    """The percentile level at which the expanded percentile interval reads the bootstrap distribution of
    ``n`` seeds: ``1 − 2 Φ(−√(n / (n − 1)) · t)``, ``t`` the Student-t quantile ``1 − (1 − confidence) / 2`` with
    ``n − 1`` degrees of freedom (Hesterberg 2015, *What teachers should know about the bootstrap*, §4).

    A plain percentile interval is too narrow at a few seeds: it reads the bootstrap spread as if the standard
    error were known (a normal quantile where Student's t belongs) and the resamples' spread is the seeds'
    spread with divisor n, not n − 1. The expanded interval widens it by both factors. Measured (2000 samples of
    6 seeds each; ``tests/test_results.py`` asserts it on fewer): the IQM of a normal, lognormal, Student-t₃,
    uniform or two-mode distribution was covered 95–97% of the time (the plain percentile interval: 89–92%); the
    mean 92–94% for the symmetric ones (Student's t: 93–96%), 90% for the two-mode one, 83% for the lognormal.

    Args:
        n: seeds, an integer ≥ 2.
        confidence: the nominal two-sided level in (0, 1).

    Returns:
        The level in (``confidence``, 1]: 0.9951 for 6 seeds, 0.9829 for 10, 0.9539 for 100 at 95%; 1 (in
        float64) for 2 seeds, whose interval is then the two seeds' range (it covers at most 50%:
        :func:`min_seeds_for_interval`).
    """
    from scipy import stats

    _check_confidence(confidence)
    if isinstance(n, bool) or not float(n).is_integer() or n < 2:
        raise ValueError(f"n must be an integer of at least 2 (an interval needs two seeds), got {n!r}.")
    n = int(n)
    t = stats.t.ppf(0.5 + confidence / 2, n - 1)
    return float(1 - 2 * stats.norm.cdf(-math.sqrt(n / (n - 1)) * t))


def bootstrap_ci(
    data,
    statistic: Callable[[np.ndarray, int], np.ndarray] | str = "mean",
    dim: str = SEED_DIM,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    method: str = "expanded",
):
    """Point estimate and bootstrap interval of ``statistic`` over ``dim``.

    Args:
        data: an ``xarray.DataArray``.
        statistic: ``"mean"``, ``"iqm"`` or a function ``f(x, axis) -> array``.
        dim: the dimension resampled (seeds).
        confidence: two-sided level.
        resamples: bootstrap resamples (``scipy.stats.bootstrap``'s ``n_resamples``), an integer ≥ 100
            (with 1 or 2 the "interval" missed its own estimate).
        seed: NumPy seed of the resampling (the interval is reproducible).
        method: ``"expanded"`` (the default: the percentile interval read at
            :func:`expanded_confidence` of each slice's seed count, which keeps
            its coverage from 6 seeds on; below, no interval of a mean or IQM
            can: :func:`min_seeds_for_interval`), or one of SciPy's ``"percentile"``,
            ``"basic"``, ``"BCa"`` (the plain percentile interval of 6 seeds
            covers 75–92% where it says 95%; BCa gives NaN bounds where SciPy
            cannot compute it, e.g. five equal seeds and one other).

    Returns:
        A Dataset with ``estimate``, ``low`` and ``high``. Each slice drops its
        non-finite entries first; fewer than two finite seeds give NaN bounds.
    """
    import xarray as xr
    from scipy import stats

    _check_confidence(confidence)
    check_resamples(resamples)
    if method not in _BOOTSTRAP_METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, _BOOTSTRAP_METHODS))}, got {method!r}.")
    named: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
        "mean": lambda x, axis: np.mean(x, axis=axis),
        "iqm": _iqm_numpy,
    }
    if isinstance(statistic, str) and statistic not in named:
        raise ValueError(f"statistic must be 'mean', 'iqm' or a function, got {statistic!r}.")
    fn = named[statistic] if isinstance(statistic, str) else statistic
    expanded = method == "expanded"

    def one(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)  # apply_ufunc put the seed axis last
        est = np.full(x.shape[:-1], np.nan)
        low, high = est.copy(), est.copy()
        for idx in np.ndindex(est.shape):
            v = x[idx]
            v = v[np.isfinite(v)]
            if v.size == 0:
                continue
            est[idx] = fn(v, -1)
            if v.size >= 2 and np.ptp(v) > 0:
                res = stats.bootstrap(
                    (v,),
                    lambda s, axis: fn(s, axis),
                    confidence_level=expanded_confidence(v.size, confidence) if expanded else confidence,
                    n_resamples=resamples,
                    method="percentile" if expanded else method,
                    vectorized=True,
                    rng=np.random.default_rng(seed),
                )
                low[idx], high[idx] = res.confidence_interval
            elif v.size >= 2:
                low[idx] = high[idx] = est[idx]
        return np.stack([est, low, high], axis=-1)

    out = xr.apply_ufunc(one, data, input_core_dims=[[dim]], output_core_dims=[["_stat"]])
    return xr.Dataset({"estimate": out.isel(_stat=0), "low": out.isel(_stat=1), "high": out.isel(_stat=2)})


def check_resamples(resamples: int) -> None:
    """ValueError (one line) unless ``resamples`` is an integer of at least 100: fewer bootstrap resamples cannot
    place an interval's ends (with 1 or 2, the interval of six seeds missed its own estimate)."""
    if isinstance(resamples, bool) or not float(resamples).is_integer() or resamples < 100:
        raise ValueError(f"resamples must be an integer of at least 100, got {resamples!r}.")


def min_seeds_for_interval(confidence: float = 0.95) -> int:
    """The fewest seeds from which a two-sided ``confidence`` interval of a mean or IQM is given: 6 at 95%.

    Every resample's mean or IQM lies between the smallest and the largest seed, so a bootstrap
    interval does too. For a continuous distribution symmetric about its centre θ, all n seeds fall
    on one side of θ with probability 2 · 2⁻ⁿ, and then such an interval misses θ: its coverage is
    at most 1 − 2¹⁻ⁿ, which reaches ``confidence`` only from n = 1 + log2(1 / (1 − confidence)) on
    (5.3 at 95%; a "95%" interval of 2 seeds covers at most 50%, of 3 seeds at most 75%). The bound
    is necessary, not sufficient: from 6 seeds on, :func:`seed_interval`'s intervals (Student-t for a
    mean, expanded bootstrap for an IQM) reach it, as :func:`expanded_confidence` says.
    """
    _check_confidence(confidence)
    return math.ceil(1 + math.log2(1 / (1 - confidence)) - 1e-9)  # (1e-9: 0.5 needs exactly 2)


def seed_interval(values, statistic: str = "iqm", confidence: float = 0.95, resamples: int = 2000, seed: int = 0):
    """One setting's ``statistic`` over seeds and its ``confidence`` interval, or why not.

    The mean's interval is Student's t (:func:`mean_ci`: the paired t interval where ``values`` are
    per-seed differences); the IQM's is the expanded percentile bootstrap (:func:`bootstrap_ci`,
    :func:`expanded_confidence`). Both keep their coverage at 6 seeds where the plain percentile
    bootstrap of the mean covered 83–87% and called 15% of null paired differences significant.

    Args:
        values: per-seed numbers, shape ``[seeds]``; non-finite ones (diverged runs, nothing
            measured) are dropped first.
        statistic: ``"mean"`` or ``"iqm"``.
        confidence: two-sided level in (0, 1).
        resamples, seed: the IQM's bootstrap, as in :func:`bootstrap_ci` (the mean's ignores them).

    Returns:
        ``{"estimate", "low", "high"}`` as floats. With no finite value all three are ``None``;
        with fewer finite values n than :func:`min_seeds_for_interval` the bounds are ``None``.
        Each ``None`` has a sibling ``"<key>_null_reason"`` (:func:`strict_json`'s convention):
        ``"too few seeds (n = 2) for an interval"``, ``"no seed has a finite value"``, or, where values near
        float64's largest overflow, ``"not finite in float64 ..."``.
    """
    import xarray as xr

    if statistic not in ("mean", "iqm"):
        raise ValueError(f"statistic must be 'mean' or 'iqm', got {statistic!r}.")
    values = np.asarray(values, np.float64)
    if values.ndim > 1:  # (flattened, two settings' seeds made one interval)
        raise ValueError(f"values must be one setting's seeds, shape [seeds]; got shape {values.shape}.")
    values = values.reshape(-1)
    n = int(np.isfinite(values).sum())
    if n == 0:
        why = "no seed has a finite value"
        return {key: None for key in ("estimate", "low", "high")} | null_reasons(("estimate", "low", "high"), why)
    data = xr.DataArray(values, dims=(SEED_DIM,))
    with np.errstate(over="ignore", invalid="ignore"):  # (an overflow is said below, in the result)
        if statistic == "mean":
            t = mean_ci(data, SEED_DIM, confidence)
            estimate, low, high = float(t["mean"]), float(t["low"]), float(t["high"])
        else:
            ci = bootstrap_ci(data, statistic, SEED_DIM, confidence, resamples, seed)
            estimate, low, high = float(ci.estimate), float(ci.low), float(ci.high)
    if n < min_seeds_for_interval(confidence):
        why = f"too few seeds (n = {n}) for an interval"
        out = {"estimate": estimate, "low": None, "high": None} | null_reasons(("low", "high"), why)
    else:
        out = {"estimate": estimate, "low": low, "high": high}
    # Finite values near float64's largest overflow in the sums (1e308 × 6 seeds: a mean of inf, bounds nan).
    overflow = [
        k
        for k, v in (("estimate", estimate), ("low", low), ("high", high))
        if out[k] is not None and not math.isfinite(v)
    ]
    largest = float(np.max(np.abs(values[np.isfinite(values)])))
    why = f"not finite in float64 (the values reach {largest:.3g}: rescale them)"
    return out | {k: None for k in overflow} | null_reasons(overflow, why)


def null_reasons(keys: Sequence[str], why: str) -> dict[str, str]:
    """``{"<key>_null_reason": why}`` for each key: the sibling entries :func:`strict_json`'s convention gives a
    ``None`` its caller set itself."""
    return {f"{key}_null_reason": why for key in keys}


def best(data, axes: Sequence[str] | None = None, minimize: bool = True, dim: str = SEED_DIM) -> dict:
    """The best settings of the seed-mean of ``data``.

    A setting some of whose seeds have no finite value (a diverged run) is
    never the best while another has all of its seeds: its seed mean would be
    a mean of the survivors (one lucky seed of eight beat a setting whose
    eight seeds all did well). Where every setting has a non-finite seed, they
    compete on their survivors; ``overall["seeds"]`` says how many seeds are
    behind its value. A tie goes to the smallest values (the first axis's
    first), whatever order the sweep declared them in; the settings of a
    sweep of explicit points (its ``config`` axis) are ordered by their
    hyperparameters, in name order, and ``overall`` names them beside the
    ``config`` label.

    Args:
        data: an ``xarray.DataArray`` with the grid axes (and ``dim``).
        axes: the axes to report (default: every dimension but ``dim``).
        minimize: whether lower is better.

    Returns:
        ``{"overall": {axis: value, ..., "value": v, "seeds": n}, "per_axis":
        {axis: DataArray}}``: the single best configuration, and for each axis
        the best value of that axis at every setting of the others
        (``idxmin``/``idxmax`` of the seed mean, by the same rule; NaN where
        no value of that axis has a finite seed there). Seed means in float64.
    """
    # (a float32 mean of large finite seeds overflowed to inf) In ascending order: the first of a tie was the one
    # declared first, so a permuted grid named another best (found by a probe).
    data = _ascending(data.astype(np.float64), dim)
    finite = np.isfinite(data)
    mean = data.where(finite).mean(dim) if dim in data.dims else data
    count = finite.sum(dim) if dim in data.dims else finite.astype(int)
    whole = count == (data.sizes[dim] if dim in data.dims else 1)
    axes = list(axes) if axes is not None else [d for d in mean.dims]
    unknown = [a for a in axes if a not in mean.dims]
    if unknown:
        raise ValueError(f"axes: {unknown[0]!r} is not a dimension of the data; dimensions: {list(mean.dims)}.")
    worst = np.inf if minimize else -np.inf

    def ranked(over):  # a setting with a non-finite seed only where nothing along ``over`` has all its seeds
        return mean.where(whole | ~whole.any(over)).fillna(worst)

    filled = ranked(list(mean.dims))
    flat = int(np.argmin(filled.values) if minimize else np.argmax(filled.values))
    position = np.unravel_index(flat, filled.shape)
    overall = {d: mean[d].values[i].item() for d, i in zip(mean.dims, position)}
    if CONFIG_DIM in mean.dims:  # a points sweep: the best point's hyperparameters, not only its position
        at = position[mean.dims.index(CONFIG_DIM)]
        overall.update({c: mean[c].values[at].item() for c in _along(mean, CONFIG_DIM)})
    overall["value"] = float(mean.values[position])
    overall["seeds"] = int(np.asarray(count.values)[position])
    # Where no value along the axis has a finite seed, nothing is best (idxmin named the first label).
    per_axis = {
        a: (ranked([a]).idxmin(a) if minimize else ranked([a]).idxmax(a)).where((count > 0).any(a)) for a in axes
    }
    return {"overall": overall, "per_axis": per_axis}


def _along(data, dimension: str) -> list[str]:
    """The names of ``data``'s 1-D coordinates along ``dimension`` other than its own, in name order."""
    return sorted(str(c) for c, v in data.coords.items() if c != dimension and v.dims == (dimension,))


def _ascending(data, skip: str):
    """``data`` with every dimension but ``skip`` in ascending order of its coordinate (a points sweep's ``config``
    in the order of its hyperparameters, :func:`_along`)."""
    keys = []
    for d in data.dims:
        if d == skip:
            continue
        if d == CONFIG_DIM:
            keys += _along(data, d)
        elif d in data.indexes:
            keys.append(d)
    return data.sortby(keys) if keys else data


def plot_metric(
    data,
    x: str,
    hue: str | None = None,
    y: str | None = None,
    dim: str = SEED_DIM,
    confidence: float = 0.95,
    ax=None,
    **contour_kwargs,
):
    """Plot the seed mean of ``data`` over one or two axes; returns the matplotlib Axes.

    * ``x`` only (and optionally ``hue``): mean ± ``confidence`` interval
      (:func:`mean_ci`) against ``x``, one line per value of ``hue``.
    * ``x`` and ``y``: a filled contour of the mean over the two axes.

    Every other dimension must already be selected away (``data.sel(...)``).
    The axes are drawn in ascending order of their values, whatever order the
    sweep declared them in (a line joins its points left to right, and a
    contour needs monotonic coordinates); ``hue`` values in ascending order too.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    used = {x} | ({hue} if hue else set()) | ({y} if y else set())
    # A sweep keeps each axis in the order it was declared ([1000, 100, 500]): unsorted, a line zigzagged and a
    # contour folded over itself, wrong bands without a warning (found by a probe).
    data = data.sortby([d for d in (x, hue, y) if d is not None and d in data.coords and data[d].ndim == 1])
    stats = mean_ci(data, dim, confidence) if dim in data.dims else None
    mean = stats["mean"] if stats is not None else data
    extra = [d for d in mean.dims if d not in used]
    if extra:
        raise ValueError(f"select or reduce the dimensions {extra} first (e.g. data.sel({extra[0]}=...)).")
    if y is not None:
        values = mean.transpose(y, x)
        cs = ax.contourf(values[x].values, values[y].values, values.values, **contour_kwargs)
        plt.colorbar(cs, ax=ax, label=data.name or "")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        return ax
    # Without a `dim` axis (e.g. records already reduced over seeds) there is no interval: the line alone.
    table = stats if stats is not None else mean.to_dataset(name="mean")
    groups = [(None, table)] if hue is None else [(v, table.sel({hue: v})) for v in table[hue].values]
    for value, s in groups:
        label = None if value is None else f"{hue} = {value}"
        (line,) = ax.plot(s[x].values, s["mean"].values, marker="o", label=label)
        if stats is not None:
            ax.fill_between(s[x].values, s["low"].values, s["high"].values, color=line.get_color(), alpha=0.2)
    ax.set_xlabel(x)
    # (Without an interval the label promises none.)
    ax.set_ylabel(
        f"{data.name or ''} (mean, {int(confidence * 100)}% CI over {dim})" if stats is not None else data.name or ""
    )
    if hue is not None:
        ax.legend()
    return ax


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")


def jsonable(value: Any, strict: bool = False) -> Any:
    """``value`` as plain JSON data: dict keys as strings, tuples as lists, NumPy scalars as Python
    numbers, paths as strings; with ``strict``, non-finite floats (NaN, ±inf) as ``None`` (strict
    JSON has no NaN)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v, strict) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, strict) for v in value]
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if strict and isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def strict_json(value: Any, reason: str | None = None) -> Any:
    """``value`` as strict JSON data in which every ``null`` can say why: the ``--json`` convention.

    As :func:`jsonable` with ``strict`` (NaN and ±inf become ``None``), and in every dict an
    entry that is ``None``, or a list holding one, gets a sibling ``"<key>_null_reason"`` unless
    it has one already: ``reason`` where given, else, for a value that was a non-finite float,
    what it was (``"not a finite number (nan)"``). An entry the caller set to ``None`` itself
    gets no generic reason: the caller knows why and says so (the sibling key, or ``reason``).

    Args:
        value: dicts, lists, tuples, NumPy scalars, numbers, strings, paths.
        reason: why any ``None`` within ``value`` is ``None``, when one cause explains them all.
    """
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out[str(key)] = strict_json(item, reason)
            why = reason or _what_it_was(item)
            if why and f"{key}_null_reason" not in value and _holds_null(out[str(key)]):
                out[f"{key}_null_reason"] = why
        return out
    if isinstance(value, (list, tuple)):
        return [strict_json(v, reason) for v in value]
    return jsonable(value, strict=True)


def _holds_null(value: Any) -> bool:
    """``value`` is ``None`` or a (nested) list with a ``None`` (a dict explains its own)."""
    return value is None or (isinstance(value, list) and any(_holds_null(v) for v in value))


def _what_it_was(value: Any) -> str | None:
    """Why a value turned into ``null``, if it was a non-finite float (or a list holding them)."""
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return f"not a finite number ({float(value)})"
    if isinstance(value, (list, tuple)) and any(_what_it_was(v) for v in value):
        return "null where the value was not a finite number (NaN or ±inf)"
    return None
