"""A plain-NumPy LineSearch ER experiment: the baseline for ``jaxreplay.experiments.linesearch``.

:func:`run_numpy` does the work of ``linesearch.run_batch`` with
``Setup(sampler="uniform")`` (Algorithm 1, uniform replay) for R runs at once,
each run with its own seed, memory size N, minibatch size m, step size α and
discount γ. Per step ``t = 1 … T`` and run:

1. the agent acts greedily from its position (right when θ1 >= 0);
2. the transition ``(x, a, r, x')`` is written to a FIFO memory: a ring of
   ``max_capacity`` slots per run, of which the newest ``min(t, N)`` are live;
3. ``max_batch_size`` slots are drawn uniformly with replacement from the live
   window, and ``max_batch_size`` *sequential* single-transition TD updates are
   computed on them, those with slot index ``>= m`` masked out (θ kept).

Step 3 is what jaxreplay's compiled program does: a traced ``m`` is run as a
fixed number of masked slots, so a sweep pays for ``max_batch_size`` updates
per step whatever its ``m``. ``skip_masked_slots=True`` stops each step's loop
after ``max(m)`` slots instead (the slots it skips are masked in every run),
which is what a NumPy user with a fixed grid would write; the random draws are
the same either way, so the results are identical.

Everything is vectorised over the R runs (arrays of shape ``[R]``, storage
``float32[R, max_capacity, 4]``); the T steps and the m updates within a step
are sequential by nature and stay Python loops. Arithmetic is float32 in the
same order as jaxreplay's, so a run whose draws are deterministic (N = 1)
reproduces jaxreplay's trajectory to float32 rounding.

Randomness: one ``numpy.random.Generator`` (PCG64) seeded with
``SeedSequence(seeds)`` draws every run's slots, ``[R, max_batch_size]``
uniform floats per step. So the draws are not jaxreplay's (threefry) and,
unlike jaxreplay's per-run keys, a run's draws depend on the whole batch of
seeds; results agree with jaxreplay in distribution, not number for number.

This module imports NumPy only, so timing it never pays for importing JAX.
"""

from __future__ import annotations

import numpy as np

FROZEN = ("none", "slope", "intercept")
WEIGHTS = ("reward", "fixed_point")


def _as_runs(name: str, value, runs: int, dtype) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim > 1:
        raise ValueError(f"{name} must be a scalar or a 1-D array of runs, got shape {array.shape}.")
    return np.broadcast_to(array, (runs,)).astype(dtype)


def _check_int_range(name: str, value: np.ndarray, low: int, high: int) -> np.ndarray:
    if not np.all(np.asarray(value) == np.round(value)):
        raise ValueError(f"{name} must hold integers, got {value!r}.")
    if np.any(value < low) or np.any(value > high):
        raise ValueError(f"{name} must lie in [{low}, {high}], got values in [{value.min()}, {value.max()}].")
    return value.astype(np.int64)


def run_numpy(
    seeds,
    memory_size,
    batch_size,
    step_size,
    discount,
    *,
    steps: int = 1000,
    max_capacity: int = 1000,
    max_batch_size: int = 50,
    frozen: str = "none",
    weights: str = "reward",
    initial_position: float = -5.0,
    speed: float = 0.01,
    reward_slope: float = 0.1,
    reward_intercept: float = 0.5,
    initial_weights: tuple[float, float] = (0.0, 1.0),
    skip_masked_slots: bool = False,
) -> np.ndarray:
    """Simulate R LineSearch ER runs (uniform replay) in NumPy.

    The keyword arguments after ``discount`` mean what the fields of
    ``jaxreplay.experiments.linesearch.Setup`` of the same name mean, with the
    same defaults (the paper's game: x0 = −5, v = 0.01, β = (0.1, 0.5),
    θ⁰ = (0, 1), T = 1000).

    Args:
        seeds: ``int[R]``, one seed per run (all of them seed one generator,
            see the module docstring).
        memory_size: N per run, integers in ``[1, max_capacity]``.
        batch_size: m per run, integers in ``[1, max_batch_size]``.
        step_size: α per run, >= 0.
        discount: γ per run, in ``[0, 1)``.
        steps: T.
        max_capacity: slots of each run's ring buffer (the largest N allowed).
        max_batch_size: update slots per step; slots ``j >= m`` are masked.
        frozen: ``"none"``, ``"slope"`` (θ1 fixed at θ1*) or ``"intercept"``.
        weights: ``"reward"`` (β are the reward weights) or ``"fixed_point"``
            (β is θ*), the two readings of the paper's real weights when γ > 0.
        initial_position, speed, reward_slope, reward_intercept,
        initial_weights: the game and θ⁰.
        skip_masked_slots: loop over ``max(m)`` slots per step instead of
            ``max_batch_size`` (same results; less work when ``max(m)`` is small).

    Every hyperparameter may also be a scalar, broadcast to the R runs (R is
    the length of the longest argument).

    Returns:
        ``float32[R, T, 2]``: θ(t) − θ* after the updates of step t = 1 … T,
        as ``linesearch.Result.dtheta``.

    Raises:
        ValueError: an argument is out of range (checked before any work).
    """
    for name, value in (("steps", steps), ("max_capacity", max_capacity), ("max_batch_size", max_batch_size)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}.")
    if frozen not in FROZEN:
        raise ValueError(f"frozen must be one of {FROZEN}, got {frozen!r}.")
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}.")
    if len(initial_weights) != 2:
        raise ValueError(f"initial_weights must be (θ1, θ2), got {initial_weights!r}.")

    runs = max(np.size(x) for x in (seeds, memory_size, batch_size, step_size, discount))
    seeds = _as_runs("seeds", seeds, runs, np.int64)
    capacity = _check_int_range("memory_size", _as_runs("memory_size", memory_size, runs, np.float64), 1, max_capacity)
    m = _check_int_range("batch_size", _as_runs("batch_size", batch_size, runs, np.float64), 1, max_batch_size)
    alpha = _as_runs("step_size", step_size, runs, np.float32)
    gamma = _as_runs("discount", discount, runs, np.float32)
    if not (np.all(np.isfinite(alpha)) and np.all(alpha >= 0)):
        raise ValueError("step_size must be finite and >= 0.")
    if not (np.all(np.isfinite(gamma)) and np.all((gamma >= 0) & (gamma < 1))):
        raise ValueError("discount must lie in [0, 1).")

    f32 = np.float32
    # Targets, in float32 like jaxreplay.paper.theory.fixed_point_and_rewards under jit.
    slope, intercept = f32(reward_slope), f32(reward_intercept)
    one_minus = f32(1) - gamma
    if weights == "reward":
        beta1 = np.full(runs, slope)
        beta2 = np.full(runs, intercept)
        star1 = beta1 / one_minus
        star2 = (beta2 + gamma * f32(speed) * np.abs(star1)) / one_minus
    else:
        star1 = np.full(runs, slope)
        star2 = np.full(runs, intercept)
        beta1 = one_minus * star1
        beta2 = one_minus * star2 - gamma * f32(speed) * np.abs(star1)
    train1, train2 = {"none": (1, 1), "slope": (0, 1), "intercept": (1, 0)}[frozen]
    theta1 = np.array(star1) if not train1 else np.full(runs, f32(initial_weights[0]))
    theta2 = np.array(star2) if not train2 else np.full(runs, f32(initial_weights[1]))
    train1, train2 = f32(train1), f32(train2)
    v = f32(speed)

    rng = np.random.default_rng(np.random.SeedSequence([int(s) for s in seeds]))
    # One array per run and slot with the 4 fields (x, a, r, x'), so that a
    # minibatch is one gather.
    storage = np.zeros((runs, max_capacity, 4), f32)
    rows = np.arange(runs)[:, None]
    position = np.full(runs, f32(initial_position))
    slots = int(m.max()) if skip_masked_slots else max_batch_size
    active = np.arange(max_batch_size)[:, None] < m[None, :]  # [max_batch_size, R] update mask
    out = np.empty((runs, steps, 2), f32)

    # A diverging run overflows to inf/nan quietly, as it does in jaxreplay.
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(1, steps + 1):
            move = np.where(theta1 >= 0, v, -v)
            next_position = position + move
            reward = beta1 * next_position + beta2
            # Every run writes one transition per step, so all rings share the
            # write position; only the live window (size) differs per run.
            write = (t - 1) % max_capacity
            storage[:, write, 0] = position
            storage[:, write, 1] = move
            storage[:, write, 2] = reward
            storage[:, write, 3] = next_position
            size = np.minimum(t, capacity)
            # Uniform with replacement over the live window; all max_batch_size
            # draws are made whatever m is, as in jaxreplay.
            u = rng.random((runs, max_batch_size))
            offsets = np.minimum((u * size[:, None]).astype(np.int64), size[:, None] - 1)
            chosen = (t - size[:, None] + offsets) % max_capacity
            # Slot-major copies, so each sequential update reads contiguous rows.
            batch = storage[rows, chosen].transpose(2, 1, 0).copy()  # [4, max_batch_size, R]
            phi1 = batch[0] + batch[1]  # x + a, the slope's feature
            r, x_next = batch[2], batch[3]
            for j in range(slots):
                q = phi1[j] * theta1 + theta2
                best_next = theta1 * x_next[j] + theta2 + np.abs(theta1) * v
                delta = r[j] + gamma * best_next - q
                scaled = alpha * delta
                # where (not a multiply by the mask) so a masked slot leaves a
                # diverged θ exactly as it was, as jaxreplay's jnp.where does.
                theta1 = np.where(active[j], theta1 + scaled * phi1[j] * train1, theta1)
                theta2 = np.where(active[j], theta2 + scaled * train2, theta2)
            out[:, t - 1, 0] = theta1 - star1
            out[:, t - 1, 1] = theta2 - star2
            position = next_position
    return out
