"""Sums of ``|δ|`` over a memory's oldest transitions, exact or estimated from draws (for :mod:`jaxreplay.adaptive`).

Offsets count from the oldest live transition (0); ``L`` is the static length
of every evaluation: ``max_num_old`` for exact sums, ``subsample_size`` for
estimates. The module docstring of :mod:`jaxreplay.adaptive` describes the
estimators (exact, paired or independent draws) and their standard errors.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jaxreplay import buffer as buffer_lib
from jaxreplay._typing import ArrayLike

TDErrorFn = Callable[[buffer_lib.Transition], ArrayLike]  # transitions with a leading axis L -> float[L]


def draw_positions(key, window, length: int, subsample_size: int | None, enumerate_small):
    """Where to evaluate a sum over ``window`` live transitions: ``(positions, valid, scale, drawn)``.

    ``positions`` ``int32[L]`` (offsets within the window), ``valid`` ``bool[L]``,
    ``scale`` ``float32[]`` (the weight of each evaluated ``|δ|``), ``drawn``
    ``bool[]`` (the positions are random draws, not an enumeration).

    Exact (no subsample): positions ``0 .. L-1``, valid below ``window``.
    Subsampled: ``s`` uniform draws with replacement from ``[0, window)``
    (``drawn``, each counted ``window / s``), unless ``enumerate_small`` and
    ``window <= s``: then every transition once (exact, scale 1).
    """
    index = jnp.arange(length, dtype=jnp.int32)
    if subsample_size is None:
        return index, index < window, jnp.float32(1.0), jnp.bool_(False)
    drawn = ~(jnp.asarray(enumerate_small, jnp.bool_) & (window <= subsample_size))
    u = jax.random.uniform(key, (subsample_size,), jnp.float32)
    random_positions = jnp.clip((u * window).astype(jnp.int32), 0, jnp.maximum(window - 1, 0))
    positions = jnp.where(drawn, random_positions, index)
    valid = jnp.where(drawn, jnp.broadcast_to(window > 0, (subsample_size,)), index < window)
    scale = jnp.where(drawn, window.astype(jnp.float32) / subsample_size, jnp.float32(1.0))
    return positions, valid, scale, drawn


def standard_error(values, valid, scale, drawn, subsample_size: int | None):
    """Standard error of ``scale · Σ values`` over draws with replacement (0 when exact)."""
    if subsample_size is None or subsample_size < 2:
        return jnp.float32(0.0)
    sd = jnp.std(jnp.where(valid, values, 0.0), ddof=1)
    return jnp.where(drawn & jnp.any(valid), scale * jnp.sqrt(jnp.float32(subsample_size)) * sd, 0.0)


def abs_td_errors(buffer_state, td_error_fn: TDErrorFn, length: int, start, positions, valid) -> jax.Array:
    """``float32[L]``: ``|δ|`` at age offsets ``start + positions``, 0 where not ``valid``."""
    offsets = jnp.asarray(start, jnp.int32) + positions
    slots = buffer_lib.slot_of(buffer_state, offsets)
    td = jnp.asarray(td_error_fn(buffer_lib.get(buffer_state, slots)))
    if td.shape != (length,):
        raise ValueError(
            f"td_error_fn must return one TD error per transition, shape ({length},); got shape {td.shape}."
        )
    return jnp.where(valid, jnp.abs(td), 0.0).astype(jnp.float32)


def td_sum(key, buffer_state, td_error_fn: TDErrorFn, start, num_old, max_num_old: int, subsample_size) -> jax.Array:
    """Σ|δ| (or its estimate from independent draws) over the live offsets ``start .. start+num_old-1``."""
    start = jnp.asarray(start, jnp.int32)
    window = jnp.clip(jnp.minimum(jnp.asarray(num_old, jnp.int32), buffer_state.size - start), 0, None)
    length = max_num_old if subsample_size is None else subsample_size
    positions, valid, scale, _ = draw_positions(key, window, length, subsample_size, False)
    return scale * jnp.sum(abs_td_errors(buffer_state, td_error_fn, length, start, positions, valid))
