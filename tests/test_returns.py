"""n-step returns at sample time: a plain-Python reference (exact float32 equality), every sampler, resizing,
n = 1 against today's 1-step DQN target bit for bit, the chain probe's analytic values, vmap over n, and bad n."""

from __future__ import annotations

import collections
import functools
from fractions import Fraction

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from compile_events import COMPILE_EVENTS  # tests/ is on sys.path under pytest
from hypothesis import HealthCheck, given, settings

from jaxreplay import buffer, memory, returns

MAX_CAPACITY = 8
MAX_N = 4
EXAMPLE = {"id": jnp.int32(0), "reward": jnp.float32(0), "terminated": jnp.float32(0), "truncated": jnp.float32(0)}


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def _flushed(x):
    """``x`` with a subnormal result flushed to a signed zero, as XLA does on CPU and GPU."""
    x = np.float32(x)
    return np.float32(np.copysign(0.0, x)) if abs(x) < np.finfo(np.float32).tiny else x


def _fused_multiply_add(a, b, c):
    """``a + b · c`` rounded once to float32 (ties to even): exact in rationals, then the nearest float32."""
    exact = Fraction(float(a)) + Fraction(float(b)) * Fraction(float(c))
    if exact == 0:  # IEEE's sign of a zero sum; the product of normal floats is 0 only when exact
        return _separately_rounded(a, b, c)
    guess = np.float32(float(exact))  # within one float32 step of the answer (float64 may round twice)
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    return _flushed(min(candidates, key=lambda x: (abs(Fraction(float(x)) - exact), int(_bits(x)) & 1)))


def _separately_rounded(a, b, c):
    return _flushed(np.float32(a) + _flushed(np.float32(b) * np.float32(c)))


# Whether this backend fuses a multiply into an add (XLA:CPU does: one rounding). The operands are a case where
# the two roundings differ; the reference below rounds each step of the sum the same way.
_FUSES = bool(
    jax.jit(lambda a, b, c: a + b * c)(np.float32(-1.0), np.float32(0.375), np.float32(5.6252718))
    == _fused_multiply_add(-1.0, np.float32(0.375), np.float32(5.6252718))
)
_MULTIPLY_ADD = _fused_multiply_add if _FUSES else _separately_rounded


class StreamModel:
    """The reference: a FIFO of transitions ``(id, reward, terminated, truncated)`` with a logical capacity,
    and the n-step target written as a loop over it, in the float32 order the module docstring fixes."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.items = collections.deque()
        self.total_added = 0

    def add(self, reward, terminated, truncated):
        self.items.append((self.total_added, np.float32(reward), bool(terminated), bool(truncated)))
        self.total_added += 1
        while len(self.items) > self.capacity:
            self.items.popleft()

    def resize(self, capacity):
        self.capacity = capacity
        while len(self.items) > capacity:
            self.items.popleft()

    def target(self, position, n, gamma):
        """``(reward sum, bootstrap discount, steps, id of the transition bootstrapped from)`` at age ``position``."""
        items = list(self.items)[position:]
        gamma = np.float32(gamma)
        _, total, terminated, truncated = items[0]
        power, steps = gamma, 1
        while steps < n and steps < len(items) and not (terminated or truncated):
            _, reward, terminated, truncated = items[steps]
            total = _MULTIPLY_ADD(total, power, reward)
            power = _flushed(power * gamma)
            steps += 1
        return total, np.float32(0.0 if terminated else power), steps, items[steps - 1][0]


def _assert_matches_reference(state, model, n, gamma):
    """Every slot: a live start equals the reference bit for bit; a slot that is not live gives steps 0."""
    pieces, bootstrap_slots = _targets_of_every_slot(state, n, gamma)
    pieces, bootstrap_slots, ids = jax.device_get((pieces, bootstrap_slots, state.storage["id"]))
    oldest = int(buffer.oldest_index(state))
    live = len(model.items)
    assert not pieces.n_clipped
    for slot in range(MAX_CAPACITY):
        position = (slot - oldest) % MAX_CAPACITY
        if position >= live:
            assert (pieces.steps[slot], pieces.reward[slot], pieces.discount[slot]) == (0, 0.0, 0.0)
            continue
        total, discount, steps, bootstrap_id = model.target(position, n, gamma)
        assert pieces.steps[slot] == steps, (slot, position)
        assert _bits(pieces.reward[slot]) == _bits(total), (slot, pieces.reward[slot], total)
        assert _bits(pieces.discount[slot]) == _bits(discount), (slot, pieces.discount[slot], discount)
        assert ids[bootstrap_slots[slot]] == bootstrap_id


@jax.jit
def _targets_of_every_slot(state, n, gamma):
    return returns.n_step(state, jnp.arange(MAX_CAPACITY), n, gamma, MAX_N)


# One jitted scan applies a whole stream of operations (NOOP pads it to MAX_OPERATIONS): the property test's
# examples cost one dispatch each, not one per operation.
ADD, RESIZE, NOOP = 0, 1, 2
MAX_OPERATIONS = 30


@jax.jit
def _apply_all(state, codes, transitions, capacities):
    def step(state, operation):
        code, transition, capacity = operation
        branches = [lambda s: buffer.add(s, transition), lambda s: buffer.resize(s, capacity), lambda s: s]
        return jax.lax.switch(code, branches, state), None

    return jax.lax.scan(step, state, (codes, transitions, capacities))[0]


rewards = st.floats(-100.0, 100.0, width=32, allow_subnormal=False)
operation = st.one_of(
    st.tuples(st.just("add"), rewards, st.booleans(), st.booleans()),
    st.tuples(st.just("add"), rewards, st.just(False), st.just(False)),  # long episodes too
    st.tuples(st.just("resize"), st.integers(1, MAX_CAPACITY)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(1, MAX_CAPACITY),
    operations=st.lists(operation, max_size=MAX_OPERATIONS),
    n=st.integers(1, MAX_N),
    gamma=st.floats(0.0, 1.0, width=32, allow_subnormal=False),
)
def test_matches_a_plain_python_reference_exactly(capacity, operations, n, gamma):
    """Random streams with terminations, truncations, resizes (aER) and wrap-around: equal float32 targets."""
    codes = np.full(MAX_OPERATIONS, NOOP, np.int32)
    transitions = {"id": np.zeros(MAX_OPERATIONS, np.int32), **{
        name: np.zeros(MAX_OPERATIONS, np.float32) for name in ("reward", "terminated", "truncated")}}
    capacities = np.ones(MAX_OPERATIONS, np.int32)
    model = StreamModel(capacity)
    for i, op in enumerate(operations):
        if op[0] == "add":
            _, reward, terminated, truncated = op
            codes[i] = ADD
            transitions["id"][i] = model.total_added
            transitions["reward"][i], transitions["terminated"][i], transitions["truncated"][i] = (
                reward, terminated, truncated)
            model.add(reward, terminated, truncated)
        else:
            codes[i], capacities[i] = RESIZE, op[1]
            model.resize(op[1])
    state = _apply_all(buffer.init(EXAMPLE, MAX_CAPACITY, capacity), codes, transitions, capacities)
    _assert_matches_reference(state, model, n, gamma)


def test_successors_stop_at_the_newest_transition_and_the_live_window():
    """After a wrap and a shrink: entries past the newest (the write head) or of a forgotten start are invalid."""
    state = buffer.init(EXAMPLE, 5, 5)
    for i in range(7):  # slots 2, 3, 4, 0, 1 hold ids 2..6; the write head is at slot 2
        state = buffer.add(state, {**EXAMPLE, "id": jnp.int32(i)})
    state = buffer.resize(state, 3)  # ids 4, 5, 6 live (slots 4, 0, 1)
    slots, valid = buffer.successors(state, jnp.array([4, 0, 1, 2, 3]), 3)
    np.testing.assert_array_equal(slots, [[4, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0]])
    np.testing.assert_array_equal(valid, [[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]])
    with pytest.raises(ValueError, match="length must be"):
        buffer.successors(state, jnp.array([0]), 0)


def _random_stream(key, steps):
    """``steps`` transitions with random rewards and episode ends (ids 0, 1, ...)."""
    reward_key, end_key, cut_key = jax.random.split(key, 3)
    return {
        "id": jnp.arange(steps, dtype=jnp.int32),
        "reward": jax.random.normal(reward_key, (steps,)) * 3.0,
        "terminated": jax.random.bernoulli(end_key, 0.2, (steps,)).astype(jnp.float32),
        "truncated": jax.random.bernoulli(cut_key, 0.2, (steps,)).astype(jnp.float32),
    }


def _fill(replay, key, capacity, shrunk):
    """18 adds, a shrink to ``shrunk`` (aER's resize), then 7 more adds; returns the state and the stream."""
    stream = _random_stream(key, 25)
    state = replay.init(EXAMPLE, MAX_CAPACITY, capacity)
    for i in range(25):
        if i == 18:
            state = replay.resize(state, shrunk)
        state = replay.add(state, jax.tree.map(lambda x: x[i], stream))
    return state, stream


def _model_of(stream, capacity, shrunk):
    model = StreamModel(capacity)
    for i in range(25):
        if i == 18:
            model.resize(shrunk)
        model.add(stream["reward"][i], stream["terminated"][i], stream["truncated"][i])
    return model


@pytest.mark.parametrize("kind", memory.KINDS)
def test_every_sampler_and_a_resize_give_the_reference_targets(kind):
    """Uniform, stored-priority (priorities on start slots) and CER draws: each draw's target is the reference's."""
    replay = memory.make(kind)
    n, gamma, capacity, shrunk = 3, 0.9, 7, 5

    @jax.jit
    def run(key):
        state, stream = _fill(replay, key, capacity, shrunk)
        sample = replay.sample(jax.random.fold_in(key, 1), state, 16)
        pieces, bootstrap_slots = returns.n_step(replay.buffer(state), sample.indices, n, gamma, MAX_N)
        ids = replay.buffer(state).storage["id"]
        return stream, ids[sample.indices], pieces, ids[bootstrap_slots]

    stream, start_ids, pieces, bootstrap_ids = jax.device_get(run(jax.random.key(3)))
    model = _model_of(stream, capacity, shrunk)
    live_ids = [item[0] for item in model.items]
    for b, start in enumerate(start_ids):
        total, discount, steps, bootstrap_id = model.target(live_ids.index(start), n, gamma)
        assert (pieces.steps[b], bootstrap_ids[b]) == (steps, bootstrap_id)
        assert _bits(pieces.reward[b]) == _bits(total) and _bits(pieces.discount[b]) == _bits(discount)
    if kind == "cer":  # the first draw is the newest transition: its window is incomplete, truncated to 1 step
        assert start_ids[0] == live_ids[-1] and pieces.steps[0] == 1 and bootstrap_ids[0] == live_ids[-1]


def test_incomplete_windows_are_truncated_at_the_newest_transition():
    """The n - 1 newest starts of an unfinished episode sum what exists and bootstrap from the newest with γ^k."""
    state = buffer.init(EXAMPLE, MAX_CAPACITY)
    for i in range(5):
        state = buffer.add(state, {**EXAMPLE, "id": jnp.int32(i), "reward": jnp.float32(1.0)})
    pieces, bootstrap_slots = returns.n_step(state, jnp.arange(5), 4, 0.5, MAX_N)
    np.testing.assert_array_equal(pieces.steps, [4, 4, 3, 2, 1])
    np.testing.assert_array_equal(pieces.reward, [1.875, 1.875, 1.75, 1.5, 1.0])
    np.testing.assert_array_equal(pieces.discount, [0.0625, 0.0625, 0.125, 0.25, 0.5])
    np.testing.assert_array_equal(bootstrap_slots, [3, 4, 4, 4, 4])


def test_vmap_over_seeds_n_and_capacities_is_one_program_and_matches_the_reference():
    seeds, ns, capacities = jnp.arange(2), jnp.arange(1, MAX_N + 1), jnp.array([3, 6, 8])
    replay = memory.make("uniform")

    def one(seed, n, capacity):
        state, stream = _fill(replay, jax.random.key(seed), capacity, jnp.maximum(capacity - 2, 1))
        pieces, bootstrap_slots = returns.n_step(state, jnp.arange(MAX_CAPACITY), n, 0.8, MAX_N)
        return state, stream, pieces, bootstrap_slots

    run = jax.jit(jax.vmap(jax.vmap(jax.vmap(one, (None, None, 0)), (None, 0, None)), (0, None, None)))
    before = COMPILE_EVENTS.lowerings
    states, streams, pieces, slots = jax.device_get(run(seeds, ns, capacities))
    assert COMPILE_EVENTS.lowerings == before + 1
    assert pieces.reward.shape == (2, MAX_N, 3, MAX_CAPACITY)
    for s, n, c in np.ndindex(2, MAX_N, 3):
        state = jax.tree.map(lambda x: x[s, n, c], states)
        stream = jax.tree.map(lambda x: x[s, n, c], streams)
        capacity = int(capacities[c])
        model = _model_of(stream, capacity, max(capacity - 2, 1))
        oldest = int(buffer.oldest_index(state))
        for slot in range(len(model.items)):
            target_slot = (oldest + slot) % MAX_CAPACITY
            total, discount, steps, bootstrap_id = model.target(slot, n + 1, 0.8)
            assert pieces.steps[s, n, c, target_slot] == steps
            assert _bits(pieces.reward[s, n, c, target_slot]) == _bits(total)
            assert _bits(pieces.discount[s, n, c, target_slot]) == _bits(discount)
            assert state.storage["id"][slots[s, n, c, target_slot]] == bootstrap_id


# ---------------------------------------------------------------------------
# n = 1 is today's 1-step DQN target, bit for bit


def _dqn_memory(key, steps=40, max_capacity=16, capacity=11):
    """A memory filled as the DQN step stores transitions (plus ``truncated``), from random observations."""
    obs_key, action_key, stream_key = jax.random.split(key, 3)
    stream = _random_stream(stream_key, steps)
    example = {
        "obs": jnp.zeros(3),
        "action": jnp.int32(0),
        "reward": jnp.float32(0),
        "next_obs": jnp.zeros(3),
        "terminated": jnp.float32(0),
        "truncated": jnp.float32(0),
    }
    state = buffer.init(example, max_capacity, capacity)
    observations = jax.random.normal(obs_key, (steps + 1, 3))
    actions = jax.random.randint(action_key, (steps,), 0, 2)
    for i in range(steps):
        state = buffer.add(
            state,
            {
                "obs": observations[i],
                "action": actions[i],
                "reward": stream["reward"][i],
                "next_obs": observations[i + 1],
                "terminated": stream["terminated"][i],
                "truncated": stream["truncated"][i],
            },
        )
    return state


def test_one_step_targets_and_updates_are_todays_bit_for_bit():
    """n = 1 (under max_n_step 3): the DQN's TD errors and gradient step from n_step's pieces (reward sum, discount
    per transition, next observation at the bootstrap slot) equal today's 1-step ones bit for bit, each in its own
    program as the DQN step would compile it. Everything is an argument: a closed-over constant would be folded
    at compile time by XLA's evaluator, whose rounding differs from the compiled code's."""
    from jaxreplay.agents import dqn as agent

    net = agent.QNetwork((8,), 2)
    optimizer = agent.make_optimizer("adam")

    def batch_and_discount(state, indices, gamma, n_step):
        batch = buffer.get(state, indices)
        if not n_step:
            return batch, gamma
        pieces, bootstrap_slots = returns.n_step(state, indices, 1, gamma, 3)
        next_obs = buffer.get(state, bootstrap_slots)["next_obs"]
        return {**batch, "reward": pieces.reward, "next_obs": next_obs, "terminated": jnp.zeros(11)}, pieces.discount

    @functools.partial(jax.jit, static_argnames="n_step")
    def update(state, indices, params, target_params, opt_state, gamma, n_step):
        batch, discount = batch_and_discount(state, indices, gamma, n_step)
        td = agent.td_errors(net, params, target_params, batch, discount)
        return td, agent.train_step(
            net, optimizer, params, target_params, opt_state, batch, jnp.ones(11), 0.01, agent.LossOptions(discount)
        )

    params = agent.init_params(jax.random.key(0), net, (3,))
    arguments = (params, agent.init_params(jax.random.key(1), net, (3,)), optimizer.init(params))
    state = _dqn_memory(jax.random.key(2))
    indices = buffer.slot_of(state, jnp.arange(11))  # every live transition, as samplers draw them
    assert np.any(state.storage["terminated"][indices]) and np.any(state.storage["truncated"][indices])
    for gamma in (0.99, 0.7, 0.0):
        today = jax.device_get(update(state, indices, *arguments, jnp.float32(gamma), n_step=False))
        n_step = jax.device_get(update(state, indices, *arguments, jnp.float32(gamma), n_step=True))
        assert np.all(today[0] != 0)
        for old, new in zip(jax.tree.leaves(today), jax.tree.leaves(n_step)):
            np.testing.assert_array_equal(np.atleast_1d(old).view(np.uint8), np.atleast_1d(new).view(np.uint8))


# ---------------------------------------------------------------------------
# The chain probe: n-step returns and targets in closed form


@pytest.mark.parametrize("length, time_limit", [(5, 1000), (6, 4)])
def test_chain_probe_n_step_targets_are_analytic(length, time_limit):
    """From every live start and every n: the sum of known rewards, γ^k or 0, and (bootstrapping from the true
    values) the true Q-value, across terminations, time-limit truncations, wrap-around and the newest start."""
    from jaxreplay import envs

    env, env_params = envs.make(
        "Probe-Chain", length=length, reward=0.5, final_reward=4.0, max_steps_in_episode=time_limit
    )
    gamma = 0.9
    example = {
        "obs": jnp.zeros(1),
        "reward": jnp.float32(0),
        "next_obs": jnp.zeros(1),
        "terminated": jnp.float32(0),
        "truncated": jnp.float32(0),
    }

    @jax.jit
    def rollout_and_targets(n):
        def step(carry, key):
            state, obs, env_state = carry
            next_obs, env_state, reward, terminated, truncated, info = env.step(key, env_state, 0, env_params)
            transition = {
                "obs": obs,
                "reward": reward,
                "next_obs": info["final_observation"],
                "terminated": terminated.astype(jnp.float32),
                "truncated": truncated.astype(jnp.float32),
            }
            return (buffer.add(state, transition), next_obs, env_state), None

        obs, env_state = env.reset(jax.random.key(0), env_params)
        (state, _, _), _ = jax.lax.scan(
            step, (buffer.init(example, 9, 7), obs, env_state), jax.random.split(jax.random.key(1), 17)
        )
        indices = buffer.slot_of(state, jnp.arange(7))  # oldest first
        pieces, bootstrap_slots = returns.n_step(state, indices, n, gamma, MAX_N)
        bootstrap_value = env.true_q(state.storage["next_obs"][bootstrap_slots], env_params, gamma)[:, 0]
        target = pieces.reward + pieces.discount * bootstrap_value
        return (
            state.storage["obs"][indices, 0],
            pieces,
            target,
            env.true_q(state.storage["obs"][indices], env_params, gamma)[:, 0],
        )

    end = min(length, time_limit)  # steps of an episode
    for n in range(1, MAX_N + 1):
        positions, pieces, target, true_q = jax.device_get(rollout_and_targets(n))
        for age, position in enumerate(positions.astype(int)):
            steps = min(n, end - position, 7 - age)  # to the episode's end, and to the newest transition
            rewards = [4.0 if position + j == length - 1 else 0.5 for j in range(steps)]
            assert pieces.steps[age] == steps
            np.testing.assert_allclose(pieces.reward[age], sum(r * gamma**j for j, r in enumerate(rewards)), rtol=1e-6)
            terminated = position + steps == length
            np.testing.assert_allclose(pieces.discount[age], 0.0 if terminated else gamma**steps, rtol=1e-6)
        np.testing.assert_allclose(target, true_q, rtol=1e-6)
    assert len(set(positions.astype(int))) > 3  # the window spans several positions of more than one episode


# ---------------------------------------------------------------------------
# Bad n


def test_bad_concrete_n_or_max_n_step_is_refused_naming_the_argument():
    state = buffer.init(EXAMPLE, MAX_CAPACITY)
    no_truncations = buffer.init({"reward": jnp.float32(0), "terminated": jnp.float32(0)}, 4)
    indices = jnp.arange(3)
    past_the_ring = jnp.array([0, MAX_CAPACITY])
    before = COMPILE_EVENTS.lowerings
    for n, match in ((0, "n must be >= 1"), (5, "n must be <= 4"), (2.5, "n must be an integer")):
        with pytest.raises(ValueError, match=match):
            returns.n_step(state, indices, n, 0.9, MAX_N)
    for max_n_step in (0, 2.0):
        with pytest.raises(ValueError, match="max_n_step must be"):
            returns.n_step(state, indices, 1, 0.9, max_n_step)
    # A window longer than the memory (its loop unrolled: 4,000 steps on 8 slots compiled for 17 s, 10**6 hung).
    for max_n_step in (MAX_CAPACITY + 1, 10**6):
        with pytest.raises(ValueError, match=f"max_n_step must be <= {MAX_CAPACITY}"):
            returns.n_step(state, indices, 1, 0.9, max_n_step)
    with pytest.raises(ValueError, match="discount must be <= 1"):
        returns.n_step(state, indices, 1, 1.5, MAX_N)
    with pytest.raises(ValueError, match="'truncated'"):
        returns.n_step(no_truncations, indices, 1, 0.9, 2)
    # n of another kind or shape; starts outside the ring (buffer.get would clamp 8 to 7, the window wrap to 0).
    for n, match in (("3", "n must be an integer"), (None, "n must be an integer"), (True, "n must be an integer")):
        with pytest.raises(ValueError, match=match):
            returns.n_step(state, indices, n, 0.9, MAX_N)
    for n in ([2, 3], np.array([[2]]), [1, True]):
        with pytest.raises(ValueError, match=r"n must be one horizon \(a scalar"):
            returns.n_step(state, indices, n, 0.9, MAX_N)
    for bad in (past_the_ring, np.array([-1])):
        for call in (
            lambda: returns.n_step(state, bad, 1, 0.9, MAX_N),
            lambda: buffer.get(state, bad),
            lambda: buffer.successors(state, bad, 2),
        ):
            with pytest.raises(ValueError, match=f"indices must be (<= {MAX_CAPACITY - 1}|>= 0)"):
                call()
    batched = jax.tree.map(lambda x: np.stack([np.asarray(x)] * 2), state)  # two memories, not vmapped over
    with pytest.raises(ValueError, match=r"must have shape \(max_capacity,\) .* vmap n_step over them"):
        returns.n_step(batched, indices, 1, 0.9, MAX_N)
    assert COMPILE_EVENTS.lowerings == before
    # A window of the whole ring is allowed: from the oldest of a full memory it sums every transition.
    full = buffer.add_batch(state, {**{k: jnp.zeros(MAX_CAPACITY, v.dtype) for k, v in EXAMPLE.items()},
                                    "reward": jnp.ones(MAX_CAPACITY)})
    pieces = returns.n_step(full, indices, MAX_CAPACITY, 1.0, MAX_CAPACITY)[0]
    assert pieces.steps.tolist() == [MAX_CAPACITY, MAX_CAPACITY - 1, MAX_CAPACITY - 2]
    assert pieces.reward.tolist() == [MAX_CAPACITY, MAX_CAPACITY - 1, MAX_CAPACITY - 2]


def test_traced_n_out_of_range_is_clipped_and_flagged():
    state = buffer.init(EXAMPLE, MAX_CAPACITY)
    for i in range(6):
        state = buffer.add(state, {**EXAMPLE, "reward": jnp.float32(1.0)})
    run = jax.jit(lambda n: returns.n_step(state, jnp.array([0]), n, 0.5, MAX_N)[0])
    for n, steps, flagged in ((0, 1, True), (-3, 1, True), (9, MAX_N, True), (3, 3, False), (MAX_N, MAX_N, False)):
        pieces = run(jnp.int32(n))
        assert (int(pieces.steps[0]), bool(pieces.n_clipped)) == (steps, flagged), n
    for n, steps, flagged in ((2.0, 2, False), (2.7, 2, True), (float("nan"), 1, True), (float("inf"), MAX_N, True)):
        pieces = jax.jit(lambda n: returns.n_step(state, jnp.array([0]), n, 0.5, MAX_N)[0])(jnp.float32(n))
        assert (int(pieces.steps[0]), bool(pieces.n_clipped)) == (steps, flagged), n


def test_a_traced_discount_outside_0_1_makes_the_pieces_nan():
    """Jitted code cannot refuse γ = 1.5 or -0.5: the targets become NaN (a run learning from them diverges)
    instead of quietly being sums with another meaning; γ in [0, 1] is untouched."""
    state = buffer.init(EXAMPLE, MAX_CAPACITY)
    for i in range(6):
        state = buffer.add(state, {**EXAMPLE, "reward": jnp.float32(1.0)})
    run = jax.jit(lambda gamma: returns.n_step(state, jnp.array([0, 2]), 3, gamma, MAX_N)[0])
    for gamma in (1.5, -0.5, float("nan"), float("inf")):
        pieces = run(jnp.float32(gamma))
        assert np.isnan(pieces.reward).all() and np.isnan(pieces.discount).all(), gamma
        assert pieces.steps.tolist() == [3, 3]
    pieces = run(jnp.float32(0.5))
    assert pieces.reward.tolist() == [1.75, 1.75] and pieces.discount.tolist() == [0.125, 0.125]
    assert run(jnp.float32(1.0)).reward.tolist() == [3.0, 3.0]
    # A start whose window ends at a termination too (its γ powers never reach the sum: its reward stayed
    # finite and its discount 0, found by a probe).
    ended = jax.jit(lambda gamma: returns.accumulate(
        jnp.ones((2, 3)), jnp.array([[True, False, False], [False, False, False]]), jnp.zeros((2, 3), bool),
        jnp.ones((2, 3), bool), 3, gamma))(jnp.float32(1.5))
    assert np.isnan(ended.reward).all() and np.isnan(ended.discount).all()


def test_chain_probe_follows_the_gymnax_api_and_refuses_a_bad_length():
    from jaxreplay import envs
    from jaxreplay.experiments import dqn

    env, params = envs.make("Probe-Chain", length=3, reward=1.0, final_reward=5.0)
    obs, state = env.reset(jax.random.key(0), params)
    steps = []
    for i in range(4):
        obs, state, reward, terminated, truncated, info = env.step(jax.random.key(i), state, i % 2, params)
        steps.append((float(info["final_observation"][0]), float(reward), bool(terminated), bool(truncated)))
    assert steps == [
        (1.0, 1.0, False, False),
        (2.0, 1.0, False, False),
        (3.0, 5.0, True, False),
        (1.0, 1.0, False, False),
    ]
    # Q([i]) = Σ of the rewards left, discounted: 1 + γ + γ² · 5, 1 + γ · 5, 5.
    np.testing.assert_allclose(
        env.true_q(jnp.array([[0.0], [1.0], [2.0]]), params, 0.5), [[2.75, 2.75], [3.5, 3.5], [5.0, 5.0]]
    )
    np.testing.assert_allclose(env.true_q(jnp.array([[0.0]]), params, 1.0), [[7.0, 7.0]])
    env, params = envs.make("Probe-Chain", length=3, max_steps_in_episode=2)
    first = env.step(jax.random.key(1), env.reset(jax.random.key(0), params)[1], 0, params)
    second = env.step(jax.random.key(2), first[1], 0, params)
    # (truncated, terminated) per step: the second step reaches the time limit before the chain's end.
    assert [(bool(out[4]), bool(out[3])) for out in (first, second)] == [(False, False), (True, False)]
    for length in (0, 2.5):
        with pytest.raises(ValueError, match="length must be"):
            envs.make("Probe-Chain", length=length)
    with pytest.raises(ValueError, match="setup.env_params.length must be an integer >= 1"):
        dqn.Setup(env_id="Probe-Chain", env_params={"length": 0})
