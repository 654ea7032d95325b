"""jaxreplay._ordered.pairwise_sum: the sum in one fixed order, whatever program it is compiled in."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay._ordered import pairwise_sum


def _tree_sum(values: list[float]) -> np.float32:
    """The documented order in plain Python (float32 adds): pad to a power of two, halve until one is left."""
    x = [np.float32(v) for v in values] or [np.float32(0.0)]
    width = 1 << (len(x) - 1).bit_length()
    x += [np.float32(0.0)] * (width - len(x))
    while len(x) > 1:
        half = len(x) // 2
        x = [np.float32(a + b) for a, b in zip(x[:half], x[half:])]
    return x[0]


@pytest.mark.parametrize("length", [0, 1, 2, 3, 7, 8, 32, 50, 129])
def test_the_sum_is_the_documented_pairwise_tree(length):
    values = np.random.default_rng(length).normal(size=(3, length)).astype(np.float32) * 1e3
    got = np.asarray(jax.jit(pairwise_sum)(jnp.asarray(values)))
    assert got.shape == (3,) and got.dtype == np.float32
    for row, total in zip(values, got):
        assert total == _tree_sum(list(row))  # bit for bit
        assert total == pytest.approx(math.fsum(row.astype(np.float64)), rel=1e-5, abs=1e-3)


def test_every_program_gives_the_same_bits():
    """Vmapped, in a larger batch, or fused with other work: the same bits (a reduce may not give them)."""
    x = jax.random.normal(jax.random.key(0), (64, 50)) * 100
    alone = jax.jit(pairwise_sum)(x)
    mapped = jax.jit(jax.vmap(pairwise_sum))(x)
    fused = jax.jit(lambda y: pairwise_sum(y * 2.0) / 2.0)(x)
    np.testing.assert_array_equal(alone, mapped)
    np.testing.assert_array_equal(alone, fused)
