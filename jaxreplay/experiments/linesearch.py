"""The LineSearch experiment: Algorithm 1 (ER / pER) and Algorithm 2 (aER) of the paper.

Each step ``t = 1 … T`` the linear agent (:mod:`jaxreplay.agents.linear`)
acts greedily from its position, the transition is stored in the replay
memory, and then ``m`` *sequential* single-transition TD updates are made,
each on a transition drawn from the memory:

* ``"uniform"`` (ER): uniformly over the live window;
* ``"prioritized"`` (pER): with P(i) ∝ |δ_i|^β, the TD errors of *all* live
  transitions recomputed with the current θ before each draw (exact, as the
  paper; cost O(max_capacity) per update);
* ``"adaptive"`` (aER): uniform draws, and after the updates the aER
  controller (:mod:`jaxreplay.adaptive`) may resize the memory.

One call of :func:`run` simulates one run; :func:`run_batch` vmaps it over any
batch of seeds and hyperparameters in one compiled program. Everything in
:class:`Hyperparameters` is traced (memory size, batch size up to a static
maximum, step size, discount, priority exponent, aER interval/old count/ε);
:class:`Setup` holds what sets shapes or code paths.

Why the batch size is masked. ``m`` varies inside one program by running
``max_batch_size`` update slots per step and masking those with index ``>= m``
(a ``lax.scan`` with a mask). The alternative, a ``while_loop`` of ``m``
iterations, runs under ``vmap`` until the largest ``m`` of the batch anyway
and cannot be reverse-differentiated; masking costs the same in a sweep that
contains the largest ``m`` and keeps the scan's fixed trip count. The price is
that every run pays for ``max_batch_size`` slots. Measured here (2-core CPU,
T = 1000, N = 100, m = 5, per run): ER 0.26 / 0.43 / 1.24 ms with
``max_batch_size`` 5 / 10 / 50 (256 runs vmapped); pER 85 / 163 ms with 5 / 10
(``max_capacity`` 1000). So a pER sweep over a wide range of ``m`` is best
split into a few Setups by ``m``; ER is cheap enough not to care.

Readings of the paper (``docs/paper_readings.md``). Algorithm 1's indexing slip
(§9) is read as: the agent acts from its current position each step,
starting at x0. With γ > 0 the deviation Δθ is measured from the TD fixed
point θ*; §8's two readings of the "real weights" are the option
``Setup.weights``: ``"reward"`` (β = (β1, β2) are the reward weights, θ* is
derived) or ``"fixed_point"`` (θ* = (β1, β2) is given and the reward weights
are derived so that it is the fixed point). With γ = 0 they coincide.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _deprecated, _validation, adaptive, buffer, samplers
from jaxreplay._scope import in_experiment_settings
from jaxreplay._typing import ArrayLike
from jaxreplay.agents import linear
from jaxreplay.envs import linesearch as env_lib
from jaxreplay.experiments import COMPILER_OPTIONS as _COMPILER_OPTIONS
from jaxreplay.experiments import COMPILER_OPTIONS_CPU as _CPU_OPTIONS
from jaxreplay.experiments import Experiment, check_scalars, run_count

SAMPLERS = ("uniform", "prioritized", "adaptive")
"""The samplers of a LineSearch run, by ``Setup.sampler``: ER, exact pER, and aER (uniform sampling)."""
FROZEN = ("none", "slope", "intercept")
"""Which weight a run holds at its target: none, θ1 (fixed slope) or θ2 (fixed intercept)."""
WEIGHTS = env_lib.REAL_WEIGHTS
"""The two readings of the paper's real weights for γ > 0 (docs/paper_readings.md §8), defined once with the game
(:mod:`jaxreplay.envs.linesearch`)."""


@dataclasses.dataclass(frozen=True)
class Setup:
    """Static settings of a LineSearch experiment (hashable: a ``jit`` static argument).

    Attributes:
        steps: T, the number of environment steps (paper: 1000).
        max_capacity: slots allocated for the memory; memory sizes (and aER's
            growth) are limited to it. No run stores more than ``steps``
            transitions, so ``steps`` is always enough.
        max_batch_size: largest minibatch size ``m`` in the program.
        sampler: ``"uniform"`` (ER), ``"prioritized"`` (pER) or ``"adaptive"`` (aER).
        frozen: ``"none"``, ``"slope"`` (θ1 fixed at its target; only θ2
            learns) or ``"intercept"`` (θ2 fixed; only θ1 learns).
        weights: reading of (reward_slope, reward_intercept) when γ > 0, see
            the module docstring: ``"reward"`` or ``"fixed_point"``.
        initial_position, speed, reward_slope, reward_intercept: the game
            (paper: x0 = −5, v = 0.01, β = (0.1, 0.5)).
        initial_weights: θ⁰ (paper: (0, 1)); a frozen weight starts at its target.
        max_num_old: static bound on aER's ``num_old`` (shape of its check).
        subsample_size: aER estimates its sums from this many draws (None: exact).
        shrink_reading: aER's reading of Algorithm 2's shrink recompute
            (``"new"`` or ``"shrunk"``, see :mod:`jaxreplay.adaptive`).
    """

    steps: int = 1000
    max_capacity: int = 1000
    max_batch_size: int = 50
    sampler: str = "uniform"
    frozen: str = "none"
    weights: str = "reward"
    initial_position: float = -5.0
    speed: float = 0.01
    reward_slope: float = 0.1
    reward_intercept: float = 0.5
    initial_weights: tuple[float, float] = (0.0, 1.0)
    max_num_old: int = 500
    subsample_size: int | None = None
    shrink_reading: str = "new"

    def __post_init__(self):
        _validation.check_static_int("steps", self.steps, low=1)  # (step counters are int32: its bound)
        _validation.check_static_int("max_capacity", self.max_capacity, low=1)
        _validation.check_static_int("max_batch_size", self.max_batch_size, low=1)
        _validation.check_static_int("max_num_old", self.max_num_old, low=1)
        if self.subsample_size is not None:
            _validation.check_static_int("subsample_size", self.subsample_size, low=1)
        for name, value, allowed in (
            ("sampler", self.sampler, SAMPLERS),
            ("frozen", self.frozen, FROZEN),
            ("weights", self.weights, WEIGHTS),
            ("shrink_reading", self.shrink_reading, adaptive.SHRINK_READINGS),
        ):
            _validation.check_choice(name, value, allowed)
        # The game's parameters, by the game's own check (finite, float32, speed > 0: it accepted 0 here, whose
        # agent never moves, where the game refused it).
        env_lib.make_params(**{name: getattr(self, name) for name in _GAME_PARAMS})
        try:  # (two real numbers: a nested list, a table or a string is none; 10**400 is beyond float64)
            weights = np.asarray(self.initial_weights, np.float64)
        except (TypeError, ValueError, OverflowError):
            weights = None
        if weights is None or weights.shape != (2,) or _validation._holds_bool(self.initial_weights):
            raise _validation.FieldError(
                "initial_weights", f"must be two numbers (θ1, θ2), got {self.initial_weights!r}."
            )
        _validation.check_float("initial_weights", weights)
        # a float32 constant of the compiled program: refused where it would run as inf or 0
        _validation.check_float32("initial_weights", weights)
        # a tuple of plain numbers, as given: a list or an array would make the Setup unhashable (no jit
        # static argument), and the values kept as given keep a sweep's fingerprint
        object.__setattr__(
            self, "initial_weights", tuple(w.item() if hasattr(w, "item") else w for w in self.initial_weights)
        )


_GAME_PARAMS = ("initial_position", "speed", "reward_slope", "reward_intercept")
"""The Setup fields that are LineSearch's own parameters (:func:`jaxreplay.envs.linesearch.make_params`)."""


class Hyperparameters(NamedTuple):
    """Traced hyperparameters of one run (each field a scalar; batch them to sweep).

    Attributes:
        memory_size: N, the memory's capacity (aER: the initial N0), in [1, max_capacity].
        batch_size: m, sequential updates per step, in [1, max_batch_size].
        step_size: α >= 0.
        discount: γ in [0, 1).
        priority_exponent: β in [0, 1e30] of pER (ignored by the other samplers; samplers.MAX_PRIORITY_EXPONENT).
        adaptive_interval: aER's k >= 1, at most ``max_capacity`` with aER (ignored unless ``sampler="adaptive"``).
        adaptive_num_old: aER's n_old in [1, max_num_old].
        adaptive_tolerance: aER's ε >= 0; 0 is Algorithm 2 as printed except on exact ties.
    """

    memory_size: ArrayLike = 100
    batch_size: ArrayLike = 5
    step_size: ArrayLike = 0.01
    discount: ArrayLike = 0.0
    priority_exponent: ArrayLike = 2.0
    adaptive_interval: ArrayLike = 20
    adaptive_num_old: ArrayLike = 50
    adaptive_tolerance: ArrayLike = 0.0


class Result(NamedTuple):
    """What one run records (add leading axes under vmap).

    Attributes:
        dtheta: ``float32[T, 2]``; θ(t) − θ* after the updates of step t = 1 … T.
        memory_size: ``int32[T]``; the memory's capacity after step t (constant
            unless aER).
        final_metric: ``float32[]``; M = |Δθ1(T)| + |Δθ2(T)|.
        diverged: ``bool[]``; at some step θ or its error became non-finite,
            or the error outgrew :data:`DIVERGED_GROWTH` × (M(0) + 1).
        invalid_hyperparameters: ``bool[]``; a traced hyperparameter was a
            value :func:`check` refuses (:func:`invalid_hyperparameters`):
            the run's numbers mean nothing.
    """

    dtheta: jax.Array
    memory_size: jax.Array
    final_metric: jax.Array
    diverged: jax.Array
    invalid_hyperparameters: jax.Array


def _bounds(setup: Setup) -> dict[str, _validation.Bounds]:
    """Each hyperparameter's allowed values (the docstring of :class:`Hyperparameters`)."""
    b = _validation.Bounds
    return {
        "memory_size": b(True, 1, setup.max_capacity),
        "batch_size": b(True, 1, setup.max_batch_size),
        "step_size": b(False, 0.0),
        "discount": b(False, 0.0, 1.0, high_inclusive=False),
        "priority_exponent": b(False, 0.0, samplers.MAX_PRIORITY_EXPONENT),
        # aER's controller refuses k > max_capacity; the other samplers ignore k (a default of 20 beside 10 slots)
        "adaptive_interval": b(True, 1, setup.max_capacity if setup.sampler == "adaptive" else None),
        "adaptive_num_old": b(True, 1, setup.max_num_old),
        "adaptive_tolerance": b(False, 0.0),
    }


def check(hparams: Hyperparameters, setup: Setup) -> None:
    """Raise ValueError naming any concrete hyperparameter outside its range (the engine's ``check``)."""
    for name, bounds in _bounds(setup).items():
        _validation.check_bounds(name, getattr(hparams, name), bounds)


def invalid_hyperparameters(hparams: Hyperparameters, setup: Setup) -> jax.Array:
    """``bool[]``: some (traced) hyperparameter is a value :func:`check` would refuse (NaN, out of range, a
    fractional integer). Jitted code cannot raise: the run goes on (memory size and batch size clipped or
    truncated, the rest as given) and this flag says its numbers mean nothing."""
    flags = [_validation.outside_bounds(getattr(hparams, name), b) for name, b in _bounds(setup).items()]
    return jnp.any(jnp.stack(flags))


def targets(hparams: Hyperparameters, setup: Setup) -> tuple[jax.Array, jax.Array]:
    """``(reward_weights, θ*)``, each ``float32[2]``, for the ``weights`` reading of ``setup``."""
    beta1, beta2, theta1, theta2 = env_lib.fixed_point_and_rewards(
        jnp.float32(setup.reward_slope),
        jnp.float32(setup.reward_intercept),
        setup.speed,
        hparams.discount,
        setup.weights,
    )
    return jnp.stack([beta1, beta2]), jnp.stack([theta1, theta2])


class State(NamedTuple):
    """One run's state between segments (the sweep engine's ``init``/``advance`` contract).

    Attributes:
        key: the run's PRNG key.
        step: ``int32[]``, steps done so far.
        theta: ``float32[2]``, the agent's weights.
        env_state: the environment's state.
        memory: the :class:`~jaxreplay.buffer.BufferState`; it stores each
            transition as one ``float32[4]`` row (:func:`jaxreplay.agents.linear.pack`).
        controller: the :class:`~jaxreplay.adaptive.AdaptiveState` (unused unless aER).
        diverged: ``bool[]``, sticky: after some step θ or its error M was
            non-finite, or M outgrew :data:`DIVERGED_GROWTH` × (M(0) + 1).
    """

    key: jax.Array
    step: jax.Array
    theta: jax.Array
    env_state: env_lib.LineSearchState
    memory: buffer.BufferState
    controller: adaptive.AdaptiveState
    diverged: jax.Array


def _as_arrays(hparams: Hyperparameters) -> Hyperparameters:
    return Hyperparameters(*(jnp.asarray(h) for h in hparams))


def _env_params(hparams: Hyperparameters, setup: Setup) -> env_lib.LineSearchParams:
    reward_weights, _ = targets(hparams, setup)
    return env_lib.LineSearchParams(
        initial_position=setup.initial_position,
        speed=setup.speed,
        reward_slope=reward_weights[0],
        reward_intercept=reward_weights[1],
        max_steps_in_episode=setup.steps,
    )


def _trainable(setup: Setup) -> jax.Array:
    return jnp.array({"none": [1.0, 1.0], "slope": [0.0, 1.0], "intercept": [1.0, 0.0]}[setup.frozen])


DIVERGED_GROWTH = 1e6
"""A run is flagged ``diverged`` once its error M = |Δθ1| + |Δθ2| exceeds this many times M(0) + 1 (or θ or M
is non-finite). A run that learns brings M down from M(0); one past the step size's stability limit multiplies
it at every update and reaches float32's overflow only many steps later: at α = 0.08, N = 20, m = 5 every
seed ended a 200-step run at M ≈ 1e28, finite and unflagged, before this bound existed (run longer, the same
seeds overflow to NaN near step 270). A millionfold growth is no transient of a stable run (the "+ 1" keeps
the bound meaningful when θ starts at θ*)."""


def _initial_theta(theta_star: jax.Array, setup: Setup) -> jax.Array:
    """θ⁰: ``setup.initial_weights``, a frozen weight at its target."""
    return jnp.where(_trainable(setup) > 0, jnp.asarray(setup.initial_weights, jnp.float32), theta_star)


def _diverged_bound(theta_star: jax.Array, setup: Setup) -> jax.Array:
    """The error M above which a run is flagged diverged (:data:`DIVERGED_GROWTH`)."""
    return DIVERGED_GROWTH * (jnp.abs(_initial_theta(theta_star, setup) - theta_star).sum() + 1.0)


def init(key: jax.Array, hparams: Hyperparameters, setup: Setup) -> State:
    """The :class:`State` of a run before its first step (a frozen weight starts at its target)."""
    hparams = _as_arrays(hparams)
    _, theta_star = targets(hparams, setup)
    theta0 = _initial_theta(theta_star, setup)
    _, env_state = env_lib.LineSearch().reset(key, _env_params(hparams, setup))
    memory = buffer.init(linear.pack(linear.EXAMPLE_TRANSITION), setup.max_capacity, hparams.memory_size)
    return State(key, jnp.int32(0), theta0, env_state, memory, adaptive.init(setup.subsample_size), jnp.bool_(False))


def advance(state: State, hparams: Hyperparameters, setup: Setup) -> tuple[State, dict]:
    """Run all ``setup.steps`` steps (LineSearch runs are one segment).

    Returns:
        ``(state, record)`` with ``record["dtheta"]`` ``float32[T, 2]`` (θ − θ*
        after the updates of each step) and ``record["capacity"]``
        ``int32[T]`` (the memory's capacity after each step; named
        ``capacity``, not ``memory_size``, because a sweep labels its runs by
        the hyperparameter ``memory_size``). Cost per step:
        O(max_batch_size) for ER/aER (plus O(max_num_old) for aER's check),
        O(max_batch_size · max_capacity) for pER.
    """
    hparams = _as_arrays(hparams)
    _, theta_star = targets(hparams, setup)
    bound = _diverged_bound(theta_star, setup)
    env = env_lib.LineSearch()
    env_params = _env_params(hparams, setup)
    trainable = _trainable(setup)
    key = state.key
    draws_ahead = setup.sampler != "prioritized"  # pER's draws depend on θ: made in the step

    def step(carry, inputs):
        t, draws = inputs
        theta, env_state, memory, controller, diverged = carry
        step_key, replay_key, adaptive_key = _step_keys(key, t)
        action = linear.greedy_action(theta)
        _, next_state, reward, _, _, info = env.step(step_key, env_state, action, env_params)
        transition = {
            "position": env_state.position,
            "move": env_lib.move(action, env_params),
            "reward": reward.astype(jnp.float32),
            "next_position": info["final_observation"][0],
        }
        memory = buffer.add(memory, linear.pack(transition))
        theta, _ = replay(replay_key, theta, memory, hparams, setup, trainable, draws)
        if setup.sampler == "adaptive":
            td_fn = lambda rows: linear.td_error(theta, linear.unpack(rows), hparams.discount, setup.speed)  # noqa: E731
            aer = adaptive.controller(
                interval=hparams.adaptive_interval,
                num_old=hparams.adaptive_num_old,
                max_num_old=setup.max_num_old,
                subsample_size=setup.subsample_size,
                tolerance=hparams.adaptive_tolerance,
                shrink_reading=setup.shrink_reading,
            )
            check_key = adaptive_key if setup.subsample_size else None
            controller, capacity = aer.update(check_key, controller, memory, td_fn, t)
            memory = buffer.resize(memory, capacity)
        dtheta = theta - theta_star
        error = jnp.abs(dtheta).sum()
        # (a NaN compares False; an infinite error is flagged even where the bound is inf: a θ* of inf, from a
        # discount that runs as 1, would pass inf <= inf)
        diverged = diverged | ~(jnp.isfinite(error) & (error <= bound))
        return (theta, next_state, memory, controller, diverged), (dtheta, memory.capacity)

    def block(carry, ts):
        # The block's replay draws in one kernel, before its steps (DRAW_BLOCK says why).
        draw = lambda t: samplers.uniform_draws(_step_keys(key, t)[1], setup.max_batch_size)  # noqa: E731
        return jax.lax.scan(step, carry, (ts, jax.vmap(draw)(ts) if draws_ahead else None))

    carry = (state.theta, state.env_state, state.memory, state.controller, state.diverged)
    steps = state.step + jnp.arange(1, setup.steps + 1, dtype=jnp.int32)
    (theta, env_state, memory, controller, diverged), (dtheta, memory_size) = _in_blocks(
        block, carry, steps, _block_steps(setup)
    )
    new_state = State(key, state.step + setup.steps, theta, env_state, memory, controller, diverged)
    return new_state, {"dtheta": dtheta, "capacity": memory_size}


DRAW_BLOCK = 25
"""Steps whose uniform replay draws (ER, aER) are made together, ahead of the steps (fewer where
``max_batch_size`` > 50: at most :data:`MAX_DRAWS_AHEAD` draws per run are made ahead, so a huge
minibatch's memory does not grow). Why: made inside the step, XLA:CPU fuses the draws' hash into the
gather of the minibatch's rows and computes it once per gathered value (4 per row). Made a block
ahead, they are one vectorised kernel per block, with the same bits; the 10⁴-run ER sweep ran about
1.3× faster on a 2-core CPU (blocks of 10 to 50 steps within noise of each other; ``benchmarks/README.md``)."""

MAX_DRAWS_AHEAD = DRAW_BLOCK * 50
"""The most draws per run made ahead: a block of :data:`DRAW_BLOCK` steps at the paper's largest minibatch (50)."""


def _block_steps(setup: Setup) -> int:
    """Steps per block of draws made ahead: :data:`DRAW_BLOCK`, fewer for minibatches over 50, at least 1."""
    return max(1, min(DRAW_BLOCK, MAX_DRAWS_AHEAD // setup.max_batch_size))


def _step_keys(key: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(step_key, replay_key, adaptive_key)`` of step ``t`` of the run with ``key``: the environment's
    key, and the two it splits into (the replay draws', aER's check's)."""
    step_key = jax.random.fold_in(key, t)
    replay_key, adaptive_key = jax.random.split(step_key)
    return step_key, replay_key, adaptive_key


def _in_blocks(block, carry, steps: jax.Array, size: int):
    """``lax.scan`` of ``block`` over ``steps`` cut into blocks of ``size`` (the last one shorter),
    its per-step outputs concatenated back to one leading axis of ``len(steps)``."""
    full, tail = divmod(steps.shape[0], size)
    outputs = []
    if full:
        carry, out = jax.lax.scan(block, carry, steps[: full * size].reshape(full, size))
        outputs.append(jax.tree.map(lambda x: x.reshape(full * size, *x.shape[2:]), out))
    if tail:
        carry, out = block(carry, steps[full * size :])
        outputs.append(out)
    return carry, jax.tree.map(lambda *xs: jnp.concatenate(xs) if len(xs) > 1 else xs[0], *outputs)


def summarize(state: State, hparams: Hyperparameters, setup: Setup) -> dict:
    """``final_metric`` (``float32[]``, M = |Δθ1(T)| + |Δθ2(T)|), ``diverged`` and ``invalid_hyperparameters``
    (``bool[]`` each; :func:`invalid_hyperparameters`)."""
    _, theta_star = targets(_as_arrays(hparams), setup)
    return {
        "final_metric": jnp.abs(state.theta - theta_star).sum(),
        "diverged": state.diverged,
        "invalid_hyperparameters": invalid_hyperparameters(hparams, setup),
    }


@in_experiment_settings  # (float32 and standard promotion, whatever the caller's JAX settings)
def run(key: jax.Array, hparams: Hyperparameters, setup: Setup) -> Result:
    """Simulate one LineSearch run of ``setup.steps`` steps (:func:`init`, :func:`advance`, :func:`summarize`).

    Args:
        key: PRNG key of the run (all its randomness derives from it, per step
            with ``fold_in``, so a run never depends on how a sweep is batched).
        hparams: traced :class:`Hyperparameters` (scalars).
        setup: static :class:`Setup`.

    Returns:
        A :class:`Result`. Cost per step: O(max_batch_size) for ER/aER (plus
        O(max_num_old) for aER's check), O(max_batch_size · max_capacity) for pER.
    """
    check_scalars(hparams)
    check(hparams, setup)
    state, record = advance(init(key, hparams, setup), hparams, setup)
    summary = summarize(state, hparams, setup)
    return Result(
        record["dtheta"],
        record["capacity"],
        summary["final_metric"],
        summary["diverged"],
        summary["invalid_hyperparameters"],
    )


def replay(key, theta, memory, hparams: Hyperparameters, setup: Setup, trainable, draws=None):
    """The ``m`` sequential TD updates of one step, each on a transition drawn from ``memory``.

    Args:
        key: PRNG key of this step's draws.
        theta: ``float32[2]``, the weights before the updates.
        memory: the :class:`~jaxreplay.buffer.BufferState` of ``linear.pack`` rows (already holding this
            step's transition).
        hparams: traced :class:`Hyperparameters`; ``batch_size`` of the
            ``setup.max_batch_size`` update slots are applied, the rest masked.
        setup: static :class:`Setup` (its ``sampler`` picks the draws).
        trainable: ``float32[2]`` of 0/1; a 0 freezes that weight.
        draws: ER and aER only: ``samplers.uniform_draws(key, setup.max_batch_size)`` made ahead (then
            ``key`` is not used); None makes them here. pER ignores it.

    Returns:
        ``(theta, indices)``: the weights after the updates and the
        ``int32[max_batch_size]`` slots drawn (masked slots included).
    """
    slots = jnp.arange(setup.max_batch_size)

    def update(theta, transition):
        return linear.td_update(theta, transition, hparams.step_size, hparams.discount, setup.speed, trainable)

    if setup.sampler == "prioritized":
        # P(i) ∝ |δ_i|^β with every δ recomputed under the current θ before each draw.
        def one(theta, inputs):
            j, draw_key = inputs
            td = linear.td_error(theta, linear.unpack(memory.storage), hparams.discount, setup.speed)
            index = samplers.exact_prioritized(draw_key, memory, td, 1, hparams.priority_exponent).indices[0]
            new = update(theta, linear.unpack(buffer.get(memory, index)))
            return jnp.where(j < hparams.batch_size, new, theta), index

        return jax.lax.scan(one, theta, (slots, jax.random.split(key, setup.max_batch_size)))

    # Uniform draws do not depend on θ: draw the whole minibatch at once.
    if draws is None:
        draws = samplers.uniform_draws(key, setup.max_batch_size)
    indices = samplers.uniform_from_draws(memory, draws).indices

    def masked_update(theta, inputs):
        j, transition = inputs
        return jnp.where(j < hparams.batch_size, update(theta, transition), theta), None

    return jax.lax.scan(masked_update, theta, (slots, linear.unpack(buffer.get(memory, indices))))[0], indices


def replayed_sizes(capacity: ArrayLike, initial: ArrayLike) -> np.ndarray:
    """How many transitions each step's replay drew from (the live size after the step's add), rebuilt
    exactly from the capacity record: what the ODE of a resized memory must average over.

    The capacity is not that size: after aER grows the memory by k, it refills one transition a step, so
    for k steps it holds fewer than its capacity (driven by the capacity instead, the ODE was 40 % off an
    aER run with k = 200). By the buffer's rules (:mod:`jaxreplay.buffer`): an add keeps
    ``min(size + 1, capacity)``, a resize ``min(size, capacity)``; step t adds, replays, then resizes.

    Args:
        capacity: ``int[..., T]``, the record's capacity after each step t = 1 … T
            (:attr:`Result.memory_size`, a sweep's ``capacity``).
        initial: ``int[...]``, the capacity before step 1 (the run's ``memory_size``, N0 for aER),
            broadcast against ``capacity[..., 0]``.

    Returns:
        ``int64[..., T]``: the number of stored transitions step t replayed from (``min(t, N)`` for a fixed N).
    """
    capacity = np.asarray(capacity, np.int64)
    before = np.broadcast_to(np.asarray(initial, np.int64), capacity.shape[:-1])  # the capacity step t saw
    size = np.zeros(capacity.shape[:-1], np.int64)  # after the previous step's resize
    out = np.empty_like(capacity)
    for t in range(capacity.shape[-1]):
        out[..., t] = np.minimum(size + 1, before)  # the add
        size = np.minimum(out[..., t], capacity[..., t])  # the resize
        before = capacity[..., t]
    return out


@in_experiment_settings  # (float32 and standard promotion, whatever the caller's JAX settings)
def run_batch(keys: jax.Array, hparams: Hyperparameters, setup: Setup) -> Result:
    """:func:`run` for ``R`` runs at once: vmapped over a leading run axis of ``keys`` and ``hparams``.

    ``keys`` has shape ``[R]``; each hyperparameter is a scalar (shared) or
    ``[R]`` (:func:`broadcast_hyperparameters`). Jit it with ``setup``
    static: ``jax.jit(run_batch, static_argnums=2)``, and compile it with
    ``EXPERIMENT.compiler_options_on(platform)`` (``.lower(...).compile(compiler_options=...)``,
    as the engine does: on the CPU :data:`COMPILER_OPTIONS_CPU`, so that a run's bits do not
    depend on ``R``; on a GPU no autotuning, so that they do not depend on the process). Results gain the
    leading axis ``R``. ValueError naming a bad concrete hyperparameter,
    before compiling.
    """
    runs = run_count(keys, hparams)  # (before check: a field of another length is named as such)
    check(hparams, setup)
    hparams = broadcast_hyperparameters(hparams, runs)
    return jax.vmap(run, in_axes=(0, 0, None))(keys, hparams, setup)


def broadcast_hyperparameters(hparams: Hyperparameters, runs: int) -> Hyperparameters:
    """Give every field of ``hparams`` the leading shape ``[runs]`` (dtype kept)."""
    return Hyperparameters(*(jnp.broadcast_to(jnp.asarray(h), (runs,)) for h in hparams))


COMPILER_OPTIONS_CPU = _CPU_OPTIONS
"""XLA options LineSearch programs are compiled with on the CPU: YNNPACK fusions off, so that a run's bits
do not depend on its batch (:data:`jaxreplay.experiments.COMPILER_OPTIONS_CPU`, shared with DQN)."""

EXPERIMENT = Experiment(
    name="linesearch",
    setup_type=Setup,
    hyperparameters_type=Hyperparameters,
    check=check,
    init=init,
    advance=advance,
    summarize=summarize,
    num_segments=lambda setup: 1,
    record_dims=lambda setup: {"dtheta": ("step", "weight"), "capacity": ("step",)},
    summary_dims=lambda setup: {"final_metric": (), "diverged": (), "invalid_hyperparameters": ()},
    coords=lambda setup: {
        "step": np.arange(1, setup.steps + 1, dtype=np.int32),
        "weight": np.array(["theta1", "theta2"]),
    },
    compiler_options=_COMPILER_OPTIONS,
)
"""LineSearch (Algorithm 1, ER / pER, and aER) as a sweep-engine experiment, registered as ``"linesearch"``."""

_RENAMED = {"check_hyperparameters": "check"}
if TYPE_CHECKING:  # the old spellings as type checkers see them; at run time __getattr__ answers, with a warning
    check_hyperparameters = check
    """Deprecated (removed after 0.1): :func:`check`."""


def __getattr__(name: str) -> object:
    # Old spellings, with a DeprecationWarning (docs/design.md, "Renamed").
    return _deprecated.renamed(__name__, name, _RENAMED, globals())
