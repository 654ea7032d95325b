"""The game of a DQN setup and what is built from it.

The gymnax environment with its parameters checked against the game's
defaults (:func:`check_env_params`), the Q-network sized to the game
(:func:`network`, :func:`q_values`; ``Setup.network`` picks it, checked by
:func:`check_network`), how an observation is kept (:func:`stored_observation`),
one stored transition (:func:`example_transition`) and greedy evaluation
episodes (:func:`evaluate`). Everything is a function of the static
``Setup``; the environment is built once per ``(env_id, env_params)`` (cached).

MinAtar (the five ``"*-MinAtar"`` games of gymnax: Asterix, Breakout,
Freeway, Seaquest, SpaceInvaders). Their observations are ``10 × 10 × C``
grids of 0/1, kept bit-packed (:mod:`jaxreplay.agents.packing`: ``uint8``,
``⌈100·C/8⌉`` bytes instead of ``400·C`` as float32), in the replay memory
and in the run's current observation alike; the network unpacks them to
float32 at its input. Both ``obs`` and ``next_obs`` stay in every
transition: packed, the two take a quarter of the bytes one ``bool`` grid
would (Breakout: 100 bytes a transition against 400), and a transition that
holds its own next observation stays right across episode ends, time-limit
truncations (which bootstrap from the final observation, not the reset one),
memory resizes and n-step windows. ``Setup.network="auto"`` gives these games
MinAtar's convolutional network (:class:`~jaxreplay.agents.conv.ConvQNetwork`)
and every other game the MLP.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation
from jaxreplay import envs as envs_lib
from jaxreplay._typing import ArrayLike
from jaxreplay.agents import conv, packing
from jaxreplay.agents import dqn as agent

if TYPE_CHECKING:  # annotations only: config imports this module (a Setup checks its game here)
    from jaxreplay.experiments.dqn.config import Setup


@functools.lru_cache(maxsize=None)
def _environment(env_id: str, env_params: tuple, sticky_action_prob: float = 0.0):
    """``(env, params)``; cached so that gymnax's jitted ``step`` sees one hashable ``env``.

    ``env_params`` are applied as given: :func:`check_env_params` checks them first. With
    ``sticky_action_prob > 0`` the environment is wrapped in :class:`~jaxreplay.envs.StickyActions`
    (at 0 it is not wrapped, so runs compute what they did before the option existed).
    """
    if env_id.startswith("Probe-") or env_id == "LineSearch":
        env, params = envs_lib.make(env_id, **dict(env_params))
    else:
        env, params = envs_lib.make(env_id)
        if env_params:
            params = params.replace(**dict(env_params))
    if sticky_action_prob > 0:
        env = envs_lib.StickyActions(env, sticky_action_prob)
    return env, params


def check_env_params(env_id: str, env_params: tuple) -> tuple:
    """``env_params`` checked against ``env_id``'s default parameters, each value as its default's type.

    Every ``(name, value)`` must name a parameter of the environment (once),
    and its value must suit that parameter's default, before anything is
    compiled (a traced bad constant would only show as a wrong episode):

    * a ``bool`` default takes ``True`` or ``False``;
    * an ``int`` default (an episode length, a count, an interval) takes an
      integer (``200.0`` counts as ``200``) within int32, ``>= 1`` where the
      default is positive (``max_steps_in_episode`` of 0 or -1 would end every
      episode at once);
    * a ``float`` default (a physics constant, a reward) takes a finite real
      number within float32;
    * array-valued parameters (e.g. Acrobot's ``available_torque``) cannot be
      overridden: ``Setup`` must stay hashable.

    The environment may check ranges of its own after this (e.g. LineSearch's
    ``speed > 0``).

    Args:
        env_id: an id of :func:`jaxreplay.envs.make`.
        env_params: ``((name, value), ...)`` pairs.

    Returns:
        The pairs, values as Python ``bool``/``int``/``float``.

    Raises:
        ValueError: naming ``setup.env_params.<name>`` and what it takes (or
            the unknown ``env_id``).
    """
    _, defaults = _environment(env_id, ())
    fields = sorted(getattr(defaults, "__dataclass_fields__", {}))
    checked: dict[str, bool | int | float] = {}
    for pair in env_params:
        if len(pair) != 2 or not isinstance(pair[0], str):
            raise ValueError(f"setup.env_params must be (name, value) pairs with a str name, got {pair!r}.")
        name, value = pair
        if env_id == "LineSearch":
            name = envs_lib.linesearch.renamed_param(name)  # (an old name: warned, and checked as its new one)
        where = f"setup.env_params.{name}"
        if name not in fields:
            raise ValueError(f"{where}: not a parameter of {env_id}; it has {', '.join(fields)}.")
        if name in checked:
            raise ValueError(f"{where} is given twice.")
        default = getattr(defaults, name)
        if name in _LENGTHS and isinstance(default, float) and default.is_integer():
            # An episode length is a count whatever its default's type (BernoulliBandit's is 100.0): 0.5
            # truncated every step and evaluated 0 steps, -3 failed inside JAX. Kept a float, as gymnax has it.
            checked[name] = float(_check_env_param(where, value, int(default)))
        else:
            checked[name] = _check_env_param(where, value, default)
    return tuple(checked.items())


_LENGTHS = ("max_steps_in_episode",)
"""Environment parameters that are step counts, checked as integers >= 1 even where gymnax's default is a float."""


def _as_real(value: object) -> float | None:
    """``value`` as a float if it is a real number (bools are not), else ``None``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        return float(value)
    except OverflowError:  # an int beyond any float: out of every range below
        return math.inf if value > 0 else -math.inf


def _check_env_param(where: str, value: object, default: object) -> bool | int | float:
    """``value`` as the type of ``default`` (a Python bool, int or float), or ValueError naming ``where``."""
    real = _as_real(value)
    finite = real is not None and math.isfinite(real)
    if isinstance(default, bool):
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{where} must be true or false (like its default {default}), got {value!r}.")
        return bool(value)
    if isinstance(default, int):
        low = 1 if default >= 1 else -_validation.INT32_MAX - 1
        if real is None or not finite or not real.is_integer() or not low <= real <= _validation.INT32_MAX:
            rule = "an integer >= 1" if low == 1 else "an integer"
            raise ValueError(
                f"{where} must be {rule} within int32 (like its default {default}: a length, a count or an "
                f"interval), got {value!r}."
            )
        return int(real)
    if isinstance(default, float):
        if real is None or not finite or abs(real) > _validation.FLOAT32_MAX:
            raise ValueError(
                f"{where} must be a finite number within float32 (like its default {default}), got {value!r}."
            )
        problem = _validation.float32_problem(real)  # nonzero below float32's normals: it would run as 0
        if problem:
            raise ValueError(f"{where} = {value!r} {problem}.")
        return real
    raise ValueError(
        f"{where} cannot be overridden: its default is an array of shape {tuple(getattr(default, 'shape', ()))}, "
        "and only scalar parameters (bool, int, float) can be."
    )


def environment(setup: Setup):
    """``(env, env_params)`` of ``setup`` (a gymnax environment and its parameters)."""
    return _environment(setup.env_id, setup.env_params, setup.sticky_action_prob)


NETWORKS = ("auto", "mlp", "minatar_conv")
"""Values of ``Setup.network``: ``"mlp"`` (:class:`~jaxreplay.agents.dqn.QNetwork`, widths
``Setup.hidden_sizes``), ``"minatar_conv"`` (:class:`~jaxreplay.agents.conv.ConvQNetwork`,
MinAtar's DQN network) or ``"auto"`` (the conv network for a MinAtar game, the MLP otherwise)."""


def is_minatar(env_id: str) -> bool:
    """Whether ``env_id`` is one of gymnax's MinAtar games (0/1 grid observations, kept bit-packed)."""
    return env_id.endswith("-MinAtar")


def network_kind(setup: Setup) -> str:
    """``"mlp"`` or ``"minatar_conv"``: ``setup.network`` with ``"auto"`` resolved by the game."""
    if setup.network != "auto":
        return setup.network
    return "minatar_conv" if is_minatar(setup.env_id) else "mlp"


def check_network(setup: Setup) -> None:
    """Raise :class:`~jaxreplay._validation.FieldError` naming ``network`` unless the game can feed it.

    ``"minatar_conv"`` needs observations of 3 axes ``(H, W, C)`` with ``H``
    and ``W`` at least its kernel size (3).
    """
    _validation.check_choice("network", setup.network, NETWORKS)
    if network_kind(setup) != "minatar_conv":
        return  # (no observation shape traced: a Setup of the MLP is made as fast as before)
    shape = _obs_shape(setup)
    kernel = conv.ConvQNetwork.kernel_size
    if len(shape) != 3 or min(shape[:2]) < kernel:
        problem = (
            f"the convolutional network needs (height, width, channels) observations of at least {kernel} x "
            f"{kernel} cells, but {setup.env_id}'s have shape {shape}; use network='mlp' for this game."
        )
        raise _validation.FieldError("network", problem, about="minatar_conv")


def network(setup: Setup) -> agent.Network:
    """The Q-network of ``setup`` (:func:`network_kind`), reading observations as :func:`stored_observation` keeps
    them."""
    env, params = environment(setup)
    shape = _obs_shape(setup)
    packed = shape if is_minatar(setup.env_id) else None
    if network_kind(setup) == "minatar_conv":
        return conv.ConvQNetwork(env.num_actions, packed_shape=packed)
    return agent.QNetwork(setup.hidden_sizes, env.num_actions, len(shape), packed_shape=packed)


def stored_observation(setup: Setup, obs: ArrayLike) -> jax.Array:
    """``obs`` (``[..., *obs_shape]``, as the environment gives it) as the run keeps it, in its memory and state.

    MinAtar games: bit-packed, ``uint8[..., ⌈prod(obs_shape)/8⌉]``
    (:func:`jaxreplay.agents.packing.pack`; exact for their 0/1 cells).
    Other games: ``float32[..., *obs_shape]``.
    """
    if is_minatar(setup.env_id):
        return packing.pack(obs, _obs_shape(setup))
    return jnp.asarray(obs, jnp.float32)


@functools.lru_cache(maxsize=None)
def _obs_shape(setup: Setup) -> tuple[int, ...]:
    # Cached: network() asks for it in every init / advance / evaluate / q_values trace.
    env, params = environment(setup)
    return tuple(jax.eval_shape(lambda k: env.reset(k, params)[0], jax.random.key(0)).shape)


def _max_episode_steps(setup: Setup) -> int:
    _, params = environment(setup)
    return int(params.max_steps_in_episode)


def example_transition(setup: Setup) -> dict:
    """One stored transition (zeros): ``obs``/``next_obs`` as :func:`stored_observation` keeps them
    (float32[*obs_shape], or uint8[packed bytes] for MinAtar), ``action`` int32, ``reward`` and
    ``terminated`` float32."""
    obs = stored_observation(setup, jnp.zeros(_obs_shape(setup), jnp.float32))
    return {"obs": obs, "action": jnp.int32(0), "reward": jnp.float32(0), "next_obs": obs, "terminated": jnp.float32(0)}


def _strip_weak_types(tree):
    # gymnax resets put Python ints in the state (weakly typed after tracing),
    # steps return strong int32: give scan one carry type.
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.result_type(x)), tree)


EVAL_BLOCK = 50
"""Steps per block of greedy evaluation (:func:`evaluate`): it stops after the first block at whose end
every episode of every run in the batch has ended. What that saves depends on the longest episode in the
batch: early in training (untrained CartPole policies fall within tens of its 500 steps) most of the
evaluation (the replay study's 200-step CartPole test study at 6 seeds: 25 s warm against 41 s with one scan
of all the steps), nothing once one run balances the pole to the limit (its 4,000-step quick study: 182 s
against 179). A block, not a step: on a GPU each iteration of a while loop reads its predicate on the host,
a scan's steps do not."""


def evaluate(key: jax.Array, params: agent.Params, setup: Setup) -> jax.Array:
    """Mean return of ``setup.eval_episodes`` greedy episodes (ε = 0), run in parallel.

    Each episode steps ``step_env`` (no auto-reset) up to the environment's ``max_steps_in_episode``
    steps; rewards after the episode ends (termination or the time limit) are masked out. Steps go in
    blocks of :data:`EVAL_BLOCK` (a ``lax.scan`` each) inside a ``lax.while_loop`` that stops once
    every episode has ended: the returns are bit for bit those of one scan over all the steps (step
    ``t`` uses the ``t``-th key of ``split(steps_key, max_steps_in_episode)`` either way; a step after
    the end adds an exact 0).

    Returns:
        ``float32[]``. Cost: ``eval_episodes × ⌈T / EVAL_BLOCK⌉ × EVAL_BLOCK`` forward passes and
        environment steps, ``T`` the steps until the last episode (of the batch, under ``vmap``) ends.
    """
    env, env_params = environment(setup)
    net = network(setup)
    max_steps = _max_episode_steps(setup)
    block = min(EVAL_BLOCK, max_steps)
    blocks = -(-max_steps // block)

    def episode(episode_key):
        reset_key, steps_key = jax.random.split(episode_key)
        obs, env_state = env.reset(reset_key, env_params)
        # The last block's padding (steps past max_steps) reuses keys: those steps count as ended, their rewards 0.
        steps = jax.random.split(steps_key, max_steps)
        steps = jnp.concatenate([steps, steps[: blocks * block - max_steps]]).reshape(blocks, block)

        def step(carry, inputs):
            obs, env_state, total, done = carry
            step_key, t = inputs
            done = done | (t >= max_steps)
            action = agent.greedy_action(net, params, obs)
            obs, env_state, reward, terminated, _ = env.step_env(step_key, env_state, action, env_params)
            total = total + jnp.where(done, 0.0, jnp.asarray(reward, jnp.float32))
            done = done | terminated | env.is_truncated(env_state, env_params)
            return (stored_observation(setup, obs), _strip_weak_types(env_state), total, done), None

        def run_block(loop):
            index, carry = loop
            times = index * block + jnp.arange(block, dtype=jnp.int32)
            return index + 1, jax.lax.scan(step, carry, (steps[index], times))[0]

        def going(loop):
            index, (_, _, _, done) = loop
            return (index < blocks) & ~done

        carry = (stored_observation(setup, obs), _strip_weak_types(env_state), jnp.float32(0), jnp.bool_(False))
        return jax.lax.while_loop(going, run_block, (jnp.int32(0), carry))[1][2]

    return jnp.mean(jax.vmap(episode)(jax.random.split(key, setup.eval_episodes)))


def q_values(params: agent.Params, obs: ArrayLike, setup: Setup) -> jax.Array:
    """``Q(obs, ·)`` of the network of ``setup``: ``float32[..., num_actions]``, ``obs`` as
    :func:`stored_observation` keeps it (bit-packed for MinAtar games).

    Raises:
        ValueError: a MinAtar ``obs`` that is not packed for this game, such as the environment's own float
            grid (:func:`stored_observation` packs one).
    """
    if is_minatar(setup.env_id):
        packing.check_packed(obs, _obs_shape(setup), "obs", "stored_observation(setup, obs) packs one for this setup")
    return agent.q_values(network(setup), params, obs)
