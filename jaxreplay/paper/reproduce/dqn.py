"""The paper's DQN study (Fig. 4): fixed vs adaptive memory on CartPole, MountainCar and Acrobot.

Entry point: :func:`reproduce` (``jaxreplay reproduce dqn --env ENV --out DIR
[--seeds S] [--quick]``). Per game it runs two sweeps through the engine
(:mod:`jaxreplay.engine.sweep`), persisted under ``DIR/sweeps/`` and so resumable:

* **fixed**: every fixed memory size of the paper's figure, one compiled
  program (the size is traced);
* **adaptive**: aER from each initial size of the figure (k = 20, n_old = N0/2,
  the paper's subsample of old transitions), one more program.

Settings are :func:`jaxreplay.paper.reproduce.settings.paper_setting` (the paper's γ,
step size, minibatch, network depth; what the paper leaves open is chosen and
documented there). ``quick`` shrinks every run in time (the same experiment,
shorter) for a 2-core CPU.

Outputs in ``out_dir``:

* ``learning_curves.png``: training-episode return per segment, mean over
  seeds with a 95% Student-t band from 6 seeds on, per setting (the paper's Fig. 4a–c);
* ``memory_size.png``: aER's memory size over time, mean and 10–90% band
  (Fig. 4d–f);
* ``runs.csv``: one row per run (setting, seed, score, final return, final
  memory size, diverged, soft_diverged);
* ``report.md``: per setting the IQM of the score with a 95% expanded bootstrap
  interval (:func:`~jaxreplay.engine.results.seed_interval`), and the
  paper's headline statistic: the percentage of aER seeds whose score beats the
  average score of all static runs, with a Clopper–Pearson 95% interval.

The *score* of a run is the mean, over the run's segments, of the mean return
of the training episodes completed in each segment: the area under its
learning curve, which is what "outperforms" compares in a learning-curve
figure. The paper does not define its comparison further.
"""

from __future__ import annotations

import csv
import pathlib
import time

import numpy as np

from jaxreplay import _validation
from jaxreplay._files import atomic_write_text, replacing
from jaxreplay.paper.reproduce.settings import ENVS  # the paper's games, defined once with their settings

__all__ = ["ENVS", "PAPER_PERCENT", "fixed_vs_adaptive", "reproduce", "run_scores", "beats_static_average", "iqm_table"]

# The paper's headline: % of seeds where aER beats the averaged static memory, per initial size.
PAPER_PERCENT = {
    "CartPole-v1": {100: 71.0},
    "MountainCar-v0": {20_000: 62.0, 150_000: 86.0},
    "Acrobot-v1": {25_000: 100.0, 100_000: 95.0},
}
ADAPTIVE_FROM = {"CartPole-v1": (100,), "MountainCar-v0": (20_000, 150_000), "Acrobot-v1": (25_000, 100_000)}
DEFAULT_SEEDS = {"quick": 4, "full": 100}


OUTPUTS = ("learning_curves.png", "memory_size.png", "runs.csv", "report.md")
"""The files :func:`reproduce` writes in its folder, beside ``sweeps/`` (deleted as it starts writing them)."""


def fixed_vs_adaptive(env_id: str, quick: bool, tuned: bool = False, steps: int | None = None):
    """The two sweeps of the comparison for ``env_id``: ``(fixed_setup, adaptive_setup, common_hparams,
    fixed_points, adaptive_points)``, from :func:`~jaxreplay.paper.reproduce.settings.paper_setting`.

    The points are lists of ``{hyperparameter: value}`` (memory size and what
    is derived from it); ``common_hparams`` is what every run shares.
    ``tuned``: CartPole's learning configuration instead of the paper's (see
    :func:`~jaxreplay.paper.reproduce.settings.paper_setting`). ``steps``: cut every run
    to this many environment steps (for tests and smoke runs;
    :func:`~jaxreplay.experiments.dqn.with_total_steps`), keeping the
    memory sizes and everything else.
    """
    from jaxreplay.experiments import dqn
    from jaxreplay.paper.reproduce import settings as paper_settings

    _validation.check_choice("env", env_id, ENVS)
    per_point = ("memory_size", "learning_starts", "adaptive_num_old")
    fixed_setup = adaptive_setup = common = None
    fixed_points, adaptive_points = [], []
    for adaptive, sizes in ((False, paper_settings.PAPER_MEMORY_SIZES[env_id]), (True, ADAPTIVE_FROM[env_id])):
        for size in sizes:
            setup, hp = paper_settings.paper_setting(env_id, size, adaptive, quick=quick, tuned=tuned)
            if steps is not None:
                setup = dqn.with_total_steps(setup, steps)
            shared = {k: v for k, v in hp._asdict().items() if k not in per_point}
            if common is None:
                common = shared
            if shared != common:
                raise AssertionError(f"paper_setting changed a shared hyperparameter for N = {size}")
            point = {k: getattr(hp, k) for k in per_point}
            if adaptive:
                adaptive_setup = adaptive_setup or setup
                adaptive_points.append(point)
            else:
                fixed_setup = fixed_setup or setup
                fixed_points.append(point)
    return fixed_setup, adaptive_setup, common, fixed_points, adaptive_points


def finite_mean(x: np.ndarray, axis: int) -> np.ndarray:
    """The mean of the finite entries of ``x`` along ``axis`` (float64), NaN where there is none, without
    NumPy's empty-slice warning: a segment or a run in which no training episode ended has no return."""
    x = np.asarray(x, np.float64)
    finite = np.isfinite(x)
    count = np.sum(finite, axis=axis)
    return np.where(count > 0, np.sum(np.where(finite, x, 0.0), axis=axis) / np.maximum(count, 1), np.nan)


def run_scores(ds) -> np.ndarray:
    """Score of every run of a DQN sweep dataset: the mean over segments of the finite ``train_return``
    (:func:`finite_mean`; NaN where no episode ended, or where the run diverged), ``[config, seed]``."""
    return np.where(ds.diverged.values, np.nan, finite_mean(ds.train_return.values, axis=-1))


def final_returns(ds) -> tuple[str, np.ndarray]:
    """Every run's final return in a DQN sweep dataset, and which return it is: the last segment's
    ``eval_return`` where the runs were evaluated, else its ``train_return`` (float64, the runs' axes), NaN
    where the run diverged: a network of NaNs still acts (``argmax`` picks the first action), so its
    "return" is a constant policy's (CartPole about 9, Acrobot -500), not the run's."""
    kind = "eval_return" if "eval_return" in ds else "train_return"
    return kind, np.where(ds.diverged.values, np.nan, ds[kind].values[..., -1].astype(np.float64))


def beats_static_average(
    adaptive_scores: np.ndarray, static_scores: np.ndarray, adaptive_diverged: np.ndarray | None = None
) -> dict:
    """Share of aER runs whose score exceeds the mean score of all static runs, with a 95% interval.

    Args:
        adaptive_scores: ``[seeds]`` scores of aER runs from one initial size (NaN: diverged, or no episode
            finished).
        static_scores: scores of every static run (all fixed sizes × seeds).
        adaptive_diverged: ``bool[seeds]``, which aER runs diverged. Default: every run without a score
            (what :func:`run_scores` gives a diverged run); given, a run without a score that did not
            diverge is left out as unscored instead of counting as a loss.

    Returns:
        ``percent``, ``low``, ``high`` (Clopper–Pearson 95%, in percent, taking the static mean as
        exact), ``wins``, ``n`` (the aER runs counted: diverged ones included, as losses),
        ``unscored`` (only where some are: aER runs left out, no score although not diverged, e.g. no
        episode finished),
        ``static_mean`` (NaN static runs left out), and where no share can be given (no static run or
        no aER run has a score) NaN ``percent``/``low``/``high`` with ``reason``.
    """
    from scipy import stats

    static = np.asarray(static_scores, np.float64)
    static_mean = float(np.mean(static[np.isfinite(static)])) if np.isfinite(static).any() else float("nan")
    adaptive_scores = np.asarray(adaptive_scores, np.float64)
    diverged = ~np.isfinite(adaptive_scores) if adaptive_diverged is None else np.asarray(adaptive_diverged, bool)
    unscored = ~np.isfinite(adaptive_scores) & ~diverged  # (they used to count as losses)
    n = int((~unscored).sum())
    wins = int(np.sum(np.where(np.isfinite(adaptive_scores), adaptive_scores, -np.inf) > static_mean))
    base = dict(wins=wins, n=n, static_mean=static_mean) | ({"unscored": int(unscored.sum())} if unscored.any() else {})
    reason = (
        "no static run has a score (each diverged or finished no episode)"
        if not np.isfinite(static_mean)
        else "no aER run has a score (no episode finished)"
        if n == 0
        else None
    )
    if reason:
        return dict(base, percent=float("nan"), low=float("nan"), high=float("nan"), reason=reason)
    ci = stats.binomtest(wins, n).proportion_ci(confidence_level=0.95, method="exact")
    return dict(base, percent=100.0 * wins / n, low=100.0 * ci.low, high=100.0 * ci.high)


def percent_text(value: float, paper: float | None = None) -> str:
    """``value`` (in percent) in whole percent, or with the decimals that tell it apart from ``paper`` when
    whole percents would print the two alike (a bound of 62.13% beside the paper's 62%: "62.1%"). A value
    strictly between 0 and 100 never prints as "0%" or "100%": a Clopper–Pearson bound of 0.42% is "0.4%",
    since "[0%, 64%]" would read as an interval that includes 0."""
    for decimals in range(4):
        text = f"{value:.{decimals}f}"
        if 0 < value < 100 and float(text) in (0.0, 100.0):
            continue
        if paper is None or value == paper or round(value, decimals) != round(paper, decimals):
            return f"{text}%"
    return f"{value:.10g}%"


def share_text(stat: dict, paper: float | None = None) -> str:
    """``"56% [46%, 66%] (56/100 seeds)"``, or why there is no share.

    With ``paper`` (the paper's share, in percent) an interval bound that whole percents would
    print equal to it, without being equal, keeps the decimals that show on which side it lies:
    ``"72% [62.1%, 81%]"`` beside a paper's 62%, so the verdict "outside" can be read off the row.
    """
    if "reason" in stat:
        return f"no share: {stat['reason']}"
    unscored = f"; {stat['unscored']} unscored left out" if stat.get("unscored") else ""
    low, high = percent_text(stat["low"], paper), percent_text(stat["high"], paper)
    return f"{percent_text(stat['percent'])} [{low}, {high}] ({stat['wins']}/{stat['n']} seeds{unscored})"


def _sweep_dir(out: pathlib.Path, label: str, sweep) -> pathlib.Path:
    # Named by the config's fingerprint: changing --seeds or --quick starts a new
    # sweep beside the old one instead of being refused; rerunning resumes.
    return out / "sweeps" / f"{label}-{sweep.fingerprint()[:10]}"


def reproduce(
    out_dir,
    env_id: str,
    *,
    seeds: int | None = None,
    quick: bool = False,
    progress: bool = True,
    seed: int = 0,
    tuned: bool = False,
    steps: int | None = None,
) -> dict:
    """Run the paper's fixed-vs-adaptive comparison for ``env_id`` into ``out_dir``.

    Args:
        out_dir: output folder (created); see the module docstring.
        env_id: ``"CartPole-v1"``, ``"MountainCar-v0"`` or ``"Acrobot-v1"``.
        seeds: seeds per setting (default 4 with ``quick``, else the paper's 100).
        quick: shorter runs (``paper_setting(..., quick=True)``).
        progress: progress bars and summaries on stderr.
        seed: base seed of the sweeps.
        tuned: CartPole only: the configuration that learns instead of the paper's.
        steps: cut every run to this many steps (see :func:`fixed_vs_adaptive`).

    Returns:
        A dict with ``report``, ``csv``, ``figures``, ``percent`` (per initial
        size: the statistic of :func:`beats_static_average`), ``iqm`` (per
        setting: estimate, low, high), ``seeds``, ``total_steps`` (per run)
        ``runtime_s`` (this call) and ``runs`` / ``runs_resumed`` (found finished in ``out_dir``,
        computed by an earlier call).
    """
    from jaxreplay import _validation
    from jaxreplay.engine import results
    from jaxreplay.engine import sweep as sweep_lib
    from jaxreplay.paper.reproduce import settings as paper_settings

    t0 = time.perf_counter()
    if seeds is None:
        seeds = DEFAULT_SEEDS["quick" if quick else "full"]
    seeds = _validation.check_static_int("seeds", seeds, low=1)
    fixed_setup, adaptive_setup, common, fixed_points, adaptive_points = fixed_vs_adaptive(env_id, quick, tuned, steps)
    from jaxreplay.paper.reproduce.study.writer import writing

    # One writer at a time (a rerun with other options, whose sweeps lock folders of their own, would mix files).
    with writing(out_dir, "reproduce dqn", OUTPUTS) as (out, clear):
        datasets, runs_resumed, runs = {}, 0, 0
        for label, setup, points in (
            ("fixed", fixed_setup, fixed_points),
            ("adaptive", adaptive_setup, adaptive_points),
        ):
            sweep = sweep_lib.Sweep("dqn", seeds=seeds, seed=seed, setup=setup, fixed=common, points=points)
            result = sweep_lib.run(sweep, _sweep_dir(out, label, sweep), progress=progress)
            datasets[label] = result.dataset
            runs_resumed, runs = runs_resumed + result.stats.runs_resumed, runs + result.stats.runs

        # the paper's labels
        sizes = {"fixed": paper_settings.PAPER_MEMORY_SIZES[env_id], "adaptive": ADAPTIVE_FROM[env_id]}
        scores = {label: run_scores(ds) for label, ds in datasets.items()}
        static = scores["fixed"].ravel()
        diverged = datasets["adaptive"].diverged.values
        percent = {
            N0: beats_static_average(scores["adaptive"][i], static, diverged[i])
            for i, N0 in enumerate(sizes["adaptive"])
        }

        # IQM of the score per setting with its interval, where the seeds are enough for one (results.seed_interval)
        iqm = {
            _label(label, N): results.seed_interval(scores[label][i], "iqm", resamples=2000, seed=0)
            for label in datasets
            for i, N in enumerate(sizes[label])
        }

        # An earlier run's files go first (report.md is written last): a rerun killed part way leaves its own
        # figures and no report, never its figures beside the earlier run's report and CSV.
        clear()
        figures = _figures(out, env_id, datasets, sizes)
        csv_path = _write_csv(out, env_id, datasets, scores, sizes)
        report_path = out / "report.md"
        atomic_write_text(
            report_path,
            _report(env_id, seeds, quick, fixed_setup, common, percent, iqm, datasets, time.perf_counter() - t0, tuned),
        )
        return dict(
            report=report_path,
            csv=csv_path,
            figures=figures,
            percent=percent,
            iqm=iqm,
            seeds=seeds,
            total_steps=int(fixed_setup.total_steps),
            runtime_s=time.perf_counter() - t0,
            runs=runs,
            runs_resumed=runs_resumed,
        )


def _label(kind: str, memory_size: int, ran: int | None = None) -> str:
    """A setting as the paper names it (``"aER from 100"``, ``"fixed 40000"``), with the size that ran where it
    differs (quick mode scales the sizes: ``"aER from 100 (ran 50)"``)."""
    name = f"aER from {memory_size}" if kind == "adaptive" else f"fixed {memory_size}"
    return name + (f" (ran {int(ran)})" if ran is not None and int(ran) != int(memory_size) else "")


def _figures(out, env_id, datasets, sizes) -> dict:
    from jaxreplay.engine import results
    from jaxreplay.paper import plots

    fig, ax = plots._figure(figsize=(7, 4.5))
    blank, banded = 0, False
    for label, style in (("fixed", "--"), ("adaptive", "-")):
        ds = datasets[label]
        # A segment where a live seed finished no episode is left blank: the mean of the other seeds alone
        # dropped exactly the seeds whose episodes were long (with short --steps segments, the learners).
        curve = ds.train_return
        complete = ~(curve.isnull() & ~ds.diverged).any("seed")  # [config, segment]
        blank += int((~complete).sum())
        band = results.mean_ci(curve.where(complete))  # [config, segment]: Student-t, as every mean's interval
        # The band only where the seeds are enough for an interval (results.min_seeds_for_interval).
        enough = band["count"].values >= results.min_seeds_for_interval()
        banded = banded or bool(enough.any())
        for i, N in enumerate(sizes[label]):
            (line,) = ax.plot(ds.segment.values, band["mean"][i], style, label=_label(label, N, ds.memory_size[i]))
            low, high = np.where(enough[i], band.low[i], np.nan), np.where(enough[i], band.high[i], np.nan)
            ax.fill_between(ds.segment.values, low, high, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(
        "training episode return (mean, 95% t interval)"
        if banded
        else "training episode return (mean; too few seeds for a CI)"
    )
    gaps = f" ({blank} segment(s) blank: a seed finished no episode there)" if blank else ""
    ax.set_title(f"{env_id}: fixed vs adaptive memory{gaps}")
    ax.legend()
    figures = {"learning_curves.png": plots.save(fig, out / "learning_curves.png")}

    fig, ax = plots._figure(figsize=(7, 4.5))
    ds = datasets["adaptive"]
    steps = ds.segment.values
    for i, N in enumerate(sizes["adaptive"]):
        cap = ds.capacity.values[i].astype(np.float64)  # [seeds, segments]
        (line,) = ax.plot(steps, cap.mean(0), label=f"aER from {N} (initial {int(ds.memory_size.values[i])})")
        ax.fill_between(steps, np.percentile(cap, 10, 0), np.percentile(cap, 90, 0), color=line.get_color(), alpha=0.2)
        ax.axhline(float(ds.memory_size.values[i]), color=line.get_color(), ls=":", lw=1)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("memory size (mean, 10–90% of seeds)")
    ax.set_title(f"{env_id}: aER memory size")
    ax.legend()
    figures["memory_size.png"] = plots.save(fig, out / "memory_size.png")
    return figures


def iqm_table(iqm: dict) -> str:
    """Markdown table of the per-setting score IQM and its 95% CI (``iqm`` as returned by :func:`reproduce`)."""
    lines = ["| setting | score IQM | 95% CI |", "| --- | --- | --- |"]
    lines += [
        f"| {name} | {'n/a' if v['estimate'] is None else format(v['estimate'], '.2f')} | "
        + (v.get("low_null_reason", "") if v["low"] is None else f"[{v['low']:.2f}, {v['high']:.2f}]")
        + " |"
        for name, v in iqm.items()
    ]
    return "\n".join(lines)


def _write_csv(out, env_id, datasets, scores, sizes) -> pathlib.Path:
    path = out / "runs.csv"
    with replacing(path, text=True, newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "env",
                "setting",
                "adaptive",
                "paper_memory_size",
                "memory_size",
                "seed",
                "score",
                "final_train_return",
                "final_eval_return",
                "final_memory_size",
                "diverged",
                "soft_diverged",
            ]
        )
        for label, ds in datasets.items():
            for i, N in enumerate(sizes[label]):
                for s in range(ds.sizes["seed"]):
                    final_eval = float(ds.eval_return.values[i, s, -1]) if "eval_return" in ds else float("nan")
                    w.writerow(
                        [
                            env_id,
                            _label(label, N),
                            label == "adaptive",
                            N,
                            int(ds.memory_size.values[i]),
                            s,
                            f"{scores[label][i, s]:.6g}",
                            f"{float(ds.train_return.values[i, s, -1]):.6g}",
                            f"{final_eval:.6g}",
                            int(ds.final_capacity.values[i, s]),
                            bool(ds.diverged.values[i, s]),
                            bool(ds.soft_diverged.values[i, s]),
                        ]
                    )
    return path


def _report(env_id, seeds, quick, setup, common, percent, iqm, datasets, runtime, tuned=False) -> str:
    lines = [f"# DQN on {env_id}: fixed vs adaptive memory (paper Fig. 4)", ""]
    if tuned:
        lines += ["Configuration: **tuned** (learns CartPole; not the paper's γ = 0.9, step size 2e-5).", ""]
    lines.append(
        f"{seeds} seeds per setting, {'quick (shortened runs)' if quick else 'paper-length runs'}: "
        f"{setup.total_steps} environment steps per run, network {setup.hidden_sizes}, minibatch "
        f"{setup.batch_size}, γ = {common['discount']}, step size {common['step_size']}; "
        f"{runtime:.0f} s."
    )
    lines += [
        "",
        "## Headline: share of aER seeds beating the averaged static memory",
        "",
        "| aER from | paper | ours (95% Clopper–Pearson interval, the static mean taken as exact; wins / seeds) |",
        "| --- | --- | --- |",
    ]
    for N0, p in percent.items():
        paper = PAPER_PERCENT[env_id].get(N0)
        lines.append(f"| {N0} | {paper:.0f}% | {share_text(p, paper)} |")
    lines += [
        "",
        "Score of a run: mean over segments of its training-episode return (area under the learning "
        "curve); the static average is over every fixed size and seed.",
        "",
        "## Score per setting (IQM over seeds, 95% expanded bootstrap interval)",
        "",
        iqm_table(iqm),
    ]
    div = {k: int(ds.diverged.values.sum()) for k, ds in datasets.items()}
    soft = {k: int(ds.soft_diverged.values.sum()) for k, ds in datasets.items()}
    ad = datasets["adaptive"]
    lines += [
        "",
        f"Diverged runs: {div['fixed']} fixed, {div['adaptive']} adaptive. Soft-diverged runs (Q-values beyond "
        f"every discounted return of their rewards, weights finite; scored like the rest): {soft['fixed']} fixed, "
        f"{soft['adaptive']} adaptive.",
        "aER final memory size (mean over seeds): "
        + ", ".join(
            f"{_label('adaptive', N0, ad.memory_size[i])}: {ad.final_capacity.values[i].mean():.0f}"
            for i, N0 in enumerate(percent)
        ),
        "",
    ]
    lines.append(
        "Figures: `learning_curves.png`, `memory_size.png`; every run: `runs.csv`; labeled results: "
        "`sweeps/*/results.nc` (`jaxreplay.engine.sweep.load`)."
    )
    return "\n".join(lines) + "\n"
