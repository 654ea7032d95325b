"""LineSearch dynamics and the environment factory."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay import envs


def test_linesearch_moves_and_rewards_as_the_paper_says():
    env, params = envs.make("LineSearch", max_steps_in_episode=4)
    obs, state = env.reset(jax.random.key(0), params)
    assert obs.tolist() == [-5.0]
    positions, rewards, truncations = [], [], []
    for action in [1, 1, 0, 1]:
        obs, state, reward, terminated, truncated, info = env.step(jax.random.key(0), state, action, params)
        positions.append(float(info["final_observation"][0]))
        rewards.append(float(reward))
        truncations.append(bool(truncated))
        assert not bool(terminated)
    np.testing.assert_allclose(positions, [-4.99, -4.98, -4.99, -4.98], rtol=1e-6)
    np.testing.assert_allclose(rewards, 0.1 * np.array(positions) + 0.5, rtol=1e-5)
    assert truncations == [False, False, False, True]
    assert obs.tolist() == [-5.0], "auto-reset after truncation"


def test_linesearch_vmaps_over_params():
    env = envs.LineSearch()
    params = envs.LineSearchParams(initial_position=jnp.array([0.0, 1.0]), speed=jnp.array([0.5, 2.0]))
    params = jax.tree.map(lambda leaf: jnp.broadcast_to(leaf, (2,)), params)
    _, state = jax.vmap(env.reset, in_axes=(None, 0))(jax.random.key(0), params)
    step = jax.vmap(env.step, in_axes=(None, 0, None, 0))
    obs, state, reward, *_ = step(jax.random.key(0), state, 0, params)
    np.testing.assert_allclose(obs[:, 0], [-0.5, -1.0])
    np.testing.assert_allclose(reward, 0.1 * np.array([-0.5, -1.0]) + 0.5, rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, argument",
    [({"speed": float("nan")}, "speed"), ({"speed": -1.0}, "speed"), ({"max_steps_in_episode": 0}, "max_steps_in_episode")],
)
def test_bad_params(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        envs.make("LineSearch", **kwargs)


def test_unknown_env_id_lists_known_ones():
    with pytest.raises(ValueError, match="env_id 'CartPole-v0'.*CartPole-v1"):
        envs.make("CartPole-v0")
    with pytest.raises(ValueError, match=r"^env_id must be an environment id such as 'CartPole-v1', got None\.$"):
        envs.make(None)  # (an AttributeError on str.startswith, naming nothing)


def test_linesearch_refuses_an_unknown_parameter_and_a_speed_of_0_naming_them():
    """An unknown LineSearch parameter was the dataclass's TypeError, listing none of them, and speed 0 (both
    actions the same) passed, against the docstring's v > 0 (found by a probe)."""
    with pytest.raises(ValueError, match=r"^\['bogus'\] are not parameters of LineSearch; it has \['initial_position', "):
        envs.make("LineSearch", bogus=1.0)
    with pytest.raises(ValueError, match=r"^speed must be > 0\.0, got 0\.0\.$"):
        envs.make("LineSearch", speed=0.0)
    assert float(envs.make("LineSearch", speed=1e-3)[1].speed) == 1e-3


@pytest.mark.parametrize("env_id", ["Probe-OneStep", "Probe-TwoStep", "Probe-Truncation", "Probe-Chain"])
def test_the_probes_terminal_helpers_agree_with_the_flag_step_returns(env_id):
    """gymnax's ``is_terminated`` (and ``discount``, which reads it) said "not terminal" in every probe's state,
    also where ``step`` had just returned terminated=True: a learner using gymnax's helpers would bootstrap
    through the very terminations the probes test (found by a probe). Along a rollout (step_env, before the
    auto-reset) the helper now gives the flag step returned, at every step, truncated episodes included."""
    env, params = envs.make(env_id, max_steps_in_episode=5)
    for seed in range(4):  # (the truncation probe draws its flag at reset)
        _, state = env.reset(jax.random.key(seed), params)
        flags, helpers, discounts = [], [], []
        for t in range(5):
            _, state, _, terminated, _ = env.step_env(jax.random.key(t), state, t % 2, params)
            flags.append(bool(terminated))
            helpers.append(bool(env.is_terminated(state, params)))
            discounts.append(float(env.discount(state, params)))
            if terminated:
                break
        assert flags == helpers and discounts == [0.0 if f else 1.0 for f in flags], (seed, flags, helpers)
        assert flags[-1] or env_id == "Probe-Truncation"  # (every probe but a -1 flag terminates within 5 steps)


def test_gymnax_ids_pass_through():
    env, params = envs.make("CartPole-v1")
    obs, _ = env.reset(jax.random.key(0), params)
    assert obs.shape == (4,) and env.num_actions == 2


@pytest.mark.parametrize("overrides, message", [
    (dict(initial_position=1e39), "initial_position = 1e+39 does not fit a float32"),  # it ran as inf
    (dict(speed=1e-45), "speed = 1e-45 does not fit a float32"),  # it ran as 0: the agent never moved
    (dict(max_steps_in_episode=2**31), "max_steps_in_episode must be <= 2147483647"),  # it failed in JAX
])
def test_linesearch_params_that_would_run_as_other_values_are_refused(overrides, message):
    from jaxreplay.envs import linesearch as env_lib

    with pytest.raises(ValueError, match=re.escape(message)):
        env_lib.make_params(**overrides)


def test_setups_refuse_counts_beyond_int32():
    from jaxreplay.experiments import dqn
    from jaxreplay.experiments import linesearch as ls

    with pytest.raises(ValueError, match=re.escape("steps must be <= 2147483647")):
        ls.Setup(steps=2**31 + 5)
    with pytest.raises(ValueError, match=re.escape("total_steps must be <= 2147483647")):
        dqn.Setup(total_steps=2**32, steps_per_segment=2**31)


def test_probe_values_at_the_final_observation_and_bad_probe_parameters():
    """true_q at a finished chain's final observation was NaN at γ = 0 (an n-step target bootstraps from it);
    the truncation probe's γ = 1 divided by a Python zero; TwoStep's space lacked its final observation; a
    reward of 1e39 paid inf and a length of 2**31 failed at the first step (found by a probe)."""
    from jaxreplay.envs import probes

    env, params = probes.make("Probe-Chain")
    at = jnp.array([[0.0], [params.length - 1.0], [float(params.length)]])
    for gamma in (0.0, 0.5, 0.9, 1.0):
        q = np.asarray(env.true_q(at, params, gamma))[:, 0]
        assert q[-1] == 0.0 and q[1] == params.final_reward and np.all(np.isfinite(q)), (gamma, q)
    two, two_params = probes.make("Probe-TwoStep")
    assert float(two.true_q(jnp.array([[2.0]]), two_params, 0.9)[0, 0]) == 0.0
    assert bool(two.observation_space(two_params).contains(jnp.array([2.0])))
    trunc, trunc_params = probes.make("Probe-Truncation")
    assert np.isinf(np.asarray(trunc.true_q(jnp.array([[-1.0]]), trunc_params, 1.0))).all()
    for overrides, message in ((dict(reward=1e39), "reward = 1e+39 does not fit a float32"),
                               (dict(length=2**31), "length must be <= 2147483647"),
                               (dict(reward=[1.0, 2.0]), "reward must be a scalar")):
        with pytest.raises(ValueError, match=re.escape(message)):
            probes.make("Probe-Chain", **overrides)


@pytest.mark.parametrize("length", [1, 8, 200])
def test_chain_probe_values_hold_float32_precision_near_a_discount_of_one(length):
    """true_q took Σ γ^j as (1 − γ^k) / (1 − γ), which cancels in float32 near γ = 1: 2e-4 off at γ = 0.9999 and
    length 8 (found by a probe). Against a float64 sum of the same float32 γ, within a few float32 roundings
    of the terms (the value itself can be a small difference of two terms)."""
    from jaxreplay.envs import probes

    env, params = probes.make("Probe-Chain", length=length, reward=0.7, final_reward=-3.0)
    obs = jnp.arange(length + 1, dtype=jnp.float32)[:, None]
    outside = (-0.5, 1.0001, 1.5) if length <= 8 else ()  # (outside [0, 1] too)
    for gamma in (0.0, 1e-30, 1e-8, 0.5, 0.99, 0.9999, 0.999999, 1.0, *outside):  # (γ ≈ 0: NaN at k = 0 once)
        g = float(np.float32(gamma))
        q = np.asarray(env.true_q(obs, params, gamma))[:, 0].astype(np.float64)
        left = length - np.arange(length + 1)
        paid = np.array([sum(g**j for j in range(m - 1)) if m else 0.0 for m in left])
        last = np.array([g ** (m - 1) if m else 0.0 for m in left])
        exact = 0.7 * paid - 3.0 * last
        np.testing.assert_allclose(q, exact, rtol=0, atol=4e-7 * (0.7 * paid + 3.0 * last).max(), err_msg=str(gamma))


def test_an_environment_whose_data_cannot_be_downloaded_is_one_line_naming_env_id(monkeypatch):
    """gymnax downloads MNIST when it builds MNISTBandit-bsuite: offline, dqn.Setup raised a raw URLError from
    inside gymnax while checking the env (found by a probe)."""
    import urllib.error

    import gymnax

    from jaxreplay import envs
    from jaxreplay.experiments import dqn

    def offline(env_id, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(gymnax, "make", offline)
    message = r"^env_id 'MNISTBandit-bsuite': gymnax could not build it: URLError: .*run once with a network"
    with pytest.raises(ValueError, match=message):
        envs.make("MNISTBandit-bsuite")
    with pytest.raises(ValueError, match=message):
        dqn.Setup(env_id="MNISTBandit-bsuite")

    def cut_off(env_id, **kwargs):  # a download cut off leaves a truncated gzip, which gymnax never fetches again
        import gzip
        import io

        gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(b"x" * 100)[:20])).read()

    monkeypatch.setattr(gymnax, "make", cut_off)
    with pytest.raises(ValueError, match=r"^env_id 'MNISTBandit-bsuite': gymnax could not build it: EOFError: .*"
                                         r"gymnax keeps it in /tmp/mnist: delete that folder"):
        envs.make("MNISTBandit-bsuite")


def test_linesearch_episode_length_is_gymnaxs_field_and_dqn_evaluates_whole_episodes():
    """LineSearch kept its length in ``horizon`` beside gymnax's inherited ``max_steps_in_episode`` of 1, which
    DQN's greedy evaluation reads: its eval_return was the first step's reward (0.001 where the greedy episode
    returns 395), and env_params={"max_steps_in_episode": 5} was accepted and changed no episode (found by a
    probe). The length is now that field; ``horizon`` is its old name, warned."""
    from jaxreplay.agents import dqn as agent
    from jaxreplay.experiments import dqn
    from jaxreplay.experiments.dqn import game

    assert envs.LineSearchParams().max_steps_in_episode == 1000 and "horizon" not in envs.LineSearchParams.__dataclass_fields__
    with pytest.warns(DeprecationWarning, match="horizon is deprecated .*use max_steps_in_episode"):
        assert envs.make("LineSearch", horizon=7)[1].max_steps_in_episode == 7
    with pytest.raises(ValueError, match="max_steps_in_episode is given twice"), pytest.warns(DeprecationWarning):
        envs.make("LineSearch", horizon=7, max_steps_in_episode=8)
    with pytest.warns(DeprecationWarning, match="horizon is deprecated"):
        old = dqn.Setup(env_id="LineSearch", env_params={"horizon": 30}, total_steps=60, steps_per_segment=60)
    setup = dqn.Setup(env_id="LineSearch", env_params={"max_steps_in_episode": 30}, total_steps=60,
                      steps_per_segment=60, hidden_sizes=(8,), max_capacity=100, batch_size=8, eval_episodes=1)
    assert old.env_params == setup.env_params
    records, summary, state = dqn.run_batch(jax.random.split(jax.random.key(0), 2),
                                            dqn.Hyperparameters(memory_size=40, learning_starts=20), setup, True)
    assert summary["episodes"].tolist() == [2, 2]  # two 30-step episodes in 60 steps
    env, params = game.environment(setup)
    net = game.network(setup)
    for run in range(2):
        weights = jax.tree.map(lambda x: x[run], state.params)
        obs, env_state = env.reset(jax.random.key(0), params)
        total, steps, done = 0.0, 0, False
        while not done:  # the greedy episode, played until the environment ends it (LineSearch is deterministic)
            obs, env_state, reward, terminated, truncated, _ = env.step(
                jax.random.key(0), env_state, agent.greedy_action(net, weights, obs), params)
            total, steps, done = total + float(reward), steps + 1, bool(terminated | truncated)
        assert steps == 30
        np.testing.assert_allclose(records["eval_return"][run, -1], total, rtol=1e-5)


def _linesearch_moves(env, params, chosen, key):
    """The moves (+1 / -1 as LineSearch's action 1 / 0) that ``env`` executes for the ``chosen`` actions, read
    from the positions it observes (speed 1, no time limit reached): never from the wrapper's own state."""

    def step(state, xs):
        step_key, action = xs
        obs, state, *_ = env.step_env(step_key, state, action, params)
        return state, obs[0]

    _, state = env.reset(jax.random.key(0), params)
    _, positions = jax.lax.scan(step, state, (jax.random.split(key, len(chosen)), chosen))
    return np.diff(np.concatenate([[0.0], np.asarray(positions)])).astype(int)


def test_sticky_actions_repeat_the_previous_executed_action_with_their_probability():
    base, params = envs.make("LineSearch", speed=1.0, initial_position=0.0, max_steps_in_episode=10**6)
    steps, p = 20_000, 0.3
    chosen = jax.random.bernoulli(jax.random.key(1), 0.5, (steps,)).astype(jnp.int32)
    executed = (_linesearch_moves(envs.StickyActions(base, p), params, chosen, jax.random.key(2)) + 1) // 2
    chosen = np.asarray(chosen)
    previous = np.concatenate([[0], executed[:-1]])  # an episode starts with action 0 as the last one
    assert np.all((executed == chosen) | (executed == previous))  # the chosen action or the last one, nothing else
    # Where the two differ, the last one is executed with probability p: a binomial count within 3.3 sigma.
    differ = chosen != previous
    n, k = int(differ.sum()), int((executed != chosen)[differ].sum())
    assert n > 9_000 and abs(k - n * p) < 3.3 * np.sqrt(n * p * (1 - p)), (n, k)
    # Probability 0 executes every chosen action.
    moves = _linesearch_moves(envs.StickyActions(base, 0.0), params, jnp.asarray(chosen), jax.random.key(2))
    np.testing.assert_array_equal((moves + 1) // 2, chosen)


def test_sticky_actions_wrap_the_game_and_start_each_episode_at_action_0():
    base, params = envs.make("Breakout-MinAtar")
    env = envs.StickyActions(base, 0.1)
    assert env.action_space(params).n == base.action_space(params).n == env.num_actions == 3
    assert env.observation_space(params).shape == (10, 10, 4) and "sticky actions, p = 0.1" in env.name
    obs, state = env.reset(jax.random.key(0), params)
    np.testing.assert_array_equal(obs, base.reset(jax.random.key(0), params)[0])
    assert int(state.last_action) == 0
    # An auto-reset (gymnax's step at the time limit) starts the new episode at action 0 again.
    short = params.replace(max_steps_in_episode=2)
    for i in range(2):
        obs, state, _, terminated, truncated, _ = env.step(jax.random.key(i), state, 2, short)
        assert int(state.last_action) == (2 if i == 0 else 0), i
    assert bool(truncated) and not bool(terminated)
    for bad in (1.0, -0.1, float("nan"), True, np.bool_(True), "0.1", 0.99999999):  # (the last: 1.0 in float32)
        with pytest.raises(ValueError, match=r"probability must be a number in \[0, 1\) \(below 1 in float32\)"):
            envs.StickyActions(base, bad)
    assert envs.StickyActions(base, np.float32(0.25)).probability == 0.25  # NumPy scalars are numbers too


def test_deprecation_warnings_reach_a_users_script_under_default_filters(tmp_path):
    """Python shows a DeprecationWarning by default only where it is attributed to __main__; the old parameter
    name horizon warned with a fixed stacklevel that pointed into jaxreplay (make_params, dqn.Setup's check), so
    a plain script never saw it (found by a probe). Each warning now names the script's own line."""
    import os
    import subprocess
    import sys

    script = tmp_path / "user.py"
    script.write_text(
        "from jaxreplay import adaptive, envs\n"
        "from jaxreplay.experiments import dqn\n"
        "envs.make_params(horizon=50)\n"
        "envs.make('LineSearch', horizon=50)\n"
        "dqn.Setup(env_id='LineSearch', env_params={'horizon': 50})\n"
        "dqn.DQNState\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    err = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True).stderr
    lines = [line for line in err.splitlines() if "DeprecationWarning" in line]
    assert [line.split(": DeprecationWarning")[0] for line in lines] == [f"{script}:{n}" for n in (3, 4, 5, 6)], err

