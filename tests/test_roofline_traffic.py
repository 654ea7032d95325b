"""The roofline's inter-kernel traffic (benchmarks/_hlo.py) and its bound (benchmarks/roofline.py), on known inputs.

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

# A step loop of 4 iterations over a buffer f32[100,8] (3,200 B) and a vector f32[8] (32 B). Every kernel's
# bytes, worked out by hand (w: written, r: read), are in the comments; the buffer is never counted whole
# except by the multiply that really reads and writes all of it.
HLO = """HloModule traffic, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%gather_fused (p0: f32[100,8], p1: s32[5,1]) -> f32[5,8] {
  %p0 = f32[100,8]{1,0} parameter(0)
  %p1 = s32[5,1]{1,0} parameter(1)
  %g = f32[5,8]{1,0} gather(%p0, %p1), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}
  ROOT %n = f32[5,8]{1,0} negate(%g)
}

%scatter_fused (p0: f32[100,8], p1: s32[5,1], p2: f32[5,8]) -> f32[100,8] {
  %p0 = f32[100,8]{1,0} parameter(0)
  %p1 = s32[5,1]{1,0} parameter(1)
  %p2 = f32[5,8]{1,0} parameter(2)
  ROOT %s = f32[100,8]{1,0} scatter(%p0, %p1, %p2), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}

%dus_fused (p0: f32[100,8], p1: f32[8], p2: s32[]) -> f32[100,8] {
  %p0 = f32[100,8]{1,0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  %e = f32[8]{0} exponential(%p1)
  %u = f32[1,8]{1,0} bitcast(%e)
  %p2 = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %d = f32[100,8]{1,0} dynamic-update-slice(%p0, %u, %p2, %z)
}

%both (p0: f32[100,8], p1: f32[8]) -> (f32[8], f32[100,8]) {
  %p0 = f32[100,8]{1,0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  %r = f32[1,8]{1,0} slice(%p0), slice={[3:4], [0:8]}
  %rb = f32[8]{0} bitcast(%r)
  %a = f32[8]{0} add(%rb, %p1)
  %m = f32[100,8]{1,0} multiply(%p0, %p0)
  ROOT %t = (f32[8]{0}, f32[100,8]{1,0}) tuple(%a, %m)
}

%twice (p0: f32[8], p1: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  ROOT %s = f32[8]{0} add(%p0, %p1)
}

%cheap (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  ROOT %n = f32[8]{0} negate(%x)
}

%costly (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %n = f32[8]{0} negate(%x)
  ROOT %c = f32[8]{0} copy(%n)
}

%body (t: (s32[], f32[100,8], f32[8])) -> (s32[], f32[100,8], f32[8]) {
  %t = (s32[], f32[100,8]{1,0}, f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %buf = f32[100,8]{1,0} get-tuple-element(%t), index=1
  %x = f32[8]{0} get-tuple-element(%t), index=2
  %idx = s32[5,1]{1,0} constant({{1},{2},{3},{4},{5}})
  %g = f32[5,8]{1,0} fusion(%buf, %idx), kind=kLoop, calls=%gather_fused
  %s = f32[100,8]{1,0} fusion(%buf, %idx, %g), kind=kLoop, calls=%scatter_fused
  %d = f32[100,8]{1,0} fusion(%s, %x, %i), kind=kLoop, calls=%dus_fused
  %u2 = f32[1,8]{1,0} bitcast(%x)
  %top = f32[100,8]{1,0} dynamic-update-slice(%d, %u2, %i, %i)
  %sl = f32[2,8]{1,0} slice(%top), slice={[0:2], [0:8]}
  %mo = (f32[8]{0}, f32[100,8]{1,0}) fusion(%top, %x), kind=kLoop, calls=%both
  %y = f32[8]{0} get-tuple-element(%mo), index=0
  %big = f32[100,8]{1,0} get-tuple-element(%mo), index=1
  %c = f32[8]{0} copy(%y)
  %dup = f32[8]{0} fusion(%c, %c), kind=kLoop, calls=%twice
  %p = pred[] constant(true)
  %k = f32[8]{0} conditional(%p, %dup, %dup), true_computation=%cheap, false_computation=%costly
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  ROOT %r = (s32[], f32[100,8]{1,0}, f32[8]{0}) tuple(%i1, %big, %k)
}

%cond (t: (s32[], f32[100,8], f32[8])) -> pred[] {
  %t = (s32[], f32[100,8]{1,0}, f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (buf: f32[100,8], x: f32[8]) -> f32[8] {
  %buf = f32[100,8]{1,0} parameter(0)
  %x = f32[8]{0} parameter(1)
  %z = s32[] constant(0)
  %init = (s32[], f32[100,8]{1,0}, f32[8]{0}) tuple(%z, %buf, %x)
  %w = (s32[], f32[100,8]{1,0}, f32[8]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"4"}}
  ROOT %out = f32[8]{0} get-tuple-element(%w), index=2
}
"""

# Per iteration, kernel by kernel:
#   g    gather fusion:   w 5×8×4 = 160; r the 5 rows gathered 160 (the indices are a constant: 0)
#   s    scatter fusion:  w its updates 160; r buf 0 (updated in place), indices 0 (constant), g 160
#   d    DUS fusion:      w the row 32; r s 0 (in place), x 32, i 4
#   top  DUS:             w the row 32; r d 0, the row 32, i 4 (an operand used twice is read once)
#   sl   slice:           w 2×8×4 = 64; r 64 (the slice taken)
#   mo   2-output fusion: w 32 + 3,200; r top 3,200 (the multiply reads it whole; the slice's 32 is
#                         inside that), x 32
#   c    copy:            w 32, r 32
#   dup  add fusion:      w 32; r c once: 32
#   k    conditional:     its costlier branch, negate + copy: w 64, r 64
#   i1   add:             w 4; r i 4 (the constant: 0)
#   lt   the condition:   w 1 (pred); r i 4
WRITTEN = 160 + 160 + 32 + 32 + 64 + 3232 + 32 + 32 + 64 + 4 + 1
READ = 160 + 160 + 36 + 36 + 64 + 3232 + 32 + 32 + 64 + 4 + 4


def test_shape_bytes():
    assert _hlo.shape_bytes("f32[100,8]{1,0}") == 3200
    assert _hlo.shape_bytes("(s32[], pred[3]{0}, /*index=2*/bf16[2,2]{1,0})") == 4 + 3 + 8
    assert _hlo.shape_bytes("f8e4m3fn[16]{0}") == 16 and _hlo.shape_bytes("u4[6]{0}") == 3
    assert _hlo.shape_bytes("token[]") == 0 and _hlo.shape_bytes("c64[2]{0}") == 16


def test_traffic_of_a_known_module():
    counts = _hlo.step_counts(HLO, 4)
    assert counts.kernels == 12 and counts.host_syncs == 2
    assert (counts.written, counts.read) == (WRITTEN, READ)
    assert counts.traffic == WRITTEN + READ
    # Scaled like the kernels: the whole program is 4 iterations (the entry launches nothing else).
    whole = _hlo.Program(HLO).counts()
    assert (whole.written, whole.read) == (4 * WRITTEN, 4 * READ)
    # A loop XLA unrolled by 2 (trip 4 for 8 steps): half an iteration per step.
    assert _hlo.step_counts(HLO, 8).written == WRITTEN / 2
    # XLA's newer printer drops the % of names: the same bytes.
    assert _hlo.step_counts(HLO.replace("%", ""), 4) == counts


def test_in_place_updates_and_gathers_count_only_their_slices():
    # Without the in-place and slicing rules each of g, s, d, top and sl would count the whole 3,200-byte
    # buffer: a 100× larger buffer changes the counts only where the multiply really reads and writes it all.
    larger = HLO.replace("f32[100,8]", "f32[10000,8]")
    counts = _hlo.step_counts(larger, 4)
    assert counts.written == WRITTEN + 99 * 3200 and counts.read == READ + 99 * 3200
    # A gather that also feeds an elementwise op reads its operand whole.
    whole = HLO.replace("ROOT %n = f32[5,8]{1,0} negate(%g)",
                        "%n = f32[5,8]{1,0} negate(%g)\n  %e = f32[100,8]{1,0} exponential(%p0)\n"
                        "  ROOT %t = (f32[5,8]{1,0}, f32[100,8]{1,0}) tuple(%n, %e)")
    assert _hlo.step_counts(whole, 4).read == READ - 160 + 3200


def _ring_step(rows: int, steps: int = 10) -> _hlo.Counts:
    """A scan that reduces x (f32[256]), updates it, writes it into row i of a ``rows``-row ring in place and
    adds back one row read at a data-dependent place."""
    def body(c, _):
        ring, x, i = c
        x = x * 0.5 + jnp.sum(x)
        ring = jax.lax.dynamic_update_index_in_dim(ring, x, i % rows, 0)
        return (ring, x + ring[(i * 7) % rows], i + 1), None

    fn = lambda c: jax.lax.scan(body, c, None, length=steps)[0]  # noqa: E731
    carry = (jnp.zeros((rows, 256)), jnp.ones(256), jnp.int32(0))
    return _hlo.step_counts(jax.jit(fn).lower(carry).compile().as_text(), steps)


@pytest.fixture(scope="module")
def ring_steps():
    return _ring_step(16), _ring_step(1024)


def test_a_compiled_ring_update_counts_rows_not_the_ring(ring_steps):
    small, large = ring_steps
    # XLA:CPU (jax 0.10.2) compiles the step to 7 kernels: the sum as a partial reduce-window (reads x 1 kB,
    # writes 8 floats) then a reduce (32 B → 4 B), the updated row fused with its write into the ring (writes
    # the 1 kB row; reads x 1 kB + 3 scalars, not the ring), the new x fused with the row it reads back
    # (writes 1 kB; reads that row 1 kB + x 1 kB + 3 scalars), a copy and an add of the loop counter
    # (4 B each way), and the loop condition (reads 4 B, writes a 1-byte pred).
    assert small.kernels == 7
    assert small.written == 32 + 4 + 1024 + 1024 + 4 + 4 + 1
    assert small.read == 1024 + 32 + (1024 + 12) + (2048 + 12) + 4 + 4 + 4
    # The ring is updated and read in place: 64× more rows, the same traffic.
    assert (large.written, large.read) == (small.written, small.read)


def test_traffic_bound_joins_the_others():
    device = roofline.Device(bandwidth=1e12, flops=1e13, t_kernel=2e-6, t_sync=10e-6)
    b = roofline.bounds(100, 2, 1e9, 1e6, device, random_s=5e-6, traffic_s=300e-6)
    assert b["traffic"] == pytest.approx(300e-6)
    assert b["binding"] == "traffic" and b["bound"] == b["traffic"]
    assert roofline.bounds(100, 2, 1e9, 1e6, device, traffic_s=100e-6)["binding"] == "launch"
    result = dict(name="w", what="one", counts=_hlo.Counts(100, 2, 1, 0, written=1e8, read=2e8), flops=1e9,
                  bytes=1e6, xla_bytes=2e6, flops_lower=False, step_s=600e-6, random_reads=10, t_random=5e-7,
                  traffic_bandwidth=1e12, probe_bytes=4096, **b)
    row = roofline.roofline_table([result]).splitlines()[-1]
    assert row.endswith("| 300 (300 MB ÷ 1 TB/s at 4.1 kB) | – | **traffic** | 600 | 2× |")  # – : no dots
    # On an accelerator the bound uses the memory bandwidth (no probe): the row says so.
    row = roofline.roofline_table([dict(result, probe_bytes=0)]).splitlines()[-1]
    assert "| 300 (300 MB ÷ 1 TB/s of memory) |" in row
