"""The DQN replay study (``jaxreplay study dqn``) and aER's diagnostics on the command line.

One tiny study (CartPole cut to 400 steps, 2 seeds; every stage shares one
compiled program) is run once per session; the tests check
its numbers against the per-run table it writes (``runs.csv``), recomputed
here with scipy/NumPy.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from scipy import stats

from jaxreplay import cli
from jaxreplay.paper.reproduce import study as study_lib
from jaxreplay.paper.reproduce.study import report, runs, stages, text, verdict

STEPS, SEEDS = 400, 2


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    result = study_lib.study(out, "CartPole-v1", steps=STEPS, seeds=SEEDS, progress=False)
    with open(out / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    return out, result, rows


def _rows(rows, stage, **match):
    return [r for r in rows if r["stage"] == stage and all(float(r[k]) == v for k, v in match.items())]


def test_plan_grid_and_starts():
    plan = study_lib.design("MountainCar-v0")
    assert plan.seeds == 100 and plan.setup.total_steps == 300_000
    assert len(plan.sizes) == 8 and plan.sizes[0] == 100 and plan.sizes[-1] == 300_000
    assert np.all(np.diff(np.log(plan.sizes)) > 0.5)  # a log grid
    assert plan.setup.max_capacity == plan.setup.total_steps and plan.other_reading is None
    assert stages.starts((10, 20, 40, 80, 160), 40) == [10, 40, 160]
    assert stages.starts((10, 20, 40, 80, 160), 10) == [10, 40, 160]  # optimum at an end: the middle joins
    assert stages.starts((10, 20, 40, 80, 160), 160) == [10, 40, 160]
    assert stages.starts((10, 20, 40, 80, 160), 20) == [10, 20, 160]
    with pytest.raises(ValueError, match="env"):
        study_lib.design("Pong")
    with pytest.raises(ValueError, match="seeds"):
        study_lib.design("CartPole-v1", seeds=0)


def test_study_json_has_the_specified_fields(tiny_study):
    out, result, _ = tiny_study
    saved = json.loads((out / "study.json").read_text())
    for entry in saved["response"]:
        assert set(entry) >= {"memory_size", "score_iqm", "score_ci_low", "score_ci_high"}
    for entry in saved["adaptive"]:
        assert set(entry) >= {"initial_size", "final_size_mean", "grow_fraction", "score_iqm", "score_ci_low",
                              "score_ci_high"}
    assert isinstance(saved["verdict"]["summary"], str) and len(saved["verdict"]["per_start"]) == len(saved["adaptive"])
    assert [e["memory_size"] for e in saved["response"]][-1] == STEPS
    assert len(saved["adaptive"]) >= 3 and len(saved["controls"]) == len(saved["adaptive"])
    # Every variant but k = 500 (more than a quarter of a 400-step run).
    assert [s["variant"] for s in saved["sensitivity"]][1:] == [v for v in study_lib.SENSITIVITY if v != "k = 500"]
    assert saved["other_reading"]["reading"] == "sgd"
    for name in ("report.md", "runs.csv", "curves.csv", "response.png", "learning_curves.png", "memory_size.png"):
        assert (out / name).stat().st_size > 0
    assert "## Verdict" in (out / "report.md").read_text()
    # The selection caveat counts the sizes the study compared (5 in quick mode), not the full grid's 8.
    assert "The best and worst of the 8 sizes are then compared" in (out / "report.md").read_text()
    assert "The best and worst of the 3 sizes" in report.report({**saved, "response": saved["response"][:3]})


def test_response_scores_are_the_iqm_of_the_runs(tiny_study):
    _, result, rows = tiny_study
    for entry in result["response"]:
        runs = _rows(rows, "response", memory_size=entry["memory_size"])
        assert len(runs) == SEEDS
        auc = np.array([float(r["auc"]) for r in runs])
        assert entry["score_iqm"] == pytest.approx(stats.trim_mean(auc, 0.25), rel=1e-5)
        # Two seeds are too few for a 95% interval: null bounds, and why.
        assert entry["score_ci_low"] is None and entry["score_ci_high"] is None
        assert entry["score_ci_low_null_reason"] == "too few seeds (n = 2) for an interval"
        assert all(int(r["final_memory_size"]) == entry["memory_size"] for r in runs)  # fixed: never resized


def test_adaptive_entries_and_controls_follow_from_the_runs(tiny_study):
    out, result, rows = tiny_study
    checks_table = (out / "report.md").read_text().split("## aER's checks")[1]
    for entry in result["adaptive"]:  # each start's row ends with its forced share and its free checks' grow share
        d = entry["diagnostics"]
        assert f"| {text.fmt(d['forced_fraction'], '.2f')} | {text.fmt(d['free_grow_fraction'], '.2f')} |" in checks_table
    for entry, control in zip(result["adaptive"], result["controls"]):
        n0 = entry["initial_size"]
        aer = _rows(rows, "adaptive", memory_size=n0, adaptive_rule=1, adaptive_td_target=0, adaptive_paired=1,
                    adaptive_equal_counts=1, adaptive_interval=20, adaptive_relative_tolerance=0,
                    adaptive_num_old=max(1, n0 // 2))
        walk = _rows(rows, "adaptive", memory_size=n0, adaptive_rule=2)
        assert len(aer) == len(walk) == SEEDS
        assert entry["final_size_mean"] == pytest.approx(np.mean([float(r["final_memory_size"]) for r in aer]))
        checks = sum(int(r["checks"]) for r in aer)
        assert entry["grow_fraction"] == pytest.approx(sum(int(r["grows"]) for r in aer) / checks)
        forced = sum(int(r["forced"]) for r in aer)
        assert entry["diagnostics"]["forced_fraction"] == pytest.approx(forced / checks)
        free = checks - forced
        assert entry["diagnostics"]["free_grow_fraction"] == (
            None if free == 0 else pytest.approx((sum(int(r["grows"]) for r in aer) - forced) / free))
        for r in aer + walk:
            assert int(r["grows"]) + int(r["shrinks"]) == int(r["checks"]) and int(r["invalid"]) == 0
            assert int(r["forced"]) <= int(r["grows"])
            assert (int(r["final_memory_size"]) - n0) % 20 == 0
        # The paired comparison is the seed-mean of per-seed differences (same seed index).
        diff = [float(a["auc"]) - float(w["auc"]) for a, w in zip(aer, walk)]
        assert entry["vs_random_walk"]["estimate"] == pytest.approx(np.mean(diff), abs=1e-4)  # runs.csv: 6 digits
        # The fixed control sits at aER's time-averaged size.
        mean_size = np.mean([float(r["mean_memory_size"]) for r in aer])
        assert control["fixed_at_mean_size"] == int(min(max(round(mean_size), 1), STEPS))
        fixed = _rows(rows, "fixed-at-mean", memory_size=control["fixed_at_mean_size"])
        assert len(fixed) >= SEEDS and all(int(r["checks"]) == 0 for r in fixed)


def test_rerun_resumes_with_the_same_results(tiny_study):
    out, result, _ = tiny_study
    again = study_lib.study(out, "CartPole-v1", steps=STEPS, seeds=SEEDS, progress=False)
    for key in ("response", "adaptive", "controls", "sensitivity", "verdict"):
        assert again[key] == result[key]


def test_dqn_cli_prints_aer_diagnostics_per_seed(capsys):
    assert cli.main(["dqn", "--env", "CartPole-v1", "--memory-size", "100", "--adaptive", "--steps", "1200",
                     "--seeds", "2", "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    a = report["adaptive"]
    assert len(a["checks"]) == len(a["grows"]) == len(a["shrinks"]) == len(a["final_memory_size"]) == 2
    # A check every 20 steps once learning has begun (learning_starts 1000; the memory is full from step 100).
    assert a["checks"] == [(1200 - 1000) // 20] * 2
    assert [g + s for g, s in zip(a["grows"], a["shrinks"])] == a["checks"]
    # The floor's forced enlargements apart: the grow share of the free checks, from the per-seed counts.
    free = sum(a["checks"]) - sum(a["invalid"]) - sum(a["forced"])
    assert a["free_grow_fraction"] == pytest.approx((sum(a["grows"]) - sum(a["forced"])) / free)
    assert a["forced_fraction"] == pytest.approx(sum(a["forced"]) / sum(a["checks"]))
    assert all((n - 100) % 20 == 0 for n in a["final_memory_size"])
    assert 0 <= a["grow_fraction"] <= 1
    # Gradient steps are reported: one a step from learning_starts on. A run that takes none says so (its
    # returns, IQM 10.0 for CartPole, were reported as DQN's without a word; found by a probe).
    assert report["gradient_steps"] == [1200 - 1000 + 1] * 2  # (steps 1000 to 1200)
    assert cli.main(["dqn", "--env", "CartPole-v1", "--steps", "400", "--seeds", "1", "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["gradient_steps"] == [0]
    # The n-step horizon and the replay ratio are the setting's too: they were not in the report (found by a probe).
    assert (json.loads(captured.out)["n_step"], json.loads(captured.out)["replay_ratio"]) == (1, 1.0)
    argv = ["dqn", "--env", "CartPole-v1", "--steps", "400", "--seeds", "1", "--n-step", "3", "--replay-ratio", "0.5",
            "--memory-size", "60"]
    assert cli.main([*argv, "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["n_step"], report["replay_ratio"], report["oldest_policy_age"]) == (3, 0.5, [30.0])
    from jaxreplay.cli import dqn as dqn_command  # the text's first line, from that report

    dqn_command._print_text(cli.build_parser().parse_args(argv), dqn_command._Result(report, np.array([9.0]), np.array([False])))
    assert capsys.readouterr().out.startswith(
        "DQN CartPole-v1, fixed memory 60, sampler uniform, 3-step returns, replay ratio 0.5, 1 seeds, 400 steps\n")
    assert captured.err == ("jaxreplay dqn: warning: no gradient step was taken: learning starts after 1000 steps and "
                            "the run has 400 (use more --steps); these returns are the untrained network's.\n")


def test_readme_block_is_generated_from_study_json(tiny_study, tmp_path):
    out, result, _ = tiny_study
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- study:begin -->\nold\n<!-- study:end -->\nrest\n")
    assert cli.main(["study", "readme", str(out), "--readme", str(readme), "--note", "tiny"]) == 0
    text = readme.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| CartPole-v1 |")]
    assert len(rows) == len(result["adaptive"]) and "old" not in text and text.endswith("rest\n")
    first = result["adaptive"][0]
    assert f"| {first['initial_size']} | {first['mean_size']:.0f} |" in rows[0]
    # Labelled (not quick, cut to 400 steps, 2 seeds); two seeds cannot tell whether memory size matters.
    effect = result["memory_size_effect"]["estimate"]
    assert rows[0].startswith(f"| CartPole-v1 | full (cut short), 2 × 400 | cannot tell (too few seeds): {effect:.3g} "
                              "[too few seeds (n = 2) for an interval] |")
    with pytest.raises(ValueError, match="study.json"):
        study_lib.update_readme(readme, [tmp_path / "empty"])


def test_committed_gpu_study_is_in_the_readme():
    """docs/study.md's study block is exactly what the committed docs/study results generate."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    results = [json.loads((root / "docs" / "study" / env / "study.json").read_text()) for env in study_lib.ENVS]
    assert study_lib.summary_table(results) in (root / "docs" / "study.md").read_text()


def test_the_readers_refuse_a_study_of_another_game_than_asked_for():
    """A study copied into another game's folder was shown under that game's name (notebooks 04 and 05 name a
    study by its folder): with ``env`` both readers check the game the file holds."""
    import pathlib

    from jaxreplay.paper.reproduce import replay_study

    root = pathlib.Path(__file__).resolve().parents[1] / "docs"
    for read, path in ((study_lib.read_study, root / "study" / "CartPole-v1" / "study.json"),
                       (replay_study.read_study, root / "replay_study" / "CartPole-v1" / "study.json")):
        assert read(path, env="CartPole-v1")["env"] == read(path)["env"] == "CartPole-v1"
        with pytest.raises(ValueError, match=rf"^the study result {path} is a study of CartPole-v1, not of Acrobot-v1\.$"):
            read(path, env="Acrobot-v1")


def test_relabel_recomputes_the_labels_from_the_stored_numbers(tiny_study, tmp_path):
    out, result, _ = tiny_study
    assert study_lib.relabel(result)["verdict"] == json.loads(json.dumps(result["verdict"]))
    stale = json.loads(json.dumps(result))
    optimum = stale["best_static"]
    stale["adaptive"][0].update(initial_size=optimum // 1000 or 1, mean_size=(optimum // 1000 or 1) * 1.9)
    stale["controls"][0]["initial_size"] = optimum // 1000 or 1  # a start's controls are found by its size
    stale["adaptive"][0]["moves_toward_optimum"] = "moves toward"
    fresh = study_lib.relabel(stale)
    # From 1000× below the optimum to 1.9× the start is not a third of the way in log N.
    assert fresh["adaptive"][0]["moves_toward_optimum"] == "moves little relative to"
    assert fresh["verdict"]["toward_optimum"][0] is False
    assert fresh["response"] == stale["response"] and fresh["controls"] == stale["controls"]
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "study.json").write_text(json.dumps(stale))
    assert cli.main(["study", "refresh", str(folder)]) == 0
    assert json.loads((folder / "study.json").read_text())["verdict"] == fresh["verdict"]
    assert fresh["verdict"]["summary"] in (folder / "report.md").read_text()


def test_committed_studies_use_todays_labels():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    for env in study_lib.ENVS:
        stored = json.loads((root / "docs" / "study" / env / "study.json").read_text())
        assert study_lib.relabel(stored) == stored, f"run: jaxreplay study refresh docs/study/{env}"


TOO_FEW = "too few seeds (n = 2) for an interval"


def test_two_seeds_give_no_interval_and_the_verdict_cannot_tell():
    # Used to be [1, 3], "significant", and "Memory size matters: yes" from two seeds.
    paired = runs.paired(np.array([1.0, 3.0]), np.zeros(2))
    assert paired == {"estimate": 2.0, "low": None, "high": None, "low_null_reason": TOO_FEW,
                      "high_null_reason": TOO_FEW, "significant": None, "significant_null_reason": TOO_FEW}
    assert runs.paired(np.array([1.0, np.nan, 3.0]), np.zeros(3))["low_null_reason"] == TOO_FEW
    six = runs.paired(np.arange(1.0, 7.0), np.zeros(6))  # 6 seeds: an interval
    assert six["estimate"] == 3.5 and six["low"] > 0 and six["significant"] is True
    adaptive = [{"initial_size": 100, "mean_size": 150.0, "final_size_mean": 160.0, "grow_fraction": 0.5,
                 "moves_toward_optimum": "moves toward", "score_iqm": 2.0, "vs_best_static": paired,
                 "vs_random_walk": paired, "vs_fixed_at_mean": six}]
    test = runs.differ_test(np.array([[1.0, 1.0], [3.0, 3.0]]))
    assert test == {"statistic": "IQM range", "observed": 2.0, "p_value": None, "seeds": 2, "resamples": 1999,
                    "p_value_null_reason": "too few seeds (n = 2) for a test"}
    said = verdict.verdict({"response": [{"memory_size": 100, "score_iqm": 1.0}, {"memory_size": 400, "score_iqm": 3.0}],
                            "best_static": 400, "worst_static": 100, "memory_size_effect": paired,
                            "memory_size_test": test,
                            "adaptive": adaptive, "controls": [{"initial_size": 100, "fixed_at_mean_size": 150}]})
    assert said["memory_size_matters"] is None
    assert said["memory_size_matters_null_reason"] == "too few seeds (n = 2) for a test"
    assert said["beats_controls"] == [None] and said["beats_controls_null_reason"] == TOO_FEW
    assert said["summary"] == (
        "Memory size matters: cannot tell (too few seeds): the sizes' IQMs spread by 2; best 400 vs worst 100: "
        f"2 [{TOO_FEW}] (IQM difference, paired over seeds). Static optimum: 400. aER moves toward it (or stays "
        "near it) from 1 of 1 starts and beats both controls (random walk, fixed at its mean size) from 0 of 1, "
        "cannot tell (too few seeds) from 1.")
    assert said["per_start"] == [
        f"from 100: mean size 150 (ends at 160, grow share 0.50): moves toward the optimum; score 2 vs best static 3 "
        f"(paired 2 [{TOO_FEW}]); vs random walk 2 [{TOO_FEW}]; vs fixed at its mean size 150: 3.5 "
        f"[{six['low']:.3g}, {six['high']:.3g}]"]


def test_statistics_of_values_that_overflow_float64_are_none_with_the_reason():
    """Scores near float64's largest overflowed in the differences: `paired` dropped such a seed without a word
    (the mean of the other 6 was "significant"), `paired_iqm` called an infinite estimate significant and
    `differ_test` gave p = 0 from inf − inf, where an exact test of 6 seeds cannot go below 2/64 (a probe)."""
    import warnings

    big = np.full(6, 1e308)
    why = "not finite in float64 (the values reach 1e+308: rescale them)"
    a, b = np.r_[big, 2.0], np.r_[-big, 1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the reason is said in the result; NumPy's overflow warnings were not)
        results = (runs.paired(a, b), runs.paired_iqm(big, -big), runs.differ_test(np.stack([big, -big])))
    for out in results[:2]:
        assert out["estimate"] is None and out["significant"] is None and out["significant_null_reason"] == why
    test = results[2]
    # Relabelled seeds can overflow where the observed spread does not: the p-value then moved (0.707 against
    # 0.675 for the same scores rescaled) with no reason and, once the warnings were silenced, no warning.
    scale = 1.7e308
    rows = np.array([[1, 0, 0, 1, 0, -1, 0, 1], [0, -1, 0, -1, 0, 1, -1, 0], [0.5, -1, 1, 0, 0, 0, 1, -1]])
    moved = runs.differ_test(rows * scale)
    assert moved["observed"] == pytest.approx(0.5 * scale) and moved["p_value"] is None
    assert moved["p_value_null_reason"].startswith("not finite in float64")
    assert 0.5 < runs.differ_test(rows * 1e8)["p_value"] < 1  # (the same scores, rescaled: a p-value)
    assert test["observed"] is None and test["p_value"] is None and test["p_value_null_reason"] == why
    # Diverged runs (NaN) are still left out, and finite differences unchanged: 6 seeds of +1, one left out.
    ok = runs.paired(np.r_[np.arange(6.0) + 1, np.nan], np.r_[np.arange(6.0), 5.0])
    assert ok["estimate"] == 1.0 and ok["significant"] is True


def test_a_study_without_a_spread_of_sizes_says_why_and_sends_to_refresh_only_without_a_test():
    """A study of one size (a --steps 20 cut: the grid collapses to [20]) or with no seed scored at every size
    has a test without a spread; the verdict sent the user to `study refresh`, which wrote the same sentence
    again (found by a probe). The refresh is advised only where no test was recorded (an older study.json)."""
    one = runs.differ_test(np.array([[1.0, 2.0, 3.0]]))
    unscored = runs.differ_test(np.array([[1.0, np.nan], [np.nan, 2.0]]))
    none_at_one = runs.differ_test(np.array([[1.0, 2.0], [3.0, 4.0], [np.nan, np.nan]]))
    assert one["observed"] is None and unscored["observed"] is None and none_at_one["observed"] is None
    reason = "fewer than 2 settings"
    assert one["observed_null_reason"] == reason
    # (it said "fewer than 2 settings or no finite seed" where 7 of 8 sizes had every run scored: a probe)
    assert unscored["observed_null_reason"] == "no seed has a score in every setting"
    assert none_at_one["p_value_null_reason"] == "no seed has a score in every setting (one setting has none)"
    result = _committed()
    for test, why in ((one, reason), (None, "no test of every size recorded: run jaxreplay study refresh")):
        result["memory_size_test"] = test
        said = verdict.verdict(result)
        assert said["memory_size_matters"] is None and said["memory_size_matters_null_reason"] == why
        assert said["summary"].startswith(f"Memory size matters: cannot tell ({why}): best ")


def _committed(env="CartPole-v1") -> dict:
    import pathlib

    return json.loads((pathlib.Path(__file__).resolve().parents[1] / "docs" / "study" / env / "study.json").read_text())


def test_a_two_seed_study_reports_too_few_seeds_not_intervals():
    # A study.json of 2 seeds written with intervals (as before the rule): refreshed, it has none.
    result = _committed()
    result.update(seeds=2, quick=True)
    fresh = study_lib.relabel(result)
    assert fresh["memory_size_effect"] == {"estimate": result["memory_size_effect"]["estimate"], "low": None,
                                           "high": None, "significant": None, "low_null_reason": TOO_FEW,
                                           "high_null_reason": TOO_FEW, "significant_null_reason": TOO_FEW}
    assert fresh["response"][0]["score_ci_low"] is None and fresh["controls"][0]["random_walk_ci_high"] is None
    assert fresh["paper_share"] == result["paper_share"]  # Clopper–Pearson: exact at any number of seeds
    assert fresh["verdict"]["memory_size_matters"] is None and study_lib.relabel(fresh) == fresh
    text = report.report(fresh)
    assert "Memory size matters: cannot tell (too few seeds)" in text
    assert f"| 100 | {fresh['response'][0]['score_iqm']:.3g} [{TOO_FEW}] |" in text
    assert "With 2 seeds there is no 95% interval" in text and "nan" not in text and "n/a, n/a" not in text
    table = study_lib.summary_table([fresh])
    assert fresh["memory_size_test"]["p_value"] is None
    estimate = f"{result['memory_size_effect']['estimate']:.3g}"
    assert "| CartPole-v1 | quick, 2 × 40000 | cannot tell (too few seeds): " + estimate + " [" + TOO_FEW + "] |" in table


def test_study_readme_refuses_a_study_given_twice_and_labels_quick_and_full(tmp_path, capsys):
    full = _committed()
    quick = study_lib.relabel(dict(full, quick=True, seeds=3))  # (as study refresh leaves it)
    for name, result in (("a", full), ("b", full), ("c", quick), ("all/CartPole-v1", full)):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "study.json").write_text(json.dumps(result))
    readme = tmp_path / "README.md"
    readme.write_text("<!-- study:begin -->\nold\n<!-- study:end -->\n")
    a, b, c, parent = (str(tmp_path / n) for n in ("a", "b", "c", "all"))
    for dirs, message in (
        ([a, a], f"{a}/study.json is given twice (as {a} and {a}); give each study once."),
        ([parent, f"{parent}/CartPole-v1"],
         f"{parent}/CartPole-v1/study.json is given twice (as {parent} and {parent}/CartPole-v1); give each study "
         "once."),
        ([a, b], f"{a}/study.json and {b}/study.json are the same study (CartPole-v1, full, 100 × 40000); give each "
                 "study once."),
    ):
        assert cli.main(["study", "readme", *dirs, "--readme", str(readme)]) == 2
        assert capsys.readouterr().err == f"jaxreplay study: error: {message}\n"
        assert "old" in readme.read_text()  # nothing written
    assert cli.main(["study", "readme", a, c, "--readme", str(readme)]) == 0
    labels = [line.split(" | ")[1] for line in readme.read_text().splitlines() if line.startswith("| CartPole-v1 |")]
    assert labels == ["full, 100 × 40000"] * 3 + ["quick, 3 × 40000"] * 3


def _fake_runs(stage, settings, auc, mean_size=None, diverged=None):
    """A stage's Runs from given per-run scores ``[setting, seed]`` (no sweep); ``diverged`` (default: every run
    without a score) the engine's flags."""
    import xarray as xr

    auc = np.asarray(auc, np.float64)
    sizes = np.asarray(mean_size if mean_size is not None else np.ones_like(auc), np.float64)
    flags = ~np.isfinite(auc) if diverged is None else np.asarray(diverged, bool)
    ds = xr.Dataset({"auc": (("config", "seed"), auc), "diverged": (("config", "seed"), flags)})
    return runs.Runs(stage, tuple(settings), ds, auc, auc, sizes, sizes)


def test_stages_are_declared_once_and_read_earlier_stages_by_label():
    plan = study_lib.design("CartPole-v1", quick=True, steps=400, seeds=2)
    declared = stages.declare(plan)
    assert [s.label for s in declared] == ["response", "adaptive", "sensitivity", "fixed-at-mean", "reading-sgd"]
    assert [s.seeds for s in declared] == [2] * 5
    assert (declared[-1].setup.optimizer, declared[-1].setup.batch_reduction) == ("sgd", "sum")
    response = declared[0].settings(plan, {})
    assert [s.label for s in response] == [f"fixed {n}" for n in plan.sizes] and plan.sizes == (20, 42, 89, 190, 400)
    assert [(s.point["memory_size"], s.point["adaptive_rule"]) for s in response] == [(n, 0) for n in plan.sizes]
    # The optimum is read from the response's scores (IQM over seeds): 89 here, so aER starts at 20, 89 and 400.
    done = {"response": _fake_runs("response", response, [[1, 1], [2, 2], [5, 5], [3, 3], [0, 0]])}
    adaptive = declared[1].settings(plan, done)
    assert [s.label for s in adaptive] == ["aER from 20", "aER from 89", "aER from 400", "random walk from 20",
                                           "random walk from 89", "random walk from 400"]
    assert [s.point["adaptive_rule"] for s in adaptive] == [1, 1, 1, 2, 2, 2]
    sensitivity = declared[2].settings(plan, done)
    assert [s.label for s in sensitivity] == ["default (aER)", *plan.sensitivity]
    assert {s.point["memory_size"] for s in sensitivity} == {20}
    # The fixed control sits at the seed mean of each aER's time-averaged size (rows found by label).
    done["adaptive"] = _fake_runs("adaptive", adaptive, np.zeros((6, 2)),
                                  [[30, 32], [70, 72], [350, 352], [1, 1], [1, 1], [1, 1]])
    fixed = declared[3].settings(plan, done)
    assert [(s.label, s.point["memory_size"]) for s in fixed] == [
        ("fixed at the mean size of aER from 20", 31), ("fixed at the mean size of aER from 89", 71),
        ("fixed at the mean size of aER from 400", 351)]


def test_a_missing_label_is_one_line_naming_it():
    settings = [stages.Setting("fixed 10", {}), stages.Setting("fixed 20", {})]
    response = _fake_runs("response", settings, [[1.0, 2.0], [3.0, 4.0]])
    assert list(runs.select(response, "fixed 20").auc) == [3.0, 4.0]
    with pytest.raises(ValueError) as caught:
        runs.select(response, "fixed 30")
    assert str(caught.value) == ("the study's stage 'response' has no setting 'fixed 30'; its settings: "
                                 "['fixed 10', 'fixed 20'].")


def test_a_study_json_whose_start_has_no_controls_is_refused(tmp_path, capsys):
    result = _committed()
    result["controls"][0]["initial_size"] = 7
    (tmp_path / "study.json").write_text(json.dumps(result))
    assert cli.main(["study", "refresh", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"jaxreplay study: error: the study result {tmp_path}/study.json is not one `jaxreplay study dqn` wrote "
        "(ValueError: no entry has initial_size = 100 (the entries have initial_size: [7, 240, 40000])).\n")


def test_the_best_minus_worst_contrast_is_the_difference_of_the_iqms_that_ranked_them():
    """Sizes were ranked by IQM but contrasted by the mean of paired differences, so a heavy right tail made
    "the best static size 100 beats the worst 1000 by -11.7 [-21.9, -1.6]" (found by a probe). The contrast is
    now IQM(best) − IQM(worst) over the same seeds, which the ranking makes ≥ 0."""
    from scipy.stats import trim_mean

    rng = np.random.default_rng(3)
    steady = 10.0 + rng.normal(0, 0.05, 20)
    spiky = np.where(np.arange(20) < 5, 60.0, 9.0) + rng.normal(0, 0.05, 20)  # 5 of 20 seeds learn
    assert trim_mean(steady, 0.25) > trim_mean(spiky, 0.25) and np.mean(steady - spiky) < -10
    settings = [stages.Setting("fixed 100", {"memory_size": 100}), stages.Setting("fixed 1000", {"memory_size": 1000})]
    assert runs.optimum(_fake_runs("response", settings, [steady, spiky])) == (100, 1000)
    effect = runs.paired_iqm(steady, spiky)
    assert effect["estimate"] == pytest.approx(trim_mean(steady, 0.25) - trim_mean(spiky, 0.25), abs=1e-12)
    assert effect["estimate"] > 0 and effect["low"] <= effect["estimate"] <= effect["high"]
    # The mean paired difference (still the replay study's contrast) has the other sign here.
    assert runs.paired(steady, spiky)["estimate"] < 0
    # Seeds are resampled in pairs: a constant shift has a zero-width interval.
    shifted = runs.paired_iqm(spiky + 2.0, spiky)
    assert shifted["estimate"] == pytest.approx(2.0) and shifted["high"] - shifted["low"] < 1e-9


def test_whether_memory_size_matters_is_a_test_of_every_size_not_of_the_two_chosen_ends():
    """Picking the best and worst of 8 equal sizes and testing their paired difference finds a "difference"
    far more often than 5%; the permutation test of the IQMs' spread (sizes relabelled within seeds) does not,
    and it finds a real effect."""
    rng = np.random.default_rng(0)
    false_test, false_ends = 0, 0
    trials = 40
    for _ in range(trials):
        seeds = rng.normal(0, 1, 20)  # a seed effect shared by every size (common random numbers)
        scores = seeds + rng.normal(0, 1, (8, 20))  # no size effect
        iqms = np.array([runs.ci(s)["estimate"] for s in scores])
        false_test += runs.differ_test(scores, resamples=499)["p_value"] < 0.05
        false_ends += bool(runs.paired_iqm(scores[np.argmax(iqms)], scores[np.argmin(iqms)], resamples=500)["significant"])
    assert false_test <= 5 and false_ends >= 12, (false_test, false_ends)  # 14 of 40: a 35% false-positive rate
    effect = rng.normal(0, 1, (8, 20)) + np.linspace(0, 2, 8)[:, None]
    test = runs.differ_test(effect)
    assert test["p_value"] == pytest.approx(1 / 2000) and test["seeds"] == 20 and test["resamples"] == 1999


def test_the_verdict_never_reads_one_ranked_size_as_equal_iqms_nor_says_beats_by_a_negative_number():
    """From a probe of edited runs.csv files: (1) the only size with at most a quarter of its runs diverged was
    also the lowest, so best == worst, and the verdict said "no: every static size has the same IQM" beside a
    test of p = 0.0005; (2) ranked by each size's IQM over its own scored runs but paired over the seeds both
    scored, the verdict said "the best static size 240 beats the worst 100 by -0.0251"."""
    test = {"statistic": "IQM range", "observed": 0.99, "p_value": 0.0005, "seeds": 74, "resamples": 1999}
    zero = {"estimate": 0.0, "low": 0.0, "high": 0.0, "significant": False}
    matters, text, why = verdict._matters(240, 240, zero, test)
    assert matters is True and why == "" and "same IQM" not in text
    assert text.endswith("; 240 is the only size ranked and has the lowest IQM: no best − worst contrast")
    negative = {"estimate": -0.0251, "low": -0.21, "high": 0.0126, "significant": False}
    matters, text, _ = verdict._matters(240, 100, negative, test)
    assert matters is True and "beats" not in text
    assert "paired over the seeds both scored, the best static size 240 (by its IQM over its own scored runs) vs " \
           "the worst 100 is -0.0251 [-0.21, 0.0126]: the ranking rests on runs without a score" in text
    positive = dict(negative, estimate=0.1, low=0.05, high=0.2, significant=True)
    assert verdict._matters(240, 100, positive, test)[1].endswith("the best static size 240 beats the worst 100 by "
                                                                   "0.1 [0.05, 0.2]")
    assert verdict._matters(240, 240, zero, dict(test, observed=0.0))[1].startswith("no: every static size has")


def test_a_mostly_diverged_size_is_never_the_optimum_and_divergence_is_counted():
    """A size whose runs mostly diverged was ranked on its survivors and became the "static optimum", and
    study.json, report.md and the README counted no diverged run (found by a probe)."""
    settings = [stages.Setting(f"fixed {n}", {"memory_size": n}) for n in (100, 1000, 10000)]
    survivors = np.where(np.arange(20) < 18, np.nan, 50.0)  # 18 of 20 diverged; the 2 left score best
    scores = [survivors, np.full(20, 20.0), np.full(20, np.nan)]
    fake = _fake_runs("response", settings, scores)
    assert runs.optimum(fake) == (1000, 1000)
    assert [runs.diverged(runs.select(fake, s.label)) for s in settings] == [18, 0, 20]
    # Runs without a score that did not diverge (no training episode ended) are counted apart, and rank the same.
    flags = [np.arange(20) < 10, np.zeros(20, bool), np.ones(20, bool)]
    fake = _fake_runs("response", settings, scores, diverged=flags)
    assert runs.optimum(fake) == (1000, 1000)
    selected = [runs.select(fake, s.label) for s in settings]
    assert [(runs.diverged(s), runs.unscored(s)) for s in selected] == [(10, 8), (0, 0), (20, 0)]
    five = np.where(np.arange(20) < 5, np.nan, 50.0)  # a quarter diverged: the IQM would have trimmed them anyway
    assert runs.optimum(_fake_runs("response", settings, [five, np.full(20, 20.0), np.full(20, 10.0)])) == (100, 10000)
    # A size whose lowest quarter diverged: its scored runs' IQM (13) is above the steady size's 12, but counted
    # as its lowest scores they rank it at 10.5 (it was ranked best on its survivors: a probe).
    lowest_lost = np.where(np.arange(20) < 5, np.nan, np.arange(1.0, 21.0))
    assert runs.ci(lowest_lost)["estimate"] == 13.0 and runs.ranking_iqm(lowest_lost) == 10.5
    assert runs.ranking_iqm(np.arange(1.0, 21.0)) == 10.5 and runs.ranking_iqm(np.full(20, np.nan)) == -np.inf
    fake = _fake_runs("response", settings, [lowest_lost, np.full(20, 12.0), np.full(20, 11.0)])
    assert runs.optimum(fake) == (1000, 100)
    result = _committed()
    result["response"][0]["diverged"] = 18
    result["diverged"] = {"response": 18, "adaptive": 0}
    summary = study_lib.relabel(result)["verdict"]["summary"]
    assert summary.endswith(" 18 runs diverged and have no score (by stage: response 18; static sizes: 100: 18); a "
                            "size with more than a quarter of its runs diverged is never the optimum.")
    assert "| memory size | score IQM [95% CI] | final greedy return IQM [95% CI] | diverged runs |" in report.report(
        study_lib.relabel(result))
    # Runs without a finished episode are said apart from the diverged ones, in the verdict and the report.
    result["unscored"] = {"response": 0, "adaptive": 3}
    said = ("3 runs have no score although they did not diverge (by stage: adaptive 3): no training episode ended "
            f"within their {result['total_steps']} steps.")
    assert said in study_lib.relabel(result)["verdict"]["summary"] and said in report.report(study_lib.relabel(result))


def test_soft_divergence_is_recorded_per_run_counted_by_stage_and_said(tiny_study, tmp_path):
    """The studies' reports counted no soft-diverged run (Q-values beyond every return, weights finite): runs.csv
    now holds the flag per run, study.json counts the scored ones by stage, and the verdict says so; a
    runs.csv from before the flag (the committed studies) reads as before."""
    import shutil

    out, result, rows = tiny_study
    assert all(r["soft_diverged"] in ("True", "False") for r in rows)
    by_stage: dict[str, int] = {}
    for r in rows:
        by_stage[r["stage"]] = by_stage.get(r["stage"], 0) + (r["soft_diverged"] == "True" and r["diverged"] == "False")
    assert result["soft_diverged"] == by_stage
    shutil.copytree(out, tmp_path / "s", ignore=shutil.ignore_patterns("sweeps"))
    # Three response runs flagged, and one adaptive run that also diverged (no score: not counted as soft).
    flagged = _rows(rows, "response")[:3]
    lost = _rows(rows, "adaptive")[0]
    for r in rows:
        r["soft_diverged"] = str(any(r is f for f in flagged) or r is lost)
    lost.update(auc="nan", final_return="nan", diverged="True")
    with (tmp_path / "s" / "runs.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    refreshed = study_lib.refresh(tmp_path / "s")
    assert refreshed["soft_diverged"] == {stage: 3 * (stage == "response") for stage in by_stage}
    said = ("3 runs soft-diverged (by stage: response 3): their Q-values went beyond every discounted return of the "
            "rewards they saw (van Hasselt et al. 2018); they kept finite weights and are scored like the rest.")
    assert refreshed["verdict"]["summary"].endswith(said)
    assert said in (tmp_path / "s" / "report.md").read_text()
    # A damaged flag names the file; the column absent, nothing is said of soft divergence.
    (tmp_path / "s" / "runs.csv").write_text((tmp_path / "s" / "runs.csv").read_text().replace(",True", ",Yes", 1))
    with pytest.raises(ValueError, match="is not a runs.csv that `jaxreplay study dqn` wrote"):
        study_lib.refresh(tmp_path / "s")
    for r in rows:
        del r["soft_diverged"]
    with (tmp_path / "s" / "runs.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert "soft_diverged" not in study_lib.refresh(tmp_path / "s")


def test_refresh_recomputes_the_committed_study_from_its_runs_csv(tmp_path):
    """``study refresh`` recomputes every statistic of study.json from runs.csv (the committed studies' own
    numbers are what it gives, to the digit: they were refreshed by it), keeps what runs.csv lacks, and a
    second refresh changes nothing."""
    import pathlib
    import shutil

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "study" / "CartPole-v1"
    shutil.copytree(committed, tmp_path / "s")
    stored = json.loads((committed / "study.json").read_text())
    result = study_lib.refresh(tmp_path / "s")
    assert result == stored
    assert (tmp_path / "s" / "report.md").read_text() == (committed / "report.md").read_text()
    # The numbers follow the runs: fixed 240's seeds raised by 1 move its IQM and the contrasts by exactly that.
    import csv

    rows = list(csv.DictReader((committed / "runs.csv").open()))
    for row in rows:
        if row["stage"] == "response" and row["memory_size"] == "240":
            row["auc"] = repr(float(row["auc"]) + 1.0)
    with (tmp_path / "s" / "runs.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    moved = study_lib.refresh(tmp_path / "s")
    old240, new240 = (text.find(r["response"], memory_size=240) for r in (stored, moved))
    assert new240["score_iqm"] == pytest.approx(old240["score_iqm"] + 1.0, abs=1e-9)
    assert moved["memory_size_effect"]["estimate"] == pytest.approx(stored["memory_size_effect"]["estimate"] + 1.0)
    assert moved["adaptive"][0]["diagnostics"]["noisy_fraction"] == stored["adaptive"][0]["diagnostics"]["noisy_fraction"]


def test_study_readme_refuses_a_study_whose_stored_verdict_is_not_todays(tmp_path, capsys):
    """The README printed study.json's stored verdict, e.g. "yes" for a 3-seed study written before the 6-seed
    rule, where report.md refreshed says "cannot tell" (found by a probe): it is refused, pointing at refresh."""
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "study.json").write_text(json.dumps(dict(_committed("Acrobot-v1"), seeds=3)))
    readme = tmp_path / "README.md"
    readme.write_text("<!-- study:begin -->\nold\n<!-- study:end -->\n")
    assert cli.main(["study", "readme", str(tmp_path / "s"), "--readme", str(readme)]) == 2
    assert capsys.readouterr().err == (
        f"jaxreplay study: error: {tmp_path}/s/study.json: its stored verdict is not what today's rules give from "
        f"its numbers: run jaxreplay study refresh {tmp_path}/s first (it recomputes study.json and report.md, no "
        "runs).\n")
    assert readme.read_text() == "<!-- study:begin -->\nold\n<!-- study:end -->\n"
    assert cli.main(["study", "refresh", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    assert cli.main(["study", "readme", str(tmp_path / "s"), "--readme", str(readme)]) == 0
    assert "| Acrobot-v1 | full, 3 × 200000 | cannot tell (too few seeds): " in readme.read_text()


@pytest.mark.parametrize(
    "damage", ["truncated", "foreign", "not a number", "not utf-8", "another game", "a stray row", "a flag misspelt"]
)
def test_refresh_names_a_damaged_runs_csv(tmp_path, capsys, damage):
    """`study refresh` on a truncated, foreign or undecodable runs.csv ended in a traceback or a line naming no
    file; another game's rows were read by stage and point alone, a row of no setting was dropped, and a flag not
    spelt `True` read as False (found by probes): one line naming the file, and study.json untouched."""
    import pathlib
    import shutil

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "study" / "CartPole-v1"
    shutil.copytree(committed, tmp_path / "s")
    runs = tmp_path / "s" / "runs.csv"
    data = runs.read_bytes()
    last = data.splitlines(keepends=True)[-1]
    runs.write_bytes({"truncated": data[:700], "foreign": b"a,b\n1,2\n",
                      "not a number": data.replace(b",10.1146", b",abc", 1), "not utf-8": data[:300] + b"\xe9",
                      "another game": data.replace(b"CartPole-v1,", b"Acrobot-v1,"),
                      "a stray row": data + last.replace(b",reading-sgd,", b",bogus,"),
                      "a flag misspelt": data.replace(b"False", b"false", 1)}[damage])
    assert cli.main(["study", "refresh", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jaxreplay study: error: {runs}") and err.count("\n") == 1, err
    said = {"another game": "rows of Acrobot-v1 in a study of CartPole-v1", "a stray row": "1 rows belong to no setting",
            "a flag misspelt": "is not a runs.csv that `jaxreplay study dqn` wrote (KeyError: 'false')"}
    assert said.get(damage, "") in err, err
    assert (tmp_path / "s" / "study.json").read_bytes() == (committed / "study.json").read_bytes()


def test_a_reproduction_refuses_a_study_folder_and_the_reverse(tmp_path, capsys):
    """`reproduce dqn --out` a study's folder overwrote its report.md, runs.csv (study refresh's input) and figures
    without a word (found by a probe): each reproduction claims its folder as the studies do."""
    import pathlib
    import shutil

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "study" / "CartPole-v1"
    shutil.copytree(committed, tmp_path / "study")  # (written before owners were recorded: a study by its study.json)
    before = {p.name: p.read_bytes() for p in (tmp_path / "study").iterdir()}
    for command in (["reproduce", "dqn", "--env", "CartPole-v1", "--quick"], ["reproduce", "linesearch"]):
        assert cli.main([*command, "--out", str(tmp_path / "study")]) == 2
        assert capsys.readouterr().err.endswith(
            f"{tmp_path / 'study'} holds the output of `jaxreplay study dqn`; `jaxreplay {' '.join(command[:2])}` "
            "would overwrite its files: give it another --out.\n")
    assert {p.name: p.read_bytes() for p in (tmp_path / "study").iterdir()} == before
    from jaxreplay._files import claim_folder

    claim_folder(tmp_path / "fig4", "reproduce dqn")
    assert cli.main(["study", "dqn", "--env", "CartPole-v1", "--quick", "--out", str(tmp_path / "fig4")]) == 2
    assert "holds the output of `jaxreplay reproduce dqn`; `jaxreplay study dqn` would overwrite" in capsys.readouterr().err


def test_study_readme_reads_a_folder_and_its_games_and_refuses_a_marker_in_the_note(tmp_path, capsys):
    """A folder holding a study and, later, its games' subfolders (`study dqn --env all` into it) gave a README
    block of the folder's own study only, the games silently missing; a --note holding a block marker broke
    every later update of the README (found by a probe)."""
    import pathlib
    import shutil

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "study"
    shutil.copytree(committed / "CartPole-v1", tmp_path / "all")
    for game in ("Acrobot-v1", "MountainCar-v0"):
        shutil.copytree(committed / game, tmp_path / "all" / game)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- study:begin -->\nold\n<!-- study:end -->\n")
    assert cli.main(["study", "readme", str(tmp_path / "all"), "--readme", str(readme)]) == 0
    games = {line.split(" | ")[0].strip("| ") for line in readme.read_text().splitlines() if "| full," in line}
    assert games == {"CartPole-v1", "Acrobot-v1", "MountainCar-v0"}
    before = readme.read_text()
    assert cli.main(["study", "readme", str(tmp_path / "all"), "--readme", str(readme),
                     "--note", "x <!-- study:end --> y"]) == 2
    assert "holds the block marker '<!-- study:end -->' (in --note?): remove it." in capsys.readouterr().err
    assert readme.read_text() == before


@pytest.mark.parametrize("command", ["readme", "replay-readme"])
@pytest.mark.parametrize("trace", [".jaxreplay-owner", "sweeps", "sweep.lock"])
def test_study_readme_refuses_a_game_whose_study_is_running_or_was_interrupted(tmp_path, capsys, command, trace):
    """A game folder whose rerun had cleared its outputs (running, or Ctrl-C'd then) has no study.json: its rows
    vanished from the README block with exit 0 (found by a probe). It is refused, naming the folder."""
    import pathlib
    import shutil

    source = "study" if command == "readme" else "replay_study"
    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / source
    for game in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0"):
        shutil.copytree(committed / game, tmp_path / "all" / game, ignore=shutil.ignore_patterns("sweeps"))
    readme = tmp_path / "README.md"
    block = "study" if command == "readme" else "replay-study"
    readme.write_text(f"<!-- {block}:begin -->\nold\n<!-- {block}:end -->\n")
    assert cli.main(["study", command, str(tmp_path / "all"), "--readme", str(readme)]) == 0
    capsys.readouterr()
    before = readme.read_text()
    game = tmp_path / "all" / "CartPole-v1"
    for name in ("study.json", "report.md", "runs.csv", "curves.csv"):  # what a rerun clears before it writes
        (game / name).unlink(missing_ok=True)
    (game / trace).mkdir() if trace == "sweeps" else (game / trace).write_text("study dqn\n")
    assert cli.main(["study", command, str(tmp_path / "all"), "--readme", str(readme)]) == 2
    err = capsys.readouterr().err
    assert f"{game} holds a study without its study.json: one is running there, or was interrupted" in err, err
    assert err.count("\n") == 1 and readme.read_text() == before
    if command == "readme":  # `study refresh` there said to run the study first, which its lock then refused
        assert cli.main(["study", "refresh", str(game)]) == 2
        assert "holds a study without its study.json: one is running there" in capsys.readouterr().err


def test_a_stage_whose_settings_share_a_configuration_runs_it_once_for_both(tmp_path):
    """Two rules whose runs averaged the same memory size give one fixed-at-mean point twice: the engine refused
    the repeated point, after every other stage had run, and every rerun failed the same way (found by a probe
    on a tiny Acrobot replay study). Each configuration now runs once and both settings read its runs."""
    from jaxreplay.experiments import dqn

    setup = dqn.Setup(env_id="CartPole-v1", total_steps=60, steps_per_segment=60, hidden_sizes=(4,), max_capacity=64,
                      batch_size=4, eval_episodes=0)
    common = {"learning_starts": 20}
    settings = (runs.Setting("fixed at mean of aER", {"memory_size": 30}), runs.Setting("fixed 50", {"memory_size": 50}),
                runs.Setting("fixed at mean of aER-5%", {"memory_size": 30}))
    out = runs.run_stage(tmp_path, "fixed-at-mean", settings, seeds=2, common=common, setup=setup, progress=False)
    assert out.ds.sizes["config"] == 3 and [s.label for s in out.settings] == [s.label for s in settings]
    a, b = runs.select(out, settings[0].label), runs.select(out, settings[2].label)
    np.testing.assert_array_equal(a.auc, b.auc)
    np.testing.assert_array_equal(a.ds.capacity_mean.values, b.ds.capacity_mean.values)
    swept = json.loads(next((tmp_path / "sweeps").glob("fixed-at-mean-*/sweep.json")).read_text())
    assert [p["memory_size"] for p in swept["config"]["points"]] == [30, 50]  # each configuration once


def test_a_rerun_clears_the_earlier_outputs_when_it_writes_and_one_writer_holds_the_folder(tiny_study, tmp_path,
                                                                                        monkeypatch):
    """A rerun with another option killed while writing left the earlier run's study.json and report.md beside
    the new figures (a mixed folder), left its temporary files for good, and two such commands at once both wrote
    the folder (their stage sweeps lock folders of their own) (found by a probe). The study now holds the folder's
    lock and deletes its earlier outputs, and their temporaries, as it starts writing."""
    import shutil

    from jaxreplay.engine.store import lock_folder
    from jaxreplay.paper.reproduce.study import figures

    out = tmp_path / "study"
    shutil.copytree(tiny_study[0], out)
    stale = out / f".tmp-{'a' * 32}-report.md"  # a killed write's
    stale.write_text("partial")
    with lock_folder(out), pytest.raises(ValueError, match="is being written by another"):
        study_lib.study(out, "CartPole-v1", steps=STEPS, seeds=SEEDS, progress=False)
    with lock_folder(out), pytest.raises(ValueError, match="is being written by another"):
        study_lib.refresh(out)  # nor a refresh, which rewrites study.json and report.md

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(figures, "draw", killed)
    before = (out / "runs.csv").stat().st_mtime_ns
    with pytest.raises(KeyboardInterrupt):
        study_lib.study(out, "CartPole-v1", steps=STEPS, seeds=SEEDS, progress=False)
    # Killed while drawing: the earlier outputs are gone, the CSV files (written first) are this call's, and
    # there is no study.json or report.md.
    written = {name for name in study_lib.OUTPUTS if (out / name).exists()}
    assert written == {"runs.csv", "curves.csv"} and not stale.exists()
    assert (out / "runs.csv").stat().st_mtime_ns > before
    monkeypatch.undo()
    result = study_lib.study(out, "CartPole-v1", steps=STEPS, seeds=SEEDS, progress=False)
    assert all((out / name).exists() for name in study_lib.OUTPUTS)
    assert result["verdict"] == tiny_study[1]["verdict"] and not list(out.glob(".tmp-*"))
    # Every run was the first call's: study.json says so (the runtime is this call's alone).
    assert result["runs"] == tiny_study[1]["runs"] == result["runs_resumed"] > 0 == tiny_study[1]["runs_resumed"]
    runs = result["runs"]  # ... and so does the report (it gave this call's seconds as the study's time)
    assert f"in the call that finished it, which found {runs:,} of its {runs:,} runs computed by earlier calls" in (
        out / "report.md").read_text()
    assert not (out / "sweep.lock").exists()  # released


def test_a_study_resumes_at_the_chunk_size_its_sweeps_recorded_when_none_is_given(tmp_path):
    """A study begun with --chunk-size 2 and rerun without it was refused, "rerun with chunk_size 2 (--chunk-size
    2) or none": the command replaced a missing --chunk-size with 4 × seeds (found by a probe). It now resumes at
    the chunk size its stage sweeps recorded; a new study takes 4 × seeds; a given one is used as given."""
    import types

    from jaxreplay.engine.batch import Batch
    from jaxreplay.paper.reproduce.study import writer

    asked = []

    class Stop(Exception):
        pass

    def stages_run(chosen, out, progress, chunk_size):
        asked.append(chunk_size)
        raise Stop

    parts = writer.StudyParts(types.SimpleNamespace(run=stages_run), None, None, None)
    chosen = types.SimpleNamespace(seeds=5)
    out = tmp_path / "study"
    assert writer.recorded_chunk_size(out) is None
    for given in (None, 3):
        with pytest.raises(Stop):
            writer.run_study(out, "study dqn", (), chosen, parts, None, False, given)
    (out / "sweeps" / "response-0123456789").mkdir(parents=True)
    batch = Batch("cpu", "cpu", 2, 1, "").to_dict()
    (out / "sweeps" / "response-0123456789" / "sweep.json").write_text(json.dumps({"batch": batch}))
    assert writer.recorded_chunk_size(out) == 2
    for given in (None, 3):
        with pytest.raises(Stop):
            writer.run_study(out, "study dqn", (), chosen, parts, None, False, given)
    assert asked == [20, 3, 2, 3]


def test_the_response_figure_says_which_starts_have_no_score_and_promises_no_interval_it_does_not_draw(monkeypatch,
                                                                                                       tmp_path):
    """response.png dropped an aER start whose every run was unscored (its legend entry gone, its controls still
    drawn in its colour), and labelled the static curve "95% CI" in every quick study, whose 3 seeds give no
    interval (found by a probe). Drawn from a made-up result whose numbers encode their settings."""
    import types

    import matplotlib
    import xarray as xr

    matplotlib.use("Agg")
    from jaxreplay.paper import plots
    from jaxreplay.paper.reproduce.study import figures

    drawn = {}
    saved = plots.save
    def save(fig, path):  # (the top panel's legend and lines, read before save closes the figure)
        top = fig.axes[0]
        drawn[path.name] = ([t.get_text() for t in top.get_legend().get_texts()],
                            {(float(x), np.nan if y is None else float(y)) for line in top.lines
                             for x, y in zip(*line.get_data())})
        return saved(fig, path)

    monkeypatch.setattr(plots, "save", save)
    sizes, starts, segments = (100, 400, 1600), (100, 1600), np.arange(1, 4) * 1000
    design = types.SimpleNamespace(env_id="Acrobot-v1", quick=True, sizes=sizes)

    def the_runs(stage, labels_values):  # train_return and capacity constant per setting, 3 seeds
        shape = (len(labels_values), 3, len(segments))
        ds = xr.Dataset({name: (("config", "seed", "segment"), np.broadcast_to(
            np.array([v[k] for _, v in labels_values], float)[:, None, None], shape))
            for k, name in enumerate(("train_return", "capacity"))}, coords={"segment": segments})
        zero = np.zeros(shape[:2])
        return runs.Runs(stage, tuple(runs.Setting(label, {}) for label, _ in labels_values), ds, zero, zero, zero,
                         zero)

    every_run = {stages.RESPONSE: the_runs(stages.RESPONSE, [(stages.fixed(n), (n, n)) for n in sizes]),
                 stages.ADAPTIVE: the_runs(stages.ADAPTIVE, [(stages.aer(s), (s, s + 7)) for s in starts]
                                           + [(stages.walk(s), (s, s + 3)) for s in starts])}

    def result(interval: bool, unscored: int | None):
        ci = (lambda v, d: v + d) if interval else (lambda v, d: None)
        return dict(
            response=[dict(memory_size=n, score_iqm=n / 10, score_ci_low=ci(n / 10, -1), score_ci_high=ci(n / 10, 1))
                      for n in sizes],
            adaptive=[dict(initial_size=s, mean_size=s + 7.0, score_iqm=None if s == unscored else s / 10 + 0.5,
                           score_ci_low=None, score_ci_high=None) for s in starts],
            controls=[dict(initial_size=s, random_walk_mean_size=s + 3.0, random_walk_score_iqm=s / 10 + 0.3,
                           fixed_at_mean_size=s + 7, fixed_at_mean_score_iqm=None if s == unscored else s / 10 + 0.7)
                      for s in starts],
            best_static=400, starts=list(starts))

    figures.response_figure(tmp_path, design, result(interval=True, unscored=1600), every_run)
    legend, points = drawn["response.png"]
    assert legend == ["static memory (IQM, 95% CI)", "from 1600: no scored run (aER, fixed at mean)",
                      "aER from 100 (at its mean size)"]  # (matplotlib lists lines before error bars)
    # Every point that has a score is drawn where study.json puts it; the unscored ones are not drawn.
    assert {(107.0, 10.5), (103.0, 10.3), (107.0, 10.7), (1603.0, 160.3)} <= points
    assert not {p for p in points if p[0] == 1607.0 and np.isfinite(p[1])}
    figures.response_figure(tmp_path, design, result(interval=False, unscored=None), every_run)
    legend, _ = drawn["response.png"]
    assert legend == ["static memory (IQM; too few seeds for a CI)", "aER from 100 (at its mean size)",
                      "aER from 1600 (at its mean size)"]


def test_refresh_says_when_the_earlier_stages_no_longer_choose_the_settings_a_stage_ran(tmp_path):
    """A runs.csv whose static optimum moves (here one size's scores raised; in a probe, a ranking change) gives
    aER starts the study never ran: refresh said "not this study's runs.csv" of the study's own file."""
    import pathlib
    import shutil

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "study" / "CartPole-v1"
    out = tmp_path / "cart"
    shutil.copytree(committed, out, ignore=shutil.ignore_patterns("sweeps", "*.png"))
    with open(out / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row["stage"] == "response" and row["memory_size"] == "3100":
            row["auc"] = str(float(row["auc"]) + 5.0)
    with open(out / "runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(ValueError, match=r"stage 'adaptive' ran settings that the earlier stages' results no longer "
                                         r"choose \(none of its rows is at \{'memory_size': 3100, .*'aER from 3100' now "
                                         r"is\): how they are chosen \(the static optimum\) changed since the study ran"):
        study_lib.refresh(out)
