"""Threefry keys whose hash XLA:CPU compiles as straight-line code: the same bits, fewer kernels.

JAX lowers its Threefry-2x32 hash on the CPU as a rolled loop of 5
iterations (short compile times). In a sweep's step that is most of the
kernels: a LineSearch ER step at 1,024 runs draws 8 hashes per run in three
loops of 5 iterations, a DQN CartPole step 12 loops. :data:`THREEFRY_UNROLLED`
is the same PRNG written as plain ``uint32`` arithmetic (20 rounds of add,
rotate and xor, the key injected every 4 rounds: Salmon et al. 2011,
*Parallel random numbers: as easy as 1, 2, 3*), which XLA fuses into the
kernels around it. It is registered through JAX's public extension point
(``jax.extend.random.define_prng_impl``), so only keys made with it use it:
no other program in the process changes.

Its ``seed``, ``split``, ``fold_in`` and ``random_bits`` give the bits of JAX's
default implementation (``threefry2x32`` with ``jax_threefry_partitionable``
on, JAX's default): every ``jax.random`` sampler then draws the same numbers
from either key (``tests/test_prng.py`` checks that over seeds, shapes and
samplers). :func:`key` hands it out only where that holds and it pays: on the
CPU, with JAX's default implementation and partitionable Threefry; elsewhere it
returns JAX's own key (on a GPU JAX already lowers the hash unrolled).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import random as jex_random

from jaxreplay._typing import ArrayLike

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KEY_PARITY = np.uint32(0x1BD11BDA)  # Threefish's key-schedule constant


def _rotate_left(x: jax.Array, bits: int) -> jax.Array:
    return lax.shift_left(x, np.uint32(bits)) | lax.shift_right_logical(x, np.uint32(32 - bits))


def threefry2x32(k0: ArrayLike, k1: ArrayLike, x0: ArrayLike, x1: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 with 20 rounds: the key ``(k0, k1)`` hashes the counter pairs ``(x0, x1)``.

    All ``uint32``; ``x0`` and ``x1`` of one shape (the keys scalars or of that
    shape). Returns the two output words, shaped like ``x0``.
    """
    k0, k1, x0, x1 = (jnp.asarray(v, np.uint32) for v in (k0, k1, x0, x1))
    keys = (k0, k1, k0 ^ k1 ^ _KEY_PARITY)
    x0, x1 = x0 + k0, x1 + k1
    for block in range(5):
        for bits in _ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = _rotate_left(x1, bits) ^ x0
        x0 = x0 + keys[(block + 1) % 3]
        x1 = x1 + keys[(block + 2) % 3] + np.uint32(block + 1)
    return x0, x1


def _counters(shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    # The 64-bit positions 0, 1, ... of an array of ``shape`` (row-major), as high and low words.
    size = math.prod(shape)
    if size >= 2**32:
        raise NotImplementedError(f"random arrays of 2**32 or more elements, got shape {shape}.")
    return jnp.zeros(shape, np.uint32), lax.iota(np.uint32, size).reshape(shape)


def _seed(seed: jax.Array) -> jax.Array:
    seed = jnp.asarray(seed)
    high = lax.convert_element_type(lax.shift_right_logical(seed, lax.full_like(seed, 32)), np.uint32)
    low_bits = seed & lax.full_like(seed, 0xFFFFFFFF) if seed.dtype.itemsize > 4 else seed
    low = lax.convert_element_type(low_bits, np.uint32)
    return jnp.stack([high, low])


def _hash_positions(key: jax.Array, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    # What split and random_bits both hash: each position of an array of ``shape``, under ``key``.
    return threefry2x32(key[0], key[1], *_counters(shape))


def _split(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.stack(_hash_positions(key, shape), axis=-1)


def _fold_in(key: jax.Array, data: ArrayLike) -> jax.Array:
    word0, word1 = threefry2x32(key[0], key[1], np.uint32(0), jnp.asarray(data, np.uint32))
    return jnp.stack([word0, word1])


def _random_bits(key: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    bits0, bits1 = _hash_positions(key, shape)
    if bit_width == 64:
        high, low = (lax.convert_element_type(b, np.uint64) for b in (bits0, bits1))
        return (high << np.uint64(32)) | low
    bits = bits0 ^ bits1
    return bits if bit_width == 32 else lax.convert_element_type(bits, np.dtype(f"uint{bit_width}"))


THREEFRY_UNROLLED = jex_random.define_prng_impl(
    key_shape=(2,),
    seed=_seed,
    split=_split,
    random_bits=_random_bits,
    fold_in=_fold_in,
    name="threefry2x32_unrolled",
    tag="fry_u",
)
"""JAX's default Threefry-2x32 PRNG (partitionable), with its hash written out as ``uint32`` arithmetic."""


def unrolled_applies(platform: str) -> bool:
    """Whether :func:`key` gives :data:`THREEFRY_UNROLLED` keys on ``platform`` (see the module docstring)."""
    return platform == "cpu" and settings() == "threefry2x32, partitionable"


def settings() -> str:
    """JAX's PRNG settings that a key depends on, as text: ``"threefry2x32, partitionable"``.

    A program that makes keys draws other numbers under other settings, so what
    keeps compiled programs or finished runs names them (the engine's program
    cache, :class:`jaxreplay.engine.batch.Batch`)."""
    impl = jax.config.jax_default_prng_impl  # type: ignore[attr-defined]
    partitionable = bool(jax.config.jax_threefry_partitionable)  # type: ignore[attr-defined]
    return f"{impl}, {'partitionable' if partitionable else 'not partitionable'}"


def key(seed: ArrayLike, platform: str) -> jax.Array:
    """``jax.random.key(seed)``, with :data:`THREEFRY_UNROLLED` where :func:`unrolled_applies` (same bits)."""
    if unrolled_applies(platform):
        return jax.random.key(seed, impl=THREEFRY_UNROLLED)
    return jax.random.key(seed)
