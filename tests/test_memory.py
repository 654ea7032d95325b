"""jaxreplay.memory: one record of pure functions per replay kind, equal to the modules it wraps."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay import buffer, memory, prioritized, samplers

EXAMPLE = {"x": jnp.float32(0)}


def _filled(kind):
    mem = memory.make(kind)
    state = mem.init(EXAMPLE, 16, 10)
    for i in range(13):  # wraps the ring of capacity 10
        state = mem.add(state, {"x": jnp.float32(i)})
    return mem, state


@pytest.mark.parametrize("kind, sampler", [("uniform", samplers.uniform), ("cer", samplers.combined)])
def test_plain_kinds_wrap_the_buffer_and_their_sampler(kind, sampler):
    mem, state = _filled(kind)
    assert isinstance(state, buffer.BufferState) and mem.buffer(state) is state
    key = jax.random.key(3)
    got = mem.sample(key, state, 6, importance_exponent=0.7)  # ignored: no correction
    want = sampler(key, state, 6)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.weights, want.weights)
    same = mem.update(state, got.indices, jnp.ones(6), priority_exponent=0.5, priority_floor=0.1)
    assert same is state  # no priorities to store
    assert int(mem.resize(state, 4).capacity) == 4


def test_prioritized_kind_wraps_the_sum_tree():
    mem, state = _filled("prioritized")
    assert isinstance(state, prioritized.PrioritizedState) and mem.buffer(state) is state.buffer
    key = jax.random.key(5)
    got = mem.sample(key, state, 6, importance_exponent=0.4)
    want = prioritized.sample(key, state, 6, 0.4)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.weights, want.weights)
    td = jnp.arange(6, dtype=jnp.float32)
    updated = mem.update(state, got.indices, td, priority_exponent=0.6, priority_floor=1e-3)
    reference = prioritized.update_priorities(state, got.indices, td, 0.6, 1e-3)
    np.testing.assert_array_equal(prioritized.priorities(updated), prioritized.priorities(reference))
    # A traced slot -1 is skipped (a masked training step stores nothing).
    skip = jax.jit(lambda s, i: mem.update(s, i, td, priority_exponent=0.6, priority_floor=1e-3))
    skipped = skip(state, jnp.full((6,), -1))
    np.testing.assert_array_equal(prioritized.priorities(skipped), prioritized.priorities(state))


def test_one_loop_serves_every_kind_under_jit():
    @jax.jit
    def step(key, state, td):
        sample = mem.sample(key, state, 4, importance_exponent=0.5)
        return mem.update(state, sample.indices, td, priority_exponent=0.6, priority_floor=1e-6)

    for kind in memory.KINDS:
        mem, state = _filled(kind)
        out = step(jax.random.key(0), state, jnp.ones(4))
        assert int(mem.buffer(out).size) == 10


def test_unknown_kind_is_named():
    with pytest.raises(ValueError, match="kind"):
        memory.make("lifo")
