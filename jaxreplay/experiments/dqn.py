"""DQN on gymnax environments with uniform, prioritized or combined replay and aER.

The paper's "Performance on OpenAI Games with DQN" experiment (CartPole,
MountainCar, Acrobot; fixed memories vs the adaptive memory aER) as an
:class:`~jaxreplay.experiments.Experiment`: ``init`` / ``advance`` /
``summarize`` over *one run*, which the sweep engine vmaps over runs. The
memory size is traced, so runs with different fixed sizes, and aER runs with
different initial sizes, share one compiled program.

One environment step ``t = 1, 2, ...`` (``t`` counts steps done)::

    ε_t   = linear schedule(t - 1)                       (epsilon_start -> epsilon_end)
    a     = ε_t-greedy in Q(obs)
    obs', r, terminated, truncated = env.step(a)         (gymnax auto-resets)
    store (obs, a, r, final_obs, terminated)             (final_obs: before the reset)
    every train_frequency steps, once t >= learning_starts:
        sample a batch (uniform / prioritized / CER), one gradient step,
        prioritized: store the batch's new priorities,
        target network: hard copy when t crosses a multiple of target_period,
                        or Polyak averaging with target_tau after every update
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

Why the step loop is nested. Under ``vmap`` a ``lax.cond`` whose predicate
differs per run becomes a ``select`` that runs both branches every time. The
gradient step and the aER check would then be computed at every environment
step. Instead a segment is a ``lax.scan`` over *cycles* with a static shape:
a cycle is ``adaptive_check_every / train_frequency`` *units*, a unit is
``train_frequency`` environment steps followed by one (masked) gradient step,
and the aER controller is consulted once at the end of each cycle. The
controller itself fires only when ``t`` is a multiple of the traced
``adaptive_interval``, which must therefore be a multiple of the static
``adaptive_check_every`` (``check`` says so). A consultation costs its TD
errors (``subsample_size`` forward passes, twice when shrinking) whether or
not it fires, so consulting every ``20`` steps instead of every step cuts aER's
overhead 20-fold. Gradient steps before ``learning_starts`` are computed and
discarded (masked), which keeps ``learning_starts`` traced. The gradient step
and the aER consultation sit behind an always-true ``lax.cond`` on the
(unbatched) scan index, a boundary XLA does not fuse across: without it XLA
fused the minibatch gather with the preceding buffer write and copied whole
buffer leaves at every step (see ``_isolated``; 4.5x slower at 10^4 slots).

Randomness. Every draw derives from the run's key with ``fold_in`` on the
step count (per step: action, environment, minibatch, aER subsample; at a
segment end: the evaluation episodes), so a run does not depend on how it is
batched or segmented.

What is recorded: a :class:`Record` per segment (dim ``"segment"``,
coordinate: the environment steps done at its end: training and evaluation
returns, TD loss, the memory's capacity, ε) and a :class:`Summary` at the
run's end. Nothing grows with the run's length except the records
themselves (a few scalars per segment).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import TYPE_CHECKING, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation, adaptive, buffer
from jaxreplay import envs as envs_lib
from jaxreplay import memory as memory_lib
from jaxreplay._typing import ArrayLike, PyTree
from jaxreplay.agents import dqn as agent
from jaxreplay.experiments import Experiment

if TYPE_CHECKING:  # annotations only: the optional rl extra is checked by jaxreplay.envs on import
    import optax
    from gymnax.environments import environment as gymnax_environment

SAMPLERS = memory_lib.KINDS
"""The replay memories DQN runs with, by ``Setup.sampler``: the kinds of :func:`jaxreplay.memory.make`."""
TARGET_UPDATES = ("hard", "polyak")
"""How the target network follows the online one: a copy every period, or Polyak averaging."""
ADAPTIVE_RULES = ("fixed", "aer", "random")
"""Values of ``Hyperparameters.adaptive_rule`` by index: 0 keeps the memory size
(a static run inside an aER program), 1 is aER (Algorithm 2), 2 is the random
±k walk control (a fair coin instead of the TD errors)."""
RULE_FIXED, RULE_AER, RULE_RANDOM = 0, 1, 2

# Independent key streams derived from a run's key (fold_in data).
_STREAM_STEP, _STREAM_EVAL, _STREAM_PARAMS, _STREAM_RESET = 0, 1, 2, 3


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
        steps_per_segment: steps per :func:`advance` call (one record point);
            a multiple of the cycle length (``train_frequency``, or
            ``adaptive_check_every`` with ``adaptive``).
        hidden_sizes: widths of the Q-network's ReLU hidden layers.
        max_capacity: replay slots allocated (memory sizes and aER's growth
            are limited to it).
        batch_size: minibatch size (paper: 50).
        sampler: ``"uniform"``, ``"prioritized"`` (stored priorities on a sum
            tree with importance weights, :mod:`jaxreplay.prioritized`) or
            ``"cer"`` (newest transition + uniform, :func:`jaxreplay.samplers.combined`).
        adaptive: resize the memory with aER (Algorithm 2) on top of ``sampler``.
        adaptive_check_every: static granularity, in environment steps, at
            which aER is consulted; a multiple of ``train_frequency``. The
            traced ``adaptive_interval`` must be a multiple of it (module
            docstring: why).
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
        train_frequency: environment steps per gradient step.
        eval_episodes: greedy evaluation episodes at each segment end
            (vmapped, each a scan of the environment's ``max_steps_in_episode``
            steps); 0 disables (no ``"eval_return"`` record).
        truncation_bootstrap: bootstrap through time-limit truncations (the
            correct target). ``False`` treats them as terminal.
        recent_episodes: length of the window of the last training-episode
            returns kept for the summary's ``"recent_return"``.
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

    def __post_init__(self):
        if isinstance(self.env_params, dict):
            object.__setattr__(self, "env_params", tuple(sorted(self.env_params.items())))
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
        ):
            _validation.check_static_int(name, getattr(self, name), low=1)
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
        for name in ("adaptive", "double", "truncation_bootstrap"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}.")
        if self.total_steps % self.steps_per_segment:
            raise ValueError(
                f"total_steps ({self.total_steps}) must be a multiple of steps_per_segment ({self.steps_per_segment})."
            )
        if self.adaptive and self.adaptive_check_every % self.train_frequency:
            raise ValueError(
                f"adaptive_check_every ({self.adaptive_check_every}) must be a multiple of "
                f"train_frequency ({self.train_frequency})."
            )
        if self.steps_per_segment % self.cycle_length:
            raise ValueError(
                f"steps_per_segment ({self.steps_per_segment}) must be a multiple of the cycle length "
                f"{self.cycle_length} (train_frequency, or adaptive_check_every with adaptive=True)."
            )
        # ValueError: unknown id, unknown parameter or a value its default's type or range rules out.
        object.__setattr__(self, "env_params", check_env_params(self.env_id, self.env_params))
        try:
            env, env_params = _environment(self.env_id, self.env_params)
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

    @property
    def cycle_length(self) -> int:
        """Environment steps per scan cycle (static; module docstring)."""
        return self.adaptive_check_every if self.adaptive else self.train_frequency

    @property
    def num_old_bound(self) -> int:
        """The static bound of ``adaptive_num_old``."""
        return self.max_capacity if self.max_num_old is None else self.max_num_old


class Hyperparameters(NamedTuple):
    """Traced hyperparameters of one run (each a scalar; give them a leading run axis to sweep).

    Attributes:
        memory_size: the memory's capacity N (aER: the initial N0), in [1, max_capacity].
        step_size: the optimizer's learning rate α >= 0.
        discount: γ in [0, 1).
        epsilon_start, epsilon_end: ε-greedy exploration at step 0 and after
            the ramp, in [0, 1].
        epsilon_decay_steps: length of the linear ε ramp in environment steps (>= 0).
        learning_starts: no gradient step before this many environment steps (>= 0).
        target_period: hard target copy every this many environment steps (>= 1).
        target_tau: Polyak coefficient τ in [0, 1] (``target_update="polyak"``).
        priority_exponent: α >= 0 of stored-priority replay.
        importance_exponent: β >= 0 of its importance weights (0: none, 1: full).
        priority_floor: ε >= 0 added to |δ| before the exponent.
        adaptive_interval: aER's k >= 1, a multiple of ``Setup.adaptive_check_every``.
        adaptive_num_old: aER's n_old (old transitions checked), in [1, max_num_old]
            (paper: half the initial memory).
        adaptive_tolerance: aER's ε >= 0 (shrink iff |δ_old|' < (1 - ρ)|δ_old| - ε;
            0 is Algorithm 2 except on exact ties, where it enlarges).
        adaptive_relative_tolerance: aER's ρ in [0, 1]: the ε variant as a
            fraction of |δ_old| (free of the TD errors' scale).
        adaptive_rule: 0 fixed (the controller is not consulted), 1 aER,
            2 the random ±k walk control (:data:`ADAPTIVE_RULES`).
        adaptive_td_target: 0 (default): aER's TD errors use the online
            network on both sides (Algorithm 2); 1: the target network
            bootstraps (as the loss does).
        adaptive_paired: 1 (default): the next check re-evaluates the
            reference's draws (the same transitions); 0: independent draws
            (:func:`jaxreplay.adaptive.controller`).
        adaptive_equal_counts: 1 (default): both sums of a comparison cover
            equally many transitions; 0: the literal index ranges.
        adam_epsilon: Adam's ε >= 0.
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


_INT_FIELDS = frozenset(
    {
        "memory_size",
        "epsilon_decay_steps",
        "learning_starts",
        "target_period",
        "adaptive_interval",
        "adaptive_num_old",
        "adaptive_rule",
        "adaptive_td_target",
        "adaptive_paired",
        "adaptive_equal_counts",
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
    _validation.check_int("memory_size", h.memory_size, low=1, high=setup.max_capacity)
    _validation.check_float("step_size", h.step_size, low=0.0)
    _validation.check_float("discount", h.discount, low=0.0, high=1.0, high_inclusive=False)
    _validation.check_float("epsilon_start", h.epsilon_start, low=0.0, high=1.0)
    _validation.check_float("epsilon_end", h.epsilon_end, low=0.0, high=1.0)
    _validation.check_int("epsilon_decay_steps", h.epsilon_decay_steps, low=0)
    _validation.check_int("learning_starts", h.learning_starts, low=0)
    _validation.check_int("target_period", h.target_period, low=1)
    _validation.check_float("target_tau", h.target_tau, low=0.0, high=1.0)
    _validation.check_float("priority_exponent", h.priority_exponent, low=0.0)
    _validation.check_float("importance_exponent", h.importance_exponent, low=0.0)
    _validation.check_float("priority_floor", h.priority_floor, low=0.0)
    _validation.check_int("adaptive_interval", h.adaptive_interval, low=1, high=setup.max_capacity)
    interval = _validation.concrete_value(h.adaptive_interval)
    if setup.adaptive and interval is not None and np.any(np.asarray(interval) % setup.adaptive_check_every):
        raise ValueError(
            f"adaptive_interval must be a multiple of Setup.adaptive_check_every ({setup.adaptive_check_every}), "
            f"got {h.adaptive_interval!r}; lower adaptive_check_every (a divisor of every interval) to allow it."
        )
    _validation.check_int("adaptive_num_old", h.adaptive_num_old, low=1, high=setup.num_old_bound)
    _validation.check_float("adaptive_tolerance", h.adaptive_tolerance, low=0.0)
    _validation.check_float("adaptive_relative_tolerance", h.adaptive_relative_tolerance, low=0.0, high=1.0)
    _validation.check_int("adaptive_rule", h.adaptive_rule, low=0, high=len(ADAPTIVE_RULES) - 1)
    for name in ("adaptive_td_target", "adaptive_paired", "adaptive_equal_counts"):
        _validation.check_int(name, getattr(h, name), low=0, high=1)
    _validation.check_float("adam_epsilon", h.adam_epsilon, low=0.0)


# ----------------------------------------------------------------------------
# Pieces shared by init / advance / summarize


_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT32_MAX = int(np.iinfo(np.int32).max)


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
    ``speed >= 0``).

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
        where = f"setup.env_params.{name}"
        if name not in fields:
            raise ValueError(f"{where}: not a parameter of {env_id}; it has {', '.join(fields)}.")
        if name in checked:
            raise ValueError(f"{where} is given twice.")
        checked[name] = _check_env_param(where, value, getattr(defaults, name))
    return tuple(checked.items())


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
        low = 1 if default >= 1 else -_INT32_MAX - 1
        if real is None or not finite or not real.is_integer() or not low <= real <= _INT32_MAX:
            rule = "an integer >= 1" if low == 1 else "an integer"
            raise ValueError(
                f"{where} must be {rule} within int32 (like its default {default}: a length, a count or an "
                f"interval), got {value!r}."
            )
        return int(real)
    if isinstance(default, float):
        if real is None or not finite or abs(real) > _FLOAT32_MAX:
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


@functools.lru_cache(maxsize=None)
def _environment(env_id: str, env_params: tuple):
    """``(env, params)``; cached so that gymnax's jitted ``step`` sees one hashable ``env``.

    ``env_params`` are applied as given: :func:`check_env_params` checks them first.
    """
    if env_id.startswith("Probe-") or env_id == "LineSearch":
        return envs_lib.make(env_id, **dict(env_params))
    env, params = envs_lib.make(env_id)
    if env_params:
        params = params.replace(**dict(env_params))
    return env, params


def environment(setup: Setup):
    """``(env, env_params)`` of ``setup`` (a gymnax environment and its parameters)."""
    return _environment(setup.env_id, setup.env_params)


def network(setup: Setup) -> agent.QNetwork:
    """The :class:`~jaxreplay.agents.dqn.QNetwork` of ``setup``."""
    env, params = environment(setup)
    return agent.QNetwork(setup.hidden_sizes, env.num_actions, len(_obs_shape(setup)))


@functools.lru_cache(maxsize=None)
def _obs_shape(setup: Setup) -> tuple[int, ...]:
    # Cached: network() asks for it in every init / advance / evaluate / q_values trace.
    env, params = environment(setup)
    return tuple(jax.eval_shape(lambda k: env.reset(k, params)[0], jax.random.key(0)).shape)


def _max_episode_steps(setup: Setup) -> int:
    _, params = environment(setup)
    return int(params.max_steps_in_episode)


def example_transition(setup: Setup) -> dict:
    """One stored transition (zeros): ``obs``/``next_obs`` float32[*obs_shape], ``action`` int32,
    ``reward`` and ``terminated`` float32."""
    obs = jnp.zeros(_obs_shape(setup), jnp.float32)
    return {"obs": obs, "action": jnp.int32(0), "reward": jnp.float32(0), "next_obs": obs, "terminated": jnp.float32(0)}


def replay_memory(setup: Setup, hparams: Hyperparameters) -> memory_lib.Memory:
    """The replay memory of ``setup.sampler`` with its hyperparameters (those of
    :data:`jaxreplay.memory.HYPERPARAMETERS`) bound from ``hparams``; built
    inside the traced function, so they may be traced."""
    bound = {name: getattr(hparams, name) for name in memory_lib.HYPERPARAMETERS[setup.sampler]}
    return memory_lib.make(setup.sampler, **bound)


class DQNState(NamedTuple):
    """One run's full state (a pytree; gains a leading run axis under vmap).

    Attributes:
        params, target_params: online and target Q-network parameters.
        opt_state: optimizer state.
        memory: :class:`~jaxreplay.buffer.BufferState`, or
            :class:`~jaxreplay.prioritized.PrioritizedState` for ``sampler="prioritized"``.
        controller: :class:`~jaxreplay.adaptive.AdaptiveState` (unused unless ``adaptive``).
        env_state, obs: the environment's state and current observation.
        episode_return: ``float32[]``; return of the current training episode so far.
        recent_returns: ``float32[recent_episodes]``; ring of the last completed
            episodes' returns (slot ``episodes % recent_episodes`` is next).
        episodes: ``int32[]``; training episodes completed.
        step: ``int32[]``; environment steps done.
        gradient_steps: ``int32[]``; gradient steps made.
        target_copies: ``int32[]``; hard target copies made (Polyak: updates).
        copies_at_check: ``int32[]``; ``target_copies`` at aER's latest check.
        straddle_checks, straddle_grows: ``int32[]``; aER checks (and of them
            enlargements) with a target copy since the previous check.
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
    key: jax.Array


class Record(NamedTuple):
    """One segment's record point, each a scalar (:func:`advance` gives every leaf a
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
            end (:func:`evaluate`); ``None``, and not recorded, when
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
    """

    diverged: jax.Array
    recent_return: jax.Array
    episodes: jax.Array
    gradient_steps: jax.Array
    final_capacity: jax.Array
    adaptive_checks: jax.Array
    adaptive_grows: jax.Array
    adaptive_shrinks: jax.Array
    adaptive_invalid: jax.Array
    adaptive_straddle_checks: jax.Array
    adaptive_straddle_grows: jax.Array
    adaptive_compared: jax.Array
    adaptive_noisy: jax.Array
    adaptive_change_sum: jax.Array
    adaptive_noise_sum: jax.Array
    capacity_clipped: jax.Array
    adaptive_invalid_parameters: jax.Array


def _strip_weak_types(tree):
    # gymnax resets put Python ints in the state (weakly typed after tracing),
    # steps return strong int32: give scan one carry type.
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.result_type(x)), tree)


# ----------------------------------------------------------------------------
# The protocol


def init(key: jax.Array, hparams: Hyperparameters, setup: Setup) -> DQNState:
    """One run's initial state: random Q-network (target = online), empty memory
    of capacity ``memory_size``, reset environment.

    Args:
        key: the run's PRNG key.
        hparams: scalar :class:`Hyperparameters` (traced or concrete).
        setup: static :class:`Setup`.

    Returns:
        A :class:`DQNState`. Cost: O(max_capacity) memory.
    """
    hp = as_arrays(hparams)
    env, env_params = environment(setup)
    net = network(setup)
    params = agent.init_params(jax.random.fold_in(key, _STREAM_PARAMS), net, _obs_shape(setup))
    opt_state = agent.make_optimizer(setup.optimizer).init(params)
    example = example_transition(setup)
    memory = replay_memory(setup, hp).init(example, setup.max_capacity, hp.memory_size)
    obs, env_state = env.reset(jax.random.fold_in(key, _STREAM_RESET), env_params)
    zero_i = jnp.zeros((), jnp.int32)
    return DQNState(
        params=params,
        target_params=params,
        opt_state=opt_state,
        memory=memory,
        controller=adaptive.init(setup.subsample_size if setup.adaptive else None),
        env_state=_strip_weak_types(env_state),
        obs=jnp.asarray(obs, jnp.float32),
        episode_return=jnp.zeros((), jnp.float32),
        recent_returns=jnp.full((setup.recent_episodes,), jnp.nan, jnp.float32),
        episodes=zero_i,
        step=zero_i,
        gradient_steps=zero_i,
        target_copies=zero_i,
        copies_at_check=zero_i,
        straddle_checks=zero_i,
        straddle_grows=zero_i,
        key=key,
    )


class _Accumulators(NamedTuple):
    """Sums over one segment (reset by every :func:`advance`); each a scalar."""

    return_sum: jax.Array
    episodes: jax.Array
    loss_sum: jax.Array
    losses: jax.Array
    capacity_sum: jax.Array


def _zero_accumulators() -> _Accumulators:
    """All sums 0: ``float32[]`` for the sums, ``int32[]`` for the counts."""
    zero_f, zero_i = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32)
    return _Accumulators(zero_f, zero_i, zero_f, zero_i, zero_f)


class _Context(NamedTuple):
    """What every step of one segment reads, bound once by :func:`advance` from ``setup`` and ``hparams``.

    Only passed to the step functions below at trace time (closed over by the
    scans and conditionals), never as a traced argument.

    Attributes:
        setup: the static :class:`Setup`.
        hp: the run's :class:`Hyperparameters`, each field a scalar array (:func:`as_arrays`).
        env, env_params: the environment and its parameters (:func:`environment`).
        net: the Q-network (:func:`network`).
        optimizer: ``setup.optimizer`` with ``hp.adam_epsilon``.
        replay: the replay memory with its hyperparameters bound (:func:`replay_memory`).
        controller: aER's controller with its settings bound (consulted only with ``setup.adaptive``).
        start_capacity: ``int32[]``; the memory's capacity when the segment starts.
    """

    setup: Setup
    hp: Hyperparameters
    env: gymnax_environment.Environment
    env_params: gymnax_environment.EnvParams
    net: agent.QNetwork
    optimizer: optax.GradientTransformation
    replay: memory_lib.Memory
    controller: adaptive.Controller
    start_capacity: jax.Array


# A carry of the step functions: the run's state and the segment's sums.
_Carry = tuple[DQNState, _Accumulators]


def _aer_controller(hp: Hyperparameters, setup: Setup) -> adaptive.Controller:
    """aER's :class:`~jaxreplay.adaptive.Controller` with the run's settings bound (``hp`` as arrays)."""
    return adaptive.controller(
        interval=hp.adaptive_interval,
        num_old=hp.adaptive_num_old,
        max_num_old=setup.num_old_bound,
        subsample_size=setup.subsample_size,
        tolerance=hp.adaptive_tolerance,
        relative_tolerance=hp.adaptive_relative_tolerance,
        shrink_reading=setup.shrink_reading,
        paired=jnp.asarray(hp.adaptive_paired) > 0,
        equal_counts=jnp.asarray(hp.adaptive_equal_counts) > 0,
        random_walk=hp.adaptive_rule == RULE_RANDOM,
    )


def _context(state: DQNState, hparams: Hyperparameters, setup: Setup) -> _Context:
    """The :class:`_Context` of the segment that starts from ``state``."""
    hp = as_arrays(hparams)
    env, env_params = environment(setup)
    replay = replay_memory(setup, hp)
    return _Context(
        setup=setup,
        hp=hp,
        env=env,
        env_params=env_params,
        net=network(setup),
        optimizer=agent.make_optimizer(setup.optimizer, hp.adam_epsilon),
        replay=replay,
        controller=_aer_controller(hp, setup),
        start_capacity=replay.buffer(state.memory).capacity,
    )


def _repeat(body, carry, length: int):
    """``body`` applied ``length`` (static) times; a scan unless ``length == 1``."""
    if length == 1:
        return body(carry)
    return jax.lax.scan(lambda c, _: (body(c), None), carry, None, length=length)[0]


def _scan_indexed(body, carry, start, length: int, always_scan: bool = False):
    """``body(carry, index)`` for ``index = start, ..., start + length - 1`` (a scan).

    The indices come from an ``arange`` made here, so they are *unbatched*
    under ``vmap`` (what :func:`_isolated` needs).
    """
    if length == 1 and not always_scan:
        return body(carry, jnp.asarray(start, jnp.int32))
    indices = start + jnp.arange(length, dtype=jnp.int32)
    return jax.lax.scan(lambda c, i: (body(c, i), None), carry, indices)[0]


def _isolated(index, fn, carry):
    """``fn(carry)``, behind a ``lax.cond`` that XLA cannot fuse across.

    The predicate ``index >= 0`` is always true; ``index`` is an unbatched
    scan index, so under ``vmap`` this stays a real conditional (one branch
    runs) instead of a ``select``. Why: XLA otherwise fuses the minibatch
    gather (in ``fn``) with the buffer write just before it, reading the old
    buffer plus the new transition; the old buffer then stays alive and whole
    buffer leaves are copied at every step (under ``vmap``, 4.5x slower at
    10^4 slots, growing with ``max_capacity``). A conditional's branch is a
    separate computation, so nothing fuses across it and the write stays in
    place. Measured: 100 vmapped CartPole runs, ``max_capacity`` 10^4 and 10^5,
    the same ~40k steps/s as at 10^3.
    """
    return jax.lax.cond(index >= 0, fn, lambda c: c, carry)


def _step_keys(state: DQNState) -> jax.Array:
    """Keys of the step that comes after ``state.step`` steps: (action, env, minibatch, aER)."""
    step_stream = jax.random.fold_in(state.key, _STREAM_STEP)
    return jax.random.split(jax.random.fold_in(step_stream, state.step), 4)


def _select(flag: ArrayLike, new: PyTree, old: PyTree) -> PyTree:
    """``new`` where ``flag`` (``bool[]``) else ``old``, leaf by leaf."""
    return jax.tree.map(lambda n, o: jnp.where(flag, n, o), new, old)


def _env_step(ctx: _Context, carry: _Carry) -> _Carry:
    """One ε-greedy environment step: the transition stored, the episode bookkeeping and sums updated."""
    s, acc = carry
    hp, setup = ctx.hp, ctx.setup
    action_key, env_key, _, _ = _step_keys(s)
    epsilon = agent.epsilon_schedule(s.step, hp.epsilon_start, hp.epsilon_end, hp.epsilon_decay_steps)
    action = agent.epsilon_greedy(action_key, agent.q_values(ctx.net, s.params, s.obs), epsilon)
    obs, env_state, reward, terminated, truncated, info = ctx.env.step(env_key, s.env_state, action, ctx.env_params)
    reward = jnp.asarray(reward, jnp.float32)
    no_bootstrap = terminated if setup.truncation_bootstrap else terminated | truncated
    transition = {
        "obs": s.obs,
        "action": action,
        "reward": reward,
        "next_obs": jnp.asarray(info["final_observation"], jnp.float32),
        "terminated": no_bootstrap.astype(jnp.float32),
    }
    memory = ctx.replay.add(s.memory, transition)
    done = terminated | truncated
    episode_return = s.episode_return + reward
    slot = s.episodes % setup.recent_episodes
    recent = s.recent_returns.at[slot].set(jnp.where(done, episode_return, s.recent_returns[slot]))
    s = s._replace(
        memory=memory,
        env_state=_strip_weak_types(env_state),
        obs=jnp.asarray(obs, jnp.float32),
        episode_return=jnp.where(done, 0.0, episode_return),
        recent_returns=recent,
        episodes=s.episodes + done.astype(jnp.int32),
        step=s.step + 1,
    )
    # The segment's mean capacity is summed as deviations from its first capacity: small
    # integers, exact in float32 (a float32 sum of capacities of 3e5 drifted by ~1e-4).
    capacity_step = (ctx.replay.buffer(memory).capacity - ctx.start_capacity).astype(jnp.float32)
    acc = acc._replace(
        return_sum=acc.return_sum + jnp.where(done, episode_return, 0.0),
        episodes=acc.episodes + done.astype(jnp.int32),
        capacity_sum=acc.capacity_sum + capacity_step,
    )
    return s, acc


def _update_target(ctx: _Context, s: DQNState, params: agent.Params, do_train: jax.Array):
    """``(target_params, copied)`` after a gradient step that moved the online network to ``params``.

    ``do_train`` (``bool[]``) says whether the step counts (``learning_starts``
    reached); ``copied`` (``bool[]``) whether it counts as a target update:
    a hard copy when a multiple of ``target_period`` lies in
    ``(t - train_frequency, t]``, or every counted Polyak update.
    """
    hp, setup = ctx.hp, ctx.setup
    if setup.target_update == "hard":
        crossed = s.step // hp.target_period > (s.step - setup.train_frequency) // hp.target_period
        copied = do_train & crossed
        return agent.hard_target_update(params, s.target_params, copied), copied
    polyak = agent.polyak_target_update(params, s.target_params, hp.target_tau)
    return _select(do_train, polyak, s.target_params), do_train


def _train(ctx: _Context, carry: _Carry) -> _Carry:
    """One gradient step on a sampled minibatch (masked before ``learning_starts``), the sampled
    transitions' priorities stored and the target network updated."""
    s, acc = carry
    hp, setup = ctx.hp, ctx.setup
    # Keys of the unit's last step (index s.step - 1): one draw per unit.
    _, _, sample_key, _ = _step_keys(s._replace(step=s.step - 1))
    do_train = s.step >= hp.learning_starts
    memory = s.memory
    sample = ctx.replay.sample(sample_key, memory, setup.batch_size)
    batch = buffer.get(ctx.replay.buffer(memory), sample.indices)
    params, opt_state, loss, delta = agent.train_step(
        ctx.net,
        ctx.optimizer,
        s.params,
        s.target_params,
        s.opt_state,
        batch,
        sample.weights,
        hp.step_size,
        hp.discount,
        loss=setup.loss,
        double=setup.double,
        reduction=setup.batch_reduction,
    )
    params, opt_state = _select(do_train, params, s.params), _select(do_train, opt_state, s.opt_state)
    # Slot -1 is skipped: a masked step stores nothing (uniform replay stores no priorities at all).
    indices = jnp.where(do_train, sample.indices, -1)
    memory = ctx.replay.update(memory, indices, delta)
    target, copied = _update_target(ctx, s, params, do_train)
    s = s._replace(
        params=params,
        target_params=target,
        opt_state=opt_state,
        memory=memory,
        gradient_steps=s.gradient_steps + do_train.astype(jnp.int32),
        target_copies=s.target_copies + copied.astype(jnp.int32),
    )
    acc = acc._replace(
        loss_sum=acc.loss_sum + jnp.where(do_train, loss, 0.0),
        losses=acc.losses + do_train.astype(jnp.int32),
    )
    return s, acc


def _unit(ctx: _Context, carry: _Carry, index: jax.Array) -> _Carry:
    """``train_frequency`` environment steps, then one gradient step (isolated: :func:`_isolated`)."""
    carry = _repeat(functools.partial(_env_step, ctx), carry, ctx.setup.train_frequency)
    return _isolated(index, functools.partial(_train, ctx), carry)


def _consult_adaptive(ctx: _Context, carry: _Carry) -> _Carry:
    """aER's controller consulted after the step ``s.step`` (it fires at multiples of
    ``adaptive_interval``), the memory resized and the straddle counts updated."""
    s, acc = carry
    hp, setup, replay = ctx.hp, ctx.setup, ctx.replay
    _, _, _, adaptive_key = _step_keys(s._replace(step=s.step - 1))
    params = s.params
    # Algorithm 2 writes Q(·; θ) on both sides; the target network is the option.
    use_target = jnp.asarray(hp.adaptive_td_target) > 0
    bootstrap = jax.tree.map(lambda t, p: jnp.where(use_target, t, p), s.target_params, params)
    td_error_fn = functools.partial(
        agent.td_errors, ctx.net, params, bootstrap, discount=hp.discount, double=setup.double
    )
    controller, capacity = ctx.controller.update(
        adaptive_key, s.controller, replay.buffer(s.memory), td_error_fn, s.step
    )
    # A fixed-rule run keeps its size and its (untouched) controller.
    active = hp.adaptive_rule != RULE_FIXED
    controller = _select(active, controller, s.controller)
    capacity = jnp.where(active, capacity, replay.buffer(s.memory).capacity)
    fired = controller.diagnostics.num_checks > s.controller.diagnostics.num_checks
    straddle = fired & (s.target_copies > s.copies_at_check)
    grew = controller.diagnostics.num_grows > s.controller.diagnostics.num_grows
    s = s._replace(
        controller=controller,
        memory=replay.resize(s.memory, capacity),
        copies_at_check=jnp.where(fired, s.target_copies, s.copies_at_check),
        straddle_checks=s.straddle_checks + straddle.astype(jnp.int32),
        straddle_grows=s.straddle_grows + (straddle & grew).astype(jnp.int32),
    )
    return s, acc


def _cycle(ctx: _Context, carry: _Carry, index: jax.Array) -> _Carry:
    """Cycle ``index`` of the segment: its units, then (aER) one consultation of the controller."""
    units = ctx.setup.cycle_length // ctx.setup.train_frequency
    carry = _scan_indexed(functools.partial(_unit, ctx), carry, index * units, units)
    return _isolated(index, functools.partial(_consult_adaptive, ctx), carry) if ctx.setup.adaptive else carry


def _record(ctx: _Context, state: DQNState, acc: _Accumulators) -> Record:
    """The segment's :class:`Record` from its sums and the state at its end (scalars)."""
    hp, setup = ctx.hp, ctx.setup
    nan = jnp.float32(jnp.nan)
    eval_return = None
    if setup.eval_episodes > 0:
        eval_key = jax.random.fold_in(jax.random.fold_in(state.key, _STREAM_EVAL), state.step)
        eval_return = evaluate(eval_key, state.params, setup)
    return Record(
        train_return=jnp.where(acc.episodes > 0, acc.return_sum / jnp.maximum(acc.episodes, 1), nan),
        train_episodes=acc.episodes,
        td_loss=jnp.where(acc.losses > 0, acc.loss_sum / jnp.maximum(acc.losses, 1), nan),
        capacity=ctx.replay.buffer(state.memory).capacity,
        # A static divisor: XLA multiplies by its (rounded) reciprocal, which gives the
        # same bits at every batch size; a traced divisor is divided exactly in scalar
        # code but to 1 ulp in vectorised code, so a chunk of 1 run differed.
        capacity_mean=ctx.start_capacity.astype(jnp.float32)
        + acc.capacity_sum * jnp.float32(1.0 / setup.steps_per_segment),
        epsilon=agent.epsilon_schedule(state.step, hp.epsilon_start, hp.epsilon_end, hp.epsilon_decay_steps),
        env_steps=state.step,
        eval_return=eval_return,
    )


def advance(state: DQNState, hparams: Hyperparameters, setup: Setup) -> tuple[DQNState, dict]:
    """Run ``setup.steps_per_segment`` environment steps (with training and aER) and record them.

    The segment is a scan of cycles (:func:`_cycle`), each a scan of units
    (:func:`_unit`: environment steps, then a gradient step) and an aER
    consultation (:func:`_consult_adaptive`); module docstring: why.

    Args:
        state: from :func:`init` or a previous :func:`advance`.
        hparams: scalar :class:`Hyperparameters`.
        setup: static :class:`Setup`.

    Returns:
        ``(state, record)``; ``record`` maps each name of :func:`record_dims` to
        an array with a leading axis of length 1 (this segment). Cost per
        step: one forward pass, one environment step, a buffer add; per
        ``train_frequency`` steps one gradient step on ``batch_size``; per
        ``adaptive_check_every`` steps an aER consultation; per segment
        ``eval_episodes × max_steps_in_episode`` forward passes.
    """
    ctx = _context(state, hparams, setup)
    cycles = setup.steps_per_segment // setup.cycle_length
    carry = (state, _zero_accumulators())
    state, acc = _scan_indexed(functools.partial(_cycle, ctx), carry, 0, cycles, always_scan=True)
    return state, _record_arrays(_record(ctx, state, acc))


def evaluate(key: jax.Array, params: agent.Params, setup: Setup) -> jax.Array:
    """Mean return of ``setup.eval_episodes`` greedy episodes (ε = 0), run in parallel.

    Each episode is a ``lax.scan`` of the environment's ``max_steps_in_episode``
    steps on ``step_env`` (no auto-reset); rewards after the episode ends
    (termination or the time limit) are masked out.

    Returns:
        ``float32[]``. Cost: ``eval_episodes × max_steps_in_episode`` forward
        passes and environment steps.
    """
    env, env_params = environment(setup)
    net = network(setup)

    def episode(episode_key):
        reset_key, steps_key = jax.random.split(episode_key)
        obs, env_state = env.reset(reset_key, env_params)

        def step(carry, step_key):
            obs, env_state, total, done = carry
            action = agent.greedy_action(net, params, obs)
            obs, env_state, reward, terminated, _ = env.step_env(step_key, env_state, action, env_params)
            total = total + jnp.where(done, 0.0, jnp.asarray(reward, jnp.float32))
            done = done | terminated | env.is_truncated(env_state, env_params)
            return (jnp.asarray(obs, jnp.float32), _strip_weak_types(env_state), total, done), None

        carry = (jnp.asarray(obs, jnp.float32), _strip_weak_types(env_state), jnp.float32(0), jnp.bool_(False))
        steps = jax.random.split(steps_key, _max_episode_steps(setup))
        return jax.lax.scan(step, carry, steps)[0][2]

    return jnp.mean(jax.vmap(episode)(jax.random.split(key, setup.eval_episodes)))


def summarize(state: DQNState, hparams: Hyperparameters, setup: Setup) -> dict:
    """The run's :class:`Summary` as ``{name: scalar}`` (names: :func:`summary_dims`)."""
    del hparams
    recent = state.recent_returns
    count = jnp.minimum(state.episodes, setup.recent_episodes)
    recent_mean = jnp.where(count > 0, jnp.nansum(recent) / jnp.maximum(count, 1), jnp.nan)
    memory = memory_lib.buffer_of(state.memory)
    aer = state.controller.diagnostics
    summary = Summary(
        diverged=~(agent.is_finite(state.params) & agent.is_finite(state.target_params)),
        recent_return=recent_mean.astype(jnp.float32),
        episodes=state.episodes,
        gradient_steps=state.gradient_steps,
        final_capacity=memory.capacity,
        adaptive_checks=aer.num_checks,
        adaptive_grows=aer.num_grows,
        adaptive_shrinks=aer.num_shrinks,
        adaptive_invalid=aer.num_invalid,
        adaptive_straddle_checks=state.straddle_checks,
        adaptive_straddle_grows=state.straddle_grows,
        adaptive_compared=aer.num_compared,
        adaptive_noisy=aer.num_noisy,
        adaptive_change_sum=aer.sum_abs_change,
        adaptive_noise_sum=aer.sum_noise,
        capacity_clipped=memory.capacity_clipped,
        adaptive_invalid_parameters=aer.invalid_parameters,
    )
    return summary._asdict()


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
        check); ``None`` where nothing was counted.
    """
    total = {name: float(np.sum(np.asarray(summary[name], np.float64))) for name in _ADAPTIVE_SUMMARY}
    runs = int(np.size(np.asarray(summary["adaptive_checks"])))

    def share(numerator, denominator):
        return numerator / denominator if denominator else None

    checks, grows = total["adaptive_checks"], total["adaptive_grows"]
    straddle, straddle_grows = total["adaptive_straddle_checks"], total["adaptive_straddle_grows"]
    compared = total["adaptive_compared"]
    return {
        "checks_mean": share(checks, runs),
        "grow_fraction": share(grows, checks),
        "straddle_grow_fraction": share(straddle_grows, straddle),
        "other_grow_fraction": share(grows - straddle_grows, checks - straddle),
        "noisy_fraction": share(total["adaptive_noisy"], compared),
        "change_mean": share(total["adaptive_change_sum"], compared),
        "noise_mean": share(total["adaptive_noise_sum"], compared),
    }


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
        raise ValueError(
            f"steps must be a positive multiple of {cycle} (the train frequency, or the aER check "
            f"interval with aER), got {steps!r}."
        )
    segments = min(num_segments(setup), steps // cycle)
    while steps % segments or (steps // segments) % cycle:
        segments -= 1
    return dataclasses.replace(setup, total_steps=int(steps), steps_per_segment=int(steps) // segments)


def record_dims(setup: Setup) -> dict:
    """Every recorded field of :class:`Record` has the single dim ``"segment"`` (one point per segment)."""
    return {name: ("segment",) for name in _record_names(setup)}


def summary_dims(setup: Setup) -> dict:
    """Every field of :class:`Summary` is a scalar."""
    return {name: () for name in Summary._fields}


def coords(setup: Setup) -> dict:
    """``{"segment": int64[num_segments]}``: environment steps done at each segment's end."""
    return {"segment": np.arange(1, num_segments(setup) + 1, dtype=np.int64) * setup.steps_per_segment}


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
)
"""DQN as a sweep-engine experiment, registered as ``"dqn"``."""


# ----------------------------------------------------------------------------
# Convenience runners


def run(key: jax.Array, hparams: Hyperparameters, setup: Setup, return_state: bool = False):
    """One whole run: ``init``, ``advance`` × ``num_segments`` (a ``lax.scan``), ``summarize``.

    Jittable with ``setup`` (and ``return_state``) static:
    ``jax.jit(run, static_argnums=(2, 3))``.

    Args:
        key: the run's PRNG key.
        hparams: scalar :class:`Hyperparameters`.
        setup: static :class:`Setup`.
        return_state: also return the final :class:`DQNState` (its memory
            holds ``max_capacity`` slots: large for big memories).

    Returns:
        ``(records, summary)`` or ``(records, summary, state)``: each record
        leaf ``[num_segments]`` (the segments concatenated), the summary as
        :func:`summarize`.
    """
    check(hparams, setup)
    state = init(key, hparams, setup)
    state, records = jax.lax.scan(lambda s, _: advance(s, hparams, setup), state, None, length=num_segments(setup))
    records = jax.tree.map(lambda r: r.reshape(-1, *r.shape[2:]), records)
    summary = summarize(state, hparams, setup)
    return (records, summary, state) if return_state else (records, summary)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _run_batch(keys, hparams, setup, return_state):
    return jax.vmap(run, in_axes=(0, 0, None, None))(keys, hparams, setup, return_state)


def broadcast_hyperparameters(hparams: Hyperparameters, runs: int) -> Hyperparameters:
    """Every field as an array of shape ``[runs]`` in its canonical dtype.

    Python and NumPy values are converted with NumPy (no device computation,
    hence nothing compiled); JAX arrays with ``jnp``.
    """
    fields: list[jax.Array | np.ndarray] = []
    for name, value in zip(Hyperparameters._fields, hparams):
        dtype = np.int32 if name in _INT_FIELDS else np.float32
        if isinstance(value, (jax.Array, jax.core.Tracer)):
            fields.append(jnp.broadcast_to(jnp.asarray(value, dtype), (runs,)))
        else:
            fields.append(np.broadcast_to(np.asarray(value, dtype), (runs,)))
    return Hyperparameters(*fields)


def run_batch(keys: jax.Array, hparams: Hyperparameters, setup: Setup, return_state: bool = False):
    """:func:`run` for ``R`` runs at once: ``jit(vmap(run))``, compiled once per ``setup``, ``R``
    and ``return_state`` (any hyperparameter values, memory sizes included, reuse it).

    Args:
        keys: ``[R]`` PRNG keys.
        hparams: each field a scalar (shared) or ``[R]``.
        setup: static :class:`Setup`.
        return_state: also return the final states (leading axis ``R``).

    Returns:
        ``(records, summary)`` (or with the states) with a leading axis ``R`` on every leaf.

    Raises:
        ValueError: a bad concrete hyperparameter (named), before compiling.
    """
    check(hparams, setup)
    runs = jnp.shape(keys)[0]
    return _run_batch(keys, broadcast_hyperparameters(hparams, runs), setup, bool(return_state))


def q_values(params: agent.Params, obs: ArrayLike, setup: Setup) -> jax.Array:
    """``Q(obs, ·)`` of the network of ``setup``: ``float32[..., num_actions]``."""
    return agent.q_values(network(setup), params, obs)
