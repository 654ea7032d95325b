"""DQN's greedy evaluation (``game.evaluate``): it stops once every episode has ended, in blocks of
``EVAL_BLOCK`` steps, and gives the returns of one scan over all ``max_steps_in_episode`` steps bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay.agents import dqn as agent
from jaxreplay.experiments import dqn
from jaxreplay.experiments.dqn import game
from jaxreplay.experiments.dqn import state as dqn_state

RUNS = 8


def _one_scan(key, params, setup):
    """The reference: every episode scanned over all its ``max_steps_in_episode`` steps, rewards after the
    end masked (what evaluation computed before it stopped early)."""
    env, env_params = game.environment(setup)
    net = game.network(setup)

    def episode(episode_key):
        reset_key, steps_key = jax.random.split(episode_key)
        obs, env_state = env.reset(reset_key, env_params)

        def step(carry, step_key):
            obs, env_state, total, done = carry
            action = agent.greedy_action(net, params, obs)
            obs, env_state, reward, terminated, _ = env.step_env(step_key, env_state, action, env_params)
            total = total + jnp.where(done, 0.0, jnp.asarray(reward, jnp.float32))
            done = done | terminated | env.is_truncated(env_state, env_params)
            return (game.stored_observation(setup, obs), game._strip_weak_types(env_state), total, done), None

        obs, env_state = game.stored_observation(setup, obs), game._strip_weak_types(env_state)
        carry = (obs, env_state, jnp.float32(0), jnp.bool_(False))
        steps = jax.random.split(steps_key, game._max_episode_steps(setup))
        return jax.lax.scan(step, carry, steps)[0][2]

    return jnp.mean(jax.vmap(episode)(jax.random.split(key, setup.eval_episodes)))


def _returns(evaluate, setup, scale, runs=RUNS):
    """``runs`` runs' evaluation (vmapped, as in a batch) from freshly initialised networks whose weights are
    multiplied by ``scale`` (larger weights: more decided, more varied policies)."""
    keys = jax.random.split(jax.random.key(3), runs)
    params = jax.vmap(lambda k: dqn_state.init(k, dqn.Hyperparameters(), setup))(keys).params
    params = jax.tree.map(lambda p: p * scale, params)
    eval_keys = jax.random.split(jax.random.key(9), runs)
    return np.asarray(jax.jit(jax.vmap(lambda k, p: evaluate(k, p, setup)))(eval_keys, params))


@pytest.mark.parametrize(
    "env_id, env_params, block, scale",
    [
        # 500 steps in blocks of 50; some policies balance for a while, most fall within a block.
        ("CartPole-v1", (), None, 3.0),
        # 130 steps in blocks of 7: the last block runs 3 steps past the time limit, masked.
        ("CartPole-v1", (("max_steps_in_episode", 130),), 7, 3.0),
        # Every episode runs to the time limit (200 steps): no early stop, the same 4 blocks.
        ("MountainCar-v0", (), None, 1.0),
        # Bit-packed observations, 1000 steps, episodes of a few dozen steps.
        ("Breakout-MinAtar", (), None, 1.0),
    ],
)
def test_evaluation_stops_early_with_the_returns_of_one_scan_bit_for_bit(env_id, env_params, block, scale, monkeypatch):
    if block is not None:
        monkeypatch.setattr(game, "EVAL_BLOCK", block)
    setup = dqn.Setup(env_id=env_id, env_params=env_params, hidden_sizes=(16,), eval_episodes=3)
    runs = 2 if env_id == "Breakout-MinAtar" else RUNS  # (the reference's 1000 steps of a conv net are not cheap)
    blocked = _returns(game.evaluate, setup, scale, runs)
    reference = _returns(_one_scan, setup, scale, runs)
    assert blocked.tobytes() == reference.tobytes()
    assert np.all(np.isfinite(blocked))
    if env_id == "CartPole-v1":
        # The runs' episodes differ in length (the test would not see a wrongly stopped or masked block otherwise).
        assert len(np.unique(blocked)) > RUNS // 2
    if env_id == "MountainCar-v0":
        assert np.all(blocked == -200.0)
