"""The aER controller (Algorithm 2) against a plain-Python deque reference.

The reference below is written from the paper's pseudo-code with *global*
time indices ``i`` (transition ``i`` is stored at step ``i``), independently of
the offset arithmetic in :mod:`jaxreplay.adaptive`. TD errors are scripted:
``|δ|`` of transition ``i`` at check time ``t`` is ``table[t, i]`` for a table
of small integers, so every float32 sum is exact and capacities and
``|δ_old|`` values can be compared with ``==``.
"""

from __future__ import annotations

import collections
import functools

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from jaxreplay import adaptive, buffer

# Fixed shapes: every run below shares these, so each jitted runner compiles once.
MAX_CAPACITY = 48
MAX_NUM_OLD = 12
STEPS = 160
EXAMPLE = {"index": jnp.int32(0)}


# ----------------------------------------------------------------------------
# The reference: Algorithm 2 on a deque, global indices


def reference_aer(table, initial_capacity, k, n_old, max_capacity, tolerance, reading, steps=STEPS,
                  equal_counts=True, counts=None):
    """Run Algorithm 2; return (capacity after each step, |δ_old| after each step).

    ``equal_counts=False`` is the literal pseudo-code: every check sums the
    ``n_old`` oldest, the shrink recompute the live part of its index range.
    ``equal_counts=True`` (the module's default) remembers how many
    transitions the reference covers and compares the same number: the
    reference is taken over the transitions that will be the oldest at the
    next check (those ``N + k - N'`` past the current oldest, or ``k`` past it
    after a shrink under the "shrunk" reading), ``min(n_old, live)`` of them.

    ``table[t][i]`` is |δ| of transition ``i`` evaluated at step ``t``.
    Boundary rule (documented in the module): enlarge when a shrink would
    leave fewer than ``k`` (the paper's ``N = k`` for multiples of ``k``);
    enlarging at ``max_capacity`` keeps ``N``. ``tolerance=None`` is the
    printed rule (shrink iff ``|δ_old|' <= |δ_old|``), a number the ε rule
    (shrink iff ``|δ_old|' < |δ_old| - ε``). ``counts``, a dict, gets each
    check's kind counted: ``"checks"``, ``"grows"``, ``"forced"`` (at the
    floor, where the boundary rule enlarges whatever the sums).
    """
    counts = {} if counts is None else counts
    counts.update(checks=0, grows=0, forced=0)
    memory = collections.deque()
    capacity = initial_capacity
    delta_old = 0
    ref_count = None
    capacities, deltas = [], []

    def sum_over(t, first, last):
        live = set(memory)  # only stored transitions count
        return sum(table[t][i] for i in range(first, last + 1) if i in live)

    for t in range(1, steps + 1):
        memory.append(t)  # transition t carries global index t
        while len(memory) > capacity:
            memory.popleft()
        if t % k == 0 and len(memory) == capacity:
            n = capacity
            c = min(n_old, n) if (ref_count is None or not equal_counts) else min(ref_count, n_old, n)
            delta_new = sum_over(t, t - n + 1, t - n + c)
            if tolerance is None:
                shrink = not delta_new > delta_old
            else:
                shrink = delta_new < delta_old - tolerance
            counts["checks"] += 1
            counts["grows"] += not shrink or n - k < k
            counts["forced"] += n - k < k
            if not equal_counts:
                if not shrink or n - k < k:
                    capacity = min(n + k, max_capacity)
                    delta_old = delta_new
                else:
                    capacity = n - k
                    for _ in range(k):
                        memory.popleft()
                    m = capacity if reading == "new" else n  # which N the recompute uses
                    delta_old = sum_over(t, t - m + k + 1, t - m + k + n_old)
            else:
                if not shrink or n - k < k:
                    capacity = min(n + k, max_capacity)
                    start = n + k - capacity  # 0 unless at the ceiling
                else:
                    capacity = n - k
                    for _ in range(k):
                        memory.popleft()
                    start = 2 * k if reading == "new" else k
                ref_count = min(n_old, n - start)
                oldest = t - n + 1
                if start == 0 and ref_count == c:
                    delta_old = delta_new
                else:
                    delta_old = sum_over(t, oldest + start, oldest + start + ref_count - 1)
        capacities.append(capacity)
        deltas.append(delta_old)
    return capacities, deltas


# ----------------------------------------------------------------------------
# The JAX side: one jitted scan over steps


def _run(
    table, initial_capacity, k, n_old, tolerance, equal_counts=True, paired=True, *, reading, use_tolerance,
    subsample_size=None, key=None, relative_tolerance=None
):
    memory = buffer.init(EXAMPLE, MAX_CAPACITY, capacity=initial_capacity)
    steps = jnp.arange(1, STEPS + 1, dtype=jnp.int32)
    keys = None if key is None else jax.random.split(key, STEPS)
    aer = adaptive.controller(
        interval=k,
        num_old=n_old,
        max_num_old=MAX_NUM_OLD,
        subsample_size=subsample_size,
        tolerance=tolerance if use_tolerance else None,
        relative_tolerance=relative_tolerance,
        shrink_reading=reading,
        equal_counts=equal_counts,
        paired=paired,
    )

    def body(carry, xs):
        memory, ctrl = carry
        t, step_key = xs
        memory = buffer.add(memory, {"index": t})

        def td_error_fn(transitions):  # the "agent" closes over the step
            return table[t, transitions["index"]]

        ctrl, capacity = aer.update(step_key, ctrl, memory, td_error_fn, t)
        memory = buffer.resize(memory, capacity)
        return (memory, ctrl), (capacity, ctrl.reference.delta_old)

    (_, ctrl), (capacities, deltas) = jax.lax.scan(body, (memory, aer.init()), (steps, keys))
    return capacities, deltas, ctrl


run = jax.jit(_run, static_argnames=("reading", "use_tolerance", "subsample_size"))


def run_jax(table, initial_capacity, k, n_old, tolerance, reading, equal_counts=True):
    capacities, deltas, ctrl = run(
        jnp.asarray(table, jnp.float32),
        initial_capacity,
        k,
        n_old,
        0.0 if tolerance is None else float(tolerance),
        equal_counts,
        reading=reading,
        use_tolerance=tolerance is not None,
    )
    return np.asarray(capacities), np.asarray(deltas), ctrl


def check_against_reference(table, initial_capacity, k, n_old, tolerance, reading, equal_counts=True):
    counts = {}
    ref_caps, ref_deltas = reference_aer(
        table.tolist(), initial_capacity, k, n_old, MAX_CAPACITY, tolerance, reading, equal_counts=equal_counts,
        counts=counts
    )
    caps, deltas, ctrl = run_jax(table, initial_capacity, k, n_old, tolerance, reading, equal_counts)
    np.testing.assert_array_equal(caps, ref_caps)
    np.testing.assert_array_equal(deltas, np.asarray(ref_deltas, np.float32))
    assert int(ctrl.diagnostics.num_grows) + int(ctrl.diagnostics.num_shrinks) == int(ctrl.diagnostics.num_checks)
    assert int(ctrl.diagnostics.num_invalid) == 0
    d = ctrl.diagnostics
    assert (int(d.num_checks), int(d.num_grows), int(d.num_forced)) == (counts["checks"], counts["grows"], counts["forced"])
    return ref_caps, ref_deltas, ctrl


# ----------------------------------------------------------------------------
# Scripted TD errors: table[t, i], small non-negative integers


def make_table(kind, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(STEPS + 1)[:, None]
    i = np.arange(STEPS + 1)[None, :]
    noise = rng.integers(0, 3, (STEPS + 1, STEPS + 1))
    if kind == "rise":  # old TD errors grow over time: enlarge to max_capacity
        table = t // 4 + noise
    elif kind == "fall":  # they shrink: down to N = k, then alternate
        table = (STEPS - t) // 2 + 0 * i
    elif kind == "phases":  # rise, then fall, then rise
        third = STEPS // 3
        phase = np.where(t < third, t, np.where(t < 2 * third, 2 * third - t, t - third))
        table = phase // 2 + noise
    elif kind == "constant":  # exact ties everywhere
        table = np.full((STEPS + 1, STEPS + 1), 2)
    elif kind == "age":  # depends on the transition's age
        table = (t - i) % 7 + noise
    else:  # "random"
        table = rng.integers(0, 6, (STEPS + 1, STEPS + 1))
    return np.broadcast_to(table, (STEPS + 1, STEPS + 1)).astype(np.int64)


# ----------------------------------------------------------------------------
# Hand-checked examples (these also pin the reference itself)

# k = 2, n_old = 2, N0 = 4, |δ_i| = i: worked out by hand from Algorithm 2.
HAND_CAPS = {
    "new": [4, 4, 4, 6, 6, 4, 4, 2, 2, 4, 4, 2, 2, 4],
    "shrunk": [4, 4, 4, 6, 6, 4, 4, 6, 6, 4, 4, 6, 6, 4],
}
HAND_DELTAS = {
    "new": [0, 0, 0, 3, 3, 11, 11, 0, 0, 19, 19, 0, 0, 27],
    "shrunk": [0, 0, 0, 3, 3, 7, 7, 11, 11, 15, 15, 19, 19, 23],
}


@pytest.mark.parametrize("reading", ["new", "shrunk"])
def test_hand_worked_example(reading):
    table = np.broadcast_to(np.arange(STEPS + 1)[None, :], (STEPS + 1, STEPS + 1))
    n = len(HAND_CAPS[reading])
    ref_caps, ref_deltas = reference_aer(table.tolist(), 4, 2, 2, MAX_CAPACITY, None, reading, steps=n,
                                         equal_counts=False)
    assert ref_caps == HAND_CAPS[reading]
    assert ref_deltas == HAND_DELTAS[reading]
    caps, deltas, _ = run_jax(table, 4, 2, 2, None, reading, equal_counts=False)
    assert caps[:n].tolist() == HAND_CAPS[reading]
    assert deltas[:n].tolist() == HAND_DELTAS[reading]


@pytest.mark.parametrize("reading", ["new", "shrunk"])
def test_grows_to_max_capacity_and_stays(reading):
    caps, _, ctrl = check_against_reference(make_table("rise", 0), 8, 4, 6, None, reading)
    assert max(caps) == MAX_CAPACITY and caps[-1] == MAX_CAPACITY
    # Enlarging at max_capacity keeps N but still counts as a grow.
    assert int(ctrl.diagnostics.num_shrinks) == 0
    assert int(ctrl.diagnostics.num_grows) > (MAX_CAPACITY - 8) // 4


@pytest.mark.parametrize("reading", ["new", "shrunk"])
def test_shrinks_to_interval_then_forced_to_grow(reading):
    caps, _, ctrl = check_against_reference(make_table("fall", 0), 40, 4, 6, None, reading)
    assert min(caps) == 4  # N = k reached ...
    first = caps.index(4)
    assert 8 in caps[first:]  # ... and N = k forces an enlargement
    assert int(ctrl.diagnostics.num_shrinks) >= 9
    # Every forced check is a step from the floor 4 to 8, and only those are (8 - 4 is not below k = 4).
    floor_exits = sum(a == 4 and b == 8 for a, b in zip(caps, caps[1:]))
    assert int(ctrl.diagnostics.num_forced) == floor_exits >= 3


def test_ties_shrink_without_tolerance_and_grow_with_zero_tolerance():
    table = make_table("constant", 0)
    # n_old = 2 <= N - k for every N >= 2k reached, so every sum is over 2 live transitions.
    caps_plain, deltas_plain, _ = check_against_reference(table, 24, 4, 2, None, "new")
    caps_eps0, _, ctrl = check_against_reference(table, 24, 4, 2, 0.0, "new")
    # Printed rule: equal sums shrink (down to k, alternating with the forced grow).
    assert min(caps_plain) == 4
    # ε rule with ε = 0: equal sums are not a decrease, so the memory grows.
    assert caps_eps0[-1] == MAX_CAPACITY and int(ctrl.diagnostics.num_shrinks) == 0


def test_tolerance_band_enlarges():
    # |δ_old|' falls by 1 per check: shrinks with ε = 0, enlarges with ε >= 1
    # (|δ_old| - ε <= |δ_old|' <= |δ_old| is the band where neither holds).
    t = np.arange(STEPS + 1)[:, None]
    table = np.broadcast_to((STEPS - t) // 4, (STEPS + 1, STEPS + 1))  # with k = 4: -1 per check
    caps0, _, _ = check_against_reference(table, 24, 4, 1, 0.0, "new")
    caps1, _, ctrl1 = check_against_reference(table, 24, 4, 1, 1.0, "new")
    caps2, _, _ = check_against_reference(table, 24, 4, 1, 0.5, "new")
    assert min(caps0) == 4
    assert int(ctrl1.diagnostics.num_shrinks) == 0 and caps1[-1] == MAX_CAPACITY
    assert min(caps2) == 4


@pytest.mark.parametrize("reading", ["new", "shrunk"])
def test_initial_capacity_not_a_multiple_of_interval(reading):
    # N0 = 3 < k = 5: the first check must enlarge; N stays in [k, max] after it.
    caps, _, _ = check_against_reference(make_table("fall", 1), 3, 5, 4, None, reading)
    checked = caps[4:]
    assert min(checked) >= 5 and max(checked) <= MAX_CAPACITY


def test_recompute_past_newest_counts_live_only():
    # "new" reading with N_new = k < k + n_old: offsets 2k ... run past the newest.
    table = np.ones((STEPS + 1, STEPS + 1), np.int64)
    table[: STEPS // 2] = 5  # a drop halfway triggers shrinks
    for equal_counts in (False, True):
        check_against_reference(table, 12, 4, 8, None, "new", equal_counts)
        check_against_reference(table, 12, 4, 8, None, "shrunk", equal_counts)


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(["rise", "fall", "phases", "constant", "age", "random"]),
    seed=st.integers(0, 2**16),
    k=st.integers(1, 12),
    n_old=st.integers(1, MAX_NUM_OLD),
    initial_capacity=st.integers(1, MAX_CAPACITY),
    tolerance=st.one_of(st.none(), st.integers(0, 4).map(float)),
    reading=st.sampled_from(["new", "shrunk"]),
    equal_counts=st.booleans(),
)
def test_matches_reference(kind, seed, k, n_old, initial_capacity, tolerance, reading, equal_counts):
    check_against_reference(make_table(kind, seed), initial_capacity, k, n_old, tolerance, reading, equal_counts)


def test_scripts_cover_both_bounds():
    """The scripted scenarios do reach N = k, max_capacity, shrinks and grows."""
    seen_k = seen_max = False
    for kind in ["rise", "fall", "phases"]:
        for reading in ["new", "shrunk"]:
            caps, _, ctrl = check_against_reference(make_table(kind, 3), 16, 4, 8, None, reading)
            seen_k |= min(caps[4:]) == 4
            seen_max |= max(caps) == MAX_CAPACITY
            if kind == "phases":
                assert int(ctrl.diagnostics.num_shrinks) > 0 and int(ctrl.diagnostics.num_grows) > 0
    assert seen_k and seen_max


# ----------------------------------------------------------------------------
# vmap over (initial capacity, num_old, interval)


def test_vmap_matches_unbatched():
    table = jnp.asarray(make_table("phases", 7), jnp.float32)
    initial = jnp.array([8, 24, 40, 5, 48], jnp.int32)
    n_old = jnp.array([6, 1, 12, 3, 7], jnp.int32)
    k = jnp.array([4, 3, 8, 6, 1], jnp.int32)
    batched = jax.jit(
        jax.vmap(
            functools.partial(_run, reading="new", use_tolerance=True),
            in_axes=(None, 0, 0, 0, None),
        )
    )
    caps_b, deltas_b, ctrl_b = batched(table, initial, k, n_old, 1.0)
    for j in range(initial.shape[0]):
        caps, deltas, ctrl = run(table, initial[j], k[j], n_old[j], 1.0, reading="new", use_tolerance=True)
        np.testing.assert_array_equal(caps_b[j], caps)
        np.testing.assert_array_equal(deltas_b[j], deltas)
        assert int(ctrl_b.diagnostics.num_shrinks[j]) == int(ctrl.diagnostics.num_shrinks)
    assert len({tuple(np.asarray(c)) for c in caps_b}) == initial.shape[0]  # the runs really differ


# ----------------------------------------------------------------------------
# The TD errors are evaluated only when the check fires


def test_td_error_fn_runs_only_at_checks():
    calls = []
    memory = buffer.init(EXAMPLE, MAX_CAPACITY, capacity=8)
    table = jnp.asarray(make_table("phases", 2), jnp.float32)

    @jax.jit
    def go(memory):
        def body(carry, t):
            memory, ctrl = carry
            memory = buffer.add(memory, {"index": t})

            def td_error_fn(transitions):
                jax.debug.callback(lambda: calls.append(1))
                return table[t, transitions["index"]]

            ctrl, capacity = aer.update(None, ctrl, memory, td_error_fn, t)
            return (buffer.resize(memory, capacity), ctrl), None

        aer = adaptive.controller(interval=4, num_old=4, max_num_old=MAX_NUM_OLD, equal_counts=False)
        return jax.lax.scan(body, (memory, aer.init()), jnp.arange(1, STEPS + 1, dtype=jnp.int32))[0][1]

    ctrl = go(memory)
    jax.effects_barrier()
    assert int(ctrl.diagnostics.num_checks) > 0 and int(ctrl.diagnostics.num_shrinks) > 0
    # One evaluation per check, a second one per shrink.
    assert len(calls) == int(ctrl.diagnostics.num_checks) + int(ctrl.diagnostics.num_shrinks)


# ----------------------------------------------------------------------------
# The subsample estimator

SUB_MAX = 64


def _filled_memory(capacity, adds):
    """A memory of ``capacity`` after ``adds`` adds of indices 0 .. adds-1 (wraps the ring)."""
    memory = buffer.init(EXAMPLE, SUB_MAX, capacity=capacity)
    return buffer.add_batch(memory, {"index": jnp.arange(adds, dtype=jnp.int32)})


VALUES = (np.arange(200) * 7 % 11).astype(np.float32) + 0.5  # |δ| of transition with index i


@functools.partial(jax.jit, static_argnames=("subsample_size",))
def _estimates(keys, memory, values, start, num_old, subsample_size):
    def one(key):
        return adaptive.old_td_error_sum(
            key,
            memory,
            lambda tr: values[tr["index"]],
            num_old=num_old,
            max_num_old=32,
            start=start,
            subsample_size=subsample_size,
        )

    return jax.vmap(one)(keys)


@pytest.mark.parametrize("start, num_old", [(0, 20), (8, 20), (30, 20)])
def test_subsample_is_unbiased(start, num_old):
    memory = _filled_memory(40, 70)  # oldest live index 30; ring wrapped
    oldest = 70 - 40
    live = max(0, min(num_old, 40 - start))
    exact = VALUES[oldest + start : oldest + start + live].sum()
    exact_jax = adaptive.old_td_error_sum(
        None, memory, lambda tr: jnp.asarray(VALUES)[tr["index"]], num_old=num_old, max_num_old=32, start=start
    )
    assert float(exact_jax) == pytest.approx(exact, rel=1e-6)
    keys = jax.random.split(jax.random.key(0), 4000)
    estimates = np.asarray(_estimates(keys, memory, jnp.asarray(VALUES), start, num_old, 5))
    standard_error = estimates.std() / np.sqrt(estimates.size)
    assert estimates.std() > 0  # genuinely random
    assert abs(estimates.mean() - exact) < 4 * standard_error
    # Variance m² σ² / s of the with-replacement estimator.
    population = VALUES[oldest + start : oldest + start + live]
    assert estimates.var() == pytest.approx(live**2 * population.var() / 5, rel=0.1)


@pytest.mark.parametrize("start, num_old", [(0, 20), (0, 32), (25, 32), (40, 5), (45, 5)])
def test_subsample_is_exact_for_equal_errors(start, num_old):
    memory = _filled_memory(40, 70)
    values = jnp.full((200,), 2.5, jnp.float32)
    keys = jax.random.split(jax.random.key(1), 4000)
    estimates = np.asarray(_estimates(keys, memory, values, start, num_old, 5))
    live = max(0, min(num_old, 40 - start))
    np.testing.assert_array_equal(estimates, np.full(4000, 2.5 * live, np.float32))


def test_subsampled_controller_runs_and_is_exact_for_equal_errors():
    table = np.full((STEPS + 1, STEPS + 1), 3)
    caps, deltas, ctrl = run(
        jnp.asarray(table, jnp.float32), 16, 4, 6, 0.0,
        reading="new", use_tolerance=False, subsample_size=5, key=jax.random.key(3),
    )
    ref_caps, ref_deltas = reference_aer(table.tolist(), 16, 4, 6, MAX_CAPACITY, None, "new")
    np.testing.assert_array_equal(np.asarray(caps), ref_caps)
    np.testing.assert_array_equal(np.asarray(deltas), np.asarray(ref_deltas, np.float32))


# ----------------------------------------------------------------------------
# Bad input


def _memory():
    """Capacity 8 of 16 slots, holding indices 0 .. 7: full, so a check at step 8 fires."""
    return buffer.add_batch(buffer.init(EXAMPLE, 16, capacity=8), {"index": jnp.arange(8, dtype=jnp.int32)})


def _td(transitions):
    return jnp.zeros(transitions["index"].shape, jnp.float32)


@pytest.mark.parametrize(
    "overrides, name",
    [
        ({"interval": 0}, "interval"),
        ({"interval": 17}, "interval"),
        ({"interval": 2.5}, "interval"),
        ({"num_old": 0}, "num_old"),
        ({"num_old": 5}, "num_old"),
        ({"max_num_old": 0}, "max_num_old"),
        ({"max_num_old": jnp.int32(4)}, "max_num_old"),
        ({"tolerance": -0.1}, "tolerance"),
        ({"tolerance": float("nan")}, "tolerance"),
        ({"tolerance": float("inf")}, "tolerance"),
        ({"relative_tolerance": 1.5}, "relative_tolerance"),
        ({"shrink_reading": "old"}, "shrink_reading"),
        ({"subsample_size": 0}, "subsample_size"),
        ({"subsample_size": 3, "key": None}, "key"),
        ({"step": 0}, "step"),
        ({"td_error_fn": 3}, "td_error_fn"),
        ({"td_error_fn": lambda tr: jnp.zeros(())}, "td_error_fn"),
    ],
)
def test_bad_input_raises_value_error_naming_argument(overrides, name):
    args = dict(key=jax.random.key(0), td_error_fn=_td, step=8, interval=2, num_old=2, max_num_old=4)
    args.update(overrides)
    key, td_error_fn, step = args.pop("key"), args.pop("td_error_fn"), args.pop("step")
    memory = _memory()
    with pytest.raises(ValueError, match=name):  # when the controller is built, or at its first update
        aer = adaptive.controller(**args)
        aer.update(key, aer.init(), memory, td_error_fn, step)


def test_bad_input_old_td_error_sum():
    with pytest.raises(ValueError, match="start"):
        adaptive.old_td_error_sum(None, _memory(), _td, num_old=1, max_num_old=2, start=-1)
    with pytest.raises(ValueError, match="num_old"):
        adaptive.old_td_error_sum(None, _memory(), _td, num_old=3, max_num_old=2)


def test_valid_concrete_call_outside_jit():
    memory = _memory()
    aer = adaptive.controller(interval=2, num_old=3, max_num_old=4)
    ctrl, capacity = aer.update(None, aer.init(), memory, lambda tr: tr["index"].astype(jnp.float32), 8)
    # Memory holds indices 0..7 (full at 8); oldest three: 0+1+2 = 3 > 0: enlarge.
    assert int(capacity) == 10 and float(ctrl.reference.delta_old) == 3.0 and int(ctrl.diagnostics.num_grows) == 1


# ----------------------------------------------------------------------------
# The estimator: equal counts, paired draws, noise, random walk (what a faithful aER needs)

WALK_RUNS = 96


def _walk_tables(seed, runs=WALK_RUNS, trend=0.0, spread=10.0, step_sd=0.1, offset=0.0):
    """``|δ|`` tables ``[runs, STEPS + 1, STEPS + 1]``: each transition's error does a random walk in time.

    ``table[r, t, i] = base_i + trend · t + W_t(i)`` with ``base_i ~ U(0, spread)``
    (differences across transitions: what a subsample sees as noise) and
    ``W`` a Gaussian random walk with step ``step_sd`` (independent increments:
    without a trend an error is as likely to rise as to fall over any k steps).
    """
    rng = np.random.default_rng(seed)
    base = offset + rng.uniform(0, spread, (runs, 1, STEPS + 1))
    walk = np.cumsum(rng.normal(0, step_sd, (runs, STEPS + 1, STEPS + 1)), axis=1)
    t = np.arange(STEPS + 1)[None, :, None]
    return np.abs(base + trend * t + walk).astype(np.float32)


@functools.partial(jax.jit, static_argnames=("subsample_size",))
def _walk_runs(tables, keys, paired, equal_counts, random_walk, subsample_size):
    """Run the controller on each table; per step: capacity before and after, and whether it grew."""

    def one(table, key):
        memory = buffer.init(EXAMPLE, MAX_CAPACITY, capacity=24)

        def body(carry, xs):
            memory, ctrl = carry
            t, step_key = xs
            memory = buffer.add(memory, {"index": t})
            before, grows = memory.capacity, ctrl.diagnostics.num_grows
            ctrl, capacity = aer.update(step_key, ctrl, memory, lambda tr: table[t, tr["index"]], t)
            return (buffer.resize(memory, capacity), ctrl), (before, ctrl.diagnostics.num_grows - grows, t % 4 == 0)

        steps = jnp.arange(1, STEPS + 1, dtype=jnp.int32)
        aer = adaptive.controller(interval=4, num_old=12, max_num_old=MAX_NUM_OLD, subsample_size=subsample_size,
                                  paired=paired, equal_counts=equal_counts, random_walk=random_walk)
        (_, ctrl), out = jax.lax.scan(body, (memory, aer.init()), (steps, jax.random.split(key, STEPS)))
        return ctrl, out

    return jax.vmap(one)(tables, keys)


def _grow_fraction(tables, paired=True, equal_counts=True, random_walk=False, subsample_size=None, seed=0):
    """Share of *unforced* decisions (N - k >= k) that enlarged, and how many there were."""
    keys = jax.random.split(jax.random.key(seed), tables.shape[0])
    ctrl, (before, grew, check_step) = _walk_runs(jnp.asarray(tables), keys, paired, equal_counts, random_walk,
                                                  subsample_size)
    before, grew, check_step = map(np.asarray, (before, grew, check_step))
    decided = check_step & (before >= 8) & (np.arange(STEPS)[None] >= 24)  # full from step 24 on
    return grew[decided].sum() / decided.sum(), int(decided.sum()), ctrl


def _binomial_interval(successes_fraction, n, p=0.5):
    from scipy import stats

    ci = stats.binomtest(int(round(successes_fraction * n)), n).proportion_ci(0.999)
    return ci.low, ci.high


@pytest.mark.parametrize("subsample_size", [None, 5])
def test_pure_noise_grows_half_the_time_with_paired_sums(subsample_size):
    # No trend: each old error is as likely to rise as to fall over k steps. Exact sums
    # (and paired draws: the same transitions at both times) see only that, so the
    # share of enlargements is 1/2 within a binomial interval.
    fraction, n, ctrl = _grow_fraction(_walk_tables(1), subsample_size=subsample_size)
    low, high = _binomial_interval(fraction, n)
    assert n > 1500
    assert low <= 0.5 <= high, (fraction, n)
    assert int(np.sum(ctrl.diagnostics.num_invalid)) == 0


def test_independent_draws_bias_pure_noise_toward_shrinking():
    # Independent draws estimate each sum from different transitions; an enlargement keeps
    # the winning (high) estimate as the reference, so the next check tends to shrink.
    fraction, n, _ = _grow_fraction(_walk_tables(1), paired=False, subsample_size=5)
    low, high = _binomial_interval(fraction, n)
    assert high < 0.49, (fraction, n)  # measured 0.45 over 3158 decisions


def test_random_walk_control_grows_half_the_time_whatever_the_errors():
    fraction, n, _ = _grow_fraction(_walk_tables(2, trend=-0.2), random_walk=True)
    low, high = _binomial_interval(fraction, n)
    assert low <= 0.5 <= high, (fraction, n)


def test_rising_errors_grow_and_falling_errors_shrink():
    rising, _, _ = _grow_fraction(_walk_tables(3, trend=0.05, offset=20), subsample_size=5)
    falling, _, _ = _grow_fraction(_walk_tables(3, trend=-0.05, offset=20), subsample_size=5)
    assert rising > 0.95 and falling < 0.05, (rising, falling)


def test_equal_counts_remove_the_small_memory_floor():
    # Old errors fall slowly and equally: every check should shrink, down to N = k.
    # Literal counts sum fewer transitions in the shrink recompute than at the next
    # check once N < n_old + 2k (here 20): the reference is too small, the memory
    # grows back, and N hovers above a floor instead.
    t = np.arange(STEPS + 1)[:, None]
    table = np.broadcast_to(100 - 0.05 * t, (STEPS + 1, STEPS + 1)).astype(np.float32)
    literal, _, _ = run(jnp.asarray(table), 40, 4, 12, 0.0, False, reading="new", use_tolerance=False)
    equal, _, _ = run(jnp.asarray(table), 40, 4, 12, 0.0, True, reading="new", use_tolerance=False)
    literal, equal = np.asarray(literal), np.asarray(equal)
    assert equal[40:].min() == 4  # shrinks all the way to k ...
    assert literal[40:].min() >= 12  # ... where literal counts stop well above it
    assert np.mean(literal[80:]) > 2 * np.mean(equal[80:])


def test_non_finite_errors_keep_the_capacity_and_are_counted():
    table = np.full((STEPS + 1, STEPS + 1), np.nan, np.float32)
    caps, _, ctrl = run(jnp.asarray(table), 24, 4, 6, 0.0, reading="new", use_tolerance=False)
    assert np.all(np.asarray(caps) == 24)
    assert int(ctrl.diagnostics.num_invalid) == int(ctrl.diagnostics.num_checks) > 0
    assert int(ctrl.diagnostics.num_grows) == int(ctrl.diagnostics.num_shrinks) == 0


@pytest.mark.parametrize("tolerance, relative_tolerance", [
    (np.nan, None), (-1.0, None), (np.inf, None), (0.0, np.nan), (0.0, 1.5), (0.0, -0.1), (0.0, np.inf),
])
def test_traced_invalid_tolerances_keep_the_capacity_and_are_flagged(tolerance, relative_tolerance):
    # Falling TD errors: with valid tolerances the memory shrinks from 24 toward k = 4.
    table = jnp.asarray(make_table("fall", 0), jnp.float32)
    _, _, valid = run(table, 24, 4, 6, 0.0, reading="new", use_tolerance=True, relative_tolerance=0.0)
    valid = valid.diagnostics
    assert int(valid.num_shrinks) > 3 and int(valid.num_invalid) == 0 and not bool(valid.invalid_parameters)
    # Traced NaN / inf / negative ε or ρ outside [0, 1]: no decision, counted and flagged
    # (before, NaN ε or ρ never shrank: the memory grew at every check, silently).
    rho = None if relative_tolerance is None else jnp.float32(relative_tolerance)
    caps, _, ctrl = run(table, 24, 4, 6, jnp.float32(tolerance), reading="new", use_tolerance=True,
                        relative_tolerance=rho)
    assert np.all(np.asarray(caps) == 24)
    diagnostics = ctrl.diagnostics
    assert int(diagnostics.num_invalid) == int(diagnostics.num_checks) == STEPS // 4 - 5  # every check from t = 24
    assert int(ctrl.diagnostics.num_grows) == int(ctrl.diagnostics.num_shrinks) == 0
    assert bool(ctrl.diagnostics.invalid_parameters)


def test_invalid_parameters_flag_is_sticky_and_set_without_a_check():
    memory = buffer.init(EXAMPLE, MAX_CAPACITY, capacity=8)  # empty: the check does not fire

    def step(ctrl, tolerance):
        aer = adaptive.controller(interval=4, num_old=2, max_num_old=MAX_NUM_OLD, tolerance=tolerance)
        return aer.update(None, ctrl, memory, lambda tr: tr["index"].astype(jnp.float32), 4)

    ctrl, capacity = jax.jit(step)(adaptive.init(), jnp.float32(np.nan))
    assert bool(ctrl.diagnostics.invalid_parameters) and int(ctrl.diagnostics.num_checks) == 0 and int(capacity) == 8
    ctrl, _ = jax.jit(step)(ctrl, jnp.float32(0.5))
    assert bool(ctrl.diagnostics.invalid_parameters), "the flag is sticky"


@pytest.mark.parametrize("num_old, interval, invalid", [(2, 4, False), (MAX_NUM_OLD + 1, 4, True), (10**6, 4, True),
                                                      (0, 4, True), (2, 0, True), (2.5, 4, True)])
def test_traced_num_old_and_interval_outside_their_range_are_flagged(num_old, interval, invalid):
    """A traced n_old above max_num_old ran clipped (10 and 1000 as 4, under their own labels) and k = 0 as 1,
    unflagged; now they set invalid_parameters and their checks keep the capacity."""
    memory = buffer.add_batch(buffer.init(EXAMPLE, MAX_CAPACITY, capacity=8), {"index": jnp.arange(8)})  # full

    def step(num_old, interval):
        aer = adaptive.controller(interval=interval, num_old=num_old, max_num_old=MAX_NUM_OLD)
        return aer.update(None, adaptive.init(), memory, lambda tr: tr["index"].astype(jnp.float32), 4)

    ctrl, capacity = jax.jit(step)(jnp.float32(num_old), jnp.float32(interval))
    assert bool(ctrl.diagnostics.invalid_parameters) == invalid
    assert int(ctrl.diagnostics.num_invalid) == int(invalid)  # the check at step 4 fired and could not decide
    if invalid:
        assert int(capacity) == 8


def test_a_traced_interval_above_max_capacity_is_flagged_and_its_checks_keep_the_capacity():
    """A traced k above max_capacity ran every check forced up to max_capacity, unflagged, like an aER run that
    always grew (a probe); a concrete one is refused."""
    memory = buffer.add_batch(buffer.init(EXAMPLE, MAX_CAPACITY, capacity=8), {"index": jnp.arange(8)})  # full

    def step(interval):
        aer = adaptive.controller(interval=interval, num_old=2, max_num_old=MAX_NUM_OLD)
        return aer.update(None, adaptive.init(), memory, lambda tr: tr["index"].astype(jnp.float32), 2 * MAX_CAPACITY + 2)

    for interval, invalid in ((MAX_CAPACITY, False), (MAX_CAPACITY + 1, True), (2 * MAX_CAPACITY + 2, True)):
        ctrl, capacity = jax.jit(step)(jnp.int32(interval))
        fired = (2 * MAX_CAPACITY + 2) % interval == 0
        assert bool(ctrl.diagnostics.invalid_parameters) == invalid, interval
        assert int(ctrl.diagnostics.num_invalid) == int(invalid and fired), interval
        assert int(capacity) == 8  # (an invalid check keeps it; the valid interval does not fire at this step)
    with pytest.raises(ValueError, match="interval must be <= "):
        adaptive.controller(interval=MAX_CAPACITY + 1, num_old=2, max_num_old=MAX_NUM_OLD).update(
            None, adaptive.init(), memory, lambda tr: tr["index"].astype(jnp.float32), 4)


def test_noise_diagnostics_measure_the_estimators_spread():
    # Paired draws see the k-step change of the same transitions: a small spread. Independent
    # draws also see the spread of |δ| across transitions (spread 10 vs steps of 0.1).
    # WALK_RUNS runs, as the tests above: their compiled programs (16 runs compiled two more).
    _, _, paired = _grow_fraction(_walk_tables(4), subsample_size=5)
    _, _, independent = _grow_fraction(_walk_tables(4), paired=False, subsample_size=5)
    _, _, exact = _grow_fraction(_walk_tables(4))

    def noise(c):
        return float(np.sum(c.diagnostics.sum_noise) / np.sum(c.diagnostics.num_compared))

    assert noise(exact) == 0.0
    assert 0 < noise(paired) < noise(independent) / 5
    assert np.sum(independent.diagnostics.num_noisy) / np.sum(independent.diagnostics.num_compared) > 0.8
    assert np.all(np.asarray(paired.diagnostics.num_compared) == np.asarray(paired.diagnostics.num_checks) - 1)


def test_errors_that_fluctuate_around_a_level_show_algorithm_2s_selection_effect():
    # Independent values at every step: an enlargement keeps the winning sum as the next
    # reference, so the printed rule enlarges (e - 2) / (e - 1) ≈ 0.418 of the time (a run
    # of n enlargements has probability 1/(n+1)!), documented in the module.
    rng = np.random.default_rng(5)
    tables = rng.uniform(0, 1, (WALK_RUNS, STEPS + 1, STEPS + 1)).astype(np.float32)
    fraction, n, _ = _grow_fraction(tables)
    low, high = _binomial_interval(fraction, n)
    assert low <= (np.e - 2) / (np.e - 1) <= high, (fraction, n)


def test_bad_state_is_named():
    memory = _memory()
    args = dict(interval=2, num_old=2, max_num_old=4)
    with pytest.raises(ValueError, match=r"state must be an adaptive.AdaptiveState"):
        adaptive.controller(**args).update(None, None, memory, _td, 8)
    with pytest.raises(ValueError, match=r"adaptive.init\(3\)"):  # made for exact sums, used with a subsample
        adaptive.controller(subsample_size=3, **args).update(jax.random.key(0), adaptive.init(), memory, _td, 8)


# ----------------------------------------------------------------------------
# The controller record: settings bound once, the check as four steps, the deprecated update


@pytest.mark.parametrize("settings, name", [
    ({"interval": 0}, "interval"), ({"num_old": 5}, "num_old"), ({"subsample_size": 0}, "subsample_size"),
    ({"tolerance": -1.0}, "tolerance"), ({"relative_tolerance": 2.0}, "relative_tolerance"),
    ({"shrink_reading": "old"}, "shrink_reading"), ({"max_num_old": 4.0}, "max_num_old"),
    # Found by a probe: a string "False" or NaN ran as True (the random walk instead of aER), None a JAX error.
    ({"random_walk": "False"}, "random_walk"), ({"paired": float("nan")}, "paired"),
    ({"equal_counts": None}, "equal_counts"), ({"random_walk": 2}, "random_walk"),
])
def test_controller_refuses_bad_settings_when_built(settings, name):
    # Named when the record is built, before any memory or TD error exists.
    with pytest.raises(ValueError, match=f"^{name}"):
        adaptive.controller(**{"interval": 2, "num_old": 2, "max_num_old": 4, **settings})


def test_controller_init_is_sized_for_its_subsample_and_groups_the_state():
    state = adaptive.controller(interval=2, num_old=2, max_num_old=4, subsample_size=5).init()
    assert adaptive.AdaptiveState._fields == ("reference", "diagnostics", "evidence")
    assert state.evidence.tolist() == [0.0, 0.0]  # the evidence rule's CUSUM (U, D)
    assert state.reference.positions.shape == (5,) and state.reference.values.shape == (5,)
    assert adaptive.controller(interval=2, num_old=2, max_num_old=4).init().reference.values.shape == (0,)
    assert len(adaptive.Diagnostics._fields) == 11 and int(state.diagnostics.num_checks) == 0


def test_deprecated_update_warns_and_matches_the_controller_bit_for_bit():
    table = jnp.asarray(make_table("phases", 2), jnp.float32)
    settings = dict(interval=4, num_old=6, max_num_old=MAX_NUM_OLD, subsample_size=3, tolerance=0.5)

    def go(step_fn):
        def body(carry, xs):
            memory, ctrl = carry
            t, key = xs
            memory = buffer.add(memory, {"index": t})
            ctrl, capacity = step_fn(key, ctrl, memory, lambda tr: table[t, tr["index"]], t)
            return (buffer.resize(memory, capacity), ctrl), capacity

        steps = jnp.arange(1, STEPS + 1, dtype=jnp.int32)
        memory = buffer.init(EXAMPLE, MAX_CAPACITY, capacity=8)
        return jax.lax.scan(body, (memory, adaptive.init(3)), (steps, jax.random.split(jax.random.key(7), STEPS)))

    new = go(adaptive.controller(**settings).update)
    with pytest.warns(DeprecationWarning, match=r"adaptive\.controller\(\*\*settings\)"):
        old = go(lambda *args: adaptive.update(*args, **settings))
    assert int(new[0][1].diagnostics.num_shrinks) > 0 and int(new[0][1].diagnostics.num_grows) > 0
    for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(old), strict=True):
        np.testing.assert_array_equal(a, b)


def test_deprecated_update_refuses_an_unknown_keyword_by_name():
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="unknown keyword.s. intervall; it takes"):
        adaptive.update(None, adaptive.init(), _memory(), _td, 8, intervall=2, num_old=2, max_num_old=4)


def test_adaptive_functions_are_small():
    # The package's size target, for this module: bodies (without their docstring) of at most 80 lines,
    # at most 10 parameters, at most 800 lines in the file.
    import ast
    import inspect

    source = inspect.getsource(adaptive)
    assert len(source.splitlines()) <= 800
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            length = body[-1].end_lineno - body[0].lineno + 1
            args = node.args
            count = len(args.posonlyargs + args.args + args.kwonlyargs) + bool(args.vararg) + bool(args.kwarg)
            assert length <= 80, (node.name, length)
            assert count <= 10, (node.name, count)
