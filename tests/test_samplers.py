"""Samplers against their exact probabilities (chi-square, fixed seeds)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxreplay import buffer, samplers

MAX_CAPACITY = 16
DRAWS = 200_000
P_VALUE = 1e-3  # fixed seeds: the test is deterministic; this only sets how strict it is


def _filled(capacity, adds, shrink_to=None):
    """A memory of floats 0..adds-1 (wrapped around when adds > MAX_CAPACITY)."""
    state = buffer.init(jnp.float32(0), MAX_CAPACITY, capacity)
    state = buffer.add_batch(state, jnp.arange(adds, dtype=jnp.float32))
    if shrink_to is not None:
        state = buffer.resize(state, shrink_to)
    return state


# Wrap-around (25 adds into 16 slots), a window that straddles the end of the
# ring, a shrink, and a grow-after-shrink.
STATES = {
    "wrapped": _filled(12, 25),
    "shrunk": _filled(16, 29, shrink_to=5),
    "grown": buffer.add_batch(buffer.resize(_filled(10, 23, shrink_to=3), 16), jnp.array([100.0, 101.0])),
    "partial": _filled(16, 7),
}


def _counts(indices):
    return np.bincount(np.asarray(indices).ravel(), minlength=MAX_CAPACITY)


def _assert_fits(counts, probabilities):
    """Chi-square goodness of fit on the support; no draw outside the support."""
    probabilities = np.asarray(probabilities, np.float64)
    support = probabilities > 0
    assert counts[~support].sum() == 0, f"draws outside the support: {counts[~support]}"
    expected = probabilities[support] / probabilities[support].sum() * counts.sum()
    result = stats.chisquare(counts[support], expected)
    assert result.pvalue > P_VALUE, (counts, expected, result)


_uniform = jax.jit(samplers.uniform, static_argnums=2)
_combined = jax.jit(samplers.combined, static_argnums=2)
_exact = jax.jit(samplers.exact_prioritized, static_argnums=3)


@pytest.mark.parametrize("name", STATES)
def test_uniform_is_uniform_over_the_live_window(name):
    state = STATES[name]
    sample = _uniform(jax.random.key(1), state, DRAWS)
    mask = np.asarray(buffer.valid_mask(state))
    _assert_fits(_counts(sample.indices), mask / mask.sum())
    np.testing.assert_allclose(sample.probabilities, 1.0 / mask.sum())
    np.testing.assert_array_equal(sample.weights, 1.0)


def test_uniform_from_draws_picks_the_offset_of_each_draw_in_age_order():
    # The "wrapped" window: 12 live of 25 adds (the last 16 written at slots 0..15, value 9 + slot): the
    # oldest live, value 13, at slot 4.
    state = STATES["wrapped"]
    draws = jnp.array([0.0, 0.25, 0.5, 1 / 12, 0.99999994], jnp.float32)  # offsets 0, 3, 6, 1, 11
    sample = samplers.uniform_from_draws(state, draws)
    assert sample.indices.tolist() == [4, 7, 10, 5, 15]
    assert np.asarray(buffer.get(state, sample.indices)).tolist() == [13.0, 16.0, 19.0, 14.0, 24.0]
    np.testing.assert_allclose(sample.probabilities, 1 / 12)
    # uniform() is its two halves: the same slots from the same key, also when the draws are made ahead, vmapped.
    keys = jax.random.split(jax.random.key(7), 3)
    ahead = jax.vmap(lambda k: samplers.uniform_draws(k, 9))(keys)
    for k, d in zip(keys, ahead):
        assert _uniform(k, state, 9).indices.tolist() == samplers.uniform_from_draws(state, d).indices.tolist()


def test_uniform_draws_are_the_bits_of_jax_uniform_so_small_memories_draw_what_they_always_drew():
    """uniform_draws gives random bits; up to FLOAT_GRID_SIZES the slot is floor(u · size) of the float32
    uniform jax.random.uniform makes from the same bits (every committed result drew those slots)."""
    for impl in ("threefry2x32", "rbg"):
        key = jax.random.key(3, impl=impl)
        bits = samplers.uniform_draws(key, 4096)
        assert bits.dtype == jnp.uint32
        floats = np.asarray(jax.random.uniform(key, (4096,)))
        assert np.array_equal(np.asarray(samplers._float_of_bits(bits)).view(np.uint32), floats.view(np.uint32))
        state = _filled(12, 25)
        assert samplers.uniform_from_draws(state, bits).indices.tolist() == (
            samplers.uniform_from_draws(state, jnp.asarray(floats)).indices.tolist()
        )


def _full(size):
    """A memory of ``size`` uint8 transitions written once: slot = offset from the oldest."""
    return buffer.add_batch(buffer.init(jnp.uint8(0), size), jnp.zeros(size, jnp.uint8))


@pytest.mark.parametrize("size", [samplers.FLOAT_GRID_SIZES, samplers.FLOAT_GRID_SIZES + 1, 10**7])
def test_large_memories_draw_every_offset_from_all_32_bits(size):
    """A float32 uniform takes 2**23 values: at 10^7 live transitions 1.6 million offsets could not be drawn,
    and above 10^6 some were drawn 7 % more often than others, while the sample said 1 / size (a probe).
    Above FLOAT_GRID_SIZES the offset is floor(bits · size / 2**32): every offset, the newest included, within
    size / 2**32 of uniform."""
    state = _full(size)
    draw = jax.jit(samplers.uniform_from_draws)
    bits = np.random.default_rng(size).integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32)
    bits[:3] = [0, 2**31, 2**32 - 1]
    sample = draw(state, jnp.asarray(bits))
    if size <= samplers.FLOAT_GRID_SIZES:
        uniforms = np.asarray(samplers._float_of_bits(jnp.asarray(bits)))
        expected = (uniforms * np.float32(size)).astype(np.int64)
    else:
        expected = (bits.astype(np.int64) * size) >> 32
    assert np.asarray(sample.indices).tolist() == expected.tolist()
    np.testing.assert_allclose(sample.probabilities, 1 / size)
    if size > 2**23:  # offsets the float grid cannot reach: just below the newest, and an odd one
        for offset in (size - 1, size - 2, 8_388_608):  # the bits that start the offset's range, and its last
            first, last = -(-offset * 2**32 // size), -(-(offset + 1) * 2**32 // size) - 1
            assert draw(state, jnp.array([first, last], jnp.uint32)).indices.tolist() == [offset, offset]
        # ... which no float32 uniform reaches: the grid's neighbours of 8,388,608 / 10^7 give 8,388,607 and
        # 8,388,609.
        grid = np.float32(2**-23) * np.array([7036874, 7036875], np.float32)
        assert np.asarray(draw(state, jnp.asarray(grid)).indices).tolist() == [8_388_607, 8_388_609]


def test_grown_window_holds_the_expected_values():
    contents, valid = buffer.in_age_order(STATES["grown"])
    assert contents[valid].tolist() == [20.0, 21.0, 22.0, 100.0, 101.0]


def _numpy_exact(state, td_errors, beta, floor=1e-6):
    mask = np.asarray(buffer.valid_mask(state))
    p = np.where(mask, np.maximum(np.abs(np.asarray(td_errors, np.float64)), floor) ** beta, 0.0)
    return p / p.sum()


TD_ERRORS = jnp.asarray(np.random.default_rng(0).normal(size=MAX_CAPACITY).astype(np.float32))


@pytest.mark.parametrize("name", STATES)
@pytest.mark.parametrize("beta", [0.0, 0.5, 2.0, 5.0])
def test_exact_prioritized_matches_its_probabilities(name, beta):
    state = STATES[name]
    expected = _numpy_exact(state, TD_ERRORS, beta)
    np.testing.assert_allclose(samplers.exact_priorities(state, TD_ERRORS, beta), expected, rtol=2e-5, atol=1e-9)
    sample = _exact(jax.random.key(2), state, TD_ERRORS, DRAWS, beta)
    _assert_fits(_counts(sample.indices), expected)
    np.testing.assert_allclose(sample.probabilities, expected[np.asarray(sample.indices)], rtol=2e-5)


def test_exact_prioritized_vmaps_over_the_exponent():
    state = STATES["wrapped"]
    betas = jnp.array([0.0, 1.0, 3.0])
    probabilities = jax.jit(jax.vmap(samplers.exact_priorities, in_axes=(None, None, 0)))(state, TD_ERRORS, betas)
    for row, beta in zip(probabilities, betas.tolist()):
        np.testing.assert_allclose(row, _numpy_exact(state, TD_ERRORS, beta), rtol=2e-5, atol=1e-9)


def test_exact_prioritized_extreme_exponent_and_zero_errors():
    state = STATES["wrapped"]
    # β = 60: |δ|^β over/underflows float32, the log-space computation does not.
    p = samplers.exact_priorities(state, TD_ERRORS * 100, 60.0)
    assert np.all(np.isfinite(p)) and abs(float(p.sum()) - 1.0) < 1e-6
    top = int(np.argmax(np.where(buffer.valid_mask(state), np.abs(TD_ERRORS), -1)))
    assert float(p[top]) > 0.99
    # All-zero TD errors: the floor makes it uniform instead of 0/0.
    p = samplers.exact_priorities(state, jnp.zeros(MAX_CAPACITY), 2.0)
    mask = np.asarray(buffer.valid_mask(state))
    np.testing.assert_allclose(p, mask / mask.sum(), rtol=1e-6)
    # One zero error among non-zero ones keeps a positive probability.
    errors = TD_ERRORS.at[buffer.newest_index(state)].set(0.0)
    assert float(samplers.exact_priorities(state, errors, 1.0)[buffer.newest_index(state)]) > 0.0


def test_tiny_priorities_in_a_partial_memory_do_not_underflow():
    # Regression: empty slots must not enter the max used for the shift.
    state = STATES["partial"]
    p = samplers.exact_priorities(state, jnp.full(MAX_CAPACITY, 1e-3), 20.0)
    mask = np.asarray(buffer.valid_mask(state))
    np.testing.assert_allclose(p, mask / mask.sum(), rtol=1e-6)


def test_importance_weights_follow_the_formula():
    state = STATES["shrunk"]
    sample = samplers.exact_prioritized(jax.random.key(3), state, TD_ERRORS, 64, 2.0, importance_exponent=0.4)
    p = np.asarray(sample.probabilities, np.float64)
    expected = (5 * p) ** -0.4
    np.testing.assert_allclose(sample.weights, expected / expected.max(), rtol=1e-5)
    assert float(np.max(sample.weights)) == pytest.approx(1.0)


def test_jitted_importance_weights_are_at_most_one_and_exactly_one_at_the_smallest_probability():
    """Jitted, the largest weight came out 1 +- 2 ulps at β = 0.4 (a fused multiply-add in one of the two places
    -β·log(scaled) was computed), above 1 from β ~ 1e3 (1.0149 at 1e5, 1276 at 1e8, through prioritized.sample)
    and whole batches of 0 or inf from 1e10 (a probe). Now each weight is (scaled / smallest)^-β."""
    from jaxreplay import memory

    rng = np.random.default_rng(0)
    weights = jax.jit(samplers.importance_weights)
    for beta in (0.4, 0.6, 10.0, 1e3, 1e10, 3e38):
        for _ in range(20):
            p = rng.dirichlet(np.ones(64))[:32].astype(np.float32)
            w = np.asarray(weights(p, 64, beta))
            assert w.max() == 1.0 and w.min() >= 0.0 and w[np.argmin(p)] == 1.0, beta
            expected = np.exp(-beta * np.log((64 * p.astype(np.float64)) / (64 * p.astype(np.float64)).min()))
            np.testing.assert_allclose(w, expected, rtol=1e-5, atol=1e-30)
            np.testing.assert_array_equal(w, samplers.importance_weights(p, 64, beta))  # eager: the same bits
    td = jnp.asarray(rng.standard_cauchy(64), jnp.float32)
    for beta in (0.4, 1e3, 1e8, 1e20):
        replay = memory.make("prioritized", priority_exponent=0.6, importance_exponent=beta)
        state = replay.init({"x": jnp.zeros(())}, 64, 64)
        state = jax.lax.fori_loop(0, 64, lambda i, s: replay.add(s, {"x": i.astype(jnp.float32)}), state)
        state = replay.update(state, jnp.arange(64), td)
        for seed in range(5):
            w = np.asarray(jax.jit(replay.sample, static_argnums=2)(jax.random.key(seed), state, 32).weights)
            assert w.max() == 1.0 and w.min() >= 0.0, beta


@pytest.mark.parametrize("beta, importance, floor", [
    (np.nan, 0.5, 1e-6), (-1.0, 0.5, 1e-6), (np.inf, 0.5, 1e-6), (1e37, 0.5, 1e-6),  # priority exponent
    (2.0, np.nan, 1e-6), (2.0, -0.5, 1e-6),  # importance exponent
    (2.0, 0.5, np.nan), (2.0, 0.5, -1.0),  # error floor
    (1e-40, 0.5, 1e-6), (2.0, 1e-40, 1e-6), (2.0, 0.5, 1e-40),  # subnormal: ran as 0, unflagged (a probe)
])
def test_traced_invalid_exponents_give_nan_not_silent_weights(beta, importance, floor):
    # Traced, so nothing can raise: every weight is NaN (a weighted loss turns NaN and the
    # run is reported diverged), never weights of 0, inverted weights > 1 or a silent fallback.
    state = STATES["shrunk"]
    sample = _exact(jax.random.key(3), state, TD_ERRORS, 64, beta, importance, floor)
    assert np.isnan(np.asarray(sample.weights)).all()
    if importance == 0.5:  # the priorities themselves are invalid: so are the probabilities
        assert np.isnan(np.asarray(sample.probabilities)).all()
    valid = _exact(jax.random.key(3), state, TD_ERRORS, 64, 2.0, 0.5, 1e-6)
    weights = np.asarray(valid.weights)
    assert ((weights > 0) & (weights <= 1)).all() and weights.max() == 1.0
    w = np.asarray(jax.jit(samplers.importance_weights)(jnp.array([0.1, 0.2, 0.0]), 5, importance))
    if importance == 0.5:
        np.testing.assert_allclose(w, [1.0, 2.0**-0.5, 0.0], rtol=1e-6)
    else:
        assert np.isnan(w).all()


def test_combined_always_holds_the_newest_and_is_otherwise_uniform():
    state = STATES["wrapped"]
    sample = _combined(jax.random.key(4), state, 50)
    newest = int(buffer.newest_index(state))
    assert int(sample.indices[0]) == newest and float(sample.probabilities[0]) == 1.0
    many = jax.jit(jax.vmap(lambda k: samplers.combined(k, state, 50)))(jax.random.split(jax.random.key(5), 4000))
    assert np.all(np.asarray(many.indices[:, 0]) == newest)
    mask = np.asarray(buffer.valid_mask(state))
    _assert_fits(_counts(many.indices[:, 1:]), mask / mask.sum())
    single = samplers.combined(jax.random.key(6), state, 1)
    assert single.indices.tolist() == [newest]


def test_empty_memory_gives_zero_probabilities_and_weights_in_every_sampler():
    from jaxreplay import prioritized

    state = buffer.init(jnp.float32(0), MAX_CAPACITY, 4)
    assert np.all(np.asarray(samplers.exact_priorities(state, jnp.ones(MAX_CAPACITY), 1.0)) == 0)
    draws = {
        "uniform": _uniform(jax.random.key(0), state, 3),
        "combined": _combined(jax.random.key(0), state, 3),
        "combined of 1": samplers.combined(jax.random.key(0), state, 1),
        "exact_prioritized": _exact(jax.random.key(0), state, jnp.ones(MAX_CAPACITY), 3, 1.0, 0.5, 1e-6),
        "prioritized": prioritized.sample(jax.random.key(0), prioritized.init(jnp.float32(0), MAX_CAPACITY, 4), 3,
                                          0.5),
    }
    for name, sample in draws.items():  # nothing valid was sampled: probability and weight 0, all agree
        np.testing.assert_array_equal(np.asarray(sample.probabilities), 0.0, err_msg=name)
        np.testing.assert_array_equal(np.asarray(sample.weights), 0.0, err_msg=name)
    # One transition in: weights 1 again.
    one = buffer.add(state, jnp.float32(1))
    for sample in (_uniform(jax.random.key(0), one, 3), _combined(jax.random.key(0), one, 3)):
        np.testing.assert_array_equal(np.asarray(sample.weights), 1.0)
        np.testing.assert_array_equal(np.asarray(sample.probabilities), 1.0)


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda s: samplers.exact_prioritized(jax.random.key(0), s, TD_ERRORS, 4, -1.0), "priority_exponent"),
        (lambda s: samplers.exact_prioritized(jax.random.key(0), s, TD_ERRORS, 4, float("nan")), "priority_exponent"),
        (lambda s: samplers.exact_prioritized(jax.random.key(0), s, TD_ERRORS, 4, 1e37), "priority_exponent"),
        (lambda s: samplers.exact_prioritized(jax.random.key(0), s, TD_ERRORS, 4, 1.0, -0.5), "importance_exponent"),
        (lambda s: samplers.exact_prioritized(jax.random.key(0), s, TD_ERRORS[:3], 4, 1.0), "td_errors"),
        (lambda s: samplers.exact_prioritized(jax.random.key(0), s, TD_ERRORS, 0, 1.0), "batch_size"),
        (lambda s: samplers.combined(jax.random.key(0), s, 0), "batch_size"),
        (lambda s: samplers.uniform_draws(jax.random.key(0), 0), "batch_size"),
        (lambda s: samplers.uniform_from_draws(s, jnp.zeros((2, 3), jnp.float32)), "draws"),
        (lambda s: samplers.uniform_from_draws(s, jnp.zeros(3, jnp.int32)), "draws"),
        (lambda s: samplers.uniform_from_draws(s, jnp.zeros(3, jnp.float16)), "draws"),
    ],
)
def test_bad_input(call, argument):
    with pytest.raises(ValueError, match=argument):
        call(STATES["wrapped"])


def test_draws_outside_the_unit_interval_never_reach_a_forgotten_slot():
    """A negative draw wrapped back out of the live window: after a shrink to slots [5 6 7], draws -0.5 and -0.9
    returned slots 4 and 3, forgotten transitions, with probability 1/3 (found by a probe)."""
    state = buffer.resize(buffer.add_batch(buffer.init({"x": jnp.zeros(())}, 8), {"x": jnp.arange(8.0)}), 3)
    with pytest.raises(ValueError, match=r"^draws must be >= 0\.0 \(allowed range \[0\.0, 1\.0\)\)"):
        samplers.uniform_from_draws(state, jnp.array([-0.5, 0.5], jnp.float32))
    with pytest.raises(ValueError, match=r"^draws must be < 1\.0"):
        samplers.uniform_from_draws(state, jnp.array([1.0], jnp.float32))
    traced = jax.jit(samplers.uniform_from_draws)(state, jnp.array([-0.5, -0.9, 0.0, 0.5, 0.99, 1.5], jnp.float32))
    assert traced.indices.tolist() == [5, 5, 5, 6, 7, 7]


def test_exact_priorities_of_an_all_zero_window_are_uniform_and_beta_zero_is_uniform():
    """With error_floor 0 an all-zero window gave probabilities summing to 0 and drew the newest slot with
    weight 0, so nothing was learnt, silently; β = 0 with a zero or infinite |δ| gave NaN (found by a probe)."""
    state = buffer.resize(buffer.add_batch(buffer.init({"x": jnp.zeros(())}, 8), {"x": jnp.arange(8.0)}), 3)
    third = [0.0] * 5 + [1 / 3] * 3
    for td, beta, floor in ((jnp.zeros(8), 1.0, 0.0), (jnp.zeros(8), 0.0, 0.0),
                            (jnp.array([0, 0, 0, 0, 0, 1.0, jnp.inf, 2]), 0.0, 1e-6)):
        np.testing.assert_allclose(samplers.exact_priorities(state, td, beta, floor), third, rtol=1e-6)
    # An infinite |δ| counts as the largest float32: it takes all the mass, and nothing is NaN.
    assert samplers.exact_priorities(state, jnp.array([0, 0, 0, 0, 0, 1.0, jnp.inf, 2]), 1.0).tolist() == [0] * 6 + [1, 0]
    sample = samplers.exact_prioritized(jax.random.key(0), state, jnp.zeros(8), 64, 1.0, 1.0, 0.0)
    assert set(sample.indices.tolist()) == {5, 6, 7} and np.allclose(sample.weights, 1.0)
    with pytest.raises(ValueError, match=r"^priority_exponent must be a scalar"):
        samplers.exact_priorities(state, jnp.zeros(8), jnp.ones(8))


def test_uniform_cer_and_exact_draws_do_not_depend_on_max_capacity_stored_priorities_only_in_distribution():
    """The same key, capacity and transitions at max_capacity 8, 16 and 300 (the ring wrapped or not): the
    uniform, CER and exact-pER samplers draw the same transitions (they index the live window from its oldest
    slot), so a run does not depend on its program's static ceiling. Stored-priority replay descends its sum
    tree in slot order, whose depth and ring layout follow max_capacity: the same probabilities, other
    transitions (documented in jaxreplay.prioritized and docs/design.md §4)."""
    from jaxreplay import prioritized

    key, drawn = jax.random.key(5), {}
    full = jax.jit(lambda max_capacity: buffer.add_batch(buffer.init(jnp.int32(0), max_capacity, 4),
                                                         jnp.arange(10, dtype=jnp.int32)), static_argnums=0)
    tree_of = jax.jit(lambda max_capacity: prioritized.add_batch(prioritized.init(jnp.int32(0), max_capacity, 4),
                                                                 jnp.arange(10, dtype=jnp.int32)), static_argnums=0)
    for max_capacity in (8, 16, 300):
        state = full(max_capacity)
        errors = state.storage.astype(jnp.float32)  # a transition's error: its value (every slot's)
        drawn[max_capacity] = [
            buffer.get(state, sample.indices).tolist()
            for sample in (_uniform(key, state, 64), _combined(key, state, 64), _exact(key, state, errors, 64, 1.0))
        ]
        tree = tree_of(max_capacity)  # every priority 1: P = 1/4 for each of the 4 live transitions
        indices = jax.jit(prioritized.sample, static_argnums=2)(key, tree, 40_000, 0.0).indices
        counts = np.bincount(np.asarray(buffer.get(tree.buffer, indices)), minlength=10)
        np.testing.assert_array_equal(counts[:6], 0)
        assert stats.chisquare(counts[6:]).pvalue > P_VALUE, counts
    assert drawn[8] == drawn[16] == drawn[300]
    assert all(set(sum(d, [])) <= {6, 7, 8, 9} for d in drawn.values())


def test_exact_pers_draws_probabilities_and_weights_do_not_depend_on_max_capacity():
    """The probabilities were normalised by a sum over every slot, which XLA rounds otherwise at another length (the
    padding's zeros change the order), and the draws scaled by the cumulative sum's last entry, likewise: 4 of 1.4M
    draws and up to 26% of the weights differed between max_capacity = size and 1024, and LineSearch pER runs
    diverged at 100 vs 300 slots (found by a probe; small integer errors sum exactly, so the test above missed it).
    Both totals are now the age-ordered cumulative sum at the newest live transition."""
    rng = np.random.default_rng(1)
    # Three sizes, two error draws each: one program per (size, max_capacity), each compiled once (eager buffer
    # calls compiled their every operation at every new shape: 400 compiles).
    full = jax.jit(lambda size, max_capacity: buffer.add_batch(buffer.init(jnp.int32(0), max_capacity, size),
                                                               jnp.arange(size, dtype=jnp.int32)), static_argnums=(0, 1))
    draw = jax.jit(lambda key, state, td: (samplers.exact_prioritized(key, state, td, 1 << 14, 1.0, 1.0, 1e-6),
                                           samplers.exact_priorities(state, td, 1.0)))
    for trial, size in enumerate(np.repeat(rng.integers(50, 300, size=3), 2)):
        size = int(size)
        errors = (rng.standard_cauchy(size) * 10).astype(np.float32)
        seen = []
        for max_capacity in (size, size + 1, 1024):
            state = full(size, max_capacity)
            td = np.zeros(max_capacity, np.float32)
            td[:size] = errors
            sample, p = draw(jax.random.key(trial), state, jnp.asarray(td))
            seen.append([np.asarray(x) for x in (sample.indices, sample.probabilities, sample.weights, p[:size])])
        for other in seen[1:]:
            for a, b in zip(seen[0], other):
                np.testing.assert_array_equal(a, b)


def test_an_exponent_whose_log_priorities_overflow_is_refused_or_flagged():
    """β = 1e37 (a finite float32) overflowed β · log|δ| to inf: every draw took a slot of probability 0 with
    weight 0 (a weighted loss silently 0), or gave NaN weights, by the newest error (found by a probe). β is now
    at most samplers.MAX_PRIORITY_EXPONENT: refused concrete (test_bad_input), NaN traced; at the bound, finite."""
    state = STATES["shrunk"]
    errors = TD_ERRORS.at[buffer.newest_index(state)].set(1e30)
    at_bound = _exact(jax.random.key(3), state, errors, 64, samplers.MAX_PRIORITY_EXPONENT, 1.0, 1e-6)
    assert (np.asarray(at_bound.probabilities) == 1.0).all() and (np.asarray(at_bound.weights) == 1.0).all()
    assert (np.asarray(at_bound.indices) == int(buffer.newest_index(state))).all()
    beyond = _exact(jax.random.key(3), state, errors, 64, 1e37, 1.0, 1e-6)
    assert np.isnan(np.asarray(beyond.probabilities)).all() and np.isnan(np.asarray(beyond.weights)).all()
