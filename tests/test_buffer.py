"""The ring buffer against a plain-Python deque model, under jit and vmap."""

from __future__ import annotations

import collections
import copy

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from jaxreplay import buffer, samplers

MAX_CAPACITY = 8
BATCH = 3  # the add_batch size used by the property test (one compiled shape)
EXAMPLE = {"value": jnp.int32(0), "vec": jnp.zeros(2, jnp.float32)}


def _transition(value):
    """A transition whose every leaf encodes ``value`` (so contents can be checked)."""
    value = jnp.asarray(value, jnp.int32)
    return {"value": value, "vec": jnp.stack([value, -value], axis=-1).astype(jnp.float32)}


class DequeModel:
    """The reference: a FIFO of (value, insertion index) with a logical capacity."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.items = collections.deque()
        self.total_added = 0

    def add(self, value):
        self.items.append((value, self.total_added))
        self.total_added += 1
        while len(self.items) > self.capacity:
            self.items.popleft()

    def resize(self, capacity):
        self.capacity = capacity
        while len(self.items) > capacity:
            self.items.popleft()


# Operation codes for one jitted, switch-based step: a single compilation serves
# every sequence hypothesis generates. NOOP pads a sequence to MAX_OPERATIONS.
ADD, ADD_BATCH, RESIZE, NOOP = 0, 1, 2, 3
MAX_OPERATIONS = 25


def _apply(state, code, value, batch_values, new_capacity):
    return jax.lax.switch(
        code,
        [
            lambda s: buffer.add(s, _transition(value)),
            lambda s: buffer.add_batch(s, _transition(batch_values)),
            lambda s: buffer.resize(s, new_capacity),
            lambda s: s,
        ],
        state,
    )


@jax.jit
def _read(state, key):
    contents, valid = buffer.in_age_order(state)
    oldest, oldest_valid = buffer.oldest_indices(state, 3)
    newest, newest_valid = buffer.newest_indices(state, 2)
    sample = samplers.uniform(key, state, 16)
    return {
        "values": contents["value"],
        "vec": contents["vec"],
        "valid": valid,
        "ages_in_order": buffer.ages(state, buffer.slot_of(state, jnp.arange(MAX_CAPACITY))),
        "mask": buffer.valid_mask(state),
        "oldest": buffer.get(state, oldest)["value"],
        "oldest_valid": oldest_valid,
        "newest": buffer.get(state, newest)["value"],
        "newest_valid": newest_valid,
        "newest_index_value": buffer.get(state, buffer.newest_index(state))["value"],
        "sample_live": buffer.valid_mask(state)[sample.indices],
        "sample_values": buffer.get(state, sample.indices)["value"],
        "size": state.size,
        "capacity": state.capacity,
        "full": buffer.is_full(state),
        "total_added": state.total_added,
    }


@jax.jit
def _apply_and_read_all(state, key, codes, values, batch_values, capacities):
    """What :func:`_read` sees before the operations and after each: one scan, so a hypothesis example costs one
    dispatch, not two per operation (the read keys split as a host loop would split them)."""

    def step(carry, operation):
        state, key = carry
        state = _apply(state, *operation)
        key, read_key = jax.random.split(key)
        return (state, key), _read(state, read_key)

    first = _read(state, key)
    (state, _), reads = jax.lax.scan(step, (state, key), (codes, values, batch_values, capacities))
    return first, reads, state.capacity_clipped


def _assert_read_matches(got, model):
    values = [v for v, _ in model.items]
    n = len(values)
    assert got["size"] == n
    assert got["capacity"] == model.capacity
    assert got["total_added"] == model.total_added
    assert bool(got["full"]) == (n == model.capacity)
    assert got["values"][:n].tolist() == values
    np.testing.assert_array_equal(got["vec"][:n], np.stack([values, [-v for v in values]], -1).reshape(n, 2))
    assert got["valid"].tolist() == [j < n for j in range(MAX_CAPACITY)]
    assert int(got["mask"].sum()) == n
    ages = [model.total_added - 1 - inserted for _, inserted in model.items]
    assert got["ages_in_order"][:n].tolist() == ages
    assert got["oldest"][got["oldest_valid"]].tolist() == values[:3]
    assert got["newest"][got["newest_valid"]].tolist() == values[::-1][:2]
    if n:
        assert got["newest_index_value"] == values[-1]
        assert got["sample_live"].all()
        assert set(got["sample_values"].tolist()) <= set(values)


operation = st.one_of(
    st.tuples(st.just(ADD), st.integers(0, 10_000)),
    st.tuples(st.just(ADD_BATCH), st.lists(st.integers(0, 10_000), min_size=BATCH, max_size=BATCH)),
    st.tuples(st.just(RESIZE), st.integers(1, MAX_CAPACITY)),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(1, MAX_CAPACITY),
    operations=st.lists(operation, max_size=MAX_OPERATIONS),
    seed=st.integers(0, 2**31 - 1),
)
def test_matches_deque_model(capacity, operations, seed):
    codes = np.full(MAX_OPERATIONS, NOOP, np.int32)
    values = np.zeros(MAX_OPERATIONS, np.int32)
    batch_values = np.zeros((MAX_OPERATIONS, BATCH), np.int32)
    capacities = np.ones(MAX_OPERATIONS, np.int32)
    model = DequeModel(capacity)
    models = []  # the model after each operation
    for i, (code, argument) in enumerate(operations):
        codes[i] = code
        if code == ADD:
            values[i] = argument
            model.add(argument)
        elif code == ADD_BATCH:
            batch_values[i] = argument
            for v in argument:
                model.add(v)
        else:
            capacities[i] = argument
            model.resize(argument)
        models.append(copy.deepcopy(model))
    state = buffer.init(EXAMPLE, MAX_CAPACITY, capacity)
    first, reads, clipped = jax.device_get(
        _apply_and_read_all(state, jax.random.key(seed), codes, values, batch_values, capacities)
    )
    _assert_read_matches(first, DequeModel(capacity))
    for i, model_after in enumerate(models):
        _assert_read_matches({name: read[i] for name, read in reads.items()}, model_after)
    assert not bool(clipped)


def test_add_batch_larger_than_max_capacity_keeps_the_last_ones():
    state = buffer.init(EXAMPLE, MAX_CAPACITY, 5)
    state = buffer.add(state, _transition(-1))
    state = buffer.add_batch(state, _transition(jnp.arange(20)))
    contents, valid = buffer.in_age_order(state)
    assert contents["value"][valid].tolist() == [15, 16, 17, 18, 19]
    assert int(state.total_added) == 21
    assert buffer.ages(state, buffer.newest_index(state)) == 0
    # The insertion counter continues from the adds that were skipped.
    assert state.insertion_index[buffer.newest_index(state)] == 20


def test_growing_never_brings_forgotten_transitions_back():
    state = buffer.init(EXAMPLE, MAX_CAPACITY, 6)
    state = buffer.add_batch(state, _transition(jnp.arange(6)))
    state = buffer.resize(state, 2)
    state = buffer.resize(state, MAX_CAPACITY)
    assert int(state.size) == 2
    state = buffer.add(state, _transition(100))
    contents, valid = buffer.in_age_order(state)
    assert contents["value"][valid].tolist() == [4, 5, 100]


def _scripted_run(capacity, values):
    """A fixed sequence of adds, batch adds and capacity-relative resizes."""
    _scripted_run.traces += 1
    state = buffer.init(EXAMPLE, MAX_CAPACITY, capacity)
    state = buffer.add_batch(state, _transition(values[:5]))
    state = buffer.resize(state, jnp.maximum(capacity - 2, 1))
    for v in values[5:9]:
        state = buffer.add(state, _transition(v))
    state = buffer.resize(state, capacity + 1)  # clipped (and flagged) when capacity = MAX_CAPACITY
    state = buffer.add_batch(state, _transition(values[9:12]))
    contents, valid = buffer.in_age_order(state)
    return state, jnp.where(valid, contents["value"], -1)


_scripted_run.traces = 0


def test_vmap_over_capacity_equals_unbatched_with_one_trace():
    values = jnp.arange(100, 112)
    capacities = jnp.arange(1, MAX_CAPACITY + 1)
    batched = jax.jit(jax.vmap(_scripted_run, in_axes=(0, None)))
    states, contents = batched(capacities, values)
    states2, contents2 = batched(capacities[::-1], values + 1)  # same shape: no retrace
    assert _scripted_run.traces == 1
    single = jax.jit(_scripted_run)
    for i, c in enumerate(capacities.tolist()):
        state, content = single(c, values)
        jax.tree.map(np.testing.assert_array_equal, jax.tree.map(lambda x: x[i], states), state)
        np.testing.assert_array_equal(contents[i], content)
        # and against the deque model
        model = DequeModel(c)
        for v in range(100, 105):
            model.add(v)
        model.resize(max(c - 2, 1))
        for v in range(105, 109):
            model.add(v)
        model.resize(min(c + 1, MAX_CAPACITY))
        for v in range(109, 112):
            model.add(v)
        assert content[: len(model.items)].tolist() == [v for v, _ in model.items]
        assert bool(state.capacity_clipped) == (c == MAX_CAPACITY)
    # Reversed capacities and shifted values: the same windows, values + 1.
    np.testing.assert_array_equal(contents2[::-1], jnp.where(contents >= 0, contents + 1, -1))


def test_traced_capacity_outside_range_is_clipped_and_flagged():
    state = jax.jit(lambda c: buffer.init(EXAMPLE, MAX_CAPACITY, c))(0)
    assert int(state.capacity) == 1 and bool(state.capacity_clipped)
    state = jax.jit(buffer.resize)(state, 50)
    assert int(state.capacity) == MAX_CAPACITY and bool(state.capacity_clipped)
    state = jax.jit(buffer.resize)(state, 3)
    assert bool(state.capacity_clipped), "the flag is sticky"


def _add_values(state, values):
    for v in values:
        state = buffer.add(state, {"value": jnp.int32(v), "vec": jnp.zeros(2, jnp.float32)})
    return state


def test_traced_nan_capacity_keeps_a_usable_memory_and_is_flagged():
    nan = jnp.float32(jnp.nan)
    # init: NaN gives max_capacity (the default), flagged; not 0 (int32(NaN) on CPU).
    state = jax.jit(lambda c: buffer.init(EXAMPLE, MAX_CAPACITY, c))(nan)
    assert int(state.capacity) == MAX_CAPACITY and bool(state.capacity_clipped)
    state = _add_values(state, range(3))
    assert int(state.size) == 3
    # resize: NaN keeps the capacity and forgets nothing, flagged.
    state = _add_values(jax.jit(buffer.resize)(buffer.init(EXAMPLE, MAX_CAPACITY, 5), 5), range(7))
    assert not bool(state.capacity_clipped)
    kept = jax.jit(buffer.resize)(state, nan)
    assert (int(kept.capacity), int(kept.size), bool(kept.capacity_clipped)) == (5, 5, True)
    transitions, valid = buffer.in_age_order(_add_values(kept, [7]))
    assert np.asarray(transitions["value"])[np.asarray(valid)].tolist() == [3, 4, 5, 6, 7]
    # Fractional and infinite traced capacities are flagged too.
    for value, capacity in ((2.5, 2), (np.inf, MAX_CAPACITY), (-np.inf, 1)):
        resized = jax.jit(buffer.resize)(state, jnp.float32(value))
        assert (int(resized.capacity), bool(resized.capacity_clipped)) == (capacity, True), value


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: buffer.init(EXAMPLE, MAX_CAPACITY, 0), "capacity"),
        (lambda: buffer.init(EXAMPLE, MAX_CAPACITY, MAX_CAPACITY + 1), "capacity"),
        (lambda: buffer.init(EXAMPLE, MAX_CAPACITY, 2.5), "capacity"),
        (lambda: buffer.init(EXAMPLE, 0), "max_capacity"),
        (lambda: buffer.init(EXAMPLE, 4.0), "max_capacity"),
        (lambda: buffer.init(EXAMPLE, jnp.int32(4)), "max_capacity"),
        (lambda: buffer.init({}, 4), "example"),
        (lambda: buffer.resize(buffer.init(EXAMPLE, 4), 5), "new_capacity"),
        (lambda: buffer.resize(buffer.init(EXAMPLE, 4), 0), "new_capacity"),
        (lambda: buffer.resize(buffer.init(EXAMPLE, 4), np.array([1, 9])), "new_capacity"),
        (lambda: buffer.add(buffer.init(EXAMPLE, 4), {"value": 1}), "structure"),
        (lambda: buffer.add(buffer.init(EXAMPLE, 4), {"value": 1, "vec": jnp.zeros(3)}), "vec"),
        (lambda: buffer.add(buffer.init(EXAMPLE, 4), {"value": 1.5, "vec": jnp.zeros(2)}), "value"),
        (lambda: buffer.add_batch(buffer.init(EXAMPLE, 4), _transition(3)), "batch axis"),
        (
            lambda: buffer.add_batch(buffer.init(EXAMPLE, 4), {"value": jnp.zeros(2, jnp.int32), "vec": jnp.zeros((3, 2))}),
            "batch sizes",
        ),
        (lambda: buffer.oldest_indices(buffer.init(EXAMPLE, 4), 5), "num"),
        (lambda: jax.jit(lambda n: buffer.oldest_indices(buffer.init(EXAMPLE, 4), n))(2), "max_num"),
        (lambda: samplers.uniform(jax.random.key(0), buffer.init(EXAMPLE, 4), 0), "batch_size"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_traced_num_with_max_num():
    state = buffer.add_batch(buffer.init(EXAMPLE, MAX_CAPACITY, 6), _transition(jnp.arange(10)))
    indices, valid = jax.jit(lambda s, n: buffer.oldest_indices(s, n, max_num=5))(state, 2)
    assert buffer.get(state, indices)["value"].tolist() == [4, 5, 6, 7, 8]
    assert valid.tolist() == [True, True, False, False, False]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16])
def test_a_capacity_of_a_narrow_integer_type_runs_as_itself(dtype):
    """The clip computed in the value's own type, whose bound wrapped: uint8 200 under max_capacity 300 ran as
    44, flagged as if 200 were outside [1, 300]; uint16 5000 under 70000 ran as 4464 (found by a probe)."""
    example = {"x": jnp.zeros(())}
    state = buffer.init(example, 300, dtype(100))
    assert (int(state.capacity), bool(state.capacity_clipped)) == (100, False)
    assert int(buffer.resize(state, dtype(120)).capacity) == 120
    sizes = jnp.asarray([1000, 5000, 60000] if np.iinfo(dtype).max > 60000 else [10, 50, 100], dtype)
    big = jax.vmap(lambda c: buffer.init(example, 70000, c))(sizes)
    assert big.capacity.tolist() == sizes.tolist() and not big.capacity_clipped.any()
    # A traced bool is no capacity: it runs as 1, flagged.
    flagged = jax.jit(lambda c: buffer.init(example, 8, c))(jnp.bool_(True))
    assert (int(flagged.capacity), bool(flagged.capacity_clipped)) == (1, True)


@pytest.mark.parametrize("capacity", [[2], np.array([2, 3]), jnp.array([4])])
def test_a_capacity_must_be_one_number(capacity):
    """An array capacity was accepted and failed far away ('Cannot concatenate arrays ...' in a sampler)."""
    with pytest.raises(ValueError, match=r"^capacity must be a scalar \(one number\), got shape \(\d,\)"):
        buffer.init({"x": jnp.zeros(())}, 8, capacity)
    state = buffer.init({"x": jnp.zeros(())}, 8)
    with pytest.raises(ValueError, match=r"^new_capacity must be a scalar"):
        buffer.resize(state, capacity)


def test_a_transition_is_stored_as_itself_or_refused():
    """Same-kind casts wrapped silently: int32 300 into an int8 leaf was stored as 44, float32 7e4 into float16
    as inf, while a Python 3 into uint8 (which fits) was refused (found by a probe)."""
    example = {"a": jnp.zeros((), jnp.int8), "u": jnp.zeros((), jnp.uint8), "h": jnp.zeros((), jnp.float16),
               "o": jnp.zeros(2, jnp.float32)}
    state = buffer.init(example, 4)
    fine = {"a": jnp.int8(1), "u": np.uint8(1), "h": jnp.float16(1), "o": jnp.zeros(2)}

    def stored(**given):
        return {k: v[0].tolist() for k, v in buffer.add(state, {**fine, **given}).storage.items()}

    # Values that fit are stored as themselves, whatever their type (floats round as float32 rounds them).
    assert stored(a=3, u=200, h=0.5, o=np.array([0.1, 2.0]))["u"] == 200
    assert stored(a=np.int64(-128))["a"] == -128 and stored(o=jnp.array([1, 2]))["o"] == [1.0, 2.0]
    for given, message in (
        ({"a": jnp.int32(300)}, r"transition leaf \['a'\] has dtype int32 and values outside what int8 holds"),
        ({"u": -1}, r"transition leaf \['u'\] has dtype int32 and values outside what uint8 holds"),
        ({"h": np.float32(7e4)}, r"\['h'\] has dtype float32 and values outside what float16 holds"),
        ({"a": 1.0}, r"\['a'\] has dtype float32, which cannot be stored as int8 without changing its kind"),
    ):
        with pytest.raises(ValueError, match=message):
            buffer.add(state, {**fine, **given})
    # A traced value whose type does not fit is refused (its values are unknown); cast, it is stored.
    with pytest.raises(ValueError, match=r"has dtype int32, whose values may fall outside what int8 holds .* "
                                         r"cast it first \(e\.g\. \.astype\(jnp\.int8\)\)"):
        jax.jit(lambda x: buffer.add(state, {**fine, "a": x}))(jnp.int32(3))
    assert jax.jit(lambda x: buffer.add(state, {**fine, "a": x.astype(jnp.int8)}).storage["a"][0])(jnp.int32(3)) == 3
    # Traced integers into a float leaf only round, as concrete ones do (they were refused as "would wrap or
    # overflow", which an int32 in float32 cannot: a probe); into float16, whose range is smaller, they can.
    o = jax.jit(lambda x: buffer.add(state, {**fine, "o": x}).storage["o"][0])(jnp.array([3, 2**24 + 1], jnp.int32))
    assert o.dtype == jnp.float32 and o.tolist() == [3.0, 2.0**24]
    with pytest.raises(ValueError, match=r"has dtype int32, whose values may fall outside what float16 holds"):
        jax.jit(lambda x: buffer.add(state, {**fine, "h": x}))(jnp.int32(3))
    with pytest.raises(ValueError, match=r"values outside what int8 holds"):
        buffer.add_batch(state, {k: jnp.stack([v, v]) for k, v in {**fine, "a": jnp.int32(300)}.items()})


def test_bfloat16_is_a_float_kind_for_storage_and_checks():
    """NumPy gives ml_dtypes' bfloat16 the kind "V": float32 0.5 into a bfloat16 leaf, bfloat16 into a float32
    one, and a bfloat16 exponent or TD error were refused as "changing its kind" or "not a real number"
    (found by a probe). It now goes where float16 goes."""
    from jaxreplay import memory, prioritized

    half = buffer.init({"obs": jnp.zeros(3, jnp.bfloat16)}, 4)
    stored = buffer.add(half, {"obs": jnp.full(3, 0.5, jnp.float32)}).storage["obs"]
    assert stored.dtype == jnp.bfloat16 and stored[0].tolist() == [0.5] * 3
    with pytest.raises(ValueError, match=r"has dtype float32 and values outside what bfloat16 holds"):
        buffer.add(half, {"obs": jnp.full(3, 3.4e38, jnp.float32)})  # rounds to inf in bfloat16
    wide = buffer.init({"obs": jnp.zeros(3, jnp.float32)}, 4)
    assert jax.jit(buffer.add)(wide, {"obs": jnp.full(3, 0.5, jnp.bfloat16)}).storage["obs"][0].tolist() == [0.5] * 3
    replay = memory.make("prioritized", importance_exponent=jnp.bfloat16(0.5))
    state = replay.add(replay.init({"x": jnp.float32(0)}, 4, 4), {"x": jnp.float32(1)})
    state = replay.update(state, jnp.array([0]), jnp.array([2.0], jnp.bfloat16))
    np.testing.assert_allclose(prioritized.priorities(state)[0], 2.0 + 1e-6, rtol=1e-6)  # the defaults: α = 1, ε = 1e-6
    with pytest.raises(ValueError, match="importance_exponent must be >= 0"):
        memory.make("prioritized", importance_exponent=jnp.bfloat16(-0.5))
