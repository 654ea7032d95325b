# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Memory size and prioritization maps on LineSearch
#
# Liu & Zou, *The Effects of Memory Replay in Reinforcement Learning* (arXiv:1710.06574), Sections 3–4.
# Its misprints and ambiguities, and the readings we use, are in `docs/paper_readings.md` (cited below as "§n").
# This notebook draws the paper's maps of the final metric
#
# $$M(N, m) = |\Delta\theta_1(T)| + |\Delta\theta_2(T)|, \qquad T = 1000,$$
#
# over memory size $N$ and minibatch size $m$ (updates per step), at step size $\alpha = 10^{-3}$:
#
# 1. **ER** (uniform replay): Fig. 2d (γ = 0), Fig. 2f (γ = 0.5) and the slices of Fig. 2c, with the optimal $N$
#    per $m$ (stars) and **experiment spot checks** on top;
# 2. **pER** (prioritized replay, $P(i) \propto |\delta_i|^\beta$, β = 2): appendix Fig. 2D2DPri;
# 3. **ER vs pER**: Fig. 2e (where pER is better / worse / indistinguishable) and appendix Fig. 2DComp;
# 4. **aER** (adaptive memory, Algorithm 2): its memory-size trajectory $N(t)$ from simulation laid over the ER
#    landscape, and the replay ODE *driven by aER's mean live size $n(t)$* against the fixed-$N$ ODE and the simulation
#    (Fig. 3a/3b, extended to several $m$).
#
# The maps come from the replay ODE (`jaxreplay.paper.theory`, diffrax in float64): a whole grid is one `vmap`ped,
# compiled solve. Experiments (`jaxreplay.experiments.linesearch` through the sweep engine, in memory) are
# run only at a handful of grid points, to check the map where it matters. The notebook ends with a
# **Checks** cell that asserts the paper's claims on the numbers computed here.

# %%
# One JAX CPU device per core, before anything starts JAX (the `jaxreplay` command does the same): on a CPU
# the sweeps below then shard over every core, with the same results.
from jaxreplay.engine.batch import use_cpu_cores

use_cpu_cores()
# The one switch. False: a coarse map (about 15 N × 10 m grid points), a handful of
# spot checks, 32 ER/aER seeds and 8 pER seeds; about a minute on 2 CPU cores.
# True: the paper's grid resolution (N = 10…1000 step 10, m = 1…50), a dense spot-check
# grid and the full reproduction's seed counts (128 ER/aER, 32 pER; the paper does not
# state its own); several minutes on 2 CPU cores.
PAPER_SCALE = False

# %% [markdown]
# ## Parameters
#
# Everything below derives from these values; edit and rerun. The Checks at the end test the paper's claims,
# which are stated for the defaults (α = 1e-3, γ = 0, β = 2, aER from N0 = 100 at m = 10).
#
# The game is the paper's LineSearch: $x_0 = -5$, $v = 0.01$, reward weights $\beta = (0.1, 0.5)$,
# $\theta^0 = (0, 1)$, $T = 1000$ (the library defaults; the paper's parameters are listed in §11).

# %%
ALPHA = 1e-3  # step size α (Fig. 2c–2f, Fig. 3)
DISCOUNT = 0.0  # γ of the main maps and all experiments (Fig. 2d/2e, appendix 2D2DPri/2DComp)
DISCOUNT_F = 0.5  # γ of the companion ER map (Fig. 2f; its sub-caption says 0.7, the text 0.5: §6)
PRIORITY_EXPONENT = 2.0  # pER's β in P(i) ∝ |δ_i|^β (the paper's pER ODE uses β = 2)
T = 1000  # steps per game
SEED = 0  # base seed of the experiments

# aER (Algorithm 2). The paper gives k and n_old only for DQN (k = 20, n_old = N0/2); used here too.
AER_N0 = 100  # initial memory size
AER_K = 20  # memory adjustment interval k
AER_NOLD = 50  # number of oldest transitions checked, n_old
AER_M = 10  # the minibatch size of Fig. 3

if PAPER_SCALE:
    GRID_N = tuple(range(10, 1001, 10))  # the paper's resolution
    GRID_M = tuple(range(1, 51))
    ER_SPOT_N = (10, 50, 100, 150, 200, 250, 300, 400, 500, 700, 1000)
    ER_SPOT_M = (1, 2, 5, 10, 15, 20, 30, 40, 50)
    PER_SPOTS = ((10, 2), (50, 2), (50, 5), (100, 5), (100, 10), (250, 10), (500, 5), (500, 10), (1000, 10))
    AER_MS = (1, 2, 5, 10, 15, 20, 30, 40, 50)
    ER_SEEDS, PER_SEEDS, AER_SEEDS = 128, 32, 128
else:
    GRID_N = (10, 25, 50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 1000)
    GRID_M = (1, 2, 5, 10, 15, 20, 30, 40, 50)
    ER_SPOT_N = (50, 100, 250, 500, 1000)
    ER_SPOT_M = (5, 10, 40)
    PER_SPOTS = ((50, 5), (100, 10), (250, 10), (500, 10))
    AER_MS = (2, 5, 10, 20, 40)
    ER_SEEDS, PER_SEEDS, AER_SEEDS = 32, 8, 32
# The Checks use m = 5, 10, 40, 50 of the grid and the pER spots (100, 10) and (500, 10); keep them when editing.
# ER spot checks on the γ = DISCOUNT_F map (Fig. 2f), run in the same program as the others.
ER_SPOTS_F = ((100, 10), (250, 10), (1000, 10), (100, 40), (1000, 40))

# %%
import io
import time
import warnings

import jax
import jax.numpy as jnp
import matplotlib.patheffects as pe
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display

from jaxreplay.engine import sweep
from jaxreplay.engine.records import Record
from jaxreplay.experiments import linesearch as ls
from jaxreplay.paper import plots, theory
from jaxreplay.paper.reproduce.linesearch import (
    MONOTONE_TOL,
    WHITE_THRESHOLD,
    monotone_threshold,
    nonmonotone,
    optimal_memory,
    seed_average_metric,
)


def show(fig):
    """Display a figure as a PNG (jaxreplay.paper.plots returns plain Figures, not pyplot-managed ones)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    display(Image(buf.getvalue()))


T_START = time.perf_counter()
np.set_printoptions(precision=4, suppress=False, linewidth=110)
print("devices:", jax.devices(), "| PAPER_SCALE =", PAPER_SCALE)
print(f"Fig. 2e white band |M_ER − M_pER| < {WHITE_THRESHOLD:g}; "
      f"'monotone in N' means M(N_max) − min_N M ≤ {MONOTONE_TOL:g}")

# Every (N, m) an experiment or aER needs is a grid point of the ODE map: one solve, no interpolation.
er_spots = [(N, m) for m in ER_SPOT_M for N in ER_SPOT_N]
gridN = np.array(sorted(set(GRID_N) | set(ER_SPOT_N) | {N for N, _ in PER_SPOTS + ER_SPOTS_F} | {AER_N0}))
gridm = np.array(sorted(set(GRID_M) | set(ER_SPOT_M) | {m for _, m in PER_SPOTS + ER_SPOTS_F} | {AER_M}))
iN = {int(N): i for i, N in enumerate(gridN)}
im = {int(m): j for j, m in enumerate(gridm)}
times = np.linspace(0.0, T, 201)  # ODE save times (every 5 steps); M uses the last one
print(f"ODE grid: {len(gridN)} memory sizes × {len(gridm)} minibatch sizes = {gridN.size * gridm.size} points")

# %% [markdown]
# ## 1. The replay ODE over the (N, m) grid
#
# With γ = 0 the replay ODE (Eq. theta_memory) is a gradient flow on the TD loss of the transitions in the
# window, $\dot{\Delta\theta} = -m\alpha\,C_n(t)\,\Delta\theta$ with $C_n(t) = \langle (y, 1)(y, 1)^\top\rangle$ the
# second moment of the features over the positions $y \in [x(t) - v\,n(t),\, x(t)]$ of the $n(t) = \min(t, N)$
# stored transitions. pER (Eq. theta_memory_pri) weights that average by $|\delta|^\beta$.
# We integrate this first-order system directly (`theory.solve_grid`) rather than the appendix's printed
# second-order/b-coefficient forms, which have typos (§1, §3). With γ > 0 the pair (0.1, 0.5) is read as
# the reward weights β and Δθ is measured from the TD fixed point θ* (§8, the library default);
# at γ = 0 the two readings coincide.
#
# One ER solve covers both discounts (γ is traced: the grid gets a leading axis of 2), one pER solve the pER map.

# %%
t0 = time.perf_counter()
NN, MM = np.meshgrid(gridN, gridm, indexing="ij")  # [nN, nm]
gammas = np.array([DISCOUNT, DISCOUNT_F])
ode_er = theory.solve_grid(memory_size=NN[None], batch_size=MM[None], step_size=ALPHA,
                           discount=gammas[:, None, None], times=times)  # fields [2, nN, nm, ...]
M_er_all = np.asarray(ode_er.metric)
M_er, M_er_f = M_er_all[0], M_er_all[1]
print(f"ER ODE grid ({M_er_all.size} solves, both γ): {time.perf_counter() - t0:.1f} s")

t0 = time.perf_counter()
ode_per = theory.solve_grid(memory_size=NN, batch_size=MM, step_size=ALPHA, discount=DISCOUNT,
                            priority_exponent=PRIORITY_EXPONENT, times=times)
M_per = np.asarray(ode_per.metric)
print(f"pER ODE grid ({M_per.size} solves): {time.perf_counter() - t0:.1f} s")

changed = int(np.asarray(ode_er.direction_changed).sum() + np.asarray(ode_per.direction_changed).sum())
print("ODE solves in which θ1 changed sign (the monotone-motion model left):", changed)

optN_er, optN_er_f, optN_per = (optimal_memory(gridN, M) for M in (M_er, M_er_f, M_per))
for name, optN in (("ER", optN_er), (f"ER, γ = {DISCOUNT_F:g}", optN_er_f), ("pER", optN_per)):
    print(f"optimal N per m ({name}):", dict(zip(gridm.tolist(), optN.astype(int).tolist())))

# %% [markdown]
# ## 2. Experiment spot checks
#
# Each sampler is one static `Setup` (one compilation); memory size, minibatch size and discount are traced
# hyperparameters of explicit sweep points, so all spot checks of a sampler run as one `jit(vmap)` program.
# Algorithm 1 is read as "the agent acts from its current position each step, starting at $x_0$"
# (§9). pER recomputes every stored TD error before each draw (exact, like the ODE), which costs
# O(max capacity) per update: its spot checks are few and its `Setup` is only as large as they need.
# aER uses Algorithm 2 with exact sums, ε = 0 and the "new" shrink reading (§9; library defaults).
#
# The experiment's M is that of the seed-averaged curve,
# $|\langle\Delta\theta_1(T)\rangle| + |\langle\Delta\theta_2(T)\rangle|$
# (what the ODE, a mean-field model, predicts); its standard error is bounded by the sum of the two
# components' standard errors over seeds.


# %%
def run_points(sampler, points, seeds, max_capacity, max_batch_size, **fixed):
    """Run explicit (memory_size, batch_size[, discount]) points × seeds in memory; one compile.

    Returns the seed-resolved curves dtheta [C, S, T, 2] (float64; NaN for a diverged run, so
    that no mean takes it for a number), capacities [C, S, T] (aER only, None otherwise:
    records on demand, a fixed memory's capacity stays on the device) and the diverged flags [C, S].
    """
    keys = ("memory_size", "batch_size", "discount")
    setup = ls.Setup(steps=T, max_capacity=int(max_capacity), max_batch_size=int(max_batch_size),
                     sampler=sampler, max_num_old=max(AER_NOLD, 1))
    adaptive = sampler == "adaptive"
    sw = sweep.Sweep("linesearch", seeds=seeds, seed=SEED, setup=setup, fixed=fixed,
                     points=[dict(zip(keys, p)) for p in points],
                     record=Record(keep=("dtheta", "capacity") if adaptive else ("dtheta",)))
    t0 = time.perf_counter()
    result = sweep.run(sw, None, progress=False)
    ds = result.dataset
    print(f"{sampler:>11}: {sw.num_runs} runs in {time.perf_counter() - t0:.1f} s "
          f"(compile {result.stats.compile_seconds:.1f} s)")
    diverged = ds.diverged.values
    dtheta = np.where(diverged[..., None, None], np.nan, ds.dtheta.values.astype(np.float64))
    return dtheta, ds.capacity.values if adaptive else None, diverged


def spot_metric(dtheta):
    """M of the seed-averaged curve and its standard error (sum of the components' SEs), per config, over the
    seeds that did not diverge (NaN); the SE is NaN below two such seeds."""
    M = np.array([seed_average_metric(d) for d in dtheta])
    final = dtheta[:, :, -1, :]
    n = np.sum(~np.isnan(final), axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (fewer than two seeds: NaN)
        se = (np.nanstd(final, axis=1, ddof=1) / np.sqrt(n)).sum(-1)
    return M, se


# ER: the γ = DISCOUNT spot grid, the γ = DISCOUNT_F spots and the fixed-N0 run that aER is compared with.
er_points = [(N, m, DISCOUNT) for N, m in er_spots] + [(N, m, DISCOUNT_F) for N, m in ER_SPOTS_F]
if (AER_N0, AER_M, DISCOUNT) not in er_points:
    er_points.append((AER_N0, AER_M, DISCOUNT))
d_er, _, div_er = run_points("uniform", er_points, ER_SEEDS, max(p[0] for p in er_points),
                             max(p[1] for p in er_points), step_size=ALPHA)
d_per, _, div_per = run_points("prioritized", [(N, m, DISCOUNT) for N, m in PER_SPOTS], PER_SEEDS,
                               max(N for N, _ in PER_SPOTS), max(m for _, m in PER_SPOTS), step_size=ALPHA,
                               priority_exponent=PRIORITY_EXPONENT)
d_aer, cap_aer, div_aer = run_points("adaptive", [(AER_N0, m, DISCOUNT) for m in AER_MS], AER_SEEDS, T, max(AER_MS),
                                     step_size=ALPHA, adaptive_interval=AER_K, adaptive_num_old=AER_NOLD)
print("diverged runs (ER, pER, aER):", int(div_er.sum()), int(div_per.sum()), int(div_aer.sum()))

Mx_er, se_er = spot_metric(d_er)
Mx_per, se_per = spot_metric(d_per)


def ode_at(M_map, N, m):
    return float(M_map[iN[N], im[m]])


er_rows = []  # (N, m, γ, M_exp, SE, M_ode)
for (N, m, g), Mx, se in zip(er_points, Mx_er, se_er):
    er_rows.append((N, m, g, Mx, se, ode_at(M_er if g == DISCOUNT else M_er_f, N, m)))
per_rows = [(N, m, Mx, se, ode_at(M_per, N, m)) for (N, m), Mx, se in zip(PER_SPOTS, Mx_per, se_per)]
print("\n   N   m    γ    M_exp     ±SE     M_ode   |diff|")
for N, m, g, Mx, se, Mo in er_rows:
    print(f"ER  {N:4d} {m:3d} {g:4.2f}  {Mx:.5f} {se:.5f}  {Mo:.5f}  {abs(Mx - Mo):.1e}")
for N, m, Mx, se, Mo in per_rows:
    print(f"pER {N:4d} {m:3d} {DISCOUNT:4.2f}  {Mx:.5f} {se:.5f}  {Mo:.5f}  {abs(Mx - Mo):.1e}")
spot_err_er = max(abs(r[3] - r[5]) for r in er_rows)
spot_err_per = max(abs(r[2] - r[4]) for r in per_rows)
print(f"max |M_exp − M_ode|: ER {spot_err_er:.2e}, pER {spot_err_per:.2e}; "
      f"largest SE: ER {se_er.max():.1e}, pER {se_per.max():.1e}")

# %% [markdown]
# ## 3. The ER map (Fig. 2d): an interior optimum for small m, monotone for large m
#
# Colour is $\log_{10} M$ from the ODE; red stars mark the $N$ minimising $M$ for each $m$; circles are experiment
# spot checks coloured on the same scale (a circle that vanishes into the background agrees) and labelled
# with their $M$.
#
# *Why.* The paper explains the map by a trade-off between overshooting and the size of the weight update
# (Section 3; appendix Fig. 2DExplain). In the ODE picture: a short window spans only $vN$ of the line (1 unit at
# $N = 100$, while the agent travels from −5 to +5), so $C_n$ is nearly rank one. The agent quickly fits its
# prediction at its current position but barely constrains the split between slope and intercept, and as it
# moves the weights overshoot (θ1 moves away from β1, θ2 turns negative: Fig. 2a's narrative, which fits
# N ≈ 100, §10). A longer window constrains both weights and mitigates the overshoot, but the averaged
# update becomes slower (the paper's words), so a memory that is too long has not converged by $T$. With few
# updates per step (small $m$) both effects matter and a middle $N$ wins (the paper: $N \approx 250$ at $m = 10$).
# With many updates per step (large $m$) learning converges whenever the overshoot is avoided, so $M$ falls
# monotonically with $N$ (the paper: for $m > 20$). The thin valleys are zero crossings of $\Delta\theta_2(T)$, where
# $M$ dips by chance at that horizon (e.g. $m = 5$).


# %%
def log_scale(M):
    """The colour range plots.metric_contour uses for M (log10, at most five decades)."""
    Z = np.log10(np.maximum(M, 1e-12))
    return max(float(Z.min()), float(Z.max()) - 5.0), float(Z.max())


def overlay_spots(fig, M_map, rows, label="experiment (seed-averaged M)", annotate_max=30):
    """Experiment markers coloured by log10 M on the map's scale, annotated with M when there are few."""
    ax = fig.axes[0]
    lo, hi = log_scale(M_map)
    N, m, M = (np.array([r[i] for r in rows], float) for i in range(3))
    ax.scatter(N, m, c=np.clip(np.log10(np.maximum(M, 1e-12)), lo, hi), cmap="viridis", vmin=lo, vmax=hi,
               s=70, edgecolors="white", linewidths=1.2, zorder=4, label=label)
    if len(rows) <= annotate_max:
        right = gridN[0] + 0.85 * (gridN[-1] - gridN[0])
        for Ni, mi, Mi in zip(N, m, M):
            ax.annotate(f"{Mi:.2g}", (Ni, mi), xytext=(-4 if Ni > right else 4, 5), textcoords="offset points",
                        ha="right" if Ni > right else "left", rotation=40, rotation_mode="anchor", fontsize=7,
                        color="white", path_effects=[pe.withStroke(linewidth=1.6, foreground="black")], zorder=5)
    ax.legend(fontsize=7, loc="upper right")
    return fig


fig = plots.metric_contour(gridN, gridm, M_er, optN_er,
                           title=f"Fig. 2d: M(N, m), ER, γ = {DISCOUNT:g}, α = {ALPHA:g} (ODE); "
                                 f"circles: experiment, {ER_SEEDS} seeds")
show(overlay_spots(fig, M_er, [(N, m, Mx) for N, m, g, Mx, _, _ in er_rows if g == DISCOUNT]))

# %% [markdown]
# The same map at γ = 0.5 (Fig. 2f; the sub-caption's γ = 0.7 contradicts the caption and text, §6).
# Δθ is measured from the TD fixed point θ* = (β1/(1−γ), (β2 + γv|θ1*|)/(1−γ)) (§8). The structure
# is the paper's "similar principles": an interior optimum at small $m$, monotone at large $m$.

# %%
fig = plots.metric_contour(gridN, gridm, M_er_f, optN_er_f,
                           title=f"Fig. 2f: M(N, m), ER, γ = {DISCOUNT_F:g} (caption: 0.7, paper_readings §6), α = {ALPHA:g}")
show(overlay_spots(fig, M_er_f, [(N, m, Mx) for N, m, g, Mx, _, _ in er_rows if g == DISCOUNT_F]))

# %% [markdown]
# Slices of the γ = 0 map at $m$ = 5, 10, 40 (Fig. 2c): lines are the ODE, circles the experiment. The log scale
# shows the dips; below about $10^{-4}$ the experiment's $M$ sits on a floor of a few $10^{-5}$ (seed noise, which
# biases $|\langle\Delta\theta\rangle|$ upwards, plus the discrete game's small differences from the continuous
# model), a gap that is invisible on the map's scale.

# %%
slice_m = [m for m in (5, 10, 40) if m in im]
M_spot = {(N, m): Mx for N, m, g, Mx, _, _ in er_rows if g == DISCOUNT}
fig = plots.metric_vs_memory(
    gridN, {f"m = {m}": M_er[:, im[m]] for m in slice_m},
    ER_SPOT_N, {f"m = {m}": np.array([M_spot[(N, m)] for N in ER_SPOT_N]) for m in slice_m if m in ER_SPOT_M},
    title=f"Fig. 2c: M vs N, ER, γ = {DISCOUNT:g}, α = {ALPHA:g} ({ER_SEEDS} seeds)")
fig.axes[0].set_yscale("log")
show(fig)

# %% [markdown]
# ## 4. The pER map (appendix Fig. 2D2DPri)
#
# Prioritized replay weights each stored transition by $|\delta|^2$. Its map has the same shape as ER's, with
# the boundary between non-monotone and monotone $M(N)$ at a smaller $m$ (the paper: 15 instead of 20).
# Circles: pER experiment spot checks. Where every $N$ has converged (large $m$ and $N$) the differences in $M$ are
# at the solver's precision (< 1e-10), so the stars there mark ties, not a real optimum.

# %%
fig = plots.metric_contour(gridN, gridm, M_per, optN_per,
                           title=f"Appendix Fig. 2D2DPri: M(N, m), pER (β = {PRIORITY_EXPONENT:g}), "
                                 f"γ = {DISCOUNT:g}, α = {ALPHA:g}; circles: experiment, {PER_SEEDS} seeds")
show(overlay_spots(fig, M_per, [(N, m, Mx) for N, m, Mx, _, _ in per_rows]))

# %% [markdown]
# ## 5. Where prioritization helps or hurts (Fig. 2e, appendix Fig. 2DComp)
#
# $\Delta M = M_{ER} - M_{pER}$: red where pER is better by more than $1.5\times10^{-3}$ (the caption's threshold),
# blue where ER is, white in between. Diamonds are experiment spot checks, coloured by the same rule
# applied to the experiments' $\Delta M$.
#
# pER replays transitions in proportion to $\delta^2$, so it pushes hardest on the worst-fitted part of the window.
# The paper: with a short memory this makes the overshoot worse, with a long memory the weights update faster
# and pER converges faster (appendix Fig. 2DExplain(b) vs (d); here $N = 100$ vs $500$ at $m = 10$). So pER is worse
# at small $N$, particularly when $m$ is not large; where both have converged by $T$ (large $N$ and large $m$)
# the map is white.

# %%
dM = M_er - M_per  # > 0: pER better
dM_exp = {}
for N, m, Mx_p, _, _ in per_rows:
    match = [r for r in er_rows if r[:3] == (N, m, DISCOUNT)]
    if match:
        dM_exp[(N, m)] = match[0][3] - Mx_p
print("ΔM = M_ER − M_pER at the pER spot checks (experiment vs ODE):")
for (N, m), d in dM_exp.items():
    print(f"  N = {N:4d}, m = {m:2d}: experiment {d:+.4f}, ODE {dM[iN[N], im[m]]:+.4f}")
show(plots.comparison_map(gridN, gridm, dM, WHITE_THRESHOLD,
                             experiment_points=[(N, m, d) for (N, m), d in dM_exp.items()],
                             title=f"Fig. 2e: pER (red) vs ER (blue), γ = {DISCOUNT:g}, α = {ALPHA:g} (ODE; "
                                   f"diamonds: experiment)"))
show(plots.difference_contour(gridN, gridm, dM,
                                 title=f"Appendix Fig. 2DComp: $M_{{ER}} - M_{{pER}}$, γ = {DISCOUNT:g}, "
                                       f"α = {ALPHA:g}"))

worse = dM < -WHITE_THRESHOLD
better = dM > WHITE_THRESHOLD
print(f"pER worse in {worse.mean():.0%} of grid cells, better in {better.mean():.0%}, "
      f"indistinguishable in {(~worse & ~better).mean():.0%}")
print(f"pER-worse cells: mean N {NN[worse].mean():.0f} (grid {NN.mean():.0f}), mean m {MM[worse].mean():.1f} "
      f"(grid {MM.mean():.1f})")

# %% [markdown]
# ## 6. aER on the map
#
# aER (Algorithm 2) starts at $N_0$ and every $k$ steps grows the memory by $k$ when the summed |TD error| of the
# $n_{old}$ oldest stored transitions went up since the last check (the old data are being un-learned: overshoot)
# and shrinks it otherwise. We ran it at several $m$ from the same $N_0$.
#
# **Left:** the fixed-$N$ ODE landscape at $m = 10$ as a function of the horizon $t$ and $N$ —
# colour is $\log_{10}(|\Delta\theta_1(t)| + |\Delta\theta_2(t)|)$, so the column at $t = T$ is the $m = 10$ row of the
# Fig. 2d map — with aER's seed-mean $N(t)$ and its 10–90 % band over seeds, and the best fixed $N$ for each horizon
# (white dots, ODE). **Middle:** aER on the (N, m) map: for each $m$, an arrow from $N_0$ to the seed-mean final $N$
# (bar: 10–90 % of seeds), a dot at its time-averaged $N$; stars are the best fixed $N$.
# **Right:** final $M$ per $m$: aER simulation, the ODE driven by $\bar n(t)$, the seed mean of the number of
# transitions each step replayed from, and the fixed-$N_0$ ODE. The driven ODE is not in the paper. It is driven by
# the live size, not the capacity $N(t)$: right after a growth the real buffer holds fewer than $N(t)$ transitions
# for $k$ steps (`ls.replayed_sizes` rebuilds the live size from the capacity record).

# %%
t0 = time.perf_counter()
t_steps = np.arange(1.0, T + 1.0)
meanN = cap_aer.astype(np.float64).mean(axis=1)  # [len(AER_MS), T]
loN, hiN = (np.percentile(cap_aer, q, axis=1) for q in (10, 90))
mean_n = ls.replayed_sizes(cap_aer, AER_N0).mean(axis=1, dtype=np.float64)  # what each step replayed from


def driven_solve(sizes, m):
    return theory.solve(memory_size=theory.MemorySizeSchedule(jnp.asarray(t_steps), sizes), batch_size=m,
                        step_size=ALPHA, discount=DISCOUNT, times=times)


# One compiled, vmapped solve for every schedule: aER's mean n(t) per m, then the constant N0 (= fixed-N ODE).
with jax.enable_x64(True):
    sizes = np.concatenate([mean_n, np.full_like(mean_n, AER_N0)])
    ms_ = np.concatenate([AER_MS, AER_MS]).astype(np.float64)
    ode_drv = jax.jit(jax.vmap(driven_solve))(jnp.asarray(sizes), jnp.asarray(ms_))
nA = len(AER_MS)
M_drv = np.asarray(ode_drv.metric)[:nA]
M_fix = np.asarray(ode_drv.metric)[nA:]
M_aer = np.array([seed_average_metric(d) for d in d_aer])
print(f"driven ODE ({2 * nA} solves): {time.perf_counter() - t0:.1f} s")
print("   m   mean N(T)   M_aER(sim)   M_ODE(aER n(t))   M_ODE(fixed N0)")
for i, m in enumerate(AER_MS):
    print(f"  {m:2d}   {meanN[i, -1]:7.1f}    {M_aer[i]:.5f}      {M_drv[i]:.5f}           {M_fix[i]:.5f}")

ia = AER_MS.index(AER_M)
Mt = np.abs(np.asarray(ode_er.dtheta1)[0, :, im[AER_M]]) + np.abs(np.asarray(ode_er.dtheta2)[0, :, im[AER_M]])
fig, axes = plt.subplots(1, 3, figsize=(16, 4.6), gridspec_kw=dict(width_ratios=[1.15, 1.15, 1.0]))
ax = axes[0]
Z = np.log10(np.maximum(Mt, 1e-12))
lo = max(Z.min(), Z.max() - 5.0)
cs = ax.contourf(times, gridN, np.maximum(Z, lo), levels=np.linspace(lo, Z.max(), 20), cmap="viridis")
fig.colorbar(cs, ax=ax, label=r"$\log_{10}(|\Delta\theta_1(t)| + |\Delta\theta_2(t)|)$")
late = times >= 2 * AER_K
ax.plot(times[late], gridN[np.argmin(Mt[:, late], axis=0)], ".", color="white", ms=3,
        label="best fixed N for horizon t (ODE)")
ax.fill_between(t_steps, loN[ia], hiN[ia], color="tab:red", alpha=0.25, label="aER N(t), 10–90% of seeds")
ax.plot(t_steps, meanN[ia], color="tab:red", lw=2, label="aER N(t), seed mean")
ax.axhline(AER_N0, color="white", ls="--", lw=1, label=f"fixed N0 = {AER_N0}")
ax.set(xlabel="learning step t", ylabel="memory size N", ylim=(gridN[0], gridN[-1]),
       title=f"ER landscape at m = {AER_M} with aER's N(t) ({AER_SEEDS} seeds)")
ax.legend(fontsize=7, loc="upper left")

ax = axes[1]
loM, hiM = log_scale(M_er)
cs = ax.contourf(gridN, gridm, np.maximum(np.log10(np.maximum(M_er, 1e-12)), loM).T,
                 levels=np.linspace(loM, hiM, 20), cmap="viridis")
fig.colorbar(cs, ax=ax, label=r"$\log_{10} M$ (ER, fixed N)")
ax.plot(optN_er, gridm, "*", color="red", ms=8, mec="k", mew=0.4, label="best fixed N per m")
for i, m in enumerate(AER_MS):
    ax.annotate("", xy=(meanN[i, -1], m), xytext=(AER_N0, m),
                arrowprops=dict(arrowstyle="->", color="white", lw=1.4))
    ax.plot([loN[i, -1], hiN[i, -1]], [m, m], color="tab:red", lw=4, alpha=0.6, solid_capstyle="butt")
ax.plot(meanN.mean(axis=1), AER_MS, "o", color="tab:red", mec="white", ms=6, label="aER: time-averaged N")
ax.plot([], [], color="white", lw=1.4, label="aER: N0 → mean final N")
ax.plot([], [], color="tab:red", lw=4, alpha=0.6, label="aER: final N, 10–90% of seeds")
ax.set(xlabel="memory size N", ylabel="minibatch size m",
       title=f"aER from N0 = {AER_N0} on the ER map (γ = {DISCOUNT:g})")
ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)

ax = axes[2]
ax.semilogy(AER_MS, M_aer, "o", color="tab:red", ms=7, label="aER simulation")
ax.semilogy(AER_MS, M_drv, "x-", color="k", label="ODE driven by aER's mean live size n(t)")
ax.semilogy(AER_MS, M_fix, "s--", color="0.5", mfc="none", label=f"ODE, fixed N = {AER_N0}")
ax.set(xlabel="minibatch size m", ylabel="final M", title="aER: simulation vs driven ODE vs fixed-N ODE")
ax.legend(fontsize=8)
fig.tight_layout()
show(fig)

# %% [markdown]
# Fig. 3a/3b at $m = 10$: learning curves of aER (solid) and fixed $N = 100$ (dashed) from the experiment, with
# the ODE driven by aER's mean live size $n(t)$ (dotted) and the fixed-$N$ ODE (dash-dotted); then aER's memory size.
# aER mitigates the overshoot of the fixed small memory, and the driven ODE follows the aER simulation,
# while the fixed-$N$ ODE does not.

# %%
i_fix = er_points.index((AER_N0, AER_M, DISCOUNT))
fixed_curve = np.nanmean(d_er[i_fix], axis=0)
aer_curve = np.nanmean(d_aer[ia], axis=0)
th_drv = np.stack([np.asarray(ode_drv.dtheta1)[ia], np.asarray(ode_drv.dtheta2)[ia]], -1)
th_fix = np.stack([np.asarray(ode_drv.dtheta1)[nA + ia], np.asarray(ode_drv.dtheta2)[nA + ia]], -1)
show(plots.adaptive_learning_curves(
    t_steps, aer_curve, fixed_curve, times, th_drv, th_fix,
    title=f"Fig. 3a: aER from N0 = {AER_N0} vs fixed N = {AER_N0}, m = {AER_M}, α = {ALPHA:g} "
          f"(k = {AER_K}, n_old = {AER_NOLD}; {AER_SEEDS} seeds)"))
show(plots.adaptive_memory(
    t_steps, meanN[ia], loN[ia], hiN[ia], samples=list(cap_aer[ia, :5]),
    title=f"Fig. 3b: aER memory size from N0 = {AER_N0}, m = {AER_M} ({AER_SEEDS} seeds)"))
M_fixed_exp = float(Mx_er[i_fix])
drv_curve_err = float(np.abs(aer_curve[4::5] - th_drv[1:]).max())
fix_curve_err = float(np.abs(aer_curve[4::5] - th_fix[1:]).max())
print(f"m = {AER_M}: M_aER(sim) = {M_aer[ia]:.4f}, M_fixed(sim) = {M_fixed_exp:.4f}; "
      f"max_t |Δθ_aER − Δθ_ODE|: driven {drv_curve_err:.4f}, fixed-N {fix_curve_err:.4f}")
print(f"total time so far: {time.perf_counter() - T_START:.0f} s")

# %% [markdown]
# ## Checks
#
# The assertions test the science on the numbers above; each prints its numbers first. Margins were measured
# in both modes (default: 32 ER/aER and 8 pER seeds; paper scale: 128/32, 104 ER and 9 pER spot checks):
#
# * **ODE vs experiment.** Every spot check's seed-averaged $M$ is within `TOL_SPOT` = 3e-3 of the ODE map.
#   Measured maximum: 7.6e-4 (ER) and 7e-5 (pER) by default; 1.2e-3 (ER, at N = 700, m = 1, where the seed
#   standard error is 9e-4) and 2.9e-4 (pER) at paper scale. 3e-3 is twice the Fig. 2e white band and under 1 % of
#   the map's range of $M$ (0 to 0.43), far below the features tested next (at m = 10, M drops by 0.12 from
#   N = 100 to the optimum), so a simulator or ODE that moved the map would fail it.
# * **Shape of the maps** (the paper: non-monotone for $m < 20$, monotone for $m > 20$; $N^* \approx 250$ at $m = 10$).
#   $N^*(m = 10) = 250$ (strictly inside the grid; asserted within [150, 350]). At $m$ = 5 and 10, $M(N)$ rises
#   somewhere between neighbouring grid points by more than `MONOTONE_TOL` = 1e-4, and for ER the global optimum
#   is interior: $M(N_{max}) - \min_N M$ = 0.073 and 0.011, asserted > 10 × `MONOTONE_TOL`. At $m$ = 40 and 50 the
#   optimum is the largest $N$: $M(N_{max}) - \min_N M \le$ 3e-11 (asserted ≤ 1e-4; stars at slightly smaller $N$
#   there are ties at the solver's precision) and no step rises by more than 1e-4. The same for pER, whose
#   global optimum at m = 10 is already at large N (it is non-monotone there, not interior). Here ER turns
#   strictly monotone from m = 30 on (both scales) and pER from m = 20 (default grid) or 19 (paper grid), against
#   the paper's ≈ 20 and ≈ 15.
# * **Sign of ER − pER** (Fig. 2e; appendix Fig. 2DExplain's N = 100 vs large N at m = 10): pER is worse at
#   N = 100, m = 10 (ΔM = −0.0155 ODE, −0.0154/−0.0156 experiment) and better at N = 500, m = 10 (+0.0183 ODE,
#   +0.0181 experiment), beyond the white band ±1.5e-3, in the ODE *and* the experiments; and the pER-worse cells
#   lie at smaller N and smaller m than the grid's average (mean N ≈ 75 vs 367/505, mean m ≈ 17 vs 19/26).
# * **aER** (Fig. 3): from $N_0 = 100$ at $m = 10$ aER grows its memory (mean final N ≈ 390) and beats fixed
#   $N = 100$ (M = 0.031–0.033 vs 0.123). For every $m$ the ODE driven by aER's mean live size $n(t)$ lands closer to the
#   simulation's final M than the fixed-$N_0$ ODE (closest call: 4× closer at m = 1, paper scale; 7× at m = 5);
#   at $m = 10$ it is asserted at least 4× closer (measured ≈ 200×).

# %%
TOL_SPOT = 3e-3
print(f"[spot checks] max |M_exp − M_ode|: ER {spot_err_er:.2e} (over {len(er_rows)} points), "
      f"pER {spot_err_per:.2e} (over {len(per_rows)}); tolerance {TOL_SPOT:g}")
assert not div_er.any() and not div_per.any() and not div_aer.any(), "an experiment run diverged"
assert spot_err_er < TOL_SPOT, spot_err_er
assert spot_err_per < TOL_SPOT, spot_err_per

for name, M_map in (("ER", M_er), ("pER", M_per)):
    gap = M_map[-1] - M_map.min(axis=0)  # M(N_max) − min_N M per m
    strict = nonmonotone(M_map, strict=True)
    thr = monotone_threshold(gridm, M_map, strict=True)
    print(f"[{name} map] N*: "
          + ", ".join(f"m={m}: {int(optimal_memory(gridN, M_map[:, im[m]]))}" for m in (5, 10, 40, 50))
          + "; M(N_max) − min M: " + ", ".join(f"m={m}: {gap[im[m]]:.2e}" for m in (5, 10, 40, 50))
          + f"; strictly decreasing in N for all m ≥ {thr['threshold']:g} (non-monotone m: {thr['nonmonotone_m']})")
    for m in (5, 10):
        assert strict[im[m]], (name, m)  # some step between neighbouring N rises by > MONOTONE_TOL
    for m in (5, 10) if name == "ER" else (5,):  # the global optimum is interior, well above the tolerance
        assert gap[im[m]] > 10 * MONOTONE_TOL, (name, m, gap[im[m]])
    for m in (40, 50):
        assert gap[im[m]] <= MONOTONE_TOL and not strict[im[m]], (name, m, gap[im[m]])
n10 = int(optN_er[im[10]])
print(f"[ER map] optimal N at m = 10: {n10} (paper ≈ 250); grid N from {gridN[0]} to {gridN[-1]}")
assert gridN[0] < n10 < gridN[-1] and 150 <= n10 <= 350, n10

for N, m, sign in ((100, 10, -1), (500, 10, +1)):
    d_ode = float(dM[iN[N], im[m]])
    d_exp = dM_exp[(N, m)]
    print(f"[ER − pER] N = {N}, m = {m}: ODE {d_ode:+.4f}, experiment {d_exp:+.4f} "
          f"(expected sign {sign:+d}, beyond ±{WHITE_THRESHOLD:g})")
    assert sign * d_ode > WHITE_THRESHOLD and sign * d_exp > WHITE_THRESHOLD, (N, m, d_ode, d_exp)
print(f"[ER − pER] pER-worse cells: mean N {NN[worse].mean():.0f} < grid mean {NN.mean():.0f}, "
      f"mean m {MM[worse].mean():.1f} < grid mean {MM.mean():.1f}")
assert worse.any() and NN[worse].mean() < NN.mean() and MM[worse].mean() < MM.mean()

err_drv = np.abs(M_drv - M_aer)
err_fix = np.abs(M_fix - M_aer)
print(f"[aER] m = {AER_M}: mean N(T) = {meanN[ia, -1]:.0f} (N0 = {AER_N0}); M_aER = {M_aer[ia]:.4f} "
      f"vs M_fixed(sim) = {M_fixed_exp:.4f}")
print("[aER] |M_ODE − M_aER(sim)| per m, driven vs fixed N0: "
      + ", ".join(f"m={m}: {a:.1e} vs {b:.1e}" for m, a, b in zip(AER_MS, err_drv, err_fix)))
assert meanN[ia, -1] > AER_N0 and M_aer[ia] < M_fixed_exp
assert np.all(err_drv < err_fix), (err_drv, err_fix)
assert err_drv[ia] < 0.25 * err_fix[ia], (err_drv[ia], err_fix[ia])
print(f"all checks passed; total time {time.perf_counter() - T_START:.0f} s")
