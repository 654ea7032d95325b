"""The replay study's figures, one function each (:func:`draw` draws them all): scores and intervals from
the study's result (``study.json``'s cells), curves from the runs, each selected by its cell's label."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

import numpy as np

from jaxreplay.paper.reproduce.replay_study.settings import ReplayDesign
from jaxreplay.paper.reproduce.replay_study.stages import ADAPTIVE_RATIO, cell_runs
from jaxreplay.paper.reproduce.study.runs import Runs, seed_mean
from jaxreplay.paper.reproduce.study.text import find


def _value(entry: dict, key: str) -> float:
    return np.nan if entry[key] is None else float(entry[key])


_NO_SCORE_GREY = "0.85"  # a heatmap cell without a score (no run of it finished a training episode)


def heatmap_figure(out: pathlib.Path, design: ReplayDesign, result: dict, runs: Mapping[str, Runs]) -> str:
    """``heatmap.png``: the score's IQM over capacity × replay ratio, one panel per n (cells of equal
    oldest-policy age lie on the falling diagonals: capacity × 4, ratio ÷ 4). Returns the file name."""
    import matplotlib.pyplot as plt

    from jaxreplay.paper import plots

    caps, ratios = design.capacities, design.ratios
    grids = {
        n: np.array(
            [
                [_value(find(result["cells"], memory_size=c, replay_ratio=r, n_step=n), "auc_iqm") for c in caps]
                for r in ratios
            ]
        )
        for n in design.n_steps
    }
    values = np.array(list(grids.values()))
    finite = values[np.isfinite(values)]  # (none where no cell has a score: an empty colour scale)
    low, high = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    fig, axes = plt.subplots(1, len(grids), figsize=(5 * len(grids), 4), squeeze=False)
    # The game and the quantity once, above the panels (each panel's own title was as wide as its panel).
    fig.suptitle(f"{_game(design)}: score IQM (mean training return)")
    # A cell without a score is grey with a dark "n/a": viridis leaves NaN transparent, and its white "n/a" stood
    # on the white axes, an empty square (found by a probe). Dark text on the light end of the scale, too.
    cmap = plt.get_cmap("viridis").with_extremes(bad=_NO_SCORE_GREY)
    for ax, (n, grid) in zip(axes[0], grids.items()):
        ax.imshow(grid, origin="lower", cmap=cmap, vmin=low, vmax=high, aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            light = np.isnan(v) or (high > low and (v - low) / (high - low) > 0.6)
            text = "n/a" if np.isnan(v) else f"{v:.3g}"
            ax.text(j, i, text, ha="center", va="center", color="k" if light else "w", fontsize=8)
        ax.set_xticks(range(len(caps)), [str(c) for c in caps])
        ax.set_yticks(range(len(ratios)), [f"{r:g}" for r in ratios])
        ax.set_xlabel("capacity (transitions)")
        ax.set_ylabel("replay ratio (updates per step)")
        ax.set_title(f"n = {n}")
    plots.save(fig, out / "heatmap.png")
    return "heatmap.png"


def capacity_figure(out: pathlib.Path, design: ReplayDesign, result: dict, runs: Mapping[str, Runs]) -> str:
    """``capacity.png``: the score (IQM, 95% interval) against capacity at ratio 1, one line per n."""
    from jaxreplay.paper import plots

    fig, ax = plots._figure(figsize=(6, 4))
    caps = np.array(design.capacities, float)
    scored = False
    for n in design.n_steps:
        cells = [find(result["cells"], memory_size=c, replay_ratio=ADAPTIVE_RATIO, n_step=n) for c in design.capacities]
        iqms = [_value(e, "auc_iqm") for e in cells]
        scored = scored or bool(np.isfinite(iqms).any())
        (line,) = ax.plot(caps, iqms, "o-", label=f"n = {n}")
        lows, highs = [_value(e, "auc_ci_low") for e in cells], [_value(e, "auc_ci_high") for e in cells]
        ax.fill_between(caps, lows, highs, color=line.get_color(), alpha=0.15)
    # The capacities set the x range: with no cell scored (no training episode ended) the lines hold no point,
    # and a log axis over matplotlib's default (0, 1) failed the whole study after its runs.
    ax.set_xscale("log")
    ax.set_xlim(caps.min() / 1.5, caps.max() * 1.5)
    if not scored:
        ax.text(
            0.5,
            0.5,
            "no cell has a score (no run finished a training episode)",
            transform=ax.transAxes,
            ha="center",
            va="center",
        )
    ax.set_xlabel("capacity (transitions)")
    ax.set_ylabel("score: mean training return (IQM)")
    ax.set_title(f"{_game(design)}: score against capacity at replay ratio {ADAPTIVE_RATIO:g}")
    ax.legend(fontsize=8)
    plots.save(fig, out / "capacity.png")
    return "capacity.png"


def learning_curves_figure(out: pathlib.Path, design: ReplayDesign, result: dict, runs: Mapping[str, Runs]) -> str:
    """``learning_curves.png``: the seed-mean training return of the grid's corner cells (smallest and
    largest capacity at the lowest and highest ratio), one panel per n."""
    import matplotlib.pyplot as plt

    from jaxreplay.paper import plots

    fig, axes = plt.subplots(1, len(design.n_steps), figsize=(5.5 * len(design.n_steps), 4), squeeze=False)
    corners = [
        (c, r)
        for c in (min(design.capacities), max(design.capacities))
        for r in (min(design.ratios), max(design.ratios))
    ]
    for ax, n in zip(axes[0], design.n_steps):
        for c, r in corners:
            ds = cell_runs(runs, c, r, n).ds
            ax.plot(ds.segment.values, seed_mean(ds.train_return.values), label=f"capacity {c}, ratio {r:g}")
        ax.set_xlabel("environment steps")
        ax.set_ylabel("training episode return (seed mean)")
        ax.set_title(f"{_game(design)}, n = {n}: the grid's corners")
        ax.legend(fontsize=7)
    plots.save(fig, out / "learning_curves.png")
    return "learning_curves.png"


FIGURES = (heatmap_figure, capacity_figure, learning_curves_figure)
"""The figures :func:`draw` draws, in order."""


def draw(out: pathlib.Path, design: ReplayDesign, result: dict, runs: Mapping[str, Runs]) -> list[str]:
    """Draw every figure of :data:`FIGURES` into ``out``; returns their file names."""
    return [figure(out, design, result, runs) for figure in FIGURES]


def _game(design: ReplayDesign) -> str:
    """The game's name as a figure's title gives it: ``"CartPole-v1 (quick mode)"`` in the CPU quick mode."""
    return design.env_id + (" (quick mode)" if design.quick else "")
