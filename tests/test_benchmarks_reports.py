"""The arithmetic and decisions of the benchmarks' later sections (end to end vs the bare kernel, DQN scaling
with seeds, XLA flag sets), on made-up measurements.

No timing here: performance is measured in benchmarks/, never in tests.
"""

import pathlib
import sys

_ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks import dqn, sweep, xla_flags  # noqa: E402


def _e2e(rounds, **fields):
    """An end-to-end measurement: rounds of (final_s, bare_s, full_s, bare_full_s) and the fixed fields."""
    keys = ("final_s", "bare_s", "full_s", "bare_full_s")
    base = dict(runs=1_000_000, chunk=500_000, full_chunk=250_000, calls=2, record_bytes=12e9, bandwidth=2e9,
                transfer_s=6.0, compile_s=1.0)
    return dict(base, **fields, rounds=[dict(zip(keys, r)) for r in rounds])


def test_end_to_end_report_ratios():
    e = _e2e([(1.25, 1.0, 9.0, 1.0)])
    sweep.HEADLINES[:] = []
    text = sweep._end_to_end_report(e)
    # 5e9 TD updates: 5e9 / s bare, 4e9 / s final metrics (80 % of the bare kernel), full curves 9 s over a 6 s bound.
    assert "| 1 s | 5e+09 | 1× |" in text and "| 1.25 s | 4e+09 | 1.25× |" in text
    assert sweep.HEADLINES[0][1:] == ["80 %", "≥ 80 %"]
    assert sweep.HEADLINES[1][1:] == ["1.50×", "≤ 1.5×"]
    # Where the kernel itself is slower than the transfer, the bound is the kernel.
    sweep.HEADLINES[:] = []
    sweep._end_to_end_report(_e2e([(1.25, 1.0, 1.2, 1.0)], transfer_s=0.5))
    assert sweep.HEADLINES[1][1] == "1.20×"
    # Each engine way is measured against its own bare kernel: M(T) only, or the full curves.
    sweep.HEADLINES[:] = []
    text = sweep._end_to_end_report(_e2e([(1.25, 1.0, 2.0, 1.6)], transfer_s=0.5))
    assert sweep.HEADLINES[0][1] == "80 %" and sweep.HEADLINES[1][1] == "1.25×"
    assert "| 2 s | 2.5e+09 | 1.25× |" in text
    # With alternated rounds, the ratios are the medians of the rounds' ratios (0.9, 1.0, 0.8 -> 90 %), not the
    # ratio of the medians (0.4 s ÷ 0.5 s = 80 %); full curves 6.6, 6.0, 7.2 s over the 6 s bound -> 1.10×.
    sweep.HEADLINES[:] = []
    text = sweep._end_to_end_report(_e2e([(1.0, 0.9, 6.6, 1.0), (0.3, 0.3, 6.0, 1.0), (0.5, 0.4, 7.2, 1.0)]))
    assert sweep.HEADLINES[0][1] == "90 %" and sweep.HEADLINES[1][1] == "1.10×"
    assert "medians of 3 alternated round(s)" in text


def test_sweep_vs_numpy_is_the_median_of_the_alternated_rounds_ratios():
    # Three rounds on a machine whose speed drifts: ours 0.2, 0.3, 0.25 ms a run; NumPy 0.6, 1.2, 0.5 ms.
    ours = [dict(runs=10_000, chunk=1024, devices=1, compile_s=1.0, run_s=t * 10, per_run_s=t / 1000, metric=0.06,
                 compilations=1) for t in (0.2, 0.3, 0.25)]
    numpy = [dict(runs=1000, seconds=t, per_run_s=t / 1000, metric=0.06) for t in (0.6, 1.2, 0.5)]
    merged = sweep._median_round(numpy)
    assert merged["per_run_s"] == 0.6e-3 and merged["seconds"] == 0.6 and merged["runs"] == 1000
    merged["round_ratios"] = [n["per_run_s"] / e["per_run_s"] for e, n in zip(ours, numpy)]  # 3.0, 4.0, 2.0
    small = dict(ours[0], runs=100, run_s=0.03, per_run_s=0.3e-3)
    sweep.HEADLINES[:] = []
    text = sweep._report("quick", [small, sweep._median_round(ours)], merged, dict(runs=20, per_run_s=2e-3))
    # The median of the rounds' ratios (3.0×), not the ratio of the medians (0.6 ÷ 0.25 = 2.4×).
    assert sweep.HEADLINES[1][1:] == ["3.0×", "≥ 20×"]
    assert "(median of 3 alternated rounds: 3.00×, 4.00×, 2.00×)" in text
    assert sweep.HEADLINES[2][1] == "8.0×"  # the Python loop: 2 ms ÷ the median 0.25 ms


def test_dqn_scaling_stops_when_the_engine_splits(monkeypatch):
    calls = []

    def fake_sweep(steps, seeds):
        calls.append(seeds)
        # the keys of dqn.engine_run's result, seeds among them
        return dict(seconds=seeds / 1e6 * steps, compile_s=1.0, env_steps=seeds * steps, updates=0,
                    chunk=min(seeds, 3000), seeds=seeds)

    monkeypatch.setattr(dqn, "_ours_sweep", fake_sweep)
    monkeypatch.setattr(dqn.jax, "default_backend", lambda: "gpu")
    mode = dict(dqn.MODES["quick"], steps=100)
    main = fake_sweep(100, mode["seeds"])
    calls.clear()
    rows = dqn._scaling(mode, main, lambda s: None)
    # 10 and 30 from the list, 100 reused from the main sweep, 1,000 fits, 4,000 is split: stop.
    assert calls == [10, 30, 1000, 4000]
    assert [r["seeds"] for r in rows] == [10, 30, 100, 1000, 4000]
    dqn.HEADLINES[:] = []
    text = dqn._scaling_report(mode, rows)
    assert "split the last count" in text
    # 1,000 seeds at 1e6 env steps/s against 7.0e6 before: 0.14×.
    assert dqn.HEADLINES[0][1:] == ["0.14×", "≥ 2×"]


def test_dqn_scaling_grows_by_four_up_to_the_cap(monkeypatch):
    calls = []

    def fake_sweep(steps, seeds):
        calls.append(seeds)
        return dict(seconds=1.0, compile_s=1.0, env_steps=seeds * steps, updates=0, chunk=seeds, seeds=seeds)

    monkeypatch.setattr(dqn, "_ours_sweep", fake_sweep)
    monkeypatch.setattr(dqn.jax, "default_backend", lambda: "gpu")
    mode = dict(dqn.MODES["quick"], steps=100)
    dqn._scaling(mode, fake_sweep(100, mode["seeds"]), lambda s: None)
    assert calls[1:] == [10, 30, 1000, 4000, 16000, 64000]


def test_xla_flag_report_marks_changed_outputs_and_failures():
    one = {"w": dict(what="10 runs", step_us=100.0, compile_s=1.0, digest="aaa")}
    results = {
        "XLA's default": one,
        "no command buffers": {"w": dict(one["w"], step_us=200.0)},
        "default + WHILE": "failed (exit 1): Unknown flag",
        "default + WHILE, graphs from 1 op": {"w": dict(one["w"], step_us=40.0, digest="bbb")},
    }
    text = xla_flags._report("quick", results)
    assert "| 200 µs (0.50×) | same outputs |" in text
    assert "| 40 µs (2.50×) | **outputs differ** |" in text
    assert "failed (exit 1): Unknown flag" in text
    assert xla_flags.HEADLINES[-1][1] == "2.50×"


def test_xla_flag_child_reports_a_rejected_flag():
    # XLA aborts at start-up on an unknown flag: reported as a failed variant, the benchmark goes on.
    assert xla_flags._run_child("quick", "--xla_not_a_flag=1").startswith("failed (exit 1)")


def test_a_baseline_run_alone_is_the_engines_program_and_engine_time_is_the_whole_call(monkeypatch):
    """The one-at-a-time baselines compile with the engine's XLA options (they used plain jax.jit, 28 % faster
    on a CPU: the ratio compared two programs), and the engine's time is its whole call less compilation (its
    run_seconds left out the planning and the dataset's assembly)."""
    import dataclasses
    import types

    import jax
    import numpy as np

    from benchmarks import _timing
    from jaxreplay.engine import sweep as sw
    from jaxreplay.engine.execute import run_keys
    from jaxreplay.experiments import linesearch as ls

    setup = ls.Setup(steps=30, max_capacity=10, max_batch_size=2)
    hp = ls.Hyperparameters(memory_size=7, batch_size=2, step_size=np.float32(0.01))
    key = run_keys(0, np.arange(1), jax.default_backend())[0]
    options = []
    compile_ = jax.stages.Lowered.compile
    monkeypatch.setattr(jax.stages.Lowered, "compile",
                        lambda self, compiler_options=None: options.append(compiler_options) or compile_(
                            self, compiler_options=compiler_options))
    alone = _timing.compiled_as_the_engine(ls.run, ls.EXPERIMENT, key, hp, setup, static_argnums=2)
    assert options == [ls.EXPERIMENT.compiler_options_on(jax.default_backend())]
    engine = sw.run(sw.Sweep("linesearch", seeds=1, setup=dataclasses.asdict(setup), fixed=hp._asdict()), None,
                    progress=False)
    assert float(alone(key, hp, setup).final_metric) == float(engine.dataset.final_metric.values.ravel()[0])

    calls = []
    fake = types.SimpleNamespace(stats=types.SimpleNamespace(compile_seconds=0.25))
    seconds = _timing.engine_call_seconds(lambda sweep, out, progress: calls.append(sweep) or fake, "S")
    assert calls == ["S"] and -0.25 <= seconds < 0.0  # the call's wall time (about 0) less its compilation


def _stand_ins(monkeypatch):
    """Two instant stand-in benchmarks: ``ok`` (one ratio) and ``fails``, which sets its ratio and then raises, the
    order of benchmarks/dqn.py (its ratios in _report, then _scaling's sweeps)."""
    import types

    import benchmarks

    ran = []
    ok = types.SimpleNamespace(TITLE="stand-in ok", HEADLINES=[], README=["roofline of ok"])
    fails = types.SimpleNamespace(TITLE="stand-in fails", HEADLINES=[], README=["roofline of fails"])

    def run_ok(mode, progress):
        ran.append("ok")
        ok.HEADLINES[:] = [["ok's quantity", "3.0×", "≥ 2×"]]
        return "ok's numbers"

    def run_fails(mode, progress):
        ran.append("fails")
        fails.HEADLINES[:] = [["DQN, 100-seed sweep vs seeds in sequence", "37.0×", "≥ 10×"]]
        raise RuntimeError("scaling sweep | ran out of memory")

    ok.run, fails.run = run_ok, run_fails
    modules = {"benchmarks._stand_in_ok": ok, "benchmarks._stand_in_fails": fails}
    monkeypatch.setitem(benchmarks.BENCHMARKS, "ok", "benchmarks._stand_in_ok")
    monkeypatch.setitem(benchmarks.BENCHMARKS, "fails", "benchmarks._stand_in_fails")
    import importlib

    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: modules[name] if name in modules else real(name, *a))
    return ran


def test_a_failed_benchmark_publishes_no_ratio_and_outputs_are_checked_before_any_runs(monkeypatch, tmp_path, capsys):
    """A benchmark that set its ratio and then failed kept the ratio in the summary and the --readme block, whose
    numbers had gone with the failed section; and a bad --readme or --out was found after the benchmarks had
    run, as a traceback (found by a probe)."""
    import pytest

    from benchmarks import __main__ as cli

    ran = _stand_ins(monkeypatch)
    readme = tmp_path / "README.md"
    readme.write_text("# b\n<!-- benchmarks:begin -->\n<!-- benchmarks:end -->\n")
    assert cli.main(["--only", "fails", "--only", "ok", "--readme", str(readme), "--out", str(tmp_path / "r.md")]) == 1
    block = readme.read_text()
    assert "37.0×" not in block and "roofline of fails" not in block
    assert "| `fails` | failed: RuntimeError: scaling sweep / ran out of memory | – | – |" in block
    assert "| `ok` | ok's quantity | 3.0× | ≥ 2× |" in block and "roofline of ok" in block
    assert "37.0×" not in (tmp_path / "r.md").read_text()
    capsys.readouterr()
    ran.clear()
    bad = [
        (["--readme", str(tmp_path / "missing.md")], "--readme: the README"),
        (["--readme", str(tmp_path / "r.md")], "--readme: the README"),  # no block
        (["--out", str(tmp_path / "no_dir" / "r.md")], f"--out {tmp_path / 'no_dir' / 'r.md'}: no folder"),
        (["--out", str(tmp_path)], f"--out {tmp_path}: is a folder"),
    ]
    for argv, message in bad:
        with pytest.raises(SystemExit) as e:
            cli.main(["--only", "ok", *argv])
        err = capsys.readouterr().err
        last = err.splitlines()[-1]  # argparse's usage, then one line naming the option
        assert e.value.code == 2 and last.startswith(f"python -m benchmarks: error: {message}"), err
    assert ran == []  # refused before any benchmark ran


_LEGACY_GPU_BLOCK = """
Generated by `python -m benchmarks --quick --readme docs/benchmarks.md` on 2026-11-27 02:21 UTC, on H200 box, 16 cores:

| benchmark | quantity | measured | target |
| --- | --- | --- | --- |
| `buffer` | uniform, ours / flashbax | 1.1× | ≥ 2× |
| `sweep` | sweep vs NumPy | 8.3× | ≥ 20× |
| `theory` | accelerator ÷ host | 9.8× | > 1× |

Roofline (`gpu`, NVIDIA H200; see `benchmarks/README.md`):

| workload | measured |
| --- | --- |
| DQN CartPole step | 80.3 |
"""


def test_a_partial_run_replaces_its_own_rows_and_keeps_the_others_with_their_run():
    """A GPU session's run is often partial (a deadline, ``--only``): its block replaced the whole README block and
    so dropped every benchmark it had not reached. Now each benchmark's rows and tables are replaced only by a
    run that measured it, every row naming its run; rows of another machine are never kept."""
    from benchmarks import _readme_block as rb

    order = ["buffer", "sweep", "dqn", "roofline", "theory"]
    common = dict(order=order, canonical="python -m benchmarks --quick --readme docs/benchmarks.md")
    first = rb.compose(_LEGACY_GPU_BLOCK, where="H200 box, 16 cores", run="2026-11-30 11:27 UTC",
                       command="python -m benchmarks --quick", partial=" (partial: 2 of 5 benchmarks finished)",
                       rows={"sweep": [["sweep vs NumPy", "18.8×", "≥ 20×"]], "dqn": [["dqn vs SB3", "986×", "–"]]},
                       extras={"sweep": [], "dqn": []}, **common)
    lines = first.splitlines()
    assert lines[0].startswith("Generated by `python -m benchmarks --quick --readme docs/benchmarks.md` runs on H200 "
                               "box, 16 cores; the newest, `python -m benchmarks --quick`, on 2026-11-30 11:27 UTC "
                               "(partial: 2 of 5 benchmarks finished).")
    assert [line for line in lines if line.startswith("| `")] == [
        "| `buffer` | uniform, ours / flashbax | 1.1× | ≥ 2× | 2026-11-27 02:21 UTC |",
        "| `sweep` | sweep vs NumPy | 18.8× | ≥ 20× | 2026-11-30 11:27 UTC |",
        "| `dqn` | dqn vs SB3 | 986× | – | 2026-11-30 11:27 UTC |",
        "| `theory` | accelerator ÷ host | 9.8× | > 1× | 2026-11-27 02:21 UTC |",
    ]
    assert "<!-- benchmark roofline, 2026-11-27 02:21 UTC -->\n_`roofline`, measured 2026-11-27 02:21 UTC:_" in first
    assert "| DQN CartPole step | 80.3 |" in first

    new_roofline = "Roofline (new):\n\n| workload | measured |\n| --- | --- |\n| DQN | 94.8 |"
    second = rb.compose(first, where="H200 box, 16 cores", run="2026-11-30 11:32 UTC",
                        command="python -m benchmarks --quick --only roofline --only theory", partial="",
                        rows={"roofline": [], "theory": [["accelerator ÷ host", "8.3×", "> 1×"]]},
                        extras={"roofline": [new_roofline], "theory": []}, **common)
    assert rb.parse(second)[1] == [
        ["buffer", "uniform, ours / flashbax", "1.1×", "≥ 2×", "2026-11-27 02:21 UTC"],
        ["sweep", "sweep vs NumPy", "18.8×", "≥ 20×", "2026-11-30 11:27 UTC"],
        ["dqn", "dqn vs SB3", "986×", "–", "2026-11-30 11:27 UTC"],
        ["theory", "accelerator ÷ host", "8.3×", "> 1×", "2026-11-30 11:32 UTC"],
    ]
    assert rb.parse(second)[2] == {"roofline": ("2026-11-30 11:32 UTC", new_roofline)}
    assert "80.3" not in second
    # A run that measured nothing writes the block again unchanged but for its header; another machine keeps nothing.
    again = rb.compose(second, where="H200 box, 16 cores", run="2026-11-30 12:00 UTC", command="c", partial="",
                       rows={}, extras={}, **common)
    assert again.splitlines()[1:] == second.splitlines()[1:]
    other = rb.compose(second, where="H100 box, 26 cores", run="2026-11-30 12:00 UTC", command="c", partial="",
                       rows={"buffer": [["uniform, ours / flashbax", "1.3×", "≥ 2×"]]}, extras={}, **common)
    assert rb.parse(other)[1:] == ([["buffer", "uniform, ours / flashbax", "1.3×", "≥ 2×", "2026-11-30 12:00 UTC"]], {})
    assert rb.parse("") == (None, [], {}) and rb.parse("hand-written text") == (None, [], {})


def test_the_cli_keeps_the_rows_of_a_benchmark_an_only_run_did_not_measure(monkeypatch, tmp_path):
    from benchmarks import __main__ as cli
    from benchmarks import _readme_block as rb

    _stand_ins(monkeypatch)
    readme = tmp_path / "README.md"
    readme.write_text("# b\n<!-- benchmarks:begin -->\n<!-- benchmarks:end -->\n")
    assert cli.main(["--only", "ok", "--readme", str(readme)]) == 0
    assert cli.main(["--only", "fails", "--readme", str(readme)]) == 1
    block = readme.read_text().split("<!-- benchmarks:begin -->")[1].split("<!-- benchmarks:end -->")[0]
    where, rows, extras = rb.parse(block)
    assert [r[:4] for r in rows] == [["ok", "ok's quantity", "3.0×", "≥ 2×"],
                                     ["fails", "failed: RuntimeError: scaling sweep / ran out of memory", "–", "–"]]
    assert list(extras) == ["ok"] and extras["ok"][1] == "roofline of ok" and "cpu" in where


def test_a_buffer_ratio_whose_side_failed_its_output_check_says_so_in_the_summary():
    """flashbax's prioritised checksum came out non-finite on an H200, and the summary published 14.0× without a
    word (only the section's note said it: a review of the benchmarks)."""
    from benchmarks import _timing, buffer

    def result(impl, seconds, note=""):
        case = buffer.Case("priority", impl, 100, 1000, 100)
        return buffer.Result(case, _timing.Timing(1.0, 0.1, (seconds,)), note=note)

    assert buffer.headline_ratio(result("ours", 0.01), result("flashbax", 0.14)) == "14.0×"
    assert (buffer.headline_ratio(result("ours", 0.01), result("flashbax", 0.14, "non-finite checksum"))
            == "14.0× (flashbax: non-finite checksum)")
    assert (buffer.headline_ratio(result("ours", 0.01, "non-finite checksum"), result("flashbax", 0.02, "x"))
            == "2.0× (ours: non-finite checksum)")


def test_cpu_devices_report_compares_medians_and_digests_and_the_lone_run():
    # Two children a variant. LineSearch: medians 1.0 s on one device, 0.5 s on two (2.00×); DQN: 4 and 2 s, but
    # one child's digest differs: "no". The lone run (timed in the two-device children only): 1.5 s on the
    # engine's one device, 2.0 s given both: 0.75×, same digest.
    from benchmarks import cpu_devices

    def child(devices, ls, dqn_s, dqn_digest="d", lone=None):
        out = dict(devices=devices, linesearch=dict(seconds=ls, steps=1000, chunk=256, digest="l"),
                   dqn=dict(seconds=dqn_s, steps=2000, chunk=100, digest=dqn_digest))
        if lone:
            out["lone"] = {way: dict(seconds=t, devices=d, digest="m", steps=1000)
                           for way, (t, d) in zip(("engine", "every device"), lone)}
        return out

    results = {"one CPU device": [child(1, 1.0, 4.0), child(1, 1.0, 4.0)],
               "2 CPU devices (one per core)": [child(2, 0.5, 2.0, lone=((1.5, 1), (2.0, 2))),
                                                child(2, 0.5, 2.0, "other", lone=((1.5, 1), (2.0, 2)))]}
    text = cpu_devices._report("quick", results)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith(("| sweep", "| ---"))]
    assert rows[0].endswith("| 1 s (1 k run steps/s) | 0.5 s (2 k run steps/s) | 2.00× | yes |")
    assert rows[1].endswith("| 2.00× | **no** |")
    assert rows[2].startswith("| a lone run, Breakout-MinAtar, 1,000 env steps (1 device: the engine's choice; 2: all")
    assert rows[2].endswith("| 1.5 s | 2 s | 0.75× | yes |")
    assert cpu_devices.HEADLINES[-1][1:] == ["0.75×", "–"]
