"""The roofline's counting (benchmarks/_hlo.py) and bound arithmetic (benchmarks/roofline.py), on known inputs.

No timing here: performance is measured in benchmarks/, never in tests.
"""

import pathlib
import sys

import jax
import jax.numpy as jnp
import pytest

# Plain `pytest` (unlike `python -m pytest`) does not put the repository root,
# where the benchmarks package lives, on sys.path.
_ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks import _hlo, roofline  # noqa: E402

# A hand-written optimized module: a step loop of 10 iterations whose body holds 2 fusions, a nested
# loop of 3 iterations (1 fusion in its body, 1 in its condition), a conditional whose branches launch
# 1 and 3 kernels, and bookkeeping that launches nothing; the step loop's condition is 1 fusion.
HLO = """HloModule jit_known, is_scheduled=true

%fused_a (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %s = f32[4]{0} sine(%p)
}

%ib (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]{0}) parameter(0)
  %x = f32[4]{0} get-tuple-element(%t), index=1
  %i = s32[] get-tuple-element(%t), index=0
  %f = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_a
  ROOT %r = (s32[], f32[4]{0}) tuple(%i, %f)
}

%ic (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %c = s32[] constant(3)
  ROOT %lt = pred[] fusion(%i, %c), kind=kLoop, calls=%fused_a
}

%small (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  ROOT %f = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_a
}

%large (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %f1 = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_a
  %s = f32[4]{0} sort(%f1), dimensions={0}, to_apply=%fused_a
  %b = f32[2,2]{1,0} bitcast(%s)
  ROOT %c = f32[4]{0} copy(%s)
}

%bdy (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]{0}) parameter(0)
  %x = f32[4]{0} get-tuple-element(%t), index=1
  %i = s32[] get-tuple-element(%t), index=0
  %f1 = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_a
  %f2 = s32[] fusion(%i), kind=kLoop, calls=%fused_a
  %z = s32[] constant(0)
  %init = (s32[], f32[4]{0}) tuple(%z, %f1)
  %w = (s32[], f32[4]{0}) while(%init), condition=%ic, body=%ib, backend_config={"known_trip_count":{"n":"3"}}
  %y = f32[4]{0} get-tuple-element(%w), index=1
  %p = pred[] constant(true)
  %k = f32[4]{0} conditional(%p, %y, %y), true_computation=%large, false_computation=%small
  ROOT %r = (s32[], f32[4]{0}) tuple(%f2, %k)
}

%cnd (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  ROOT %lt = pred[] fusion(%i), kind=kLoop, calls=%fused_a
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %z = s32[] constant(0)
  %c = f32[4]{0} copy(%x)
  %i = (s32[], f32[4]{0}) tuple(%z, %c)
  %w = (s32[], /*index=1*/f32[4]) while(%i), condition=%cnd, body=%bdy, backend_config={"known_trip_count":{"n":"10"}}
  ROOT %out = f32[4]{0} get-tuple-element(%w), index=1
}
"""


def test_counts_a_known_module():
    # Per step: body 2 + nested loop 3 × (1 + 1) + the larger branch 3 + the condition 1 = 12 kernels;
    # host syncs: the step loop 1 + the nested loop's 3 iterations + the conditional 1 = 5.
    # Inter-kernel bytes (tests/test_roofline_traffic.py states the rules): 16 B per f32[4] kernel each way,
    # 4 B per s32[] one; the loop conditions read an s32 (4 B) and write a pred (1 B). Written: f1 16 + f2 4
    # + nested 3 × (16 + 1) + the larger branch 3 × 16 + the condition 1 = 120; read: 16 + 4 + 3 × (16 + 4)
    # + 48 + 4 = 132.
    counts = _hlo.step_counts(HLO, 10)
    assert counts == _hlo.Counts(kernels=12, host_syncs=5, while_loops=1, unknown_trips=0, written=120, read=132)
    # The whole program: the copy, then 10 steps.
    assert _hlo.Program(HLO).counts().kernels == 1 + 10 * 12
    # A loop XLA unrolled by 2 (trip 10 for 20 steps): half an iteration per step.
    assert _hlo.step_counts(HLO, 20).kernels == 6
    # XLA's newer printer drops the % of names: the same counts.
    assert _hlo.step_counts(HLO.replace("%", ""), 10) == counts
    with pytest.raises(ValueError, match="trip count"):
        _hlo.step_counts(HLO, 7)


def test_unknown_trip_count_is_counted_once_and_flagged():
    text = HLO.replace('"known_trip_count":{"n":"3"}', '"x":1')
    counts = _hlo.step_counts(text, 10)
    assert counts.unknown_trips == 1 and counts.kernels == 12 - 2 * 2
    # The step loop itself without a trip count: one iteration per step, flagged.
    text = HLO.replace('"known_trip_count":{"n":"10"}', '"x":1')
    assert _hlo.step_counts(text, 7) == _hlo.Counts(kernels=12, host_syncs=5, while_loops=1, unknown_trips=1,
                                                    written=120, read=132)


def _sorts(k, steps=50):
    def body(c, _):
        for _ in range(k):
            c = jnp.sort(c * 1.5)[::-1]
        return c, None

    fn = lambda x: jax.lax.scan(body, x, None, length=steps)[0]  # noqa: E731
    return _hlo.step_counts(jax.jit(fn).lower(jnp.ones(8)).compile().as_text(), steps)


def test_each_sort_in_a_compiled_step_adds_the_same_kernels():
    # XLA fuses neither across a sort nor a sort with its producer: every sort in the chain adds
    # the same number of kernels (on the CPU: the sort and its producer's fusion), nothing else changes.
    one, two, five = _sorts(1), _sorts(2), _sorts(5)
    added = two.kernels - one.kernels
    assert added >= 1 and five.kernels - one.kernels == 4 * added
    assert one.host_syncs == two.host_syncs == five.host_syncs == 1
    assert one.while_loops == 0 and one.unknown_trips == 0


def test_cost_analysis_scaling():
    assert isinstance(roofline.cost_counts_loop_once(), bool)
    cost = {"flops": 1000.0, "bytes accessed": 4000.0}
    assert roofline.cost_per_step(cost, 10, loop_once=True) == (1000.0, 4000.0)
    assert roofline.cost_per_step(cost, 10, loop_once=False) == (100.0, 400.0)


def test_bound_arithmetic():
    device = roofline.Device(bandwidth=1e12, flops=1e13, t_kernel=2e-6, t_sync=10e-6)
    # 100 kernels × 2 µs + 2 syncs × 10 µs = 220 µs; 1 MB at 1 TB/s = 1 µs; 1 GFLOP at 10 TFLOP/s = 100 µs.
    b = roofline.bounds(100, 2, 1e9, 1e6, device)
    assert b["launch"] == pytest.approx(220e-6) and b["memory"] == pytest.approx(1e-6)
    assert b["compute"] == pytest.approx(100e-6)
    assert b["binding"] == "launch" and b["bound"] == b["launch"]
    # 1 GB at 1 TB/s = 1 ms dominates 1 kernel and 0 FLOPs.
    b = roofline.bounds(1, 0, 0.0, 1e9, device)
    assert b["binding"] == "memory" and b["bound"] == pytest.approx(1e-3)
    b = roofline.bounds(0, 0, 1e12, 1.0, device)
    assert b["binding"] == "compute" and b["bound"] == pytest.approx(0.1)


def test_launch_costs():
    one, many = _hlo.Counts(kernels=10, host_syncs=1), _hlo.Counts(kernels=30, host_syncs=1)
    # On a line: 2 µs per kernel, 10 µs per loop iteration.
    t_kernel, t_sync = roofline.launch_costs(one, 30e-6, many, 70e-6)
    assert t_kernel == pytest.approx(2e-6) and t_sync == pytest.approx(10e-6)
    # Off the line (negative rest): the cheapest time per kernel seen, no sync cost.
    assert roofline.launch_costs(one, 10e-6, many, 60e-6) == (pytest.approx(1e-6), 0.0)
    # No more kernels in the longer chain: no slope, the time per kernel.
    assert roofline.launch_costs(one, 10e-6, one, 12e-6) == (pytest.approx(1e-6), 0.0)


def test_table_reports_measured_over_bound():
    device = roofline.Device(bandwidth=1e12, flops=1e13, t_kernel=2e-6, t_sync=10e-6)
    result = dict(name="w", what="one", counts=_hlo.Counts(100, 2, 1, 0), flops=1e9, bytes=1e6, xla_bytes=2e6,
                  flops_lower=True, step_s=440e-6, **roofline.bounds(100, 2, 1e9, 1e6, device))
    row = roofline.roofline_table([result]).splitlines()[-1]
    assert row.startswith("| w | one | 100 | 2 | 1 | ≥ 1 GFLOP | 1 MB | 2 MB | 220 |")
    assert row.endswith("| **launch** | 440 | 2× |")
    # A step measured below its largest bound beat it: that bound is no bound, and no limit is named.
    row = roofline.roofline_table([dict(result, step_s=187e-6)]).splitlines()[-1]
    assert row.endswith("| none shown (launch overstated) | 187 | 0.85×: below the launch bound, which is then no "
                        "bound |")


def test_random_read_cost_is_the_marginal_cost_of_a_row_at_the_workloads_rows(monkeypatch):
    # A step of the probe loop costs a fixed 80 µs (launch, loop) plus 2 ns a row gathered: a row costs 2 ns,
    # which one step's time ÷ its rows overstates 1.7-fold at 60,000 rows (on an H100 the bound came out 5×
    # the step). The probe gathers the workload's own rows a step, and 8 for the fixed cost, twice (the
    # smaller of two probes counts: a transient load doubled one once).
    sizes = []

    def fake_time(fn, carry, **kw):
        rows = carry[1].shape[0]  # the rows this probe gathers a step (its carried result)
        sizes.append(rows)
        return 100 * (80e-6 + 2e-9 * rows)  # 100 steps a call

    monkeypatch.setattr(roofline, "_time", fake_time)
    assert roofline.measure_random_read(1 << 20, 60_000) == pytest.approx(2e-9, rel=1e-6)
    assert sorted(sizes) == [8, 8, 60_000, 60_000]
    assert roofline.measure_random_read(1 << 20, 8) == 0.0  # no more rows than the fixed-cost probe: nothing
    # A transient load doubles the first probe's rows: the second probe's 2 ns counts.
    calls = []

    def loaded_time(fn, carry, **kw):
        calls.append(carry[1].shape[0])
        return 100 * (80e-6 + (4e-9 if len(calls) <= 2 else 2e-9) * carry[1].shape[0])

    monkeypatch.setattr(roofline, "_time", loaded_time)
    assert roofline.measure_random_read(1 << 20, 60_000) == pytest.approx(2e-9, rel=1e-6)
    monkeypatch.setattr(roofline, "_time", lambda fn, carry, **kw: 1e-3)  # noise: no difference at all
    assert roofline.measure_random_read(1 << 20, 60_000) == 0.0


def test_gather_probe_reads_new_places_every_step():
    # 3 steps over a 16-row table, places moving by 7 rows a step (wrapping): the last step reads rows
    # (places + 14) mod 16, and carries the offset 21 mod 16 = 5 out; every row is read whole.
    table = jnp.arange(64, dtype=jnp.float32).reshape(16, 4)
    places = jnp.array([0, 3, 9, 15], jnp.int32)
    offset, rows, _, _ = jax.jit(roofline._gather_loop(16, 4, 3))(
        (jnp.int32(0), jnp.zeros((4, 4), jnp.float32), table, places))
    assert int(offset) == 5
    assert rows.tolist() == table[jnp.array([14, 1, 7, 13])].tolist()


def test_kernels_of_a_known_module():
    # The kernels a step can run, by name: the loops', branches' and entry's launching instructions, not the
    # while or conditional themselves, nor bookkeeping (this hand-written module reuses names across
    # computations, so f1, c, f and lt each stand for several; XLA's names are unique in a module).
    assert _hlo.Program(HLO).kernels() == {"c": "copy", "f1": "fusion", "f2": "fusion", "f": "fusion",
                                           "lt": "fusion", "s": "sort"}


def test_kernel_times_per_step_from_trace_events():
    # Two kernels over a call of 10 steps: a, 3 events of 100, 200 and 300 µs (600 µs: 60 µs a step); b, traced
    # on the host (40 µs) and on the device (90 µs): the device's process counts, not both (9 µs a step). The
    # executor's and the loop's events, a metadata event and an instant event are no kernel time.
    events = [
        {"ph": "X", "pid": 1, "name": "a", "dur": 100.0, "args": {"hlo_op": "a"}},
        {"ph": "X", "pid": 1, "name": "anything", "dur": 200.0, "args": {"hlo_op": "a"}},  # named by its args
        {"ph": "X", "pid": 1, "name": "a", "dur": 300.0},
        {"ph": "X", "pid": 1, "name": "b", "dur": 40.0},
        {"ph": "X", "pid": 2, "name": "b", "dur": 90.0},
        {"ph": "X", "pid": 1, "name": "ThunkExecutor::Execute", "dur": 5000.0},
        {"ph": "X", "pid": 1, "name": "while.3", "dur": 900.0},
        {"ph": "M", "pid": 1, "name": "a", "args": {"name": "thread"}},
        {"ph": "i", "pid": 1, "name": "b"},
    ]
    times = roofline.kernel_times(events, {"a": "fusion", "b": "scatter"}, steps=10)
    assert [name for name, _ in times] == ["a", "b"]
    assert [t for _, t in times] == pytest.approx([60e-6, 9e-6])


def test_profile_lines_name_the_costliest_kernels_and_their_shares():
    result = dict(name="w", step_s=100e-6, profile=[("gather", 60e-6), ("scatter", 30e-6), ("copy", 10e-6)])
    (line,) = roofline.profile_lines([result, dict(name="untraced", step_s=1e-6, profile=[])], top=2)
    assert line == ("Where a step of w goes (its 3 kernels traced by `jax.profiler` in one call, 100 µs a step "
                    "against 100 µs measured untraced; the costliest 2): `gather` 60 µs (60 %); `scatter` 30 µs "
                    "(30 %).")


def test_profile_kernels_traces_a_compiled_loop_and_survives_a_profiler_failure(monkeypatch):
    # A scan of 50 steps whose step is one sine fusion: the trace names that loop-body kernel (a kernel of the
    # optimized HLO, not the while loop) with a time per step; a profiler that fails gives no line, not an error.
    from benchmarks import _timing

    def fn(x):
        return jax.lax.scan(lambda c, _: (jnp.sin(c) * 1.5, None), x, None, length=50)[0]

    program = _timing.compile_program(fn, jnp.ones(4096))
    kernels = _hlo.Program(program.compiled.as_text()).kernels()
    times = roofline.profile_kernels(program, 50)
    assert times and all(name in kernels and kernels[name] != "while" for name, _ in times)
    assert kernels[times[0][0]] == "fusion"  # (the costliest: the step's sine, a loop fusion)
    assert all(t > 0 for _, t in times) and times == sorted(times, key=lambda kv: -kv[1])

    def broken(*args, **kwargs):
        raise RuntimeError("no profiler here")

    monkeypatch.setattr(jax.profiler, "trace", broken)
    assert roofline.profile_kernels(program, 50) == []
