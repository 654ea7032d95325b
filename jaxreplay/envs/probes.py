"""Probe environments with known Q-values, for testing value-based agents.

Each is a tiny gymnax :class:`~gymnax.environments.environment.Environment`
(``reset(key, params) -> (obs, state)``; ``step(key, state, action, params)
-> (obs, state, reward, terminated, truncated, info)`` with auto-reset and
``info["final_observation"]``) whose action values under any policy are
known in closed form, given by its ``true_q(obs, params, discount)``. A
correct learner must converge to them; each probe isolates one piece of the
learner (Andy Jones's "debugging RL" probes, plus a time-limit probe):

* ``"Probe-OneStep"`` (:class:`OneStepProbe`): observation ``[0]``, two
  actions, one step, then termination. Reward ``reward + action_bonus ·
  action``. ``Q(0, a) = reward + action_bonus · a``: checks the regression
  and the action indexing; no bootstrapping.
* ``"Probe-TwoStep"`` (:class:`TwoStepProbe`): observations ``[0]`` then
  ``[1]``, two actions that do the same, reward ``first_reward`` on the
  first step and ``reward`` on the second, which terminates.
  ``Q([1], ·) = reward`` and ``Q([0], ·) = first_reward + γ · reward``:
  checks discounting and bootstrapping through a non-terminal step.
* ``"Probe-Truncation"`` (:class:`TruncationProbe`): a flag ``f = ±1`` drawn
  at reset is the observation and never changes; every step pays
  ``reward``. With ``f = +1`` the first step *terminates*; with ``f = -1``
  the episode never terminates but is *truncated* by the time limit
  ``max_steps_in_episode`` (default 1). The continuing task's values are
  ``Q([+1], ·) = reward`` and ``Q([-1], ·) = reward / (1 - γ)``. A learner
  that treats truncation as termination learns ``Q([-1]) = reward`` (for
  ``max_steps_in_episode = 1``); one that bootstraps through termination
  learns ``Q([+1]) = reward / (1 - γ)``.
* ``"Probe-Chain"`` (:class:`ChainProbe`): positions ``0 .. length - 1``
  (the observation is the position), two actions that do the same, one step
  forward per step. Every step pays ``reward`` except the last, from
  position ``length - 1``, which pays ``final_reward`` and terminates; a time
  limit ``max_steps_in_episode`` below ``length`` truncates instead. With
  ``m = length - i`` steps left, ``Q([i], ·) = reward · (1 - γ^(m-1)) /
  (1 - γ) + γ^(m-1) · final_reward`` (the untruncated task's values). Every
  n-step target is analytic too: it sums ``min(n, m)`` known rewards and
  bootstraps from position ``i + n``, so it checks n-step returns
  (:mod:`jaxreplay.returns`) across terminations and truncations.

All are deterministic apart from the truncation probe's flag; keys are
accepted for the API.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from jaxreplay import _validation
from jaxreplay._typing import ArrayLike

PROBE_IDS = ("Probe-OneStep", "Probe-TwoStep", "Probe-Truncation", "Probe-Chain")
"""The ids :func:`jaxreplay.envs.make` accepts for the probe environments."""


@struct.dataclass
class ProbeState(environment.EnvState):
    """``time``: int32[] steps taken this episode; ``flag``: float32[] (the truncation probe's ±1, else 0)."""

    flag: jax.Array


@struct.dataclass
class OneStepParams(environment.EnvParams):
    """``reward``: reward of action 0; ``action_bonus``: extra reward of action 1."""

    reward: ArrayLike = 1.0
    action_bonus: ArrayLike = 0.0
    max_steps_in_episode: ArrayLike = 10


@struct.dataclass
class TwoStepParams(environment.EnvParams):
    """``first_reward``: reward of the first step; ``reward``: of the second (terminal) one."""

    first_reward: ArrayLike = 0.0
    reward: ArrayLike = 1.0
    max_steps_in_episode: ArrayLike = 10


@struct.dataclass
class TruncationParams(environment.EnvParams):
    """``reward`` per step; ``max_steps_in_episode``: the time limit that truncates ``f = -1`` episodes."""

    reward: ArrayLike = 1.0
    max_steps_in_episode: ArrayLike = 1


@struct.dataclass
class ChainParams(environment.EnvParams):
    """``length`` positions; ``reward`` per step but the last, which pays ``final_reward``; a time limit."""

    length: ArrayLike = 4
    reward: ArrayLike = 1.0
    final_reward: ArrayLike = 10.0
    max_steps_in_episode: ArrayLike = 1000


ProbeParams = OneStepParams | TwoStepParams | TruncationParams | ChainParams
"""The parameters of any probe environment."""


class _Probe(environment.Environment):
    """Shared plumbing: one-dimensional float observation, two actions."""

    def get_obs(self, state: ProbeState, params: ProbeParams | None = None, key: jax.Array | None = None) -> jax.Array:
        return jnp.reshape(self._obs_value(state), (1,)).astype(jnp.float32)

    def _obs_value(self, state: ProbeState) -> jax.Array:
        raise NotImplementedError

    @property
    def num_actions(self) -> int:
        return 2

    def action_space(self, params: ProbeParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observation_space(self, params: ProbeParams) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def is_terminated(self, state: ProbeState, params: ProbeParams) -> jax.Array:
        """``bool[]``: whether the episode ended in ``state`` (each probe's ``step_env`` reports this very
        value, so gymnax's ``discount(state)`` agrees with the flag ``step`` returned)."""
        raise NotImplementedError

    def _state(self, time: ArrayLike, flag: ArrayLike = 0.0) -> ProbeState:
        return ProbeState(time=jnp.asarray(time, jnp.int32), flag=jnp.asarray(flag, jnp.float32))

    # The probes' reset_env / step_env share these contracts; inspect.getdoc (help())
    # finds the docstrings here for each probe's override.
    def reset_env(self, key, params):
        """``(obs float32[1], state)`` at the probe's first observation."""
        raise NotImplementedError

    def step_env(self, key, state, action, params):
        """``(obs float32[1], state, reward float32[], terminated bool[], info {})``.

        gymnax's ``step`` adds truncation and the auto-reset.
        """
        raise NotImplementedError


class OneStepProbe(_Probe):
    """One step, reward ``reward + action_bonus · action``, then termination (module docstring)."""

    @property
    def default_params(self) -> OneStepParams:
        return OneStepParams()

    def _obs_value(self, state: ProbeState) -> jax.Array:
        return jnp.zeros((), jnp.float32)

    def reset_env(self, key, params):
        state = self._state(0)
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        reward = params.reward + params.action_bonus * jnp.asarray(action, jnp.float32)
        state = self._state(state.time + 1)
        return self.get_obs(state), state, jnp.asarray(reward, jnp.float32), self.is_terminated(state, params), {}

    def is_terminated(self, state: ProbeState, params: OneStepParams) -> jax.Array:
        return state.time >= 1

    def true_q(self, obs: jax.Array, params: OneStepParams, discount: ArrayLike) -> jax.Array:
        """``float32[..., 2]`` for observations ``float32[..., 1]`` (only ``[0]`` occurs)."""
        q = jnp.stack([jnp.float32(params.reward), jnp.float32(params.reward + params.action_bonus)])
        return jnp.broadcast_to(q, (*obs.shape[:-1], 2))

    @property
    def name(self) -> str:
        return "Probe-OneStep"


class TwoStepProbe(_Probe):
    """Observations ``[0]`` then ``[1]``; the second step pays ``reward`` and terminates."""

    @property
    def default_params(self) -> TwoStepParams:
        return TwoStepParams()

    def _obs_value(self, state: ProbeState) -> jax.Array:
        return state.time.astype(jnp.float32)

    def observation_space(self, params: TwoStepParams) -> spaces.Box:
        """``[0]``, ``[1]``, and ``[2]``: the final observation of a finished episode."""
        return spaces.Box(0.0, 2.0, (1,), jnp.float32)

    def reset_env(self, key, params):
        state = self._state(0)
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        last = state.time >= 1
        reward = jnp.where(last, params.reward, params.first_reward).astype(jnp.float32)
        state = self._state(state.time + 1)
        return self.get_obs(state), state, reward, self.is_terminated(state, params), {}

    def is_terminated(self, state: ProbeState, params: TwoStepParams) -> jax.Array:
        return state.time >= 2

    def true_q(self, obs: jax.Array, params: TwoStepParams, discount: ArrayLike) -> jax.Array:
        """``float32[..., 2]``: ``reward`` at ``[1]``, ``first_reward + γ·reward`` at ``[0]``, 0 at ``[2]`` (the
        final observation: nothing is left to earn)."""
        value = jnp.where(obs[..., 0] >= 0.5, params.reward, params.first_reward + discount * params.reward)
        value = jnp.where(obs[..., 0] >= 1.5, 0.0, value)
        return jnp.repeat(value[..., None], 2, axis=-1).astype(jnp.float32)

    @property
    def name(self) -> str:
        return "Probe-TwoStep"


class TruncationProbe(_Probe):
    """Flag ``f = ±1``: ``+1`` terminates after one step, ``-1`` is only truncated by the time limit."""

    @property
    def default_params(self) -> TruncationParams:
        return TruncationParams()

    def _obs_value(self, state: ProbeState) -> jax.Array:
        return state.flag

    def reset_env(self, key, params):
        flag = jnp.where(jax.random.bernoulli(key, jnp.float32(0.5)), 1.0, -1.0)
        state = self._state(0, flag)
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        state = self._state(state.time + 1, state.flag)
        return (
            self.get_obs(state),
            state,
            jnp.asarray(params.reward, jnp.float32),
            self.is_terminated(state, params),
            {},
        )

    def is_terminated(self, state: ProbeState, params: TruncationParams) -> jax.Array:
        return (state.flag > 0) & (state.time >= 1)

    def true_q(self, obs: jax.Array, params: TruncationParams, discount: ArrayLike) -> jax.Array:
        """``float32[..., 2]``: ``reward`` at ``[+1]``, ``reward / (1 - γ)`` at ``[-1]``."""
        gamma = jnp.float32(discount)  # (a Python 1.0 divided by zero; γ = 1 gives inf, the undiscounted sum)
        value = jnp.where(obs[..., 0] > 0, params.reward, jnp.float32(params.reward) / (1.0 - gamma))
        return jnp.repeat(value[..., None], 2, axis=-1).astype(jnp.float32)

    @property
    def name(self) -> str:
        return "Probe-Truncation"


class ChainProbe(_Probe):
    """Positions ``0 .. length - 1``; ``reward`` per step, ``final_reward`` on the last, which terminates."""

    @property
    def default_params(self) -> ChainParams:
        return ChainParams()

    def _obs_value(self, state: ProbeState) -> jax.Array:
        return state.time.astype(jnp.float32)

    def observation_space(self, params: ChainParams) -> spaces.Box:
        """Positions in ``[0, length]`` (``length``: the final observation of a finished chain)."""
        return spaces.Box(0.0, jnp.float32(params.length), (1,), jnp.float32)

    def reset_env(self, key, params):
        state = self._state(0)
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        last = state.time >= params.length - 1
        reward = jnp.where(last, params.final_reward, params.reward).astype(jnp.float32)
        state = self._state(state.time + 1)
        return self.get_obs(state), state, reward, self.is_terminated(state, params), {}

    def is_terminated(self, state: ProbeState, params: ChainParams) -> jax.Array:
        return state.time >= params.length

    def true_q(self, obs: jax.Array, params: ChainParams, discount: ArrayLike) -> jax.Array:
        """``float32[..., 2]`` for positions ``float32[..., 1]`` in ``[0, length]`` (module docstring); 0 at
        ``length``, the final observation of a finished chain (nothing is left to earn: it was NaN at γ = 0
        and a made-up value at other γ, and an n-step target bootstraps from it)."""
        left = jnp.float32(params.length) - obs[..., 0]
        steps_left = jnp.maximum(left, 1.0)
        gamma = jnp.float32(discount)
        k = steps_left - 1.0
        # γ^k and Σ_{j < k} γ^j = (γ^k − 1) / (γ − 1), for γ > 0 (γ ≠ 1) from k·log1p(γ − 1) with expm1 for the
        # sum: 1 − γ^k over 1 − γ lost ~3 digits of float32 near γ = 1 (2e-4 at γ = 0.9999, length 8). At γ = 1
        # k ones; for γ ≤ 0 (log1p is undefined) the plain quotient; at k = 0 none and γ^0 = 1 (0·log 0 is NaN).
        logarithmic = (gamma > 0.0) & (gamma != 1.0)
        d = jnp.where(logarithmic, gamma - 1.0, -0.5)  # (a safe argument where the branch is not taken)
        exponent = jnp.where(k == 0.0, 0.0, k * jnp.log1p(d))
        power = jnp.power(gamma, k)
        plain = jnp.where(gamma == 1.0, k, (1.0 - power) / jnp.where(gamma == 1.0, 1.0, 1.0 - gamma))
        before_last = jnp.where(logarithmic, jnp.exp(exponent), power)
        paid = jnp.where(logarithmic, jnp.expm1(exponent) / d, plain)
        value = jnp.where(left >= 1.0, params.reward * paid + before_last * params.final_reward, 0.0)
        return jnp.repeat(value[..., None], 2, axis=-1).astype(jnp.float32)

    @property
    def name(self) -> str:
        return "Probe-Chain"


_CLASSES = {
    "Probe-OneStep": OneStepProbe,
    "Probe-TwoStep": TwoStepProbe,
    "Probe-Truncation": TruncationProbe,
    "Probe-Chain": ChainProbe,
}


def make(env_id: str, **overrides: ArrayLike) -> tuple[_Probe, ProbeParams]:
    """``(env, params)`` for a probe id, with checked parameter overrides.

    Raises:
        ValueError: unknown id, unknown parameter, non-finite reward,
            ``max_steps_in_episode < 1`` or ``length < 1`` (the message names
            the argument).
    """
    if env_id not in _CLASSES:
        raise ValueError(f"env_id {env_id!r} is not a probe; choose one of {PROBE_IDS}.")
    env = _CLASSES[env_id]()
    defaults = env.default_params
    _validation.check_known(env_id, overrides, defaults.__dataclass_fields__)
    params = defaults.replace(**overrides)
    for name in ("reward", "action_bonus", "first_reward", "final_reward"):
        if hasattr(params, name):
            _validation.check_float(name, getattr(params, name), scalar=True)
            _validation.check_float32(name, getattr(params, name))  # (1e39 paid inf every step)
    for name in ("max_steps_in_episode", "length"):
        if hasattr(params, name):  # (2**31 failed at the first step; a list, with a TypeError naming nothing)
            _validation.check_int(name, getattr(params, name), low=1, high=_validation.INT32_MAX, scalar=True)
    return env, params
