"""What a DQN run is configured with: its static :class:`Setup` and traced :class:`Hyperparameters`.

A :class:`Setup` checks itself when it is made (a ``ValueError`` naming the
field); :func:`check` checks concrete hyperparameters against a setup before
anything is compiled. :func:`as_arrays` and :func:`broadcast_hyperparameters`
give the hyperparameters their canonical dtypes; :func:`effective_replay_ratio`
is the replay ratio a run uses (a traced one clipped and flagged);
:func:`num_segments` and :func:`with_total_steps` read and change a setup's
run length.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation, adaptive, evidence, prioritized
from jaxreplay import memory as memory_lib
from jaxreplay._typing import ArrayLike
from jaxreplay.agents import dqn as agent
from jaxreplay.envs import sticky
from jaxreplay.experiments.dqn.game import check_env_params, check_network, environment

SAMPLERS = memory_lib.KINDS
"""The replay memories DQN runs with, by ``Setup.sampler``: the kinds of :func:`jaxreplay.memory.make`."""
TARGET_UPDATES = ("hard", "polyak")
"""How the target network follows the online one: a copy every period, or Polyak averaging."""
MAX_N_STEP = 256
"""The largest ``Setup.max_n_step``: the n-step window is unrolled when compiled, and the compile time grows
faster than the window (a DQN CartPole program: 9 s at 256, 51 s at 400, over 400 s at 500 on the 2-core CPU)."""
ADAPTIVE_RULES = ("fixed", "aer", "random", "evidence")
"""Values of ``Hyperparameters.adaptive_rule`` by index: 0 keeps the memory size
(a static run inside an aER program), 1 is aER (Algorithm 2), 2 is the random
±k walk control (a fair coin instead of the TD errors), 3 is aER with
accumulated evidence (resize only when the CUSUM of aER's votes reaches
``adaptive_evidence_threshold``, :mod:`jaxreplay.evidence`)."""
RULE_FIXED = 0
"""``Hyperparameters.adaptive_rule`` of a run that keeps its memory size (the controller is not consulted)."""
RULE_AER = 1
"""``Hyperparameters.adaptive_rule`` of aER (Algorithm 2), the default."""
RULE_RANDOM = 2
"""``Hyperparameters.adaptive_rule`` of the random ±k walk control."""
RULE_EVIDENCE = 3
"""``Hyperparameters.adaptive_rule`` of aER with accumulated evidence (threshold ``adaptive_evidence_threshold``)."""


@dataclasses.dataclass(frozen=True)
class Setup:
    """Static settings of a DQN experiment (hashable: a ``jit`` static argument).

    Attributes:
        env_id: any id of :func:`jaxreplay.envs.make` (gymnax ids, ``"Probe-..."``).
        env_params: ``((name, value), ...)`` overrides of the environment's
            default parameters (a dict is accepted and sorted into pairs),
            e.g. ``(("max_steps_in_episode", 200),)``. Each is checked
            against the default of the same name (:func:`check_env_params`)
            and stored as a Python ``bool``, ``int`` or ``float``.
        total_steps: environment steps per run; a multiple of ``steps_per_segment``.
        steps_per_segment: steps per :func:`~jaxreplay.experiments.dqn.steps.advance` call (one record point);
            a multiple of the cycle length (``train_frequency``, or
            ``adaptive_check_every`` with ``adaptive``).
        hidden_sizes: widths of the Q-network's ReLU hidden layers.
        max_capacity: replay slots allocated (memory sizes and aER's growth
            are limited to it). With ``sampler="prioritized"`` a run's draws
            depend on it too (:mod:`jaxreplay.prioritized`, "Draws follow
            ``max_capacity``"): pair such runs seed by seed only at one
            ``max_capacity``.
        batch_size: minibatch size (paper: 50).
        sampler: ``"uniform"``, ``"prioritized"`` (stored priorities on a sum
            tree with importance weights, :mod:`jaxreplay.prioritized`) or
            ``"cer"`` (newest transition + uniform, :func:`jaxreplay.samplers.combined`).
        adaptive: resize the memory with aER (Algorithm 2) on top of ``sampler``.
        adaptive_check_every: static granularity, in environment steps, at
            which aER is consulted; a multiple of ``train_frequency``. The
            traced ``adaptive_interval`` must be a multiple of it (the
            docstring of :mod:`jaxreplay.experiments.dqn.steps`: why).
        max_num_old: static upper bound of ``adaptive_num_old`` (``None``:
            ``max_capacity``). Only an array length without subsampling.
        subsample_size: aER estimates each sum of old TD errors from this many
            draws (paper: 50 for CartPole, 1000 for MountainCar and Acrobot);
            ``None`` sums exactly over ``max_num_old`` transitions.
        shrink_reading: aER's reading of the shrink recompute (``"new"`` or
            ``"shrunk"``, :mod:`jaxreplay.adaptive`, docs/paper_readings.md §9).
        loss: ``"mse"`` (δ²/2) or ``"huber"``.
        double: double DQN targets.
        target_update: ``"hard"`` (copy every ``target_period`` steps) or
            ``"polyak"`` (``target_tau`` after every gradient step).
        optimizer: ``"adam"`` or ``"sgd"`` (step size ``Hyperparameters.step_size``).
        batch_reduction: ``"mean"`` (the loss averages over the minibatch) or
            ``"sum"`` (it sums: the step size is per transition; with
            ``"sgd"`` this is the paper's Algorithm 1 reading,
            :func:`jaxreplay.agents.dqn.loss_fn`).
        train_frequency: environment steps per *unit*: the updates due (the
            traced ``Hyperparameters.replay_ratio``) are made at the end of
            every ``train_frequency`` steps. With the default ratio 1 and
            frequency 1 that is one update per step; the paper's reading "a
            gradient step every F steps" is ``train_frequency=F`` with
            ``replay_ratio=1/F``.
        eval_episodes: greedy evaluation episodes at each segment end
            (vmapped, each a scan of the environment's ``max_steps_in_episode``
            steps); 0 disables (no ``"eval_return"`` record).
        truncation_bootstrap: bootstrap through time-limit truncations (the
            correct target). ``False`` treats them as terminal.
        recent_episodes: length of the window of the last training-episode
            returns kept for the summary's ``"recent_return"``.
        network: the Q-network, one of :data:`~jaxreplay.experiments.dqn.game.NETWORKS`:
            ``"mlp"`` (ReLU layers of ``hidden_sizes``), ``"minatar_conv"``
            (MinAtar's DQN network, Young & Tian 2019: a 3×3 convolution of
            16 filters, a 128-unit ReLU layer; ``hidden_sizes`` unused) or
            ``"auto"`` (the conv network for the ``*-MinAtar`` games, the MLP
            otherwise). A MinAtar game's observations are kept bit-packed
            whichever network reads them (:mod:`~jaxreplay.experiments.dqn.game`).
        max_n_step: static bound of the traced ``Hyperparameters.n_step``
            (the window read per sampled start). 1 (default): 1-step targets,
            the stored transition as before; above 1 every transition also
            stores a ``truncated`` flag and targets are read with
            :func:`jaxreplay.returns.n_step` (costs O(``batch_size ×
            max_n_step``) scalar gathers per update, whatever ``n_step``).
            At most ``max_capacity`` (no window holds more transitions) and
            :data:`MAX_N_STEP` (the window is unrolled when compiled: 256
            compiles in seconds, 400 in about a minute, 500 in over 7 on a CPU).
        max_updates_per_unit: static bound of gradient updates per unit of
            ``train_frequency`` steps: the program runs this many (masked)
            update slots per unit, so ``replay_ratio`` may be at most
            ``max_updates_per_unit / train_frequency`` and every run pays for
            the bound (:attr:`max_replay_ratio`).
        target_period_in_updates: count ``Hyperparameters.target_period`` in
            gradient updates instead of environment steps (hard copies only):
            the target network then follows the online one at a fixed number
            of updates whatever the replay ratio (Fedus et al. 2020 scale the
            period with the ratio).
        sticky_action_prob: the probability that a step executes the
            environment's previous action instead of the chosen one (sticky
            actions, :class:`~jaxreplay.envs.StickyActions`; MinAtar's own games
            use 0.1, gymnax's have none), in ``[0, 1)``; 0 (default): the game
            as gymnax makes it. The memory keeps the chosen action.
    """

    env_id: str = "CartPole-v1"
    env_params: tuple = ()
    total_steps: int = 10_000
    steps_per_segment: int = 1_000
    hidden_sizes: tuple = (64,)
    max_capacity: int = 10_000
    batch_size: int = 50
    sampler: str = "uniform"
    adaptive: bool = False
    adaptive_check_every: int = 20
    max_num_old: int | None = None
    subsample_size: int | None = 50
    shrink_reading: str = "new"
    loss: str = "mse"
    double: bool = False
    target_update: str = "hard"
    optimizer: str = "adam"
    batch_reduction: str = "mean"
    train_frequency: int = 1
    eval_episodes: int = 0
    truncation_bootstrap: bool = True
    recent_episodes: int = 100
    network: str = "auto"
    max_n_step: int = 1
    max_updates_per_unit: int = 1
    target_period_in_updates: bool = False
    sticky_action_prob: float = 0.0

    def __post_init__(self):
        if isinstance(self.env_params, dict):
            object.__setattr__(self, "env_params", tuple(sorted(self.env_params.items())))
        pairs = self.env_params if isinstance(self.env_params, (tuple, list)) else None
        if pairs is None or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
            raise ValueError(
                "env_params must be a table of the environment's parameters ({name = value}), "
                f"got {self.env_params!r}."
            )
        object.__setattr__(self, "env_params", tuple(tuple(pair) for pair in self.env_params))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        for name in (
            "total_steps",
            "steps_per_segment",
            "max_capacity",
            "batch_size",
            "adaptive_check_every",
            "train_frequency",
            "recent_episodes",
            "max_n_step",
            "max_updates_per_unit",
        ):
            _validation.check_static_int(name, getattr(self, name), low=1)  # (int32 counters: its bound)
        _validation.check_static_int("eval_episodes", self.eval_episodes, low=0)
        for width in self.hidden_sizes:
            _validation.check_static_int("hidden_sizes", width, low=1)
        if self.max_num_old is not None:
            _validation.check_static_int("max_num_old", self.max_num_old, low=1, high=self.max_capacity)
        if self.subsample_size is not None:
            _validation.check_static_int("subsample_size", self.subsample_size, low=1)
        for name, value, allowed in (
            ("sampler", self.sampler, SAMPLERS),
            ("shrink_reading", self.shrink_reading, adaptive.SHRINK_READINGS),
            ("loss", self.loss, agent.LOSSES),
            ("target_update", self.target_update, TARGET_UPDATES),
            ("optimizer", self.optimizer, agent.OPTIMIZERS),
            ("batch_reduction", self.batch_reduction, agent.REDUCTIONS),
        ):
            _validation.check_choice(name, value, allowed)
        for name in ("adaptive", "double", "truncation_bootstrap", "target_period_in_updates"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}.")
        _check_n_step_and_target(self)
        object.__setattr__(
            self, "sticky_action_prob", sticky.checked_probability("sticky_action_prob", self.sticky_action_prob)
        )
        if self.total_steps % self.steps_per_segment:
            raise ValueError(
                f"total_steps ({self.total_steps}) must be a multiple of steps_per_segment ({self.steps_per_segment})."
            )
        _check_counts(self)
        if self.adaptive:
            _check_adaptive_grid(self)
        if self.steps_per_segment % self.cycle_length:
            raise ValueError(
                f"steps_per_segment ({self.steps_per_segment}) must be a multiple of the cycle length "
                f"{self.cycle_length} (train_frequency, or adaptive_check_every with adaptive=True)."
            )
        # ValueError: unknown id, unknown parameter or a value its default's type or range rules out.
        object.__setattr__(self, "env_params", check_env_params(self.env_id, self.env_params))
        try:
            env, env_params = environment(self)
        except ValueError as e:  # the environment's own range checks (probes, LineSearch) name the bare field
            raise ValueError(f"setup.env_params.{e}") from None
        space = env.action_space(env_params)
        if getattr(space, "n", None) is None or getattr(space, "shape", ()) not in ((), None):
            problem = (
                f"DQN needs a discrete action space (one Q-value per action), but {self.env_id} has continuous actions "
                f"({type(space).__name__} of shape {tuple(getattr(space, 'shape', ()))}); choose a game with discrete "
                "actions, e.g. CartPole-v1, Acrobot-v1 or MountainCar-v0."
            )
            raise _validation.FieldError("env_id", problem, about=self.env_id)
        if int(space.n) < 2:
            problem = f"DQN needs at least 2 actions to choose from, {self.env_id} has {int(space.n)}."
            raise _validation.FieldError("env_id", problem, about=self.env_id)
        check_network(self)  # FieldError naming network: a conv network on observations it cannot read

    @property
    def cycle_length(self) -> int:
        """Environment steps per scan cycle (static; :mod:`jaxreplay.experiments.dqn.steps` says why)."""
        return self.adaptive_check_every if self.adaptive else self.train_frequency

    @property
    def num_old_bound(self) -> int:
        """The static bound of ``adaptive_num_old``."""
        return self.max_capacity if self.max_num_old is None else self.max_num_old

    @property
    def max_replay_ratio(self) -> float:
        """The largest ``replay_ratio``: ``max_updates_per_unit / train_frequency``, rounded to float32
        (the dtype it is compared with when traced)."""
        return float(np.float32(self.max_updates_per_unit / self.train_frequency))


def _check_counts(setup: Setup) -> None:
    """ValueError for a run whose int32 counts would wrap: its update slots (``gradient_steps`` counts
    them: ``total_steps / train_frequency * max_updates_per_unit`` of them at most), and with aER a segment's
    exact sum of capacities (two int32 limbs: ``steps_per_segment * (max_capacity + 2**16)`` below ``2**47``)."""
    slots = -(-setup.total_steps // setup.train_frequency) * setup.max_updates_per_unit
    if slots > _validation.INT32_MAX:
        raise ValueError(
            f"total_steps ({setup.total_steps}) allows {slots} gradient steps (max_updates_per_unit "
            f"{setup.max_updates_per_unit} per {setup.train_frequency} environment steps), above 2**31 - 1: the "
            "run counts them in int32; run fewer steps or lower max_updates_per_unit."
        )
    if setup.adaptive and setup.steps_per_segment * (setup.max_capacity + 2**16) >= 2**47:  # (a fixed one sums 0s)
        raise ValueError(
            f"steps_per_segment ({setup.steps_per_segment}) × max_capacity ({setup.max_capacity}) is too large for "
            "the segment's exact sum of capacities (int32 limbs: steps_per_segment × (max_capacity + 2**16) "
            "below 2**47); record more segments (a smaller steps_per_segment)."
        )


def _check_adaptive_grid(setup: Setup) -> None:
    """ValueError for an aER check grid (``adaptive_check_every``) off the update units or coarser than the
    memory (aER's interval k is a multiple of it and at most ``max_capacity``: no k could pass :func:`check`)."""
    if setup.adaptive_check_every % setup.train_frequency:
        raise ValueError(
            f"adaptive_check_every ({setup.adaptive_check_every}) must be a multiple of "
            f"train_frequency ({setup.train_frequency})."
        )
    if setup.adaptive_check_every > setup.max_capacity:
        raise ValueError(
            f"adaptive_check_every ({setup.adaptive_check_every}) must be <= max_capacity ({setup.max_capacity}) "
            "with adaptive=True: aER's interval k is a multiple of it and at most max_capacity."
        )


def _check_n_step_and_target(setup: Setup) -> None:
    """ValueError for a ``max_n_step`` no window can use or that would compile for minutes, and for a flag
    that would do nothing (``target_period_in_updates`` with Polyak averaging): said, not ignored."""
    if setup.max_n_step > min(setup.max_capacity, MAX_N_STEP):
        raise _validation.FieldError(
            "max_n_step",
            f"must be <= {min(setup.max_capacity, MAX_N_STEP)}, got {setup.max_n_step}: "
            + (
                f"no window holds more than max_capacity ({setup.max_capacity}) transitions."
                if setup.max_n_step > setup.max_capacity
                else f"the n-step window is unrolled when compiled, and above {MAX_N_STEP} compiling takes "
                "minutes to hours (400: a minute; 500: over 7 on a CPU)."
            ),
        )
    if setup.target_period_in_updates and setup.target_update == "polyak":
        raise ValueError(
            "target_period_in_updates counts the period of hard target copies; with target_update='polyak' "
            "(a soft update every gradient update) it does nothing: leave it False, or use target_update='hard'."
        )


class Hyperparameters(NamedTuple):
    """Traced hyperparameters of one run (each a scalar; give them a leading run axis to sweep).

    Attributes:
        memory_size: the memory's capacity N (aER: the initial N0), in [1, max_capacity].
        step_size: the optimizer's learning rate α >= 0.
        discount: γ in [0, 1).
        epsilon_start, epsilon_end: ε-greedy exploration at step 0 and after
            the ramp, in [0, 1].
        epsilon_decay_steps: length of the linear ε ramp in environment steps (>= 0).
        epsilon_ramp_start: environment steps before the ε ramp begins (>= 0;
            default 0): ε is ``epsilon_start`` for the first
            ``epsilon_ramp_start`` steps (1.0: acting at random, as MinAtar's
            baseline does before its replay start), then ramps over
            ``epsilon_decay_steps``.
        learning_starts: no gradient step before this many environment steps (>= 0).
        target_period: hard target copy every this many environment steps (>= 1;
            gradient updates with ``Setup.target_period_in_updates``). Counted in
            steps, the copy is made at the end of a unit (after its updates)
            into which a multiple of the period falls, once per such unit: with
            ``target_period < train_frequency`` several multiples share one copy
            (``target_copies`` counts copies made; the online network changes
            only at units' ends, so more copies would copy the same weights).
        target_tau: Polyak coefficient τ in [0, 1] (``target_update="polyak"``).
        priority_exponent: α >= 0 of stored-priority replay.
        importance_exponent: β >= 0 of its importance weights (0: none, 1: full).
        priority_floor: ε >= 0 added to |δ| before the exponent.
        adaptive_interval: aER's k >= 1, a multiple of ``Setup.adaptive_check_every``
            and at most ``max_capacity`` (both with aER only: without it the
            field is unused, and only k >= 1 is checked).
        adaptive_num_old: aER's n_old (old transitions checked), in [1, max_num_old]
            (paper: half the initial memory; the upper bound with aER only).
        adaptive_tolerance: aER's ε >= 0 (shrink iff |δ_old|' < (1 - ρ)|δ_old| - ε;
            0 is Algorithm 2 except on exact ties, where it enlarges).
        adaptive_relative_tolerance: aER's ρ in [0, 1]: the ε variant as a
            fraction of |δ_old| (free of the TD errors' scale).
        adaptive_rule: 0 fixed (the controller is not consulted), 1 aER,
            2 the random ±k walk control, 3 aER with accumulated evidence
            (:data:`ADAPTIVE_RULES`).
        adaptive_evidence_threshold: h >= 1 of rule 3: resize by k only when
            the two-sided CUSUM of aER's votes (+1 grow, -1 shrink) since
            the last resize reaches h (:mod:`jaxreplay.evidence`).
        adaptive_evidence_allowance: δ in [0, 1) of rule 3: the CUSUM's
            allowance (each vote counts ±1 - δ); δ > 0 keeps coin-toss
            votes from ever adding up. h = 1 with δ = 0 is aER. The other
            rules ignore both.
        adaptive_td_target: 0 (default): aER's TD errors use the online
            network on both sides (Algorithm 2); 1: the target network
            bootstraps (as the loss does).
        adaptive_paired: 1 (default): the next check re-evaluates the
            reference's draws (the same transitions); 0: independent draws
            (:func:`jaxreplay.adaptive.controller`).
        adaptive_equal_counts: 1 (default): both sums of a comparison cover
            equally many transitions; 0: the literal index ranges.
        adam_epsilon: Adam's ε > 0 (at 0 a parameter whose gradient is 0 gets 0/0: NaN).
        n_step: the horizon n of the TD targets, an integer in ``[1,
            Setup.max_n_step]``: up to n rewards summed, then γ^k times the
            bootstrap value (:mod:`jaxreplay.returns`; n = 1 is the 1-step
            target). Traced: a sweep over n is one program. At most the
            fewest slots the memory ever has (:func:`smallest_memory`: the
            memory size, or the size aER can shrink it to), which no window
            exceeds.
        replay_ratio: gradient updates per environment step, in ``(0,
            Setup.max_replay_ratio]`` (a concrete 0 is refused; a traced
            one runs no updates and sets ``invalid_hyperparameters``);
            fractional ratios accumulate (0.25: one update every 4 steps).
            After ``t`` steps ``floor(t × float32(ratio))`` updates were
            due, counted exactly in integers (the updates of a unit are made
            at its end); a ratio runs as its float32 value (2.1 is
            2.0999999), so where ``t × ratio`` is an integer the count may be
            one short (2.1 after 100 steps: 209), never more.
            :func:`check` refuses a ratio whose rounding would make some
            unit due more updates than ``max_updates_per_unit`` slots
            (:func:`update_slots_needed`). ``learning_starts`` is read at a
            unit's end: a unit that ends at ``t >= learning_starts`` makes
            all its due updates, so up to ``train_frequency - 1`` of them
            were due before ``learning_starts`` (``train_frequency`` 4,
            ratio 1, ``learning_starts`` 10: the unit ending at step 12 makes
            4, 40 in 48 steps); the units that end before it make none.
    """

    memory_size: ArrayLike = 10_000
    step_size: ArrayLike = 1e-3
    discount: ArrayLike = 0.99
    epsilon_start: ArrayLike = 1.0
    epsilon_end: ArrayLike = 0.05
    epsilon_decay_steps: ArrayLike = 5_000
    learning_starts: ArrayLike = 1_000
    target_period: ArrayLike = 500
    target_tau: ArrayLike = 0.005
    priority_exponent: ArrayLike = 0.6
    importance_exponent: ArrayLike = 0.4
    priority_floor: ArrayLike = 1e-6
    adaptive_interval: ArrayLike = 20
    adaptive_num_old: ArrayLike = 50
    adaptive_tolerance: ArrayLike = 0.0
    adaptive_relative_tolerance: ArrayLike = 0.0
    adaptive_rule: ArrayLike = RULE_AER
    adaptive_td_target: ArrayLike = 0
    adaptive_paired: ArrayLike = 1
    adaptive_equal_counts: ArrayLike = 1
    adam_epsilon: ArrayLike = 1e-8
    n_step: ArrayLike = 1
    replay_ratio: ArrayLike = 1.0
    adaptive_evidence_threshold: ArrayLike = 4.0
    adaptive_evidence_allowance: ArrayLike = 0.25
    epsilon_ramp_start: ArrayLike = 0


_INT_FIELDS = frozenset(
    {
        "memory_size",
        "epsilon_decay_steps",
        "epsilon_ramp_start",
        "learning_starts",
        "target_period",
        "adaptive_interval",
        "adaptive_num_old",
        "adaptive_rule",
        "adaptive_td_target",
        "adaptive_paired",
        "adaptive_equal_counts",
        "n_step",
    }
)


def as_arrays(hparams: Hyperparameters) -> Hyperparameters:
    """Each field as a JAX array of its canonical dtype (``int32`` or ``float32``), shape kept."""
    return Hyperparameters(
        *(
            jnp.asarray(value, jnp.int32 if name in _INT_FIELDS else jnp.float32)
            for name, value in zip(Hyperparameters._fields, hparams)
        )
    )


def check(hparams: Hyperparameters, setup: Setup) -> None:
    """Raise ValueError naming any concrete hyperparameter outside its range.

    Each field may be a scalar or an array (e.g. ``[R]`` for a sweep); every
    entry is checked. Traced fields pass unchecked.
    """
    if not isinstance(hparams, Hyperparameters):
        raise ValueError(f"hparams must be a dqn.Hyperparameters, got {type(hparams).__name__}.")
    if not isinstance(setup, Setup):
        raise ValueError(f"setup must be a dqn.Setup, got {type(setup).__name__}.")
    h = hparams
    for name, bounds in _bounds(setup).items():
        if name in _BOUNDED_BY_SETUP:  # their upper bounds are checked below, saying which Setup field to raise
            bounds = bounds._replace(high=None)
        _validation.check_bounds(name, getattr(h, name), bounds)
    interval = _validation.concrete_value(h.adaptive_interval)
    if setup.adaptive and interval is not None and np.any(np.asarray(interval) % setup.adaptive_check_every):
        raise ValueError(
            f"adaptive_interval must be a multiple of Setup.adaptive_check_every ({setup.adaptive_check_every}), "
            f"got {h.adaptive_interval!r}; lower adaptive_check_every (a divisor of every interval) to allow it."
        )
    # The upper bounds are static Setup fields: say which one to raise.
    _check_at_most("n_step", h.n_step, setup.max_n_step, f"Setup.max_n_step ({setup.max_n_step})", "raise max_n_step")
    _check_n_step_within_smallest_memory(h, setup)
    if setup.sampler == "prioritized":  # (a floor whose ε^α runs as 0: a TD error of 0 would never be replayed)
        prioritized.check_floor_power(h.priority_floor, h.priority_exponent)
    ratio = _validation.concrete_value(h.replay_ratio)
    if ratio is not None and np.any(ratio <= 0):  # no updates at all: not a DQN run (set learning_starts instead)
        bad = float(np.asarray(ratio).reshape(-1)[np.asarray(ratio).reshape(-1) <= 0][0])
        raise _validation.FieldError(
            "replay_ratio", f"must be > 0 (gradient updates per environment step), got {bad:g}."
        )
    bound = (
        f"Setup.max_replay_ratio = max_updates_per_unit / train_frequency "
        f"({setup.max_updates_per_unit}/{setup.train_frequency})"
    )
    # (train_frequency is the unit's length: one update every F steps is replay_ratio = 1/F, not train_frequency alone.)
    advice = "raise max_updates_per_unit"
    if setup.train_frequency > 1:
        advice = (
            f"set replay_ratio = 1/{setup.train_frequency} for one update every {setup.train_frequency} steps, or "
            + advice
        )
    _check_at_most("replay_ratio", h.replay_ratio, setup.max_replay_ratio, bound, advice)
    for r in np.unique(np.asarray(ratio, np.float32)) if ratio is not None else ():
        due = _most_updates_due(float(r), setup)
        # (a float32 value just above slots / F: its excess adds up to one more in some unit of a long run)
        if due > setup.max_updates_per_unit:
            raise _validation.FieldError(
                "replay_ratio",
                f"= {float(r):g} makes {due} updates due in some unit of {setup.train_frequency} steps (t × ratio "
                f"counted exactly for its float32 value, {float(r)!r}), more than Setup.max_updates_per_unit "
                f"({setup.max_updates_per_unit}) slots: raise max_updates_per_unit to {due}, or the run would "
                "silently skip updates.",
            )


_BOUNDED_BY_SETUP = ("n_step", "replay_ratio")
"""Fields whose upper bound is a static :class:`Setup` bound that :func:`check` names in its message."""


def _bounds(setup: Setup) -> dict[str, _validation.Bounds]:
    """Each hyperparameter's allowed values (:class:`Hyperparameters`), in the order :func:`check` checks them.
    ``replay_ratio`` must also be > 0 and ``adaptive_interval`` a multiple of ``adaptive_check_every`` (aER)."""
    b = _validation.Bounds
    flag = b(True, 0, 1)
    return {
        "memory_size": b(True, 1, setup.max_capacity),
        "step_size": b(False, 0.0),
        "discount": b(False, 0.0, 1.0, high_inclusive=False),
        "epsilon_start": b(False, 0.0, 1.0),
        "epsilon_end": b(False, 0.0, 1.0),
        "epsilon_decay_steps": b(True, 0),
        "epsilon_ramp_start": b(True, 0),
        "learning_starts": b(True, 0),
        "target_period": b(True, 1),
        "target_tau": b(False, 0.0, 1.0),
        "priority_exponent": b(False, 0.0),
        "importance_exponent": b(False, 0.0),
        "priority_floor": b(False, 0.0),
        # aER's sizes are bounded by the memory only where aER runs (a fixed-memory setup never reads them).
        "adaptive_interval": b(True, 1, setup.max_capacity if setup.adaptive else None),
        "adaptive_num_old": b(True, 1, setup.num_old_bound if setup.adaptive else None),
        "adaptive_tolerance": b(False, 0.0),
        "adaptive_relative_tolerance": b(False, 0.0, 1.0),
        "adaptive_rule": b(True, 0, len(ADAPTIVE_RULES) - 1),
        "adaptive_evidence_threshold": evidence.THRESHOLD_BOUNDS,
        "adaptive_evidence_allowance": evidence.ALLOWANCE_BOUNDS,
        "adaptive_td_target": flag,
        "adaptive_paired": flag,
        "adaptive_equal_counts": flag,
        "adam_epsilon": b(False, 0.0, low_inclusive=False),  # (0: a gradient of 0 became 0/0, NaN weights)
        "n_step": b(True, 1, setup.max_n_step),
        "replay_ratio": b(False, 0.0, float(np.float32(setup.max_replay_ratio))),
    }


def invalid_hyperparameters(hparams: Hyperparameters, setup: Setup) -> jax.Array:
    """``bool[]``: some (traced) field of ``hparams`` is a value :func:`check` refuses (NaN, ±inf, out of
    range, a fractional integer, a ratio <= 0, an aER interval off the check grid, a stored-priority floor
    whose ``ε^α`` runs as 0: :func:`jaxreplay.prioritized.floor_power_underflows`).

    Jitted code cannot raise: the run goes on (integers truncated, then memory size, n and the ratio clipped,
    the rest used as given) and this flag (the summary's ``invalid_hyperparameters``) says its numbers mean
    nothing. It must see the fields as given, before :func:`as_arrays` truncates integers.
    """
    flags = [_validation.outside_bounds(getattr(hparams, name), b) for name, b in _bounds(setup).items()]
    flags.append(jnp.any(jnp.asarray(hparams.replay_ratio) <= 0))
    flags.append(
        jnp.any(
            jnp.asarray(hparams.n_step)
            > smallest_memory(jnp, hparams.memory_size, hparams.adaptive_interval, hparams.adaptive_rule, setup)
        )
    )
    if setup.adaptive:
        interval = jnp.asarray(hparams.adaptive_interval)
        flags.append(jnp.any(jnp.mod(interval, setup.adaptive_check_every) != 0))
    if setup.sampler == "prioritized":  # (the memory then makes every priority update a no-op)
        flags.append(jnp.any(prioritized.floor_power_underflows(hparams.priority_floor, hparams.priority_exponent)))
    return jnp.any(jnp.stack(flags))


def smallest_memory(xp, memory_size, adaptive_interval, adaptive_rule, setup: Setup):
    """The fewest slots a run's memory ever has (NumPy or ``jnp`` as ``xp``, broadcast over runs).

    ``memory_size`` for a memory that keeps its size (no aER, or ``adaptive_rule`` 0). Under another aER
    rule the size moves by ``k = adaptive_interval`` and shrinks only from ``N >= 2k``
    (:func:`jaxreplay.adaptive.controller`: below, a check enlarges), so from ``N0 = memory_size`` it can
    reach ``k + N0 mod k`` (``N0`` itself below ``2k``), and, once a growth was capped at
    ``max_capacity``, ``k + max_capacity mod k``.
    """
    size = xp.asarray(memory_size)
    if not setup.adaptive:
        return size
    k = xp.maximum(xp.asarray(adaptive_interval), 1)

    def lowest(n):  # the smallest size reached by shrinking from n (by k, only from 2k up)
        return xp.where(n < 2 * k, n, k + n % k)

    reach = xp.minimum(lowest(size), lowest(setup.max_capacity))  # (memory_size <= max_capacity: check)
    return xp.where(xp.asarray(adaptive_rule) == RULE_FIXED, size, reach)


def _check_n_step_within_smallest_memory(hparams: Hyperparameters, setup: Setup) -> None:
    """FieldError naming ``n_step`` for a concrete run whose n exceeds the fewest slots its memory ever has."""
    names = ("n_step", "memory_size", "adaptive_rule", "adaptive_interval")
    parts = [_validation.concrete_value(getattr(hparams, f)) for f in names]
    concrete = [p for p in parts if p is not None]
    if len(concrete) < len(parts):
        return
    n, size, rule, k = np.broadcast_arrays(*concrete)
    smallest = smallest_memory(np, size, k, rule, setup)
    beyond = n > smallest
    if np.any(beyond):
        i = np.flatnonzero(beyond)[0]
        n_i, low = n.reshape(-1)[i].item(), smallest.reshape(-1)[i].item()
        size_i = size.reshape(-1)[i].item()
        if low == size_i:
            where = "memory_size, the fewest slots its memory has"
        else:
            where = f"the size aER can shrink memory_size {size_i} to by adaptive_interval {k.reshape(-1)[i].item()}"
        raise _validation.FieldError(
            "n_step",
            f"must be <= {low} ({where}), got {n_i}: no window holds more transitions, so a larger n would run "
            f"as a shorter return under n's label.",
        )


def _check_at_most(name: str, value: ArrayLike, high: float, bound: str, advice: str) -> None:
    """FieldError naming ``name`` if a concrete entry of ``value`` (already checked to be a number) exceeds ``high``."""
    arr = _validation.concrete_value(value)
    # Compared in float32, the dtype it runs in: 0.7 with 7 slots per 10 steps is the bound float32(0.7).
    # (Capped below float32's largest first: a NumPy cast overflowing to inf would warn.)
    if arr is not None and np.any(np.minimum(np.asarray(arr, np.float64), 1e38).astype(np.float32) > np.float32(high)):
        shown = _validation._show(np.asarray(arr))  # Python numbers, not NumPy reprs
        raise _validation.FieldError(name, f"must be at most {bound}, got {shown}; {advice} to allow it.")


def effective_replay_ratio(replay_ratio: ArrayLike, setup: Setup) -> tuple[jax.Array, jax.Array]:
    """``(float32[] ratio, bool[] clipped)``: a (possibly traced) ``replay_ratio`` as the run uses it.

    A traced ratio cannot raise: outside ``[0, setup.max_replay_ratio]`` it is
    clipped, NaN is 0 (no updates), and the flag is set (the summary's
    ``replay_ratio_clipped``), as a traced capacity is clipped and flagged.
    """
    ratio = jnp.asarray(replay_ratio, jnp.float32)
    is_nan = jnp.isnan(ratio)
    clipped = jnp.clip(jnp.where(is_nan, 0.0, ratio), 0.0, jnp.float32(setup.max_replay_ratio))
    return clipped, is_nan | (clipped != ratio)


def broadcast_hyperparameters(hparams: Hyperparameters, runs: int) -> Hyperparameters:
    """Every field as an array of shape ``[runs]`` in its canonical dtype.

    Python and NumPy values are converted with NumPy (no device computation,
    hence nothing compiled); JAX arrays with ``jnp``, except that a floating
    JAX value of an integer field stays float32 (it may be traced: the run's
    flags must see a fractional value before :func:`as_arrays` truncates it).
    """
    fields: list[jax.Array | np.ndarray] = []
    for name, value in zip(Hyperparameters._fields, hparams):
        dtype = np.int32 if name in _INT_FIELDS else np.float32
        if isinstance(value, (jax.Array, jax.core.Tracer)):
            if jnp.issubdtype(jnp.result_type(value), jnp.floating):
                dtype = np.float32  # a traced 2.5 reaches the run's flags as 2.5 (the run truncates it)
            fields.append(jnp.broadcast_to(jnp.asarray(value, dtype), (runs,)))
        else:
            fields.append(np.broadcast_to(np.asarray(value, dtype), (runs,)))
    return Hyperparameters(*fields)


def num_segments(setup: Setup) -> int:
    """``total_steps // steps_per_segment``."""
    return setup.total_steps // setup.steps_per_segment


def with_total_steps(setup: Setup, steps: int) -> Setup:
    """``setup`` with runs of ``steps`` environment steps, in as many segments as before where they fit.

    ``steps`` must be a positive multiple of the cycle length
    (``train_frequency``, or ``adaptive_check_every`` with aER); the segment
    count is the largest one, up to the current count, that splits ``steps``
    into whole cycles. Everything else (memory sizes included) is kept.
    """
    cycle = setup.cycle_length
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < cycle or steps % cycle:
        what = (
            "a positive integer"
            if cycle == 1
            else f"a positive multiple of {cycle} (the train frequency, or the aER check interval with aER)"
        )
        raise _validation.FieldError("steps", f"must be {what}, got {steps!r}.")
    segments = min(num_segments(setup), steps // cycle)
    while steps % segments or (steps // segments) % cycle:
        segments -= 1
    return dataclasses.replace(setup, total_steps=int(steps), steps_per_segment=int(steps) // segments)


def update_slots_needed(replay_ratio: float, setup: Setup) -> int:
    """The fewest update slots per unit (``max_updates_per_unit``) that run ``replay_ratio`` exactly as
    ``setup`` does: no unit of the run has more updates due than slots, and the ratio is not clipped.

    Counted as the program counts (:func:`effective_replay_ratio`, and the updates due in the unit ending
    after ``t`` steps, ``D(t) - D(t - F)`` with :func:`updates_due_by`, for every unit of the run), so a
    float32 ratio just above ``slots / F``, whose rare units are due one more, is covered. A ratio the
    setup itself clips (above ``setup.max_replay_ratio``, or NaN) needs the setup's own bound.
    """
    ratio, frequency, bound = np.float32(replay_ratio), setup.train_frequency, setup.max_updates_per_unit
    if not (np.isfinite(ratio) and 0 <= ratio <= np.float32(setup.max_replay_ratio)):
        return bound
    slots = _most_updates_due(float(ratio), setup)
    while slots < bound and np.float32(slots / frequency) < ratio:  # (max_replay_ratio's rounding)
        slots += 1
    return min(slots, bound)


def _most_updates_due(replay_ratio: float, setup: Setup) -> int:
    """The most updates due in one unit of ``setup``'s run at ``replay_ratio`` (at least 1), counted as the
    program counts (:func:`_unit_dues`)."""
    due = 1
    for _, per_unit in _unit_dues(replay_ratio, setup.train_frequency, setup.train_frequency, setup.total_steps):
        due = max(due, int(per_unit.max()))
    return due


def updates_due_by(step: ArrayLike, replay_ratio: float) -> np.ndarray:
    """``D(t) = floor(t · ρ)`` (``int64``), exactly, with ``ρ`` the float32 value of ``replay_ratio``: the updates
    due in the first ``t`` environment steps, as the program counts them
    (:func:`jaxreplay.experiments.dqn.steps.floor_product`; the unit ending after ``t`` steps is due
    ``D(t) − D(t − F)``). ``t`` an integer below ``2**31`` (a negative one floors below 0)."""
    numerator, denominator = float(np.float32(replay_ratio)).as_integer_ratio()  # denominator = 2**shift
    shift = min(denominator.bit_length() - 1, 63)  # (t · numerator < 2**55: past 63 bits the floor is 0 or -1)
    return np.right_shift(np.asarray(step, np.int64) * np.int64(numerator), np.int64(shift))


def _unit_dues(replay_ratio: float, frequency: int, first: int, last: int):
    """``(t, D(t) − D(t − F))`` for the unit ends ``t`` from ``first`` to ``last`` (multiples of ``F``), in
    blocks of 2**20 units: a long run's units need not all be in memory."""
    block = frequency << 20
    for start in range(first, last + 1, block):
        t = np.arange(start, min(start + block, last + 1), frequency, dtype=np.int64)
        yield t, updates_due_by(t, replay_ratio) - updates_due_by(t - frequency, replay_ratio)


def first_unit_end(learning_starts: int, setup: Setup) -> int:
    """The first unit end (a multiple of ``train_frequency``, at least one unit) at or after ``learning_starts``:
    where a run may make its first gradient update."""
    frequency = setup.train_frequency
    return max(frequency, -(-int(learning_starts) // frequency) * frequency)


def first_update_due(replay_ratio: float, learning_starts: int, setup: Setup) -> int:
    """The environment step at whose unit's end a run's first gradient update is made: the first unit end ``t``
    (a multiple of ``train_frequency``) with ``t >= learning_starts`` at which an update is due (as the program
    counts: :func:`updates_due_by`); updates due at earlier unit ends are not made. It may lie beyond the run's
    end. ``replay_ratio`` > 0."""
    frequency, first = setup.train_frequency, first_unit_end(learning_starts, setup)
    # An update falls due within every 1/ρ steps: the search ends (below int32's top, where steps are counted).
    last = min(first + 2 * frequency + int(np.ceil(2 / replay_ratio)), np.iinfo(np.int32).max)
    for t, per_unit in _unit_dues(replay_ratio, frequency, first, last):
        if np.any(per_unit > 0):
            return int(t[np.argmax(per_unit > 0)])
    return last


def update_slot_groups(hparams: Hyperparameters, setup: Setup) -> tuple[np.ndarray, tuple[Setup, ...]]:
    """Runs grouped by the update slots their replay ratios need (the engine's ``Experiment.setup_groups``).

    Args:
        hparams: concrete hyperparameters with fields of shape ``[C]`` (one per configuration).
        setup: the sweep's setup; its ``max_updates_per_unit`` bounds every run's.

    Returns:
        ``(group, setups)``: ``group`` ``int[C]``, the index in ``setups`` of each configuration's setup;
        ``setups`` the distinct setups, fewest slots first, each ``setup`` with ``max_updates_per_unit``
        lowered to :func:`update_slots_needed` (``setup`` itself where that is its own bound). A run's
        result is the same in its group's program as in ``setup``'s: the slots above its due updates
        are masked, and slot ``j`` draws with ``fold_in(key, j)`` whatever the bound. (One known exception,
        a diagnostic: with stored-priority replay the logged ``td_loss`` can differ in its last bit in a
        record, from XLA:CPU's fused multiply-adds; docs/design.md §2 says why.)
    """
    ratios = np.asarray(hparams.replay_ratio, np.float32).reshape(-1)
    distinct, of_config = np.unique(ratios, return_inverse=True)
    slots = np.array([update_slots_needed(float(r), setup) for r in distinct], np.int64)
    bounds, group = np.unique(slots, return_inverse=True)
    setups = tuple(
        setup if b == setup.max_updates_per_unit else dataclasses.replace(setup, max_updates_per_unit=int(b))
        for b in bounds
    )
    return group[of_config].astype(np.int64), setups
