"""LineSearch: the paper's one-dimensional game, as a gymnax ``Environment``.

The agent sits at a real position ``x``; action 0 moves it by ``-v``, action 1
by ``+v``; the reward of a move is linear in the position it lands on::

    x' = x + a,        r = β1 · (x + a) + β2,        a ∈ {-v, +v}.

There is no natural terminal state; an episode is truncated after
``max_steps_in_episode`` steps (the paper runs one episode of T = 1000 steps),
gymnax's field for every game's time limit, which the DQN experiment's greedy
evaluation also reads.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from jaxreplay import _validation
from jaxreplay._typing import ArrayLike

REAL_WEIGHTS = ("reward", "fixed_point")
"""The two readings of the paper's "real weights" (0.1, 0.5) for γ > 0 (docs/paper_readings.md §8): the
reward weights β, or the TD fixed point θ* itself."""


def fixed_point_and_rewards(
    slope: ArrayLike, intercept: ArrayLike, speed: ArrayLike, discount: ArrayLike, real_weights: str
) -> tuple[ArrayLike, ArrayLike, ArrayLike, ArrayLike]:
    """(β1, β2, θ1*, θ2*) from the given real weights, under either reading.

    ``real_weights="reward"``: (slope, intercept) are the reward weights β;
    the TD fixed point is θ* = (β1/(1−γ), (β2 + γ v |θ1*|)/(1−γ)).
    ``real_weights="fixed_point"``: (slope, intercept) are θ* itself and
    β1 = (1−γ)θ1*, β2 = (1−γ)θ2* − γ v |θ1*|. Both coincide at γ = 0.
    """
    g = discount
    if real_weights == "reward":
        beta1, beta2 = slope, intercept
        th1 = beta1 / (1.0 - g)
        th2 = (beta2 + g * speed * jnp.abs(th1)) / (1.0 - g)
    else:
        th1, th2 = slope, intercept
        beta1 = (1.0 - g) * th1
        beta2 = (1.0 - g) * th2 - g * speed * jnp.abs(th1)
    return beta1, beta2, th1, th2


@struct.dataclass
class LineSearchParams(environment.EnvParams):
    """LineSearch parameters (the paper's defaults).

    Attributes:
        initial_position: x0, where every episode starts (paper: −5).
        speed: v > 0, the length of a move (paper: 0.01).
        reward_slope: β1 in r = β1·x' + β2 (paper: 0.1).
        reward_intercept: β2 (paper: 0.5).
        max_steps_in_episode: episode length in steps (paper: T = 1000); gymnax's
            field, which the DQN evaluation reads as every game's (it was an unused
            inherited 1 beside a ``horizon`` field: LineSearch's greedy evaluation
            played one step).

    Every field is a pytree leaf: traced inside a jitted or vmapped step (the
    experiments vmap the reward weights over a sweep).
    """

    initial_position: ArrayLike = -5.0
    speed: ArrayLike = 0.01
    reward_slope: ArrayLike = 0.1
    reward_intercept: ArrayLike = 0.5
    max_steps_in_episode: ArrayLike = 1000


RENAMED_PARAMS = {"horizon": "max_steps_in_episode"}
"""Old parameter names, accepted for one release with a ``DeprecationWarning`` naming the new one."""


def renamed_param(name: str) -> str:
    """The current name of parameter ``name`` (warning where ``name`` is an old spelling)."""
    if name not in RENAMED_PARAMS:
        return name
    from jaxreplay import _deprecated

    new = RENAMED_PARAMS[name]
    _deprecated.warn(
        f"LineSearch's parameter {name} is deprecated (removed after {_deprecated.REMOVED_AFTER}): use {new}."
    )
    return new


@struct.dataclass
class LineSearchState(environment.EnvState):
    """``position``: float32[] x; ``time``: int32[] steps taken this episode."""

    position: jax.Array


def make_params(**overrides: ArrayLike) -> LineSearchParams:
    """:class:`LineSearchParams` with checked overrides (ValueError naming a bad one, or naming an unknown
    parameter and listing the known ones)."""
    renamed = {renamed_param(name): value for name, value in overrides.items()}
    if len(renamed) < len(overrides):
        raise _validation.FieldError("max_steps_in_episode", "is given twice (once as horizon, its old name).")
    # (The dataclass's TypeError listed none of the known names.)
    _validation.check_known("LineSearch", renamed, LineSearchParams.__dataclass_fields__)
    params = LineSearchParams(**renamed)
    for name in ("initial_position", "speed", "reward_slope", "reward_intercept"):
        value = getattr(params, name)
        # (v = 0 would make both actions leave x where it is.)
        _validation.check_float(name, value, low=0.0 if name == "speed" else None, low_inclusive=name != "speed")
        _validation.check_float32(name, value)  # (1e39 would run as inf, 1e-45 as 0)
    length = params.max_steps_in_episode
    _validation.check_int("max_steps_in_episode", length, low=1, high=_validation.INT32_MAX)  # an int32 on the device
    return params


def move(action: ArrayLike, params: LineSearchParams) -> jax.Array:
    """The displacement a ∈ {−v, +v} of ``action`` ∈ {0, 1}. Shape of ``action``."""
    speed = jnp.asarray(params.speed)
    return jnp.where(jnp.asarray(action) == 1, speed, -speed)


class LineSearch(environment.Environment[LineSearchState, LineSearchParams]):
    """The LineSearch game with the gymnax API.

    ``reset(key, params) -> (obs, state)`` and
    ``step(key, state, action, params) -> (obs, state, reward, terminated,
    truncated, info)``; the observation is ``float32[1]`` holding ``x``.
    Deterministic: keys are accepted for the API and unused.
    """

    @property
    def default_params(self) -> LineSearchParams:
        return LineSearchParams()

    def step_env(
        self, key: jax.Array, state: LineSearchState, action: ArrayLike, params: LineSearchParams
    ) -> tuple[jax.Array, LineSearchState, jax.Array, jax.Array, dict]:
        """One move, x' = x + a and r = β1·x' + β2.

        Returns ``(obs float32[1], state, reward float32[], terminated bool[] (always False), info {})``.
        """
        del key
        position = state.position + move(action, params)
        reward = jnp.asarray(params.reward_slope) * position + params.reward_intercept
        state = LineSearchState(time=state.time + 1, position=position)
        terminated = jnp.zeros((), bool)
        return self.get_obs(state), state, reward, terminated, {}

    def reset_env(self, key: jax.Array, params: LineSearchParams) -> tuple[jax.Array, LineSearchState]:
        """``(obs float32[1], state)`` at x = x0, time 0."""
        del key
        state = LineSearchState(
            time=jnp.zeros((), jnp.int32), position=jnp.asarray(params.initial_position, jnp.float32)
        )
        return self.get_obs(state), state

    def get_obs(
        self, state: LineSearchState, params: LineSearchParams | None = None, key: jax.Array | None = None
    ) -> jax.Array:
        """``float32[1]``: the position x."""
        return jnp.reshape(state.position, (1,)).astype(jnp.float32)

    def is_terminated(self, state: LineSearchState, params: LineSearchParams) -> jax.Array:
        """Always False: LineSearch has no terminal state."""
        return jnp.zeros((), bool)

    def is_truncated(self, state: LineSearchState, params: LineSearchParams) -> jax.Array:
        """True once ``time >= max_steps_in_episode``."""
        return state.time >= params.max_steps_in_episode

    @property
    def name(self) -> str:
        return "LineSearch"

    @property
    def num_actions(self) -> int:
        return 2

    def action_space(self, params: LineSearchParams | None = None) -> spaces.Discrete:
        """``Discrete(2)``: 0 moves by −v, 1 by +v."""
        return spaces.Discrete(2)

    def observation_space(self, params: LineSearchParams) -> spaces.Box:
        """``Box(-inf, inf, (1,), float32)``: the position."""
        return spaces.Box(-jnp.inf, jnp.inf, (1,), jnp.float32)
