"""Tests of ``jaxreplay reproduce all`` (jaxreplay.paper.reproduce.paper) and the README's generated claims table."""

from __future__ import annotations

import json
import shutil
import pathlib
import re

import pytest

from jaxreplay.paper.reproduce import dqn as rdqn
from jaxreplay.paper.reproduce import linesearch as rl
from jaxreplay.paper.reproduce import paper

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_report_has_every_claim_and_every_figure(paper_tiny):
    out, summary = paper_tiny
    ids = [c["id"] for c in summary["claims"]]
    assert ids == list(rl.CLAIM_IDS) + ["dqn_CartPole-v1_aer_from_100"]
    assert {c["agrees"] for c in summary["claims"]} <= set(paper.AGREEMENT)
    stored = json.loads(summary["claims_json"].read_text())
    assert stored["claims"] == summary["claims"]
    assert stored["context"]["dqn_seeds"] == 2 and stored["context"]["dqn_steps"] == {"CartPole-v1": 500}
    # The recorded command names the one game it ran (it dropped --env, naming a run of all three: a probe).
    assert stored["context"]["command"] == "jaxreplay reproduce all --quick --seeds 2 --env CartPole-v1"
    report = summary["report"].read_text()
    assert f"## Claims ({len(ids)}: " in report
    for claim in summary["claims"]:
        assert paper.claims_table([claim]).splitlines()[-1] in report
    assert rdqn.iqm_table(summary["dqn"]["CartPole-v1"]["iqm"]) in report
    # 2 seeds: no "95% CI" printed (it covers at most 50%; printed, found by a probe), the reason said instead.
    iqm = summary["dqn"]["CartPole-v1"]["iqm"]
    assert iqm and all(v["low"] is None and v["high"] is None for v in iqm.values())
    assert {v["low_null_reason"] for v in iqm.values()} == {"too few seeds (n = 2) for an interval"}
    assert all(f"| {name} | {v['estimate']:.2f} | too few seeds (n = 2) for an interval |" in report for name, v in iqm.items())
    # Every figure of every part is embedded, and every link resolves to a PNG.
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert len(links) == len(rl.FIGURES) + 2
    for link in links:
        assert (out / link).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", link


def test_dqn_row_restates_the_games_statistic(paper_tiny):
    _, summary = paper_tiny
    stat = summary["dqn"]["CartPole-v1"]["percent"][100]
    row = summary["claims"][-1]
    assert row["paper"] == "71%" and row["part"] == "dqn/CartPole-v1"
    assert row["ours"] == f"{stat['percent']:.0f}% [{stat['low']:.0f}%, {stat['high']:.0f}%] ({stat['wins']}/2 seeds)"


def test_rerun_resumes_every_part(paper_tiny, tmp_path):
    out, first = paper_tiny
    # The LineSearch part's record names its files within the folder (it kept absolute paths into the folder it was
    # first written in), and the part may be a link to another disk: its figures' paths were resolved through
    # the link, out of the folder, and the rerun failed after every part, with report.md gone (found by a probe).
    record = json.loads((out / "linesearch" / "summary.json").read_text())
    assert record["out_dir"] == "." and record["csv"] == "metric_grid.csv" and record["report"] == "report.md"
    assert record["figures"] == {name: name for name in record["figures"]} and len(record["figures"]) > 5
    shutil.move(out / "linesearch", tmp_path / "elsewhere")
    (out / "linesearch").symlink_to(tmp_path / "elsewhere")
    again = paper.reproduce(out, quick=True, seeds=2, progress=False, envs=("CartPole-v1",),
                            linesearch_mode="tiny", dqn_steps=500)
    assert again["linesearch"]["resumed"] is True
    # The folder is a copy of the one the fixture computed (tests/conftest.py): the resumed part's paths are the
    # copy's (they were the original's, and the report's links failed: found by sharing the fixture).
    ls = again["linesearch"]
    assert {ls["out_dir"], ls["csv"], ls["report"], *ls["figures"].values()} <= {
        str(out / "linesearch"), *(str(p) for p in (out / "linesearch").iterdir())}
    assert "](linesearch/fig" in (out / "report.md").read_text() and "](../" not in (out / "report.md").read_text()
    assert again["claims"] == first["claims"]
    computed = [json.loads((p / "summary.json").read_text())["runs_computed"]
                for p in (out / "dqn" / "CartPole-v1" / "sweeps").iterdir()]
    assert computed == [0, 0]
    # The first call computed everything, the rerun nothing: the context and the README note say so.
    context = json.loads(again["claims_json"].read_text())["context"]
    assert context["resumed"] == {"linesearch": True, "dqn_runs": {"CartPole-v1": [6, 6]}}  # 3 settings × 2 seeds
    note = paper.readme_note(context, again["claims"])
    assert "assembled in" in note and "LineSearch, CartPole-v1 (6/6 runs)" in note and " min;" not in note
    fresh = dict(context, resumed={"linesearch": False, "dqn_runs": {"CartPole-v1": [0, 6]}}, runtime_s=125.0)
    assert "(1 × cpu (cpu), 2 min; LineSearch mode `tiny`" in paper.readme_note(fresh, again["claims"])


def test_readme_from_a_finished_run_writes_the_block_of_its_backend(paper_tiny, tmp_path):
    out, _ = paper_tiny
    readme = tmp_path / "README.md"
    blocks = "<!-- claims:begin -->\n<!-- claims:end -->\n<!-- claims-gpu:begin -->\n<!-- claims-gpu:end -->\n"
    readme.write_text(blocks)
    record = json.loads((out / "claims.json").read_text())
    paper.readme_from(out, readme)
    cpu = readme.read_text()
    assert paper.claims_table(record["claims"]) in cpu.split("<!-- claims:end -->")[0]
    assert "<!-- claims-gpu:begin -->\n<!-- claims-gpu:end -->" in cpu
    # A run recorded on a GPU goes to the GPU block, whatever machine writes it; a record
    # without `resumed` (older runs) gets it from the folder's files.
    gpu_dir = tmp_path / "gpu"
    gpu_dir.mkdir()
    context = dict(record["context"], devices="1 × NVIDIA H200 (gpu)", runtime_s=6.0,
                   part_seconds={"linesearch": 0.01, "CartPole-v1": 1.0})
    del context["resumed"]
    (gpu_dir / "claims.json").write_text(json.dumps(dict(context=context, claims=record["claims"])))
    (gpu_dir / "linesearch").mkdir()
    (gpu_dir / "linesearch" / "summary.json").write_text(json.dumps({"runtime_s": 150.0}))
    sweeps = gpu_dir / "dqn" / "CartPole-v1" / "sweeps"
    for name, done in (("fixed-1", 2), ("adaptive-2", 2)):
        (sweeps / name).mkdir(parents=True)
        (sweeps / name / "summary.json").write_text(json.dumps({"runs": 2, "runs_resumed": done}))
    readme.write_text(blocks)
    paper.readme_from(gpu_dir, readme)
    gpu_block = readme.read_text().split("<!-- claims-gpu:begin -->")[1]
    assert "NVIDIA H200 (gpu), assembled in 6 s from parts that earlier calls computed into the same folder: " \
           "LineSearch, CartPole-v1 (4/4 runs)" in gpu_block
    assert readme.read_text().startswith("<!-- claims:begin -->\n<!-- claims:end -->")
    with pytest.raises(FileNotFoundError, match="run `jaxreplay reproduce all"):
        paper.readme_from(tmp_path / "nothing", readme)


def test_readme_gpu_claims_table_is_generated_from_the_committed_run(tmp_path):
    """docs/claims.md's claims-gpu block is exactly what `jaxreplay reproduce readme docs/paper_scale` writes."""
    readme = tmp_path / "claims.md"
    readme.write_text((ROOT / "docs" / "claims.md").read_text())
    paper.readme_from(ROOT / "docs" / "paper_scale", readme)
    assert readme.read_text() == (ROOT / "docs" / "claims.md").read_text()
    block = readme.read_text().split("<!-- claims-gpu:begin -->")[1].split("<!-- claims-gpu:end -->")[0]
    assert "(gpu)" in block and "DQN 100 seeds per setting" in block


@pytest.mark.parametrize(
    "low, high, expected",
    [(60.0, 80.0, "yes"), (71.0, 71.0, "yes"), (10.0, 95.0, "consistent"), (0.0, 60.0, "no"), (72.0, 90.0, "no")],
)
def test_dqn_agreement_rule(low, high, expected):
    stat = dict(percent=(low + high) / 2, low=low, high=high, wins=3, n=4)
    (row,) = paper.dqn_claims("CartPole-v1", {100: stat})
    assert row["agrees"] == expected and row["paper"] == "71%"


def test_replace_block_and_its_errors():
    text = "a\n<!-- claims:begin -->\nold\n<!-- claims:end -->\nb\n"
    assert paper.replace_block(text, "claims", "new\n") == "a\n<!-- claims:begin -->\nnew\n<!-- claims:end -->\nb\n"
    for bad in ("no markers", text + "<!-- claims:begin -->", "<!-- claims:end --><!-- claims:begin -->"):
        with pytest.raises(ValueError, match="claims:begin"):
            paper.replace_block(bad, "claims", "x")


def test_update_readme_keeps_the_cpu_and_gpu_tables_apart(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- claims:begin -->\ncpu\n<!-- claims:end -->\n<!-- claims-gpu:begin -->\n<!-- claims-gpu:end -->\n")
    claims = [dict(part="p", claim="c", paper="1", ours="2", agrees="yes", source="theory")]
    paper.update_readme(readme, claims, "gpu note", block="claims-gpu")
    text = readme.read_text()
    assert "cpu" in text.split("<!-- claims:end -->")[0]
    gpu = text.split("<!-- claims-gpu:begin -->")[1].split("<!-- claims-gpu:end -->")[0]
    assert "gpu note" in gpu and "| p | c | 1 | 2 | yes | theory |" in gpu


def test_tally_counts_in_agreement_order():
    claims = [dict(agrees=a) for a in ("no", "yes", "yes", "partly")]
    assert paper.tally(claims) == "2 yes, 1 partly, 1 no"


def test_bad_arguments_are_refused_before_running(tmp_path):
    with pytest.raises(ValueError, match="envs"):
        paper.reproduce(tmp_path, envs=("Pong-v0",))
    with pytest.raises(ValueError, match="seeds"):
        paper.reproduce(tmp_path, seeds=0)
    assert not (tmp_path / "linesearch").exists()


def test_games_are_run_once_each_in_the_papers_order_and_readme_blocks_do_not_follow_the_folders_order(
        tmp_path, monkeypatch):
    """`--env G --env G` ran G twice: the second pass resumed the first's runs and published them as computed by
    earlier calls, with its own time; games given in another order wrote the tables in that order under one
    recorded command; two studies of one game made two README blocks by the order of their folders (found by a
    probe)."""
    from jaxreplay.paper.reproduce.study.writer import sort_for_readme

    with pytest.raises(ValueError, match=r"^envs names CartPole-v1 more than once \(--env\): give each game once"):
        paper.reproduce(tmp_path, envs=("CartPole-v1", "Acrobot-v1", "CartPole-v1"))
    assert not any(tmp_path.iterdir())
    ran = []

    def parts(out, envs, *args):  # (stops the call once it has planned its parts)
        ran.append(envs)
        raise KeyboardInterrupt

    monkeypatch.setattr(paper, "_parts", parts)
    with pytest.raises(KeyboardInterrupt):
        paper.reproduce(tmp_path / "out", envs=("MountainCar-v0", "CartPole-v1"))
    assert ran == [("CartPole-v1", "MountainCar-v0")]
    rows = [{"env": "Acrobot-v1", "name": "b"}, {"env": "CartPole-v1", "name": "b", "x": 2},
            {"env": "CartPole-v1", "name": "a"}, {"env": "CartPole-v1", "name": "b", "x": 1}]
    for given in (rows, rows[::-1]):
        given = list(given)
        sort_for_readme(given, ("CartPole-v1", "Acrobot-v1"), label=lambda r: r["name"])
        assert given == [rows[2], rows[3], rows[1], rows[0]]


def test_readme_claims_table_is_the_generated_one():
    """docs/claims.md's table has one row per claim the reproduction makes, in its order, as generated."""
    text = (ROOT / "docs" / "claims.md").read_text()
    block = text.split("<!-- claims:begin -->")[1].split("<!-- claims:end -->")[0]
    assert block.lstrip().startswith("Generated by `jaxreplay reproduce all")
    rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith(("| part |", "| --- |"))]
    expected_ids = list(rl.CLAIM_IDS) + [f"dqn_{env}_aer_from_{n0}" for env in rdqn.ENVS for n0 in rdqn.ADAPTIVE_FROM[env]]
    assert len(rows) == len(expected_ids)
    parts = [row.split(" | ")[0].strip("| ") for row in rows]
    assert parts == ["linesearch"] * len(rl.CLAIM_IDS) + [f"dqn/{env}" for env in rdqn.ENVS for _ in rdqn.ADAPTIVE_FROM[env]]
    for row in rows:
        assert row.count(" | ") == 5 and row.split(" | ")[4] in paper.AGREEMENT


def test_command_line_refuses_bad_input(tmp_path, capsys):
    from jaxreplay import cli

    assert cli.main(["reproduce", "all", "--out", str(tmp_path), "--seeds", "0"]) == 2
    assert "seeds" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["reproduce", "all", "--out", str(tmp_path), "--env", "Pong-v0"])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err
    assert not (tmp_path / "linesearch").exists()


def _fake_linesearch(out, calls, kw) -> dict:
    """What the LineSearch reproduction writes and returns, made up: a figure, the CSV and the report."""
    for name in ("fig.png", "metric_grid.csv", "report.md"):
        (out / name).write_text(f"{name} of run {len(calls)}")
    calls.append(kw)
    return {"figures": {"fig.png": str(out / "fig.png")}, "csv": str(out / "metric_grid.csv"),
            "report": str(out / "report.md"), "claims": []}


@pytest.mark.parametrize("damage", ['{"settings": {"mode": "fast"', "[1, 2]", '{"settings": {}}'])
def test_a_damaged_linesearch_record_is_named_and_its_part_recomputed(tmp_path, monkeypatch, damage):
    """``DIR/linesearch/summary.json`` truncated, not an object, or without its figures: one warning naming
    the file, and the part computed again (it used to end in a bare JSON error or a traceback)."""
    from jaxreplay.paper.reproduce import linesearch as rl_module

    calls = []
    monkeypatch.setattr(rl_module, "reproduce", lambda out, **kw: _fake_linesearch(out, calls, kw))
    (tmp_path / "summary.json").write_text(damage)
    with pytest.warns(UserWarning, match=r"summary\.json .*Its LineSearch part is computed again"):
        summary = paper._linesearch_part(tmp_path, "fast", None, 0, False)
    assert len(calls) == 1 and summary["resumed"] is False
    assert paper._linesearch_part(tmp_path, "fast", None, 0, False)["resumed"] is True  # the rewritten record
    assert len(calls) == 1


@pytest.mark.parametrize("damage", ["report rewritten", "csv truncated", "csv deleted", "figure emptied"])
def test_a_linesearch_part_whose_files_changed_is_not_reused(tmp_path, monkeypatch, damage):
    """`reproduce linesearch --out DIR/linesearch` rewrote the part's figures and report but left the part's
    record: the next `reproduce all` reused the earlier run's claims beside them; and a truncated or deleted
    metric_grid.csv or an emptied figure was reported as done and left so (found by probes). The record now
    holds the digest of every file the part wrote (and the LineSearch reproduction removes the record first)."""
    from jaxreplay.paper.reproduce import linesearch as rl_module

    calls = []
    monkeypatch.setattr(rl_module, "reproduce", lambda out, **kw: _fake_linesearch(out, calls, kw))
    assert paper._linesearch_part(tmp_path, "fast", None, 0, False)["resumed"] is False
    assert paper._linesearch_part(tmp_path, "fast", None, 0, False)["resumed"] is True
    {
        "report rewritten": lambda: (tmp_path / "report.md").write_text("a later run's report"),
        "csv truncated": lambda: (tmp_path / "metric_grid.csv").write_text("metric_grid.csv of"),
        "csv deleted": lambda: (tmp_path / "metric_grid.csv").unlink(),
        "figure emptied": lambda: (tmp_path / "fig.png").write_bytes(b""),
    }[damage]()
    assert paper._linesearch_part(tmp_path, "fast", None, 0, False)["resumed"] is False and len(calls) == 2
    assert (tmp_path / "metric_grid.csv").read_text() == "metric_grid.csv of run 1"
    assert paper._linesearch_part(tmp_path, "fast", None, 0, False)["resumed"] is True and len(calls) == 2


def test_a_rerun_of_reproduce_all_removes_the_earlier_table_before_computing(tmp_path, monkeypatch):
    """A rerun killed after its parts but before its table left the earlier run's report.md and claims.json beside
    the new parts, and `reproduce readme` published the stale rows (found by a probe)."""
    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "all"
    monkeypatch.setattr(paper, "_linesearch_part", killed)
    with pytest.raises(KeyboardInterrupt):
        paper.reproduce(out, quick=True, progress=False, envs=("CartPole-v1",))
    assert not out.exists()  # (interrupted before it wrote anything: its claim taken back)
    out.mkdir()
    (out / "claims.json").write_text('{"context": {}, "claims": []}')  # an earlier run's table
    (out / "report.md").write_text("earlier")
    with pytest.raises(KeyboardInterrupt):
        paper.reproduce(out, quick=True, progress=False, envs=("CartPole-v1",))
    assert not (out / "claims.json").exists() and not (out / "report.md").exists()


def test_a_refused_rerun_of_reproduce_all_keeps_the_earlier_table_where_no_part_wrote_anew(tmp_path, monkeypatch):
    """A rerun refused for memory (`--seeds 200000000`) deleted a finished folder's claims.json and report.md
    before its DQN part refused (found by a probe). They are put back where every part so far resumed; where a
    part wrote anew they stay deleted (they would sit beside new parts)."""
    from jaxreplay.paper.reproduce import dqn as reproduce_dqn

    def refused(*args, **kwargs):
        raise MemoryError("the sweep's results need about 334.2 GiB of host memory")

    out = tmp_path / "all"
    out.mkdir()
    table = {"claims.json": b'{"context": {}, "claims": []}', "report.md": b"earlier"}
    monkeypatch.setattr(reproduce_dqn, "reproduce", refused)
    for resumed in (True, False):
        for name, data in table.items():
            (out / name).write_bytes(data)
        monkeypatch.setattr(paper, "_linesearch_part", lambda *args, resumed=resumed: {"resumed": resumed})
        with pytest.raises(MemoryError, match="host memory"):
            paper.reproduce(out, quick=True, progress=False, envs=("CartPole-v1",))
        kept = {name: (out / name).read_bytes() for name in table if (out / name).exists()}
        assert kept == (table if resumed else {})


def test_a_reproduction_into_a_folder_being_written_is_refused_before_it_runs(tmp_path):
    """`reproduce all` and `reproduce linesearch` took no lock of their own (only their DQN parts' sweeps did), so
    two calls with other options into one folder both wrote its report and figures (found by a probe of the
    study commands). They hold the folder's lock from start to end, and release it."""
    from jaxreplay.engine.store import lock_folder

    for name, call in (("ls", lambda out: rl.reproduce(out, progress=False)),
                       ("all", lambda out: paper.reproduce(out, quick=True, progress=False))):
        out = tmp_path / name
        out.mkdir()
        with lock_folder(out), pytest.raises(ValueError, match=r"is being written by another sweep \(process \d+@"):
            call(out)
        assert not (out / "report.md").exists() and not (out / "sweep.lock").exists()
