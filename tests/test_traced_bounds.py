"""A traced hyperparameter that ``check`` would refuse sets ``invalid_hyperparameters`` in the run's results.

Jitted code cannot raise, so each experiment has a traced twin of its concrete
``check``: both read one table of bounds, and these tests hold them to each
other value by value (edges, fractions of integers, NaN, ±inf), then follow the
flag into the summaries a run writes, where it must see the values as given
(a traced 2.5 used to reach the flags as the int32 2).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay import _validation
from jaxreplay.experiments import dqn, linesearch
from jaxreplay.experiments.dqn import config as dqn_config
from jaxreplay.experiments.dqn import summary as dqn_summary

DQN_SETUP = dqn.Setup(total_steps=200, steps_per_segment=100, max_capacity=200, adaptive=True, max_n_step=3)
DQN_HPARAMS = dqn.Hyperparameters(memory_size=100, adaptive_num_old=20)
LS_SETUP = linesearch.Setup(steps=20, max_capacity=50, max_batch_size=5, max_num_old=10)
LS_HPARAMS = linesearch.Hyperparameters(memory_size=20, batch_size=3, adaptive_num_old=5)
NAN, INF = float("nan"), float("inf")


def candidates(bounds: _validation.Bounds, default: float) -> list[float]:
    """Values on, just inside and just outside each bound, fractions, and the non-finite ones."""
    values = [default, default + 0.5, NAN, INF, -INF]
    if bounds.integer:  # beyond int32: a NumPy int64 2**32 + 100 ran wrapped, as 100, unflagged
        values += [2.0**31, -(2.0**31) - 1, 2.0**32 + 100, 3e9]
    else:  # a float32 subnormal: check_float32 refuses it (it runs as 0), the flag sees its bits
        values += [float(np.float32(1e-45)), float(np.float32(-1e-40)), float(np.float32(2e-38))]
    for edge in (bounds.low, bounds.high):
        if edge is not None:
            values += [edge - 1, edge - 0.5, edge - 1e-3, edge, edge + 1e-3, edge + 0.5, edge + 1]
            if not bounds.integer:  # (round onto the edge in float32: 0.99999999 runs as a discount of 1.0)
                values += [edge - 1e-9, edge + 1e-9]
    return values


def refused(check, hparams, setup) -> bool:
    try:
        check(hparams, setup)
    except ValueError:
        return True
    return False


def as_float32(hparams):
    return type(hparams)(*(jnp.float32(v) for v in hparams))


@pytest.mark.parametrize(
    "experiment, setup, hparams",
    [(dqn_config, DQN_SETUP, DQN_HPARAMS), (linesearch, LS_SETUP, LS_HPARAMS)],
    ids=["dqn", "linesearch"],
)
def test_the_traced_flag_refuses_exactly_what_check_refuses(experiment, setup, hparams):
    """For every field and every candidate value: ``check`` raises iff the jitted flag is set (the value
    passed traced, as float32, the dtype a sweep's fractional or NaN integer would arrive in)."""
    flag = jax.jit(lambda h: experiment.invalid_hyperparameters(h, setup))
    assert not refused(experiment.check, hparams, setup) and not bool(flag(as_float32(hparams)))
    disagreements, tried, beyond_int32 = [], 0, []
    for name, bounds in experiment._bounds(setup).items():
        for value in candidates(bounds, float(getattr(hparams, name))):
            changed = hparams._replace(**{name: value})
            traced = bool(flag(as_float32(changed)))
            concrete = refused(experiment.check, changed, setup)
            # (a value that is no float32 is checked as the float32 it runs as, the flag's value; an integer
            # beyond int32 as a NumPy int64, what np.array makes of Python ints)
            if bounds.integer and math.isfinite(value) and value == int(value) and abs(value) >= 2**31:
                concrete = refused(experiment.check, hparams._replace(**{name: np.int64(value)}), setup)
                beyond_int32.append((name, value, concrete, traced))
            tried += 1
            if traced != concrete:
                disagreements.append((name, value, concrete, traced))
    assert disagreements == []
    assert beyond_int32 and all(concrete and traced for _, _, concrete, traced in beyond_int32), beyond_int32
    assert tried > 12 * len(experiment._bounds(setup))


def test_linesearch_refuses_and_flags_an_aer_interval_above_the_memory():
    """aER's controller refuses k > max_capacity; the experiment's check accepted it (the memory jumped to
    max_capacity at the first check) and the flag missed it. ER ignores k: any k >= 1 passes there."""
    aer = dataclasses.replace(LS_SETUP, sampler="adaptive")
    with pytest.raises(ValueError, match=r"adaptive_interval must be <= 50"):
        linesearch.check(LS_HPARAMS._replace(adaptive_interval=51), aer)
    linesearch.check(LS_HPARAMS._replace(adaptive_interval=51), LS_SETUP)
    flag = jax.jit(lambda h: linesearch.invalid_hyperparameters(h, aer))
    assert bool(flag(as_float32(LS_HPARAMS._replace(adaptive_interval=51))))
    assert not bool(flag(as_float32(LS_HPARAMS._replace(adaptive_interval=50))))
    assert bool(flag(as_float32(LS_HPARAMS._replace(step_size=1e-45))))  # runs as 0 (a subnormal)


def test_dqn_flags_a_ratio_of_zero_and_an_interval_off_the_check_grid():
    """The two rules beyond the table: a traced replay ratio of 0 (no updates: not a DQN run) and an aER
    interval that is not a multiple of ``adaptive_check_every`` (20 here)."""
    flag = jax.jit(lambda h: dqn_config.invalid_hyperparameters(h, DQN_SETUP))
    ok = as_float32(DQN_HPARAMS)
    assert not bool(flag(ok))
    assert bool(flag(ok._replace(replay_ratio=jnp.float32(0.0))))
    assert bool(flag(ok._replace(adaptive_interval=jnp.float32(30.0))))
    assert not bool(flag(ok._replace(adaptive_interval=jnp.float32(40.0))))


def test_a_linesearch_run_reports_the_flag_and_runs_on_with_the_value_clipped():
    """A traced memory size of 20.5 runs as 20 (same M(T), bit for bit) but is flagged; a discount of 1
    (outside [0, 1)) is flagged too; integers as int32 are not."""
    run = jax.jit(lambda k, h: linesearch.run(k, h, LS_SETUP))
    key = jax.random.key(3)
    good = run(key, as_float32(LS_HPARAMS))
    fractional = run(key, as_float32(LS_HPARAMS._replace(memory_size=20.5)))
    assert not bool(good.invalid_hyperparameters) and bool(fractional.invalid_hyperparameters)
    assert np.asarray(good.final_metric).tobytes() == np.asarray(fractional.final_metric).tobytes()
    assert bool(run(key, as_float32(LS_HPARAMS._replace(discount=1.0))).invalid_hyperparameters)
    as_ints = LS_HPARAMS._replace(**{n: jnp.int32(getattr(LS_HPARAMS, n)) for n in ("memory_size", "batch_size")})
    assert not bool(jax.jit(lambda k, h: linesearch.run(k, h, LS_SETUP))(key, as_ints).invalid_hyperparameters)


def test_a_dqn_summary_reads_the_fields_as_given_not_truncated():
    """``summarize`` of a fresh state: a traced n of 2.5 and a memory size of 50.5 are flagged (their own
    flags and ``invalid_hyperparameters``), 2.0 and 50.0 are not; ``broadcast_hyperparameters`` keeps a
    floating JAX value of an integer field as float32 so that ``run_batch`` passes 2.5 on, not 2."""
    setup = dqn.Setup(total_steps=100, steps_per_segment=100, hidden_sizes=(4,), max_capacity=64, max_n_step=3)
    hp = dqn.Hyperparameters(memory_size=50, n_step=2)
    state = dqn.init(jax.random.key(0), hp, setup)
    summarize = jax.jit(lambda h: dqn_summary.summarize(state, h, setup))
    flags = ("n_step_clipped", "capacity_clipped", "invalid_hyperparameters")

    def flagged(**change):
        s = summarize(as_float32(hp._replace(**change)))
        return [bool(s[name]) for name in flags]

    assert flagged() == [False, False, False]
    assert flagged(n_step=2.5) == [True, False, True]
    assert flagged(memory_size=50.5) == [False, True, True]
    assert flagged(discount=1.5) == [False, False, True]
    broadcast = dqn.broadcast_hyperparameters(hp._replace(n_step=jnp.float32(2.5), memory_size=jnp.int32(50)), 3)
    assert broadcast.n_step.dtype == jnp.float32 and broadcast.n_step.tolist() == [2.5] * 3
    assert broadcast.memory_size.dtype == jnp.int32
    assert dqn.broadcast_hyperparameters(hp, 2).n_step.dtype == np.int32  # Python values: the canonical dtype


def test_a_traced_ratio_that_needs_one_more_slot_is_flagged_with_the_update_it_skipped():
    """0.3 updates per step in units of 10 steps with 3 slots: 0.3's float32 value is 0.30000001, whose excess
    adds up to one update more in the unit ending at step 83,886,080 (4 due). ``check`` refuses such a run
    concretely; traced, the unit makes 3, the state counts the skipped one and the summary says so
    (``invalid_hyperparameters``). A segment of 100 steps from a state at step 83,886,000 shows it; from step
    0 the same segment skips nothing."""
    setup = dqn.Setup(
        env_params=(("max_steps_in_episode", 30),),
        total_steps=100,
        steps_per_segment=100,
        hidden_sizes=(4,),
        max_capacity=100,
        batch_size=4,
        train_frequency=10,
        max_updates_per_unit=3,
    )
    hp = dqn.Hyperparameters(memory_size=100, learning_starts=0, target_period=50, epsilon_decay_steps=50)

    @jax.jit
    def segment(h, start):
        state = dqn.init(jax.random.key(1), h, setup)
        state = dqn.advance(state._replace(step=start), h, setup)[0]
        return state, dqn.summarize(state, h, setup)

    due_then = int(dqn.updates_due_by(83_886_100, 0.3) - dqn.updates_due_by(83_886_000, 0.3))
    assert due_then == 31
    for start, made, skipped in ((83_886_000, 30, 1), (0, 30, 0)):
        state, summary = segment(hp._replace(replay_ratio=jnp.float32(0.3)), jnp.int32(start))
        assert (int(state.gradient_steps), int(state.updates_skipped)) == (made, skipped)
        assert bool(summary["invalid_hyperparameters"]) == bool(skipped) and not bool(summary["replay_ratio_clipped"])


def test_check_float_takes_an_open_lower_bound():
    """The shared range check has an exclusive lower bound (LineSearch's speed v > 0 uses it, rather than a
    check of its own beside ``check_float``): the bound itself is refused, the range written half-open."""
    _validation.check_float("v", np.array([1e-30, 2.0]), low=0.0, low_inclusive=False)
    for value, said in ((0.0, "got 0.0"), (np.array([0.5, -1.0]), "got an array with min -1.0 and max 0.5")):
        with pytest.raises(ValueError, match=rf"^v must be > 0\.0 \(allowed range \(0\.0, 1\.0\]\), {said}\.$"):
            _validation.check_float("v", value, low=0.0, high=1.0, low_inclusive=False)
    _validation.check_float("v", 0.0, low=0.0)  # (inclusive by default: 0 allowed)
