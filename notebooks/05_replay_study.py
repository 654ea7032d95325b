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
# # The replay study: capacity × replay ratio × n-step
#
# Fedus et al. (*Revisiting Fundamentals of Experience Replay*, ICML 2020, arXiv:2007.06700) found
# on Atari that a larger replay memory helps Rainbow but not plain DQN, that n-step returns are what
# makes the larger memory pay off, and they separated the memory's *capacity* from the *age of the
# oldest policy* in it (capacity × replay ratio, in gradient updates). This notebook walks through
# **`jaxreplay study replay`**, which asks the same questions of one game:
#
# 1. **Does a larger memory help** at n = 1, and at n = 3 (largest − smallest capacity, ratio 1)?
# 2. **Is the capacity effect larger with n = 3** (the difference of the two per-seed differences)?
# 3. **Does the score follow the replay ratio or the oldest-policy age** (cells of equal age with the
#    ratio × 4, against cells of equal ratio with the age × 4)?
# 4. **Adaptive memories** where capacity matters: each rule of `STAGE_RULES` (aER, its relative-ε
#    variant, aER with accumulated evidence) from the smallest and the largest capacity, against the
#    random ±k walk and a fixed memory at the rule's time-averaged size.
#
# Every answer is a paired contrast of the score (the mean training return over the run) with a 95%
# paired Student-t interval; pairs share their seed index, and so the engine's random numbers.
#
# **Two modes, one switch.** With `PAPER_SCALE = False` (committed) the notebook reads every study
# committed under `docs/replay_study/` (today: CartPole-v1, Acrobot-v1 and MountainCar-v0 in the CPU
# *quick* mode, 4,000 and 20,000 steps per run, **6 seeds**; MountainCar does not learn in 20,000) and runs a *tiny* CartPole study on the CPU (200 steps, 2 seeds: a smoke run
# that shows what the command writes). With `PAPER_SCALE = True` it runs the full study of every game
# into `results/05_replay_study/` (a GPU job; the sweeps resume) and reads that instead.
#
# **Read the committed numbers as a CPU demonstration, not as evidence for the field.** A
# 95% interval of a mean or IQM needs at least 6 seeds to reach its coverage: the committed study has
# exactly 6, so its answers have intervals, but for three classic-control games and short runs. (Below 6 seeds, as in
# the tiny run at the end, every answer is, plainly, **"cannot tell (too few seeds)"**.)

# %%
import csv
import pathlib

import matplotlib.pyplot as plt
import numpy as np

from jaxreplay.paper.reproduce import replay_study

PAPER_SCALE = False

import jaxreplay  # noqa: E402
from jaxreplay.engine.batch import use_cpu_cores  # noqa: E402

# One JAX CPU device per core, before anything starts JAX (the `jaxreplay` command does the same): on a CPU the
# sweeps below then shard over every core, with the same results.
use_cpu_cores()

ROOT = pathlib.Path(jaxreplay.__file__).resolve().parents[1]  # the source checkout (docs/replay_study/ is there)
if PAPER_SCALE:
    OUT = ROOT / "results" / "05_replay_study"
    for env in replay_study.GAMES:
        replay_study.study(OUT / env, env, chunk_size=400)
else:
    OUT = ROOT / "docs" / "replay_study"
# Every study found, in the order of GAMES (whichever games have one).
RESULTS = {
    env: replay_study.read_study(OUT / env / "study.json", env=env)  # (of that game: refused if copied elsewhere)
    for env in replay_study.GAMES
    if (OUT / env / "study.json").exists()
}
assert RESULTS, f"no study.json under {OUT}"
print(f"jaxreplay from {ROOT}; studies from {OUT}")
for env, r in RESULTS.items():
    mode = "quick mode (CPU)" if r["quick"] else "full scale"
    print(f"{env}: {mode}, {r['seeds']} seeds, {r['total_steps']} steps per run, {len(r['cells'])} cells")
    print("   ", r["verdict"]["summary"])


def grid(r, key="auc_iqm"):
    """The cells' ``key`` as an array [n, capacity, ratio] (NaN where missing)."""
    out = np.full((len(r["n_steps"]), len(r["capacities"]), len(r["ratios"])), np.nan)
    for c in r["cells"]:
        at = (r["n_steps"].index(c["n_step"]), r["capacities"].index(c["memory_size"]),
              r["ratios"].index(c["replay_ratio"]))
        out[at] = np.nan if c[key] is None else c[key]
    return out


def show(c):
    """A paired contrast as ``estimate [low, high]``, or the estimate and why there is no interval."""
    if c["low"] is None:
        return f"{c['estimate']:+8.1f}  (no interval: {c['low_null_reason']})"
    return f"{c['estimate']:+8.1f}  [{c['low']:+.1f}, {c['high']:+.1f}]"


# %% [markdown]
# ## 1. The grid: score over capacity × replay ratio, per n
#
# The IQM over seeds of each cell's score (mean training return), drawn from `study.json`'s cells.
# Rows: capacity (a factor 4 apart, the largest about half the run); columns: the replay ratio
# (gradient updates per environment step).
#
# In the committed quick CartPole study the replay ratio dominates: in every row, at both n, the score
# rises from ratio 0.25 (which barely learns in 4,000 steps: about 13, below random play's 22) to 1 and
# to 4.

# %%
for env, r in RESULTS.items():
    scores = grid(r)
    fig, axes = plt.subplots(1, len(r["n_steps"]), figsize=(5 * len(r["n_steps"]), 3.8), squeeze=False,
                             layout="constrained")
    for ax, n, s in zip(axes[0], r["n_steps"], scores):
        im = ax.imshow(s, origin="lower", cmap="viridis", vmin=np.nanmin(scores), vmax=np.nanmax(scores))
        for (j, k), v in np.ndenumerate(s):
            ax.text(k, j, f"{v:.0f}", ha="center", va="center", fontsize=9,
                    color="k" if v > (np.nanmin(scores) + np.nanmax(scores)) / 2 else "w")
        ax.set_xticks(range(len(r["ratios"])), [f"{x:g}" for x in r["ratios"]])
        ax.set_yticks(range(len(r["capacities"])), r["capacities"])
        ax.set_xlabel("replay ratio")
        ax.set_ylabel("capacity")
        ax.set_title(f"{env}, n = {n}")
    fig.colorbar(im, ax=axes[0].tolist(), label=f"score (IQM, {r['seeds']} seeds)")
    plt.show()

# %% [markdown]
# ## 2. Does a larger memory help, and more so with n-step returns?
#
# The score against capacity at ratio 1 (the ratio of the capacity contrasts), n = 1 and n = 3.
# Fedus et al.'s finding would be a flat n = 1 curve and a rising n = 3 curve. Bands are the cells'
# 95% intervals where the seeds allow one (6 or more seeds).
#
# In the committed quick study both curves rise, the n = 3 curve more: the capacity contrast is +53.4
# [32, 74.8] at n = 1 and +115 [49.7, 180] at n = 3, but the difference (the interaction), +61.7
# [−6.47, 130], includes 0: 6 seeds do not show the effect larger with n = 3 (the study answers "not
# detectably"). Unlike Fedus et al.'s DQN, a larger memory helps even at n = 1 here (a short run on an
# easy game: a hypothesis, not a finding about DQN).

# %%
for env, r in RESULTS.items():
    fig, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
    ratio1 = [c for c in r["cells"] if c["replay_ratio"] == 1.0]
    for n in r["n_steps"]:
        cells = sorted((c for c in ratio1 if c["n_step"] == n), key=lambda c: c["memory_size"])
        x = [c["memory_size"] for c in cells]
        y = np.array([c["auc_iqm"] for c in cells])
        line, = ax.plot(x, y, "o-", label=f"n = {n}")
        if all(c["auc_ci_low"] is not None for c in cells):
            ax.fill_between(x, [c["auc_ci_low"] for c in cells], [c["auc_ci_high"] for c in cells],
                            color=line.get_color(), alpha=0.15)
    ax.set_xscale("log")
    ax.set_xlabel("capacity")
    ax.set_ylabel(f"score (IQM, {r['seeds']} seeds)")
    ax.set_title(f"{env}: ratio 1")
    ax.legend()
    plt.show()

# %% [markdown]
# ## 3. Replay ratio or oldest-policy age?
#
# The same cells against their oldest-policy age (capacity × ratio, gradient updates), one marker per
# replay ratio. Since capacities and ratios both step by 4, cells of equal age and different ratio sit
# in the same column: if the score followed the age alone, markers in a column would agree; if it
# follows the ratio, the markers separate by ratio whatever the age.
#
# In the committed quick study they separate: at equal age the higher ratio scores more (+56.4 at
# n = 1, +48.5 at n = 3, over 6 pairs each), while at equal ratio a 4× older memory changes the score
# by less (+13.0, +27.6); every interval is above 0, so the study answers "both", the ratio more.
# (Section 4 prints these from the study; the Checks assert them.)

# %%
MARKERS = {0.25: "v", 1.0: "o", 4.0: "^"}
for env, r in RESULTS.items():
    fig, axes = plt.subplots(1, len(r["n_steps"]), figsize=(5.5 * len(r["n_steps"]), 3.8), sharey=True, squeeze=False,
                             layout="constrained")
    for ax, n in zip(axes[0], r["n_steps"]):
        for ratio in r["ratios"]:
            cells = sorted((c for c in r["cells"] if c["n_step"] == n and c["replay_ratio"] == ratio),
                           key=lambda c: c["oldest_policy_age"])
            ax.plot([c["oldest_policy_age"] for c in cells], [c["auc_iqm"] for c in cells],
                    MARKERS.get(ratio, "s") + "-", label=f"ratio {ratio:g}")
        ax.set_xscale("log")
        ax.set_xlabel("oldest-policy age (gradient updates)")
        ax.set_title(f"{env}, n = {n}")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel(f"score (IQM, {r['seeds']} seeds)")
    plt.show()

# %% [markdown]
# ## 4. The answers: paired contrasts, with their intervals or why there are none
#
# Each line: the mean over seeds of the per-seed difference, and its 95% interval, or, below 6 seeds,
# the reason there is none. Then the study's own words.

# %%
for env, r in RESULTS.items():
    print(f"== {env} ({r['seeds']} seeds)")
    top, low = max(r["capacities"]), min(r["capacities"])
    lines = [(f"capacity {top} − {low} at ratio 1, n = {c['n_step']}", c) for c in r["capacity_effect"]]
    lines.append(("capacity effect at n = 3 − at n = 1 (interaction)", r["interaction"]))
    lines += [(f"equal age, ratio × 4 ({len(c['pairs'])} pairs), n = {c['n_step']}", c)
              for c in r["ratio_at_equal_age"]]
    lines += [(f"equal ratio, age × 4 ({len(c['pairs'])} pairs), n = {c['n_step']}", c)
              for c in r["age_at_equal_ratio"]]
    for label, c in lines:
        print(f"  {label:52s} {show(c)}")
    v = r["verdict"]
    for a in v["capacity_helps"] + [v["interaction"]] + v["follows"]:
        print("  →", a["line"])

# %% [markdown]
# ## 5. The adaptive stage
#
# In the n with the larger capacity effect, at ratio 1: each row of `STAGE_RULES` from the smallest and
# the largest capacity. A rule added to the table after a study was run shows as *not run*: rerun
# the study (it resumes, computing only what is new) to fill it in.
#
# In the committed study aER from 31 stays small (grow share 0.54, mean size 189) and does no better than
# its random walk or a fixed memory at that size; the relative-ε variant grows (share 0.96); aER with
# accumulated evidence stays near its start (mean 58) and scores least. (A first run had aER from 31
# grow to 434 and beat its walk: checks before `learning_starts`, with the network frozen, were ties that
# enlarged. They no longer count.)

# %%
for env, r in RESULTS.items():
    a = r["adaptive"]
    print(f"== {env}: n = {a['n_step']}, ratio {a['replay_ratio']:g}; static ends: "
          + ", ".join(f"{s['memory_size']} → {s['score_iqm']:.1f}" for s in a["static"]))
    walks = {w["initial_size"]: w for w in a["walks"]}
    for w in a["walks"]:
        print(f"  {'random ±k walk':30s} from {w['initial_size']:>6}: mean size {w['mean_size']:8.0f}, "
              f"grow share {w['grow_fraction']:.2f}, score {w['score_iqm']:6.1f}")
    rows = {(x["rule"], x["initial_size"]): x for x in a["rules"]}
    for rule in replay_study.STAGE_RULES:
        for start in sorted(walks):
            x = rows.get((rule.name, start))
            if x is None:
                print(f"  {rule.name:30s} from {start:>6}: not run (this study.json predates the row)")
                continue
            print(f"  {rule.name:30s} from {start:>6}: mean size {x['mean_size']:8.0f}, "
                  f"grow share {x['grow_fraction']:.2f}, score {x['score_iqm']:6.1f}")
            for label, key in (("vs its start", "vs_start_static"), ("vs the better static end", "vs_best_static"),
                               ("vs the random walk", "vs_random_walk"),
                               (f"vs fixed at its mean size {x['fixed_at_mean_size']}", "vs_fixed_at_mean")):
                print(f"      {label:36s} {show(x[key])}")

# %% [markdown]
# ## 6. Running the study: a tiny CPU run of the same command
#
# `jaxreplay study replay --env CartPole-v1 --out DIR --quick --seeds 6` made the committed results (337 s
# on two shared cores). Here the runs are cut to 200 steps (`steps` must be a multiple of
# 20, whole aER checks) and 2 seeds, only to show what the command writes, and that `study.json` is
# computed from the per-run table `runs.csv` (scores written with 17 significant digits, so the
# recomputation in the Checks cell is exact).

# %%
import tempfile  # noqa: E402

tiny_dir = pathlib.Path(tempfile.mkdtemp()) / "tiny"
tiny = replay_study.study(tiny_dir, "CartPole-v1", quick=True, seeds=2, steps=200, progress=False)
print(sorted(p.name for p in tiny_dir.iterdir()))
print(tiny["verdict"]["summary"])
with open(tiny_dir / "runs.csv") as f:
    tiny_rows = list(csv.DictReader(f))
print(len(tiny_rows), "runs;", tiny["capacities"], "capacities")
tiny_scores = grid(tiny)
fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
for i, n in enumerate(tiny["n_steps"]):
    ax.plot(tiny["capacities"], tiny_scores[i, :, tiny["ratios"].index(1.0)], "o-", label=f"n = {n}")
ax.set_xscale("log")
ax.set_xlabel("capacity")
ax.set_ylabel("score (IQM, 2 seeds)")
ax.set_title("tiny CartPole study, ratio 1 (a smoke run)")
ax.legend()
plt.show()

# %% [markdown]
# ## Checks
#
# The narrative above, asserted against the results it reads, and the tiny study's numbers recomputed
# from its runs.

# %%
from scipy import stats  # noqa: E402

from jaxreplay.paper.reproduce.replay_study import stages  # noqa: E402


def auc(rows, c, ratio, n):
    """Per-seed scores of grid cell ``(c, ratio, n)`` from runs.csv rows, in seed order."""
    chosen = [x for x in rows if x["stage"] == stages.grid(ratio) and x["setting"] == stages.cell(c, ratio, n)]
    assert [int(x["seed"]) for x in chosen] == list(range(len(chosen)))
    return np.array([float(x["auc"]) for x in chosen])


def contrasts(r):
    yield from r["capacity_effect"]
    yield r["interaction"]
    yield from r["ratio_at_equal_age"]
    yield from r["age_at_equal_ratio"]
    for x in r["adaptive"]["rules"]:
        yield from (x["vs_start_static"], x["vs_random_walk"], x["vs_fixed_at_mean"])


for env, r in RESULTS.items():
    assert len(r["cells"]) == len(r["capacities"]) * len(r["ratios"]) * len(r["n_steps"]) == 24
    assert all(c["oldest_policy_age"] == c["memory_size"] * c["replay_ratio"] for c in r["cells"])
    # Capacities a factor 4 apart, as the ratios: equal-age cells exist (6 pairs per n).
    assert all(b == 4 * a for a, b in zip(r["capacities"], r["capacities"][1:]))
    assert all(len(c["pairs"]) == 6 for c in r["ratio_at_equal_age"])
    if r["seeds"] < 6:  # the committed quick studies: no interval, and every answer says so
        assert all(c["low"] is None and "too few seeds" in c["low_null_reason"] for c in contrasts(r))
        answers = [a["answer"] for a in r["verdict"]["capacity_helps"] + r["verdict"]["follows"]]
        assert set(answers + [r["verdict"]["interaction"]["answer"]]) == {"cannot tell (too few seeds)"}
    # The heatmap's numbers are the IQM of the committed runs.csv (IQM: the 25%-trimmed mean).
    with open(OUT / env / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    for c in r["cells"]:
        v = auc(rows, c["memory_size"], c["replay_ratio"], c["n_step"])
        assert len(v) == r["seeds"] and np.isclose(c["auc_iqm"], stats.trim_mean(v, 0.25), rtol=1e-12, atol=0)
    # The capacity contrast: the mean per-seed difference, largest − smallest at ratio 1.
    top, low = max(r["capacities"]), min(r["capacities"])
    for c in r["capacity_effect"]:
        d = auc(rows, top, 1.0, c["n_step"]) - auc(rows, low, 1.0, c["n_step"])
        assert np.isclose(c["estimate"], np.mean(d), rtol=1e-12, atol=0)
    # The relative-ε variant stops shrinking on small decreases: it grows where plain aER tosses a coin.
    by = {(x["rule"], x["initial_size"]): x for x in r["adaptive"]["rules"]}
    small = min(r["capacities"])
    assert by[("aER, relative ε = 5%", small)]["grow_fraction"] > 0.7 > 0.6 > by[("aER", small)]["grow_fraction"]

if not PAPER_SCALE:  # the committed CartPole quick study: 6 seeds of 4,000 steps
    cart = RESULTS["CartPole-v1"]
    assert cart["quick"] and cart["seeds"] == 6 and cart["total_steps"] == 4_000
    assert cart["capacities"] == [31, 124, 496, 1984]
    # The numbers the text describes: the score rises with the ratio in every row, at both n ...
    g = grid(cart)
    assert np.all(np.diff(g, axis=2) > 0)
    assert np.all(g[:, :, 0] < 22)  # ratio 0.25 stays below random play's 22 in 4,000 steps
    # ... at ratio 1 both n rise with capacity, n = 3 more (every contrast has an interval with 6 seeds) ...
    ratio1 = g[:, :, cart["ratios"].index(1.0)]
    assert np.all(np.diff(ratio1, axis=1) > 0)
    effect = {c["n_step"]: c for c in cart["capacity_effect"]}
    assert 53 < effect[1]["estimate"] < 54 and 115 < effect[3]["estimate"] < 116
    assert effect[1]["low"] > 0 and effect[3]["low"] > 0 and cart["interaction"]["low"] < 0 < cart["interaction"]["high"]
    assert 61 < cart["interaction"]["estimate"] < 62
    answers = [a["answer"] for a in cart["verdict"]["capacity_helps"]] + [cart["verdict"]["interaction"]["answer"]]
    assert answers == ["yes", "yes", "not detectably"]
    # ... and at equal age the higher ratio scores more than a 4× older memory at equal ratio does.
    for by_ratio, by_age in zip(cart["ratio_at_equal_age"], cart["age_at_equal_ratio"]):
        assert by_ratio["estimate"] > by_age["estimate"] > 0 and by_age["low"] > 0
    # (the numbers section 3 quotes, n = 1 then n = 3)
    assert [round(c["estimate"], 1) for c in cart["ratio_at_equal_age"]] == [56.4, 48.5]
    assert [round(c["estimate"], 1) for c in cart["age_at_equal_ratio"]] == [13.0, 27.6]
    # From the smallest start: the evidence rule stays near it, aER stays small and is no better than its
    # random walk (its interval includes 0), the relative-ε variant grows.
    by = {(x["rule"], x["initial_size"]): x for x in cart["adaptive"]["rules"]}
    assert by[("aER with accumulated evidence", 31)]["mean_size"] < 100 < by[("aER", 31)]["mean_size"] < 400
    walk = by[("aER", 31)]["vs_random_walk"]
    assert walk["low"] < 0 < walk["high"] and by[("aER, relative ε = 5%", 31)]["mean_size"] > 1000

    # The committed Acrobot quick study (6 seeds of 20,000 steps): Fedus et al.'s direction in the estimates
    # (+31.5 at n = 1, +83.4 at n = 3), but 6 seeds show no capacity effect at either n, nor the interaction.
    acro = RESULTS["Acrobot-v1"]
    assert acro["quick"] and acro["seeds"] == 6 and acro["total_steps"] == 20_000
    effect = {c["n_step"]: c for c in acro["capacity_effect"]}
    assert effect[1]["low"] < 0 < effect[1]["high"] and 31 < effect[1]["estimate"] < 32
    assert effect[3]["low"] < 0 < effect[3]["high"] and 83 < effect[3]["estimate"] < 84
    assert acro["interaction"]["low"] < 0 < acro["interaction"]["high"]
    answers = [a["answer"] for a in acro["verdict"]["capacity_helps"]] + [acro["verdict"]["interaction"]["answer"]]
    assert answers == ["not detectably", "not detectably", "not detectably"]

# The tiny study wrote what the command promises, and its study.json is recomputed from its runs.csv.
assert {"report.md", "study.json", "runs.csv", "curves.csv"} <= {p.name for p in tiny_dir.iterdir()}
assert tiny["quick"] and tiny["seeds"] == 2 and tiny["total_steps"] == 200 and tiny["capacities"] == [3, 12, 48, 192]
assert sum(x["stage"].startswith("grid") for x in tiny_rows) == 2 * len(tiny["cells"]) == 48
cell = next(c for c in tiny["cells"] if (c["memory_size"], c["replay_ratio"], c["n_step"]) == (48, 1.0, 3))
v = auc(tiny_rows, 48, 1.0, 3)
assert len(v) == 2 and np.isclose(cell["auc_iqm"], np.mean(v), rtol=1e-12, atol=0)  # 2 seeds: nothing trimmed
cap1 = next(c for c in tiny["capacity_effect"] if c["n_step"] == 1)
d = auc(tiny_rows, 192, 1.0, 1) - auc(tiny_rows, 3, 1.0, 1)
assert np.isclose(cap1["estimate"], np.mean(d), rtol=1e-12, atol=0)
assert cap1["low"] is None and cap1["low_null_reason"].startswith("too few seeds")
print("all checks passed")
