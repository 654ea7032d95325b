"""Matplotlib figures of the LineSearch reproduction (Liu & Zou 2018), one function per figure.

Every function takes plain NumPy-like arrays, draws one figure and returns a
:class:`matplotlib.figure.Figure`; it knows nothing of JAX or of the
simulation. Figures are created with the object-oriented API (no ``pyplot``
state, Agg canvas), so nothing needs closing and no global backend is
switched; :func:`save` writes a PNG and releases the figure.

Conventions: theory is drawn as lines, experiment as markers (blue dots for
Δθ1, orange squares for Δθ2, as in the paper), and titles name the parameters.
"""

from __future__ import annotations

from jaxreplay import _extras  # noqa: E402

_extras.require("jaxreplay.paper.plots", "paper", "matplotlib")


import pathlib
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap, TwoSlopeNorm
from matplotlib.figure import Figure

from jaxreplay._files import atomic_write
from jaxreplay._validation import check_increasing

__all__ = [
    "save",
    "learning_curves",
    "compare_learning_curves",
    "metric_vs_memory",
    "metric_contour",
    "difference_contour",
    "comparison_map",
    "exponent_curves",
    "metric_ratio_curves",
    "steps_vs_memory",
    "optimal_memory_vs_target",
    "prioritized_vs_uniform_1d",
    "adaptive_learning_curves",
    "adaptive_memory",
]

C1, C2 = "tab:blue", "tab:orange"
_LINESTYLES = ("-", "--", ":", "-.")
_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def _figure(figsize: tuple[float, float] = (6.0, 4.2)) -> tuple[Figure, Axes]:
    fig = Figure(figsize=figsize, dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    return fig, ax


def _title(ax: Axes, title: str) -> None:
    ax.set_title(textwrap.fill(title, 72), fontsize=10)


def _finish_dtheta_axes(ax: Axes, title: str) -> None:
    """Zero line, axis labels, title and a two-column legend of a Δθ(t) plot with theory and experiment."""
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.set_xlabel("learning step t")
    ax.set_ylabel(r"$\Delta\theta$")
    _title(ax, title)
    ax.legend(fontsize=7, ncol=2)


def save(fig: Figure, path: str | pathlib.Path) -> pathlib.Path:
    """Write ``fig`` as a PNG at ``path`` (parents created; atomically, see :mod:`jaxreplay._files`) and
    release its memory."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png"))
    fig.clear()
    return path


def _check_experiment(where: str, experiment: Mapping | None, theory: Mapping, times, names: tuple[str, str]) -> None:
    """Refuse experiment curves that would not be drawn: under a label the theory does not have (each is
    drawn on its theory curve), or without their times. ``where``: the figure (``"function('title')"``);
    ``names``: the experiment's two arguments, as the caller calls them."""
    unknown = [label for label in experiment or {} if label not in theory]
    if unknown:
        raise ValueError(
            f"{where}: {names[0]} has labels the theory does not: {unknown} (the theory's: {list(theory)}); an "
            "experiment curve is drawn beside the theory curve of its label."
        )
    if any(v is not None for v in (experiment or {}).values()) and times is None:
        raise ValueError(f"{where}: {names[1]} is needed with {names[0]} (the experiment's times).")


def _markers(t, y, every):
    t, y = np.asarray(t), np.asarray(y)
    idx = np.arange(every - 1, t.shape[0], every) if every > 1 else np.arange(t.shape[0])
    return t[idx], y[idx]


def learning_curves(
    t_theory,
    dtheta_theory,
    t_experiment=None,
    dtheta_experiment=None,
    *,
    title: str,
    marker_every: int = 25,
    experiment_label: str = "experiment",
) -> Figure:
    """Fig. 2a/2b and the γ > 0 appendix figure: Δθ1, Δθ2 vs step.

    Args:
        t_theory: float[S] times of the theory curve.
        dtheta_theory: float[S, 2] (Δθ1, Δθ2) from the ODE (lines).
        t_experiment, dtheta_experiment: float[T], float[T, 2] seed-averaged
            experiment (markers every ``marker_every`` steps), or None.

    Raises:
        ValueError: ``dtheta_experiment`` without ``t_experiment``.
    """
    _check_experiment(
        f"learning_curves({title!r})",
        {"": dtheta_experiment},
        {"": None},
        t_experiment,
        ("dtheta_experiment", "t_experiment"),
    )
    fig, ax = _figure()
    dth = np.asarray(dtheta_theory)
    ax.plot(t_theory, dth[:, 0], color=C1, lw=1.8, label=r"$\Delta\theta_1$ theory")
    ax.plot(t_theory, dth[:, 1], color=C2, lw=1.8, label=r"$\Delta\theta_2$ theory")
    if dtheta_experiment is not None:
        de = np.asarray(dtheta_experiment)
        ax.plot(
            *_markers(t_experiment, de[:, 0], marker_every),
            "o",
            color=C1,
            ms=4,
            mfc="none",
            label=rf"$\Delta\theta_1$ {experiment_label}",
        )
        ax.plot(
            *_markers(t_experiment, de[:, 1], marker_every),
            "s",
            color=C2,
            ms=4,
            mfc="none",
            label=rf"$\Delta\theta_2$ {experiment_label}",
        )
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.set_xlabel("learning step t")
    ax.set_ylabel(r"$\Delta\theta = \theta - \theta^*$")
    _title(ax, title)
    ax.legend(fontsize=8)
    return fig


def compare_learning_curves(
    t_theory,
    theory: Mapping[str, np.ndarray],
    t_experiment=None,
    experiment: Mapping[str, np.ndarray] | None = None,
    *,
    title: str,
    marker_every: int = 25,
) -> Figure:
    """Appendix Fig. 2DExplain: Δθ1, Δθ2 of several settings (e.g. ER vs pER).

    ``theory`` maps a label to float[S, 2] (lines, one line style per label);
    ``experiment`` maps the same labels to float[T, 2] (markers).

    Raises:
        ValueError: an ``experiment`` label that ``theory`` does not have, or ``experiment`` without
            ``t_experiment``.
    """
    _check_experiment(
        f"compare_learning_curves({title!r})", experiment, theory, t_experiment, ("experiment", "t_experiment")
    )
    fig, ax = _figure()
    experiment = experiment or {}
    for i, (label, dth) in enumerate(theory.items()):
        dth = np.asarray(dth)
        ls = _LINESTYLES[i % len(_LINESTYLES)]
        ax.plot(t_theory, dth[:, 0], ls, color=C1, lw=1.6, label=rf"$\Delta\theta_1$ {label} (theory)")
        ax.plot(t_theory, dth[:, 1], ls, color=C2, lw=1.6, label=rf"$\Delta\theta_2$ {label} (theory)")
        if label in experiment and experiment[label] is not None:
            de = np.asarray(experiment[label])
            mk = ("o", "^", "v", "D")[i % 4]
            ax.plot(
                *_markers(t_experiment, de[:, 0], marker_every),
                mk,
                color=C1,
                ms=3.5,
                mfc="none",
                label=rf"$\Delta\theta_1$ {label} (exp.)",
            )
            ax.plot(
                *_markers(t_experiment, de[:, 1], marker_every),
                mk,
                color=C2,
                ms=3.5,
                mfc="none",
                label=rf"$\Delta\theta_2$ {label} (exp.)",
            )
    _finish_dtheta_axes(ax, title)
    return fig


def metric_vs_memory(
    memory_sizes,
    metrics: Mapping[str, np.ndarray | tuple[np.ndarray, np.ndarray]],
    experiment_memory_sizes=None,
    experiment_metrics: Mapping[str, np.ndarray] | None = None,
    *,
    title: str,
) -> Figure:
    """Fig. 2c: final metric M vs memory size N, one curve per label (e.g. per m).

    ``metrics[label]`` is float[len(memory_sizes)] (theory, lines), or a pair
    (float[n] N, float[n] M) on that curve's own N values (e.g. the grid with
    the cusps of M(N) inserted, :meth:`jaxreplay.paper.theory.MemoryCusps.curve`);
    ``experiment_metrics[label]`` float[len(experiment_memory_sizes)] (markers).

    Raises:
        ValueError: an ``experiment_metrics`` label that ``metrics`` does not have, or ``experiment_metrics``
            without ``experiment_memory_sizes``.
    """
    _check_experiment(
        f"metric_vs_memory({title!r})",
        experiment_metrics,
        metrics,
        experiment_memory_sizes,
        ("experiment_metrics", "experiment_memory_sizes"),
    )
    where = f"metric_vs_memory({title!r})"
    # Lines join their points in the order given: an unsorted N drew a zigzag (found by a probe).
    check_increasing(f"{where}: memory_sizes", memory_sizes)
    if experiment_memory_sizes is not None:
        check_increasing(f"{where}: experiment_memory_sizes", experiment_memory_sizes)
    fig, ax = _figure()
    experiment_metrics = experiment_metrics or {}
    for i, (label, M) in enumerate(metrics.items()):
        color = _COLORS[i % len(_COLORS)]
        N = memory_sizes
        if isinstance(M, tuple):
            N, M = M
            check_increasing(f"{where}: metrics[{label!r}]'s N", N, strict=False)  # (a cusp may meet a grid N)
        ax.plot(N, M, color=color, lw=1.8, label=f"{label} (theory)")
        if label in experiment_metrics:
            ax.plot(
                experiment_memory_sizes,
                experiment_metrics[label],
                "o",
                color=color,
                mfc="none",
                label=f"{label} (experiment)",
            )
    ax.set_xlabel("memory size N")
    ax.set_ylabel(r"$M = |\Delta\theta_1(T)| + |\Delta\theta_2(T)|$")
    _title(ax, title)
    ax.legend(fontsize=8)
    return fig


def _check_grid(where: str, memory_sizes, batch_sizes) -> None:
    """A contour's or map's coordinates, each strictly increasing: unsorted, contourf folded the surface over
    itself and pcolormesh drew cells at other places, with only matplotlib's generic warning (found by a probe)."""
    check_increasing(f"{where}: memory_sizes", memory_sizes)
    check_increasing(f"{where}: batch_sizes", batch_sizes)


def metric_contour(
    memory_sizes,
    batch_sizes,
    metric,
    optimal_memory=None,
    *,
    title: str,
    levels: int = 20,
    log: bool = True,
    shallow=None,
    shallow_label: str = "",
) -> Figure:
    """Fig. 2d/2f (and the appendix pER contour): M over (N, m), stars at the optimal N per m.

    Args:
        memory_sizes: float[nN]; batch_sizes: float[nm]; metric: float[nN, nm].
        optimal_memory: float[nm], the N minimising M for each m (stars), or None.
        log: colour by log10 M (M spans several decades), else by M.
        shallow: optional bool[nm]: m whose optimum is hardly below M(N_max)
            (drawn as hollow stars, legend ``shallow_label``).
    """
    M = _finite(metric, f"metric_contour({title!r}): metric")  # an inf M (a diverged solve): blank, as NaN
    _check_grid(f"metric_contour({title!r})", memory_sizes, batch_sizes)
    fig, ax = _figure((6.2, 4.6))
    if log:
        Z = np.log10(np.maximum(M, 1e-12))
        hi = float(np.nanmax(Z))
        lo = max(float(np.nanmin(Z)), hi - 5.0)  # clip the zero-crossing dips of M
        clipped = bool(np.nanmin(Z) < lo)  # (the colour bar says so: an arrow below, and its label)
        cs = ax.contourf(
            memory_sizes,
            batch_sizes,
            np.maximum(Z, lo).T,
            levels=_levels(lo, hi, levels),
            cmap="viridis",
            extend="min" if clipped else "neither",
        )
        label = r"$\log_{10} M$" + (f" (below {lo:.1f} drawn as {lo:.1f})" if clipped else "")
        fig.colorbar(cs, ax=ax, label=label)
    else:
        bands = _levels(float(np.nanmin(M)), float(np.nanmax(M)), levels)
        cs = ax.contourf(memory_sizes, batch_sizes, M.T, levels=bands, cmap="viridis")
        fig.colorbar(cs, ax=ax, label=r"$M$")
    if optimal_memory is not None:
        opt = np.asarray(optimal_memory, dtype=float)
        m = np.asarray(batch_sizes, dtype=float)
        hollow = np.zeros(m.shape, bool) if shallow is None else np.asarray(shallow, bool)
        ax.plot(opt[~hollow], m[~hollow], "*", color="red", ms=8, mec="k", mew=0.4, label="optimal N per m")
        if hollow.any():
            ax.plot(
                opt[hollow],
                m[hollow],
                "*",
                color="none",
                ms=8,
                mec="red",
                mew=0.8,
                label=shallow_label or "optimal N per m (shallow)",
            )
        ax.legend(fontsize=8, loc="upper right")
    ax.set_xlabel("memory size N")
    ax.set_ylabel("minibatch size m")
    _title(ax, title)
    return fig


def _finite(values, what: str) -> np.ndarray:
    """``values`` as floats with every non-finite one NaN (drawn blank); ValueError naming ``what`` where none
    is finite (matplotlib's own error named neither the figure nor the quantity)."""
    values = np.asarray(values, dtype=float)
    values = np.where(np.isfinite(values), values, np.nan)
    if not np.isfinite(values).any():
        raise ValueError(f"{what} has no finite value to draw.")
    return values


def _levels(lo: float, hi: float, n: int) -> np.ndarray:
    """``n`` contour levels from ``lo`` to ``hi``; a band of width 1 around ``lo`` where the two are one value
    to float rounding (matplotlib refuses levels that do not increase)."""
    if hi - lo <= 1e-9 * max(1.0, abs(hi)):
        return np.linspace(lo - 0.5, lo + 0.5, n)
    return np.linspace(lo, hi, n)


def difference_contour(memory_sizes, batch_sizes, difference, *, title: str, levels: int = 21) -> Figure:
    """Appendix Fig. 2DComp: M_ER − M_pER over (N, m); positive = pER better."""
    D = _finite(difference, f"difference_contour({title!r}): difference")  # (an inf made the levels NaN)
    _check_grid(f"difference_contour({title!r})", memory_sizes, batch_sizes)
    lim = float(np.nanmax(np.abs(D))) or 1.0
    fig, ax = _figure((6.2, 4.6))
    cs = ax.contourf(
        memory_sizes,
        batch_sizes,
        D.T,
        levels=np.linspace(-lim, lim, levels),
        cmap="RdBu_r",
        norm=TwoSlopeNorm(0.0, -lim, lim),
    )
    fig.colorbar(cs, ax=ax, label=r"$M_{ER} - M_{pER}$ (>0: pER better)")
    ax.set_xlabel("memory size N")
    ax.set_ylabel("minibatch size m")
    _title(ax, title)
    return fig


def comparison_map(
    memory_sizes, batch_sizes, difference, threshold: float, *, title: str, experiment_points=None
) -> Figure:
    """Fig. 2e: red where pER is better (M_ER − M_pER > threshold), blue where ER is, white otherwise, grey where
    the difference is NaN (a failed solve: not "no difference").

    ``experiment_points``: optional iterable of (N, m, difference) spot checks
    drawn as markers coloured by the same rule (grey where NaN: every seed diverged).
    """
    _check_grid(f"comparison_map({title!r})", memory_sizes, batch_sizes)
    fig, ax = _figure((6.2, 4.6))
    D = np.asarray(difference, dtype=float)
    cls = np.where(np.isnan(D), -2, np.where(D > threshold, 1, np.where(D < -threshold, -1, 0)))
    cmap = ListedColormap(["0.6", "tab:blue", "white", "tab:red"])
    N, m = np.asarray(memory_sizes, float), np.asarray(batch_sizes, float)
    ax.pcolormesh(N, m, cls.T, cmap=cmap, vmin=-2.5, vmax=1.5, shading="nearest")
    # The cells are centred on the grid's points: the axes stop at its edges (as the contours of the same ΔM do),
    # not half a cell beyond, where nothing was solved (N <= 0 on a linear axis; found by a probe).
    ax.set_xlim(N.min(), N.max())
    ax.set_ylim(m.min(), m.max())
    handles: list[Artist] = [
        ax.fill_between([], [], color="tab:red", label="pER better"),
        ax.fill_between([], [], color="tab:blue", label="ER better"),
        ax.fill_between([], [], color="white", ec="0.5", label=rf"$|\Delta M| < {threshold:g}$"),
    ]
    pts = np.asarray(list(() if experiment_points is None else experiment_points), dtype=float).reshape(-1, 3)
    if np.isnan(D).any() or np.isnan(pts[:, 2]).any():
        handles.append(ax.fill_between([], [], color="0.6", label="no value (NaN)"))
    if pts.size:
        d = pts[:, 2]
        colors = np.where(
            np.isnan(d), "0.6", np.where(d > threshold, "tab:red", np.where(d < -threshold, "tab:blue", "white"))
        )
        ax.scatter(pts[:, 0], pts[:, 1], c=list(colors), edgecolors="k", s=40, marker="D", zorder=3)
        handles.append(ax.scatter([], [], c="white", edgecolors="k", marker="D", label="experiment spot check"))
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    ax.set_xlabel("memory size N")
    ax.set_ylabel("minibatch size m")
    _title(ax, title)
    return fig


def _curves(t, curves: Mapping[str, np.ndarray], ylabel: str, title: str, logy: bool = False) -> Figure:
    fig, ax = _figure()
    for i, (label, y) in enumerate(curves.items()):
        ax.plot(t, y, color=_COLORS[i % len(_COLORS)], lw=1.8, label=label)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("learning step t")
    ax.set_ylabel(ylabel)
    _title(ax, title)
    ax.legend(fontsize=8)
    return fig


def exponent_curves(t, exponents: Mapping[str, np.ndarray], *, title: str) -> Figure:
    """Appendix Fig. 1DLearning (a): the exponent k(t) for several N (labels)."""
    return _curves(t, exponents, r"exponent $k(t)$", title)


def metric_ratio_curves(t, ratios: Mapping[str, np.ndarray], *, title: str) -> Figure:
    """Appendix Fig. 1DLearning (b): Δθ/Δθ⁰ = e^{−k(t)} for several N (labels)."""
    return _curves(t, ratios, r"$\Delta\theta / \Delta\theta^0$", title)


def steps_vs_memory(memory_sizes, steps: Mapping[str, np.ndarray], *, title: str) -> Figure:
    """Appendix Fig. 1DStepsVsSize: steps needed to reach k = K vs N, one curve per K (labels); a star at the
    smallest optimal N of each. ``memory_sizes`` strictly increasing."""
    check_increasing(f"steps_vs_memory({title!r}): memory_sizes", memory_sizes)
    fig, ax = _figure()
    for i, (label, s) in enumerate(steps.items()):
        s = np.asarray(s, dtype=float)
        reached = np.isfinite(s).any()  # a K no memory size reaches has no curve and no star: said in its label
        ax.plot(
            memory_sizes,
            s,
            color=_COLORS[i % len(_COLORS)],
            lw=1.6,
            label=label + ("" if reached else " (never reached)"),
        )
        if reached:
            j = int(np.nanargmin(np.where(np.isfinite(s), s, np.nan)))  # (an inf step count is "never")
            ax.plot(memory_sizes[j], s[j], "*", color=_COLORS[i % len(_COLORS)], ms=9, mec="k", mew=0.4)
    ax.set_xlabel("memory size N")
    ax.set_ylabel("steps to reach k = K")
    _title(ax, title)
    ax.legend(fontsize=8, title="stars: smallest optimal N")
    return fig


def optimal_memory_vs_target(targets, optimal_memory, *, title: str, largest=None) -> Figure:
    """Appendix Fig. 1DOptSize: the smallest memory size minimising the steps to k = K, vs K; with ``largest``
    (the largest such N per K), the band of N that tie with it, shaded and said in the legend."""
    fig, ax = _figure()
    ax.plot(targets, optimal_memory, ".-", color="tab:blue", lw=1.4, ms=3, label="smallest optimal N")
    if largest is not None:
        # Where every larger N ties (the memory holds the whole history), the optimum is a band, not a point:
        # the curve alone read as one optimal N per K (found by a probe).
        ax.fill_between(
            targets, optimal_memory, largest, color="tab:blue", alpha=0.15, lw=0, label="every N in the band ties"
        )
        ax.legend(fontsize=8)
    ax.set_xlabel("target exponent K")
    ax.set_ylabel("optimal memory size N")
    _title(ax, title)
    return fig


def prioritized_vs_uniform_1d(t, ratio_uniform, ratio_prioritized, *, title: str) -> Figure:
    """Appendix Fig. 1DPriLearning: Δθ/Δθ⁰ for ER (blue) and pER (orange), fixed intercept."""
    fig, ax = _figure()
    ax.plot(t, ratio_uniform, color=C1, lw=1.8, label="ER (uniform)")
    ax.plot(t, ratio_prioritized, color=C2, lw=1.8, label="pER (prioritized, β = 2)")
    ax.set_xlabel("learning step t")
    ax.set_ylabel(r"$\Delta\theta / \Delta\theta^0$")
    _title(ax, title)
    ax.legend(fontsize=8)
    return fig


def adaptive_learning_curves(
    t_experiment,
    adaptive_experiment,
    fixed_experiment,
    t_theory=None,
    adaptive_theory=None,
    fixed_theory=None,
    *,
    title: str,
) -> Figure:
    """Fig. 3a: Δθ1, Δθ2 with adaptive memory (solid) vs fixed memory (dashed).

    Experiment curves are seed-averaged float[T, 2]; the optional theory curves
    (float[S, 2]: the ODE driven by the mean live size n(t), and the fixed-N ODE) are
    thin dotted/dash-dotted lines.
    """
    fig, ax = _figure()
    a, f = np.asarray(adaptive_experiment), np.asarray(fixed_experiment)
    ax.plot(t_experiment, a[:, 0], "-", color=C1, lw=1.8, label=r"$\Delta\theta_1$ aER (exp.)")
    ax.plot(t_experiment, a[:, 1], "-", color=C2, lw=1.8, label=r"$\Delta\theta_2$ aER (exp.)")
    ax.plot(t_experiment, f[:, 0], "--", color=C1, lw=1.8, label=r"$\Delta\theta_1$ fixed (exp.)")
    ax.plot(t_experiment, f[:, 1], "--", color=C2, lw=1.8, label=r"$\Delta\theta_2$ fixed (exp.)")
    if adaptive_theory is not None:
        at = np.asarray(adaptive_theory)
        ax.plot(t_theory, at[:, 0], ":", color="k", lw=1.2, label=r"ODE driven by the mean live size $n(t)$")
        ax.plot(t_theory, at[:, 1], ":", color="k", lw=1.2)
    if fixed_theory is not None:
        ft = np.asarray(fixed_theory)
        ax.plot(t_theory, ft[:, 0], "-.", color="0.4", lw=1.0, label="ODE fixed N")
        ax.plot(t_theory, ft[:, 1], "-.", color="0.4", lw=1.0)
    _finish_dtheta_axes(ax, title)
    return fig


def adaptive_memory(
    t,
    mean,
    lower=None,
    upper=None,
    samples: Sequence[np.ndarray] | None = None,
    *,
    title: str,
    band_label: str = "10–90% of seeds",
) -> Figure:
    """Fig. 3b: the adaptive memory size N(t): seed mean, a band, and a few single seeds."""
    fig, ax = _figure()
    if samples is not None:
        for i, s in enumerate(samples):
            ax.plot(t, s, color="0.7", lw=0.7, label="single seeds" if i == 0 else None)
    if lower is not None and upper is not None:
        ax.fill_between(t, lower, upper, color="tab:blue", alpha=0.2, label=band_label)
    ax.plot(t, mean, color="tab:blue", lw=2.0, label="mean over seeds")
    ax.set_xlabel("learning step t")
    ax.set_ylabel("memory size N(t)")
    _title(ax, title)
    ax.legend(fontsize=8)
    return fig
