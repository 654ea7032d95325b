"""Roofline of the headline workloads: which limit (launches, memory, arithmetic) bounds one step.

For each workload (one compiled program that runs ``steps`` steps per call)
this module reports, per step of its step loop (all runs / buffers / seeds of
the program together):

* **kernels** and **host syncs**, counted in the optimized HLO
  (:mod:`benchmarks._hlo` states the rules), and the while loops in a step;
* **FLOPs** from XLA's ``compiled.cost_analysis()``. XLA counts a while body
  once whatever its trip count (checked on the spot by
  :func:`cost_counts_loop_once`), so the program's total is one step plus the
  one-off work outside the loop; loops nested inside a step are counted once
  too, so the figure is a lower bound (marked ≥) when a step has them;
* **bytes**: the compulsory traffic of a step, counted analytically below
  (each workload states what it must read and write); XLA's own "bytes
  accessed" is shown beside it but counts the whole array for every gather,
  scatter and in-place update, so it overstates traffic by orders of magnitude
  for replay (a buffer is read 50 slots at a time);
* **random reads**: the rows a step reads or writes at places that depend on
  the data (the transitions drawn and the one added, one row per storage
  leaf: a leaf is its own array), each workload counting its own;
* **inter-kernel traffic**: the bytes the step's kernels write and read back
  from one another, counted in the optimized HLO (:mod:`benchmarks._hlo`:
  each kernel's output, its operands, in-place updates and gathers as the
  slices they touch);
* **bounds**: launch = kernels × t_kernel + host syncs × t_sync, memory =
  bytes ÷ bandwidth, compute = FLOPs ÷ peak, random access = random reads ×
  t_random (the marginal cost of one random row read from an array as large
  as the workload's state, at the workload's rows per step, measured on the
  spot as the difference between loops gathering that many rows and 8 rows a
  step: what a gather pays per row when its rows are not in cache, without a
  kernel's fixed cost), traffic = inter-kernel bytes ÷ the bandwidth of an array
  the size of the step's typical kernel output (measured on the spot, see
  :func:`measure_traffic_bandwidth`: such arrays sit in cache), dot = Σ count ×
  the time of that ``dot_general`` alone, for each distinct dot the step runs
  (found in the optimized HLO by :mod:`benchmarks._hlo`, rebuilt and timed on
  the spot at the step's own shapes by :func:`measure_dot`: what this device
  does for these matrix products, which for a batch of tiny matmuls is a few
  percent of the large-matmul peak the compute bound divides by); the binding
  limit is the largest, and measured ÷ bound says how far the measured step
  time is above it;
* **where the time goes**: one call traced by ``jax.profiler``, each kernel's
  time per step (:func:`profile_kernels`): the costliest kernels, and so what
  the bounds leave out (on a CPU a step's kernels run one after another, so
  their times add up where the bounds take the largest).

The device's figures: peak bandwidth and FP32 FLOP/s from the vendors' data
sheets for the GPUs named in :data:`DEVICE_SPECS`; on anything else (a CPU),
measured on the spot (a large array update; a large matmul). The launch costs
are always measured on the spot: a scan whose step is a chain of k dependent
tiny reductions (see :func:`_chain`), at two chain lengths; t_kernel is the
slope of step time in kernels per step, t_sync the rest of the step time of
the shorter chain (the loop's own per-iteration cost). Where that line does
not fit (a negative rest: on XLA:CPU a kernel costs more in a longer step),
t_kernel is the cheapest step time per kernel seen and t_sync 0, so the launch
bound stays a lower bound. Both chains' kernels are counted in their HLO.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import pathlib
import sys
import tempfile
from collections.abc import Callable

import jax
import jax.numpy as jnp

from benchmarks import _hlo, _timing

TITLE = "Roofline: what bounds one step of each headline workload"

MODES = {
    "quick": dict(linesearch_runs=(100, 1000, 10_000), dqn_seeds=100, dqn_steps=250, minatar_seeds=1000,
                  minatar_steps=100, repeats=3, max_seconds=2.0),
    "full": dict(linesearch_runs=(100, 1000, 10_000), dqn_seeds=100, dqn_steps=1000, minatar_seeds=1000,
                 minatar_steps=400, repeats=5, max_seconds=10.0),
}

# Vendors' data sheets (SXM / PCIe boards): HBM bandwidth and dense FP32 (non-tensor-core) FLOP/s.
# FP32 without tensor cores is the relevant peak: these steps are elementwise work and tiny matmuls.
DEVICE_SPECS = {
    "NVIDIA H100 SXM": dict(match=("H100 SXM", "H100 80GB HBM3"), bandwidth=3.35e12, flops=67e12),
    "NVIDIA H100 PCIe": dict(match=("H100 PCIe",), bandwidth=2.0e12, flops=51e12),
    "NVIDIA H200": dict(match=("H200",), bandwidth=4.8e12, flops=67e12),
}

README: list[str] = []  # filled by run(): the roofline table, for the --readme block of this backend


# ----------------------------------------------------------------------------
# Bound arithmetic


@dataclasses.dataclass(frozen=True)
class Device:
    bandwidth: float  # bytes/s
    flops: float  # FLOP/s
    t_kernel: float  # s per kernel launched in a loop step
    t_sync: float  # s per loop iteration / conditional (host round trip)


LIMITS = ("launch", "memory", "compute", "random access", "traffic", "dot")


def bounds(kernels: float, host_syncs: float, flops: float, nbytes: float, device: Device,
           random_s: float = 0.0, traffic_s: float = 0.0, dot_s: float = 0.0) -> dict[str, float]:
    """Lower bounds on one step's time (s): launch, memory, compute, random access, inter-kernel traffic,
    the step's dots alone; ``binding`` names the largest.

    ``random_s``, ``traffic_s`` and ``dot_s`` are those bounds themselves (random reads × t_random, see
    :func:`measure_random_read`; inter-kernel bytes ÷ the bandwidth of :func:`measure_traffic_bandwidth`;
    :func:`dot_bound`): they depend on the workload's sizes and shapes, so the caller measures them.
    """
    out = {
        "launch": kernels * device.t_kernel + host_syncs * device.t_sync,
        "memory": nbytes / device.bandwidth,
        "compute": flops / device.flops,
        "random access": random_s,
        "traffic": traffic_s,
        "dot": dot_s,
    }
    out["binding"] = max(LIMITS, key=lambda k: out[k])
    out["bound"] = out[out["binding"]]
    return out


def cost_per_step(cost: dict, steps: int, loop_once: bool) -> tuple[float, float]:
    """(FLOPs, bytes accessed) per step from XLA's totals for a program of ``steps`` steps per call."""
    flops, nbytes = float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))
    return (flops, nbytes) if loop_once else (flops / steps, nbytes / steps)


def _cost(compiled) -> dict:
    cost = compiled.cost_analysis()
    return (cost[0] if cost else {}) if isinstance(cost, (list, tuple)) else (cost or {})


def cost_counts_loop_once() -> bool:
    """Whether XLA's cost analysis counts a while body once (not × trip count) on this backend."""
    def program(steps):
        body = lambda c, _: (jnp.sin(c) * 1.5, None)  # noqa: E731
        return jax.jit(lambda x: jax.lax.scan(body, x, None, length=steps)[0]).lower(jnp.ones(256)).compile()

    few, many = (_cost(program(n)).get("flops", 0.0) for n in (4, 16))
    return many < 2 * few


# ----------------------------------------------------------------------------
# The device's figures, measured on the spot


def _time(fn, carry, repeats=5, min_repeats=3, compiler_options=None) -> float:
    """The fastest of the timed calls: a device's figures are what it can do, not what a busy machine let it."""
    program = _timing.compile_program(fn, carry, compiler_options=compiler_options)
    (timing,) = _timing.time_interleaved([program], repeats=repeats, min_repeats=min_repeats)
    return min(timing.times_s)


def measure_bandwidth() -> float:
    """Bytes/s of ``x * a + b`` in place on an array far larger than any cache (read + write)."""
    n = 2**27 if jax.default_backend() != "cpu" else 2**25
    x = jnp.ones((n,), jnp.float32)
    seconds = _time(lambda x: x * 1.0001 + 1e-4, x)
    return 2 * 4 * n / seconds


def measure_flops() -> float:
    """FLOP/s of an n×n float32 matmul (default precision)."""
    n = 8192 if jax.default_backend() != "cpu" else 2048
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32) / math.sqrt(n)
    seconds = _time(lambda c: (c[0], c[0] @ c[1]), (a, a + 0.0))  # two buffers: both are donated
    return 2 * n**3 / seconds


def _gather_loop(table_rows: int, rows: int, steps: int):
    """A scan of ``steps`` steps, each one gather of ``rows`` rows at random places of a ``float32[table_rows, 4]``
    table, the rows carried out whole (so all are read). The places move by 7 rows a step (a carried offset), so
    XLA can hoist nothing out of the loop and no step reads the last one's rows."""
    def body(c, _):
        offset, _, table, places = c
        i = places + offset
        i = jnp.where(i >= table_rows, i - table_rows, i)  # (a select, not a remainder: integer division is slow)
        return (jnp.where(offset + 7 >= table_rows, offset + 7 - table_rows, offset + 7), table[i], table, places), None

    return lambda c: jax.lax.scan(body, c, None, length=steps)[0]


def measure_random_read(nbytes: int, rows: int, steps: int = 100, few: int = 8) -> float:
    """Seconds per random 16-byte row gathered from a ``float32[nbytes / 16, 4]`` array, ``rows`` rows a step: the
    marginal cost of a row at the workload's own rows per step.

    The cost a step's random draws pay when the rows are not in cache: an array the size of the workload's
    state is as likely to be in cache as that state. A scan of ``steps`` steps gathers ``rows`` rows a step
    (:func:`_gather_loop`); the same loop gathering ``few`` rows a step is its own cost (launch, loop), taken
    off, so a kernel's fixed cost is not counted per row (a call's time ÷ its rows put the bound of a 10⁴-run
    LineSearch step at 5× its measured time on an H100). Fastest of 5 calls each, the smaller of two such
    probes (fresh tables and places: one run of the roofline on the 2-core CPU read 14.8 ns a row where the
    probes before and after it read 8 ns); 0 where noise makes the difference negative. At the workload's rows
    per step, not at a fixed size: XLA:CPU splits a larger gather over more threads (a probe of 2¹⁷ rows paid
    0.5 ns a row where the 10⁴-run LineSearch step's 50,000 paid 7.6 ns), so another size is another cost.
    """
    table_rows = max(nbytes // 16, 2 * rows, 1024)

    def step_time(n: int, seed: int) -> float:
        places = jax.random.randint(jax.random.key(seed), (n,), 0, table_rows)
        # A table a call: the timed calls donate their carry.
        carry = (jnp.int32(0), jnp.zeros((n, 4), jnp.float32), jnp.ones((table_rows, 4), jnp.float32), places)
        return _time(_gather_loop(table_rows, n, steps), carry) / steps

    if rows <= few:
        return 0.0
    return min(max(step_time(rows, seed) - step_time(few, seed), 0.0) / (rows - few) for seed in (0, 1))


def _elementwise_loop(n: int, steps: int):
    """A scan of ``steps`` steps, each one ``x * a + b`` over ``float32[n]`` (one kernel, read + write)."""
    return lambda x: jax.lax.scan(lambda c, _: (c * 1.0001 + 1e-4, None), x, None, length=steps)[0]


def measure_traffic_bandwidth(nbytes: float, steps: int = 2000, min_bytes: int = 4096) -> tuple[float, int]:
    """``(bytes/s, probe bytes)``: the bandwidth of kernels that pass arrays of ``nbytes`` bytes to each other.

    A step's kernels write arrays of the step's typical size and the next kernels read them back at once, so
    those arrays live in whatever cache holds that size: the probe is ``x * a + b`` on an array of that size
    (at least ``min_bytes``, where timing is not all loop overhead), one kernel per iteration of a scan,
    read + write, its per-iteration time less that of the same loop on 8 numbers (the loop and launch
    overhead, which the launch bound counts). Fastest of 7 calls each.
    """
    n = max(math.ceil(nbytes / 4), min_bytes // 4)
    seconds = _time(_elementwise_loop(n, steps), jnp.ones((n,), jnp.float32), repeats=7)
    overhead = _time(_elementwise_loop(8, steps), jnp.ones((8,), jnp.float32), repeats=7)
    # Overhead taken as at most half the time: a noisy overhead probe cannot make the bandwidth unbounded.
    return 2 * 4 * n * steps / max(seconds - overhead, seconds / 2), 4 * n


def apply_product(product: _hlo.Dot | _hlo.Convolution, lhs: jax.Array, rhs: jax.Array) -> jax.Array:
    """``product`` rebuilt: the same ``lax.dot_general`` (or ``lax.conv_general_dilated``) on ``lhs``, ``rhs``."""
    dtype = jnp.dtype(_DTYPES[product.dtype])
    if isinstance(product, _hlo.Dot):
        return jax.lax.dot_general(lhs, rhs, product.dimension_numbers, preferred_element_type=dtype)
    spatial = lhs.ndim - 2
    inputs, kernel = product.dim_labels.split("->")[0].split("_")
    output = product.dim_labels.split("->")[1]
    # HLO's labels (b01f_01io->b01f) as lax's specs: (batch or out-feature, feature or in-feature, spatial...).
    spec = lambda labels, first, second: (labels.index(first), labels.index(second),  # noqa: E731
                                          *(labels.index(str(d)) for d in range(spatial)))
    numbers = jax.lax.ConvDimensionNumbers(spec(inputs, "b", "f"), spec(kernel, "o", "i"), spec(output, "b", "f"))
    ones = (1,) * spatial
    return jax.lax.conv_general_dilated(
        lhs, rhs, product.window_list("stride", ones), list(product.window_list("pad", ((0, 0),) * spatial)),
        product.window_list("lhs_dilate", ones), product.window_list("rhs_dilate", ones), numbers,
        product.feature_groups, product.batch_groups, preferred_element_type=dtype)


def _dot_loop(dot: _hlo.Dot | _hlo.Convolution, steps: int):
    """A scan of ``steps`` steps, each ``dot`` rebuilt (:func:`apply_product`) plus a one-element update of its lhs.

    The lhs's first element becomes the result's first (clipped to [-1, 1]: no overflow over many steps), so
    each step depends on the last and XLA can neither hoist the product out of the loop nor run the steps at
    once; the result is carried out whole, so all of it is computed.
    """
    corner = lambda x: (0,) * x.ndim  # noqa: E731

    def body(c, _):
        a, b, _ = c
        out = apply_product(dot, a, b)
        return (a.at[corner(a)].set(jnp.clip(out[corner(out)], -1, 1).astype(a.dtype)), b, out), None

    return lambda c: jax.lax.scan(body, c, None, length=steps)[0]


_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16", "s32": "int32",
           "s8": "int8", "u8": "uint8", "s64": "int64"}


def dot_operands(dot: _hlo.Dot | _hlo.Convolution) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(lhs, rhs, result)`` arrays of ``dot``'s shapes and types: the carry of :func:`_dot_loop`."""
    (lt, ld), (rt, rd) = _hlo.Dot.dims(dot.lhs), _hlo.Dot.dims(dot.rhs)
    lhs = jax.random.uniform(jax.random.key(1), ld, minval=-1, maxval=1).astype(_DTYPES[lt])
    rhs = jax.random.uniform(jax.random.key(2), rd, minval=-1, maxval=1).astype(_DTYPES[rt])
    out = jax.eval_shape(lambda a, b: apply_product(dot, a, b), lhs, rhs)
    return lhs, rhs, jnp.zeros(out.shape, out.dtype)


def measure_dot(dot: _hlo.Dot | _hlo.Convolution, compiler_options: dict | None = None, overhead_s: float = 0.0,
                seconds: float = 0.05) -> float:
    """Seconds one ``dot`` takes alone at its shapes (fastest of 5 calls of :func:`_dot_loop`), less
    ``overhead_s`` per step (the loop's own cost; at most half the time is taken off).

    The scan runs about ``seconds`` per call at 1 GFLOP/s (20 to 2,000 steps); ``compiler_options``: the
    workload's, so the product compiles as it does in the step.
    """
    steps = int(min(2000, max(20, seconds / (dot.flops / 1e9 + 1e-7))))
    per_step = _time(_dot_loop(dot, steps), dot_operands(dot), compiler_options=compiler_options) / steps
    return max(per_step - overhead_s, per_step / 2)


def dot_bound(counts: _hlo.Counts, compiler_options: dict | None = None) -> tuple[float, dict]:
    """``(seconds, {dot: seconds per dot})``: Σ count × :func:`measure_dot` over the step's distinct dots."""
    if not counts.dots:
        return 0.0, {}
    steps = 2000
    overhead = _time(_elementwise_loop(8, steps), jnp.ones((8,), jnp.float32), repeats=7) / steps
    each = {dot: measure_dot(dot, compiler_options, overhead) for dot, _ in counts.dots}
    return sum(count * each[dot] for dot, count in counts.dots), each


def _chain(k: int, steps: int):
    """A scan of ``steps`` steps, each a chain of ``k`` dependent ``c * a + sum(c) * b`` on 8 numbers.

    XLA does not fuse a reduction into a consumer that needs all of it, so each link is at least one kernel
    of almost no work: the step time is launch cost (the counts come from the compiled HLO all the same).
    """
    def body(c, _):
        for _ in range(k):
            c = c * 0.5 + jnp.sum(c) * 1e-3
        return c, None

    return lambda x: jax.lax.scan(body, x, None, length=steps)[0]


def launch_costs(c1: _hlo.Counts, t1: float, c2: _hlo.Counts, t2: float) -> tuple[float, float]:
    """(t_kernel, t_sync) from two loops' per-step counts and times (module docstring)."""
    if c2.kernels <= c1.kernels:  # the longer chain compiled to no more kernels: no slope to fit
        return min(t1, t2) / max(c1.kernels, 1), 0.0
    t_kernel = (t2 - t1) / (c2.kernels - c1.kernels)
    t_sync = (t1 - c1.kernels * t_kernel) / max(c1.host_syncs, 1)
    if t_kernel <= 0 or t_sync < 0:
        # Not linear (XLA:CPU's executor costs more per kernel in a longer step): keep the bound a lower
        # bound with the cheapest per-kernel cost seen, loop overhead included, and no separate sync cost.
        return min(t1 / c1.kernels, t2 / c2.kernels), 0.0
    return t_kernel, t_sync


def measure_launch(steps: int = 2000, chains: tuple[int, int] = (32, 64)) -> dict:
    """t_kernel, t_sync (s) from two chain lengths (module docstring), and the counts behind them.

    Chains of tens of kernels, as in the workloads' steps: XLA:CPU runs a step of up to ~16 kernels
    inline at ~5 ns each, a longer one through its thunk executor at ~100 ns each.
    """
    rows = []
    for k in chains:
        fn, x = _chain(k, steps), jnp.linspace(0.0, 1.0, 8)  # a fresh x: the timed call donates it
        counts = _hlo.step_counts(jax.jit(fn).lower(x).compile().as_text(), steps)
        rows.append((counts, _time(fn, x, repeats=7) / steps))
    (c1, t1), (c2, t2) = rows
    t_kernel, t_sync = launch_costs(c1, t1, c2, t2)
    return dict(t_kernel=t_kernel, t_sync=t_sync, kernels=(c1.kernels, c2.kernels), step_s=(t1, t2))


def kernel_times(events: list[dict], kernels: dict[str, str], steps: int) -> list[tuple[str, float]]:
    """``[(kernel, seconds per step)]``, the costliest first: the time each of a program's ``kernels``
    (:meth:`benchmarks._hlo.Program.kernels`) took in the profiler's trace ``events`` of calls running ``steps``
    steps in all.

    A trace event names its kernel in ``args.hlo_op`` (else its name); events of names that are no kernel
    (the executor, loops, Python) are left out. Where one kernel has events in several processes of the trace
    (a GPU's host launch and its device kernel), the process with the most time counts, not both.
    """
    per_process: dict[tuple[object, str], float] = {}
    for event in events:
        if event.get("ph") != "X":
            continue
        name = (event.get("args") or {}).get("hlo_op") or event.get("name", "")
        if name in kernels:
            key = (event.get("pid"), name)
            per_process[key] = per_process.get(key, 0.0) + float(event.get("dur", 0.0)) * 1e-6  # µs in the trace
    best: dict[str, float] = {}
    for (_, name), seconds in per_process.items():
        best[name] = max(best.get(name, 0.0), seconds)
    return sorted(((name, seconds / steps) for name, seconds in best.items()), key=lambda kv: -kv[1])


def profile_kernels(program: _timing.Program, steps: int) -> list[tuple[str, float]]:
    """:func:`kernel_times` of one call of ``program`` (``steps`` steps) traced by ``jax.profiler``: where a
    step's time goes, kernel by kernel. The tracer's own cost per event weighs on the smallest kernels."""
    kernels = _hlo.Program(program.compiled.as_text()).kernels()
    with tempfile.TemporaryDirectory() as folder:
        try:
            with jax.profiler.trace(folder, create_perfetto_trace=True):
                _timing._call(program)
            trace = next(pathlib.Path(folder).rglob("perfetto_trace.json.gz"), None)
            if trace is None:
                return []
            with gzip.open(trace) as f:
                events = json.load(f).get("traceEvents", [])
        # (A profiler already running, none on this backend, a trace in another format: the rest of the roofline
        # stands without this line; a lent GPU's minutes are not lost to it.)
        except Exception as error:
            print(f"    not traced: {type(error).__name__}: {error}", file=sys.stderr)
            return []
    return kernel_times(events, kernels, steps)


def _spec() -> tuple[str, dict] | None:
    kind = jax.devices()[0].device_kind
    for name, spec in DEVICE_SPECS.items():
        if any(m in kind for m in spec["match"]):
            return name, spec
    return None


# ----------------------------------------------------------------------------
# Workloads: each returns (fn, carry, steps per call, compulsory bytes per step, what one step is)


def _linesearch(runs: int):
    from benchmarks import sweep as sweep_bench
    from jaxreplay.agents import linear
    from jaxreplay.engine.execute import run_keys

    sweep = sweep_bench._sweep(runs)
    exp, setup = sweep.exp, sweep.make_setup()
    hparams = jax.tree.map(jnp.asarray, sweep.hyperparameters())
    keys = run_keys(0, jnp.arange(sweep.num_runs), jax.default_backend())  # the engine's keys, a seed a run
    state = jax.jit(jax.vmap(lambda k, h: exp.init(k, h, setup)))(keys, hparams)

    def fn(carry):  # the engine's segment: advance all runs by setup.steps steps, keep the record
        state, hparams, _ = carry
        state, record = jax.vmap(lambda s, h: exp.advance(s, h, setup))(state, hparams)
        return state, hparams, record

    fn.compiler_options = exp.compiler_options_on(jax.default_backend())  # type: ignore[attr-defined]
    record = jax.eval_shape(fn, (state, hparams, None))[2]
    carry = (state, hparams, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), record))

    def cost_twin():
        # The step's own arithmetic with its draws made in the step (blocks of 1: the same bits). Where XLA
        # counts a loop body once, the real program's body is a block of DRAW_BLOCK steps' draws and one
        # step, neither a step nor a bound; the twin's is one step (its update loop once: a lower bound).
        from jaxreplay.experiments import linesearch as ls

        block, ls.DRAW_BLOCK = ls.DRAW_BLOCK, 1
        try:
            # A new function: jit would reuse fn's trace, made with the real block size.
            return _timing.compile_program(lambda c: fn(c), carry, donate=False,
                                           compiler_options=fn.compiler_options).compiled
        finally:
            ls.DRAW_BLOCK = block

    fn.cost_twin = cost_twin  # type: ignore[attr-defined]
    # Per run: write 1 transition, read m sampled ones, read + write θ (2 floats), write the record (2 floats).
    transition = _timing.tree_bytes(linear.EXAMPLE_TRANSITION)
    per_run = (1 + setup.max_batch_size) * transition + 2 * 8 + 8
    # Random rows: the transition added and the m drawn, one per storage leaf (LineSearch stores one float32[4] row).
    leaves = len(jax.tree.leaves(state.memory.storage))
    random_reads = sweep.num_runs * (1 + setup.max_batch_size) * leaves
    return fn, carry, setup.steps, sweep.num_runs * per_run, random_reads, f"{sweep.num_runs:,} runs"


def _buffer(workload: str, impl: str, B: int = 100, N: int = 1000, steps: int = 100):
    from benchmarks import buffer as bm

    case = bm.Case(workload, impl, B, N, steps)
    make_carry, run = bm._programs(case)  # the buffer benchmark's own program (imports flashbax if asked)
    carry = jax.jit(make_carry)(jax.random.split(jax.random.key(0), B), bm._capacities(case))
    fill = jax.jit(run)  # filled before it is measured, as the buffer benchmark is (every step overwrites)
    for _ in range(bm.fill_calls(case)):
        carry = fill(carry)
    transition = _timing.tree_bytes(bm._example())
    per_buffer = (1 + bm.BATCH_SIZE) * transition  # write 1 transition, read the 50 sampled
    if workload == "priority":
        depth = math.ceil(math.log2(N))
        # Sum tree, float32 nodes: the added leaf and the 50 updated ones refresh depth ancestors
        # (read 2 children, write 1 each); each of the 50 draws reads one child per level.
        per_buffer += (1 + bm.BATCH_SIZE) * depth * 12 + bm.BATCH_SIZE * depth * 4
    random_reads = B * (1 + bm.BATCH_SIZE) * len(jax.tree.leaves(bm._example()))  # rows added and drawn, per leaf
    return run, carry, steps, B * per_buffer, random_reads, f"B = {B} buffers, N = {N}"


def _dqn(seeds: int, steps: int, game: str = "CartPole-v1"):
    """The DQN step of ``game``: CartPole with the DQN benchmark's setup, a MinAtar game with its preset
    (:func:`jaxreplay.paper.reproduce.settings.minatar_setting`, evaluation off); segments of ``steps``."""
    from benchmarks import dqn as dqn_bench
    from jaxreplay.engine import sweep as sw
    from jaxreplay.engine.execute import run_keys
    from jaxreplay.experiments import dqn

    if game.endswith("-MinAtar"):
        from benchmarks import minatar as minatar_bench

        setup, hp = minatar_bench._setup(4 * steps, segments=4, env=game)
    else:
        setup, hp = dqn_bench._setup(4 * steps)  # segments of `steps` env steps, as the DQN benchmark's
    sweep = sw.Sweep("dqn", seeds=seeds, setup=setup, fixed=hp._asdict())
    exp, setup = sweep.exp, sweep.make_setup()
    hparams = jax.tree.map(jnp.asarray, sweep.hyperparameters())
    keys = run_keys(0, jnp.arange(seeds), jax.default_backend())  # the engine's keys
    state = jax.jit(jax.vmap(lambda k, h: exp.init(k, h, setup)))(keys, hparams)

    def fn(carry):
        state, hparams, _ = carry
        state, record = jax.vmap(lambda s, h: exp.advance(s, h, setup))(state, hparams)
        return state, hparams, record

    fn.compiler_options = exp.compiler_options_on(jax.default_backend())  # type: ignore[attr-defined]
    record = jax.eval_shape(fn, (state, hparams, None))[2]
    carry = (state, hparams, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), record))
    one = jax.tree.map(lambda x: x[0], state)
    params, opt = _timing.tree_bytes(one.params), _timing.tree_bytes(one.opt_state)
    transition = _timing.tree_bytes(dqn.example_transition(setup))
    # Per seed and env step: read the network to act and to train (2×), the target network (1×),
    # write the new network, read + write the optimizer state, write 1 transition, read the sampled ones.
    per_seed = 4 * params + 2 * opt + (1 + setup.batch_size) * transition
    random_reads = seeds * (1 + setup.batch_size) * len(jax.tree.leaves(dqn.example_transition(setup)))
    return fn, carry, steps, seeds * per_seed, random_reads, f"{seeds} seeds, 1 env step + 1 update each"


def _workloads(mode: dict) -> list[tuple[str, Callable]]:
    runs = list(mode["linesearch_runs"]) + ([100_000] if jax.default_backend() != "cpu" else [])
    out = [(f"LineSearch ER sweep kernel, {r:,} runs", lambda r=r: _linesearch(r)) for r in runs]
    out += [
        ("uniform add + sample 50 + gather, ours", lambda: _buffer("uniform", "ours")),
        ("stored-priority add + sample + update, ours", lambda: _buffer("priority", "ours")),
        ("stored-priority add + sample + update, flashbax", lambda: _buffer("priority", "flashbax")),
        ("DQN CartPole step", lambda: _dqn(mode["dqn_seeds"], mode["dqn_steps"])),
    ]
    # The MinAtar step at the seed count of the MinAtar benchmark's GPU row (1,000), few on the CPU (a conv
    # network's update there costs ~1 ms a seed).
    seeds, steps = (mode["minatar_seeds"], mode["minatar_steps"]) if jax.default_backend() != "cpu" else (10, 40)
    out.append((f"DQN Breakout-MinAtar step, {seeds:,} seeds", lambda: _dqn(seeds, steps, "Breakout-MinAtar")))
    return out


# ----------------------------------------------------------------------------
# Run and report


def _measure_workload(build: Callable, mode: dict, loop_once: bool, bandwidth: float | None = None) -> dict:
    """Counts, costs and the measured step of one workload; ``bandwidth``: the traffic bound's, or None to
    probe it at the workload's typical kernel output (:func:`measure_traffic_bandwidth`)."""
    fn, carry, steps, nbytes, random_reads, what = build()
    t_random = measure_random_read(_timing.tree_bytes(carry), int(random_reads))  # before the timed call
    # The options the engine compiles the experiment with (LineSearch's on the CPU), so this is its program.
    options = getattr(fn, "compiler_options", None)
    program = _timing.compile_program(fn, carry, compiler_options=options)
    counts = _hlo.step_counts(program.compiled.as_text(), steps)
    # A workload whose loops make a step's cost uncountable gives a twin program for it (LineSearch's blocks).
    twin = getattr(fn, "cost_twin", None)
    flops, xla_bytes = cost_per_step(_cost(twin() if twin and loop_once else program.compiled), steps, loop_once)
    dot_s, dot_each = dot_bound(counts, options)  # before the timed call
    # The traffic probe before the workload is timed: the two never share the machine.
    traffic_bandwidth, probe_bytes = ((bandwidth, 0) if bandwidth else
                                      measure_traffic_bandwidth(counts.written / max(counts.kernels, 1)))
    (timing,) = _timing.time_interleaved([program], repeats=mode["repeats"], min_repeats=1,
                                         max_seconds=mode["max_seconds"])
    profile = profile_kernels(program, steps)  # after the timing: the tracer slows what it traces
    # Loops nested in a step that XLA counted once: its FLOPs are a lower bound.
    nested = loop_once and counts.host_syncs > 1
    return dict(what=what, steps=steps, counts=counts, flops=flops, xla_bytes=xla_bytes, bytes=nbytes,
                flops_lower=nested, step_s=timing.median_s / steps, compile_s=program.compile_s,
                random_reads=random_reads, t_random=t_random, traffic_bandwidth=traffic_bandwidth,
                probe_bytes=probe_bytes, dot_s=dot_s, dot_each=dot_each, profile=profile)


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    _timing.disable_compilation_cache()
    mode = MODES[mode_name]
    progress("  device figures: bandwidth, matmul FLOP/s, launch latency")
    measured = dict(bandwidth=measure_bandwidth(), flops=measure_flops(), **measure_launch())
    spec = _spec()
    device = Device(bandwidth=spec[1]["bandwidth"] if spec else measured["bandwidth"],
                    flops=spec[1]["flops"] if spec else measured["flops"],
                    t_kernel=measured["t_kernel"], t_sync=measured["t_sync"])
    loop_once = cost_counts_loop_once()
    results, skipped = [], []
    for name, build in _workloads(mode):
        progress(f"  {name}")
        try:
            # On an accelerator a probe of small arrays times launches, not bytes: the device's bandwidth.
            result = _measure_workload(build, mode, loop_once,
                                       None if jax.default_backend() == "cpu" else device.bandwidth)
        except ImportError as error:  # flashbax absent
            progress(f"    skipped: {error}")
            skipped.append(f"{name}: not available ({error}).")
            continue
        except ValueError as error:  # no step loop found in the HLO: report the rest, say which
            progress(f"    not counted: {error}")
            skipped.append(f"{name}: not counted ({error}).")
            continue
        result.update(name=name, **bounds(result["counts"].kernels, result["counts"].host_syncs, result["flops"],
                                          result["bytes"], device, result["random_reads"] * result["t_random"],
                                          result["counts"].traffic / result["traffic_bandwidth"], result["dot_s"]))
        progress(f"    {result['counts'].kernels:.0f} kernels, {result['counts'].host_syncs:.0f} syncs, "
                 f"{_si(result['counts'].traffic, 'B')} between kernels, {result['counts'].dot_count:.0f} dots "
                 f"({result['dot'] * 1e6:.3g} µs alone) per step; "
                 f"{result['step_s'] * 1e6:.3g} µs/step measured, bound {result['bound'] * 1e6:.3g} µs "
                 f"({result['binding']})")
        if not attained(result):
            progress(f"    measured below the {result['binding']} bound: that bound's model overstates this step")
        results.append(result)
    return _report(mode_name, measured, spec, device, loop_once, results, skipped)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.3g}"


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def _dot_cell(r: dict) -> str:
    """The dot bound and how many dots a step runs; "–" where the step runs none."""
    n = r["counts"].dot_count
    if not n:
        return "–"
    distinct = len(r["counts"].dots)
    return f"{_us(r.get('dot', 0.0))}: {n:.3g} dots ({distinct} shape{'s' * (distinct != 1)})"


def dot_lines(results: list[dict]) -> list[str]:
    """Per workload with dots, one line: each distinct dot's count per step, shapes, time alone and rate."""
    lines = []
    for r in results:
        parts = [f"{count:.3g} × {dot.lhs} · {dot.rhs} {r['dot_each'][dot] * 1e6:.3g} µs "
                 f"({dot.flops / r['dot_each'][dot] / 1e9:.3g} GFLOP/s)"
                 for dot, count in r["counts"].dots if dot in r.get("dot_each", {})]
        if parts:
            lines.append(f"Dots of {r['name']} per step (count × lhs · rhs, time of one alone): " + "; ".join(parts)
                         + ".")
    return lines


def profile_lines(results: list[dict], top: int = 5) -> list[str]:
    """Per workload traced, one line: its ``top`` costliest kernels per step (:func:`profile_kernels`), each
    with its share of the traced kernels' time, and that time against the measured step."""
    lines = []
    for r in results:
        profile = r.get("profile") or []
        traced = sum(seconds for _, seconds in profile)
        if not traced:
            continue
        parts = [f"`{name}` {_us(seconds)} µs ({100 * seconds / traced:.0f} %)" for name, seconds in profile[:top]]
        lines.append(f"Where a step of {r['name']} goes (its {len(profile)} kernels traced by `jax.profiler` in one "
                     f"call, {_us(traced)} µs a step against {_us(r['step_s'])} µs measured untraced; the costliest "
                     f"{min(top, len(profile))}): " + "; ".join(parts) + ".")
    return lines


def attained(r: dict) -> bool:
    """Whether the measured step is at least its largest bound: a bound is a lower bound only if the device
    cannot beat it. A step measured below it shows that that bound's model overstates this step's cost (e.g.
    t_sync charged for loop iterations the device runs without a host round trip, or a bandwidth probe that
    read low), so that row's binding limit is not established."""
    return r["step_s"] >= r["bound"]


def _verdict_cells(r: dict) -> list[str]:
    """The binding, measured and measured ÷ bound cells of a row; a bound the step beat is said to be no bound."""
    ratio = f"{r['step_s'] / r['bound']:.2g}×"
    if attained(r):
        return [_dot_cell(r), f"**{r['binding']}**", _us(r["step_s"]), ratio]
    return [_dot_cell(r), f"none shown ({r['binding']} overstated)", _us(r["step_s"]),
            f"{ratio}: below the {r['binding']} bound, which is then no bound"]


def roofline_table(results: list[dict]) -> str:
    rows = []
    for r in results:
        c = r["counts"]
        rows.append([
            r["name"], r["what"], f"{c.kernels:.0f}" + (f" ({c.unknown_trips} loops of unknown trip count counted once)"
                                                        if c.unknown_trips else ""),
            f"{c.host_syncs:.0f}", f"{c.while_loops}",
            ("≥ " if r["flops_lower"] else "") + _si(r["flops"], "FLOP"), _si(r["bytes"], "B"),
            _si(r["xla_bytes"], "B"), _us(r["launch"]), _us(r["memory"]), _us(r["compute"]),
            *([f"{_us(r['random access'])} ({r['random_reads']:,.0f} × {r['t_random'] * 1e9:.3g} ns)"]
              if "random_reads" in r else [_us(r["random access"])]),
            *([f"{_us(r['traffic'])} ({_si(c.traffic, 'B')} ÷ {_si(r['traffic_bandwidth'], 'B/s')} "
               + (f"at {_si(r['probe_bytes'], 'B')})" if r["probe_bytes"] else "of memory)")]
              if "traffic_bandwidth" in r else [_us(r.get("traffic", 0.0))]),
            *_verdict_cells(r),
        ])
    return _timing.markdown_table(
        ["workload", "one step", "kernels / step", "host syncs / step", "while loops in step", "FLOPs / step (XLA)",
         "bytes / step (compulsory)", "bytes / step (XLA)", "launch bound µs", "memory bound µs",
         "compute bound µs", "random-access bound µs (reads × t_random)",
         "traffic bound µs (inter-kernel bytes ÷ bandwidth at the typical kernel output size)",
         "dot bound µs: N dots, the time of the same products alone", "binding",
         "measured µs / step",
         "measured ÷ bound"], rows)


def _report(mode_name, measured, spec, device, loop_once, results, skipped) -> str:
    kind = jax.devices()[0].device_kind
    rows = [[name, f"{s['bandwidth'] / 1e12:.3g} TB/s", f"{s['flops'] / 1e12:.3g} TFLOP/s", "–", "–", "data sheet"]
            for name, s in DEVICE_SPECS.items()]
    rows.append([f"this machine: {kind} (`{jax.default_backend()}`)", f"{measured['bandwidth'] / 1e9:.3g} GB/s",
                 f"{measured['flops'] / 1e12:.3g} TFLOP/s", f"{measured['t_kernel'] * 1e6:.3g} µs",
                 f"{measured['t_sync'] * 1e6:.3g} µs", "measured now"])
    devices = _timing.markdown_table(
        ["device", "memory bandwidth", "FLOP/s", "t_kernel (per launch)", "t_sync (per loop iteration)",
         "source"], rows)
    used = ("FLOP/s: data sheets give dense FP32 without tensor cores; measured is an n×n float32 matmul at "
            "JAX's default precision (on a GPU it may use TF32 tensor cores). Bandwidth measured: `x * a + b` in "
            "place on a 128 MiB (CPU) or 512 MiB array, read + write. Measured figures are each the fastest of "
            "5 calls (7 for the launch chains): what the device can do, not what a busy machine let it. "
            f"Bounds use {'the data sheet of ' + spec[0] if spec else 'the figures measured on this machine'} "
            f"for bandwidth ({device.bandwidth / 1e9:.3g} GB/s) and FLOP/s ({device.flops / 1e12:.3g} TFLOP/s), "
            f"and the launch costs measured now (t_kernel {device.t_kernel * 1e6:.3g} µs, t_sync "
            f"{device.t_sync * 1e6:.3g} µs: a scan whose step is a chain of reductions, "
            f"{measured['kernels'][0]:.0f} and "
            f"{measured['kernels'][1]:.0f} kernels per step, {measured['step_s'][0] * 1e6:.3g} and "
            f"{measured['step_s'][1] * 1e6:.3g} µs per step).")
    table = roofline_table(results)
    README[:] = [f"Roofline (`{jax.default_backend()}`, {kind}; see `benchmarks/README.md`):\n\n{table}"]
    counted = ("once whatever its trip count (≥: loops nested in the step counted once; LineSearch's FLOPs from "
               "its step with the draws made in the step, the same arithmetic, since its program's loop body is a "
               "block of 25 steps' draws and one step)" if loop_once else "× its trip count")
    notes = (
        "Per step of the program's step loop, all runs / buffers / seeds together. Kernels and host syncs: "
        "top-level instructions of the optimized HLO executed per step (`benchmarks/_hlo.py` states the rules). "
        f"FLOPs: XLA's cost analysis, which on this backend counts a while body {counted}. "
        "Bytes (compulsory): what a step must read and write, counted in `benchmarks/roofline.py`; bytes (XLA): "
        "XLA's estimate, which counts whole arrays for gathers, scatters and in-place updates. "
        "Launch bound = kernels × t_kernel + host syncs × t_sync; memory = compulsory bytes ÷ bandwidth; "
        "compute = FLOPs ÷ peak; random access = the rows a step reads or writes at data-dependent places (one "
        "per storage leaf) × t_random, the marginal cost of a random 16-byte row gathered from an array the "
        "size of the workload's state, at the workload's rows per step (loops gathering that many rows and 8 rows a "
        "step: their step time difference ÷ the difference in rows, so a kernel's fixed cost is not counted per "
        "row; XLA:CPU splits a larger gather over more threads, so a row's cost depends on the rows), measured "
        "now; traffic = the bytes the step's kernels write and read from one another "
        "(counted in the optimized HLO, in-place updates and gathers as the slices they touch; "
        "`benchmarks/_hlo.py`) ÷ the bandwidth of `x * a + b` on an array of the step's mean kernel output "
        "(at least 4 kB; such arrays stay in cache), one kernel per loop iteration less the loop's own cost, "
        "measured now on a CPU; on an accelerator the memory bandwidth above (a probe of small arrays there "
        "times launches); dot = Σ count × the time of each distinct `dot` the step runs (top-level or inside a "
        "fusion, counted in the optimized HLO like the kernels), rebuilt as the same `lax.dot_general` at the "
        "same shapes and timed alone in a loop with the workload's compiler options, measured now (\"–\": the "
        "step runs no dot). Measured ÷ bound: the measured step time over the largest bound. A bound is a lower "
        "bound only if no step beats it: where the measured time is below the largest bound (ratio < 1), that "
        "bound's model overstates the step (a cost charged that the device does not pay), the binding column "
        "says so and names no limit. Where the time goes: one call traced by `jax.profiler`, each kernel's time "
        "a step (the tracer's cost per event inflates the smallest kernels, so a traced step of small kernels "
        "takes longer than the measured one); on a CPU a step's kernels run one after another, so their times "
        "add up, where the binding column names only the largest bound."
    )
    return "\n\n".join([f"Backend `{jax.default_backend()}`, mode `{mode_name}`.", devices, used, table, notes,
                        *dot_lines(results),
                        *profile_lines(results),
                        *skipped])


if __name__ == "__main__":
    print(run(sys.argv[1] if len(sys.argv) > 1 else "quick"))
