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
# # Adaptive replay (aER) with DQN on CartPole, MountainCar and Acrobot
#
# Liu & Zou, *The Effects of Memory Replay in Reinforcement Learning* (arXiv:1710.06574),
# end with a DQN experiment (their Fig. 4): on three classic-control games they compare
# replay memories of fixed size with **aER**, their algorithm that grows and shrinks the
# memory while the agent learns. This notebook runs a **reduced version** of that comparison
# with `jaxreplay` and shows
#
# 1. learning curves per game, fixed sizes against aER (seed mean, with a 95% band from 6 seeds on);
# 2. aER's memory size N(t) per game (seed mean, band, a few single seeds);
# 3. the paper's headline statistic, the share of aER seeds that beat the averaged static
#    memory, with a Clopper–Pearson interval next to the paper's number, and a table of
#    interquartile-mean (IQM) scores;
# 4. how to run the same study at the paper's scale, 100 seeds per setting, on a GPU with
#    the sweep engine (one compilation per program, chunking, sharding, resuming).
#
# **Two modes, one switch.** With `PAPER_SCALE = False` (the committed default) every run is
# shortened to 10,000–20,000 environment steps, memory sizes shrink with the run, and
# there are 4 seeds per setting: the whole notebook runs on a 2-core CPU in about three
# minutes, most of it XLA compiling the twelve DQN programs (with a warm compilation cache,
# under two). **Numbers from this mode are not the
# paper's result**: 4 seeds give wide intervals, and runs this short are mostly the start of
# learning (MountainCar's agent never reaches the flag in 10,000 steps). With
# `PAPER_SCALE = True` the notebook runs the study at the paper's scale: 100 seeds,
# paper-length runs (300,000 steps for MountainCar, 200,000 for Acrobot and for the CartPole
# configuration used here, see below) and every memory size of the figure. That is 1,200
# runs and 2.9×10⁸ environment steps: meant for a GPU, where each of the six sweeps is one
# resumable call (the output directory `results/03_adaptive_replay_dqn/` keeps finished
# chunks, so a killed run continues where it stopped).
#
# The library does the same study per game from the command line,
# `jaxreplay reproduce dqn --env ENV --out DIR` (`jaxreplay.paper.reproduce.dqn`); this notebook
# uses its public pieces (settings, scores, statistic) so that each step is visible.
#
# Paper: Liu & Zou, arXiv:1710.06574 (Section "Adaptive Memory Size Algorithm",
# Algorithm 2, Fig. 4); its misprints and ambiguities, and our readings: `docs/paper_readings.md`.

# %% [markdown]
# ## The algorithm and the claim
#
# **aER (Algorithm 2).** The memory is a FIFO of capacity N, starting at N₀. Every k
# environment steps, once the memory is full, the agent sums the absolute TD errors of the
# n_old *oldest* transitions in it under its current parameters, |δ_old|′, and compares
# with the sum |δ_old| it stored at the previous check:
#
# * |δ_old|′ > |δ_old| (the old data fit *worse* than k steps ago: the agent may be
#   overfitting recent experience, "overshooting"), or N = k: **enlarge**, N ← N + k, and
#   store |δ_old| ← |δ_old|′;
# * otherwise (the old data fit better, so they teach little): **shrink**, N ← N − k,
#   drop the k oldest transitions, and store |δ_old| recomputed on the transitions that will
#   be the oldest at the next check (`docs/paper_readings.md` §9: the pseudo-code does not say which N that sum
#   uses; `jaxreplay.adaptive` implements both readings, default `"new"`).
#
# In the DQN experiments k = 20, n_old = N₀/2, and the sums are estimated from a random
# sample of 50 (CartPole) or 1,000 (MountainCar, Acrobot) of those old transitions.
# In `jaxreplay` the capacity N is a *traced* value: a fixed memory of any size and aER from
# any N₀ are the same compiled program, so per game there are two programs (fixed, aER)
# whatever the number of sizes and seeds.
#
# **The claim (Section "Performance on OpenAI Games with DQN").** Minibatch 50, one hidden
# layer for CartPole and two for the others, γ = 0.9 / 0.99 / 0.99, step size
# 2×10⁻⁵ / 6×10⁻⁴ / 10⁻³, curves averaged over 100 games. aER "outperforms the averaged
# static memory strategy" in
#
# | game | fixed sizes | aER from | paper: aER seeds beating the static average |
# | --- | --- | --- | --- |
# | CartPole | 100, 40,000 | 100 | 71% |
# | MountainCar | 20,000, 50,000, 150,000 | 20,000 / 150,000 | 62% / 86% |
# | Acrobot | 25,000, 100,000 | 25,000 / 100,000 | 100% / 95% |
#
# The paper does not define "outperforms" further. We use the library's definition
# (`jaxreplay.paper.reproduce.dqn`): a run's **score** is the mean over its segments of the mean
# return of the training episodes completed in each segment (the area under its learning
# curve), and an aER seed wins if its score exceeds the mean score of every static run
# (all fixed sizes × seeds) of that game.

# %%
# One JAX CPU device per core, before anything starts JAX (the `jaxreplay` command does the same): on a CPU
# the sweeps below then shard over every core, with the same results.
from jaxreplay.engine.batch import use_cpu_cores

use_cpu_cores()
PAPER_SCALE = False  # True = 100 seeds, paper-length runs, all sizes: meant for a GPU

# %% [markdown]
# ## Settings
#
# Everything below derives from `PAPER_SCALE`. The paper's settings come from
# `jaxreplay.paper.reproduce.dqn.fixed_vs_adaptive(env, quick=False, tuned=...)` (which calls
# `jaxreplay.paper.reproduce.settings.paper_setting`; what the paper leaves open, such as the optimizer
# (Adam), the width (64), the target network (hard copy every 500 steps) and the ε schedule,
# is chosen and documented there).
#
# **CartPole: the tuned configuration.** Under the paper's own CartPole setting (γ = 0.9,
# step size 2×10⁻⁵, one hidden layer of 64, Adam) our DQN does not learn CartPole: with a
# fixed memory of 40,000, four seeds end the paper's 40,000 steps with greedy returns of
# 10–21 (IQM 10.4; a random policy averages about 22), measured with
# `jaxreplay dqn --env CartPole-v1 --memory-size 40000 --seeds 4` (the README and
# `jaxreplay reproduce dqn --env CartPole-v1` report the same). A comparison of memory
# sizes between agents that do not learn says nothing about replay, so for CartPole this notebook uses `tuned=True`: CleanRL's DQN
# defaults (MLP 120-84, Adam 2.5×10⁻⁴, γ = 0.99, batch 128, a gradient step every 10
# environment steps), which learns CartPole, with the paper's memory sizes and aER's k = 20,
# n_old = N₀/2 and subsample of 50. MountainCar and Acrobot use the paper's settings.
# Set `CARTPOLE_TUNED = False` to run the paper's CartPole setting instead.
#
# **Small mode.** Each run is cut to `SMALL_STEPS[env]` steps in 20 segments (one point of
# the learning curve per segment). Memory sizes shrink by the same factor relative to the
# paper's run length (40,000 / 300,000 / 200,000 steps), so that a memory keeps the same
# share of the run as in the paper (CartPole's "40,000: nothing is discarded" stays
# "nothing is discarded"), and so do `learning_starts` and the ε ramp; k, the minibatch, the
# network, the step sizes and the aER subsample are the paper's. The greedy evaluation
# episodes that `paper_setting` adds at each segment end are switched off in small mode
# (the score uses the training returns; evaluation would cost more than the training).

# %%
import dataclasses
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor

import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display
from scipy import stats

from jaxreplay.engine import results, sweep
from jaxreplay.experiments import dqn
from jaxreplay.paper.reproduce import dqn as rdqn
from jaxreplay.paper.reproduce import settings as paper_settings

pd.set_option("display.width", 200)
T0 = time.perf_counter()
GAMES = paper_settings.ENVS  # the paper's three games
SEEDS = 100 if PAPER_SCALE else 4  # seeds per setting (the paper: 100 games per curve)
CARTPOLE_TUNED = True  # CartPole: CleanRL's configuration, which learns (False: the paper's γ = 0.9, α = 2e-5)
SMALL_STEPS = {"CartPole-v1": 20_000, "MountainCar-v0": 10_000, "Acrobot-v1": 16_000}  # per run, small mode
SMALL_SEGMENTS = 20
SEED = 0  # base seed of every sweep: run keys are fold_in(key(SEED), seed index)

if PAPER_SCALE:  # kept, so that a killed run resumes with the same call
    OUT = pathlib.Path("results/03_adaptive_replay_dqn").resolve()
else:
    OUT = pathlib.Path(tempfile.mkdtemp(prefix="jaxreplay-nb03-"))
OUT.mkdir(parents=True, exist_ok=True)
# A persistent compilation cache, unless one is configured (e.g. by JAX_COMPILATION_CACHE_DIR):
# within a session sweep.run keeps its compiled programs anyway; with a cache directory that
# outlives the session, rerunning the notebook also skips XLA's ~10 s per program.
if not jax.config.jax_compilation_cache_dir:
    jax.config.update("jax_compilation_cache_dir", str(OUT / "jax_cache"))
print(f"PAPER_SCALE = {PAPER_SCALE}: {SEEDS} seeds per setting; output in {OUT}")
print(f"JAX {jax.__version__}, devices: {jax.devices()}")


# %% [markdown]
# One helper builds the two sweeps of a game, `Sweep("dqn", seeds, seed, setup, fixed,
# points)`: the static `setup` (a `dqn.Setup`), the hyperparameters shared
# by every run (`fixed`) and one point per memory size (memory size, `learning_starts`, and
# aER's n_old = N₀/2). At paper scale it is `rdqn.fixed_vs_adaptive(env, quick=False, tuned=...)`
# unchanged; in small mode `shrink` scales time and memory as described above.

# %%
def shrink(env, steps, fixed_setup, adaptive_setup, common, fixed_points, adaptive_points):
    """Small mode: the same study with runs of `steps` steps; memory, ε ramp and learning start scaled with it."""
    time_scale = steps / fixed_setup.total_steps  # schedules: relative to this configuration's run
    size_scale = steps / paper_settings.PAPER_TOTAL_STEPS[env]  # memories: relative to the paper's run length

    def size(n):
        return max(1, round(n * size_scale))

    def schedule(n):
        return max(1, round(n * time_scale))

    def point(p):
        N = size(p["memory_size"])
        return {"memory_size": N, "learning_starts": schedule(p["learning_starts"]),
                "adaptive_num_old": max(1, N // 2)}

    fixed_points = [point(p) for p in fixed_points]
    adaptive_points = [point(p) for p in adaptive_points]
    capacity = max([size(fixed_setup.max_capacity)] + [p["memory_size"] for p in fixed_points + adaptive_points])
    common = dict(common, epsilon_decay_steps=schedule(common["epsilon_decay_steps"]))

    def small(setup):
        return dataclasses.replace(setup, total_steps=steps, steps_per_segment=steps // SMALL_SEGMENTS,
                                   max_capacity=capacity, eval_episodes=0)

    return small(fixed_setup), small(adaptive_setup), common, fixed_points, adaptive_points


def game_sweeps(env, seeds=SEEDS, paper_scale=PAPER_SCALE):
    """{"fixed": Sweep, "adaptive": Sweep} of one game."""
    tuned = env == "CartPole-v1" and CARTPOLE_TUNED
    parts = rdqn.fixed_vs_adaptive(env, quick=False, tuned=tuned)
    if not paper_scale:
        parts = shrink(env, SMALL_STEPS[env], *parts)
    fixed_setup, adaptive_setup, common, fixed_points, adaptive_points = parts
    return {label: sweep.Sweep("dqn", seeds=seeds, seed=SEED, setup=setup, fixed=common, points=points)
            for label, setup, points in (("fixed", fixed_setup, fixed_points),
                                         ("adaptive", adaptive_setup, adaptive_points))}


# The paper's labels of each setting, per game (fixed sizes; aER initial sizes).
PAPER_SIZES = {env: {"fixed": paper_settings.PAPER_MEMORY_SIZES[env], "adaptive": rdqn.ADAPTIVE_FROM[env]} for env in GAMES}
SWEEPS = {env: game_sweeps(env) for env in GAMES}

rows = []
for env, pair in SWEEPS.items():
    for label, sw in pair.items():
        setup, hp = sw.make_setup(), sw.hyperparameters()
        for i, paper_N in enumerate(PAPER_SIZES[env][label]):
            rows.append({"game": env, "setting": ("aER from " if label == "adaptive" else "fixed ") + str(paper_N),
                         "memory size here": int(sw.points[i]["memory_size"]), "steps": setup.total_steps,
                         "segments": dqn.num_segments(setup), "max capacity": setup.max_capacity,
                         "γ": float(hp.discount[0]), "step size": float(hp.step_size[0]),
                         "batch": setup.batch_size, "hidden": setup.hidden_sizes,
                         "learning starts": int(sw.points[i]["learning_starts"]),
                         "ε ramp": int(hp.epsilon_decay_steps[0]), "seeds": sw.seeds})
display(pd.DataFrame(rows).set_index(["game", "setting"]))

# %% [markdown]
# ## Running the six sweeps
#
# `sweep.run(sweep, out_dir)` flattens configurations × seeds into one run axis, compiles
# the experiment's segment once for the whole sweep (twice in fact: the first segment,
# which also initialises the runs, and the others), runs chunks that fit the device memory,
# and saves each finished chunk in `out_dir` (so a killed sweep resumes where it stopped).
# The returned `SweepResult` holds an `xarray.Dataset` labeled by `config` (one per point)
# and `seed`, with one record per segment (`train_return`, `capacity`, `capacity_mean`,
# `td_loss`, …) and per-run summaries (`diverged`, `final_capacity`, aER's counts of checks,
# grows and shrinks). The compiled programs are kept for the session (per experiment,
# setup and devices), so rerunning a sweep, or another grid over the same setup, compiles
# nothing.
#
# Two details that change no result (a run's result depends only on its seed and
# hyperparameters, never on how runs are batched): the CartPole fixed-memory sweep is split
# into two chunks (`chunk_size`) so that the resume demonstration of the last section has a
# chunk to delete; and in small mode the sweeps run **two at a time in threads**. On a CPU,
# XLA compiles and runs these small programs mostly on one core, so two sweeps side by side
# use both cores of this machine (compiling twelve programs, two per sweep, is most of the
# notebook's time). At paper scale they run one after another, each using the whole
# accelerator.

# %%
DEMO = ("CartPole-v1", "fixed")  # the sweep the resume demonstration uses


def sweep_dir(env, label):
    return OUT / env / label


def chunk_size(env, label):
    return max(1, SWEEPS[env][label].num_runs // 2) if (env, label) == DEMO else None


def run_sweep(job):
    env, label = job
    t = time.perf_counter()
    result = sweep.run(SWEEPS[env][label], sweep_dir(env, label), chunk_size=chunk_size(env, label),
                       progress=PAPER_SCALE)
    return job, result, time.perf_counter() - t


def work(job):  # a rough cost, to start the longest sweeps first: gradient steps + aER's TD-error evaluations
    sw = SWEEPS[job[0]][job[1]]
    setup = sw.make_setup()
    slots = setup.batch_size * setup.max_updates_per_unit / setup.train_frequency  # update slots, masked or not
    per_step = slots + (3 * setup.subsample_size / 20 if setup.adaptive else 0)
    return sw.num_runs * setup.total_steps * per_step


JOBS = sorted(((env, label) for env in GAMES for label in ("fixed", "adaptive")), key=work, reverse=True)
DATA, STATS = {}, {}
t_sweeps = time.perf_counter()
with ThreadPoolExecutor(max_workers=1 if PAPER_SCALE else 2) as pool:
    for (env, label), result, seconds in pool.map(run_sweep, JOBS):
        DATA[env, label], STATS[env, label] = result.dataset, result.stats
        print(f"{env:15s} {label:8s} {seconds:6.1f} s: {result.stats.describe()}")
DATA = {(env, label): DATA[env, label] for env in GAMES for label in ("fixed", "adaptive")}  # in game order
print(f"all sweeps: {time.perf_counter() - t_sweeps:.0f} s")

# %% [markdown]
# ## Learning curves
#
# Training-episode return per segment (the mean return of the episodes that ended in it),
# seed mean with a 95% Student-t band over seeds (`results.mean_ci`) where the seeds are enough for one (6 or
# more, `results.min_seeds_for_interval`: none at small mode's 4, where a "95%" band could not cover 95%);
# fixed memories dashed, aER solid, one colour per (initial) size. Legends give the paper's
# size and, in small mode, the size actually used.

# %%
def setting_label(env, label, i):
    paper_N = PAPER_SIZES[env][label][i]
    used = int(DATA[env, label].memory_size.values[i])
    name = ("aER from " if label == "adaptive" else "fixed ") + f"{paper_N:,}"
    return name if used == paper_N else f"{name} (here {used:,})"


def size_color(env, paper_N):
    sizes = sorted(set(PAPER_SIZES[env]["fixed"]) | set(PAPER_SIZES[env]["adaptive"]))
    return f"C{sizes.index(paper_N)}"


fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
for ax, env in zip(axes, GAMES):
    for label, style in (("fixed", "--"), ("adaptive", "-")):
        ds = DATA[env, label]
        band = results.mean_ci(ds.train_return)  # [config, segment]
        enough = band["count"].values >= results.min_seeds_for_interval()
        steps = ds.segment.values
        for i, paper_N in enumerate(PAPER_SIZES[env][label]):
            color = size_color(env, paper_N)
            ax.plot(steps, band["mean"][i], style, color=color, label=setting_label(env, label, i))
            low, high = (np.where(enough[i], band[k][i], np.nan) for k in ("low", "high"))
            ax.fill_between(steps, low, high, color=color, alpha=0.12)
    ax.set_title(env)
    ax.set_xlabel("environment steps")
    ax.legend(fontsize=8)
BANDS = SEEDS >= results.min_seeds_for_interval()
axes[0].set_ylabel("training-episode return\n" + ("(seed mean, 95% t interval)" if BANDS else "(seed mean; too few seeds for a CI)"))
fig.suptitle(f"Fixed memory vs aER ({SEEDS} seeds{'' if PAPER_SCALE else ', small mode'})")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## aER's memory size N(t)
#
# The capacity at each segment end (and N₀ at step 0): seed mean with a 95% Student-t band
# of the mean (6 or more seeds), and three single seeds as thin lines. The dotted line is N₀. The paper
# reports that aER grows CartPole's memory from 100, grows MountainCar's from 20,000 and
# shrinks it from 150,000, and shrinks Acrobot's from both starts. Algorithm 2 only acts
# once the memory is full, so N stays at N₀ until step N₀.

# %%
fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
for ax, env in zip(axes, GAMES):
    ds = DATA[env, "adaptive"]
    steps = np.concatenate([[0], ds.segment.values])
    for i in range(ds.sizes["config"]):
        N0 = int(ds.memory_size.values[i])
        cap = ds.capacity.isel(config=i).astype(np.float64)  # [seed, segment]
        band = results.mean_ci(cap)
        enough = band["count"].values >= results.min_seeds_for_interval()

        def with_start(x, N0=N0):
            return np.concatenate([[N0], np.asarray(x)])

        line, = ax.plot(steps, with_start(band["mean"]), lw=2, color=size_color(env, PAPER_SIZES[env]["adaptive"][i]),
                        label=setting_label(env, "adaptive", i))
        low, high = (np.where(enough, band[k], np.nan) for k in ("low", "high"))
        ax.fill_between(steps, with_start(low), with_start(high), color=line.get_color(), alpha=0.2)
        for s in range(min(3, ds.sizes["seed"])):
            ax.plot(steps, with_start(cap.isel(seed=s)), color=line.get_color(), lw=0.6, alpha=0.6)
        ax.axhline(N0, color=line.get_color(), ls=":", lw=1)
    ax.set_title(env)
    ax.set_xlabel("environment steps")
axes[0].set_ylabel("aER memory size N(t)\n" + ("(mean, 95% t interval" if BANDS else "(mean, too few seeds for a CI") + "; thin: single seeds)")
for ax in axes:
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The headline statistic: how often does aER beat the averaged static memory?
#
# For each game and initial size: the share of aER seeds whose score exceeds the mean score
# of all static runs of that game (`rdqn.beats_static_average`), with its exact
# (Clopper–Pearson) 95% interval, next to the paper's percentage. With 4 seeds an interval
# spans most of [0, 100%]: the small mode can show that the pipeline works, not whether the
# claim holds. The table gives each setting's IQM score with its 95% interval over seeds where they are
# enough for one (6 or more: `results.seed_interval`; none in small mode).

# %%
SCORES = {key: rdqn.run_scores(ds) for key, ds in DATA.items()}  # [config, seed]
HEADLINE = []
for env in GAMES:
    static = SCORES[env, "fixed"].ravel()
    for i, N0 in enumerate(PAPER_SIZES[env]["adaptive"]):
        p = rdqn.beats_static_average(SCORES[env, "adaptive"][i], static)
        HEADLINE.append({"game": env, "aER from": N0, "paper %": rdqn.PAPER_PERCENT[env][N0], **p})
headline = pd.DataFrame(HEADLINE)
display(headline.round(2))

fig, ax = plt.subplots(figsize=(8, 4))
x = np.arange(len(headline))
ours = headline["percent"].to_numpy()
ax.errorbar(x - 0.08, ours, yerr=[ours - headline["low"], headline["high"] - ours], fmt="o", capsize=5,
            label=f"ours ({SEEDS} seeds, Clopper–Pearson 95%)")
ax.plot(x + 0.08, headline["paper %"], "kx", ms=9, mew=2, label="paper (100 seeds)")
for xi, (wins, n, pct) in enumerate(zip(headline["wins"], headline["n"], ours)):
    ax.annotate(f"{wins}/{n}", (xi - 0.08, pct), xytext=(-8, 0), textcoords="offset points", ha="right", va="center")
ax.axhline(50, color="grey", lw=0.8, ls=":")
ax.set_xticks(x, [f"{g.split('-')[0]}\naER from {n:,}" for g, n in zip(headline["game"], headline["aER from"])])
ax.set_ylim(-5, 105)
ax.set_xlim(-0.7, len(headline) - 0.4)
ax.set_ylabel("aER seeds beating the static average (%)")
ax.set_title("Share of aER runs that beat the averaged static memory")
ax.legend(loc="lower right", fontsize=8)
fig.tight_layout()
plt.show()

iqm_rows = []
for (env, label), score in SCORES.items():
    ds = DATA[env, label]
    for i in range(ds.sizes["config"]):
        ci = results.seed_interval(score[i], "iqm")  # no bounds below 6 seeds (None, with the reason)
        iqm_rows.append({"game": env, "setting": setting_label(env, label, i),
                         "IQM score": ci["estimate"], "95% CI low": ci["low"], "95% CI high": ci["high"],
                         "final N (mean)": float(ds.final_capacity.values[i].mean()),
                         "diverged": int(ds.diverged.values[i].sum())})
IQM = pd.DataFrame(iqm_rows).set_index(["game", "setting"])
display(IQM.round(1))

# %% [markdown]
# **Reading the results.** The cell below says, from this run's own numbers, where each aER
# start left the memory and how many of its seeds beat the static average. (A reading typed
# into this notebook when it was written went stale as the code changed; this one cannot.)

# %%
for env in GAMES:
    ds = DATA[env, "adaptive"]
    for i, N0 in enumerate(PAPER_SIZES[env]["adaptive"]):
        start, final = int(ds.memory_size.values[i]), ds.final_capacity.values[i].astype(int)
        up, down = int((final > start).sum()), int((final < start).sum())
        way = {(True, False): "grew", (False, True): "shrank", (False, False): "ended at the start"}.get(
            (up > 0, down > 0), f"{up} seeds grew, {down} shrank")
        row = next(r for r in HEADLINE if r["game"] == env and r["aER from"] == N0)
        print(f"{env}, aER from {start:,} (paper {N0:,}): final memory {final.min():,} to {final.max():,} over "
              f"{final.size} seeds ({way}); {row['wins']}/{row['n']} seeds beat the static average "
              f"(paper {row['paper %']}%)")

# %% [markdown]
# Three things to keep in mind when reading these lines:
#
# * **MountainCar** at the small mode's 10,000 steps is far too short for DQN to find the
#   flag: nearly every episode times out at −200, the scores tie, and an aER seed "wins" only
#   if it happens to reach the flag once.
# * **aER's direction** follows its check: it shrinks when the oldest transitions' TD errors
#   fell since the previous check and grows otherwise (and must grow while the memory is below
#   2k, twice its step: a small start is pushed up), so it tracks how the fit to old
#   transitions changes, not the memory size that would score best (the [DQN replay
#   study](../docs/study.md) tests that directly). The paper remarks that shrinking is
#   common while TD errors fall, and proposes shrinking only if |δ_old|′ < |δ_old| − ε:
#   the `adaptive_tolerance` hyperparameter.
# * With 4 seeds every Clopper–Pearson interval is wider than 60 percentage points, so none
#   of this confirms or refutes the paper's percentages; the paper-scale run does.

# %% [markdown]
# ## Scaling to 100+ seeds on a GPU
#
# The study above is six sweeps (two per game). At the paper's scale they are the same six
# `Sweep` objects with `seeds=100` and the paper's settings; nothing else changes. What
# `sweep.run` does with them:
#
# * **One compilation over seeds × traced hyperparameters.** A run's memory size, aER's N₀
#   and n_old, the step size, γ, the ε schedule, `learning_starts` … are traced values, so
#   all configurations × seeds of a sweep are one flat run axis through one `jit(vmap(...))`
#   program. Only the static `setup` (network shape, `max_capacity`, aER on/off, segment
#   length) makes a new program; hence fixed and aER are two sweeps per game.
# * **Chunking to device memory.** Before compiling, `sweep.estimate_bytes_per_run` computes
#   a run's footprint from shapes alone (replay storage at `max_capacity` dominates); the
#   run axis is cut into chunks that fit a fraction (`memory_fraction=0.5`) of the free
#   device memory, all chunks share the one compilation (the last one is padded), and a
#   sweep that cannot fit is refused before anything is allocated.
# * **Sharding over devices.** Each chunk's run axis is sharded over all local devices with a
#   one-axis `jax.sharding.Mesh` and `NamedSharding`: with 8 GPUs each holds 1/8 of the runs.
#   A run's key is `fold_in(key(seed), seed_index)`, so results do not depend on the chunk
#   size, device count or process count (bit-identical; tested in the library).
# * **Resumable output directory.** `out_dir` holds `sweep.json` (config, fingerprint,
#   versions), `chunks/*.npz` (each written atomically when its chunk finishes),
#   `results.nc` (NetCDF, read back with `sweep.load`) and `summary.json`. Rerunning the same
#   sweep computes only the missing runs; a different sweep in the same directory is refused.
# * **Several hosts.** Start one process per host with the same command after
#   `jax.distributed.initialize()` (it reads SLURM's and Cloud TPU's environment); process p
#   runs chunks p, p + P, …, and process 0 writes `results.nc` to the shared file system, e.g.
#
#   ```bash
#   srun --ntasks-per-node=1 python -c "import jax; jax.distributed.initialize(); \
#       from jaxreplay.engine import sweep; sweep.run(sweep.Sweep.from_toml('acrobot_adaptive.toml'), 'out/acrobot_adaptive')"
#   ```
#
# From the command line, per game (the library's version of this notebook's study, with its
# own figures and `report.md`), or for any sweep written as TOML:
#
# ```bash
# jaxreplay reproduce dqn --env Acrobot-v1 --out results/acrobot            # 100 seeds, paper-length runs
# jaxreplay reproduce dqn --env CartPole-v1 --tuned --out results/cartpole  # the CartPole configuration used here
# jaxreplay sweep acrobot_adaptive.toml --out results/acrobot_adaptive      # a sweep from its TOML config
# ```
#
# The next cell builds the paper-scale sweeps (nothing is run) and prints what a GPU would
# be asked to do: runs, steps, the per-run memory estimate and how many runs one 80 GB GPU
# holds per chunk at `memory_fraction=0.5`.

# %%
PAPER_SWEEPS = {env: game_sweeps(env, seeds=100, paper_scale=True) for env in GAMES}
GPU_BUDGET = int(0.5 * 80e9)  # half of an 80 GB accelerator, sweep.run's default fraction
rows = []
for env, pair in PAPER_SWEEPS.items():
    for label, sw in pair.items():
        setup = sw.make_setup()
        per_run = sweep.estimate_bytes_per_run(sw)
        rows.append({"game": env, "sweep": label, "configs": sw.num_configs, "runs": sw.num_runs,
                     "steps per run": setup.total_steps, "env steps (total)": sw.num_runs * setup.total_steps,
                     "max capacity": setup.max_capacity, "MiB per run": per_run / 2**20,
                     "runs per chunk (80 GB GPU)": min(sw.num_runs, GPU_BUDGET // per_run)})
paper_plan = pd.DataFrame(rows).set_index(["game", "sweep"])
display(paper_plan.round(1))
print(f"paper scale: {paper_plan['runs'].sum()} runs, {paper_plan['env steps (total)'].sum():.3g} environment steps")

# %% [markdown]
# A sweep is also a TOML file: `Sweep.to_dict()` is its canonical config and
# `Sweep.fingerprint()` its hash (equal fingerprints, equal results). Here is the paper-scale
# Acrobot aER sweep as TOML (`Sweep.to_toml()`), read back with `Sweep.from_dict(tomllib.loads(...))`:

# %%
paper_acrobot = PAPER_SWEEPS["Acrobot-v1"]["adaptive"]
ACROBOT_TOML = paper_acrobot.to_toml()
print(ACROBOT_TOML)
from_toml = sweep.Sweep.from_dict(tomllib.loads(ACROBOT_TOML))
print("same sweep as the Python object:", from_toml.fingerprint() == paper_acrobot.fingerprint(),
      f"({from_toml.num_runs} runs)")

# %% [markdown]
# **What this machine can run for real: resuming.** The small sweeps above were written to
# `OUT`. Three things happen next, all real:
#
# 1. the CartPole fixed-memory sweep is written as TOML and run with the command line,
#    `jaxreplay sweep CONFIG.toml --out DIR`, into the directory the notebook already filled:
#    the config has the same fingerprint, so the command resumes and finds nothing to do;
# 2. `sweep.run` is called again in Python on the same directory: also a no-op
#    (`runs_computed == 0`, nothing compiled);
# 3. one finished chunk file is deleted (as if the sweep had been killed before writing it)
#    and `sweep.run` is called again: it recomputes exactly those runs, and `sweep.load`
#    returns results identical, bit for bit, to the first run's.

# %%
demo = SWEEPS[DEMO[0]][DEMO[1]]
demo_dir = sweep_dir(*DEMO)
first = sweep.load(demo_dir)

config_path = OUT / "cartpole_fixed.toml"
config_path.write_text(demo.to_toml())
t = time.perf_counter()
# JAX_PLATFORMS=cpu: the command finds nothing to compute, so it need not claim an accelerator's memory.
cli = subprocess.run([sys.executable, "-m", "jaxreplay", "sweep", str(config_path), "--out", str(demo_dir), "--quiet"],
                     capture_output=True, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
print(f"$ jaxreplay sweep {config_path.name} --out {demo_dir}")
print(f"({time.perf_counter() - t:.1f} s, exit code {cli.returncode})")
print(cli.stdout.strip() or cli.stderr.strip())
CLI_SUMMARY = json.loads((demo_dir / "summary.json").read_text())

again = sweep.run(demo, demo_dir, chunk_size=chunk_size(*DEMO), progress=False)
print("sweep.run again:", again.stats.describe())

chunk_files = sorted((demo_dir / "chunks").glob("runs-*.npz"))
print("chunks on disk:", [p.name for p in chunk_files])
chunk_files[-1].unlink()  # as if the sweep had been killed before this chunk was saved
t = time.perf_counter()
resumed = sweep.run(demo, demo_dir, chunk_size=chunk_size(*DEMO), progress=False)
print(f"after deleting {chunk_files[-1].name} ({time.perf_counter() - t:.1f} s):", resumed.stats.describe())
reloaded = sweep.load(demo_dir)
IDENTICAL = {name: np.array_equal(first[name].values, reloaded[name].values, equal_nan=True)
             for name in first.data_vars}
SAME_DATASET = first.identical(reloaded)  # values, coordinates and attributes (NaN == NaN)
print("bit-identical after resuming:", all(IDENTICAL.values()), f"({len(IDENTICAL)} variables compared);",
      "xarray identical:", SAME_DATASET)

# %% [markdown]
# ## Checks
#
# Assertions on numbers computed in this notebook (each printed first):
#
# * aER's memory stays within [k, max_capacity] at every segment end, ends within those
#   bounds, actually moves away from N₀, and moves in multiples of k = 20 (every size used
#   here is ≥ k, so Algorithm 2 only adds or removes k at a time);
# * the Clopper–Pearson interval contains its point estimate and equals the exact interval
#   computed independently from Beta quantiles;
# * every run's score is finite and no run diverged;
# * resuming reproduced the results bit for bit, and the command-line resume computed nothing;
# * CartPole (tuned) learns: for the largest fixed memory the seed-mean training return of
#   the last segment exceeds that of the first by at least 50 (in small mode; at paper
#   scale by 100), and every seed improves.

# %%
k = 20
for env in GAMES:
    ds = DATA[env, "adaptive"]
    cap, final = ds.capacity.values, ds.final_capacity.values  # [config, seed, segment], [config, seed]
    max_cap = SWEEPS[env]["adaptive"].make_setup().max_capacity
    N0 = ds.memory_size.values[:, None, None]
    moved = (cap != N0).any(axis=-1)  # [config, seed]
    print(f"{env}: N in [{cap.min()}, {cap.max()}] (k = {k}, max_capacity = {max_cap}); final N per config "
          f"{final.tolist()}; seeds whose N moved from N0: {moved.sum(axis=1).tolist()} of {ds.sizes['seed']}; "
          f"checks/grows/shrinks (seed 0) {ds.adaptive_checks.values[:, 0].tolist()}/"
          f"{ds.adaptive_grows.values[:, 0].tolist()}/{ds.adaptive_shrinks.values[:, 0].tolist()}")
    assert cap.min() >= k and cap.max() <= max_cap and final.min() >= k and final.max() <= max_cap
    assert moved.all(), f"{env}: some aER run never changed its memory size"
    assert np.all((cap - N0) % k == 0), f"{env}: N moved by something other than multiples of k"
    assert np.all(ds.adaptive_grows.values + ds.adaptive_shrinks.values == ds.adaptive_checks.values)

for row in HEADLINE:
    n, wins = row["n"], row["wins"]
    low = stats.beta.ppf(0.025, wins, n - wins + 1) if wins > 0 else 0.0
    high = stats.beta.ppf(0.975, wins + 1, n - wins) if wins < n else 1.0
    print(f"{row['game']} aER from {row['aER from']}: {wins}/{n} = {row['percent']:.1f}% "
          f"CI [{row['low']:.2f}, {row['high']:.2f}]%, Beta quantiles [{100 * low:.2f}, {100 * high:.2f}]%")
    assert row["low"] <= row["percent"] <= row["high"]
    assert math.isclose(row["low"], 100 * low, abs_tol=1e-6) and math.isclose(row["high"], 100 * high, abs_tol=1e-6)

all_scores = np.concatenate([s.ravel() for s in SCORES.values()])
diverged = sum(int(ds.diverged.values.sum()) for ds in DATA.values())
print(f"{all_scores.size} runs: scores in [{np.nanmin(all_scores):.1f}, {np.nanmax(all_scores):.1f}], "
      f"{int(np.isfinite(all_scores).sum())} finite, {diverged} diverged")
assert np.isfinite(all_scores).all() and diverged == 0

print(f"resume: first no-op computed {again.stats.runs_computed}, CLI computed {CLI_SUMMARY['runs_computed']} "
      f"(exit {cli.returncode}), after deleting a chunk computed {resumed.stats.runs_computed} of {demo.num_runs}; "
      f"identical: {sum(IDENTICAL.values())}/{len(IDENTICAL)} variables, dataset identical: {SAME_DATASET}")
assert cli.returncode == 0 and CLI_SUMMARY["runs_computed"] == 0 and again.stats.runs_computed == 0
assert 0 < resumed.stats.runs_computed < demo.num_runs and all(IDENTICAL.values()) and SAME_DATASET

if CARTPOLE_TUNED:
    cp = DATA["CartPole-v1", "fixed"].train_return.isel(config=-1).values  # largest fixed memory, [seed, segment]
    start, end = cp[:, 0], cp[:, -1]
    margin = 100 if PAPER_SCALE else 50
    print(f"CartPole fixed {PAPER_SIZES['CartPole-v1']['fixed'][-1]}: training return, first segment "
          f"{np.round(start, 1).tolist()} (mean {start.mean():.1f}), last segment {np.round(end, 1).tolist()} "
          f"(mean {end.mean():.1f}); improvement {end.mean() - start.mean():.1f} (required ≥ {margin})")
    assert end.mean() - start.mean() >= margin and (end > start).all()

print(f"notebook time so far: {time.perf_counter() - T0:.0f} s")
