"""DQN on the MinAtar games: the conv network, bit-packed observations, the memory estimate, the preset,
and (slow) that it learns Breakout."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay import envs
from jaxreplay._validation import FieldError
from jaxreplay.agents import conv, packing
from jaxreplay.agents import dqn as agent
from jaxreplay.engine import plan as plan_lib
from jaxreplay.engine import sweep as sw
from jaxreplay.experiments import dqn
from jaxreplay.paper.reproduce import settings

# game: (channels, actions) of gymnax's MinAtar games (minimal action sets).
GAMES = {
    "Asterix-MinAtar": (4, 5),
    "Breakout-MinAtar": (4, 3),
    "Freeway-MinAtar": (7, 3),
    "Seaquest-MinAtar": (10, 6),
    "SpaceInvaders-MinAtar": (6, 4),
}


def conv_parameter_count(channels: int, actions: int) -> int:
    """Young & Tian's network on 10 × 10 × C: 3×3×C×16 conv (+16), 8·8·16 -> 128 (+128), 128 -> A (+A)."""
    return (9 * channels * 16 + 16) + (8 * 8 * 16 * 128 + 128) + (128 * actions + actions)


def small_setup(env_id: str = "Breakout-MinAtar", **changes) -> dqn.Setup:
    fields = dict(env_id=env_id, total_steps=200, steps_per_segment=100, max_capacity=300, batch_size=8, loss="huber")
    return dqn.Setup(**{**fields, **changes})


SMALL_HP = dqn.Hyperparameters(memory_size=300, learning_starts=50, step_size=2.5e-4, epsilon_decay_steps=100)


def test_minatar_ids_are_gymnax_s_and_the_preset_s():
    import gymnax

    assert sorted(e for e in gymnax.registered_envs if e.endswith("-MinAtar")) == sorted(GAMES)
    assert settings.MINATAR_GAMES == tuple(GAMES)


@pytest.mark.parametrize("env_id", sorted(GAMES))
def test_conv_network_shapes_and_parameter_count(env_id):
    channels, actions = GAMES[env_id]
    setup = small_setup(env_id)
    net = dqn.network(setup)
    assert isinstance(net, conv.ConvQNetwork) and dqn.network_kind(setup) == "minatar_conv"
    stored = dqn.example_transition(setup)["obs"]
    assert stored.dtype == jnp.uint8 and stored.shape == (math.ceil(100 * channels / 8),)
    params = agent.init_params(jax.random.key(0), net, stored.shape, stored.dtype)
    assert sum(x.size for x in jax.tree.leaves(params)) == conv_parameter_count(channels, actions)
    kernel = params["params"]["Conv_0"]["kernel"]
    assert kernel.shape == (3, 3, channels, 16)
    assert params["params"]["Dense_0"]["kernel"].shape == (8 * 8 * 16, 128)
    batch = jnp.zeros((2, 5, *stored.shape), jnp.uint8)
    assert agent.q_values(net, params, batch).shape == (2, 5, actions)


def test_conv_network_on_unpacked_grids_equals_it_on_packed_ones():
    grids = jax.random.bernoulli(jax.random.key(1), 0.3, (6, 10, 10, 4)).astype(jnp.float32)
    packed_net, plain_net = conv.ConvQNetwork(3, packed_shape=(10, 10, 4)), conv.ConvQNetwork(3)
    params = plain_net.init(jax.random.key(2), grids[0])
    q_plain = plain_net.apply(params, grids)
    q_packed = packed_net.apply(params, packing.pack(grids, (10, 10, 4)))
    np.testing.assert_array_equal(np.asarray(q_plain), np.asarray(q_packed))
    assert float(jnp.abs(q_plain[0] - q_plain[1]).max()) > 0  # different grids, different Q-values


def test_patch_convolution_is_flax_conv_and_vmaps_over_runs_into_a_batched_matmul():
    grids = jax.random.bernoulli(jax.random.key(4), 0.3, (6, 10, 10, 4)).astype(jnp.float32)
    flax_conv, patch_conv = nn.Conv(16, (3, 3), padding="VALID"), conv.PatchConv(16, 3)
    params = flax_conv.init(jax.random.key(5), grids)
    assert jax.tree.map(np.array_equal, params, patch_conv.init(jax.random.key(5), grids)) == {
        "params": {"kernel": True, "bias": True}
    }  # same names, shapes and initial values
    params = jax.tree.map(lambda p: p + 0.1, params)  # a nonzero bias too
    expected = np.asarray(flax_conv.apply(params, grids))
    assert expected.shape == (6, 8, 8, 16) and np.abs(expected).max() > 1
    np.testing.assert_allclose(np.asarray(patch_conv.apply(params, grids)), expected, rtol=1e-6, atol=1e-6)
    # Vmapped over 5 runs with their own weights: no (grouped) convolution, one batched dot_general.
    stacked = jax.tree.map(lambda p: jnp.stack([p * (1 + r) for r in range(5)]), params)
    jaxpr = str(jax.make_jaxpr(jax.vmap(patch_conv.apply, (0, None)))(stacked, grids))
    assert "conv_general_dilated" not in jaxpr and jaxpr.count("dot_general") == 1


@pytest.mark.parametrize("shape", [(10, 10, 4), (10, 10, 7), (3,)])
def test_packing_round_trips_exactly(shape):
    cells = jax.random.bernoulli(jax.random.key(3), 0.5, (5, *shape)).astype(jnp.float32)
    packed = packing.pack(cells, shape)
    assert packed.dtype == jnp.uint8 and packed.shape == (5, packing.packed_size(shape))
    assert packing.packed_size(shape) == -(-math.prod(shape) // 8)
    back = packing.unpack(packed, shape)
    assert back.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(back), np.asarray(cells))


def test_pack_names_a_wrong_shape():
    with pytest.raises(ValueError, match=r"obs must end in the observation shape \(10, 10, 4\)"):
        packing.pack(jnp.zeros((10, 10, 3)), (10, 10, 4))


def test_unpack_and_the_networks_refuse_observations_not_packed_for_the_game():
    # The environment's own float grid was read as bytes (a [10, 10, 3] block of Q-values for one observation),
    # and another game's packed row was padded with zeros or cut: both are refused, naming what was expected.
    for bad in (jnp.zeros((10, 10, 4)), jnp.full((49,), 255, jnp.uint8), jnp.ones((125,), jnp.uint8), jnp.uint8(1)):
        with pytest.raises(ValueError, match=r"^packed: packed observations of shape \(10, 10, 4\) must be bytes "):
            packing.unpack(bad, (10, 10, 4))
    assert packing.unpack(jnp.full((2, 50), 255, jnp.int32), (10, 10, 4)).sum() == 800  # integer bytes are read
    setup = small_setup()
    params = dqn.init(jax.random.key(0), SMALL_HP, setup).params
    obs, _ = envs.make("Breakout-MinAtar")[0].reset(jax.random.key(1), envs.make("Breakout-MinAtar")[1])
    assert dqn.q_values(params, dqn.stored_observation(setup, obs), setup).shape == (3,)
    with pytest.raises(ValueError, match=r"^obs: packed observations of shape \(10, 10, 4\) .*got float32\[10, 10, 4\]"):
        dqn.q_values(params, obs, setup)
    freeway = small_setup("Freeway-MinAtar")
    with pytest.raises(ValueError, match=r"ending in 88 of them .*got uint8\[50\]"):
        dqn.q_values(dqn.init(jax.random.key(0), SMALL_HP, freeway).params, dqn.stored_observation(setup, obs), freeway)


def test_memory_and_state_keep_packed_observations_that_unpack_to_the_game_s():
    setup = small_setup()
    state = dqn.init(jax.random.key(0), SMALL_HP, setup)
    storage = state.memory.storage
    assert storage["obs"].dtype == jnp.uint8 and storage["obs"].shape == (300, 50)
    assert storage["next_obs"].dtype == jnp.uint8 and storage["next_obs"].shape == (300, 50)
    assert state.obs.dtype == jnp.uint8 and state.obs.shape == (50,)
    env, params = envs.make("Breakout-MinAtar")
    obs, _ = env.reset(jax.random.fold_in(jax.random.key(0), 3), params)  # the run's reset stream
    np.testing.assert_array_equal(np.asarray(packing.unpack(state.obs, (10, 10, 4))), np.asarray(obs))
    state, _ = jax.jit(dqn.advance, static_argnums=2)(state, SMALL_HP, setup)
    stored = np.asarray(packing.unpack(state.memory.storage["obs"][:100], (10, 10, 4)))
    assert set(np.unique(stored)) <= {0.0, 1.0} and stored.sum() > 0
    # Within an episode a transition's next observation is the following one's observation.
    same_episode = ~np.asarray(state.memory.storage["terminated"][:99], bool)
    np.testing.assert_array_equal(
        np.asarray(state.memory.storage["next_obs"][:99])[same_episode],
        np.asarray(state.memory.storage["obs"][1:100])[same_episode],
    )


def _actual_bytes(tree) -> int:
    leaves = jax.tree.leaves(tree)
    return sum(
        (jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x).nbytes for x in leaves
    )


def test_memory_estimate_counts_the_packed_storage_as_it_is():
    setup = small_setup(max_capacity=1000)
    hp = SMALL_HP._replace(memory_size=1000)
    sweep = sw.Sweep("dqn", seeds=1, setup=setup, fixed=hp._asdict())
    fp = plan_lib.footprint(sweep)
    state = dqn.init(jax.random.key(0), hp, setup)
    estimated = plan_lib._tree_bytes(fp.state)
    assert estimated == _actual_bytes(state)
    # The replay storage: 2 × 50 packed bytes + action, reward, terminated (4 bytes each) per slot.
    assert plan_lib._tree_bytes(fp.state.memory.storage) == 1000 * (2 * 50 + 12) == _actual_bytes(state.memory.storage)
    assert plan_lib.device_bytes(fp) >= 1.5 * estimated  # the run's device estimate is built on these bytes


def test_breakout_runs_a_few_hundred_steps_and_trains():
    setup = small_setup(total_steps=300)
    records, summary = jax.jit(dqn.run, static_argnums=2)(jax.random.key(0), SMALL_HP, setup)
    assert records["env_steps"].tolist() == [100, 200, 300]
    assert int(records["train_episodes"].sum()) >= 3  # a random Breakout episode lasts ~20-60 steps
    assert np.all(np.isfinite(np.asarray(records["td_loss"][1:])))
    # It trains: one update per step from learning_starts (50) on, on a loss that is not zero.
    assert int(summary["gradient_steps"]) == 300 - 50 + 1
    assert float(records["td_loss"][-1]) > 0


def test_prioritized_replay_and_aer_read_packed_observations():
    # Priorities and aER's TD errors come from packed minibatches too: the network unpacks them.
    setup = small_setup(sampler="prioritized", adaptive=True, subsample_size=20)
    hp = SMALL_HP._replace(memory_size=100, adaptive_num_old=50, adaptive_interval=20)
    records, summary = jax.jit(dqn.run, static_argnums=2)(jax.random.key(0), hp, setup)
    assert records["env_steps"].tolist() == [100, 200]
    assert int(summary["adaptive_checks"]) == 6  # every 20 steps once the memory of 100 is full: t = 100, ..., 200
    # Every check decided (none invalid: the TD errors of packed minibatches are finite) and moved the size by k.
    assert int(summary["adaptive_grows"]) + int(summary["adaptive_shrinks"]) == 6
    assert int(summary["adaptive_invalid"]) == 0
    assert all((int(c) - 100) % 20 == 0 for c in records["capacity"])
    assert int(summary["gradient_steps"]) == 151  # steps 50, ..., 200
    assert np.all(np.isfinite(np.asarray(records["td_loss"])))


@pytest.mark.slow
@pytest.mark.parametrize("env_id", sorted(set(GAMES) - {"Breakout-MinAtar"}))
def test_every_other_minatar_game_runs_a_few_hundred_steps(env_id):
    records, _ = jax.jit(dqn.run, static_argnums=2)(jax.random.key(0), SMALL_HP, small_setup(env_id))
    assert records["env_steps"].tolist() == [100, 200]
    assert np.all(np.isfinite(np.asarray(records["td_loss"])))


def test_mlp_reads_packed_minatar_observations_and_classic_games_stay_float():
    setup = small_setup(network="mlp", hidden_sizes=(32,))
    net = dqn.network(setup)
    assert isinstance(net, agent.QNetwork) and net.packed_shape == (10, 10, 4)
    state = dqn.init(jax.random.key(0), SMALL_HP, setup)
    assert state.params["params"]["Dense_0"]["kernel"].shape == (400, 32)
    assert dqn.q_values(state.params, state.obs, setup).shape == (3,)
    cartpole = dqn.Setup()
    assert dqn.network_kind(cartpole) == "mlp" and dqn.network(cartpole).packed_shape is None
    assert dqn.example_transition(cartpole)["obs"].dtype == jnp.float32


def test_network_is_checked_against_the_game():
    with pytest.raises(FieldError, match=r"network 'minatar_conv': .*CartPole-v1's have shape \(4,\)") as e:
        dqn.Setup(network="minatar_conv")
    assert e.value.field == "network"
    with pytest.raises(FieldError, match=r"network must be one of \('auto', 'mlp', 'minatar_conv'\), got 'cnn'"):
        small_setup(network="cnn")


def test_minatar_setting_is_young_and_tian_s_baseline():
    setup, hp = settings.minatar_setting("Breakout-MinAtar")
    assert (setup.total_steps, setup.max_capacity, setup.batch_size, setup.loss, setup.network) == (
        5_000_000,
        100_000,
        32,
        "huber",
        "minatar_conv",
    )
    assert (hp.memory_size, hp.step_size, hp.discount, hp.epsilon_end, hp.epsilon_decay_steps) == (
        100_000,
        2.5e-4,
        0.99,
        0.1,
        100_000,
    )
    assert (hp.learning_starts, hp.target_period, setup.train_frequency) == (5_000, 1_000, 1)
    assert hp.epsilon_ramp_start == 5_000  # random actions until the replay start, then the ramp (as theirs)
    assert setup.sticky_action_prob == 0.1  # MinAtar's sticky actions, which gymnax's games do not have
    dqn.check(hp, setup)
    short, short_hp = settings.minatar_setting("Freeway-MinAtar", 20_000, total_steps=40_000, segments=4)
    assert (short.max_capacity, short.steps_per_segment, short_hp.epsilon_decay_steps, short_hp.learning_starts) == (
        40_000,
        10_000,
        4_000,
        400,
    )
    assert short_hp.epsilon_ramp_start == 400
    with pytest.raises(ValueError, match="env_id must be one of"):
        settings.minatar_setting("CartPole-v1")
    with pytest.raises(ValueError, match=r"total_steps must be a multiple of 20 × segments = 1000"):
        settings.minatar_setting("Breakout-MinAtar", total_steps=12_345)
    with pytest.raises(ValueError, match=r"memory_size must be <= total_steps \(40000\)"):
        settings.minatar_setting("Breakout-MinAtar", 50_000, total_steps=40_000)
    # Without a memory size a shorter run keeps its whole run (the default 100,000 was refused as memory_size).
    whole, whole_hp = settings.minatar_setting("Breakout-MinAtar", total_steps=50_000)
    assert (whole.max_capacity, whole_hp.memory_size, whole_hp.adaptive_num_old) == (50_000, 50_000, 25_000)
    # MinAtar's Freeway terminates at its 2,500th step, gymnax's truncates there: the preset follows MinAtar and
    # does not bootstrap at Freeway's end; the other games' 1,000-step limit (gymnax's alone) bootstraps.
    assert [settings.minatar_setting(g)[0].truncation_bootstrap for g in settings.MINATAR_GAMES] == [
        True,
        True,
        False,
        True,
        True,
    ]


def random_policy_return(env_id: str, episodes: int, key: jax.Array) -> float:
    """Mean return of uniformly random actions over ``episodes`` whole episodes (time limit included)."""
    env, params = envs.make(env_id)

    def episode(k):
        obs, state = env.reset(k, params)

        def step(carry, step_key):
            state, total, done = carry
            action_key, env_key = jax.random.split(step_key)
            action = jax.random.randint(action_key, (), 0, env.num_actions)
            _, state, reward, terminated, _ = env.step_env(env_key, state, action, params)
            total = total + jnp.where(done, 0.0, reward)
            return (state, total, done | terminated | env.is_truncated(state, params)), None

        keys = jax.random.split(jax.random.fold_in(k, 1), params.max_steps_in_episode)
        return jax.lax.scan(step, (state, jnp.float32(0), jnp.bool_(False)), keys)[0][1]

    return float(jnp.mean(jax.jit(jax.vmap(episode))(jax.random.split(key, episodes))))


def test_random_policy_breakout_return_is_below_one():
    # The baseline the learning test must clear: measured 0.315 per episode over these 200 episodes
    # (about one brick in three episodes).
    random_return = random_policy_return("Breakout-MinAtar", 200, jax.random.key(0))
    assert 0.1 < random_return < 1.0


@pytest.mark.slow
def test_minatar_setting_learns_breakout_in_24k_steps():
    # 2 seeds × 24,000 steps of minatar_setting (random actions and no learning until step 240, then an ε ramp
    # of 2,400 steps; sticky actions 0.1): 82-104 s on the 2-core CPU. Measured: greedy returns (10 episodes) at
    # 6k/12k/18k/24k steps 1.6/3.4/4.7/4.4 and 2.0/2.7/2.8/4.7 (with the ramp from step 0: 1.2/1.9/2.7/3.5 and
    # 1.8/3.1/3.3/3.6; without sticky actions 2.6/4.6/6.0/7.2 and 1.8/2.4/6.0/8.6), against 0.315 for uniformly
    # random actions (the test above).
    setup, hp = settings.minatar_setting("Breakout-MinAtar", 24_000, total_steps=24_000, segments=4)
    run = jax.jit(jax.vmap(lambda k: dqn.run(k, hp, setup)))
    records, _ = run(jax.random.split(jax.random.key(0), 2))
    final = np.asarray(records["eval_return"][:, -1])
    assert final.mean() >= 2.5, final  # about 8 × the random policy's return
    assert np.all(final > np.asarray(records["eval_return"][:, 0]))  # every seed improved on its first evaluation
