"""The straight-line Threefry keys give JAX's default bits, and compile without the hash's loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay import _prng

SEEDS = [0, 1, 42, 2**31 - 1, -1, -123_456]
SAMPLERS = {
    "uniform": lambda k: jax.random.uniform(k, (7,)),
    "normal": lambda k: jax.random.normal(k, (4, 3)),
    "randint": lambda k: jax.random.randint(k, (9,), 0, 1000),
    "bits8": lambda k: jax.random.bits(k, (5,), jnp.uint8),
    "bits16": lambda k: jax.random.bits(k, (6,), jnp.uint16),
    "bits32": lambda k: jax.random.bits(k, (2, 3, 4)),
    "choice": lambda k: jax.random.choice(k, 10, (3,)),
    "permutation": lambda k: jax.random.permutation(k, 17),
    "bernoulli": lambda k: jax.random.bernoulli(k, 0.3, (11,)),
    "gumbel": lambda k: jax.random.gumbel(k, (3,)),
}


def _pair(seed):
    return jax.random.key(seed), jax.random.key(seed, impl=_prng.THREEFRY_UNROLLED)


@pytest.mark.parametrize("seed", SEEDS)
def test_keys_split_and_fold_in_give_jaxs_default_bits(seed):
    default, unrolled = _pair(seed)
    data = jax.random.key_data
    assert np.array_equal(data(default), data(unrolled))
    for derive in (
        lambda k: jax.random.split(k),
        lambda k: jax.random.split(k, (3, 5)),
        lambda k: jax.random.fold_in(k, 7),
        lambda k: jax.random.fold_in(k, 2**32 - 1),
        lambda k: jax.random.fold_in(jax.random.split(k, 4)[2], 3),
    ):
        assert np.array_equal(data(derive(default)), data(derive(unrolled)))


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_sampler_draws_the_same_numbers(name):
    draw = SAMPLERS[name]
    for seed in SEEDS[:4]:
        default, unrolled = _pair(seed)
        np.testing.assert_array_equal(np.asarray(draw(default)), np.asarray(draw(unrolled)))


def test_vmapped_and_jitted_draws_are_the_same():
    # The engine's pattern: a key per run by fold_in, then per-step fold_in, split and draws, vmapped and jitted.
    def runs(base):
        def one(s):
            key = jax.random.fold_in(jax.random.fold_in(base, s), 11)
            a, b = jax.random.split(key)
            return jax.random.uniform(a, (5,)), jax.random.randint(b, (3,), 0, 50)

        return jax.jit(jax.vmap(one))(jnp.arange(64, dtype=jnp.uint32))

    default, unrolled = _pair(2024)
    for x, y in zip(runs(default), runs(unrolled)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_the_hash_is_threefry_2x32_known_answers():
    # Known-answer vectors of Threefry-2x32 with 20 rounds (Random123's kat_vectors).
    for key, counter, expected in (
        ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ):
        words = _prng.threefry2x32(*(np.uint32(v) for v in (*key, *counter)))
        assert tuple(int(w) for w in words) == expected


def _while_loops(fn, *args) -> int:
    return jax.jit(fn).lower(*args).compile().as_text().count(" while(")


def test_on_the_cpu_the_hash_compiles_without_a_loop():
    default, unrolled = _pair(0)
    draw = lambda k: jax.random.uniform(jax.random.fold_in(k, 3), (5,))  # noqa: E731
    assert _while_loops(draw, default) >= 1  # JAX's CPU lowering: a rolled loop per hash
    assert _while_loops(draw, unrolled) == 0


def test_key_gives_the_unrolled_implementation_only_where_it_is_the_same_prng():
    unrolled, default = jax.random.key(0, impl=_prng.THREEFRY_UNROLLED).dtype, jax.random.key(0).dtype
    assert unrolled != default
    assert _prng.key(5, "cpu").dtype == unrolled
    assert _prng.key(5, "gpu").dtype == default  # JAX already lowers the hash unrolled there
    with jax.threefry_partitionable(False):  # another bit layout than the unrolled keys': JAX's own key
        assert not _prng.unrolled_applies("cpu")
        assert _prng.key(5, "cpu").dtype == default
    assert _prng.unrolled_applies("cpu")


def test_engine_sweeps_keep_their_results():
    from jaxreplay.engine import sweep as sw
    from jaxreplay.experiments import linesearch as ls

    sweep = sw.Sweep("linesearch", seeds=3, setup={"steps": 50, "max_capacity": 50, "max_batch_size": 3},
                     fixed={"batch_size": 3}, grid={"memory_size": [5, 50]})
    dtheta = sw.run(sweep, None, progress=False).dataset.dtheta
    # The same runs, one at a time, from keys of JAX's default implementation: the same bits.
    run = jax.jit(ls.run, static_argnums=2)
    for memory_size in (5, 50):
        for seed in range(3):
            key = jax.random.fold_in(jax.random.key(sweep.seed), seed)
            expected = run(key, ls.Hyperparameters(memory_size=memory_size, batch_size=3), sweep.make_setup()).dtheta
            got = dtheta.sel(memory_size=memory_size, seed=seed).transpose("step", "weight").values
            np.testing.assert_array_equal(got, np.asarray(expected))


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_run_keys_are_fold_in_of_the_base_key_by_seed_index(platform):
    from jaxreplay.engine.execute import run_keys

    seed_index = np.array([0, 3, 3, 7, 2**32 - 1], np.uint32)
    expected = [jax.random.key_data(jax.random.fold_in(jax.random.key(11), int(s))) for s in seed_index]
    keys = jax.jit(run_keys, static_argnums=2)(11, seed_index, platform)
    assert keys.shape == (5,)
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(keys)), np.stack(expected))
