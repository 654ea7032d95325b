"""The replay study (``jaxreplay study replay``): capacity × replay ratio × n-step after Fedus et al. 2020.

One tiny study (CartPole cut to 200 steps, 6 seeds: the fewest that give an interval) runs once per
module; its numbers in ``study.json`` are recomputed here from the per-run table it writes (``runs.csv``,
scores written with 17 significant digits, so the recomputation is exact). The verdict's words are
checked on synthetic contrasts, the design without running anything.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from jaxreplay import cli
from jaxreplay.paper.reproduce import replay_study
from jaxreplay.paper.reproduce.replay_study import analysis, stages, verdict
from jaxreplay.paper.reproduce.study import runs as runs_lib

STEPS, SEEDS = 200, 6


# The tiny study (five programs compiled, about 1.5 min of the default run on 2 cores) is computed once for the
# module; the tests that read it add seconds (they were marked slow, so CI never ran them: two had gone stale).
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("replay_study")
    result = replay_study.study(out, "CartPole-v1", steps=STEPS, seeds=SEEDS, progress=False)
    with open(out / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    return out, result, rows


def _auc(rows, stage, setting):
    chosen = [r for r in rows if r["stage"] == stage and r["setting"] == setting]
    assert [int(r["seed"]) for r in chosen] == list(range(SEEDS))
    return np.array([float(r["auc"]) for r in chosen])


def _interval(values):
    return runs_lib.ci(np.asarray(values, np.float64), "mean")


def test_the_design_is_a_log_grid_of_capacity_times_ratio_times_n_with_equal_age_cells():
    plan = replay_study.design("CartPole-v1")
    assert plan.seeds == 100 and plan.total_steps == 200_000 and plan.reduced == ""
    assert plan.capacities == (1600, 6400, 25600, 102400) and plan.ratios == (0.25, 1.0, 4.0) and plan.n_steps == (1, 3)
    assert len(plan.cells()) == 24
    # One program per ratio, its update slots that ratio's; the target period in gradient updates.
    assert [plan.grid_setup(r).max_replay_ratio for r in plan.ratios] == [0.25, 1.0, 4.0]
    assert plan.unit_setup.target_period_in_updates and plan.unit_setup.max_n_step == 3
    assert plan.common["target_period"] == 50  # the tuned preset's 500 steps at its ratio 0.1
    assert plan.adaptive_setup.adaptive and plan.adaptive_setup.max_replay_ratio == 1.0
    pairs = analysis.equal_age_pairs(plan, 3)
    assert len(pairs) == 6 and ((6400, 0.25, 3), (1600, 1.0, 3)) not in pairs
    assert ((1600, 1.0, 3), (6400, 0.25, 3)) in pairs  # (higher ratio, lower ratio), both of age 1600
    for a, b in pairs:
        assert a[1] == 4 * b[1] and replay_study.settings.age(a[0], a[1]) == replay_study.settings.age(b[0], b[1])
    older = analysis.equal_ratio_pairs(plan, 1)
    assert len(older) == 9 and all(a[1] == b[1] and a[0] == 4 * b[0] for a, b in older)
    minatar = replay_study.design("Breakout-MinAtar")
    assert minatar.seeds == 20 and minatar.total_steps == 1_000_000
    assert minatar.reduced == "1,000,000 steps (the preset's: 5,000,000), 20 seeds (the full study's: 100)"
    # The seeds asked for, not the game's constant (at 100 seeds MinAtar's note said "20 seeds"; CartPole at 6
    # seeds said nothing) (found by a probe).
    assert replay_study.design("Breakout-MinAtar", seeds=100).reduced == "1,000,000 steps (the preset's: 5,000,000)"
    assert replay_study.design("CartPole-v1", seeds=6).reduced == "6 seeds (the full study's: 100)"
    quick = replay_study.design("Acrobot-v1", quick=True)
    assert quick.seeds == 3 and quick.total_steps == 20_000 and quick.reduced == ""
    assert quick.unit_setup.total_steps // quick.unit_setup.steps_per_segment == 10
    # A smoke run shorter than the largest grid capacity (64 below 64 steps) starts aER there too: the adaptive
    # program held only the run's steps, so --steps 20 ran the grid, then failed on "points[1].memory_size = 64"
    # (found by a probe).
    for steps in (20, 40, 60, 80):
        short = replay_study.design("CartPole-v1", steps=steps)
        assert max(stages.starts(short)) == max(short.capacities) <= short.adaptive_setup.max_capacity


def test_cells_are_the_iqm_of_the_runs_in_runs_csv(tiny):
    _, result, rows = tiny
    for entry in result["cells"]:
        c, r, n = entry["memory_size"], entry["replay_ratio"], entry["n_step"]
        chosen = [x for x in rows if x["setting"] == stages.cell(c, r, n)]
        auc = np.array([float(x["auc"]) for x in chosen])
        final = np.array([float(x["final_return"]) for x in chosen])
        expected = runs_lib.ci(auc)
        assert len(chosen) == SEEDS and entry["auc_iqm"] == expected["estimate"]
        assert (entry["auc_ci_low"], entry["auc_ci_high"]) == (expected["low"], expected["high"])
        assert entry["auc_ci_low"] <= entry["auc_iqm"] <= entry["auc_ci_high"]
        assert entry["final_iqm"] == runs_lib.ci(final)["estimate"]
        assert entry["oldest_policy_age"] == c * r
        assert all(float(x["oldest_policy_age"]) == c * r for x in chosen)  # the engine's, for a full memory
        assert all(int(x["final_memory_size"]) == c for x in chosen)
        # Runs without a score: the diverged ones, and apart from them those where no training episode ended.
        assert entry["diverged"] == sum(x["diverged"] == "True" for x in chosen)
        unscored = sum(x["auc"] == "nan" and x["diverged"] == "False" for x in chosen)
        assert entry.get("unscored", 0) == unscored and ("unscored" in entry) == (unscored > 0)
    # Each run's soft-divergence flag, and the scored ones counted by stage.
    counted: dict[str, int] = {}
    for x in rows:
        assert x["soft_diverged"] in ("True", "False")
        counted[x["stage"]] = counted.get(x["stage"], 0) + (x["soft_diverged"] == "True" and x["diverged"] == "False")
    assert result["soft_diverged"] == counted
    # The IQM of six seeds: the mean of the middle four (the cells run n, then ratio, then capacity).
    smallest = result["capacities"][0]
    entry = result["cells"][4]
    assert (entry["memory_size"], entry["replay_ratio"], entry["n_step"]) == (smallest, 1.0, 1)
    v = np.sort([float(x["auc"]) for x in rows if x["setting"] == stages.cell(smallest, 1.0, 1)])
    assert v.size == SEEDS and entry["auc_iqm"] == pytest.approx(np.mean(v[1:5]), rel=1e-12)


def test_contrasts_are_paired_differences_recomputed_from_runs_csv(tiny):
    _, result, rows = tiny
    top, low = max(result["capacities"]), min(result["capacities"])

    def auc(c, r, n):
        return _auc(rows, stages.grid(r), stages.cell(c, r, n))

    diffs = {n: auc(top, 1.0, n) - auc(low, 1.0, n) for n in (1, 3)}
    for entry in result["capacity_effect"]:
        expected = _interval(diffs[entry["n_step"]])
        assert {k: entry[k] for k in ("estimate", "low", "high")} == expected
        assert entry["significant"] == (expected["low"] > 0 or expected["high"] < 0)
    assert {k: result["interaction"][k] for k in ("estimate", "low", "high")} == _interval(diffs[3] - diffs[1])
    for key in ("ratio_at_equal_age", "age_at_equal_ratio"):
        for entry in result[key]:
            per_seed = np.mean([auc(*a_key) - auc(*b_key) for a_key, b_key in _keys(entry["pairs"])], axis=0)
            assert entry["estimate"] == pytest.approx(np.mean(per_seed), rel=1e-12, abs=1e-12)
            assert (entry["low"], entry["high"]) == (_interval(per_seed)["low"], _interval(per_seed)["high"])


def _keys(pairs):
    def parse(label):  # "capacity C, ratio R, n = N"
        c, r, n = label.split(", ")
        return int(c.split()[1]), float(r.split()[1]), int(n.split()[-1])

    return [(parse(a), parse(b)) for a, b in pairs]


def test_the_adaptive_stage_runs_every_rule_of_the_table_with_its_controls(tiny):
    out, result, rows = tiny
    a = result["adaptive"]
    assert a["n_step"] in (1, 3) and a["replay_ratio"] == 1.0
    chosen = max((1, 3), key=lambda n: (verdict_estimate(result, n), n))
    assert a["n_step"] == chosen  # the n of the larger capacity effect
    ends = (min(result["capacities"]), max(result["capacities"]))
    assert [(r["rule"], r["initial_size"]) for r in a["rules"]] == [
        (rule.name, s) for rule in stages.STAGE_RULES for s in ends
    ]
    for entry in a["rules"]:
        rule = next(r for r in stages.STAGE_RULES if r.name == entry["rule"])
        setting = stages.adaptive(rule, entry["initial_size"])
        mine = [r for r in rows if r["setting"] == setting]
        assert all(
            float(r["adaptive_relative_tolerance"]) == rule.relative and int(r["n_step"]) == a["n_step"] for r in mine
        )
        assert entry["mean_size"] == pytest.approx(np.mean([float(r["mean_memory_size"]) for r in mine]), rel=1e-5)
        # Leaving out the floor's forced enlargements (all grows) can only lower the share (no check was invalid).
        free = entry["free_grow_fraction"]
        assert free is None or 0 <= free <= entry["grow_fraction"] + 1e-12
        walk = _auc(rows, stages.ADAPTIVE, stages.walk(entry["initial_size"]))
        assert entry["vs_random_walk"]["estimate"] == _interval(_auc(rows, stages.ADAPTIVE, setting) - walk)["estimate"]
        at_mean = [r for r in rows if r["setting"] == stages.fixed_at_mean(rule, entry["initial_size"])]
        assert len(at_mean) == SEEDS and all(int(r["memory_size"]) == entry["fixed_at_mean_size"] for r in at_mean)
    text = (out / "report.md").read_text()
    assert "quick" not in text.split("\n")[2] and "cut to 200 steps (a smoke run)" in text
    assert "## Compared with the literature" in text and "arXiv:2007.06700" in text
    for name in (
        "study.json",
        "report.md",
        "runs.csv",
        "curves.csv",
        "heatmap.png",
        "capacity.png",
        "learning_curves.png",
    ):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "study.json").read_text())["verdict"] == result["verdict"]


def verdict_estimate(result, n):
    return next(e["estimate"] for e in result["capacity_effect"] if e["n_step"] == n)


def test_a_rerun_computes_nothing(tiny, monkeypatch):
    from jaxreplay.engine import sweep as sweep_lib

    out, result, rows = tiny
    computed, swept = [], []
    run = sweep_lib.run

    def counted(*args, **kwargs):
        outcome = run(*args, **kwargs)
        computed.append(outcome.stats.runs_computed)
        swept.append(outcome.stats.runs)
        return outcome

    monkeypatch.setattr(sweep_lib, "run", counted)
    again = replay_study.study(out, "CartPole-v1", steps=STEPS, seeds=SEEDS, progress=False)
    assert computed == [0] * 5  # three grid programs, the adaptive stage and its fixed-at-mean control
    for key in ("cells", "capacity_effect", "interaction", "adaptive", "verdict"):
        assert again[key] == result[key]
    # The first call computed every run; the rerun found them all. A run is counted once where two settings read
    # it (runs.csv has a row per setting and seed: two controls whose runs averaged one memory size share theirs),
    # so that the report does not say that runs were left to compute (it said 228 of 240).
    runs = sum(swept)
    assert result["runs_resumed"] == 0 and again["runs_resumed"] == again["runs"] == result["runs"] == runs
    assert runs <= len(rows) and len({(x["stage"], x["setting"], x["seed"]) for x in rows}) == len(rows)
    report = (out / "report.md").read_text()
    assert f"which found {runs:,} of its {runs:,} runs computed by earlier calls" in report


def test_the_report_says_whose_time_its_runtime_is():
    from jaxreplay.paper.reproduce.study.text import runtime

    assert runtime({"runtime_s": 283.4, "runs": 1380, "runs_resumed": 0}) == "283 s"
    assert runtime({"runtime_s": 12.6}) == "13 s"  # a study.json written before the counts
    assert runtime({"runtime_s": 95.0, "runs": 1380, "runs_resumed": 690}) == (
        "95 s in the call that finished it, which found 690 of its 1,380 runs computed by earlier calls "
        "(their time not counted)"
    )


def test_the_readme_block_is_generated_from_study_json(tiny, tmp_path, capsys):
    out, result, _ = tiny
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- replay-study:begin -->\nold\n<!-- replay-study:end -->\n")
    assert cli.main(["study", "replay-readme", str(out), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old" not in text and "| CartPole-v1 | full (cut short), 6 × 200 |" in text
    assert f"n = 1: {result['verdict']['capacity_helps'][0]['answer']}" in text


def _effect(estimate, low, high):
    if low is None:
        why = "too few seeds (n = 3) for an interval"
        return {
            "estimate": estimate,
            "low": None,
            "high": None,
            "significant": None,
            "low_null_reason": why,
            "high_null_reason": why,
            "significant_null_reason": why,
        }
    return {"estimate": estimate, "low": low, "high": high, "significant": low > 0 or high < 0}


@pytest.mark.parametrize(
    ("effect", "answer", "words"),
    [
        (_effect(5.0, 1.0, 9.0), "yes", "yes: capacity 400 beats 10 at n = 3 by 5 [1, 9] (paired over seeds)"),
        (
            _effect(1.0, -2.0, 4.0),
            "not detectably",
            "not detectably: capacity 400 does not detectably beat 10 at n = 3 (1 [-2, 4], an interval that includes 0)",
        ),
        (_effect(-5.0, -9.0, -1.0), "no", "no: capacity 400 does worse than 10 at n = 3 (-5 [-9, -1], below 0)"),
        (
            _effect(5.0, None, None),
            "cannot tell (too few seeds)",
            "cannot tell (too few seeds) at n = 3: 5 [too few seeds (n = 3) for an interval]",
        ),
    ],
)
def test_capacity_answers_yes_no_or_cannot_tell(effect, answer, words):
    said = verdict.capacity({"n_step": 3, **effect}, 400, 10)
    assert said["answer"] == answer and words in said["line"]


@pytest.mark.parametrize(
    ("ratio", "age", "answer"),
    [
        (_effect(3.0, 1.0, 5.0), _effect(0.5, -1.0, 2.0), "the replay ratio"),
        (_effect(0.5, -1.0, 2.0), _effect(-3.0, -5.0, -1.0), "the oldest-policy age"),
        (_effect(3.0, 1.0, 5.0), _effect(3.0, 1.0, 5.0), "the replay ratio and the oldest-policy age"),
        (_effect(0.5, -1.0, 2.0), _effect(0.5, -1.0, 2.0), "neither detectably"),
        (_effect(3.0, 1.0, 5.0), _effect(3.0, None, None), "cannot tell (too few seeds)"),
    ],
)
def test_ratio_or_age_follows_which_contrast_excludes_zero(ratio, age, answer):
    said = verdict.follows({"n_step": 1, **ratio}, {"n_step": 1, **age})
    assert said["answer"] == answer and said["line"].startswith(
        f"{answer} at n = 1" if answer.startswith("cannot") else f"the score follows {answer} at n = 1"
    )


def test_interaction_is_yes_only_above_zero():
    assert verdict.interaction(_effect(2.0, 0.5, 3.5), 3, 1)["answer"] == "yes"
    assert verdict.interaction(_effect(-2.0, -3.5, -0.5), 3, 1)["answer"] == "no"
    # An interval that includes 0 found no effect: not a "no" (the interaction of the committed CartPole study).
    said = verdict.interaction(_effect(61.7, -6.47, 130.0), 3, 1)
    assert said == {"answer": "not detectably", "line": "not detectably: the capacity effect is not detectably larger "
                    "with n = 3 than with n = 1 (61.7 [-6.47, 130], an interval that includes 0)"}
    assert verdict.interaction(_effect(2.0, None, None), 3, 1)["answer"] == "cannot tell (too few seeds)"


def test_an_effect_not_detected_neither_differs_from_the_literature_nor_confirms_its_no():
    from jaxreplay.paper.reproduce.replay_study.report import _compare

    result = {"seeds": 6, "quick": True, "total_steps": 4000}
    assert _compare(result, "not detectably", "no") == (
        "Consistent with theirs: we detect no effect either (which does not show there is none).")
    assert _compare(result, "not detectably", "yes").startswith("We do not detect it at 6 seeds (our interval includes 0)")
    assert _compare(result, "no", "yes").startswith("We differ; likely reasons") and _compare(result, "yes", "yes") == "We agree."


def test_a_new_adaptive_rule_is_one_row_of_the_table(monkeypatch):
    """The adaptive stage's settings follow :data:`STAGE_RULES`: a row added runs from both starts, with
    its own fixed-at-mean control."""
    extra = stages.AdaptiveRule("the walk as a rule", "RULE_RANDOM", relative=0.0)
    monkeypatch.setattr(stages, "STAGE_RULES", stages.STAGE_RULES + (extra,))
    plan = replay_study.design("CartPole-v1", steps=200, seeds=2)
    monkeypatch.setattr(stages, "adaptive_n_step", lambda design, done: 3)
    labels = [s.label for s in stages._adaptive(plan, {})]
    assert labels[:8] == [
        "aER from 3",
        "aER from 192",
        "aER, relative ε = 5% from 3",
        "aER, relative ε = 5% from 192",
        "aER with accumulated evidence from 3",
        "aER with accumulated evidence from 192",
        "the walk as a rule from 3",
        "the walk as a rule from 192",
    ]
    points = [s.point for s in stages._adaptive(plan, {})]
    assert [p["adaptive_rule"] for p in points[:8]] == [1, 1, 1, 1, 3, 3, 2, 2]
    assert [p["adaptive_relative_tolerance"] for p in points[:8]] == [0, 0, 0.05, 0.05, 0, 0, 0, 0]
    assert labels[8:] == ["random walk from 3", "random walk from 192", "fixed 3", "fixed 192"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "0"], "--seeds must be >= 1, got 0."),
        (["--steps", "30"], "--steps must be a multiple of 20 (whole aER checks), got 30."),
        (["--steps", "-20"], "--steps must be >= 1, got -20."),
        (["--chunk-size", "0"], "--chunk-size must be >= 1, got 0."),
    ],
)
def test_bad_input_is_one_line_naming_the_option_before_anything_runs(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert cli.main(["study", "replay", "--env", "CartPole-v1", "--out", str(out), "--quick", *argv]) == 2
    assert capsys.readouterr().err == f"jaxreplay study: error: {message}\n"
    assert not out.exists()


def test_an_unknown_game_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        cli.main(["study", "replay", "--env", "Pong-v0", "--out", "x"])
    assert "--env: invalid choice: 'Pong-v0'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="env"):
        replay_study.design("Pong-v0")


def test_study_replay_runs_at_full_scale_unless_quick_and_refuses_both():
    parser = cli.build_parser()
    argv = ["study", "replay", "--env", "Breakout-MinAtar", "--out", "o"]
    assert parser.parse_args(argv).quick is False
    assert parser.parse_args([*argv, "--quick"]).quick is True and parser.parse_args([*argv, "--full"]).quick is False
    with pytest.raises(SystemExit):
        parser.parse_args([*argv, "--quick", "--full"])



@pytest.mark.parametrize(("argv", "message"), [(["--chunk-size", "0"], "--chunk-size must be >= 1, got 0.")])
def test_the_dqn_study_names_a_bad_option_as_typed_before_making_its_folder(tmp_path, capsys, argv, message):
    """`study dqn` as `study replay`: the option as typed (it used to say `chunk_size`, after making --out)."""
    out = tmp_path / "out"
    assert cli.main(["study", "dqn", "--env", "CartPole-v1", "--out", str(out), *argv]) == 2
    assert capsys.readouterr().err == f"jaxreplay study: error: {message}\n"
    assert not out.exists()


def test_a_study_refuses_the_folder_of_the_other_study(tmp_path, capsys):
    """`study dqn` into a `study replay` folder (and back) would overwrite study.json, report.md and the CSVs and
    leave the other's figures beside them: refused in one line before anything runs, whether the folder records
    its owner or only holds the other study's study.json (written before owners were recorded)."""
    from jaxreplay._files import OWNER_FILE, claim_folder

    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "study.json").write_text('{"env": "CartPole-v1", "ratios": [0.25, 1.0, 4.0]}')
    assert cli.main(["study", "dqn", "--env", "CartPole-v1", "--out", str(legacy), "--quick"]) == 2
    assert capsys.readouterr().err == (
        f"jaxreplay study: error: {legacy} holds the output of `jaxreplay study replay`; `jaxreplay study dqn` "
        "would overwrite its files: give it another --out.\n"
    )
    assert sorted(p.name for p in legacy.iterdir()) == ["study.json"]
    claimed = claim_folder(tmp_path / "new" / "dqn", "study dqn")
    assert (claimed / OWNER_FILE).read_text() == "study dqn\n"
    assert claim_folder(claimed, "study dqn") == claimed  # its own command resumes
    assert cli.main(["study", "replay", "--env", "CartPole-v1", "--out", str(claimed), "--quick"]) == 2
    assert "holds the output of `jaxreplay study dqn`" in capsys.readouterr().err


def test_replay_readme_refuses_a_study_given_twice_or_a_stale_verdict(tmp_path, capsys):
    """`study replay-readme` wrote a study given twice as identical rows, and printed a stored verdict that
    today's rules no longer give (found by a probe): both refused, as `study readme` does; nothing written."""
    import pathlib

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "replay_study" / "CartPole-v1"
    result = json.loads((committed / "study.json").read_text())
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- replay-study:begin -->\nold\n<!-- replay-study:end -->\n")
    before = readme.read_text()
    assert cli.main(["study", "replay-readme", str(committed), str(committed), "--readme", str(readme)]) == 2
    message = f"{committed}/study.json is given twice (as {committed} and {committed}); give each study once."
    assert capsys.readouterr().err == f"jaxreplay study: error: {message}\n"
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "study.json").write_text(json.dumps(dict(result, verdict=dict(result["verdict"], summary="old words"))))
    assert cli.main(["study", "replay-readme", str(stale), "--readme", str(readme)]) == 2
    assert capsys.readouterr().err == (
        f"jaxreplay study: error: {stale}/study.json: its stored verdict is not what today's rules give from its "
        f"numbers: run jaxreplay study refresh {stale} (it recomputes study.json and report.md, without runs).\n")
    assert readme.read_text() == before
    assert cli.main(["study", "refresh", str(stale)]) == 0  # ... as the message says (no runs.csv: the answers)
    assert "its answers only" in capsys.readouterr().out
    assert cli.main(["study", "replay-readme", str(stale), "--readme", str(readme)]) == 0
    assert cli.main(["study", "replay-readme", str(committed), "--readme", str(readme)]) == 0
    assert "| CartPole-v1 | quick (CPU), 6 × 4000 |" in readme.read_text()


def test_a_contrast_counts_the_seeds_it_stands_on():
    """A seed with a diverged run in any of a contrast's cells drops out of it: the contrast says so."""
    design = replay_study.design("CartPole-v1", quick=True, seeds=SEEDS)
    top, low = max(design.capacities), min(design.capacities)
    keys = [(top, 1.0, 1), (low, 1.0, 1)]
    auc = np.array([[5.0, 6.0, 7.0, 8.0, 9.0, 10.0], [1.0, np.nan, 2.0, 3.0, 2.0, 1.0]])
    settings = tuple(runs_lib.Setting(stages.cell(*k), {}) for k in keys)
    import xarray as xr

    ds = xr.Dataset({"diverged": (("config", "seed"), ~np.isfinite(auc))})
    grid = runs_lib.Runs(stages.grid(1.0), settings, ds, auc, auc, auc, auc)
    c = analysis.contrast({stages.grid(1.0): grid}, 1, [(keys[0], keys[1])])
    assert c.seeds == 5
    assert c.effect == runs_lib.paired(auc[0, [0, 2, 3, 4, 5]], auc[1, [0, 2, 3, 4, 5]])
    # Each cell counts its own diverged runs; its IQM stands on the others.
    bottom, upper = (analysis._cell({stages.grid(1.0): grid}, *k) for k in (keys[1], keys[0]))
    assert (bottom.diverged, upper.diverged) == (1, 0)
    assert bottom.auc == runs_lib.ci(auc[1, [0, 2, 3, 4, 5]])


def test_diverged_runs_are_counted_in_the_report_and_the_readme_row():
    """Runs without a score vanished from report.md and study.json: each cell's IQM and each contrast stood on
    the seeds left while the header said every seed (found by a probe). Now the summary counts them by stage,
    each cell its own and each contrast its seeds; a study without one reads as before (its committed report)."""
    import pathlib

    from jaxreplay.paper.reproduce.replay_study import report

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "replay_study" / "CartPole-v1"
    result = json.loads((committed / "study.json").read_text())
    assert report.report(result) == (committed / "report.md").read_text()
    cell = result["cells"][0]
    cell["diverged"] = 1
    result["capacity_effect"][0]["seeds"] = 5
    result["diverged"] = {"grid-ratio-0.25": 1, "grid-ratio-1": 0}
    result["verdict"] = verdict.verdict(result)
    said = "1 runs diverged and have no score (by stage: grid-ratio-0.25 1): each cell's IQM and each contrast"
    assert said in result["verdict"]["summary"]
    text = report.report(result)
    assert said in text and f"{report.brief_score(cell, 'auc')}" in text and "(1 diverged)" in text
    assert f"{report.brief(result['capacity_effect'][0])} (5 of 6 seeds)" in text
    assert report.label(result) == "quick (CPU), 6 × 4000, 1 runs diverged"


def test_runs_without_a_finished_episode_are_not_called_diverged():
    """A run in which no training episode ended (a --steps cut shorter than an episode: in CartPole the runs whose
    pole never fell) has no score, and was counted and reported as diverged (found by a probe: "17 runs
    diverged", none flagged in runs.csv). Now such runs are counted apart, by stage and per cell, and said so."""
    import pathlib

    import xarray as xr

    from jaxreplay.paper.reproduce.replay_study import analysis, report

    ds = xr.Dataset({"diverged": (("config", "seed"), np.array([[False, True, False, False]]))})
    setting = stages.Setting(stages.cell(2, 1.0, 1), {"memory_size": 2})
    auc = np.array([[1.0, np.nan, np.nan, 3.0]])
    found = runs_lib.select(runs_lib.Runs("grid-ratio-1", (setting,), ds, auc, auc, auc, auc), setting.label)
    assert (runs_lib.diverged(found), runs_lib.unscored(found)) == (1, 1)
    cell = analysis._cell({"grid-ratio-1": runs_lib.Runs("grid-ratio-1", (setting,), ds, auc, auc, auc, auc)},
                          2, 1.0, 1)
    assert (cell.diverged, cell.unscored) == (1, 1)
    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "replay_study" / "CartPole-v1"
    result = json.loads((committed / "study.json").read_text())
    assert "unscored" not in result and all("unscored" not in c for c in result["cells"])
    result["cells"][0]["unscored"] = 2
    result["unscored"] = {"grid-ratio-0.25": 2, "grid-ratio-1": 0}
    result["verdict"] = verdict.verdict(result)
    said = ("2 runs have no score although they did not diverge (by stage: grid-ratio-0.25 2): no training episode "
            "ended within their 4000 steps.")
    assert said in result["verdict"]["summary"] and "diverged and have no score" not in result["verdict"]["summary"]
    text = report.report(result)
    assert said in text and "(2 without a finished episode)" in text
    assert report.label(result) == "quick (CPU), 6 × 4000, 2 runs without a finished episode"


def test_the_figures_draw_a_study_in_which_no_cell_has_a_score(tmp_path, monkeypatch):
    """A study cut shorter than an episode (MountainCar at 100 steps: no episode ends) has no score in any cell:
    its capacity figure's log axis failed in matplotlib after every run, and neither study.json nor report.md
    was written (found by a probe). The figures now draw such a study, saying it has no score."""
    import pathlib

    import matplotlib

    matplotlib.use("Agg")
    from jaxreplay.paper.reproduce.replay_study import figures

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "replay_study" / "CartPole-v1"
    result = json.loads((committed / "study.json").read_text())
    for cell in result["cells"]:
        cell.update(auc_iqm=None, auc_ci_low=None, auc_ci_high=None)
    from jaxreplay.paper import plots

    drawn, looks = [], []
    saved = plots.save
    def save(fig, path):  # (what the first panel shows, read before save closes the figure)
        drawn.append((fig.axes[0].get_xlim(), [t.get_text() for t in fig.axes[0].texts]))
        images = fig.axes[0].images
        looks.append(({t.get_color() for t in fig.axes[0].texts}, images[0].cmap.get_bad() if images else None))
        return saved(fig, path)

    monkeypatch.setattr(plots, "save", save)
    plan = replay_study.design("CartPole-v1", quick=True)
    assert figures.capacity_figure(tmp_path, plan, result, {}) == "capacity.png"
    assert figures.heatmap_figure(tmp_path, plan, result, {}) == "heatmap.png"
    assert (tmp_path / "capacity.png").stat().st_size > 0 and (tmp_path / "heatmap.png").stat().st_size > 0
    # The capacity axis spans the grid, and the figure says why it holds no line; the heatmap's cells say n/a.
    (capacity_xlim, capacity_texts), (_, heatmap_texts) = drawn
    low, high = min(plan.capacities), max(plan.capacities)
    assert capacity_xlim == pytest.approx((low / 1.5, high * 1.5))
    assert capacity_texts == ["no cell has a score (no run finished a training episode)"]
    assert set(heatmap_texts) == {"n/a"} and len(heatmap_texts) == len(plan.capacities) * len(plan.ratios)
    # ... readable: dark on an opaque grey cell (it was white text on a transparent cell over the white axes).
    colours, bad = looks[1]
    assert colours == {"k"} and tuple(bad) == pytest.approx((0.85, 0.85, 0.85, 1.0))


def test_soft_diverged_runs_are_said_in_the_summary_and_the_report():
    """Runs whose Q-values went beyond every return (weights finite, scored) were not counted in a study's
    report; a study from before the flag has no count and reads as before."""
    import pathlib

    from jaxreplay.paper.reproduce.replay_study import report

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "replay_study" / "CartPole-v1"
    result = json.loads((committed / "study.json").read_text())
    assert result["soft_diverged"]["grid-ratio-4"] == 47  # the committed study counts them ...
    assert "62 runs soft-diverged (by stage: grid-ratio-1 5, grid-ratio-4 47, adaptive 6" in report.report(result)
    old = {k: v for k, v in result.items() if k != "soft_diverged"}  # ... one from before the flag does not
    old["verdict"] = verdict.verdict(old)
    assert "soft-diverged" not in report.report(old) and "soft-diverged" not in old["verdict"]["summary"]
    result = old | {"soft_diverged": {"grid-ratio-0.25": 0, "grid-ratio-1": 2}}
    result["verdict"] = verdict.verdict(result)
    soft = "2 runs soft-diverged (by stage: grid-ratio-1 2): their Q-values went beyond every discounted return"
    assert soft in result["verdict"]["summary"] and soft in report.report(result)
    result["soft_diverged"] = {"grid-ratio-0.25": 0, "grid-ratio-1": 0}
    assert verdict.verdict(result)["summary"] == old["verdict"]["summary"]


def test_the_free_checks_grow_share_is_reported_where_the_study_counted_the_floor():
    """An adaptive rule's grow share mixes the floor's forced enlargements with its free decisions: a study that
    counted them reports both (table and line); a study from before the count reads as before."""
    import pathlib

    from jaxreplay.paper.reproduce.replay_study import report

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "replay_study" / "CartPole-v1"
    result = json.loads((committed / "study.json").read_text())
    assert "| grow share | of the free checks |" in report.report(result)  # the committed study counts them
    for rule in result["adaptive"]["rules"]:  # one from before the count
        del rule["free_grow_fraction"]
    assert "of the free checks" not in report.report(result)
    for i, rule in enumerate(result["adaptive"]["rules"]):
        rule["free_grow_fraction"] = 0.25 + i / 100
    first = result["adaptive"]["rules"][0]
    assert ", 0.25 of the free checks); score" in verdict.adaptive_line(first)
    text = report.report(result)
    assert "| grow share | of the free checks | score IQM [95% CI] |" in text
    assert f"| {first['final_size_mean']:.0f} | {first['grow_fraction']:.2f} | 0.25 | " in text


def test_of_two_commands_claiming_a_new_folder_at_once_one_records_itself(tmp_path, monkeypatch):
    """The owner marker was read, then written: of two claimers at the same instant the refused one's name could
    end in the marker (4 times in 5, found by a probe), refusing the real owner's resume. It is now created
    exclusively: the second reads the first's and is refused; the marker keeps the first."""
    import pathlib

    from jaxreplay._files import OWNER_FILE, claim_folder

    folder = tmp_path / "new"
    real = pathlib.Path.mkdir

    def the_other_claims_meanwhile(self, *args, **kwargs):  # both read "no marker"; the other records first
        real(self, *args, **kwargs)
        if self == folder:
            (folder / OWNER_FILE).write_text("study replay\n")

    monkeypatch.setattr(pathlib.Path, "mkdir", the_other_claims_meanwhile)
    with pytest.raises(ValueError, match="holds the output of `jaxreplay study replay`; `jaxreplay study dqn`"):
        claim_folder(folder, "study dqn")
    assert (folder / OWNER_FILE).read_text() == "study replay\n"
    assert sorted(p.name for p in folder.iterdir()) == [OWNER_FILE]  # no staged file left


def test_refresh_rewrites_a_replay_studys_answers_and_report_from_its_numbers(tmp_path, capsys):
    """`jaxreplay study refresh` took only a DQN study; a replay study's words could not be read again by today's
    rules without rerunning it. A study whose runs.csv predates aER's check counts (before 2026-11-30) is
    relabelled from its study.json (its statistics stay the study's)."""
    import pathlib
    import shutil

    from jaxreplay.paper.reproduce.replay_study.report import report

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "replay_study" / "CartPole-v1"
    out = tmp_path / "cart"
    shutil.copytree(committed, out)
    with open(out / "runs.csv", newline="") as f:
        rows = list(csv.reader(f))
    keep = [i for i, name in enumerate(rows[0]) if name not in runs_lib.CSV_COUNTS | runs_lib.CSV_ADDED_COUNTS]
    with open(out / "runs.csv", "w", newline="") as f:
        csv.writer(f).writerows([[row[i] for i in keep] for row in rows])
    older = (out / "runs.csv").read_bytes()
    stored = json.loads((out / "study.json").read_text())
    stale = json.loads(json.dumps(stored))
    stale["verdict"]["interaction"] = {"answer": "no", "line": "no: an answer in earlier words"}
    (out / "study.json").write_text(json.dumps(stale))
    (out / "report.md").write_text("an earlier report")
    assert cli.main(["study", "refresh", str(out)]) == 0
    assert capsys.readouterr().out == (
        f"{out} (its answers only: its runs.csv, if any, predates aER's check counts): {stored['verdict']['summary']}\n")
    again = json.loads((out / "study.json").read_text())
    assert again == stored and again["verdict"] == verdict.verdict(stale)
    assert (out / "report.md").read_text() == report(stored) == (committed / "report.md").read_text()
    assert (out / "runs.csv").read_bytes() == older  # nothing rerun or rewritten
    with pytest.raises(ValueError, match="no study.json; run jaxreplay study replay"):
        replay_study.refresh(tmp_path / "nothing")


def test_refresh_recomputes_a_replay_study_from_its_runs_csv(tiny, tmp_path, capsys):
    """A replay study's runs.csv holds aER's check counts and every digit of the scores and sizes, so `study
    refresh` recomputes every statistic of study.json from it (it only relabelled before: a change in the
    statistics needed the study rerun, on a GPU for the full one)."""
    import shutil

    from jaxreplay.engine import sweep as sweep_lib

    out, result, rows = tiny
    # A run read by two settings (two controls whose runs averaged one memory size) is one run of the study:
    # counted as its sweep computed it, as runs_resumed is (a rerun said "found 228 of its 240 runs").
    folders = sorted((out / "sweeps").iterdir())
    swept = sum(ds.sizes["config"] * ds.sizes["seed"] for ds in map(sweep_lib.load, folders))
    assert len(folders) == 5 and result["runs"] == swept <= len(rows)
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("sweeps"))  # (the runs.csv alone)
    stored = json.loads((copy / "study.json").read_text())
    damaged = json.loads(json.dumps(stored))
    damaged["capacity_effect"][0].update(estimate=1e9, low=1e9, high=1e9, significant=True)
    damaged["adaptive"]["rules"][0]["grow_fraction"] = 0.123
    damaged["cells"][0]["auc_iqm"] = -5.0
    (copy / "study.json").write_text(json.dumps(damaged))
    assert cli.main(["study", "refresh", str(copy)]) == 0
    assert json.loads((copy / "study.json").read_text()) == stored  # every number back, bit for bit
    assert capsys.readouterr().out == f"{copy}: {stored['verdict']['summary']}\n"
    # Another study's runs.csv (another game's rows) is refused in one line, nothing rewritten.
    other = tmp_path / "other"
    shutil.copytree(copy, other)
    text = (other / "runs.csv").read_text().replace("CartPole-v1,", "Acrobot-v1,")
    (other / "runs.csv").write_text(text)
    with pytest.raises(ValueError, match="rows of Acrobot-v1 in a study of CartPole-v1: not this study's runs.csv"):
        replay_study.refresh(other)
    assert json.loads((other / "study.json").read_text()) == stored
    # A runs.csv cut short, empty, or without one count column is refused, never passed over for study.json's
    # numbers (every score set to 1.0 and a column dropped was "refreshed" to the stored numbers: a probe).
    header, *rows = (copy / "runs.csv").read_text().splitlines()
    dropped = header.split(",").index("forced")
    for name, text in (("cut", header[:120]), ("empty", ""), ("no column", "\n".join(
            ",".join(v for i, v in enumerate(line.split(",")) if i != dropped) for line in [header, *rows]))):
        (other / "runs.csv").write_text(text)
        with pytest.raises(ValueError, match="is not a runs.csv that `jaxreplay study replay` wrote"):
            replay_study.refresh(other)
        assert cli.main(["study", "refresh", str(other)]) == 2, name
        assert json.loads((other / "study.json").read_text()) == stored
    capsys.readouterr()
    # A file, or the games' parent folder, is said so (it said "no study.json; run jaxreplay study dqn").
    assert cli.main(["study", "refresh", str(copy / "runs.csv")]) == 2
    assert capsys.readouterr().err.endswith(f"{copy / 'runs.csv'} is a file: give a study's folder (the one holding "
                                            "study.json).\n")
    assert cli.main(["study", "refresh", str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith(f"{tmp_path} holds no study.json but studies in its folders copy, other: "
                                            f"give those (e.g. {copy}).\n")


@pytest.mark.parametrize("game", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"])
def test_refresh_recomputes_the_committed_studies_from_their_runs_csv(game, tmp_path):
    """The committed quick studies' runs.csv hold what their study.json is computed from: `study refresh`
    gives back every number bit for bit (and so would give today's numbers, were the statistics to change)."""
    import pathlib
    import shutil

    committed = pathlib.Path(__file__).resolve().parents[1] / "docs" / "replay_study" / game
    out = tmp_path / game
    shutil.copytree(committed, out)
    assert replay_study.refresh(out) == json.loads((committed / "study.json").read_text())
    assert (out / "report.md").read_text() == (committed / "report.md").read_text()
