"""One process used as a notebook uses it: JAX settings changed between calls, and calls interrupted.

The replay core follows the caller's JAX settings and gives the same bits under them; the entry points that
compute runs (the experiments' ``run_batch``, the engine's ``run``) compute in the experiments' own settings
(jaxreplay._scope); the engine's compiled programs and finished runs are kept per PRNG setting. Each test
restores every setting it changes (the JAX settings are scoped with their context managers)."""

import hashlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay import buffer, memory, returns
from jaxreplay.engine import sweep as sw
from jaxreplay.experiments import linesearch as ls

EXAMPLE = {"x": jnp.zeros((), jnp.float32), "reward": jnp.zeros((), jnp.float32),
           "terminated": jnp.zeros((), jnp.bool_), "truncated": jnp.zeros((), jnp.bool_)}


def _digest(tree) -> str:
    leaves = jax.tree.leaves(tree)
    return hashlib.sha256(b"".join(np.asarray(x).tobytes() + str(np.asarray(x).dtype).encode() for x in leaves)
                          ).hexdigest()[:16]


def _own_loop(kind: str, key, capacity):
    """The README's own loop, trimmed: add, sample, read, 3-step returns, update priorities (user code that is
    itself clean under strict promotion and rank checks)."""
    replay = memory.make(kind, **({"importance_exponent": 0.4, "priority_exponent": 0.6}
                                  if kind == "prioritized" else {}))
    state = replay.init(EXAMPLE, max_capacity=64, capacity=capacity)

    def step(state, key):
        k1, k2 = jax.random.split(key)
        x = jax.random.normal(k1, (), jnp.float32)
        state = replay.add(state, {"x": x, "reward": x * jnp.float32(2), "terminated": x > jnp.float32(1.5),
                                   "truncated": jnp.bool_(False)})
        sample = replay.sample(k2, state, 8)
        stored = buffer.get(replay.buffer(state), sample.indices)
        target = returns.n_step(replay.buffer(state), sample.indices, 3, jnp.float32(0.9), 4)
        return replay.update(state, sample.indices, stored["x"]), (sample, stored, target)

    return jax.lax.scan(step, state, jax.random.split(key, 40))


SETTINGS = {
    "x64": lambda: jax.enable_x64(True),
    "strict promotion": lambda: jax.numpy_dtype_promotion("strict"),
    "rank checks": lambda: jax.numpy_rank_promotion("raise"),
}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_replay_core_in_an_own_loop_gives_the_same_bits_under_the_callers_jax_settings(setting):
    """Under x64, uniform and CER replay refused their own draws ("draws must be float32[batch_size]
    (uniform_draws), got float64"), and under strict promotion or rank checks every kind failed inside jaxreplay
    (found by a probe). Each kind now gives the bits it gives with JAX's defaults."""
    loop = jax.jit(_own_loop, static_argnums=0)
    default = {kind: _digest(loop(kind, jax.random.key(0), jnp.int32(20))) for kind in memory.KINDS}
    with SETTINGS[setting]():
        changed = {kind: _digest(jax.jit(_own_loop, static_argnums=0)(kind, jax.random.key(0), jnp.int32(20)))
                   for kind in memory.KINDS}
    assert changed == default


LS_SETUP = ls.Setup(steps=60, max_capacity=40, max_batch_size=4, sampler="prioritized")
LS_HP = ls.Hyperparameters(memory_size=jnp.asarray([10, 40], jnp.int32), batch_size=4, step_size=0.05)


def test_run_batch_computes_in_the_experiments_settings_whatever_the_callers():
    """Under x64, DQN with stored priorities computed other runs (its ε-greedy draws in float64), every output
    still float32; LineSearch pER did not trace (a scan carry float32 against float64); under strict promotion
    both failed inside jaxreplay (found by a probe). run_batch now computes in the experiments' settings."""
    from jaxreplay.experiments import dqn

    dqn_setup = dqn.Setup(env_id="CartPole-v1", total_steps=120, max_capacity=64, batch_size=8, hidden_sizes=(8,),
                          sampler="prioritized", steps_per_segment=120)
    dqn_hp = dqn.Hyperparameters(learning_starts=20, memory_size=50)
    keys = jax.vmap(jax.random.key)(jnp.arange(2, dtype=jnp.uint32))

    def both():
        return ls.run_batch(keys, LS_HP, LS_SETUP), dqn.run_batch(keys, dqn_hp, dqn_setup)

    default = _digest(both())
    for setting in SETTINGS.values():
        with setting():
            assert _digest(both()) == default
    assert not jax.config.jax_enable_x64  # (the caller's settings are back)


def test_a_lone_run_jitted_or_not_computes_in_the_experiments_settings_without_a_warning():
    """Under x64 a lone ``dqn.run`` computed other runs (float64 ε-greedy draws) and LineSearch pER's did not
    trace: only ``run_batch`` was scoped. Jitted by the caller under x64 (Python numbers traced as 64-bit) JAX
    warned it truncated them inside the scope: they are narrowed before it."""
    from jaxreplay.experiments import dqn

    dqn_setup = dqn.Setup(env_id="CartPole-v1", total_steps=60, max_capacity=32, batch_size=4, hidden_sizes=(4,),
                          sampler="prioritized", steps_per_segment=60)
    dqn_hp = dqn.Hyperparameters(learning_starts=10, memory_size=20, step_size=1e-3)
    ls_hp = ls.Hyperparameters(memory_size=10, batch_size=4, step_size=0.05)
    key = jax.random.key(3)

    def calls(with_dqn: bool):  # (DQN under x64 only: where it computed other runs; a compilation each)
        return [ls.run(key, ls_hp, LS_SETUP), jax.jit(ls.run, static_argnums=2)(key, ls_hp, LS_SETUP)] + (
            [jax.jit(dqn.run, static_argnums=(2, 3))(key, dqn_hp, dqn_setup)] if with_dqn else [])

    default = [_digest(result) for result in calls(True)]
    assert default[0] == default[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, setting in SETTINGS.items():
            with setting():
                assert [_digest(result) for result in calls(name == "x64")] == default[:3 if name == "x64" else 2]
    assert not jax.config.jax_enable_x64


DIVERGING = sw.Sweep("linesearch", seeds=2, seed=0, setup=dict(steps=60, max_capacity=40, max_batch_size=4),
                     fixed=dict(batch_size=4), grid=dict(memory_size=[10, 40], step_size=[0.01, 30.0]))


@pytest.fixture(scope="module")
def diverging():
    result = sw.run(DIVERGING, None, progress=False).dataset
    assert result.diverged.values.sum() == 4  # step size 30 diverges, every seed and memory size
    return result


@pytest.mark.parametrize("setting", ["jax_debug_nans", "jax_disable_jit"])
def test_a_sweep_under_debug_nans_or_disable_jit_runs_compiled_flags_divergence_and_says_so(setting, diverging):
    """With jax_debug_nans on, one diverging run lost the whole sweep to ``InternalFloatingPointError:
    ('jit(first)', 'nan')`` in a fresh process, and was flagged as documented where the program had been compiled
    before; under jax.disable_jit() a sweep failed with JAX's AOT message (found by a probe)."""
    sw.clear_program_cache()  # (the NaN checks were compiled into a program, or not, when it was first built)
    context = jax.debug_nans(True) if setting == "jax_debug_nans" else jax.disable_jit()
    with context, pytest.warns(sw.SweepWarning, match=rf"^{setting} on: a sweep compiles its programs ahead of "
                                                       r"time and flags a run that diverges"):
        result = sw.run(DIVERGING, None, progress=False).dataset
    for name in diverging.data_vars:
        np.testing.assert_array_equal(result[name].values, diverging[name].values, err_msg=name)


class _config:
    """``jax.config.update(name, value)`` for a block, restored after it."""

    def __init__(self, name, value):
        self.name, self.value = name, value

    def __enter__(self):
        self.before = getattr(jax.config, self.name)
        jax.config.update(self.name, self.value)

    def __exit__(self, *exc):
        jax.config.update(self.name, self.before)


SMALL = sw.Sweep("linesearch", seeds=2, seed=0, setup=dict(steps=60, max_capacity=40, max_batch_size=4),
                 fixed=dict(batch_size=4, step_size=0.05), grid=dict(memory_size=[10, 40]))


def test_programs_and_finished_runs_are_kept_per_prng_setting(tmp_path):
    """The program cache was keyed without JAX's PRNG settings: a sweep after switching to rbg (or to
    non-partitionable Threefry) returned the earlier setting's numbers, both ways; and a folder begun under rbg
    was refused under the default with advice that blamed the code (found by a probe)."""
    default = sw.run(SMALL, None, progress=False).dataset
    for name, value in (("jax_default_prng_impl", "rbg"), ("jax_threefry_partitionable", False)):
        with _config(name, value):
            warm = sw.run(SMALL, None, progress=False)
            sw.clear_program_cache()
            fresh = sw.run(SMALL, None, progress=False).dataset
        assert warm.stats.compilations > 0
        np.testing.assert_array_equal(warm.dataset.final_metric.values, fresh.final_metric.values)
        assert not np.array_equal(fresh.final_metric.values, default.final_metric.values)
    again = sw.run(SMALL, None, progress=False).dataset
    np.testing.assert_array_equal(again.final_metric.values, default.final_metric.values)

    out = tmp_path / "out"
    first = sw.run(SMALL, out, chunk_size=2, progress=False)
    assert first.stats.chunks == 2
    sorted((out / "chunks").glob("runs-*.npz"))[-1].unlink()
    (out / "results.nc").unlink()
    with _config("jax_default_prng_impl", "rbg"), pytest.raises(
        ValueError, match=r"holds runs computed at .* with JAX's PRNG threefry2x32, partitionable; this process has "
                          r"rbg, partitionable, which draws other numbers\. Set jax\.config\.update\("
                          r"\"jax_default_prng_impl\", \"threefry2x32\"\) and jax\.config\.update\("
                          r"\"jax_threefry_partitionable\", True\) before the sweep, or use a new output folder"):
        sw.run(SMALL, out, progress=False)
    resumed = sw.run(SMALL, out, progress=False)
    assert resumed.stats.runs_computed == 2
    np.testing.assert_array_equal(resumed.dataset.final_metric.values, default.final_metric.values)


def test_programs_are_kept_per_matmul_precision_and_partitioner():
    """The program cache's key held the PRNG settings but not the other settings lowered into a program: a sweep
    after ``jax.default_matmul_precision("highest")`` reused the programs lowered at the default precision."""
    sw.run(SMALL, None, progress=False)
    assert sw.run(SMALL, None, progress=False).stats.compilations == 0
    with jax.default_matmul_precision("highest"):
        assert sw.run(SMALL, None, progress=False).stats.compilations > 0
    shardy = jax.config.jax_use_shardy_partitioner
    with _config("jax_use_shardy_partitioner", not shardy):
        assert sw.run(SMALL, None, progress=False).stats.compilations > 0
    assert sw.run(SMALL, None, progress=False).stats.compilations == 0  # (the defaults' programs kept)


def test_an_interrupted_sweep_closes_its_progress_bar(monkeypatch):
    """An interrupted sweep left its bar open: the next sweep's bar was drawn a line below, and the stale one
    again at exit (found by a probe)."""
    from tqdm.auto import tqdm

    from jaxreplay.engine import assemble

    added = []

    def interrupted(self, result):
        added.append(result)
        raise KeyboardInterrupt

    monkeypatch.setattr(assemble.Assembler, "add", interrupted)
    with warnings.catch_warnings(), pytest.raises(KeyboardInterrupt) as interrupted:
        warnings.simplefilter("ignore")
        sw.run(SMALL, None, chunk_size=2, progress=True)
    assert len(added) == 1
    # The traceback kept (as a notebook keeps it for %debug) keeps the sweep's frames, and a bar left open with them.
    assert interrupted.tb is not None
    assert [bar for bar in list(tqdm._instances) if bar.desc == "sweep linesearch" and not bar.disable] == []
