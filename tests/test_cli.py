"""The ``jaxreplay`` command line."""

import importlib.metadata
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import jaxreplay
from jaxreplay import cli


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"jaxreplay {jaxreplay.__version__}"
    assert jaxreplay.__version__ == importlib.metadata.version("jaxreplay")


def test_info_lists_versions_and_devices(capsys):
    assert cli.main(["info"]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert lines["jax"] == importlib.metadata.version("jax")
    assert lines["gymnax"] == "1.0.1"
    import jax

    assert lines["backend"] == jax.default_backend()
    assert jax.devices()[0].platform in lines["device"]


def test_console_entry_point_runs():
    out = subprocess.run(
        [sys.executable, "-m", "jaxreplay", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"jaxreplay {jaxreplay.__version__}"


def test_the_command_gives_jax_a_cpu_device_per_core_unless_a_count_was_chosen(tmp_path):
    """`jaxreplay` shards a sweep on a CPU over every core: one JAX CPU device per usable core (at most XLA:CPU's
    pool, PJRT_NPROC here, and a cgroup's CPU quota), unless the user chose a count; a Python session keeps its
    own devices."""
    import jax

    from jaxreplay.engine import batch as batch_lib

    def devices(**env) -> int:
        env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")} | env
        out = subprocess.run([sys.executable, "-m", "jaxreplay", "info"], env=dict(env, JAX_PLATFORMS="cpu"),
                             capture_output=True, text=True, check=True).stdout
        return sum(line.startswith("device ") for line in out.splitlines())

    cores = len(os.sched_getaffinity(0))
    machine = min(cores, batch_lib._cgroup_cpus())  # (this machine's cgroup quota, if any: tested below)
    assert batch_lib.cpu_core_devices({"PJRT_NPROC": "1"}) == 1
    assert batch_lib.cpu_core_devices({"PJRT_NPROC": str(cores + 3)}) == batch_lib.cpu_core_devices({}) == machine
    # A cgroup's CPU quota (a container's CPU limit) caps it, rounded up; "max" or no file: no cap.
    cpu_max = tmp_path / "cpu.max"
    for text, expected in [("150000 100000\n", min(cores, 2)), ("50000 100000", 1), ("max 100000", cores)]:
        cpu_max.write_text(text)
        assert batch_lib.cpu_core_devices({}, str(cpu_max)) == expected
    none = str(tmp_path / "none")
    assert batch_lib.cpu_core_devices({}, none, none) == cores
    # cgroup v1: cpu.cfs_quota_us ÷ cpu.cfs_period_us (-1: no quota), read where there is no cpu.max.
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    for quota, expected in [("100000\n", 1), ("250000", min(cores, 3)), ("-1", cores)]:
        (v1 / "cpu.cfs_quota_us").write_text(quota)
        assert batch_lib.cpu_core_devices({}, none, str(v1)) == expected
    assert devices() == machine and devices(PJRT_NPROC=str(cores + 3)) == machine  # (a larger pool: the cores)
    assert devices(PJRT_NPROC="1") == 1
    assert devices(JAX_NUM_CPU_DEVICES="1") == 1
    assert devices(XLA_FLAGS="--xla_force_host_platform_device_count=3") == 3
    # Before JAX is imported it sets the variable JAX reads; once JAX computes, nothing can change.
    code = ("import os, sys\nfrom jaxreplay.engine.batch import use_cpu_cores\nenv = {'PJRT_NPROC': '2'}\n"
            "print(use_cpu_cores(env), env.get('JAX_NUM_CPU_DEVICES'), 'jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == (["2", "2", "False"] if machine >= 2 else ["None", "None", "False"])
    jax.devices()  # (this process's backends are running)
    env = {"PJRT_NPROC": "3"}
    assert batch_lib.use_cpu_cores(env) is None and env == {"PJRT_NPROC": "3"}
    assert batch_lib.use_cpu_cores({"PJRT_NPROC": "3", "JAX_NUM_CPU_DEVICES": " 2 "}) is None
    # JAX's own "not chosen" (-1) is not a choice; a value merely naming the device-count flag is not one either.
    code = ("import sys\nfrom jaxreplay.engine.batch import use_cpu_cores\n"
            "for env in ({'JAX_NUM_CPU_DEVICES': '-1'}, {'XLA_FLAGS': '--xla_dump_to=/x--xla_force_host_platform_"
            "device_count'}, {'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}):\n"
            "    print(use_cpu_cores(dict(env, PJRT_NPROC='2')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == (["2", "2", "None"] if machine >= 2 else ["None"] * 3)


def test_the_parser_imports_no_jax():
    # `jaxreplay --help` and argparse's errors come before any JAX import (which takes a second); the parser
    # reads the games of the paper and of the replay study from their settings modules.
    code = ("import sys\nfrom jaxreplay import cli\ncli.build_parser()\n"
            "print(sorted(m for m in ('jax', 'numpy', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_replay_study_package_loads_its_parts_on_use():
    from jaxreplay.paper.reproduce import replay_study
    from jaxreplay.paper.reproduce.replay_study import analysis, stages, writer

    assert replay_study.PARTS.analysis is analysis and replay_study.STAGE_RULES is stages.STAGE_RULES
    assert replay_study.read_study is writer.read_study
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        replay_study.nothing


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "info" in capsys.readouterr().out


def _linesearch_json(capsys, *args):
    import json

    assert cli.main(["linesearch", "--json", "--steps", "200", "--seeds", "4", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_linesearch_json_reports_theory_and_experiment(capsys):
    import jax
    import numpy as np

    from jaxreplay.experiments import linesearch as ls
    from jaxreplay.paper import theory

    out = _linesearch_json(capsys, "--memory-size", "50", "--batch-size", "3", "--step-size", "0.005")
    solution = theory.solve(memory_size=50, batch_size=3, step_size=0.005, times=np.arange(201.0))
    assert out["theory"]["final_metric"] == pytest.approx(float(solution.metric), rel=1e-12)
    assert len(out["theory"]["t"]) == len(out["theory"]["dtheta1"]) == 201
    # The experiment is the same runs as the library call with the same keys.
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jax.numpy.arange(4))
    setup = ls.Setup(steps=200, max_capacity=50, max_batch_size=3)
    hp = ls.broadcast_hyperparameters(ls.Hyperparameters(memory_size=50, batch_size=3, step_size=0.005), 4)
    result = jax.jit(ls.run_batch, static_argnums=2)(keys, hp, setup)
    mean = np.asarray(result.dtheta, np.float64).mean(0)
    np.testing.assert_allclose(out["experiment"]["dtheta1_mean"], mean[:, 0], rtol=1e-6, atol=1e-9)
    assert out["experiment"]["final_metric"] == pytest.approx(np.abs(mean[-1]).sum(), rel=1e-6)
    per_seed = np.asarray(result.final_metric, np.float64)
    assert out["experiment"]["final_metric_per_seed_mean"] == pytest.approx(per_seed.mean(), rel=1e-6)
    assert out["experiment"]["final_metric_stderr"] == pytest.approx(per_seed.std(ddof=1) / 2, rel=1e-5)
    assert "memory_size_mean" not in out["experiment"]
    # The config names everything the run depends on (aER's k and n_old only where aER ran).
    assert out["config"] == {"memory_size": 50, "batch_size": 3, "step_size": 0.005, "discount": 0.0,
                             "sampler": "uniform", "priority_exponent": 2.0, "seeds": 4, "seed": 0, "steps": 200}


def test_linesearch_adaptive_reports_memory_size(capsys):
    out = _linesearch_json(capsys, "--sampler", "adaptive", "--memory-size", "40", "--batch-size", "2",
                           "--step-size", "0.001", "--adaptive-interval", "10")
    sizes = out["experiment"]["memory_size_mean"]
    assert len(sizes) == 200 and sizes[0] == 40
    assert min(sizes) >= 10 and max(sizes) <= 240
    # k and the n_old it ran (the default N0 / 2, resolved) are in the config.
    assert (out["config"]["adaptive_interval"], out["config"]["adaptive_num_old"], out["config"]["seed"]) == (10, 20, 0)


def test_linesearch_one_seed_has_no_standard_error(capsys):
    out = _linesearch_json(capsys, "--seeds", "1")["experiment"]  # (it said 0.0: no uncertainty)
    assert out["final_metric_stderr"] is None
    assert out["final_metric_stderr_null_reason"] == "too few seeds (n = 1): a standard error needs 2"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--memory-size", "0"], "memory-size"),
        (["--discount", "1.0"], "--discount must be < 1.0"),
        (["--step-size", "nan"], "--step-size must be finite, got nan."),
        (["--step-size", "-1"], "--step-size must be >= 0.0, got -1.0."),  # as typed, not the field step_size
        (["--seeds", "0"], "seeds"),
    ],
)
def test_linesearch_bad_input(capsys, args, message):
    assert cli.main(["linesearch", *args]) == 2
    assert message in capsys.readouterr().err


from compile_events import COMPILE_EVENTS as _COMPILES  # noqa: E402

# Imported here, not first inside a test that counts lowerings: importing them makes a few module-level JAX
# constants (lowered once), which a test run alone would count as its command's compiling.
import jaxreplay.experiments.dqn  # noqa: E402, F401
import jaxreplay.experiments.linesearch  # noqa: E402, F401


@pytest.mark.parametrize("value", ["0", "-5"])
def test_linesearch_adaptive_num_old_is_checked_not_replaced(capsys, value):
    # 0 used to be taken as "not given" (replaced by N0/2); -5 reported the range [1, 1].
    assert cli.main(["linesearch", "--sampler", "adaptive", "--adaptive-num-old", value]) == 2
    err = capsys.readouterr().err
    assert f"--adaptive-num-old must be >= 1, got {value}." in err and "[1, 1]" not in err


@pytest.mark.parametrize("args, message", [
    (["--env", "Pendulum-v1"], "--env Pendulum-v1: DQN needs a discrete action space"),
    (["--env", "MountainCarContinuous-v0", "--steps", "100"], "continuous actions (Box of shape (1,))"),
    (["--env", "LineSearch", "--steps", "500"], "--env LineSearch: its episode never terminates and lasts max_steps_in_episode = "
                                                "1000 steps, so no episode ends in the last segment (steps 451-500)"),
    (["--env", "NoSuchGame-v0"], "--env NoSuchGame-v0: not a known environment; choose one of: LineSearch"),
])
def test_dqn_refuses_games_it_cannot_play_before_compiling(capsys, args, message):
    # Importing gymnax builds one array (its FrozenLake map): import it first, so that only what the command itself
    # lowers is counted, whichever test ran before.
    import gymnax  # noqa: F401

    before = _COMPILES.lowerings
    assert cli.main(["dqn", "--quiet", "--seeds", "1", *args]) == 2
    assert message in capsys.readouterr().err
    assert _COMPILES.lowerings == before


@pytest.mark.parametrize("args, message", [
    (["--step-size", "1e-50"], "--step-size 1e-50 does not fit a float32 (its smallest normal magnitude is 1.175e-38): "
                               "it would run as 0 (XLA flushes subnormal numbers to zero); give a larger value."),
    (["--step-size", "1e39"], "--step-size 1e+39 does not fit a float32 (at most 3.403e+38 in magnitude): it would "
                              "run as inf."),
    (["--sampler", "prioritized", "--priority-exponent", "1e-40"], "--priority-exponent 1e-40 does not fit a float32"),
])
def test_linesearch_refuses_floats_that_would_run_as_inf_or_zero(capsys, args, message):
    before = _COMPILES.lowerings
    assert cli.main(["linesearch", "--steps", "10", "--seeds", "1", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert _COMPILES.lowerings == before


@pytest.mark.parametrize("args, message", [
    (["--priority-exponent", "3"], "--priority-exponent applies to --sampler prioritized only; this run's sampler "
                                   "is uniform."),
    (["--sampler", "adaptive", "--priority-exponent", "2"], "--priority-exponent applies to --sampler prioritized"),
    (["--adaptive-interval", "5"], "--adaptive-interval applies to --sampler adaptive only"),
    (["--sampler", "prioritized", "--adaptive-num-old", "4"], "--adaptive-num-old applies to --sampler adaptive only; "
                                                            "this run's sampler is prioritized."),
])
def test_linesearch_refuses_an_option_its_sampler_does_not_read(capsys, args, message):
    """`--priority-exponent 3` with the uniform sampler ran uniform replay and printed its numbers as if the
    option had been read (a probe); refused, in one line, before compiling."""
    before = _COMPILES.lowerings
    assert cli.main(["linesearch", "--steps", "10", "--seeds", "1", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert _COMPILES.lowerings == before


def test_linesearch_divergence_reports_the_experiment_and_strict_json(capsys, monkeypatch):
    import json

    from jaxreplay.paper import theory

    # The ODE solver runs out of its step budget (~6 s of solver steps each time): the text run meets the real
    # unconverged solve (it used to raise; now `converged` is false and its numbers NaN); the --json run gets
    # the same solution at once.
    solve, solutions = theory.solve, []

    def solve_and_keep(**kwargs):
        solutions.append(solve(**kwargs))
        return solutions[-1]

    monkeypatch.setattr(theory, "solve", solve_and_keep)
    args = ["linesearch", "--step-size", "100", "--steps", "200", "--seeds", "2"]
    assert cli.main(args) == 0  # used to end in a 48-line diffrax/equinox traceback
    out, err = capsys.readouterr()
    assert "theory      solver did not converge" in out and "experiment  M = nan" in out
    assert "2 seed(s) diverged (weights non-finite, or error over 1e6 times its start)" in out
    assert "Traceback" not in err and "pure_callback" not in err
    assert len(solutions) == 1 and not bool(solutions[0].converged) and np.isnan(float(solutions[0].metric))
    monkeypatch.setattr(theory, "solve", lambda **kwargs: solutions[0])
    assert cli.main([*args, "--json"]) == 0

    def refuse(constant):
        raise AssertionError(f"not strict JSON: {constant}")

    report = json.loads(capsys.readouterr().out, parse_constant=refuse)  # NaN / Infinity are not JSON
    assert report["theory"]["converged"] is False and report["theory"]["final_metric"] is None
    assert report["experiment"]["diverged_seeds"] == 2 and report["experiment"]["final_metric"] is None
    assert None in report["experiment"]["dtheta1_mean"] and len(report["experiment"]["t"]) == 200
    # Every null says why (the --json convention: a sibling <key>_null_reason).
    assert _nulls_without_reason(report) == []
    no_theory = "solver did not converge (its step budget ran out: the ODE diverges, or changes too abruptly for the budget)"
    assert report["theory"]["final_metric_null_reason"] == report["theory"]["dtheta1_null_reason"] == no_theory
    assert report["experiment"]["final_metric_null_reason"] == "2 of 2 seed(s) diverged (weights non-finite, or error over 1e6 times its start)"
    assert report["experiment"]["dtheta1_mean_null_reason"] == "2 of 2 seed(s) diverged (weights non-finite, or error over 1e6 times its start)"


def _strict_json(text: str):
    """``text`` parsed as strict JSON: NaN, Infinity and -Infinity are refused."""
    import json

    def refuse(constant):
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _nulls_without_reason(value, where="") -> list[str]:
    """The paths of the nulls in ``value`` that have no sibling ``<key>_null_reason`` string."""
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nulls_without_reason(v, f"{where}[{i}]")]
    if not isinstance(value, dict):
        return []
    missing = []
    for key, item in value.items():
        if not isinstance(value.get(f"{key}_null_reason"), str):
            nested = item if isinstance(item, list) else [item]
            if any(v is None for v in nested) or item is None:
                missing.append(f"{where}.{key}")
        missing += _nulls_without_reason(item, f"{where}.{key}")
    return missing


def test_dqn_json_is_strict_and_says_why_a_value_is_missing(capsys):
    # One seed: no interval (it used to print "iqm_ci95": [NaN, NaN], which is not JSON); a memory
    # larger than the run never fills, so aER never checks and its shares have no denominator.
    args = ["dqn", "--adaptive", "--memory-size", "500", "--steps", "400", "--seeds", "1", "--quiet"]
    assert cli.main([*args, "--json"]) == 0
    report = _strict_json(capsys.readouterr().out)
    assert _nulls_without_reason(report) == []
    assert report["iqm"] == report["final_returns"][0] and report["iqm_ci95"] is None
    assert report["iqm_ci95_null_reason"] == "too few seeds (n = 1) for an interval"
    a = report["adaptive"]
    assert a["checks"] == [0] and a["grow_fraction"] is None and a["grow_fraction_null_reason"] == "no aER check ran"
    assert a["noise_mean_null_reason"] == "no aER check had a reference to compare with"
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert f"  IQM {report['iqm']:.1f} (too few seeds (n = 1) for an interval)" in out and "nan" not in out
    assert "sticky_action_prob" not in report  # (the bytes it was without sticky actions)


def test_dqn_sticky_actions_are_in_the_report_and_change_the_runs(capsys):
    args = ["dqn", "--steps", "400", "--seeds", "2", "--quiet", "--json"]
    assert cli.main(args) == 0
    plain = _strict_json(capsys.readouterr().out)
    assert cli.main([*args, "--sticky-actions", "0.5"]) == 0
    sticky = _strict_json(capsys.readouterr().out)
    assert sticky.pop("sticky_action_prob") == 0.5
    assert sticky.keys() == plain.keys() and sticky["final_returns"] != plain["final_returns"]


@pytest.mark.parametrize("args, message", [
    (["linesearch", "--memory-size", "1000000000000"],
     "--memory-size must be <= 2147483647 (an int32), got 1000000000000."),
    (["linesearch", "--memory-size", "2000000000", "--steps", "20"],
     "one run needs about 55.9 GiB of device memory and 1 device(s) need at least 1 runs per chunk (55.9 GiB), "
     "but the memory budget is 8.0 GiB."),  # refused before allocating, naming the CLI option
    (["sweep", "CONFIG", "--out", "OUT", "--memory-budget-mib", "nan"],
     "--memory-budget-mib must be a positive number"),
    (["sweep", "CONFIG", "--out", "OUT", "--memory-budget-mib", "1e308"],  # (inf in bytes: it was a traceback)
     "--memory-budget-mib must be a positive number of MiB, got 1e+308."),
    (["sweep", "CONFIG", "--out", "OUT", "--memory-fraction", "0"], "--memory-fraction must be in (0, 1], got 0.0."),
    (["sweep", "CONFIG", "--out", "OUT", "--chunk-size", "0"], "--chunk-size must be >= 1, got 0."),
    # jaxreplay dqn says the option typed, not the library's field (it said memory_size, fixed.replay_ratio, steps).
    (["dqn", "--memory-size", "0"], "jaxreplay dqn: error: --memory-size must be >= 1, got 0."),
    (["dqn", "--replay-ratio", "1e-50"], "jaxreplay dqn: error: --replay-ratio 1e-50 does not fit a float32"),
    (["dqn", "--sticky-actions", "1"],
     "jaxreplay dqn: error: --sticky-actions must be a number in [0, 1) (below 1 in float32), got 1.0."),
    (["dqn", "--sticky-actions", "nan"], "--sticky-actions must be a number in [0, 1) (below 1 in float32), got nan."),
    # 1.0 in float32, the value a step compares with: the chosen action was never executed (probe).
    (["dqn", "--sticky-actions", "0.99999999"], "--sticky-actions must be a number in [0, 1) (below 1 in float32)"),
    (["dqn", "--steps", "0"], "jaxreplay dqn: error: --steps must be >= 1, got 0."),
    (["dqn", "--adaptive", "--steps", "30"], "jaxreplay dqn: error: --steps must be a positive multiple of 20"),
    (["linesearch", "--seed", "-1"], "jaxreplay linesearch: error: --seed must be an integer in [0, 4294967295]"),
    # A value the float32 cast changes says what was typed and what it runs as (it said "= 1.0 ... got 1.0"),
    # named as the option (it said fixed.discount, the sweep's key).
    (["linesearch", "--discount", "0.99999999"], "jaxreplay linesearch: error: --discount 0.99999999 (runs as 1.0, "
                                                 "a float32): must be < 1.0"),
    # aER's storage is --memory-size + --steps: the advice names --steps (it said to lower --memory-size, which
    # at 1 gave the same refusal).
    (["linesearch", "--sampler", "adaptive", "--memory-size", "1", "--steps", "300000000"],
     "Lower --steps or --memory-size (replay storage dominates; aER's memory is allocated for --memory-size + "
     "--steps"),
    # The paper's commands too (they said tuned, steps: the library's names).
    (["dqn", "--tuned", "--env", "Acrobot-v1"], "jaxreplay dqn: error: --tuned is only available for CartPole-v1, "
                                                "not --env Acrobot-v1."),
    (["reproduce", "dqn", "--env", "CartPole-v1", "--steps", "0", "--out", "OUT"],
     "jaxreplay reproduce: error: --steps must be a positive integer, got 0."),
    (["study", "dqn", "--env", "CartPole-v1", "--steps", "30", "--out", "OUT"],
     "jaxreplay study: error: --steps must be a positive multiple of 20"),
])
def test_once_tracebacks_are_one_line_naming_the_option(tmp_path, capsys, monkeypatch, args, message):
    from jaxreplay.engine import resources

    config = tmp_path / "s.toml"
    config.write_text('experiment = "linesearch"\nseeds = 2\n[setup]\nsteps = 20\nmax_capacity = 20\n'
                      'max_batch_size = 2\n[fixed]\nmemory_size = 5\nbatch_size = 2\n')
    args = [str(config) if a == "CONFIG" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    monkeypatch.setattr(resources, "host_memory_bytes", lambda: 16 << 30)  # the same numbers on any machine
    before = _COMPILES.lowerings
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert "setup.max_capacity" not in err and _COMPILES.lowerings == before
    if "2000000000" in args:
        assert "Lower --memory-size (replay storage dominates), or use a machine with more memory." in err


def test_sweep_advice_names_the_sweep_commands_options_and_the_toml_keys(tmp_path, capsys):
    config = tmp_path / "s.toml"
    config.write_text('experiment = "linesearch"\nseeds = 2\n[setup]\nsteps = 20\nmax_capacity = 20\n'
                      'max_batch_size = 2\n[fixed]\nmemory_size = 5\nbatch_size = 2\n')
    assert cli.main(["sweep", str(config), "--out", str(tmp_path / "o"), "--memory-budget-mib", "0.0001"]) == 2
    err = capsys.readouterr().err  # (it advised the [run] keys memory_budget / memory_fraction)
    assert err.strip().endswith("Lower setup.max_capacity (replay storage dominates), shorten a segment, or raise "
                                "--memory-budget-mib / --memory-fraction."), err


@pytest.mark.parametrize("raised, status, err", [
    (BrokenPipeError, 141, ""),  # `jaxreplay ... | head`: the reader left; not bad input (it said error, exit 2)
    (KeyboardInterrupt, 130, "jaxreplay info: interrupted"),  # Ctrl-C: one line, no traceback
])
def test_a_closed_pipe_and_ctrl_c_end_the_command_quietly(tmp_path, capsys, monkeypatch, raised, status, err):
    def handler(args):
        raise raised

    monkeypatch.setattr(cli, "_info", handler)
    stdout = open(tmp_path / "stdout", "w")  # a real file descriptor (the closed pipe's is replaced by devnull's)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert cli.main(["info"]) == status
    stdout.close()
    assert capsys.readouterr().err.strip() == err


def test_ctrl_c_inside_a_garbage_collector_callback_is_sent_again_not_lost(monkeypatch):
    """A KeyboardInterrupt raised in a gc callback (JAX registers one) is printed as "Exception ignored" and
    dropped: the command ran on to exit 0 (found by a probe). The CLI's SIGINT handler sends the signal again
    a moment later there, and raises at once anywhere else."""
    import gc
    import signal
    import threading

    scheduled = []

    class Timer:  # never fires: stands for a re-send still pending
        def __init__(self, delay, function, args):
            scheduled.append((delay, function, args))
            self.finished = threading.Event()

        def start(self):
            pass

        def cancel(self):
            self.finished.set()

    monkeypatch.setattr(threading, "Timer", Timer)

    def callback(phase, info):  # stands for JAX's _xla_gc_callback
        cli._interrupt(signal.SIGINT, sys._getframe())

    def nested(phase, info):  # the signal can land in a function the callback called
        def inner():
            cli._interrupt(signal.SIGINT, sys._getframe())

        inner()

    monkeypatch.setattr(gc, "callbacks", [callback, nested])
    callback("start", {})
    nested("start", {})
    assert [(d, f, a) for d, f, a in scheduled] == [(0.05, os.kill, (os.getpid(), signal.SIGINT))] * 2
    with pytest.raises(KeyboardInterrupt):
        cli._interrupt(signal.SIGINT, sys._getframe())  # not in a callback: raised now (the pending ones cancelled)
    assert len(scheduled) == 2 and cli._DEFERRED == []
    before = signal.getsignal(signal.SIGINT)
    assert cli.main(["info"]) == 0 and signal.getsignal(signal.SIGINT) is before  # put back after the command

    def ends_while_deferred(args):  # the command returns before the re-send: it was interrupted all the same
        callback("start", {})
        return 0

    monkeypatch.setattr(cli, "_info", ends_while_deferred)
    assert cli.main(["info"]) == 130 and cli._DEFERRED == []

def test_the_engines_warnings_are_one_line_in_every_command():
    """`study dqn`, `study replay` and `reproduce dqn` run sweeps without `jaxreplay sweep`'s formatting, so a stale
    lock taken over printed Python's two-line warning with a source line (found by a probe). Every command now
    formats the engine's warnings as one line, any other as Python does, and a caller recording warnings around
    a command (pytest.warns, catch_warnings(record=True)) still records them."""
    import subprocess
    import warnings

    from jaxreplay.engine.sweep import SweepWarning

    script = (
        "import warnings\n"
        "from jaxreplay import cli\n"
        "from jaxreplay.engine.sweep import SweepWarning\n"
        "def handler(args):\n"
        "    warnings.warn('out/sweeps/x/sweep.lock was left by process 1@vm: taken over.', SweepWarning)\n"
        "    warnings.warn('something else', UserWarning)\n"
        "    return 0\n"
        "cli._info = handler\n"
        "formatted = warnings.formatwarning\n"
        "assert cli.main(['info']) == 0 and warnings.formatwarning is formatted\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    assert err[0] == "jaxreplay: warning: out/sweeps/x/sweep.lock was left by process 1@vm: taken over."
    assert err[1].endswith("UserWarning: something else")  # Python's own form (file:line: Category: message)

    def handler(args):
        warnings.warn("taken over.", SweepWarning, stacklevel=2)
        return 0

    cli_info = cli._info
    try:
        cli._info = handler
        with pytest.warns(SweepWarning, match="taken over"):
            assert cli.main(["info"]) == 0
    finally:
        cli._info = cli_info


def test_field_errors_are_read_in_parts_and_said_of_the_option_only_for_the_commands_fields():
    """The library's FieldError keeps its message (field first, as the library names it) and its parts; a command
    says it of the option the user typed where its OPTIONS table names the field, and passes any other unchanged."""
    from jaxreplay._validation import FieldError, check_float, check_float32
    from jaxreplay.cli import common, dqn, linesearch

    with pytest.raises(FieldError) as bare:
        check_float("step_size", -1.0, low=0.0)
    assert (bare.value.field, bare.value.problem, bare.value.shows_value) == ("step_size", "must be >= 0.0, got -1.0.",
                                                                             False)
    assert str(bare.value) == "step_size must be >= 0.0, got -1.0." and isinstance(bare.value, ValueError)
    with pytest.raises(FieldError) as shown:
        check_float32("fixed.step_size", 1e-50)
    assert shown.value.value == 1e-50 and not shown.value.about
    assert str(shown.value).startswith("fixed.step_size = 1e-50 does not fit a float32 (its smallest normal")
    about = FieldError("env_id", "DQN needs a discrete action space.", about="Pendulum-v1")
    assert str(about) == "env_id 'Pendulum-v1': DQN needs a discrete action space." and about.value == "Pendulum-v1"
    for error, options, said in [
        (bare.value, linesearch.OPTIONS, "--step-size must be >= 0.0, got -1.0."),
        (shown.value, linesearch.OPTIONS, "--step-size 1e-50 does not fit a float32 (its smallest normal"),
        (about, dqn.OPTIONS, "--env Pendulum-v1: DQN needs a discrete action space."),
        (bare.value, dqn.OPTIONS, "step_size must be >= 0.0, got -1.0."),  # not a field of `jaxreplay dqn`
    ]:
        with pytest.raises(ValueError) as raised:
            with common.named_as_options(options):
                raise error
        assert str(raised.value).startswith(said)
        assert (raised.value is error) == (error.field not in options)


def test_reproduce_readme_writes_the_committed_runs_table(tmp_path, capsys):
    """`reproduce readme DIR --readme FILE` (its own handler: no --seeds) rewrites docs/claims.md's claims-gpu block
    from docs/paper_scale exactly as committed; a folder with no claims.json is one line of error."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    readme = tmp_path / "claims.md"
    committed = (root / "docs" / "claims.md").read_text()
    readme.write_text(committed.replace("DQN 100 seeds per setting", "DQN 1 seeds per setting"))
    assert cli.main(["reproduce", "readme", str(root / "docs" / "paper_scale"), "--readme", str(readme)]) == 0
    assert readme.read_text() == committed
    assert "claims.json into" in capsys.readouterr().out
    assert cli.main(["reproduce", "readme", str(tmp_path / "nothing"), "--readme", str(readme)]) == 2
    assert "reproduce all" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the hidden --seeds is gone
        cli.main(["reproduce", "readme", str(tmp_path), "--readme", str(readme), "--seeds", "3"])


def test_warnings_raised_during_a_run_print_once_and_the_command_ends(tmp_path, capsys, monkeypatch):
    """Any warning raised while a sweep runs (the engine's own or another, e.g. NumPy's) prints once as one line
    and the command returns: re-emitting inside the recording context used to append each warning to the list
    being printed, looping forever after results.nc was written."""
    import signal
    import warnings

    from jaxreplay.engine import store, sweep

    config = tmp_path / "s.toml"
    config.write_text('experiment = "linesearch"\nseeds = 2\n[setup]\nsteps = 20\nmax_capacity = 20\n'
                      'max_batch_size = 2\n[fixed]\nmemory_size = 5\nbatch_size = 2\n')
    assert cli.main(["sweep", str(config), "--out", str(tmp_path / "warm"), "--quiet"]) == 0  # compiled once here
    prepare = store.ChunkStore.prepare

    def prepare_and_warn(self, scan):
        warnings.warn("overflow encountered in cast", RuntimeWarning)
        warnings.warn("a chunk was set aside", sweep.SweepWarning)
        return prepare(self, scan)

    def hung(signum, frame):
        raise TimeoutError("the command did not end")

    monkeypatch.setattr(store.ChunkStore, "prepare", prepare_and_warn)
    capsys.readouterr()
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)  # a regression fails here instead of hanging (the run itself is compiled: ~1 s)
    try:
        status = cli.main(["sweep", str(config), "--out", str(tmp_path / "out"), "--quiet"])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err.splitlines()
    assert status == 0 and (tmp_path / "out" / "results.nc").exists()
    line = prepare_and_warn.__code__.co_firstlineno + 1
    assert err == [
        f"jaxreplay: warning: RuntimeWarning: overflow encountered in cast (test_cli.py:{line})",
        "jaxreplay: warning: a chunk was set aside",
    ]


def test_every_command_with_a_scale_takes_both_quick_and_full_with_one_meaning_each():
    parser = cli.build_parser()
    base = {
        "reproduce linesearch": ["reproduce", "linesearch", "--out", "o"],
        "reproduce dqn": ["reproduce", "dqn", "--env", "CartPole-v1", "--out", "o"],
        "reproduce all": ["reproduce", "all", "--out", "o"],
        "study dqn": ["study", "dqn", "--env", "CartPole-v1", "--out", "o"],
    }
    defaults = {"reproduce linesearch": True, "reproduce dqn": False, "reproduce all": False, "study dqn": False}
    for name, argv in base.items():
        assert parser.parse_args(argv).quick is defaults[name], name
        assert parser.parse_args([*argv, "--quick"]).quick is True, name
        assert parser.parse_args([*argv, "--full"]).quick is False, name
        with pytest.raises(SystemExit):
            parser.parse_args([*argv, "--quick", "--full"])


def test_a_ctrl_c_while_the_parser_is_built_is_one_line(monkeypatch, capsys):
    """Building the parser imports JAX (about a second): a Ctrl-C then was a 30-55-line traceback, once a false
    `ImportError: Encountered an error while initializing the extension` (found by a probe). It is answered
    after the parser is built: one line, exit 130, Python's handler put back."""
    import os
    import signal

    real = cli.build_parser

    def interrupted_while_building():
        os.kill(os.getpid(), signal.SIGINT)  # delivered at once, in the middle of the build
        return real()

    monkeypatch.setattr(cli, "build_parser", interrupted_while_building)
    # Python's own handler, as in a terminal (a job started in the background, as CI may be, ignores SIGINT).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert cli.main(["info"]) == 128 + signal.SIGINT
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert capsys.readouterr().err == "\njaxreplay: interrupted\n"


def test_an_ascii_only_stdout_and_a_closed_stderr_neither_fail_a_finished_command(tmp_path):
    """Under an ASCII-only stdout (PYTHONIOENCODING=ascii, LC_ALL=POSIX) a finished sweep failed, exit 2 "error:
    'ascii' codec can't encode character '\\xd7'", its results written, and `jaxreplay linesearch` stopped at its
    '±'; with stderr closed (2>&-) the progress bar raised AttributeError, exit 1, no results.nc (found by a
    probe). Characters the stream lacks are escaped; the bar is off without a stderr."""
    config = tmp_path / "tiny.toml"
    config.write_text('experiment = "linesearch"\nseeds = 2\nseed = 0\n[setup]\nsteps = 100\nmax_capacity = 20\n'
                      'max_batch_size = 2\n[fixed]\nstep_size = 1e-2\nbatch_size = 2\n[grid]\nmemory_size = [5, 20]\n')
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "JAX_PLATFORMS": "cpu"}
    sweep = subprocess.run(["bash", "-c", 'exec "$@" 2>&-', "-", sys.executable, "-m", "jaxreplay", "sweep",
                            str(config), "--out", str(tmp_path / "out")], env=env, stdout=subprocess.PIPE, timeout=300)
    assert sweep.returncode == 0 and (tmp_path / "out" / "results.nc").exists()
    assert b"\\xd7" in sweep.stdout  # (its summary line, printed to stdout where there is no stderr)
    report = subprocess.run([sys.executable, "-m", "jaxreplay", "linesearch", "--steps", "100", "--seeds", "2",
                             "--memory-size", "5", "--batch-size", "2"], env=env, capture_output=True, timeout=300)
    assert report.returncode == 0, report.stderr[-500:]
    assert b"\\xb1" in report.stdout and report.stdout.isascii()


def test_the_command_ends_at_once_after_a_ctrl_c_and_with_mains_status_otherwise(monkeypatch, capsys):
    """After a Ctrl-C that landed while XLA compiled a study's first stage, Python's shutdown beside XLA's threads
    crashed the process once it had said "interrupted" (SIGSEGV or SIGABRT in 5 of 6 tries; found by a probe).
    The command's entry point then ends the process at once, its output flushed (os._exit)."""
    import tomllib

    ended = []

    class Ended(Exception):
        pass

    def exit_now(status):
        ended.append(status)
        raise Ended

    monkeypatch.setattr(cli.os, "_exit", exit_now)
    monkeypatch.setattr(cli, "main", lambda: print("jaxreplay study: interrupted", file=sys.stderr) or 130)
    with pytest.raises(Ended):
        cli.entry()
    assert ended == [130] and capsys.readouterr().err == "jaxreplay study: interrupted\n"
    monkeypatch.setattr(cli, "main", lambda: 2)
    with pytest.raises(SystemExit) as status:
        cli.entry()
    assert status.value.code == 2 and ended == [130]
    with open(pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as fh:
        assert tomllib.load(fh)["project"]["scripts"] == {"jaxreplay": "jaxreplay.cli:entry"}
