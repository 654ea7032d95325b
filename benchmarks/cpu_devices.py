"""One JAX CPU device per core against one: what ``jaxreplay.engine.batch.use_cpu_cores`` gives a sweep.

XLA:CPU runs a program's kernels one after another on one core, and the engine's
sweeps are made of small kernels (a LineSearch step is ~65 kernels over a few
hundred runs each). With one JAX CPU device per core the engine shards each chunk
over the cores (``jax.sharding``), one program per core. The ``jaxreplay``
command and ``python -m benchmarks`` set that up as they start
(:func:`jaxreplay.engine.batch.use_cpu_cores`); this benchmark measures what it
gives and checks that the results are the same bits.

JAX reads its CPU device count once per process, so each variant runs in its own
child process (``python -m benchmarks.cpu_devices --child MODE`` with
``JAX_NUM_CPU_DEVICES`` set), and the variants alternate (one device, every core,
one device, ...) so that both see the same load of a shared machine. Each child
times, through the engine (compilation excluded, the median of its timed calls):

* the ``sweep`` benchmark's LineSearch ER sweep (10 memory sizes × seeds, T = 1000, m = 5);
* the ``dqn`` benchmark's DQN CartPole sweep over 100 seeds (aggregate env steps/s);

and digests the results (every record), which must not depend on the device count.
The children with one device per core also time a lone run (one seed of Breakout-MinAtar's
preset), which the engine puts on one device, against the same run given every device
(``devices=``: padded to 2 runs on each), with the same digest check.
CPU only, and only where XLA:CPU's pool has more than one thread.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
from collections.abc import Callable

import jax
import numpy as np

from benchmarks import _timing

TITLE = "One JAX CPU device per core vs one (the engine's sweeps)"

MODES = {
    "quick": dict(linesearch_runs=10_000, dqn_steps=2_000, dqn_seeds=100, lone_steps=1_000, repeats=3, rounds=2),
    "full": dict(linesearch_runs=30_000, dqn_steps=10_000, dqn_seeds=100, lone_steps=5_000, repeats=5, rounds=3),
}
HEADLINES: list[list[str]] = []


def _digest(dataset) -> str:
    """MD5 of every variable of ``dataset`` (values and names), in name order."""
    h = hashlib.md5()
    for name in sorted(dataset.data_vars):
        h.update(name.encode() + np.ascontiguousarray(dataset[name].values).tobytes())
    return h.hexdigest()


def child(mode_name: str) -> dict:
    """In the child process: seconds per sweep of each workload, and its results' digest."""
    from benchmarks import dqn, sweep
    from jaxreplay.engine import sweep as sw

    _timing.disable_compilation_cache()
    mode = MODES[mode_name]
    setup, hparams = dqn._setup(mode["dqn_steps"])
    workloads = {
        "linesearch": (sweep._sweep(mode["linesearch_runs"]), mode["linesearch_runs"] * sweep.STEPS),
        "dqn": (sw.Sweep("dqn", seeds=mode["dqn_seeds"], setup=setup, fixed=hparams._asdict()),
                mode["dqn_seeds"] * setup.total_steps),
    }
    out: dict = dict(devices=jax.local_device_count())
    for name, (declared, steps) in workloads.items():
        result = sw.run(declared, None, progress=False)  # compiles
        seconds = [_timing.engine_call_seconds(sw.run, declared) for _ in range(mode["repeats"])]
        out[name] = dict(seconds=statistics.median(seconds), steps=steps, chunk=result.stats.chunk_size,
                         digest=_digest(result.dataset))
    if out["devices"] > 1:
        out["lone"] = _lone_run(mode)
    return out


def _lone_run(mode: dict) -> dict:
    """A lone run (one seed of Breakout-MinAtar's preset) as the engine places it (one device) and given every
    device (padded to 2 runs on each), interleaved: seconds (median), devices used and digest of each."""
    import functools

    from benchmarks import minatar
    from jaxreplay.engine import sweep as sw

    setup, hparams = minatar._setup(mode["lone_steps"])
    lone = sw.Sweep("dqn", seeds=1, setup=setup, fixed=hparams._asdict())
    ways = {"engine": sw.run, "every device": functools.partial(sw.run, devices=jax.local_devices())}
    results = {way: run(lone, None, progress=False) for way, run in ways.items()}  # compiles
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(mode["repeats"]):
        for way, run in ways.items():
            seconds[way].append(_timing.engine_call_seconds(run, lone))
    return {way: dict(seconds=statistics.median(seconds[way]), devices=results[way].stats.devices,
                      digest=_digest(results[way].dataset), steps=mode["lone_steps"]) for way in ways}


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    HEADLINES[:] = []
    if jax.default_backend() != "cpu":
        return f"Backend `{jax.default_backend()}`: this measures JAX's CPU devices; nothing to measure here."
    from jaxreplay.engine.batch import cpu_core_devices

    cores = cpu_core_devices()  # (what use_cpu_cores gives a process started here)
    if cores < 2:
        return "XLA:CPU's pool has one thread here: one CPU device is all there is."
    variants = {"one CPU device": "1", f"{cores} CPU devices (one per core)": str(cores)}
    results: dict[str, list[dict | str]] = {name: [] for name in variants}
    for r in range(MODES[mode_name]["rounds"]):
        for name, count in variants.items():
            progress(f"  round {r + 1}: {name}")
            results[name].append(_timing.run_child_with_xla_flags(
                "benchmarks.cpu_devices", mode_name, "", timeout=1800, environ={"JAX_NUM_CPU_DEVICES": count}))
    return _report(mode_name, results)


def _report(mode_name: str, results: dict[str, list[dict | str]]) -> str:
    (one_name, one_runs), (many_name, many_runs) = results.items()
    for name, runs in results.items():
        if not any(isinstance(r, dict) for r in runs):
            return f"{name} failed: {runs[0]}"
    one = [r for r in one_runs if isinstance(r, dict)]
    many = [r for r in many_runs if isinstance(r, dict)]
    titles = {"linesearch": "LineSearch ER sweep", "dqn": "DQN CartPole sweep"}
    rows = []
    for w, title in titles.items():
        t_one = statistics.median(r[w]["seconds"] for r in one)
        t_many = statistics.median(r[w]["seconds"] for r in many)
        same = len({r[w]["digest"] for r in one + many}) == 1
        steps = one[0][w]["steps"]
        unit = "run steps/s" if w == "linesearch" else "env steps/s"
        rows.append([f"{title} ({one[0][w]['chunk']:,} / {many[0][w]['chunk']:,} runs a chunk)",
                     f"{t_one:.3g} s ({_timing.format_rate(steps / t_one)} {unit})",
                     f"{t_many:.3g} s ({_timing.format_rate(steps / t_many)} {unit})",
                     f"{t_one / t_many:.2f}×", "yes" if same else "**no**"])
        HEADLINES.append([f"{title}, {many[0]['devices']} CPU devices (one per core) ÷ one: speed-up",
                          f"{t_one / t_many:.2f}×", "–"])
        HEADLINES.append([f"{title}, {many[0]['devices']} CPU devices vs one: results bit-identical",
                          "yes" if same else "no", "yes"])
    lone = [r["lone"] for r in many if "lone" in r]
    if lone:
        t = {way: statistics.median(r[way]["seconds"] for r in lone) for way in ("engine", "every device")}
        same = len({r[way]["digest"] for r in lone for way in t}) == 1
        steps = lone[0]["engine"]["steps"]
        rows.append([f"a lone run, Breakout-MinAtar, {steps:,} env steps ({lone[0]['engine']['devices']} device: the "
                     f"engine's choice; {lone[0]['every device']['devices']}: all given, the run padded to 2 on each)",
                     f"{t['engine']:.3g} s", f"{t['every device']:.3g} s", f"{t['engine'] / t['every device']:.2f}×",
                     "yes" if same else "**no**"])
        HEADLINES.append(["a lone MinAtar run given every core ÷ on the one the engine picks: speed-up (< 1: one is faster)",
                          f"{t['engine'] / t['every device']:.2f}×", "–"])
    rounds = MODES[mode_name]["rounds"]
    return "\n\n".join([
        f"Mode `{mode_name}`; `JAX_NUM_CPU_DEVICES=1` vs `{many[0]['devices']}`, each in its own process, "
        f"alternating, {rounds} processes per variant (median of their medians). Steps: LineSearch runs × T, "
        "DQN seeds × env steps.",
        _timing.markdown_table(["sweep", one_name, many_name, "speed-up", "same bits (every record)"], rows),
    ])


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
    else:
        print(run(sys.argv[1] if len(sys.argv) > 1 else "quick"))
