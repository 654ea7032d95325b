"""The study's figures, one function each (:func:`draw` draws them all): scores (and their intervals)
come from the study's result (``study.json``'s entries), curves from the runs, each selected by its
setting's label."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

import numpy as np

from jaxreplay.paper.reproduce.study import stages
from jaxreplay.paper.reproduce.study.runs import Runs, seed_mean, select
from jaxreplay.paper.reproduce.study.settings import StudyDesign
from jaxreplay.paper.reproduce.study.stages import aer, fixed, walk
from jaxreplay.paper.reproduce.study.text import find


def _capacity(runs: Runs, label: str) -> np.ndarray:
    """The memory size of every run of setting ``label``, ``[seeds, segments]``."""
    return select(runs, label).ds.capacity.values.astype(float)


def _column(entries: list[dict], key: str) -> np.ndarray:
    return np.array([np.nan if e[key] is None else e[key] for e in entries], float)


def response_figure(out: pathlib.Path, design: StudyDesign, result: dict, runs: Mapping[str, Runs]) -> str:
    """``response.png``: the static response curve with aER and its controls at their sizes (top), and
    aER's N(t) on the same memory-size axis (bottom). Returns the file name."""
    import matplotlib.pyplot as plt

    from jaxreplay.paper import plots

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 7.5), sharex=True, gridspec_kw={"height_ratios": [1, 1.2]})
    sizes, response, adaptive = np.array(design.sizes, float), result["response"], runs[stages.ADAPTIVE]
    # The label promises the interval only where one is drawn (fewer than the seeds an interval needs: none).
    has_interval = any(r["score_ci_low"] is not None for r in response)
    static_label = "static memory (IQM, 95% CI)" if has_interval else "static memory (IQM; too few seeds for a CI)"
    top.plot(sizes, _column(response, "score_iqm"), "o-", color="k", label=static_label)
    top.fill_between(
        sizes, _column(response, "score_ci_low"), _column(response, "score_ci_high"), color="k", alpha=0.12
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    steps = adaptive.ds.segment.values
    for j, a in enumerate(result["adaptive"]):
        color, n0 = colors[j % len(colors)], a["initial_size"]
        c = find(result["controls"], initial_size=n0)
        # A point without a score is said in the legend, not dropped: the start's controls are still drawn in its
        # colour, and the figure said nothing of its missing square (found by a probe).
        missing = [
            what
            for what, score in (
                ("aER", a["score_iqm"]),
                ("random walk", c["random_walk_score_iqm"]),
                ("fixed at mean", c["fixed_at_mean_score_iqm"]),
            )
            if score is None
        ]
        if missing:
            top.plot([], [], "s", color=color, mfc="none", label=f"from {n0}: no scored run ({', '.join(missing)})")
        if a["score_iqm"] is not None:
            no_interval = a["score_ci_low"] is None  # too few seeds
            top.errorbar(
                [a["mean_size"]],
                [a["score_iqm"]],
                yerr=None
                if no_interval
                else [[a["score_iqm"] - a["score_ci_low"]], [a["score_ci_high"] - a["score_iqm"]]],
                fmt="s",
                color=color,
                label=f"aER from {n0} (at its mean size)",
            )
        top.plot([c["random_walk_mean_size"]], [c["random_walk_score_iqm"]], "x", color=color, ms=8)
        top.plot([c["fixed_at_mean_size"]], [c["fixed_at_mean_score_iqm"]], "^", color=color, mfc="none", ms=8)
        cap = _capacity(adaptive, aer(n0))
        bottom.plot(cap.mean(0), steps, "-", color=color, label=f"aER from {n0}")
        bottom.fill_betweenx(steps, np.percentile(cap, 10, 0), np.percentile(cap, 90, 0), color=color, alpha=0.15)
        bottom.plot(_capacity(adaptive, walk(n0)).mean(0), steps, ":", color=color)
    best = result["best_static"]
    top.axvline(best, color="gray", ls="--", lw=1)
    bottom.axvline(best, color="gray", ls="--", lw=1, label=f"static optimum {best}")
    top.set_xscale("log")
    top.set_ylabel("score: mean training return (AUC)")
    top.set_title(f"{_game(design)}: memory-size response (x: random walk, △: fixed at aER's mean size)")
    top.legend(fontsize=7)
    bottom.set_xlabel("memory size N")
    bottom.set_ylabel("environment steps")
    bottom.invert_yaxis()
    bottom.set_title("aER's N(t) (mean, 10–90% of seeds; dotted: random walk)")
    bottom.legend(fontsize=7)
    fig.tight_layout()
    plots.save(fig, out / "response.png")
    return "response.png"


def learning_curves_figure(out: pathlib.Path, design: StudyDesign, result: dict, runs: Mapping[str, Runs]) -> str:
    """``learning_curves.png``: the seed-mean training return of the smallest, best and largest
    static memory and of aER from each start. Returns the file name."""
    from jaxreplay.paper import plots

    fig, ax = plots._figure(figsize=(7, 4.5))
    response, adaptive = runs[stages.RESPONSE], runs[stages.ADAPTIVE]
    steps = adaptive.ds.segment.values
    for n in design.sizes:
        if n in (min(design.sizes), result["best_static"], max(design.sizes)):
            ax.plot(steps, seed_mean(select(response, fixed(n)).ds.train_return.values), "--", label=f"fixed {n}")
    for n0 in result["starts"]:
        ax.plot(steps, seed_mean(select(adaptive, aer(n0)).ds.train_return.values), "-", label=f"aER from {n0}")
    path = out / "learning_curves.png"
    return _finish(fig, ax, "training episode return (seed mean)", f"{_game(design)}: learning curves", path)


def memory_size_figure(out: pathlib.Path, design: StudyDesign, result: dict, runs: Mapping[str, Runs]) -> str:
    """``memory_size.png``: the seed-mean memory size over time of aER and of the random walk from
    each start, with the static optimum. Returns the file name."""
    from jaxreplay.paper import plots

    fig, ax = plots._figure(figsize=(7, 4.5))
    adaptive = runs[stages.ADAPTIVE]
    steps = adaptive.ds.segment.values
    for n0 in result["starts"]:
        (line,) = ax.plot(steps, _capacity(adaptive, aer(n0)).mean(0), label=f"aER from {n0}")
        ax.plot(
            steps, _capacity(adaptive, walk(n0)).mean(0), ":", color=line.get_color(), label=f"random walk from {n0}"
        )
    ax.axhline(result["best_static"], color="gray", ls="--", lw=1, label="static optimum")
    ax.set_yscale("log")
    path = out / "memory_size.png"
    return _finish(fig, ax, "memory size (seed mean)", f"{_game(design)}: memory size over time", path)


def _finish(fig, ax, ylabel: str, title: str, path: pathlib.Path) -> str:
    """Label a curves-over-steps figure, save it, and return its file name."""
    from jaxreplay.paper import plots

    ax.set_xlabel("environment steps")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    plots.save(fig, path)
    return path.name


FIGURES = (response_figure, learning_curves_figure, memory_size_figure)


def draw(out: pathlib.Path, design: StudyDesign, result: dict, runs: Mapping[str, Runs]) -> list[str]:
    """Draw every figure of :data:`FIGURES` into ``out``; returns their file names."""
    return [figure(out, design, result, runs) for figure in FIGURES]


def _game(design: StudyDesign) -> str:
    """The game's name as a figure's title gives it: ``"CartPole-v1 (quick mode)"`` in the CPU quick mode."""
    return design.env_id + (" (quick mode)" if design.quick else "")
