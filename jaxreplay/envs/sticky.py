"""Sticky actions: an environment that sometimes repeats its previous action instead of the chosen one.

Machado et al. (2018, *Revisiting the Arcade Learning Environment*) made
Atari stochastic this way, and MinAtar (Young & Tian 2019) adopted it: with
probability ``p`` (MinAtar's default 0.1) a step executes the action the
environment executed last, otherwise the one the agent chose; either way the
executed action becomes the new "last" one. gymnax's MinAtar games have no
sticky actions, so :class:`StickyActions` wraps any gymnax environment with
them (the DQN experiment does so for ``Setup.sticky_action_prob > 0``).

What the agent stores and learns from is the action it chose, as MinAtar's
DQN does: the repetition is part of the environment's dynamics. A new
episode starts with action 0 as the last one (gymnax's MinAtar games list
their no-op first); a MinAtar environment that keeps its last action across
a reset differs from this in at most one step an episode.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from jaxreplay._validation import FieldError

__all__ = ["StickyActions", "StickyState", "checked_probability"]


def checked_probability(name: str, value: object) -> float:
    """``value`` as a Python float, checked to be a sticky-action probability: a real number (Python or NumPy,
    not a bool) in ``[0, 1)`` whose float32 value, the one a step compares with, is below 1 as well.

    Raises:
        FieldError: (a ValueError) naming ``name``, for anything else (``0.99999999`` is 1.0 in float32: every
            step would repeat the last action, and the chosen one would never be executed).
    """
    real = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not real or not 0 <= float(value) < 1 or np.float32(value) >= 1:  # type: ignore[arg-type]
        raise FieldError(name, f"must be a number in [0, 1) (below 1 in float32), got {value!r}.")
    return float(value)  # type: ignore[arg-type]


@struct.dataclass
class StickyState:
    """The wrapped environment's state and the action it executed last (``int32[]``)."""

    env_state: Any
    last_action: jax.Array


class StickyActions(environment.Environment):
    """``env`` with sticky actions: each step repeats the last executed action with probability ``probability``.

    A gymnax environment like the one it wraps (same parameters, spaces,
    observations, rewards and time limit); its state is a :class:`StickyState`.
    Each step splits its key in two: one draw decides whether the action
    sticks, the other key steps ``env``.

    Args:
        env: a gymnax environment with discrete actions.
        probability: ``p`` in ``[0, 1)``; 0 never repeats (the same transitions as ``env``, from other keys).

    Raises:
        ValueError: ``probability`` is not a number in ``[0, 1)``.
    """

    def __init__(self, env: environment.Environment, probability: float):
        self._env = env
        self.probability = checked_probability("probability", probability)

    @property
    def default_params(self) -> Any:
        return self._env.default_params

    def step_env(self, key: jax.Array, state: StickyState, action: Any, params: Any):
        """One step of ``env`` on the chosen ``action``, or on ``state.last_action`` with probability ``p``."""
        stick_key, step_key = jax.random.split(key)
        executed = jnp.where(
            jax.random.uniform(stick_key, (), jnp.float32) < self.probability, state.last_action, action
        )
        executed = jnp.asarray(executed, jnp.int32)
        obs, env_state, reward, terminated, info = self._env.step_env(step_key, state.env_state, executed, params)
        return obs, StickyState(env_state, executed), reward, terminated, info

    def reset_env(self, key: jax.Array, params: Any):
        """A new episode of ``env``, its last action 0."""
        obs, env_state = self._env.reset_env(key, params)
        return obs, StickyState(env_state, jnp.int32(0))

    def get_obs(self, state: StickyState, params: Any = None, key: jax.Array | None = None) -> Any:
        """``env``'s observation of ``state``."""
        return self._env.get_obs(state.env_state, params, key)

    def is_terminated(self, state: StickyState, params: Any) -> jax.Array:
        """Whether ``env``'s episode has terminated."""
        return self._env.is_terminated(state.env_state, params)

    def is_truncated(self, state: StickyState, params: Any) -> jax.Array:
        """Whether ``env``'s episode has reached its time limit."""
        return self._env.is_truncated(state.env_state, params)

    @property
    def name(self) -> str:
        return f"{self._env.name} (sticky actions, p = {self.probability:g})"

    @property
    def num_actions(self) -> int:
        return self._env.num_actions

    def action_space(self, params: Any = None):
        """``env``'s action space."""
        return self._env.action_space(params)

    def observation_space(self, params: Any):
        """``env``'s observation space."""
        return self._env.observation_space(params)

    def state_space(self, params: Any):
        """``env``'s state space (of the wrapped state)."""
        return self._env.state_space(params)
