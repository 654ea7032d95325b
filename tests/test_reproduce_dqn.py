"""The DQN reproduction (through the sweep engine) and the `jaxreplay dqn` command, on cut-down runs."""

from __future__ import annotations

import csv
import pathlib
import json

import numpy as np
import pytest

from jaxreplay import cli
from jaxreplay.engine import sweep as sweep_lib
from jaxreplay.paper.reproduce import dqn as rdqn


def test_beats_static_average_counts_and_interval():
    scores, static = np.array([5.0, 1.0, 3.0, np.nan]), np.array([[2.0, 2.0], [2.0, np.nan]])
    out = rdqn.beats_static_average(scores, static, np.array([False, False, False, True]))
    assert out["static_mean"] == 2.0 and out["wins"] == 2 and out["n"] == 4 and out["percent"] == 50.0
    # Clopper-Pearson for 2 of 4: [6.76%, 93.24%]; a diverged run counts as a loss.
    assert out["low"] == pytest.approx(6.76, abs=0.01) and out["high"] == pytest.approx(93.24, abs=0.01)
    assert rdqn.share_text(out) == "50% [7%, 93%] (2/4 seeds)"
    # Beside a paper's share a bound that whole percents would print as it keeps the decimals that
    # place it (MountainCar's 72/100: 62.13% against the paper's 62% read "72% [62%, 81%]", verdict "no").
    stat = dict(percent=72.0, low=62.1337, high=80.62, wins=72, n=100)
    assert rdqn.share_text(stat, 62.0) == "72% [62.1%, 81%] (72/100 seeds)"
    assert rdqn.share_text(dict(stat, low=61.996), 62.0) == "72% [61.996%, 81%] (72/100 seeds)"
    assert rdqn.share_text(dict(stat, low=62.0), 62.0) == "72% [62%, 81%] (72/100 seeds)"
    assert rdqn.share_text(stat, 71.0) == rdqn.share_text(stat) == "72% [62%, 81%] (72/100 seeds)"
    # A bound strictly inside (0, 100) never prints as 0% or 100%: "[0%, 64%]" read as an interval that
    # includes 0 (1 of 6 seeds: 0.42%), and 49/50's upper bound 99.95% printed "100%" (a probe).
    one = rdqn.beats_static_average(np.array([3.0, 1, 1, 1, 1, 1]), np.array([2.0]))
    assert (one["low"], one["high"]) == pytest.approx((0.4211, 64.12), abs=0.01)
    assert rdqn.share_text(one) == "17% [0.4%, 64%] (1/6 seeds)"
    many = rdqn.beats_static_average(np.r_[np.full(49, 3.0), 1.0], np.array([2.0]))
    assert rdqn.share_text(many) == "98% [89%, 99.9%] (49/50 seeds)"
    assert rdqn.percent_text(0.0) == "0%" and rdqn.percent_text(100.0) == "100%"
    assert rdqn.percent_text(0.004) == "0.004%" and rdqn.percent_text(99.99999) == "99.99999%"
    # A run without a score that did not diverge (no episode finished) is left out, not a loss (it was).
    out = rdqn.beats_static_average(scores, static, np.zeros(4, bool))
    assert (out["wins"], out["n"], out["unscored"]) == (2, 3, 1) and "unscored" not in rdqn.beats_static_average(scores[:3], static)
    # Without the flags a run without a score is a diverged one, a loss (run_scores' NaN), as before.
    assert rdqn.beats_static_average(scores, static) == rdqn.beats_static_average(scores, static, np.isnan(scores))
    assert rdqn.share_text(out).endswith("(2/3 seeds; 1 unscored left out)")
    # No static run with a score: no share (it said "0% [0%, 84%]", the paper 62%).
    none = rdqn.beats_static_average(np.array([np.nan, np.nan]), np.full(4, np.nan))
    assert np.isnan(none["percent"]) and none["reason"] == "no static run has a score (each diverged or finished no episode)"
    from jaxreplay.paper.reproduce import paper

    row = paper.dqn_claims("MountainCar-v0", {20_000: none})[0]
    assert row["agrees"] == "cannot tell" and row["ours"] == "no share: no static run has a score (each diverged or finished no episode)"


def test_fixed_vs_adaptive_follows_the_paper():
    fixed, adaptive, common, fixed_points, adaptive_points = rdqn.fixed_vs_adaptive("MountainCar-v0", quick=False)
    assert [p["memory_size"] for p in fixed_points] == [20_000, 50_000, 150_000]
    assert [p["memory_size"] for p in adaptive_points] == [20_000, 150_000]
    assert [p["adaptive_num_old"] for p in adaptive_points] == [10_000, 75_000]  # half the initial memory
    assert common["discount"] == 0.99 and common["step_size"] == pytest.approx(6e-4)
    assert fixed.batch_size == 50 and len(fixed.hidden_sizes) == 2 and adaptive.adaptive and not fixed.adaptive
    assert adaptive.subsample_size == 1000 and adaptive.adaptive_check_every == 20
    with pytest.raises(ValueError, match="env must be one of"):
        rdqn.fixed_vs_adaptive("Pong", quick=True)
    with pytest.raises(ValueError, match="steps must be a positive multiple of 20"):
        rdqn.fixed_vs_adaptive("CartPole-v1", quick=True, steps=150)
    # Runs cut to 600 steps keep whole aER cycles per segment.
    cut = rdqn.fixed_vs_adaptive("CartPole-v1", quick=True, steps=600)[1]
    assert cut.total_steps == 600 and cut.total_steps % cut.steps_per_segment == 0
    assert cut.steps_per_segment % 20 == 0 and cut.total_steps // cut.steps_per_segment == 15



def test_the_games_are_defined_once_and_listing_them_imports_no_experiment():
    import subprocess
    import sys

    from jaxreplay.paper.reproduce import settings

    assert rdqn.ENVS is settings.ENVS == ("CartPole-v1", "MountainCar-v0", "Acrobot-v1")
    assert tuple(settings.PAPER_TOTAL_STEPS) == tuple(settings.PAPER_MEMORY_SIZES) == settings.ENVS
    code = "import sys, jaxreplay.paper.reproduce.dqn; print('jaxreplay.experiments.dqn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"

@pytest.fixture(scope="module")
def cartpole(paper_tiny):
    # The CartPole part of the session's tiny whole-paper run (tests/conftest.py).
    out, summary = paper_tiny
    return out / "dqn" / "CartPole-v1", summary["dqn"]["CartPole-v1"]


def test_reproduction_writes_figures_table_and_statistic(cartpole):
    out, summary = cartpole
    assert set(summary["figures"]) == {"learning_curves.png", "memory_size.png"}
    assert all(p.stat().st_size > 10_000 for p in summary["figures"].values())
    rows = list(csv.DictReader(open(summary["csv"])))
    assert len(rows) == (2 + 1) * 2  # (fixed 100, fixed 40000, aER from 100) × 2 seeds
    assert {r["setting"] for r in rows} == {"fixed 100", "fixed 40000", "aER from 100"}
    # The headline statistic is recomputed from the table.
    static = np.array([float(r["score"]) for r in rows if r["adaptive"] == "False"])
    aer = np.array([float(r["score"]) for r in rows if r["adaptive"] == "True"])
    wins = int(np.sum(aer > static.mean()))
    assert summary["percent"][100]["wins"] == wins and summary["percent"][100]["n"] == 2
    # The IQM of each setting is scipy's 25%-trimmed mean of that setting's scores in the table.
    from scipy import stats

    for setting in ("fixed 100", "fixed 40000", "aER from 100"):
        x = np.array([float(r["score"]) for r in rows if r["setting"] == setting])
        assert summary["iqm"][setting]["estimate"] == pytest.approx(stats.trim_mean(x[np.isfinite(x)], 0.25), rel=1e-5)
    report = summary["report"].read_text()
    assert "| 100 | 71% |" in report and "IQM" in report
    # The report's divergence counts are the table's (soft-diverged: scored runs, Q-values beyond every return).
    hard = {a: sum(r["diverged"] == "True" for r in rows if r["adaptive"] == a) for a in ("False", "True")}
    soft = {a: sum(r["soft_diverged"] == "True" and r["diverged"] == "False" for r in rows if r["adaptive"] == a)
            for a in ("False", "True")}
    assert (f"Diverged runs: {hard['False']} fixed, {hard['True']} adaptive. Soft-diverged runs (Q-values beyond "
            "every discounted return of their rewards, weights finite; scored like the rest): "
            f"{soft['False']} fixed, {soft['True']} adaptive.") in report
    assert rdqn.iqm_table(summary["iqm"]) in report
    # Both sweeps were persisted through the engine and reload as labeled datasets.
    sweeps = sorted((out / "sweeps").iterdir())
    assert [p.name.split("-")[0] for p in sweeps] == ["adaptive", "fixed"]
    ds = sweep_lib.load(sweeps[1])
    assert ds.sizes["config"] == 2 and ds.sizes["seed"] == 2 and ds.memory_size.values.tolist() == [50, 20_000]


def test_reproduction_resumes_without_recomputing(cartpole):
    out, first = cartpole
    again = rdqn.reproduce(out, "CartPole-v1", seeds=2, quick=True, steps=500, progress=False)
    assert again["percent"] == first["percent"]
    summaries = [json.loads((p / "summary.json").read_text()) for p in (out / "sweeps").iterdir()]
    assert all(s["runs_computed"] == 0 for s in summaries)


def test_a_rerun_killed_before_its_report_leaves_no_earlier_report_beside_new_figures(cartpole, tmp_path,
                                                                                       monkeypatch):
    """A rerun killed after its figures left them beside the earlier run's report.md and runs.csv, byte-identical
    to the earlier run's (found by a probe): the earlier files go first."""
    import shutil

    out = tmp_path / "CartPole-v1"
    shutil.copytree(cartpole[0], out)
    assert (out / "report.md").exists() and (out / "runs.csv").exists()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rdqn, "_figures", killed)
    with pytest.raises(KeyboardInterrupt):
        rdqn.reproduce(out, "CartPole-v1", seeds=2, quick=True, steps=500, progress=False)
    left = {p.name for p in out.iterdir()}
    assert not left & {"report.md", "runs.csv", "learning_curves.png", "memory_size.png"}, left


def test_dqn_command_json(capsys):
    code = cli.main(["dqn", "--env", "CartPole-v1", "--memory-size", "100", "--adaptive", "--seeds", "2",
                     "--steps", "400", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["seeds"] == 2 and report["steps"] == 400 and len(report["final_returns"]) == 2
    assert report["adaptive"] and len(report["memory_size_mean"]) == len(report["segment_steps"])
    # Two seeds are too few for a 95% interval (results.min_seeds_for_interval): null, and why.
    assert report["iqm_ci95"] is None and report["iqm_ci95_null_reason"] == "too few seeds (n = 2) for an interval"
    from scipy import stats

    finite = np.array([x for x in report["final_returns"] if x is not None])
    assert report["iqm"] == pytest.approx(stats.trim_mean(finite, 0.25))


def test_dqn_command_rejects_bad_input(capsys):
    assert cli.main(["dqn", "--env", "Pong-v0", "--steps", "400"]) == 2
    assert "Pong-v0" in capsys.readouterr().err
    assert cli.main(["dqn", "--seeds", "0"]) == 2


def test_dqn_sweep_results_do_not_depend_on_the_chunk_size_a_lone_run_is_padded():
    """XLA:CPU compiles a program of one run (the run axis squeezed away) into kernels that round DQN's
    float reductions differently from every larger batch (measured on a 2-core AMD EPYC: TD losses
    ~1e-7 relative, aER's change sum ~1e-5, returns after thousands of steps), so the engine never
    compiles one: ``chunk_size=1`` runs in programs of 2 (``plan.MIN_RUNS_PER_DEVICE``), whose results
    equal those of a program of 3 bit for bit. (Before the padding, this test saw td_loss differ.)"""
    import dataclasses

    from jaxreplay.paper.reproduce import settings as paper_settings

    setup, hp = paper_settings.paper_setting("CartPole-v1", 100, True, quick=True)
    setup = dataclasses.replace(setup, total_steps=600, steps_per_segment=600)
    sweep = sweep_lib.Sweep("dqn", seeds=3, setup=setup,
                            fixed=dict(hp._asdict(), learning_starts=100))
    a = sweep_lib.run(sweep, None, chunk_size=3, progress=False).dataset
    lone = sweep_lib.run(sweep, None, chunk_size=1, progress=False)
    assert lone.stats.chunk_size == 2
    b = lone.dataset
    assert float(a.td_loss.mean()) > 0 and int(a.gradient_steps.min()) > 0
    assert int(a.adaptive_checks.min()) > 0
    for name in a.data_vars:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def test_learning_curves_leave_a_segment_blank_where_a_live_seed_finished_no_episode(tmp_path, monkeypatch):
    """The mean over seeds dropped a seed with no finished episode in a segment: with short segments those are
    the learners (long episodes), so the curve showed the others' mean (9.6 where one seed scored 60-70). The
    legend names the size that ran where quick mode scaled it (found by a probe)."""
    import xarray as xr

    from jaxreplay.paper import plots

    figures = {}
    monkeypatch.setattr(plots, "save", lambda fig, path: figures.setdefault(pathlib.Path(path).name, fig) and path)

    def dataset(sizes, train):
        train = np.asarray(train, float)  # [config, seed, segment]
        configs, seeds, segments = train.shape
        return xr.Dataset({
            "train_return": (("config", "seed", "segment"), train),
            "diverged": (("config", "seed"), np.zeros((configs, seeds), bool)),
            "memory_size": (("config",), np.asarray(sizes)),
            "capacity": (("config", "seed", "segment"), np.full(train.shape, 50.0)),
        }, coords={"segment": np.arange(1, segments + 1) * 100})

    fixed = dataset([50, 20_000], [[[9.0, 10.0, 11.0], [9.0, np.nan, 70.0]], [[8.0, 9.0, 10.0], [8.0, 9.0, 10.0]]])
    adaptive = dataset([50], [[[9.0, 10.0, 11.0], [9.0, 10.0, 11.0]]])
    rdqn._figures(tmp_path, "CartPole-v1", {"fixed": fixed, "adaptive": adaptive},
                  {"fixed": [100, 40_000], "adaptive": [100]})
    ax = figures["learning_curves.png"].axes[0]
    first = ax.lines[0]
    assert first.get_label() == "fixed 100 (ran 50)" and ax.lines[1].get_label() == "fixed 40000 (ran 20000)"
    y = np.asarray(first.get_ydata(), float)
    assert y[0] == 9.0 and np.isnan(y[1]) and y[2] == 40.5  # blank, not the other seed's 10.0
    assert "(1 segment(s) blank: a seed finished no episode there)" in ax.get_title()
