"""One DQN run's state (:class:`State`), its initial value (:func:`init`) and its replay memory.

Every draw of a run derives from its key with ``fold_in``, on independent
streams: the steps' draws (with the step count), the evaluation episodes,
the initial parameters and the first reset.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxreplay import adaptive
from jaxreplay import memory as memory_lib
from jaxreplay._typing import PyTree
from jaxreplay.agents import dqn as agent
from jaxreplay.experiments.dqn.config import Hyperparameters, Setup, as_arrays
from jaxreplay.experiments.dqn.game import (
    _strip_weak_types,
    environment,
    example_transition,
    network,
    stored_observation,
)

# Independent key streams derived from a run's key (fold_in data).
_STREAM_STEP, _STREAM_EVAL, _STREAM_PARAMS, _STREAM_RESET = 0, 1, 2, 3


def replay_memory(setup: Setup, hparams: Hyperparameters) -> memory_lib.Memory:
    """The replay memory of ``setup.sampler`` with its hyperparameters (those of
    :data:`jaxreplay.memory.HYPERPARAMETERS`) bound from ``hparams``; built
    inside the traced function, so they may be traced."""
    bound = {name: getattr(hparams, name) for name in memory_lib.HYPERPARAMETERS[setup.sampler]}
    return memory_lib.make(setup.sampler, **bound)


class State(NamedTuple):
    """One run's full state (a pytree; gains a leading run axis under vmap).

    Attributes:
        params, target_params: online and target Q-network parameters.
        opt_state: optimizer state.
        memory: :class:`~jaxreplay.buffer.BufferState`, or
            :class:`~jaxreplay.prioritized.PrioritizedState` for ``sampler="prioritized"``.
        controller: :class:`~jaxreplay.adaptive.AdaptiveState` (unused unless ``adaptive``).
        env_state, obs: the environment's state and current observation (as
            :func:`~jaxreplay.experiments.dqn.game.stored_observation` keeps it).
        episode_return: ``float32[]``; return of the current training episode so far.
        recent_returns: ``float32[recent_episodes]``; ring of the last completed
            episodes' returns (slot ``episodes % recent_episodes`` is next).
        episodes: ``int32[]``; training episodes completed.
        step: ``int32[]``; environment steps done.
        gradient_steps: ``int32[]``; gradient steps made.
        target_copies: ``int32[]``; hard target copies made (Polyak: updates); counted in
            steps, at most one per unit (``Hyperparameters.target_period``).
        copies_at_check: ``int32[]``; ``target_copies`` at aER's latest check.
        straddle_checks, straddle_grows: ``int32[]``; aER checks (and of them
            enlargements) with a target copy since the previous check.
        updates_skipped: ``int32[]``; updates due beyond a unit's
            ``max_updates_per_unit`` slots (a traced ratio whose float32
            rounding needs one more slot; ``check`` refuses a concrete one).
        q_abs_max: ``float32[]``; the largest ``|Q(s, a)|`` of the observations
            the agent acted on so far once it had made a gradient step.
        reward_abs_max: ``float32[]``; the largest ``|r|`` of a step so far.
        key: the run's PRNG key (constant; draws use ``fold_in``).
    """

    params: agent.Params
    target_params: agent.Params
    opt_state: agent.OptState
    memory: memory_lib.MemoryState
    controller: adaptive.AdaptiveState
    env_state: PyTree  # the environment's own state type (gymnax's EnvState subclasses)
    obs: jax.Array
    episode_return: jax.Array
    recent_returns: jax.Array
    episodes: jax.Array
    step: jax.Array
    gradient_steps: jax.Array
    target_copies: jax.Array
    copies_at_check: jax.Array
    straddle_checks: jax.Array
    straddle_grows: jax.Array
    updates_skipped: jax.Array
    q_abs_max: jax.Array
    reward_abs_max: jax.Array
    key: jax.Array


def initial_params(key: jax.Array, setup: Setup) -> agent.Params:
    """The run's untrained Q-network parameters (a function of its ``key``: :func:`init` starts from them, and
    the summary measures their scale)."""
    obs_kept = example_transition(setup)["obs"]  # the network reads observations as they are kept (packed: MinAtar)
    return agent.init_params(jax.random.fold_in(key, _STREAM_PARAMS), network(setup), obs_kept.shape, obs_kept.dtype)


def init(key: jax.Array, hparams: Hyperparameters, setup: Setup) -> State:
    """One run's initial state: random Q-network (target = online), empty memory
    of capacity ``memory_size``, reset environment.

    Args:
        key: the run's PRNG key.
        hparams: scalar :class:`Hyperparameters` (traced or concrete).
        setup: static :class:`Setup`.

    Returns:
        A :class:`State`. Cost: O(max_capacity) memory.
    """
    hp = as_arrays(hparams)
    env, env_params = environment(setup)
    example = example_transition(setup)
    params = initial_params(key, setup)
    opt_state = agent.make_optimizer(setup.optimizer).init(params)
    if setup.max_n_step > 1:  # the flag n-step windows stop at (bootstrapping); not stored otherwise
        example = {**example, "truncated": jnp.float32(0)}
    memory = replay_memory(setup, hp).init(example, setup.max_capacity, hp.memory_size)
    obs, env_state = env.reset(jax.random.fold_in(key, _STREAM_RESET), env_params)
    zero_i = jnp.zeros((), jnp.int32)
    return State(
        params=params,
        target_params=params,
        opt_state=opt_state,
        memory=memory,
        controller=adaptive.init(setup.subsample_size if setup.adaptive else None),
        env_state=_strip_weak_types(env_state),
        obs=stored_observation(setup, obs),
        episode_return=jnp.zeros((), jnp.float32),
        recent_returns=jnp.full((setup.recent_episodes,), jnp.nan, jnp.float32),
        episodes=zero_i,
        step=zero_i,
        gradient_steps=zero_i,
        target_copies=zero_i,
        copies_at_check=zero_i,
        straddle_checks=zero_i,
        straddle_grows=zero_i,
        updates_skipped=zero_i,
        q_abs_max=jnp.zeros((), jnp.float32),
        reward_abs_max=jnp.zeros((), jnp.float32),
        key=key,
    )
