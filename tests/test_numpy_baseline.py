"""The NumPy LineSearch baseline (benchmarks/_numpy_linesearch.py) does jaxreplay's experiment.

Two kinds of evidence: where the replay draws cannot matter (memory of one
transition, or the slope frozen at its target) both implementations must give
the same trajectory to float32 rounding; elsewhere their random draws differ
(NumPy's PCG64 vs JAX's threefry), so the seed-mean Δθ curves and their spread
must agree within sampling error.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay.experiments import linesearch as ls

# Plain `pytest` (unlike `python -m pytest`) does not put the repository root,
# where the benchmarks package lives, on sys.path.
_ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks._numpy_linesearch import run_numpy  # noqa: E402

_run_grid = jax.jit(ls.run_grid, static_argnums=2)


def _jax_dtheta(setup, seed=0, **hparams) -> np.ndarray:
    fields = {name: np.asarray(value) for name, value in hparams.items()}
    runs = max(np.size(v) for v in fields.values())
    hp = ls.broadcast_hyperparameters(
        ls.Hyperparameters(
            memory_size=jnp.asarray(fields["memory_size"], jnp.int32),
            batch_size=jnp.asarray(fields["batch_size"], jnp.int32),
            step_size=jnp.asarray(fields["step_size"], jnp.float32),
            discount=jnp.asarray(fields["discount"], jnp.float32),
        ),
        runs,
    )
    keys = jax.random.split(jax.random.key(seed), runs)
    return np.asarray(_run_grid(keys, hp, setup).dtheta)


def _numpy_kwargs(setup: ls.Setup) -> dict:
    return dict(
        steps=setup.steps,
        max_capacity=setup.max_capacity,
        max_batch_size=setup.max_batch_size,
        frozen=setup.frozen,
        weights=setup.weights,
    )


def test_defaults_are_those_of_setup():
    defaults = {f.name: f.default for f in dataclasses.fields(ls.Setup)}
    kwdefaults = run_numpy.__kwdefaults__
    shared = set(defaults) & set(kwdefaults)
    assert {"steps", "max_capacity", "max_batch_size", "frozen", "weights", "speed", "initial_weights"} <= shared
    for name in shared:
        assert kwdefaults[name] == defaults[name], name


# (batch size m, step size α, discount γ), all in one vmapped / vectorised batch.
_DETERMINISTIC = [(1, 0.01, 0.0), (5, 0.01, 0.0), (8, 0.002, 0.5), (3, 0.01, 0.9), (8, 0.05, 0.0)]


def test_memory_of_one_matches_jaxreplay_exactly():
    # N = 1: every draw is the newest transition, so the runs are deterministic.
    setup = ls.Setup(steps=200, max_capacity=200, max_batch_size=8)
    m, alpha, gamma = (np.array(column) for column in zip(*_DETERMINISTIC))
    ours = _jax_dtheta(setup, memory_size=1, batch_size=m, step_size=alpha, discount=gamma)
    baseline = run_numpy(np.arange(len(m)), 1, m, alpha, gamma, **_numpy_kwargs(setup))
    assert baseline.shape == ours.shape == (len(m), 200, 2) and baseline.dtype == np.float32
    np.testing.assert_allclose(baseline, ours, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("frozen, memory_size", [("slope", [1, 7, 50]), ("intercept", [1, 1, 1])])
def test_frozen_and_fixed_point_reading_match_jaxreplay(frozen, memory_size):
    # Frozen slope: every transition has δ = −Δθ2, so the draws do not matter
    # for any N; frozen intercept is deterministic only with N = 1.
    setup = ls.Setup(steps=150, max_capacity=64, max_batch_size=4, frozen=frozen, weights="fixed_point")
    hparams = dict(memory_size=np.array(memory_size), batch_size=np.array([1, 4, 2]),
                   step_size=np.array([0.01, 0.003, 0.02]), discount=np.array([0.0, 0.5, 0.9]))
    ours = _jax_dtheta(setup, **hparams)
    baseline = run_numpy(np.arange(3), **hparams, **_numpy_kwargs(setup))
    np.testing.assert_allclose(baseline, ours, rtol=1e-5, atol=1e-6)


def test_skipping_masked_slots_changes_nothing():
    kwargs = dict(steps=100, max_capacity=40, max_batch_size=10)
    args = (np.arange(4), np.array([1, 5, 20, 40]), np.array([1, 3, 2, 3]), 0.02, np.array([0.0, 0.0, 0.5, 0.9]))
    np.testing.assert_array_equal(run_numpy(*args, **kwargs), run_numpy(*args, **kwargs, skip_masked_slots=True))


# (N, m, α, γ); the first is the paper's ER setting, the second has γ > 0 and
# a window that slides early. 64 seeds each.
_STATISTICAL = [(100, 5, 0.01, 0.0), (30, 3, 0.01, 0.5)]
_SEEDS = 64
_TIMES = np.array([2, 5, 10, 50, 100, 200, 500, 1000])  # steps t at which the curves are compared


def test_seed_mean_curves_agree_with_jaxreplay():
    setup = ls.Setup(steps=1000, max_capacity=100, max_batch_size=5)
    N, m, alpha, gamma = (np.repeat(column, _SEEDS) for column in zip(*_STATISTICAL))
    ours = _jax_dtheta(setup, memory_size=N, batch_size=m, step_size=alpha, discount=gamma)
    baseline = run_numpy(np.arange(len(N)), N, m, alpha, gamma, **_numpy_kwargs(setup))
    assert np.all(np.isfinite(baseline))
    for c, config in enumerate(_STATISTICAL):
        runs = slice(c * _SEEDS, (c + 1) * _SEEDS)
        a, b = ours[runs][:, _TIMES - 1], baseline[runs][:, _TIMES - 1]  # [seeds, times, 2]
        sd_a, sd_b = a.std(0, ddof=1), b.std(0, ddof=1)
        standard_error = np.sqrt((sd_a**2 + sd_b**2) / _SEEDS)
        # 4.5 standard errors: a false alarm over these 32 comparisons is
        # ~1e-4 likely; a memory of 95 instead of 100, or replay that never
        # picks the newest transition, is off by more than 10 here.
        np.testing.assert_array_less(np.abs(a.mean(0) - b.mean(0)), 4.5 * standard_error + 1e-6, err_msg=str(config))
        # Spreads too: each sd is estimated to ~9 % at 64 seeds.
        np.testing.assert_array_less(np.abs(np.log(sd_b / sd_a)), np.log(1.6), err_msg=str(config))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(memory_size=0),
        dict(memory_size=2.5),
        dict(memory_size=11),
        dict(batch_size=0),
        dict(batch_size=5),
        dict(step_size=-0.1),
        dict(discount=1.0),
    ],
)
def test_rejects_out_of_range_hyperparameters(kwargs):
    args = dict(memory_size=1, batch_size=1, step_size=0.01, discount=0.0) | kwargs
    with pytest.raises(ValueError):
        run_numpy(0, **args, steps=5, max_capacity=10, max_batch_size=4)
