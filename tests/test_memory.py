"""jaxreplay.memory: one record of pure functions per replay kind, its hyperparameters bound by ``make``.

The contract tests are parametrized over every kind in ``memory.KINDS`` (one test over all
of them, as optax tests its transformations): FIFO order against a plain-Python deque,
sampling only inside the live window, resize semantics, ``update`` a no-op without
priorities, the same pytree structure in and out of ``jit``, unknown keywords refused.
"""

from __future__ import annotations

import collections
import functools

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from jaxreplay import buffer, memory, prioritized, samplers

EXAMPLE = {"x": jnp.float32(0)}
MAX_CAPACITY = 8
DRAWS = 64  # samples per read: each live transition of a window of <= 8 is drawn w.p. > 1 - 1e-3
# Values a kind's hyperparameters are bound to here (every kind's names; make takes the kind's own).
BOUND = {"importance_exponent": 0.4, "priority_exponent": 0.6, "priority_floor": 1e-3}


def _make(kind):
    return memory.make(kind, **{name: BOUND[name] for name in memory.HYPERPARAMETERS[kind]})


def _filled(kind, capacity=10, adds=13):
    """A memory of ``kind`` (16 slots, capacity 10) after ``adds`` transitions x = 0, 1, ..."""
    mem = _make(kind)
    state = mem.init(EXAMPLE, 16, capacity)
    add = _jitted_add(kind)
    for i in range(adds):  # 13 forgets x = 0, 1, 2: the window is slots 3..12
        state = add(state, {"x": jnp.float32(i)})
    return mem, state


@functools.lru_cache(maxsize=None)
def _jitted_add(kind):
    return jax.jit(_make(kind).add)


def _leaves_equal(a, b):
    """Same treedef and bit-identical leaves (dtype, shape and values)."""
    if jax.tree.structure(a) != jax.tree.structure(b):
        return False
    return all(
        x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=True)
        for x, y in zip(map(np.asarray, jax.tree.leaves(a)), map(np.asarray, jax.tree.leaves(b)))
    )


# ----------------------------------------------------------------------------
# Each kind is the module it wraps, with its hyperparameters bound


@pytest.mark.parametrize("kind, sampler", [("uniform", samplers.uniform), ("cer", samplers.combined)])
def test_plain_kinds_wrap_the_buffer_and_their_sampler(kind, sampler):
    mem, state = _filled(kind)
    assert isinstance(state, buffer.BufferState) and mem.buffer(state) is state
    key = jax.random.key(3)
    got = mem.sample(key, state, 6)
    want = sampler(key, state, 6)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.weights, want.weights)
    assert int(mem.resize(state, 4).capacity) == 4


def test_prioritized_kind_wraps_the_sum_tree_with_its_bound_exponents():
    mem, state = _filled("prioritized")
    assert isinstance(state, prioritized.PrioritizedState) and mem.buffer(state) is state.buffer
    key, td = jax.random.key(5), jnp.arange(6, dtype=jnp.float32)

    @jax.jit
    def record_and_module(state):
        got, want = mem.sample(key, state, 6), prioritized.sample(key, state, 6, 0.4)
        updated = mem.update(state, got.indices, td)
        reference = prioritized.update_priorities(state, got.indices, td, 0.6, 1e-3)
        return got, want, prioritized.priorities(updated), prioritized.priorities(reference)

    got, want, updated, reference = record_and_module(state)
    assert _leaves_equal(got, want)
    np.testing.assert_array_equal(updated, reference)
    # Live slots 3..12 (x = 3..12); a replayed slot stores (|δ| + 1e-3)^0.6 for the largest of its
    # errors, a live one not replayed keeps the initial max priority 1, the others stay 0.
    replayed = np.asarray(got.indices).tolist()
    assert set(replayed) <= set(range(3, 13))
    for slot in range(16):
        errors = [float(td[j]) for j, s in enumerate(replayed) if s == slot]
        want_p = (max(errors) + 1e-3) ** 0.6 if errors else (1.0 if 3 <= slot <= 12 else 0.0)
        np.testing.assert_allclose(float(updated[slot]), want_p, rtol=1e-6)


def test_prioritized_defaults_are_no_correction_alpha_one_and_a_tiny_floor():
    @jax.jit
    def run():
        mem = memory.make("prioritized")
        state = mem.init(EXAMPLE, 4, 4)
        for i in range(4):
            state = mem.add(state, {"x": jnp.float32(i)})
        updated = mem.update(state, jnp.arange(4, dtype=jnp.int32), jnp.array([0.0, 1.0, 2.0, 3.0]))
        return prioritized.priorities(updated), mem.sample(jax.random.key(0), updated, 8).weights

    priorities, weights = run()
    np.testing.assert_allclose(priorities, [1e-6, 1 + 1e-6, 2 + 1e-6, 3 + 1e-6], rtol=1e-6)
    assert np.asarray(weights).tolist() == [1.0] * 8


def test_traced_hyperparameters_are_bound_inside_jit_and_vmap():
    """Built inside the traced function (like optax.inject_hyperparams): one compilation serves every β."""
    _, state = _filled("prioritized")
    key = jax.random.key(5)

    def weights(beta):
        return memory.make("prioritized", importance_exponent=beta).sample(key, state, 6).weights

    traced = jax.jit(jax.vmap(weights))(jnp.array([0.0, 0.4, 1.0]))
    for row, beta in zip(np.asarray(traced), (0.0, 0.4, 1.0)):
        np.testing.assert_array_equal(row, prioritized.sample(key, state, 6, beta).weights)
    assert np.asarray(traced[0]).tolist() == [1.0] * 6  # β = 0: no correction
    # A traced α = NaN flags the update instead of storing NaN priorities.
    flagged = jax.jit(
        lambda a: memory.make("prioritized", priority_exponent=a).update(state, jnp.array([0]), jnp.array([2.0]))
    )(jnp.float32(jnp.nan))
    assert bool(flagged.invalid_parameters)
    np.testing.assert_array_equal(prioritized.priorities(flagged), prioritized.priorities(state))


def test_one_loop_serves_every_kind_under_jit():
    def step(kind, key, state, td, hyperparameters):
        mem = memory.make(kind, **{name: hyperparameters[name] for name in memory.HYPERPARAMETERS[kind]})
        sample = mem.sample(key, state, 4)
        return mem.update(state, sample.indices, td)

    for kind in memory.KINDS:
        mem, state = _filled(kind)
        step_kind = jax.jit(functools.partial(step, kind))
        out = step_kind(jax.random.key(0), state, jnp.ones(4), BOUND)
        assert int(mem.buffer(out).size) == 10


# ----------------------------------------------------------------------------
# Bad input: named, before anything is traced


@pytest.mark.parametrize("kind", memory.KINDS)
def test_a_misspelt_hyperparameter_is_refused_naming_it_and_the_kinds_names(kind):
    takes = ", ".join(memory.HYPERPARAMETERS[kind]) or "no hyperparameters"
    with pytest.raises(ValueError) as raised:
        memory.make(kind, importance_exponant=0.4)
    assert str(raised.value) == (
        f"memory.make({kind!r}) got unknown keyword(s) importance_exponant; {kind!r} takes {takes}."
    )


@pytest.mark.parametrize("kind", [kind for kind in memory.KINDS if not memory.HYPERPARAMETERS[kind]])
def test_a_hyperparameter_the_kind_does_not_use_is_refused(kind):
    with pytest.raises(ValueError) as raised:
        memory.make(kind, priority_floor=1e-6, importance_exponent=0.4)
    assert str(raised.value) == (
        f"memory.make({kind!r}) got unknown keyword(s) importance_exponent, priority_floor; "
        f"{kind!r} takes no hyperparameters."
    )


@pytest.mark.parametrize(
    "hyperparameters, message",
    [
        ({"importance_exponent": -0.5}, "importance_exponent must be >= 0.0, got -0.5."),
        ({"priority_exponent": float("nan")}, "priority_exponent must be finite, got nan."),
        ({"priority_floor": -1e-6}, "priority_floor must be >= 0.0, got -1e-06."),
    ],
)
def test_a_bad_concrete_hyperparameter_is_named_by_make(hyperparameters, message):
    with pytest.raises(ValueError) as raised:
        memory.make("prioritized", **hyperparameters)
    assert str(raised.value) == message


def test_unknown_kind_is_named():
    with pytest.raises(ValueError, match=r"kind must be one of \('uniform', 'prioritized', 'cer'\), got 'lifo'"):
        memory.make("lifo")
    # Not a string (an example transition passed first, by mistake): named by its type, not by NumPy's
    # "truth value of an array is ambiguous" nor by a page of its values; a short one by its repr.
    with pytest.raises(ValueError, match=r"^kind must be one of \(.*\), got a value of type ndarray\.$"):
        memory.make(np.zeros(1000))
    with pytest.raises(ValueError, match=r"^kind must be one of \(.*\), got a value of type dict\.$"):
        memory.make({"obs": np.zeros(1000)})
    with pytest.raises(ValueError, match=r"^kind must be one of \(.*\), got None\.$"):
        memory.make(None)


# ----------------------------------------------------------------------------
# The contract, over every kind


@functools.lru_cache(maxsize=None)
def _compiled(kind):
    """``(apply, read)`` for ``kind``, jitted once: every hypothesis example reuses them."""
    mem = _make(kind)

    @jax.jit
    def apply(state, code, value, capacity, key, td):
        def update(s):
            return mem.update(s, mem.sample(key, s, 4).indices, td)

        ops = [lambda s: mem.add(s, {"x": value}), lambda s: mem.resize(s, capacity), update]
        return jax.lax.switch(code, ops, state)

    @jax.jit
    def read(state, key):
        buf = mem.buffer(state)
        contents, valid = buffer.in_age_order(buf)
        sample = mem.sample(key, state, DRAWS)
        return {
            "in_age_order": contents["x"],
            "valid": valid,
            "capacity": buf.capacity,
            "sampled_live": buffer.valid_mask(buf)[sample.indices],
            "sampled": buffer.get(buf, sample.indices)["x"],
        }

    return mem, apply, read


ADD, RESIZE, UPDATE = 0, 1, 2
_operation = st.one_of(
    st.tuples(st.just(ADD), st.integers(-1000, 1000)),
    st.tuples(st.just(RESIZE), st.integers(1, MAX_CAPACITY)),
    st.tuples(st.just(UPDATE), st.lists(st.floats(0, 10, width=32), min_size=4, max_size=4)),
)


def _check_against(model, capacity, got):
    n = len(model)
    assert int(got["capacity"]) == capacity
    assert np.asarray(got["valid"]).tolist() == [j < n for j in range(MAX_CAPACITY)]
    assert np.asarray(got["in_age_order"])[:n].tolist() == list(model)  # FIFO: oldest first
    if n:
        assert np.asarray(got["sampled_live"]).all()
        assert set(np.asarray(got["sampled"]).tolist()) <= set(model)


@pytest.mark.parametrize("kind", memory.KINDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    initial=st.integers(1, MAX_CAPACITY),
    operations=st.lists(_operation, max_size=24),
    seed=st.integers(0, 2**16),
)
def test_fifo_order_and_samples_inside_the_live_window_match_a_deque(kind, initial, operations, seed):
    mem, apply, read = _compiled(kind)
    state = mem.init(EXAMPLE, MAX_CAPACITY, initial)
    model, capacity = collections.deque(), initial
    key = jax.random.key(seed)
    for step, (code, arg) in enumerate(operations):
        value = float(arg) if code == ADD else 0.0
        new_capacity = arg if code == RESIZE else capacity
        td = jnp.asarray(arg if code == UPDATE else [0.0] * 4, jnp.float32)
        state = apply(state, code, jnp.float32(value), jnp.int32(new_capacity), jax.random.fold_in(key, step), td)
        if code == ADD:
            model.append(value)
        capacity = new_capacity
        while len(model) > capacity:  # a full add or a shrink forgets the oldest
            model.popleft()
        _check_against(model, capacity, read(state, jax.random.fold_in(key, 1000 + step)))


@pytest.mark.parametrize("kind", memory.KINDS)
def test_samples_stay_in_the_window_after_wrap_around_and_a_shrink(kind):
    _, apply, read = _compiled(kind)
    mem = _make(kind)
    state = mem.init(EXAMPLE, MAX_CAPACITY, 6)
    for i in range(13):  # the ring (8 slots) wraps; the window is x = 7..12
        state = apply(state, ADD, jnp.float32(i), jnp.int32(6), jax.random.key(0), jnp.zeros(4))
    got = read(state, jax.random.key(1))
    assert np.asarray(got["in_age_order"])[:6].tolist() == [7, 8, 9, 10, 11, 12]
    assert set(np.asarray(got["sampled"]).tolist()) == {7.0, 8.0, 9.0, 10.0, 11.0, 12.0}
    state = apply(state, RESIZE, jnp.float32(0), jnp.int32(3), jax.random.key(0), jnp.zeros(4))
    got = read(state, jax.random.key(2))
    assert np.asarray(got["in_age_order"])[:3].tolist() == [10, 11, 12]
    assert set(np.asarray(got["sampled"]).tolist()) == {10.0, 11.0, 12.0}
    assert np.asarray(got["sampled_live"]).all()


@pytest.mark.parametrize("kind", memory.KINDS)
def test_shrinking_keeps_the_newest_and_growing_keeps_all(kind):
    mem, state = _filled(kind, capacity=10, adds=13)  # window x = 3..12
    shrunk = mem.resize(state, 4)
    assert int(mem.buffer(shrunk).size) == 4 and int(mem.buffer(shrunk).capacity) == 4
    assert np.asarray(buffer.in_age_order(mem.buffer(shrunk))[0]["x"])[:4].tolist() == [9, 10, 11, 12]
    grown = mem.resize(shrunk, 16)
    assert int(mem.buffer(grown).size) == 4 and int(mem.buffer(grown).capacity) == 16  # nothing comes back
    for i in range(13, 25):  # 12 adds fill the 16 slots without forgetting
        grown = _jitted_add(kind)(grown, {"x": jnp.float32(i)})
    assert np.asarray(buffer.in_age_order(mem.buffer(grown))[0]["x"]).tolist() == list(range(9, 25))


@pytest.mark.parametrize("kind", memory.KINDS)
def test_update_is_a_no_op_without_priorities(kind):
    mem, state = _filled(kind)
    indices = mem.sample(jax.random.key(4), state, 6).indices
    td = jnp.arange(1, 7, dtype=jnp.float32)
    updated = jax.jit(mem.update)(state, indices, td)
    skipped = jax.jit(mem.update)(state, jnp.full((6,), -1, jnp.int32), td)  # a masked step's slots
    assert _leaves_equal(skipped, state)
    if isinstance(state, prioritized.PrioritizedState):
        changed = np.asarray(prioritized.priorities(updated)) != np.asarray(prioritized.priorities(state))
        assert sorted(np.flatnonzero(changed).tolist()) == sorted(set(np.asarray(indices).tolist()))
    else:
        assert _leaves_equal(updated, state)
        assert mem.update(state, indices, td) is state


@pytest.mark.parametrize("kind", memory.KINDS)
def test_the_same_pytree_structure_in_and_out_of_jit(kind):
    mem = _make(kind)
    key = jax.random.key(6)
    transition = {"x": jnp.float32(1)}
    indices, td = jnp.array([0, 1], jnp.int32), jnp.array([0.5, 2.0], jnp.float32)

    def calls(state):
        """Every function of the record on ``state`` (a scan carry must keep one structure)."""
        added = mem.add(state, transition)
        return {
            "add": added,
            "sample": mem.sample(key, added, 2),
            "update": mem.update(added, indices, td),
            "resize": mem.resize(added, 3),
            "buffer": mem.buffer(added),
        }

    state = mem.init(EXAMPLE, MAX_CAPACITY, 5)
    eager, jitted = calls(state), jax.jit(calls)(state)
    for name in ("add", "update", "resize"):
        assert jax.tree.structure(eager[name]) == jax.tree.structure(state), name
        assert [(x.shape, x.dtype) for x in jax.tree.leaves(eager[name])] == [
            (x.shape, x.dtype) for x in jax.tree.leaves(state)
        ], name
    for name in eager:
        assert _leaves_equal(jitted[name], eager[name]), name
    assert _leaves_equal(jax.jit(mem.init, static_argnums=1)(EXAMPLE, MAX_CAPACITY, 5), state)


@pytest.mark.parametrize(("name", "value"), [("priority_exponent", jnp.array([0.1, 1.0, 2.0, 3.0])),
                                             ("importance_exponent", [0.5, 0.5]), ("priority_floor", np.array([1e-6]))])
def test_an_array_hyperparameter_is_refused_naming_it(name, value):
    """An array exponent was accepted: a batch of 4 replayed with 4 different α, silently (the same |δ| = 4
    stored 1.15, 4, 16 and 64), a batch of 3 failed in a broadcast naming nothing (found by a probe)."""
    with pytest.raises(ValueError, match=rf"^{name} must be a scalar \(one number\), got shape \(\d,\)"):
        memory.make("prioritized", **{name: value})


def test_a_floor_that_runs_as_zero_is_refused():
    """priority_floor 1e-40 ran as 0 (a subnormal float32 is flushed), so a transition without TD error was never
    replayed, against update_priorities' promise (found by a probe)."""
    with pytest.raises(ValueError, match=r"^priority_floor = 1e-40 does not fit a float32 .* it would run as 0"):
        memory.make("prioritized", priority_floor=1e-40)
    assert memory.make("prioritized", priority_floor=0.0) is not None
