"""A sum whose rounding does not depend on the program it is compiled in.

XLA may compile a ``reduce`` into another loop in two programs that compute the same thing (another fusion
around it: one update slot or four, another batch of runs), and float32 addition is not associative, so
``jnp.sum`` can differ in its last bits between them. :func:`pairwise_sum` adds in one fixed tree instead:
each level is an elementwise add of two halves, which every program rounds alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def pairwise_sum(x: jax.Array) -> jax.Array:
    """Σ over the last axis of ``x`` in a fixed pairwise order: ``float[...]`` from ``float[..., L]``.

    The last axis is padded with zeros to a power of two, then halved ``log2`` times
    (``x[..., :h] + x[..., h:]``); ``L = 0`` gives zeros.
    """
    x = jnp.asarray(x)
    length = x.shape[-1]
    if length == 0:
        return jnp.zeros(x.shape[:-1], x.dtype)
    width = 1 << (length - 1).bit_length()
    if width != length:
        x = jnp.concatenate([x, jnp.zeros((*x.shape[:-1], width - length), x.dtype)], axis=-1)
    while width > 1:
        width //= 2
        x = x[..., :width] + x[..., width:]
    return x[..., 0]
