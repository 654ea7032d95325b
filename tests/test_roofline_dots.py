"""The roofline's dot bound: the dots found in optimized HLO (benchmarks/_hlo.py) and their rebuilt
products (benchmarks/roofline.py), on a hand-written module and a compiled program.

No timing here: performance is measured in benchmarks/, never in tests.
"""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# Plain `pytest` (unlike `python -m pytest`) does not put the repository root on sys.path.
_ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks import _hlo, roofline  # noqa: E402

# A step loop of 10 iterations whose body runs: a top-level batched dot, a YNNPACK-style custom fusion
# holding a dot (and an elementwise op), and a nested loop of 3 iterations whose body runs a plain fusion
# holding a third dot; the entry runs one more dot outside the step loop.
HLO = """HloModule jit_dots, is_scheduled=true

%fused_ynn (p0: f32[8,5,4], p1: f32[8,4,6]) -> f32[8,5,6] {
  %p0 = f32[8,5,4]{2,1,0} parameter(0)
  %p1 = f32[8,4,6]{2,1,0} parameter(1)
  %d = f32[8,5,6]{2,1,0} dot(%p0, %p1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ROOT %m = f32[8,5,6]{2,1,0} maximum(%d, %d)
}

%fused_inner (q0: f32[5,6], q1: f32[6,2]) -> f32[5,2] {
  %q0 = f32[5,6]{1,0} parameter(0)
  %q1 = f32[6,2]{1,0} parameter(1)
  ROOT %d = f32[5,2]{1,0} dot(%q0, %q1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%ib (t: (s32[], f32[5,6], f32[6,2])) -> (s32[], f32[5,6], f32[6,2]) {
  %t = (s32[], f32[5,6]{1,0}, f32[6,2]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %a = f32[5,6]{1,0} get-tuple-element(%t), index=1
  %b = f32[6,2]{1,0} get-tuple-element(%t), index=2
  %f = f32[5,2]{1,0} fusion(%a, %b), kind=kLoop, calls=%fused_inner
  ROOT %r = (s32[], f32[5,6]{1,0}, f32[6,2]{1,0}) tuple(%i, %a, %b)
}

%ic (t: (s32[], f32[5,6], f32[6,2])) -> pred[] {
  %t = (s32[], f32[5,6]{1,0}, f32[6,2]{1,0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

%bdy (t: (s32[], f32[8,5,4], f32[8,4,6])) -> (s32[], f32[8,5,4], f32[8,4,6]) {
  %t = (s32[], f32[8,5,4]{2,1,0}, f32[8,4,6]{2,1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[8,5,4]{2,1,0} get-tuple-element(%t), index=1
  %w = f32[8,4,6]{2,1,0} get-tuple-element(%t), index=2
  %top = f32[8,5,6]{2,1,0} dot(%x, %w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %ynn = f32[8,5,6]{2,1,0} fusion(%x, %w), kind=kCustom, calls=%fused_ynn, backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
  %a = f32[5,6]{1,0} constant({...})
  %b = f32[6,2]{1,0} constant({...})
  %init = (s32[], f32[5,6]{1,0}, f32[6,2]{1,0}) tuple(%i, %a, %b)
  %loop = (s32[], f32[5,6]{1,0}, f32[6,2]{1,0}) while(%init), condition=%ic, body=%ib, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %r = (s32[], f32[8,5,4]{2,1,0}, f32[8,4,6]{2,1,0}) tuple(%i, %x, %w)
}

%cnd (t: (s32[], f32[8,5,4], f32[8,4,6])) -> pred[] {
  %t = (s32[], f32[8,5,4]{2,1,0}, f32[8,4,6]{2,1,0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (x: f32[8,5,4], w: f32[8,4,6]) -> f32[8,5,6] {
  %x = f32[8,5,4]{2,1,0} parameter(0)
  %w = f32[8,4,6]{2,1,0} parameter(1)
  %z = s32[] constant(0)
  %init = (s32[], f32[8,5,4]{2,1,0}, f32[8,4,6]{2,1,0}) tuple(%z, %x, %w)
  %loop = (s32[], f32[8,5,4]{2,1,0}, f32[8,4,6]{2,1,0}) while(%init), condition=%cnd, body=%bdy, backend_config={"known_trip_count":{"n":"10"}}
  ROOT %once = f32[8,5,6]{2,0,1} dot(%x, %w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""

BATCHED = _hlo.Dot("f32[8,5,4]", "f32[8,4,6]", (((2,), (1,)), ((0,), (0,))), "f32")
INNER = _hlo.Dot("f32[5,6]", "f32[6,2]", (((1,), (0,)), ((), ())), "f32")


def test_dots_found_top_level_fused_and_in_a_nested_loop_counted_per_step():
    # Per step: the top-level dot and the fused one share a key (2), the nested loop's dot runs 3 times.
    counts = _hlo.step_counts(HLO, 10)
    assert dict(counts.dots) == {BATCHED: 2.0, INNER: 3.0}
    assert counts.dot_count == 5.0
    # Steps per call 20 with the same loop of 10: each iteration is two steps, so half the dots per step.
    assert dict(_hlo.step_counts(HLO, 20).dots) == {BATCHED: 1.0, INNER: 1.5}
    # The whole program: 10 iterations plus the entry's own dot (its layout {2,0,1} does not key it apart).
    assert dict(_hlo.Program(HLO).counts().dots) == {BATCHED: 21.0, INNER: 30.0}


def test_dot_flops_are_two_per_multiply_add():
    assert BATCHED.flops == 2 * 8 * 5 * 4 * 6
    assert INNER.flops == 2 * 5 * 6 * 2


def test_a_conditional_counts_the_dots_of_its_costliest_branch():
    text = """HloModule c

%fused (p0: f32[5,6], p1: f32[6,2]) -> f32[5,2] {
  %p0 = f32[5,6]{1,0} parameter(0)
  %p1 = f32[6,2]{1,0} parameter(1)
  ROOT %d = f32[5,2]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%train (a: f32[5,6], b: f32[6,2]) -> f32[5,2] {
  %a = f32[5,6]{1,0} parameter(0)
  %b = f32[6,2]{1,0} parameter(1)
  %f = f32[5,2]{1,0} fusion(%a, %b), kind=kLoop, calls=%fused
  ROOT %g = f32[5,2]{1,0} fusion(%a, %b), kind=kLoop, calls=%fused
}

%skip (a: f32[5,6], b: f32[6,2]) -> f32[5,2] {
  %a = f32[5,6]{1,0} parameter(0)
  ROOT %c = f32[5,2]{1,0} constant({...})
}

ENTRY %main (p: pred[], a: f32[5,6], b: f32[6,2]) -> f32[5,2] {
  %p = pred[] parameter(0)
  %a = f32[5,6]{1,0} parameter(1)
  %b = f32[6,2]{1,0} parameter(2)
  ROOT %k = f32[5,2]{1,0} conditional(%p, %a, %b), true_computation=%train, false_computation=%skip
}
"""
    assert dict(_hlo.Program(text).counts().dots) == {INNER: 2.0}


@pytest.fixture(scope="module")
def compiled_dots():
    """The dots of a compiled program with two products of different shapes: a batched [3,4,5]·[3,5,7] and
    a plain [12,7]·[7,2] (sizes above 1 everywhere, so XLA keeps them as dots)."""
    def f(x, w1, w2):
        h = jnp.einsum("bij,bjk->bik", x, w1)
        return jnp.tanh(h).reshape(12, 7) @ w2

    args = (jnp.ones((3, 4, 5)), jnp.ones((3, 5, 7)), jnp.ones((7, 2)))
    program = _hlo.Program(jax.jit(f).lower(*args).compile().as_text())
    results = {}  # each dot's key -> the result shape the HLO gives it
    for name, instructions in program.computations.items():
        for inst in instructions:
            if inst.opcode == "dot":
                ((dot, _),) = program.dots_in(inst, name)
                results[dot] = _hlo.Dot.dims(inst.shape)
    return program, results


def test_compiled_program_dots_rebuild_to_the_shapes_and_flops_the_hlo_gives(compiled_dots):
    program, results = compiled_dots
    assert program.counts().dot_count == 2
    assert sorted(d.flops for d in results) == sorted([2.0 * 3 * 4 * 5 * 7, 2.0 * 12 * 7 * 2])
    for dot, (dtype, shape) in results.items():
        lhs, rhs, out = roofline.dot_operands(dot)
        rebuilt = jax.lax.dot_general(lhs, rhs, dot.dimension_numbers)
        assert rebuilt.shape == out.shape == shape and dtype == dot.dtype == "f32"
        # The rebuilt product's FLOPs from its own operands: batch × free × free × contracted × 2.
        (lc, _), _ = dot.dimension_numbers
        contracted = int(np.prod([lhs.shape[i] for i in lc]))
        assert dot.flops == 2.0 * int(np.prod(shape)) * contracted


def test_probe_loop_computes_the_product_every_step_inside_the_loop():
    # One step: the carried result is the product of the operands as given.
    lhs, rhs, out = roofline.dot_operands(BATCHED)
    step = roofline._dot_loop(BATCHED, 1)
    a, b, got = jax.jit(step)((lhs, rhs, out))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.lax.dot_general(lhs, rhs,
                                                                                   BATCHED.dimension_numbers)))
    # The first element of the lhs becomes the (clipped) first product: the next step depends on this one.
    assert float(a[0, 0, 0]) == pytest.approx(float(np.clip(got[0, 0, 0], -1, 1)))
    # Compiled for 5 steps: the dot is in the loop, run 5 times per call, not hoisted out of it.
    text = jax.jit(roofline._dot_loop(BATCHED, 5)).lower((lhs, rhs, out)).compile().as_text()
    assert dict(_hlo.Program(text).counts().dots) == {BATCHED: 5.0}


def test_dot_bound_binds_when_largest_and_shows_a_dash_without_dots():
    device = roofline.Device(bandwidth=1e9, flops=1e10, t_kernel=1e-6, t_sync=5e-6)
    b = roofline.bounds(100, 2, 1e6, 1e5, device, random_s=5e-6, traffic_s=3e-4, dot_s=4e-4)
    assert b["binding"] == "dot" and b["bound"] == b["dot"] == 4e-4
    assert roofline.bounds(100, 2, 1e6, 1e5, device, dot_s=1e-4)["binding"] == "launch"
    assert roofline.dot_bound(_hlo.Counts(kernels=3)) == (0.0, {})
    row = dict(name="w", what="one", counts=_hlo.Counts(100, 2, 1, 0), flops=1e9, bytes=1e6, xla_bytes=2e6,
               flops_lower=False, step_s=800e-6, **b)
    cells = roofline.roofline_table([row]).splitlines()[-1].split(" | ")
    assert cells[-4] == "–" and cells[-3] == "**dot**" and cells[-1].rstrip(" |") == "2×"
    with_dots = dict(row, counts=_hlo.Counts(100, 2, 1, 0, dots=((BATCHED, 2.0), (INNER, 3.0))))
    assert roofline.roofline_table([with_dots]).splitlines()[-1].split(" | ")[-4] == "400: 5 dots (2 shapes)"


def test_dot_lines_name_each_shape_its_count_time_and_rate():
    counts = _hlo.Counts(10, dots=((BATCHED, 2.0), (INNER, 3.0)))
    each = {BATCHED: 1e-6 * BATCHED.flops / 1e3, INNER: 2e-6}  # BATCHED at exactly 1 GFLOP/s
    (line,) = roofline.dot_lines([dict(name="w", counts=counts, dot_each=each), dict(name="none", counts=_hlo.Counts())])
    assert line == ("Dots of w per step (count × lhs · rhs, time of one alone): 2 × f32[8,5,4] · f32[8,4,6] 1.92 µs "
                    "(1 GFLOP/s); 3 × f32[5,6] · f32[6,2] 2 µs (0.06 GFLOP/s).")


def test_convolutions_are_found_and_rebuilt_with_their_window_labels_and_groups():
    def f(x, k, k2):
        strided = jax.lax.conv_general_dilated(x, k, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        grouped = jax.lax.conv_general_dilated(x, k2, (1, 1), ((1, 0), (0, 2)), rhs_dilation=(2, 1),
                                               dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=2)
        return strided, grouped

    args = (jax.random.normal(jax.random.key(0), (4, 10, 10, 10)), jax.random.normal(jax.random.key(1), (3, 3, 10, 8)),
            jax.random.normal(jax.random.key(2), (6, 5, 3, 3)))
    program = _hlo.Program(jax.jit(f).lower(*args).compile().as_text())
    convs = {dot: count for dot, count in program.counts().dots}
    assert len(convs) == 2 and set(convs.values()) == {1.0}
    by_result = {_hlo.Dot.dims(c.result)[1]: c for c in convs}
    strided, grouped = by_result[(4, 5, 5, 8)], by_result[(4, 7, 10, 6)]  # XLA:CPU runs both as b01f
    assert strided.flops == 2.0 * 4 * 5 * 5 * 8 * (3 * 3 * 10)
    assert grouped.flops == 2.0 * 4 * 7 * 10 * 6 * (3 * 3 * 5) and grouped.feature_groups == 2
    assert grouped.window_list("rhs_dilate", (1, 1)) == (2, 1)
    for conv in (strided, grouped):
        lhs, rhs, out = roofline.dot_operands(conv)
        assert out.shape == _hlo.Dot.dims(conv.result)[1]
    # The strided one reads the program's own operands (NHWC, HWIO): rebuilt, it gives the program's numbers.
    np.testing.assert_allclose(np.asarray(roofline.apply_product(strided, args[0], args[1])),
                               np.asarray(jax.jit(f)(*args)[0]), rtol=1e-6, atol=1e-5)
