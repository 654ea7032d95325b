"""Sweep engine throughput: the LineSearch ER sweep as the number of runs grows, vs NumPy and a Python loop.

The workload is the paper's LineSearch with uniform replay (T = 1000 steps,
m = 5 sequential updates per step, α = 1e-3, max_capacity 1000), swept over
10 memory sizes N × seeds. Three ways to do the same runs:

* **ours**: :func:`jaxreplay.engine.sweep.run`, one compiled program per chunk,
  vmapped (and sharded over the local devices). Run time excludes compilation
  (reported separately).
* **(a) NumPy**: :func:`benchmarks._numpy_linesearch.run_numpy`, the same
  algorithm vectorised over runs with NumPy (the same masked work).
* **(b) Python loop**: the jitted single-configuration function
  (``jax.jit(linesearch.run)``) called once per run, each call waited for.

Per-run cost of (a) and (b) is measured on a subset of runs (they are linear
in the number of runs) and compared with ours at the largest sweep.
Targets (issue 4): per-run cost flat within 1.5× from 10² to 10⁴ runs, ≥ 20×
(a), ≥ 100× (b). With a GPU present the same command also sweeps 10⁵ runs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import jax
import numpy as np

from benchmarks import _numpy_linesearch, _timing

TITLE = "Sweep engine: LineSearch ER sweep scaling, vs NumPy and a Python loop"

MEMORY_SIZES = (10, 50, 100, 200, 300, 400, 500, 600, 800, 1000)
STEPS, MAX_CAPACITY, BATCH, STEP_SIZE = 1000, 1000, 5, 1e-3

MODES = {
    "quick": dict(runs=(100, 1000, 10_000), repeats=3, numpy_runs=1000, loop_runs=20),
    "full": dict(runs=(100, 300, 1000, 3000, 10_000, 30_000), repeats=5, numpy_runs=1000, loop_runs=100),
}


def _sweep(runs: int):
    from jaxreplay.engine import sweep as sw

    return sw.Sweep("linesearch", seeds=runs // len(MEMORY_SIZES),
                    setup={"steps": STEPS, "max_capacity": MAX_CAPACITY, "max_batch_size": BATCH},
                    fixed={"batch_size": BATCH, "step_size": STEP_SIZE}, grid={"memory_size": list(MEMORY_SIZES)})


def _engine(runs: int, repeats: int) -> dict:
    from jaxreplay.engine import sweep as sw

    sweep = _sweep(runs)
    results = [sw.run(sweep, None, progress=False) for _ in range(repeats)]
    run_s = float(np.median([r.stats.run_seconds for r in results]))
    stats = results[0].stats
    metric = float(results[0].dataset.final_metric.mean())
    return dict(runs=sweep.num_runs, chunk=stats.chunk_size, devices=stats.devices, compile_s=stats.compile_seconds,
                run_s=run_s, per_run_s=run_s / sweep.num_runs, metric=metric, compilations=stats.compilations)


def _numpy(runs: int) -> dict:
    memory = np.resize(np.array(MEMORY_SIZES), runs)
    t0 = time.perf_counter()
    dtheta = _numpy_linesearch.run_numpy(np.arange(runs), memory, BATCH, STEP_SIZE, 0.0, steps=STEPS,
                                         max_capacity=MAX_CAPACITY, max_batch_size=BATCH)
    seconds = time.perf_counter() - t0
    return dict(runs=runs, seconds=seconds, per_run_s=seconds / runs,
                metric=float(np.abs(dtheta[:, -1]).sum(-1).mean()))


def _python_loop(runs: int) -> dict:
    from jaxreplay.experiments import linesearch as ls

    setup = ls.Setup(steps=STEPS, max_capacity=MAX_CAPACITY, max_batch_size=BATCH)
    fn = jax.jit(ls.run, static_argnums=2)
    hp = lambda i: ls.Hyperparameters(memory_size=MEMORY_SIZES[i % len(MEMORY_SIZES)], batch_size=BATCH,  # noqa: E731
                                      step_size=np.float32(STEP_SIZE))
    jax.block_until_ready(fn(jax.random.key(0), hp(0), setup))  # compile and warm up
    t0 = time.perf_counter()
    for i in range(runs):
        jax.block_until_ready(fn(jax.random.fold_in(jax.random.key(0), i), hp(i), setup))
    seconds = time.perf_counter() - t0
    return dict(runs=runs, seconds=seconds, per_run_s=seconds / runs)


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    _timing.disable_compilation_cache()
    mode = dict(MODES[mode_name])
    on_accelerator = jax.default_backend() != "cpu"
    runs_list = list(mode["runs"]) + ([100_000] if on_accelerator else [])
    engine = []
    for runs in runs_list:
        progress(f"  ours: {runs} runs")
        engine.append(_engine(runs, mode["repeats"] if runs <= 1000 else 1))
    progress(f"  (a) NumPy: {mode['numpy_runs']} runs")
    numpy = _numpy(mode["numpy_runs"])
    progress(f"  (b) Python loop of the jitted single run: {mode['loop_runs']} runs")
    loop = _python_loop(mode["loop_runs"])
    return _report(mode_name, engine, numpy, loop)


HEADLINES: list[list[str]] = []  # filled by run(): the summary rows of `python -m benchmarks`


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _report(mode_name, engine, numpy, loop) -> str:
    base = engine[0]["per_run_s"]
    rows = [[f"{e['runs']:,}", f"{e['chunk']:,} × {e['devices']} dev", f"{e['compile_s']:.1f} s", f"{e['run_s']:.3g} s",
             f"{e['runs'] / e['run_s']:,.0f}", _ms(e["per_run_s"]), f"{e['per_run_s'] / base:.2f}×"] for e in engine]
    scaling = _timing.markdown_table(
        ["runs", "chunk", "compile", "run (excl. compile)", "runs/s", "per run", "per run vs 10² runs"], rows)
    small = [e for e in engine if e["runs"] <= 10_000]
    # Growth, not spread: the target is that cost per run does not *grow* with the
    # number of runs; larger sweeps getting cheaper per run (fixed costs amortised) is fine.
    smallest = min(small, key=lambda e: e["runs"])
    growth = max(e["per_run_s"] for e in small) / smallest["per_run_s"]
    largest = max(small, key=lambda e: e["runs"])
    ratio_numpy = numpy["per_run_s"] / largest["per_run_s"]
    ratio_loop = loop["per_run_s"] / largest["per_run_s"]
    baselines = _timing.markdown_table(
        ["implementation", "runs timed", "per run", f"ours ({largest['runs']:,} runs) is", "target"],
        [
            ["ours: jaxreplay.engine.sweep", f"{largest['runs']:,}", _ms(largest["per_run_s"]), "1×", ""],
            ["(a) NumPy, vectorised over runs", f"{numpy['runs']:,}", _ms(numpy["per_run_s"]),
             f"**{ratio_numpy:.1f}×** faster", "≥ 20×"],
            ["(b) jitted single run in a Python loop", f"{loop['runs']:,}", _ms(loop["per_run_s"]),
             f"**{ratio_loop:.1f}×** faster", "≥ 100×"],
        ],
    )
    HEADLINES[:] = [
        ["LineSearch sweep per-run cost growth, worst size / 10² runs (10² … 10⁴ runs)", f"{growth:.2f}×", "≤ 1.5×"],
        ["LineSearch sweep vs NumPy vectorised over runs (per run)", f"{ratio_numpy:.1f}×", "≥ 20×"],
        ["LineSearch sweep vs jitted single run in a Python loop (per run)", f"{ratio_loop:.1f}×", "≥ 100×"],
    ]
    sanity = (f"Sanity: mean final metric M over the sweep {largest['metric']:.4f} (ours) vs {numpy['metric']:.4f} "
              "(NumPy, same settings, its own random draws): the two do the same experiment.")
    verdict = (f"Per-run cost from 10² to 10⁴ runs grows by at most **{growth:.2f}×** over the 10²-run sweep "
               f"(target ≤ 1.5×; below 1: larger sweeps are cheaper per run); "
               f"one compilation per sweep ({engine[-1]['compilations']}).")
    return "\n\n".join([
        f"LineSearch ER, T = {STEPS}, m = {BATCH}, α = {STEP_SIZE}, max_capacity {MAX_CAPACITY}, "
        f"{len(MEMORY_SIZES)} memory sizes × seeds; backend `{jax.default_backend()}`, mode `{mode_name}`.",
        scaling, verdict, baselines, sanity,
    ])


if __name__ == "__main__":
    print(run(sys.argv[1] if len(sys.argv) > 1 else "quick"))
