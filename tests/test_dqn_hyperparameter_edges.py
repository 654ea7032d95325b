"""DQN hyperparameters that are legal one by one but interact, and what a run reports at those edges (found by
probes of the bounds and of the reported numbers).

A fixed memory bounds n; aER's sizes are bounded only where aER runs; a sweep says how many of its runs made no
gradient step, and `jaxreplay dqn` why; a diverged seed has no score.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay import cli
from jaxreplay.cli import dqn as dqn_command
from jaxreplay.engine import sweep as sweep_lib
from jaxreplay.experiments import dqn
from jaxreplay.experiments.dqn import config

CHAIN = dqn.Setup(env_id="Probe-Chain", total_steps=100, steps_per_segment=50, hidden_sizes=(8,), max_capacity=32,
                  batch_size=4, max_n_step=8)


def test_an_n_beyond_a_fixed_memory_is_refused_naming_n_step_and_flagged_when_traced():
    """memory 4 with n = 8 computed the 4-step return under n = 8's label (bit-identical to n = 4), and memory 1
    with n = 4 the 1-step one; only the dqn command refused it."""
    hp = dqn.Hyperparameters(memory_size=np.array([4, 32, 4]), n_step=np.array([4, 8, 8]))
    message = r"^n_step must be <= 4 \(memory_size, the fewest slots its memory has\), "
    with pytest.raises(ValueError, match=message + "got 8: no window holds more transitions"):
        dqn.check(hp, CHAIN)
    dqn.check(hp._replace(n_step=np.array([4, 8, 4])), CHAIN)  # n = memory size: allowed
    flag = jax.jit(config.invalid_hyperparameters, static_argnums=1)
    assert bool(flag(hp, CHAIN)) and not bool(flag(hp._replace(n_step=np.array([4, 8, 4])), CHAIN))
    fixed_rule = dqn.Hyperparameters(memory_size=np.array([32, 32, 4]), n_step=np.array([4, 8, 8]), adaptive_interval=8,
                                     adaptive_num_old=2, adaptive_rule=np.array([1, 1, dqn.RULE_FIXED]))
    adaptive = dataclasses.replace(CHAIN, adaptive=True, adaptive_check_every=2)
    with pytest.raises(ValueError, match=message):
        dqn.check(fixed_rule, adaptive)
    assert bool(flag(fixed_rule, adaptive))


def test_an_n_beyond_the_size_aer_can_shrink_to_is_refused_and_flagged():
    """aER was exempt (its memory may grow), but it also shrinks: from 60 with k = 20 a random walk ended at 20
    slots, and n = 32 ran as returns of at most 20 steps, unflagged (found by a probe). A check shrinks by k only
    from 2k up, so the fewest slots are k + N0 mod k (N0 below 2k), or k + max_capacity mod k once a growth
    was capped."""
    adaptive = dataclasses.replace(CHAIN, adaptive=True, adaptive_check_every=2, max_n_step=16)  # max_capacity 32
    flag = jax.jit(config.invalid_hyperparameters, static_argnums=1)
    sizes = np.array([8, 32, 12, 15])
    # k: the fewest slots from each N0 (max_capacity 32). At k = 8, 12 and 15 grow to 32 and shrink to 8.
    expected = {2: [2, 2, 2, 2], 8: [8, 8, 8, 8], 16: [8, 16, 12, 15]}
    for k, fewest in expected.items():
        got = config.smallest_memory(np, sizes, k, np.ones(4, int), adaptive)
        assert got.tolist() == fewest, k
        traced = jax.jit(lambda s, k=k: config.smallest_memory(jnp, s, k, jnp.ones(4, int), adaptive))(sizes)
        assert np.asarray(traced).tolist() == fewest, k
    assert config.smallest_memory(np, sizes, 2, np.zeros(4, int), adaptive).tolist() == sizes.tolist()  # fixed rule
    assert config.smallest_memory(np, sizes, 2, np.ones(4, int), CHAIN).tolist() == sizes.tolist()  # no aER
    # n = 8 fits every memory at k = 8 (N0 = 15 grows to 23, 31, then 32, capped, and shrinks to 8) ...
    hp = dqn.Hyperparameters(memory_size=np.array([8, 15, 12]), n_step=np.array([8, 8, 8]), adaptive_interval=8,
                             adaptive_num_old=2, adaptive_rule=1)
    dqn.check(hp, adaptive)
    assert not bool(flag(hp, adaptive))
    # ... n = 9 does not.
    above = hp._replace(n_step=np.array([8, 9, 8]))
    with pytest.raises(ValueError, match=r"^n_step must be <= 8 \(the size aER can shrink memory_size 15 to by "
                                         r"adaptive_interval 8\), got 9: no window holds more transitions"):
        dqn.check(above, adaptive)
    assert bool(flag(above, adaptive))
    # The probe's case: N0 = 60, k = 20, n = 32.
    probe = dataclasses.replace(CHAIN, total_steps=200, steps_per_segment=100, adaptive=True, adaptive_check_every=20,
                                max_capacity=200, max_n_step=32)
    with pytest.raises(ValueError, match=r"^n_step must be <= 20 \(the size aER can shrink memory_size 60 to"):
        dqn.check(dqn.Hyperparameters(memory_size=60, n_step=32, adaptive_interval=20, adaptive_rule=2), probe)


def test_a_toml_grid_with_an_n_beyond_a_fixed_memory_is_refused_naming_its_key(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('experiment = "dqn"\n[setup]\nmax_capacity = 64\nmax_n_step = 8\n'
                    "[grid]\nmemory_size = [1, 4, 64]\nn_step = [1, 4, 8]\n")
    with pytest.raises(ValueError, match=r"^grid\.n_step = 4: n_step must be <= 1 \(memory_size"):
        sweep_lib.Sweep.from_toml(path)


def test_the_dqn_command_says_the_bound_of_n_of_its_memory(capsys):
    assert cli.main(["dqn", "--quiet", "--steps", "100", "--memory-size", "20", "--n-step", "30"]) == 2
    assert "--n-step must be <= 20 (memory_size, the fewest slots its memory has)" in capsys.readouterr().err


def test_a_fixed_memory_is_not_refused_for_aers_unused_sizes():
    """Without aER, adaptive_interval (default 20) and adaptive_num_old (default 50) were bounded by the
    capacity all the same: a Probe-Chain memory of 10 was refused by the dqn command, which has no option to
    change them, and jitted runs were flagged invalid."""
    small = dataclasses.replace(CHAIN, max_capacity=10, max_n_step=1)
    hp = dqn.Hyperparameters(memory_size=10)
    dqn.check(hp, small)
    assert not bool(jax.jit(config.invalid_hyperparameters, static_argnums=1)(hp, small))
    setup, hparams = dqn_command._read_setting(
        cli.build_parser().parse_args(["dqn", "--env", "Probe-Chain", "--memory-size", "10", "--steps", "100"]))
    assert (setup.max_capacity, hparams.memory_size, hparams.adaptive_interval) == (10, 10, 20)
    dqn.check(hparams, setup)
    for bad, message in ((hp._replace(adaptive_interval=0), "adaptive_interval must be >= 1"),
                         (hp._replace(adaptive_num_old=0.5), "adaptive_num_old must be an integer")):
        with pytest.raises(ValueError, match=message):  # the lower bounds still hold
            dqn.check(bad, small)
    # With aER they hold, and a check grid coarser than the memory (no interval could pass) is refused.
    with pytest.raises(ValueError, match="adaptive_interval must be <= 10"):
        dqn.check(hp, dataclasses.replace(small, adaptive=True, adaptive_check_every=2))
    with pytest.raises(ValueError, match=r"^adaptive_check_every \(20\) must be <= max_capacity \(10\) with "
                                         r"adaptive=True"):
        dataclasses.replace(small, adaptive=True)


def test_a_sweep_counts_its_runs_that_made_no_gradient_step(tmp_path):
    """learning_starts after the run's end: every run's gradient_steps is 0, which the sweep's line says."""
    sweep = sweep_lib.Sweep("dqn", seeds=2, setup=dataclasses.replace(CHAIN, max_n_step=1),
                            fixed={"learning_starts": 500}, grid={"memory_size": [16, 32]})
    stats = sweep_lib.run(sweep, None, progress=False).stats
    assert stats.untrained == 4 and stats.runs == 4
    assert "; 4 made no gradient step (no update due from learning_starts to the run's end: learning starts too " \
           "late or the replay ratio is too small; their returns are the untrained network's); " in stats.describe()


def test_a_diverged_seed_has_no_final_return_in_the_dqn_report():
    """A network of NaNs still acts (argmax picks action 0), so a diverged CartPole run recorded a finite
    eval_return, a constant policy's; `jaxreplay dqn` put it into final_returns and the IQM with no null reason
    (found by a probe). final_returns (shared with the studies) blanks it and the report says why."""
    from jaxreplay.paper.reproduce.dqn import final_returns

    setup = dqn.Setup(total_steps=300, steps_per_segment=100, max_capacity=300, batch_size=16, hidden_sizes=(16,),
                      optimizer="sgd", eval_episodes=2)
    sweep = sweep_lib.Sweep("dqn", seeds=2, setup=setup, fixed={"memory_size": 300, "learning_starts": 20,
                                                                "epsilon_decay_steps": 100},
                            grid={"step_size": [1e-3, 1e4]})
    ds = sweep_lib.run(sweep, None, progress=False).dataset
    assert ds.diverged.values.tolist() == [[False, False], [True, True]]
    assert np.all(np.isfinite(ds.eval_return.values[..., -1]))  # what a NaN network's greedy episodes score
    kind, final = final_returns(ds)
    assert kind == "eval_return" and np.isnan(final[1]).all()
    np.testing.assert_array_equal(final[0], ds.eval_return.values[0, :, -1])
    args = cli.build_parser().parse_args(["dqn", "--seeds", "2"])
    report = dqn_command._result(args, setup, dqn.Hyperparameters(), ds.isel(step_size=1)).report
    assert report["final_returns"] == [None, None] and report["iqm"] is None
    assert report["final_returns_null_reason"] == ("seed 0: diverged (non-finite parameters); "
                                                   "seed 1: diverged (non-finite parameters)")


def test_the_no_update_warning_names_the_replay_ratio_when_it_is_the_cause(capsys):
    """It blamed learning_starts and --steps even where the run is longer than learning_starts (1,000 here) and
    the ratio makes no update due in it (found by a probe)."""
    assert cli.main(["dqn", "--env", "Probe-Chain", "--memory-size", "20", "--steps", "2000", "--seeds", "1",
                     "--replay-ratio", "0.0001", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert ("no gradient step was taken: at replay ratio 0.0001 the first update due from learning_starts (1000) on "
            "comes at step 10,001 and the run has 2000 (raise --replay-ratio or use more --steps)") in err
    # An update due only before learning_starts is not made: the warning said the ratio made its first update due
    # after 909 steps in a run of 1100 (the 1 due at step 910 comes before learning_starts; found by a probe).
    assert cli.main(["dqn", "--env", "Probe-Chain", "--memory-size", "20", "--steps", "1100", "--seeds", "1",
                     "--replay-ratio", "0.0011", "--quiet"]) == 0
    # The count the warning reads, as the program counts: D(t) = floor(t ρ) per unit end, exactly, for ρ's float32
    # value (0.0001 is 9.9999997e-05: 10,000 steps are due 0.99999997 updates, the first update comes at 10,001).
    assert dqn.updates_due_by(10_000, 1e-4) == 0 and dqn.updates_due_by(10_001, 1e-4) == 1
    assert dqn.updates_due_by(999, 0.0011) == 1
    assert dqn.first_update_due(0.0011, 1000, dqn.Setup()) == 1819
    four = dqn.Setup(train_frequency=4)
    assert dqn.first_update_due(0.25, 10, four) == 12 and dqn.first_update_due(1.0, 0, four) == 4
    # The unit end from which updates are made: at least one unit, rounded up to a unit end.
    assert [dqn.first_unit_end(s, four) for s in (0, 1, 4, 5, 10)] == [4, 4, 4, 8, 12]
    assert ("no gradient step was taken: at replay ratio 0.0011 the first update due from learning_starts (1000) on "
            "comes at step 1,819 and the run has 1100; the 1 due before it are not made (raise --replay-ratio or use "
            "more --steps)") in capsys.readouterr().err


def test_a_stored_priority_floor_that_runs_as_zero_is_refused_and_flagged_when_traced():
    """ε = 1e-20 at α = 2 makes ε^α = 1e-40, which runs as 0: a TD error of 0 stored priority 0 and was never
    replayed, unflagged (a probe); the memory now makes such an update a no-op, so DQN refuses or flags it."""
    per = dataclasses.replace(CHAIN, sampler="prioritized")
    bad = dqn.Hyperparameters(memory_size=16, priority_floor=1e-20, priority_exponent=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"priority_floor = 1e-20 raised to priority_exponent = 2 is 1e-40"):
        dqn.check(bad, per)
    dqn.check(bad, CHAIN)  # uniform replay never reads them
    dqn.check(bad._replace(priority_exponent=1.0), per)
    flags = jax.jit(jax.vmap(lambda a: config.invalid_hyperparameters(bad._replace(priority_exponent=a), per)))
    assert np.asarray(flags(jnp.array([1.0, 2.0, 0.0]))).tolist() == [False, True, False]
    assert not bool(jax.jit(lambda a: config.invalid_hyperparameters(bad._replace(priority_exponent=a), CHAIN))(2.0))


def test_a_segments_mean_capacity_is_exact_over_a_long_plateau():
    """The mean capacity was a float32 sum of deviations: over a 10^6-step segment that grows 1 slot per step
    for 2·10^5 steps and then stays, it was off by 1 %, since past 2^24 every add of the plateau's deviation
    rounded the same way (a probe). The sum is now two int32 limbs."""
    from jaxreplay.experiments.dqn import steps

    start, total = 20_000, 1_000_000
    deviations = jnp.minimum(jnp.arange(1, total + 1, dtype=jnp.int32), 200_000)
    # and a walk of both signs, with deviations near ±2^31 / 2^16 (the limbs' carries and borrows)
    walk = jnp.asarray(np.random.default_rng(0).integers(-(2**30), 2**30, 4096), jnp.int32)

    @jax.jit
    def summed(devs):
        acc = jax.lax.fori_loop(0, devs.shape[0], lambda i, a: steps._add_capacity(a, devs[i]),
                                steps._zero_accumulators())
        return acc.capacity_high, acc.capacity_low, steps._capacity_sum(acc)

    for devs in (deviations, walk):
        high, low, as_float = summed(devs)
        exact = int(np.asarray(devs, np.int64).sum())
        assert int(high) * 2**16 + int(low) == exact and 0 <= int(low) < 2**16
        assert float(as_float) == float(np.float32(exact))  # one rounding
    exact = int(np.asarray(deviations, np.int64).sum())
    mean = np.float32(start) + np.float32(summed(deviations)[2]) * np.float32(1 / total)  # (as _record forms it)
    assert exact / total + start == 200_000.1
    np.testing.assert_allclose(mean, 200_000.1, rtol=1e-7)
    # The float32 sum it replaced, added in the same order, is off by 1 %.
    drifted = np.add.accumulate(np.asarray(deviations, np.float32), dtype=np.float32)[-1]
    assert abs(np.float32(start) + drifted * np.float32(1 / total) - 200_000.1) > 1_000


def test_counts_that_would_wrap_int32_are_refused_naming_the_fields():
    """Setup(total_steps=6e8, max_updates_per_unit=4) passed, and its gradient-step count would have wrapped
    to -2,147,483,578 unflagged (a probe); a segment too long for the exact capacity sum is refused too."""
    with pytest.raises(ValueError, match=r"^total_steps \(600000000\) allows 2400000000 gradient steps"):
        dqn.Setup(total_steps=600_000_000, steps_per_segment=600_000, max_updates_per_unit=4)
    dqn.Setup(total_steps=536_870_911, steps_per_segment=536_870_911, max_updates_per_unit=4, max_capacity=10)
    with pytest.raises(ValueError, match=r"^steps_per_segment \(1000000\) × max_capacity \(2147483647\)"):
        dqn.Setup(total_steps=10**6, steps_per_segment=10**6, max_capacity=2**31 - 1, adaptive=True)
    # A fixed memory sums zeros: its segment may be as long as it likes (it was refused, a probe).
    dqn.Setup(total_steps=10**8, steps_per_segment=10**8, max_capacity=2 * 10**6)
