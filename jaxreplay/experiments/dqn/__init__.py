"""DQN on gymnax environments with uniform, prioritized or combined replay and aER.

The paper's "Performance on OpenAI Games with DQN" experiment (CartPole,
MountainCar, Acrobot; fixed memories vs the adaptive memory aER) as an
:class:`~jaxreplay.experiments.Experiment`: ``init`` / ``advance`` /
``summarize`` over *one run*, which the sweep engine vmaps over runs. The
memory size is traced, so runs with different fixed sizes, and aER runs with
different initial sizes, share one compiled program.

One environment step ``t = 1, 2, ...`` (``t`` counts steps done)::

    ε_t   = linear schedule(t - 1 - epsilon_ramp_start)  (epsilon_start -> epsilon_end;
                                                          epsilon_start until the ramp starts)
    a     = ε_t-greedy in Q(obs)
    obs', r, terminated, truncated = env.step(a)         (gymnax auto-resets)
    store (obs, a, r, final_obs, terminated)             (final_obs: before the reset;
                                                          max_n_step > 1: also truncated)
    every train_frequency steps, once t >= learning_starts, the updates due
    (floor(t·replay_ratio) in the first t steps), each:
        sample a batch of starts (uniform / prioritized / CER), targets
        1-step or n-step (n_step rewards, then γ^k · max Q̄, jaxreplay.returns),
        one gradient step, prioritized: store the starts' new priorities,
        Polyak averaging with target_tau (or target_period_in_updates: a hard
        copy every target_period updates)
    then a hard target copy when t crosses a multiple of target_period
    aER (adaptive=True): Algorithm 2 at every t that is a multiple of
        adaptive_interval (jaxreplay.adaptive.controller, then resize), with TD
        errors under the parameters after step t's gradient step: the online
        network on both sides, as Algorithm 2 writes Q(·; θ)
        (adaptive_td_target=1: the target network bootstraps, as in the loss)

Prioritized replay uses a constant importance exponent β (no annealing; sweep
it instead) and stores ``(|δ| + priority_floor)^α`` for the replayed batch
after each gradient step, with the TD errors computed before it.

Only ``terminated`` stops bootstrapping; a time-limit truncation bootstraps
from the true final observation (``info["final_observation"]`` of gymnax's
``step``), which is also what is stored as the next observation
(``Setup.truncation_bootstrap=False`` treats truncation as termination, the
common mistake studied by Pardo et al. 2018, for comparison).

Randomness. Every draw derives from the run's key with ``fold_in`` on the
step count (per step: action, environment, minibatch, aER subsample; at a
segment end: the evaluation episodes), so a run does not depend on how it is
batched or segmented.

What is recorded: a :class:`Record` per segment (dim ``"segment"``,
coordinate: the environment steps done at its end: training and evaluation
returns, TD loss, the memory's capacity, ε) and a :class:`Summary` at the
run's end. Nothing grows with the run's length except the records
themselves (a few scalars per segment).

The package, one concern per module (every name below is also importable
from ``jaxreplay.experiments.dqn`` itself):

* :mod:`~jaxreplay.experiments.dqn.config`: the static :class:`Setup` (checked
  when made), the traced :class:`Hyperparameters` and their :func:`check`;
* :mod:`~jaxreplay.experiments.dqn.game`: the environment with its checked
  parameters, the Q-network sized to it (an MLP, or MinAtar's convolutional
  network for the ``*-MinAtar`` games, whose 0/1 observations are kept
  bit-packed), greedy :func:`evaluate`;
* :mod:`~jaxreplay.experiments.dqn.state`: a run's :class:`State` and :func:`init`;
* :mod:`~jaxreplay.experiments.dqn.steps`: :func:`advance`, one segment,
  composed of module-level step functions (why the loop is nested: there);
* :mod:`~jaxreplay.experiments.dqn.summary`: the :class:`Record` and
  :class:`Summary` declarations and :func:`summarize`;
* :mod:`~jaxreplay.experiments.dqn.runs`: the engine's :data:`EXPERIMENT`,
  :func:`run` and :func:`run_batch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxreplay import _deprecated
from jaxreplay.experiments.dqn.config import (
    ADAPTIVE_RULES,
    MAX_N_STEP,
    RULE_AER,
    RULE_EVIDENCE,
    RULE_FIXED,
    RULE_RANDOM,
    SAMPLERS,
    TARGET_UPDATES,
    Hyperparameters,
    Setup,
    as_arrays,
    broadcast_hyperparameters,
    check,
    effective_replay_ratio,
    first_unit_end,
    first_update_due,
    num_segments,
    smallest_memory,
    update_slot_groups,
    update_slots_needed,
    updates_due_by,
    with_total_steps,
)
from jaxreplay.experiments.dqn.game import (
    NETWORKS,
    check_env_params,
    check_network,
    environment,
    evaluate,
    example_transition,
    is_minatar,
    network,
    network_kind,
    q_values,
    stored_observation,
)
from jaxreplay.experiments.dqn.runs import EXPERIMENT, run, run_batch
from jaxreplay.experiments.dqn.state import State, init, replay_memory
from jaxreplay.experiments.dqn.steps import advance
from jaxreplay.experiments.dqn.summary import (
    Record,
    Summary,
    adaptive_diagnostics,
    coords,
    record_dims,
    summarize,
    summary_dims,
)

__all__ = [
    "MAX_N_STEP",
    "SAMPLERS",
    "TARGET_UPDATES",
    "ADAPTIVE_RULES",
    "RULE_FIXED",
    "RULE_AER",
    "RULE_RANDOM",
    "RULE_EVIDENCE",
    "Setup",
    "Hyperparameters",
    "as_arrays",
    "broadcast_hyperparameters",
    "check",
    "effective_replay_ratio",
    "num_segments",
    "with_total_steps",
    "update_slot_groups",
    "update_slots_needed",
    "first_unit_end",
    "first_update_due",
    "smallest_memory",
    "updates_due_by",
    "NETWORKS",
    "check_env_params",
    "check_network",
    "environment",
    "evaluate",
    "example_transition",
    "is_minatar",
    "network",
    "network_kind",
    "q_values",
    "stored_observation",
    "State",
    "init",
    "replay_memory",
    "advance",
    "Record",
    "Summary",
    "adaptive_diagnostics",
    "coords",
    "record_dims",
    "summarize",
    "summary_dims",
    "EXPERIMENT",
    "run",
    "run_batch",
]

_RENAMED = {"DQNState": "State"}
if TYPE_CHECKING:  # the old spelling as type checkers see it; at run time __getattr__ answers, with a warning
    DQNState = State
    """Deprecated (removed after 0.1): :class:`State` (as LineSearch's)."""


def __getattr__(name: str) -> object:
    # Old spellings, with a DeprecationWarning (docs/design.md, "Renamed").
    return _deprecated.renamed(__name__, name, _RENAMED, globals())
