"""What a DQN run records: a :class:`Record` per segment and a :class:`Summary` at its end.

The two named tuples declare the names once: :func:`record_dims` and
:func:`summary_dims` give their fields to the engine, the segment step
(:func:`~jaxreplay.experiments.dqn.steps.advance`) fills a ``Record`` and
:func:`summarize` a ``Summary``. :func:`adaptive_diagnostics` pools aER's
check counts of many runs on the host.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation
from jaxreplay import buffer as buffer_lib
from jaxreplay import memory as memory_lib
from jaxreplay.agents import dqn as agent
from jaxreplay.experiments.dqn.config import (
    Hyperparameters,
    Setup,
    as_arrays,
    effective_replay_ratio,
    invalid_hyperparameters,
    num_segments,
)
from jaxreplay.experiments.dqn.game import network
from jaxreplay.experiments.dqn.state import State, initial_params

INITIAL_SCALE_ROWS = 256
"""Stored observations (spread over the memory's live window) the untrained network is evaluated on at the
end of a run for ``Summary.q_abs_initial``: its scale on the states the run visited, at a fixed small cost."""


class Record(NamedTuple):
    """One segment's record point, each a scalar (:func:`~jaxreplay.experiments.dqn.steps.advance` gives every leaf a
    ``"segment"`` axis of length 1; :func:`record_dims` names them).

    Attributes:
        train_return: ``float32``; mean return of the training episodes completed
            in the segment (NaN if none).
        train_episodes: ``int32``; their number.
        td_loss: ``float32``; mean TD loss of the segment's gradient steps (NaN if none).
        capacity: ``int32``; the memory's capacity at the segment's end.
        capacity_mean: ``float32``; its capacity averaged over the segment's steps.
        epsilon: ``float32``; ε at the segment's end.
        env_steps: ``int32``; environment steps done.
        eval_return: ``float32``; mean greedy evaluation return at the segment's
            end (:func:`~jaxreplay.experiments.dqn.game.evaluate`); ``None``, and not recorded, when
            ``Setup.eval_episodes`` is 0.
    """

    train_return: jax.Array
    train_episodes: jax.Array
    td_loss: jax.Array
    capacity: jax.Array
    capacity_mean: jax.Array
    epsilon: jax.Array
    env_steps: jax.Array
    eval_return: jax.Array | None = None


def _record_names(setup: Setup) -> tuple[str, ...]:
    """The recorded fields of :class:`Record` under ``setup`` (``eval_return`` only with evaluation)."""
    return tuple(name for name in Record._fields if name != "eval_return" or setup.eval_episodes > 0)


def _record_arrays(record: Record) -> dict:
    """``record`` as ``{name: value[None]}`` (a segment axis of length 1), unrecorded (``None``) fields left out."""
    return {name: value[None] for name, value in record._asdict().items() if value is not None}


class Summary(NamedTuple):
    """Scalars describing a run's end (:func:`summarize` returns them as a dict; :func:`summary_dims`).

    Attributes:
        diverged: ``bool``; a parameter (online or target) is non-finite.
        soft_diverged: ``bool``; the run's Q-values (those it acted on once it
            had made a gradient step) went beyond every return its rewards
            allow: ``q_abs_max > r_max / (1 - γ) + q_abs_initial``, ``r_max`` the largest
            ``|r|`` it saw (the "soft divergence" of van Hasselt et al. 2018,
            *Deep Reinforcement Learning and the Deadly Triad*,
            arXiv:1812.02648). Its weights stay finite (Adam's steps are
            bounded by the step size: at 100 on CartPole the TD loss reached
            1e9 and only this flag says so); unlike ``diverged`` it may be
            transient, and a run so flagged keeps its scores. Never set with
            ``diverged`` (the two flags count apart), nor for a run that saw
            no nonzero reward: no return bound is known then (the
            untrained network's values, or Adam's first steps on zero targets,
            were flagged against a bound of 0; values that grow without limit
            end as ``diverged``). The untrained network's scale is added: at
            a small γ its own values can exceed the rewards' bound (CartPole's
            default network reaches |Q| ≈ 2.8, above 1/(1 − γ) for γ below
            about 0.64), and such runs were flagged even at step size 0.
        q_abs_max: ``float32``; the largest ``|Q(s, a)|`` of the observations
            the agent acted on once it had made a gradient step (0 if none: the
            untrained network's values are its initialisation, not learned).
        q_abs_initial: ``float32``; the largest ``|Q(s, a)|`` of the run's
            *untrained* network (rebuilt from its key) on up to
            :data:`INITIAL_SCALE_ROWS` observations spread over the memory's
            live window at the end (0 for an empty memory): the scale its
            values started at on the states it visited.
        recent_return: ``float32``; mean of the last ``recent_episodes``
            training-episode returns (NaN if none).
        episodes: ``int32``; training episodes completed.
        gradient_steps: ``int32``; gradient steps made.
        final_capacity: ``int32``; the memory's capacity at the end (not
            ``memory_size``, which labels the hyperparameter in a sweep).
        adaptive_checks, adaptive_grows, adaptive_shrinks: ``int32``; aER's
            checks and their outcomes (0 without aER).
        adaptive_invalid: ``int32``; checks that could not decide (non-finite
            sums or invalid traced tolerances).
        adaptive_forced: ``int32``; valid checks at the floor (``N - k < k``),
            which enlarge whatever the sums (``adaptive.Diagnostics.num_forced``).
        adaptive_straddle_checks, adaptive_straddle_grows: ``int32``; checks,
            and enlargements among them, with a target copy since the previous check.
        adaptive_compared, adaptive_noisy: ``int32``; checks with a reference,
            and of them those whose change was within two standard errors of 0.
        adaptive_change_sum, adaptive_noise_sum: ``float32``; sums over compared
            checks of the estimated ``| |δ_old|' - |δ_old| |`` and of that
            change's standard error (divide by ``adaptive_compared`` on the
            host: a traced division rounds differently in vectorised code,
            which would make results depend on the chunk size).
        capacity_clipped: ``bool``; a traced ``memory_size`` or aER capacity
            outside ``[1, max_capacity]`` was clipped.
        adaptive_invalid_parameters: ``bool``; a traced ``adaptive_tolerance``
            or ``adaptive_relative_tolerance`` was NaN, infinite or out of
            range (aER's checks kept the capacity).
        n_step_clipped: ``bool``; a traced ``n_step`` was not an integer in
            ``[1, max_n_step]`` and was clipped (:mod:`jaxreplay.returns`).
        replay_ratio_clipped: ``bool``; a traced ``replay_ratio`` was NaN or
            outside ``[0, max_replay_ratio]`` and was clipped
            (:func:`~jaxreplay.experiments.dqn.config.effective_replay_ratio`).
        oldest_policy_age: ``float32``; ``final_capacity × replay_ratio``:
            how many gradient updates ago the policy that collected the
            oldest transition in a full memory acted (Fedus et al. 2020's
            age of the oldest policy), with the ratio the run used.
        invalid_hyperparameters: ``bool``; a traced hyperparameter was a
            value :func:`~jaxreplay.experiments.dqn.config.check` refuses
            (:func:`~jaxreplay.experiments.dqn.config.invalid_hyperparameters`),
            or a traced ratio made some unit due more updates than its
            slots (``State.updates_skipped``): the run went on with it
            clipped or as given, and its numbers mean nothing.
    """

    diverged: jax.Array
    soft_diverged: jax.Array
    q_abs_max: jax.Array
    q_abs_initial: jax.Array
    recent_return: jax.Array
    episodes: jax.Array
    gradient_steps: jax.Array
    final_capacity: jax.Array
    adaptive_checks: jax.Array
    adaptive_grows: jax.Array
    adaptive_shrinks: jax.Array
    adaptive_invalid: jax.Array
    adaptive_forced: jax.Array
    adaptive_straddle_checks: jax.Array
    adaptive_straddle_grows: jax.Array
    adaptive_compared: jax.Array
    adaptive_noisy: jax.Array
    adaptive_change_sum: jax.Array
    adaptive_noise_sum: jax.Array
    capacity_clipped: jax.Array
    adaptive_invalid_parameters: jax.Array
    n_step_clipped: jax.Array
    replay_ratio_clipped: jax.Array
    oldest_policy_age: jax.Array
    invalid_hyperparameters: jax.Array


def summarize(state: State, hparams: Hyperparameters, setup: Setup) -> dict:
    """The run's :class:`Summary` as ``{name: scalar}`` (names: :func:`summary_dims`)."""
    recent = state.recent_returns
    count = jnp.minimum(state.episodes, setup.recent_episodes)
    recent_mean = jnp.where(count > 0, jnp.nansum(recent) / jnp.maximum(count, 1), jnp.nan)
    memory = memory_lib.buffer_of(state.memory)
    aer = state.controller.diagnostics
    hp = as_arrays(hparams)
    ratio, ratio_clipped = effective_replay_ratio(hp.replay_ratio, setup)
    diverged = ~(agent.is_finite(state.params) & agent.is_finite(state.target_params))
    q_abs_initial = _initial_scale(state, setup)
    summary = Summary(
        diverged=diverged,
        # (γ < 1 for a valid run; an invalid one is flagged invalid_hyperparameters)
        soft_diverged=~diverged
        & (state.reward_abs_max > 0)
        & (state.q_abs_max > state.reward_abs_max / (1.0 - hp.discount) + q_abs_initial),
        q_abs_max=state.q_abs_max,
        q_abs_initial=q_abs_initial,
        recent_return=recent_mean.astype(jnp.float32),
        episodes=state.episodes,
        gradient_steps=state.gradient_steps,
        final_capacity=memory.capacity,
        adaptive_checks=aer.num_checks,
        adaptive_grows=aer.num_grows,
        adaptive_shrinks=aer.num_shrinks,
        adaptive_invalid=aer.num_invalid,
        adaptive_forced=aer.num_forced,
        adaptive_straddle_checks=state.straddle_checks,
        adaptive_straddle_grows=state.straddle_grows,
        adaptive_compared=aer.num_compared,
        adaptive_noisy=aer.num_noisy,
        adaptive_change_sum=aer.sum_abs_change,
        adaptive_noise_sum=aer.sum_noise,
        # The flags of integers read the fields as given (hparams), not as_arrays's int32 (2.5 truncated to 2).
        capacity_clipped=memory.capacity_clipped | _clipped(hparams.memory_size, setup.max_capacity),
        adaptive_invalid_parameters=aer.invalid_parameters,
        n_step_clipped=_clipped(hparams.n_step, setup.max_n_step),
        replay_ratio_clipped=ratio_clipped,
        oldest_policy_age=memory.capacity.astype(jnp.float32) * ratio,
        invalid_hyperparameters=invalid_hyperparameters(hparams, setup) | (state.updates_skipped > 0),
    )
    return summary._asdict()


def _initial_scale(state: State, setup: Setup) -> jax.Array:
    """``float32[]``: :attr:`Summary.q_abs_initial` of the run in ``state``."""
    memory = memory_lib.buffer_of(state.memory)
    rows = min(INITIAL_SCALE_ROWS, setup.max_capacity)
    # Offsets 0 … size − 1 in age order, evenly spread (all of them when the memory holds fewer).
    offsets = (jnp.arange(rows, dtype=jnp.float32) * (memory.size.astype(jnp.float32) / rows)).astype(jnp.int32)
    slots = buffer_lib.slot_of(memory, jnp.minimum(offsets, jnp.maximum(memory.size - 1, 0)))
    q = agent.q_values(network(setup), initial_params(state.key, setup), memory.storage["obs"][slots])
    return jnp.where(memory.size > 0, jnp.max(jnp.abs(q)), 0.0).astype(jnp.float32)


def _clipped(value, high: int) -> jax.Array:
    """Whether a (possibly traced) integer field is not an integer in ``[1, high]`` (then the run clipped it)."""
    return _validation.clip_traced_int(value, 1, high, fallback=1)[1]


_ADAPTIVE_SUMMARY = (
    "adaptive_checks",
    "adaptive_grows",
    "adaptive_straddle_checks",
    "adaptive_straddle_grows",
    "adaptive_compared",
    "adaptive_noisy",
    "adaptive_change_sum",
    "adaptive_noise_sum",
)


class _Entries(Protocol):
    """Arrays by name: a dict of arrays, an ``xarray.Dataset``."""

    def __getitem__(self, name: str, /) -> object: ...


def adaptive_diagnostics(summary: _Entries) -> dict:
    """aER's check diagnostics pooled over the runs of ``summary`` (on the host).

    Args:
        summary: a mapping (a dict of arrays, an ``xarray.Dataset``) holding
            the ``adaptive_*`` entries of :func:`summarize`, each of any shape
            (one entry per run).

    Returns:
        ``checks_mean`` (checks per run), ``grow_fraction``, the grow fraction
        at checks that straddle a target copy and at the others
        (``straddle_grow_fraction``, ``other_grow_fraction``),
        ``noisy_fraction`` (compared checks whose change was within two
        standard errors of 0), ``change_mean`` and ``noise_mean`` (per compared
        check), ``forced_fraction`` (checks the floor rule decided: an
        enlargement whatever the sums) and ``free_grow_fraction`` (the grow
        share of the valid checks it did not decide: under aER and the random
        walk, which act at every such check, what the TD errors or the coin
        chose; under a rule that can keep the size, the accumulated evidence
        (``adaptive_rule`` 3), a check that kept it counts as not grown, so the
        share is not its votes' (a probe read 0.17 where it grew 18 times and
        shrank 18 times, 39 checks keeping the size); these two only where ``summary`` holds
        ``adaptive_forced`` and ``adaptive_invalid``, which results written
        before them lack); ``None`` where nothing was counted.
    """
    total = {name: float(np.sum(np.asarray(summary[name], np.float64))) for name in _ADAPTIVE_SUMMARY}
    runs = int(np.size(np.asarray(summary["adaptive_checks"])))

    def share(numerator, denominator):
        return numerator / denominator if denominator else None

    checks, grows = total["adaptive_checks"], total["adaptive_grows"]
    straddle, straddle_grows = total["adaptive_straddle_checks"], total["adaptive_straddle_grows"]
    compared = total["adaptive_compared"]
    shares = {
        "checks_mean": share(checks, runs),
        "grow_fraction": share(grows, checks),
        "straddle_grow_fraction": share(straddle_grows, straddle),
        "other_grow_fraction": share(grows - straddle_grows, checks - straddle),
        "noisy_fraction": share(total["adaptive_noisy"], compared),
        "change_mean": share(total["adaptive_change_sum"], compared),
        "noise_mean": share(total["adaptive_noise_sum"], compared),
    }
    try:
        forced, invalid = (
            float(np.sum(np.asarray(summary[n], np.float64))) for n in ("adaptive_forced", "adaptive_invalid")
        )
    except KeyError:
        return shares
    return shares | {
        "forced_fraction": share(forced, checks),
        "free_grow_fraction": share(grows - forced, checks - invalid - forced),
    }


def record_dims(setup: Setup) -> dict:
    """Every recorded field of :class:`Record` has the single dim ``"segment"`` (one point per segment)."""
    return {name: ("segment",) for name in _record_names(setup)}


def summary_dims(setup: Setup) -> dict:
    """Every field of :class:`Summary` is a scalar."""
    return {name: () for name in Summary._fields}


def coords(setup: Setup) -> dict:
    """``{"segment": int64[num_segments]}``: environment steps done at each segment's end."""
    return {"segment": np.arange(1, num_segments(setup) + 1, dtype=np.int64) * setup.steps_per_segment}
