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

Per-run cost of (a) and (b) is measured on a subset of runs (10³ for NumPy,
whose cost per run is no lower at more runs: measured 1.3-2.3× higher at 10⁴,
so timing it at 10³ understates our lead) and compared with ours at the
largest sweep (at most 10⁴ runs); ours at that size and (a) are timed in alternation, one of each per
round, and the ratio is the median of the rounds' ratios (a shared machine's
speed can drift between two timings minutes apart).
Targets: per-run cost flat within 1.5× from 10² to 10⁴ runs, ≥ 20×
(a), ≥ 100× (b). With a GPU present the same command also sweeps 10⁵ runs.

**End to end vs the bare kernel**. The same runs (10⁴ on a CPU,
10⁶ on an accelerator), in one process, timed in alternated rounds (3 on a
CPU, 1 on an accelerator), each round timing every way once:

* **bare kernels**: ``jax.jit`` of :func:`~jaxreplay.experiments.linesearch.run_batch`
  called on the engine's chunk shape once per chunk, outputs left on the
  device (the work alone): one returning M(T) only (XLA drops the curves), the
  reference of the engine keeping final metrics; one returning the full curves,
  the reference of the engine keeping them (an earlier version compared both
  with the full-curves kernel, whose 3 MB of outputs a call made it 1.1-1.9 s
  against the final-metrics engine's 1.1-1.3 s on the 2-core CPU);
* **engine, final metrics**: :func:`jaxreplay.engine.sweep.run` keeping no
  per-step record (``Record(keep=())``): what a sweep that wants M(T) moves;
* **engine, full curves**: the default, every run's Δθ(t) and N(t) to the host.

Targets: final metrics at ≥ 80 % of the bare kernel's TD updates/s; full
curves within 1.5× of the host-transfer bound (the records' bytes ÷ the
device-to-host bandwidth measured on the spot with one large array).
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
    "quick": dict(runs=(100, 1000, 10_000), repeats=3, numpy_runs=1000, loop_runs=20, end_to_end=10_000),
    "full": dict(runs=(100, 300, 1000, 3000, 10_000, 30_000), repeats=5, numpy_runs=1000, loop_runs=100,
                 end_to_end=30_000),
}
END_TO_END_ACCELERATOR = 1_000_000  # runs of the end-to-end comparison when the backend is not the CPU


def _sweep(runs: int, record=None):
    from jaxreplay.engine import sweep as sw

    return sw.Sweep("linesearch", seeds=runs // len(MEMORY_SIZES),
                    setup={"steps": STEPS, "max_capacity": MAX_CAPACITY, "max_batch_size": BATCH},
                    fixed={"batch_size": BATCH, "step_size": STEP_SIZE}, grid={"memory_size": list(MEMORY_SIZES)},
                    **({} if record is None else {"record": record}))


def _td_updates(runs: int) -> int:
    return runs * STEPS * BATCH


def _bare_kernel(sweep, chunk: int, final_only: bool = False) -> dict:
    """``jit(run_batch)`` called once per chunk of ``sweep``, on that chunk's runs, outputs left on the device;
    with ``final_only`` the program returns M(T) alone (XLA then drops the curves, as the engine's program
    keeping final metrics does).

    Each call gets its own chunk's keys and hyperparameters, made before the clock starts: the same work
    as the engine (an earlier version called the first chunk's runs, memory sizes 10 and 50 only, every
    time: cache-friendlier work than the sweep's, which the engine seemed 20-28 % slower than on the 2-core CPU).
    """
    from jaxreplay.engine.execute import padded_runs, run_keys
    from jaxreplay.experiments import linesearch as ls

    setup = sweep.make_setup()
    calls = -(-sweep.num_runs // chunk)
    inputs = []
    for c in range(calls):
        runs = padded_runs(np.arange(c * chunk, min((c + 1) * chunk, sweep.num_runs)), chunk, 1)  # as the engine
        keys = run_keys(sweep.seed, runs % sweep.seeds, jax.default_backend())  # the engine's keys
        inputs.append((keys, jax.tree.map(jax.numpy.asarray, sweep.hyperparameters(runs))))

    def fn(keys, hparams):
        result = ls.run_batch(keys, hparams, setup)
        return result.final_metric if final_only else result

    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*inputs[0])
    compiled = lowered.compile(compiler_options=ls.EXPERIMENT.compiler_options_on(jax.default_backend()))
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(*inputs[0]))  # warm-up

    def seconds() -> float:
        """One pass over the chunks, timed."""
        t0 = time.perf_counter()
        outs = [compiled(*args) for args in inputs]  # dispatched back to back, as the engine
        jax.block_until_ready(outs)
        return time.perf_counter() - t0

    return dict(seconds=seconds, compile_s=compile_s, calls=calls)


def host_transfer_bandwidth(nbytes: int = 256 * 2**20) -> float:
    """Bytes/s of copying one ``nbytes`` device array to a NumPy array (the fastest of 3 fresh copies)."""
    x = jax.numpy.ones((nbytes // 4,), jax.numpy.float32)
    on_cpu = jax.default_backend() == "cpu"
    best = float("inf")
    for i in range(3):
        y = jax.block_until_ready(x + i)  # a fresh array: nothing cached on the host
        t0 = time.perf_counter()
        # On the CPU backend np.asarray may alias the buffer: copy, which is what a transfer costs there.
        np.array(y, copy=True) if on_cpu else np.asarray(y)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


def _end_to_end(runs: int, repeats: int) -> dict:
    """The bare kernel, the engine keeping final metrics, and the engine keeping full curves, on ``runs``."""
    from jaxreplay.engine import sweep as sw
    from jaxreplay.engine.records import Record

    full_sweep, final_sweep = _sweep(runs), _sweep(runs, Record(keep=()))
    full = sw.run(full_sweep, None, progress=False)  # compiles both engine programs before the rounds
    final = sw.run(final_sweep, None, progress=False)
    if not np.array_equal(full.dataset.final_metric.values, final.dataset.final_metric.values):
        raise AssertionError("keeping fewer records changed the final metrics")
    bare = _bare_kernel(final_sweep, final.stats.chunk_size, final_only=True)
    bare_full = _bare_kernel(full_sweep, full.stats.chunk_size)
    # In alternation, each engine way beside its bare kernel, one of each per round (the machine's speed drifts).
    engine_s = lambda sweep: _timing.engine_call_seconds(sw.run, sweep)  # noqa: E731
    rounds = [dict(final_s=engine_s(final_sweep), bare_s=bare["seconds"](), full_s=engine_s(full_sweep),
                   bare_full_s=bare_full["seconds"]()) for _ in range(repeats)]
    bandwidth = host_transfer_bandwidth()
    record_bytes = full.stats.result_bytes_per_run * full_sweep.num_runs
    return dict(runs=full_sweep.num_runs, chunk=final.stats.chunk_size, full_chunk=full.stats.chunk_size,
                calls=bare["calls"], record_bytes=record_bytes, bandwidth=bandwidth,
                transfer_s=record_bytes / bandwidth, compile_s=bare["compile_s"], rounds=rounds)


def _engine(runs: int, repeats: int) -> dict:
    from jaxreplay.engine import sweep as sw

    sweep = _sweep(runs)
    # The whole call less its compilation, as NumPy's side is timed whole (the engine's run_seconds, the chunk
    # loop alone, left out planning and assembly: 2-3 % of the call at 10⁴ runs, a review of the benchmarks).
    seconds, results = zip(*(_timing.engine_call(sw.run, sweep) for _ in range(repeats)))
    run_s = float(np.median(seconds))
    stats = results[0].stats
    metric = float(results[0].dataset.final_metric.mean())
    return dict(runs=sweep.num_runs, chunk=stats.chunk_size, devices=stats.devices, compile_s=stats.compile_seconds,
                run_s=run_s, per_run_s=run_s / sweep.num_runs, metric=metric, compilations=stats.compilations)


def _numpy(runs: int, repeats: int) -> dict:
    """NumPy vectorised over ``runs`` runs, the median of ``repeats`` timings (ours is a median of as many)."""
    memory = np.resize(np.array(MEMORY_SIZES), runs)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dtheta = _numpy_linesearch.run_numpy(np.arange(runs), memory, BATCH, STEP_SIZE, 0.0, steps=STEPS,
                                             max_capacity=MAX_CAPACITY, max_batch_size=BATCH)
        times.append(time.perf_counter() - t0)
    seconds = float(np.median(times))
    return dict(runs=runs, seconds=seconds, per_run_s=seconds / runs,
                metric=float(np.abs(dtheta[:, -1]).sum(-1).mean()))


def _median_round(results: list[dict]) -> dict:
    """The first result with its time fields replaced by their medians over ``results`` (timed rounds)."""
    out = dict(results[0])
    for field in ("run_s", "seconds", "per_run_s"):
        if field in out:
            out[field] = float(np.median([r[field] for r in results]))
    return out


def _python_loop(runs: int) -> dict:
    from jaxreplay.engine.execute import run_keys
    from jaxreplay.experiments import linesearch as ls

    setup = ls.Setup(steps=STEPS, max_capacity=MAX_CAPACITY, max_batch_size=BATCH)
    hp = lambda i: ls.Hyperparameters(memory_size=MEMORY_SIZES[i % len(MEMORY_SIZES)], batch_size=BATCH,  # noqa: E731
                                      step_size=np.float32(STEP_SIZE))
    keys = list(run_keys(0, np.arange(runs), jax.default_backend()))  # the engine's keys, made before the clock
    fn = _timing.compiled_as_the_engine(ls.run, ls.EXPERIMENT, keys[0], hp(0), setup, static_argnums=2)
    jax.block_until_ready(fn(keys[0], hp(0), setup))  # warm up
    t0 = time.perf_counter()
    for i in range(runs):
        jax.block_until_ready(fn(keys[i], hp(i), setup))
    seconds = time.perf_counter() - t0
    return dict(runs=runs, seconds=seconds, per_run_s=seconds / runs)


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    _timing.disable_compilation_cache()
    mode = dict(MODES[mode_name])
    on_accelerator = jax.default_backend() != "cpu"
    runs_list = list(mode["runs"]) + ([100_000] if on_accelerator else [])
    # The sweep compared with NumPy and NumPy itself are timed in alternation, round by round: this
    # machine's speed can move by 20-40 % within minutes, which a ratio of two timings minutes apart absorbs.
    compared = max(r for r in runs_list if r <= 10_000)
    engine = []
    for runs in runs_list:
        if runs != compared:
            progress(f"  ours: {runs} runs")
            engine.append(_engine(runs, mode["repeats"] if runs <= 1000 else 1))
    rounds = []
    for i in range(mode["repeats"]):
        progress(f"  round {i + 1} of {mode['repeats']}: ours, {compared} runs; (a) NumPy, {mode['numpy_runs']} runs")
        rounds.append((_engine(compared, 1), _numpy(mode["numpy_runs"], 1)))
    engine.append(_median_round([r[0] for r in rounds]))
    engine.sort(key=lambda e: e["runs"])
    numpy = _median_round([r[1] for r in rounds])
    numpy["round_ratios"] = [n["per_run_s"] / e["per_run_s"] for e, n in rounds]
    progress(f"  (b) Python loop of the jitted single run: {mode['loop_runs']} runs")
    loop = _python_loop(mode["loop_runs"])
    runs = END_TO_END_ACCELERATOR if on_accelerator else mode["end_to_end"]
    progress(f"  end to end vs the bare kernel: {runs:,} runs")
    e2e = _end_to_end(runs, repeats=1 if runs > 10_000 else 3)
    return _report(mode_name, engine, numpy, loop) + "\n\n" + _end_to_end_report(e2e)


HEADLINES: list[list[str]] = []  # filled by run(): the summary rows of `python -m benchmarks`


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _report(mode_name, engine, numpy, loop) -> str:
    base = engine[0]["per_run_s"]
    # A sweep whose chunk shape an earlier one compiled reuses its program (the engine's per-process cache).
    compile_cell = lambda e: f"{e['compile_s']:.1f} s" if e["compilations"] else "reused"  # noqa: E731
    rows = [[f"{e['runs']:,}", f"{e['chunk']:,} × {e['devices']} dev", compile_cell(e), f"{e['run_s']:.3g} s",
             f"{e['runs'] / e['run_s']:,.0f}", _ms(e["per_run_s"]), f"{e['per_run_s'] / base:.2f}×"] for e in engine]
    scaling = _timing.markdown_table(
        ["runs", "chunk", "compile", "run (excl. compile)", "runs/s", "per run", "per run vs 10² runs"], rows)
    small = [e for e in engine if e["runs"] <= 10_000]
    # Growth, not spread: the target is that cost per run does not *grow* with the
    # number of runs; larger sweeps getting cheaper per run (fixed costs amortised) is fine.
    smallest = min(small, key=lambda e: e["runs"])
    growth = max(e["per_run_s"] for e in small) / smallest["per_run_s"]
    largest = max(small, key=lambda e: e["runs"])
    ratio_numpy = float(np.median(numpy["round_ratios"]))
    ratio_loop = loop["per_run_s"] / largest["per_run_s"]
    baselines = _timing.markdown_table(
        ["implementation", "runs timed", "per run", f"ours ({largest['runs']:,} runs) is", "target"],
        [
            ["ours: jaxreplay.engine.sweep", f"{largest['runs']:,}", _ms(largest["per_run_s"]), "1×", ""],
            ["(a) NumPy, vectorised over runs", f"{numpy['runs']:,}", _ms(numpy["per_run_s"]),
             f"**{ratio_numpy:.1f}×** faster (median of {len(numpy['round_ratios'])} alternated rounds: "
             + ", ".join(f"{r:.2f}×" for r in numpy["round_ratios"]) + ")", "≥ 20×"],
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
               f"at most one compilation per sweep ({sum(e['compilations'] for e in engine)} for the "
               f"{len(engine)} sweeps: one per chunk shape, reused by the sweeps that share it).")
    return "\n\n".join([
        f"LineSearch ER, T = {STEPS}, m = {BATCH}, α = {STEP_SIZE}, max_capacity {MAX_CAPACITY}, "
        f"{len(MEMORY_SIZES)} memory sizes × seeds; backend `{jax.default_backend()}`, mode `{mode_name}`.",
        scaling, verdict, baselines, sanity,
    ])


def _end_to_end_report(e: dict) -> str:
    """The end-to-end table from ``e`` (:func:`_end_to_end`'s): times are the medians over ``e["rounds"]``
    (each a dict of ``final_s``, ``bare_s``, ``full_s``, ``bare_full_s``), ratios the medians of each round's."""
    updates = _td_updates(e["runs"])
    rounds = e["rounds"]
    median = lambda f: float(np.median([f(r) for r in rounds]))  # noqa: E731
    t = {k: median(lambda r, k=k: r[k]) for k in ("final_s", "bare_s", "full_s", "bare_full_s")}
    final_share = median(lambda r: r["bare_s"] / r["final_s"])
    full_over_bound = median(lambda r: r["full_s"] / max(e["transfer_s"], r["bare_full_s"]))
    rate = lambda seconds: f"{updates / seconds:.3g}"  # noqa: E731
    rows = [
        ["bare kernel, M(T) only: `jit(run_batch(...).final_metric)`, left on the device", f"{t['bare_s']:.3g} s",
         rate(t["bare_s"]), "1×", f"{e['calls']} call(s) of {e['chunk']:,} runs"],
        ["engine, final metrics only (`Record(keep=())`)", f"{t['final_s']:.3g} s", rate(t["final_s"]),
         f"{median(lambda r: r['final_s'] / r['bare_s']):.2f}×", f"chunks of {e['chunk']:,}"],
        ["bare kernel, full curves: `jit(run_batch)`, left on the device", f"{t['bare_full_s']:.3g} s",
         rate(t["bare_full_s"]), "1×", f"chunks of {e['full_chunk']:,}"],
        ["engine, full curves (default)", f"{t['full_s']:.3g} s", rate(t["full_s"]),
         f"{median(lambda r: r['full_s'] / r['bare_full_s']):.2f}×",
         f"chunks of {e['full_chunk']:,}; {_timing.format_bytes(e['record_bytes'])} of records"],
        ["host-transfer bound of the full curves", f"{e['transfer_s']:.3g} s", rate(e["transfer_s"]), "–",
         f"{_timing.format_bytes(e['record_bytes'])} at {e['bandwidth'] / 1e9:.3g} GB/s (measured)"],
    ]
    HEADLINES.extend([
        [f"LineSearch sweep end to end, final metrics only, share of the bare kernel's throughput "
         f"({e['runs']:,} runs)", f"{100 * final_share:.0f} %", "≥ 80 %"],
        [f"LineSearch sweep end to end, full curves, time ÷ max(host-transfer bound, bare kernel) "
         f"({e['runs']:,} runs)", f"{full_over_bound:.2f}×", "≤ 1.5×"],
    ])
    table = _timing.markdown_table(["way", "run time (excl. compile)", "TD updates/s", "vs its bare kernel", "note"],
                                   rows)
    return "\n\n".join([
        f"**End to end vs the bare kernel**, {e['runs']:,} runs (T = {STEPS}, m = {BATCH}: "
        f"{updates:.3g} TD updates); backend `{jax.default_backend()}`; medians of {len(rounds)} alternated "
        "round(s), each timing the four ways once; the ratios below are the medians of the rounds' ratios.",
        table,
        f"Final metrics only run at **{100 * final_share:.0f} %** of the bare kernel's throughput (target ≥ 80 %); "
        f"full curves take **{full_over_bound:.2f}×** the larger of the host-transfer bound and their bare kernel "
        "(target ≤ 1.5×). The final metrics of the two engine runs are checked equal.",
    ])


if __name__ == "__main__":
    print(run(sys.argv[1] if len(sys.argv) > 1 else "quick"))
