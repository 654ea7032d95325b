"""Stored-priority replay: exact probabilities, chi-square sampling, weights, a drift-free sum tree.

Every jitted function is built once at module level and used with a few
fixed shapes (the values vary, not the shapes), so the file compiles a
handful of programs. Seeds are fixed: the chi-square tests are deterministic
and ``P_VALUE`` only sets how strict they are.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from jaxreplay import buffer, prioritized

P_VALUE = 1e-3
ALPHA = 0.7
FLOOR = 1e-6

# Distribution tests: 300 slots -> a 512-leaf tree, 9 levels, so draws use
# two uniform numbers (levels 0-7 and 8): both blocks of the descent are hit.
M = 300
CHUNK = 50  # add_batch size used to fill memories
DRAWS_PER_KEY = 1000
KEYS = 200  # 200 000 draws per chi-square test

_add = jax.jit(prioritized.add)
_add_batch = jax.jit(prioritized.add_batch)
_update = jax.jit(prioritized.update_priorities)
_resize = jax.jit(prioritized.resize)
_probabilities = jax.jit(prioritized.probabilities)
_sample = jax.jit(prioritized.sample, static_argnums=2)


@jax.jit
def _many_draws(key, state, beta):
    draw = lambda k: prioritized.sample(k, state, DRAWS_PER_KEY, beta)
    return jax.vmap(draw)(jax.random.split(key, KEYS))


def _priority(td_errors, alpha=ALPHA, floor=FLOOR):
    """The documented priority, in float64 NumPy."""
    return (np.abs(np.asarray(td_errors, np.float64)) + floor) ** alpha


def _assert_tree_invariant(state):
    """Every internal node is exactly the float32 sum of its children; padding is 0."""
    tree = np.asarray(state.sum_tree)
    assert tree.dtype == np.float32
    half = tree.shape[0] // 2
    np.testing.assert_array_equal(tree[1:half], tree[2::2] + tree[3::2])
    assert tree[0] == 0.0
    assert np.all(tree[half + state.max_capacity :] == 0.0)


def _live_slots(total_added, size, max_capacity):
    """Live slots, computed independently of the library: the `size` newest writes."""
    return {(total_added - 1 - j) % max_capacity for j in range(size)}


def _fill(state, count, start=0):
    for first in range(start, start + count, CHUNK):
        state = _add_batch(state, jnp.arange(first, first + CHUNK, dtype=jnp.float32))
    return state


def _chi_square(state, expected, seed):
    """Draw 200 000 times; slots with expected probability 0 are never drawn; chi-square on the rest."""
    indices = np.asarray(_many_draws(jax.random.key(seed), state, 0.5).indices).ravel()
    counts = np.bincount(indices, minlength=M)
    support = expected > 0
    assert counts[~support].sum() == 0, "a slot of probability 0 was drawn"
    f_exp = expected[support] / expected[support].sum() * counts.sum()
    assert f_exp.min() > 50  # the chi-square approximation holds
    p_value = stats.chisquare(counts[support], f_exp).pvalue
    assert p_value > P_VALUE, p_value


# ----------------------------------------------------------------------------
# Scenarios (built once; each is a state plus the exact probabilities in NumPy)


def _scenarios():
    rng = np.random.default_rng(0)
    td = rng.uniform(0.2, 3.0, size=M).astype(np.float32) * rng.choice([-1, 1], size=M)
    p = _priority(td)

    # Wrapped: 450 adds into 300 slots with capacity 200: live window straddles the ring's end.
    state = _fill(prioritized.init(jnp.float32(0), M, 200), 450)
    state = _update(state, jnp.arange(M), jnp.asarray(td), ALPHA)  # non-live slots are ignored
    live = np.zeros(M, bool)
    live[list(_live_slots(450, 200, M))] = True
    wrapped = (state, np.where(live, p, 0.0))

    # Shrunk to 120: the 80 oldest are forgotten.
    shrunk_state = _resize(state, 120)
    live_shrunk = np.zeros(M, bool)
    live_shrunk[list(_live_slots(450, 120, M))] = True
    shrunk = (shrunk_state, np.where(live_shrunk, p, 0.0))

    # Grown to 300, then 100 adds: the new ones get max_priority, the forgotten stay 0.
    grown_state = _fill(_resize(shrunk_state, M), 100, start=450)
    max_p = p[live].max()
    new_slots = [(450 + j) % M for j in range(100)]
    expected = np.where(live_shrunk, p, 0.0)
    expected[new_slots] = max_p
    grown = (grown_state, expected)
    return {"wrapped": wrapped, "shrunk": shrunk, "grown": grown}, max_p


SCENARIOS, MAX_P = _scenarios()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_probabilities_are_exact(name):
    state, expected = SCENARIOS[name]
    probs = np.asarray(_probabilities(state))
    assert probs.dtype == np.float32 and probs.shape == (M,)
    # Forgotten and never-written slots: exactly 0.
    np.testing.assert_array_equal(probs[expected == 0], 0.0)
    np.testing.assert_allclose(probs, expected / expected.sum(), rtol=2e-6, atol=0)
    np.testing.assert_allclose(np.asarray(prioritized.priorities(state)), expected, rtol=2e-6)
    _assert_tree_invariant(state)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_sample_matches_probabilities_chi_square(name):
    state, expected = SCENARIOS[name]
    _chi_square(state, expected, seed=sorted(SCENARIOS).index(name))


def test_grown_memory_gives_new_transitions_max_priority():
    state, _ = SCENARIOS["grown"]
    assert float(state.max_priority) == pytest.approx(MAX_P, rel=1e-6)
    leaves = np.asarray(prioritized.priorities(state))
    new_slots = [(450 + j) % M for j in range(100)]
    np.testing.assert_array_equal(leaves[new_slots], np.float32(state.max_priority))


def test_sample_probabilities_and_weights():
    state, expected = SCENARIOS["wrapped"]
    exact = expected / expected.sum()
    size = int(state.buffer.size)
    probs = np.asarray(_probabilities(state))
    for beta in (0.0, 0.4, 1.0):
        sample = _sample(jax.random.key(7), state, 256, beta)
        idx = np.asarray(sample.indices)
        assert sample.indices.dtype == jnp.int32 and sample.weights.dtype == jnp.float32
        # Reported probabilities are probabilities() at the drawn slots, bit for bit.
        np.testing.assert_array_equal(np.asarray(sample.probabilities), probs[idx])
        w = (size * exact[idx]) ** -beta
        np.testing.assert_allclose(np.asarray(sample.weights), w / w.max(), rtol=1e-5)
        assert np.asarray(sample.weights).max() == pytest.approx(1.0, abs=1e-6)


# ----------------------------------------------------------------------------
# Semantics on a small memory

S = 8  # slots


def _small(capacity=S, adds=0):
    state = prioritized.init(jnp.float32(0), S, capacity)
    for i in range(adds):
        state = _add(state, jnp.float32(i))
    return state


def _leaves(state):
    return np.asarray(prioritized.priorities(state))


def test_new_transitions_get_max_priority_and_max_is_running():
    state = _small(adds=5)
    np.testing.assert_array_equal(_leaves(state), [1, 1, 1, 1, 1, 0, 0, 0])
    assert float(state.max_priority) == 1.0

    state = _update(state, jnp.array([0, 1, 2, 3]), jnp.array([3.0, 0.5, -8.0, 0.0]), 1.0)
    assert float(state.max_priority) == pytest.approx(8.0 + FLOOR)
    state = _add(state, jnp.float32(5))
    assert _leaves(state)[5] == np.float32(state.max_priority)

    # Lower priorities never lower max_priority (running max, Schaul et al.).
    state = _update(state, jnp.array([0, 1, 2, 3]), jnp.array([0.1, 0.1, 0.1, 0.1]), 1.0)
    assert float(state.max_priority) == pytest.approx(8.0 + FLOOR)
    state = _update(state, jnp.array([4, 4, 4, 4]), jnp.array([1.0, 20.0, 2.0, 3.0]), 1.0)
    assert float(state.max_priority) == pytest.approx(20.0 + FLOOR)
    _assert_tree_invariant(state)


def test_full_memory_overwrites_the_oldest_priority():
    state = _small(adds=S)
    state = _update(state, jnp.array([0, 1, 2, 3]), jnp.array([0.0, 9.0, 0.0, 0.0]), 1.0)
    # Slot 0 (priority ~1e-6, the oldest) is overwritten by a new transition at max_priority.
    state = _add(state, jnp.float32(100))
    leaves = _leaves(state)
    assert leaves[0] == np.float32(state.max_priority) == np.float32(9.0 + FLOOR)
    assert float(prioritized.total_priority(state)) == pytest.approx(leaves.sum(), rel=1e-6)
    _assert_tree_invariant(state)


def test_capacity_below_max_forgets_the_oldest_slot():
    state = _small(capacity=3, adds=5)  # live: slots 2, 3, 4
    np.testing.assert_array_equal(_leaves(state), [0, 0, 1, 1, 1, 0, 0, 0])
    _assert_tree_invariant(state)


def test_update_duplicates_take_the_largest_and_non_live_are_ignored():
    state = _small(capacity=4, adds=6)  # live: slots 2..5
    state = _update(state, jnp.array([3, 3, 0, 7]), jnp.array([1.0, 5.0, 9.0, 9.0]), 1.0)
    leaves = _leaves(state)
    assert leaves[3] == np.float32(5.0 + FLOOR)
    assert leaves[0] == 0.0 and leaves[7] == 0.0  # forgotten / never written: not revived
    assert float(state.max_priority) == pytest.approx(5.0 + FLOOR)  # ignored updates don't count
    # Traced out-of-range indices are ignored too.
    before = np.asarray(state.sum_tree)
    state = _update(state, jnp.array([-1, 8, 100, 2**30]), jnp.ones(4), 1.0)
    np.testing.assert_array_equal(np.asarray(state.sum_tree), before)


def test_update_nan_gets_max_priority_and_inf_is_clipped():
    state = _small(adds=4)
    state = _update(state, jnp.array([0, 1, 2, 3]), jnp.array([jnp.nan, 2.0, jnp.inf, 0.0]), 1.0)
    leaves = _leaves(state)
    assert leaves[0] == 1.0  # max_priority before the update
    assert np.isfinite(leaves).all() and np.isfinite(float(prioritized.total_priority(state)))
    assert leaves[2] == np.float32(2.0**100 / S)  # the ceiling: S leaves of it sum to 2^100
    _assert_tree_invariant(state)


@pytest.mark.parametrize("td_error, alpha", [(np.inf, 1.0), (1e30, 2.0), (1e10, 4.0)])
def test_saturated_priorities_keep_probabilities_and_weights_positive(td_error, alpha):
    # Every priority at the ceiling: the total stays finite with a normal reciprocal, so
    # P(i) = 1/4 and the weights are 1 (before, the total was 1.7e38 and all were 0).
    state = _update(_small(adds=4), jnp.arange(4), jnp.full(4, td_error, jnp.float32), alpha)
    assert float(prioritized.total_priority(state)) == 4 * 2.0**100 / S
    np.testing.assert_array_equal(np.asarray(_probabilities(state)), [0.25] * 4 + [0.0] * 4)
    sample = _sample(jax.random.key(0), state, 64, 1.0)
    np.testing.assert_array_equal(np.asarray(sample.probabilities), 0.25)
    np.testing.assert_array_equal(np.asarray(sample.weights), 1.0)
    # One saturated slot among ordinary ones: exact probabilities, positive weights.
    mixed = _update(_small(adds=4), jnp.arange(4), jnp.array([td_error, 1.0, 1.0, 1.0], jnp.float32), alpha)
    p = np.asarray(_probabilities(mixed), np.float64)
    assert p.sum() == pytest.approx(1.0, rel=1e-6) and p[0] == pytest.approx(1.0, rel=1e-6) and (p[1:4] > 0).all()
    weights = np.asarray(_sample(jax.random.key(1), mixed, 64, 1.0).weights)
    assert ((weights > 0) & (weights <= 1)).all()


@pytest.mark.parametrize("alpha, floor", [(np.nan, FLOOR), (-1.0, FLOOR), (np.inf, FLOOR), (ALPHA, np.nan),
                                          (ALPHA, -1.0), (ALPHA, np.inf),
                                          # Ran as others, unflagged (a probe): a subnormal runs as 0, and ε^α
                                          # below the smallest normal stored 0 for a TD error of 0.
                                          (1e-40, FLOOR), (ALPHA, 1e-40), (2.0, 1e-20)])
def test_traced_invalid_priority_parameters_are_flagged_and_ignored(alpha, floor):
    state = _update(_small(adds=4), jnp.arange(4), jnp.array([0.5, 2.0, 3.0, 0.1]), ALPHA)
    assert not bool(state.invalid_parameters)
    before = np.asarray(state.sum_tree)
    bad = _update(state, jnp.arange(4), jnp.array([7.0, 7.0, 7.0, 7.0]), alpha, floor)
    # Not "every priority reset to max_priority": the update is a no-op, and flagged.
    np.testing.assert_array_equal(np.asarray(bad.sum_tree), before)
    assert float(bad.max_priority) == float(state.max_priority) and bool(bad.invalid_parameters)
    later = _update(_add(bad, jnp.float32(9)), jnp.array([0]), jnp.array([1.0]), ALPHA)
    assert bool(later.invalid_parameters), "the flag is sticky"
    assert _leaves(later)[0] == np.float32(_priority(1.0))  # valid updates still apply


def test_a_nan_td_error_stores_max_priority_even_at_alpha_zero_and_concrete_settings_must_fit_float32():
    """NaN^0 is 1: at α = 0 a NaN TD error stored 1, not max_priority as documented; and the direct calls took
    concrete settings that run as inf or 0 in float32, which memory.make refuses (a probe)."""
    from jaxreplay import memory, samplers

    state = _update(_small(adds=4), jnp.arange(4), jnp.array([9.0, 1.0, 1.0, 1.0]), 1.0, 0.0)
    assert float(state.max_priority) == 9.0
    later = _update(state, jnp.arange(2, 4), jnp.array([np.nan, 2.0]), 0.0, FLOOR)
    np.testing.assert_array_equal(_leaves(later)[:4], [9.0, 1.0, 9.0, 1.0])
    # Concrete: refused before tracing, naming the setting.
    td = jnp.zeros(S)
    calls = {
        "importance_exponent = 1e+39": lambda: prioritized.sample(jax.random.key(0), state, 4, 1e39),
        "priority_exponent = 1e+39": lambda: prioritized.update_priorities(state, jnp.arange(2), jnp.ones(2), 1e39),
        "priority_floor = 1e-40": lambda: prioritized.update_priorities(state, jnp.arange(2), jnp.ones(2), 1.0, 1e-40),
        "priority_floor = 1e-20 raised to priority_exponent = 2 is 1e-40": lambda: prioritized.update_priorities(
            state, jnp.arange(2), jnp.ones(2), 2.0, 1e-20),
        "error_floor = 1e+39": lambda: samplers.exact_priorities(state.buffer, td, 1.0, 1e39),
        "importance_exponent = 1e-40": lambda: samplers.exact_prioritized(
            jax.random.key(0), state.buffer, td, 4, 1.0, importance_exponent=1e-40),
        "priority_floor = 1e-20 raised": lambda: memory.make("prioritized", priority_floor=1e-20, priority_exponent=2),
    }
    for message, call in calls.items():
        with pytest.raises(ValueError, match=message.replace("+", r"\+")):
            call()
    memory.make("prioritized", priority_floor=1e-20, priority_exponent=1.0)  # 1e-20 itself is a normal float32


@pytest.mark.parametrize("beta", [np.nan, -0.5, np.inf])
def test_traced_invalid_importance_exponent_gives_nan_weights(beta):
    state = _update(_small(adds=4), jnp.arange(4), jnp.array([0.5, 2.0, 3.0, 0.1]), ALPHA)
    sample = _sample(jax.random.key(0), state, 64, beta)
    assert np.isnan(np.asarray(sample.weights)).all()  # not inverted (> 1) or 0: loud
    np.testing.assert_array_equal(np.asarray(sample.probabilities),
                                  np.asarray(_probabilities(state))[np.asarray(sample.indices)])


def test_priority_floor_is_added_where_the_exact_samplers_error_floor_clamps():
    # One meaning per name: stored priorities are (|δ| + priority_floor)^α; pER counts |δ| as max(|δ|, error_floor).
    from jaxreplay import samplers

    state = _small(adds=4)
    td = np.array([0.0, 0.05, 0.3, 2.0], np.float32)
    stored = _leaves(prioritized.update_priorities(state, jnp.arange(4), jnp.asarray(td), 1.0, priority_floor=0.1))
    np.testing.assert_allclose(stored[:4], [0.1, 0.15, 0.4, 2.1], rtol=1e-6)
    errors = jnp.zeros(state.buffer.max_capacity).at[:4].set(td)
    exact = np.asarray(samplers.exact_priorities(state.buffer, errors, 1.0, error_floor=0.1))
    np.testing.assert_allclose(exact[:4], np.array([0.1, 0.1, 0.3, 2.0]) / 2.5, rtol=1e-6)

def test_priority_formula_and_alpha_zero():
    state = _small(adds=4)
    td = np.array([0.0, 0.3, -2.0, 7.5], np.float32)
    for alpha in (0.0, 0.5, 1.0, 2.0):
        leaves = _leaves(_update(state, jnp.arange(4), jnp.asarray(td), alpha))
        np.testing.assert_allclose(leaves[:4], _priority(td, alpha), rtol=1e-6)
    # priority_floor 0 and a zero TD error: priority 0, never drawn.
    s = _update(state, jnp.arange(4), jnp.asarray(td), 1.0, 0.0)
    assert _leaves(s)[0] == 0.0
    idx = np.asarray(_sample(jax.random.key(0), s, 256, 0.0).indices)
    assert 0 not in idx and set(idx) <= {1, 2, 3}


def test_empty_memory_and_all_zero_fallback():
    empty = _small()
    np.testing.assert_array_equal(np.asarray(_probabilities(empty)), 0.0)
    sample = _sample(jax.random.key(0), empty, 256, 0.5)
    np.testing.assert_array_equal(np.asarray(sample.probabilities), 0.0)
    np.testing.assert_array_equal(np.asarray(sample.weights), 0.0)
    same = _update(empty, jnp.arange(4), jnp.ones(4), 1.0)
    np.testing.assert_array_equal(np.asarray(same.sum_tree), np.asarray(empty.sum_tree))

    # Every live priority 0 (floor 0, zero errors): uniform over the live window.
    state = _update(_small(capacity=5, adds=7), jnp.arange(4) + 2, jnp.zeros(4), 1.0, 0.0)
    state = _update(state, jnp.array([6, 6, 6, 6]), jnp.zeros(4), 1.0, 0.0)
    assert float(prioritized.total_priority(state)) == 0.0
    np.testing.assert_allclose(np.asarray(_probabilities(state)), [0, 0, 0.2, 0.2, 0.2, 0.2, 0.2, 0])
    sample = _sample(jax.random.key(1), state, 256, 1.0)
    counts = np.bincount(np.asarray(sample.indices), minlength=S)
    assert counts[[0, 1, 7]].sum() == 0 and counts[2:7].min() > 20
    np.testing.assert_allclose(np.asarray(sample.probabilities), 0.2)
    np.testing.assert_allclose(np.asarray(sample.weights), 1.0)


_add_batch_13 = jax.jit(prioritized.add_batch)


@pytest.mark.parametrize("capacity", [3, 5, 8])
def test_add_batch_equals_repeated_add(capacity):
    start = _update(_small(capacity=capacity, adds=6), jnp.arange(4), jnp.arange(4.0) + 2, 1.0)
    for k in (1, 3, 8):  # k > capacity for some, k == max_capacity
        batched = _add_batch(start, jnp.arange(k, dtype=jnp.float32))
        one_by_one = start
        for i in range(k):
            one_by_one = _add(one_by_one, jnp.float32(i))
        # The tree is a function of its leaves: bit-for-bit equal.
        np.testing.assert_array_equal(np.asarray(batched.sum_tree), np.asarray(one_by_one.sum_tree))
        np.testing.assert_array_equal(
            np.asarray(batched.buffer.storage), np.asarray(one_by_one.buffer.storage)
        )
        _assert_tree_invariant(batched)
    # k > max_capacity: same live transitions and priorities in age order (slot layout differs).
    batched = _add_batch_13(start, jnp.arange(13, dtype=jnp.float32))
    one_by_one = start
    for i in range(13):
        one_by_one = _add(one_by_one, jnp.float32(i))
    for s in (batched, one_by_one):
        _assert_tree_invariant(s)
    order = lambda s: np.asarray(buffer.slot_of(s.buffer, jnp.arange(int(s.buffer.size))))
    stored = lambda s: np.asarray(s.buffer.storage)[order(s)]
    np.testing.assert_array_equal(stored(batched), stored(one_by_one))
    np.testing.assert_array_equal(_leaves(batched)[order(batched)], _leaves(one_by_one)[order(one_by_one)])
    assert _leaves(batched).sum() == pytest.approx(float(batched.max_priority) * capacity)


# ----------------------------------------------------------------------------
# Model-based: random operation sequences against a NumPy model

OPS = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 0)),
    st.tuples(st.just("add3"), st.integers(0, 0)),
    st.tuples(st.just("resize"), st.integers(1, S)),
    st.tuples(
        st.just("update"),
        st.tuples(
            st.lists(st.integers(0, S - 1), min_size=4, max_size=4),
            st.lists(st.floats(-10, 10, width=32), min_size=4, max_size=4),
            st.sampled_from([0.0, 0.5, 1.0]),
        ),
    ),
)


@settings(max_examples=40, deadline=None)
@given(capacity=st.integers(1, S), ops=st.lists(OPS, max_size=14))
def test_against_numpy_model(capacity, ops):
    state = _small(capacity=capacity)
    model = np.zeros(S)  # priority per slot
    max_p = 1.0
    for op, arg in ops:
        if op == "add":
            slots = [int(state.buffer.write_position)]
            state = _add(state, jnp.float32(0))
        elif op == "add3":
            slots = [(int(state.buffer.write_position) + j) % S for j in range(3)]
            state = _add_batch(state, jnp.zeros(3, jnp.float32))
        elif op == "resize":
            slots = []
            state = _resize(state, arg)
        else:
            indices, errors, alpha = arg
            live = np.asarray(buffer.valid_mask(state.buffer))
            p = _priority(np.float32(errors), alpha)
            new = {}
            for i, v in zip(indices, p):
                if live[i]:
                    new[i] = max(new.get(i, 0.0), v)
            for i, v in new.items():
                model[i] = v
                max_p = max(max_p, v)
            slots = []
            state = _update(state, jnp.array(indices), jnp.array(errors, jnp.float32), alpha)
        model[slots] = np.float32(max_p)
        model = np.where(np.asarray(buffer.valid_mask(state.buffer)), model, 0.0)
        np.testing.assert_allclose(_leaves(state), model, rtol=1e-6)
        assert float(state.max_priority) == pytest.approx(max_p, rel=1e-6)
        _assert_tree_invariant(state)


# ----------------------------------------------------------------------------
# No drift: 10**6 float32 updates

DRIFT_SLOTS = 1000
DRIFT_STEPS = 20_000
DRIFT_BATCH = 50


@jax.jit
def _million_updates(key):
    state = prioritized.init(jnp.float32(0), DRIFT_SLOTS)
    state = prioritized.add_batch(state, jnp.zeros(DRIFT_SLOTS, jnp.float32))
    index_key, error_key = jax.random.split(key)
    indices = jax.random.randint(index_key, (DRIFT_STEPS, DRIFT_BATCH), 0, DRIFT_SLOTS)
    # TD errors over 6 orders of magnitude: the regime where delta updates drift.
    errors = jnp.exp(jax.random.uniform(error_key, (DRIFT_STEPS, DRIFT_BATCH), minval=-7.0, maxval=7.0))

    def step(state, batch):
        return prioritized.update_priorities(state, batch[0], batch[1], 0.8), None

    state, _ = jax.lax.scan(step, state, (indices, errors))
    return state


def test_total_does_not_drift_after_a_million_updates():
    state = _million_updates(jax.random.key(0))
    leaves = np.asarray(prioritized.priorities(state), np.float64)
    exact = leaves.sum()
    total = float(prioritized.total_priority(state))
    assert abs(total - exact) / exact < 1e-6, (total, exact)
    _assert_tree_invariant(state)
    # The tree is a function of its leaves: rebuilding it from scratch gives the same bits.
    rebuilt = prioritized._build_tree(jnp.pad(prioritized.priorities(state), (0, 1024 - DRIFT_SLOTS)))
    np.testing.assert_array_equal(np.asarray(rebuilt), np.asarray(state.sum_tree))


# ----------------------------------------------------------------------------
# vmap over capacities (and seeds): one compilation, same results as unbatched

V_SLOTS = 64


def _episode(capacity, key):
    """40 steps of add + sample + update; at step 30 the capacity is halved (a traced resize)."""
    state = prioritized.init(jnp.float32(0), V_SLOTS, capacity)
    state = prioritized.add_batch(state, jnp.arange(40, dtype=jnp.float32))

    def step(state, t):
        k1, k2 = jax.random.split(jax.random.fold_in(key, t))
        new_capacity = jnp.where(t == 30, jnp.maximum(capacity // 2, 1), state.buffer.capacity)
        state = prioritized.resize(state, new_capacity)
        state = prioritized.add(state, jnp.float32(1))
        sample = prioritized.sample(k1, state, 16, 0.5)
        state = prioritized.update_priorities(state, sample.indices, jax.random.normal(k2, (16,)), 0.6)
        return state, sample

    state, samples = jax.lax.scan(step, state, jnp.arange(40))
    return state, samples, prioritized.probabilities(state)


_episode_jit = jax.jit(_episode)
_episode_vmapped = jax.jit(jax.vmap(jax.vmap(_episode, (0, None)), (None, 0)))


def test_vmap_over_capacities_equals_unbatched():
    capacities = jnp.array([1, 7, 33, 64], jnp.int32)
    keys = jax.random.split(jax.random.key(3), 2)
    batched = _episode_vmapped(capacities, keys)
    for s in range(2):
        for c in range(4):
            single = _episode_jit(capacities[c], keys[s])
            picked = jax.tree.map(lambda x: x[s, c], batched)
            for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(picked)):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert _episode_vmapped._cache_size() == 1
    # Capacities really differ: live sizes after the final resize.
    np.testing.assert_array_equal(np.asarray(batched[0].buffer.size[0]), [1, 3, 16, 32])


# ----------------------------------------------------------------------------
# Validation: concrete bad input raises ValueError naming the argument


def _bad_calls():
    state = _small(adds=3)
    idx = jnp.array([0, 1])
    err = jnp.array([1.0, 2.0])
    key = jax.random.key(0)
    return [
        ("batch_size", lambda: prioritized.sample(key, state, 0, 0.5)),
        ("batch_size", lambda: prioritized.sample(key, state, 2.5, 0.5)),
        ("importance_exponent", lambda: prioritized.sample(key, state, 4, -0.1)),
        ("importance_exponent", lambda: prioritized.sample(key, state, 4, float("nan"))),
        ("priority_exponent", lambda: prioritized.update_priorities(state, idx, err, -1.0)),
        ("priority_exponent", lambda: prioritized.update_priorities(state, idx, err, float("nan"))),
        ("priority_floor", lambda: prioritized.update_priorities(state, idx, err, 1.0, -1e-3)),
        ("priority_floor", lambda: prioritized.update_priorities(state, idx, err, 1.0, float("inf"))),
        ("td_errors", lambda: prioritized.update_priorities(state, idx, jnp.array([1.0, jnp.nan]), 1.0)),
        ("td_errors", lambda: prioritized.update_priorities(state, idx, jnp.ones(3), 1.0)),
        ("indices", lambda: prioritized.update_priorities(state, jnp.array([0, S]), err, 1.0)),
        ("indices", lambda: prioritized.update_priorities(state, jnp.array([0.0, 1.0]), err, 1.0)),
        ("new_capacity", lambda: prioritized.resize(state, 0)),
        ("new_capacity", lambda: prioritized.resize(state, S + 1)),
        ("max_capacity", lambda: prioritized.init(jnp.float32(0), 0)),
        ("capacity", lambda: prioritized.init(jnp.float32(0), S, S + 1)),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_bad_input_raises_value_error_naming_the_argument(case):
    name, call = _bad_calls()[case]
    with pytest.raises(ValueError, match=name):
        call()


def test_traced_batch_size_is_rejected():
    state = _small(adds=3)
    with pytest.raises(ValueError, match="batch_size"):
        jax.jit(lambda n: prioritized.sample(jax.random.key(0), state, n, 0.5))(4)


def test_refresh_and_rebuild_give_bit_identical_trees():
    # Both code paths of the ancestor refresh (dependent scatters for few
    # touched leaves, full rebuild for many) must give the same tree.
    from jaxreplay.prioritized import _build_tree, _write_leaves

    rng = np.random.default_rng(3)
    leaves = jnp.asarray(rng.random(1024).astype(np.float32))
    tree = _build_tree(leaves)
    touched = jnp.array([5, 700], jnp.int32)
    new_leaves = leaves.at[touched].set(jnp.array([3.5, 0.25], jnp.float32))
    stale = tree.at[1024 + touched].set(new_leaves[touched])
    few = _write_leaves(stale, 1024 + touched)  # 1024 > 64 · 2: per-path refresh
    many = _write_leaves(stale, jnp.concatenate([1024 + touched] * 16))  # 1024 <= 64 · 32: rebuild
    given = _write_leaves(tree, 1024 + touched, new_leaves[touched])  # leaves written by the call
    np.testing.assert_array_equal(few, _build_tree(new_leaves))
    np.testing.assert_array_equal(many, _build_tree(new_leaves))
    np.testing.assert_array_equal(given, _build_tree(new_leaves))


# Every way the tree can be updated (a static argument of each tree-writing function).
_TREE_MODES = [
    "cpu",  # loops + levels
    "accelerator",  # unrolled levels + paths (levels for > 64 paths)
    prioritized.TreeMode(rebuild_factor=0),  # this platform's choice, never rebuilding: a per-path refresh
]


def _tree_history(mode):
    """Trees after a scripted sequence exercising every write path, in one mode.

    max_capacity 5000 (P = 8192) so that small writes take the per-path
    refresh: add (2 paths, elementwise crossings), update of 10 (crossings by
    comparison), add_batch of 40 (80 paths > 64: levels everywhere).
    """

    def script(key):
        keys = jax.random.split(key, 8)
        state = prioritized.init(jnp.zeros((), jnp.float32), 5000, capacity=700)
        trees = []
        state = prioritized.add_batch(state, jnp.arange(900.0), tree=mode)  # wraps: 200 forgotten
        trees.append(state.sum_tree)
        for i in range(2):
            batch = prioritized.sample(keys[i], state, 10, 0.5, tree=mode)  # duplicates likely
            errors = jax.random.normal(keys[i + 3], (10,))
            state = prioritized.update_priorities(state, batch.indices, errors, 0.7, tree=mode)
            state = prioritized.add(state, jnp.float32(i), tree=mode)
            trees.append(state.sum_tree)
        # Duplicate slots with different errors (the largest priority wins).
        state = prioritized.update_priorities(
            state, state.buffer.write_position - jnp.array([1, 1, 2, 3, 2]), jnp.arange(5.0), 0.5, tree=mode
        )
        trees.append(state.sum_tree)
        state = prioritized.resize(state, 300)
        state = prioritized.add_batch(state, jnp.arange(40.0), tree=mode)
        trees.append(state.sum_tree)
        state = prioritized.resize(state, 5000)
        for i in range(2):
            state = prioritized.add_batch(state, jnp.arange(3.0), tree=mode)
            trees.append(state.sum_tree)
        return jnp.stack(trees)

    return np.asarray(jax.jit(script)(jax.random.key(11)))


def test_tree_mode_is_checked():
    state = prioritized.init(jnp.zeros((), jnp.float32), 8)
    for bad in ("gpu", prioritized.TreeMode(refresh="diagonal"), prioritized.TreeMode(rebuild_factor=-1)):
        with pytest.raises(ValueError, match="tree"):
            prioritized.add(state, jnp.float32(1), tree=bad)


def test_every_tree_update_mode_gives_the_same_consistent_tree():
    # The descent/refresh loops are unrolled on accelerators and loops on CPU,
    # and few leaves refresh their paths by levels (CPU) or all at once
    # (accelerators); the tree must be bit-identical in every mode, and equal
    # to the tree rebuilt from its leaves.
    from jaxreplay.prioritized import _build_tree

    histories = [_tree_history(mode) for mode in _TREE_MODES]
    reference = histories[0]
    for mode, history in zip(_TREE_MODES, histories):
        np.testing.assert_array_equal(history, reference, err_msg=f"mode {mode}")
    for tree in reference:
        np.testing.assert_array_equal(tree, np.asarray(_build_tree(jnp.asarray(tree[8192:]))))
    # The script changes the tree at every step, and wrapped / resized windows
    # leave forgotten slots at 0.
    assert len({t.tobytes() for t in reference}) == len(reference)
    assert np.count_nonzero(reference[0][8192:]) == 700
