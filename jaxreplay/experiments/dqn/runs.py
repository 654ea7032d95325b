"""DQN as a whole: the sweep engine's :data:`EXPERIMENT`, and whole runs without the engine.

:data:`EXPERIMENT` gathers the experiment's functions for the engine, which
runs segments (:func:`~jaxreplay.experiments.dqn.steps.advance`) on the host
one at a time. :func:`run` is one whole run in one traced function (the
segments a ``lax.scan``) and :func:`run_batch` vmaps it over runs, compiled
once per setup.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxreplay._scope import in_experiment_settings
from jaxreplay.experiments import COMPILER_OPTIONS, Experiment, check_scalars, run_count
from jaxreplay.experiments.dqn.config import (
    Hyperparameters,
    Setup,
    broadcast_hyperparameters,
    check,
    num_segments,
    update_slot_groups,
)
from jaxreplay.experiments.dqn.state import init
from jaxreplay.experiments.dqn.steps import advance
from jaxreplay.experiments.dqn.summary import coords, record_dims, summarize, summary_dims

EXPERIMENT = Experiment(
    name="dqn",
    setup_type=Setup,
    hyperparameters_type=Hyperparameters,
    check=check,
    init=init,
    advance=advance,
    summarize=summarize,
    num_segments=num_segments,
    record_dims=record_dims,
    summary_dims=summary_dims,
    coords=coords,
    # Fields newer than the stored sweeps (docs/paper_scale, docs/study): at these values they compute what
    # DQN did before them, so a sweep that leaves them there keeps its fingerprint.
    added_defaults={
        "max_n_step": 1,
        "max_updates_per_unit": 1,
        "target_period_in_updates": False,
        "network": "auto",
        "sticky_action_prob": 0.0,
        "n_step": 1,
        "replay_ratio": 1.0,
        "adaptive_evidence_threshold": 4.0,
        "adaptive_evidence_allowance": 0.25,
        "epsilon_ramp_start": 0,
    },
    # Runs grouped by the update slots their ratio needs: a chunk of ratio-0.25 runs does not run 4 masked
    # slots per step because another configuration's ratio is 4.
    setup_groups=update_slot_groups,
    # YNNPACK off on the CPU: from 64 runs a chunk it rounded the mean TD loss and aER's change sums otherwise;
    # autotuning off on a GPU: another process picked other kernels (another trajectory in every seed).
    compiler_options=COMPILER_OPTIONS,
)
"""DQN as a sweep-engine experiment, registered as ``"dqn"``."""


@in_experiment_settings  # (float32 and standard promotion, whatever the caller's JAX settings)
def run(key: jax.Array, hparams: Hyperparameters, setup: Setup, return_state: bool = False):
    """One whole run: ``init``, ``advance`` × ``num_segments`` (a ``lax.scan``), ``summarize``.

    Jittable with ``setup`` (and ``return_state``) static:
    ``jax.jit(run, static_argnums=(2, 3))``. Jitted alone, though, it is a program of one run, which XLA
    compiles into other kernels than a batch's: its last bits can differ from the same run in
    :func:`run_batch` or a sweep (which compute a lone run beside a copy of itself), and over a long run
    such bits can change the episodes played. ``run_batch(key[None], ...)`` reproduces a sweep's run.

    Args:
        key: the run's PRNG key.
        hparams: scalar :class:`Hyperparameters`.
        setup: static :class:`Setup`.
        return_state: also return the final :class:`~jaxreplay.experiments.dqn.state.State` (its memory
            holds ``max_capacity`` slots: large for big memories).

    Returns:
        ``(records, summary)`` or ``(records, summary, state)``: each record
        leaf ``[num_segments]`` (the segments concatenated), the summary as
        :func:`summarize`.
    """
    check_scalars(hparams)
    check(hparams, setup)
    state = init(key, hparams, setup)
    state, records = jax.lax.scan(lambda s, _: advance(s, hparams, setup), state, None, length=num_segments(setup))
    records = jax.tree.map(lambda r: r.reshape(-1, *r.shape[2:]), records)
    summary = summarize(state, hparams, setup)
    return (records, summary, state) if return_state else (records, summary)


def _vmapped_run(keys, hparams, setup, return_state):
    if keys.shape[0] > 1:
        return jax.vmap(run, in_axes=(0, 0, None, None))(keys, hparams, setup, return_state)
    # A lone run beside a copy of itself: XLA compiles a batch of one into other kernels, which round otherwise
    # (the engine pads the same way: jaxreplay.engine.plan.MIN_RUNS_PER_DEVICE).
    keys2, hparams2 = jax.tree.map(lambda x: jnp.concatenate([x, x]), (keys, hparams))
    return jax.tree.map(lambda x: x[:1], _vmapped_run(keys2, hparams2, setup, return_state))


@functools.cache
def _run_batch_on(platform: str):
    """``jit(vmap(run))`` compiled with the experiment's XLA options on ``platform``, as the engine compiles
    (:data:`~jaxreplay.experiments.COMPILER_OPTIONS`: on the CPU without YNNPACK's fusions, which round a
    large batch's reductions otherwise)."""
    options = EXPERIMENT.compiler_options_on(platform)
    return jax.jit(_vmapped_run, static_argnums=(2, 3), compiler_options=options or None)


def _run_batch(keys, hparams, setup, return_state):
    """The compiled batch itself, on the default backend: no checks, no padding (what :func:`run_batch` calls)."""
    return _run_batch_on(jax.default_backend())(keys, hparams, setup, return_state)


@in_experiment_settings  # (float32 and standard promotion, whatever the caller's JAX settings)
def run_batch(keys: jax.Array, hparams: Hyperparameters, setup: Setup, return_state: bool = False):
    """:func:`run` for ``R`` runs at once: ``jit(vmap(run))``, compiled once per ``setup``, ``R``
    and ``return_state`` (any hyperparameter values, memory sizes included, reuse it), with the
    experiment's compiler options, as the engine compiles.

    A run's bits do not depend on ``R`` or on its neighbours: a lone run (``R = 1``) is computed in a
    batch of two, beside a copy of itself, as the engine does (:data:`jaxreplay.engine.plan.MIN_RUNS_PER_DEVICE`:
    XLA compiles a batch of one into other kernels, which round differently). So ``run_batch(keys[i:i+1], ...)``
    reproduces run ``i`` of a larger batch; ``jax.jit(run)`` alone does not, in its last bits.

    Args:
        keys: ``[R]`` PRNG keys.
        hparams: each field a scalar (shared) or ``[R]``.
        setup: static :class:`Setup`.
        return_state: also return the final states (leading axis ``R``).

    Returns:
        ``(records, summary)`` (or with the states) with a leading axis ``R`` on every leaf.

    Raises:
        ValueError: a bad concrete hyperparameter, keys not of shape ``[R]`` or a field neither a scalar
            nor ``[R]`` (each named), before compiling.
    """
    runs = run_count(keys, hparams)  # (before check: a field of another length is named as such)
    check(hparams, setup)
    return _run_batch(keys, broadcast_hyperparameters(hparams, runs), setup, bool(return_state))
