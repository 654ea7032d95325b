"""Binary observations stored as bits: one ``uint8`` holds eight 0/1 cells.

MinAtar's observations are ``10 × 10 × C`` grids of 0/1 (gymnax hands them
over as ``float32``: 4 bytes a cell). A replay memory that keeps them as
float32 spends 32 bits on each bit; :func:`pack` keeps them as ``uint8[⌈n/8⌉]``
(``n`` cells; 50 bytes for Breakout's 400 cells, 1/32 of float32 and 1/8 of
``bool``), and :func:`unpack` restores them exactly, as ``float32``, where a
network reads them (the networks of :mod:`jaxreplay.agents.dqn` and
:mod:`jaxreplay.agents.conv` unpack their input when given ``packed_shape``).
Both are pure and work on any leading (batch) axes.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxreplay._typing import ArrayLike


def packed_size(obs_shape: tuple[int, ...]) -> int:
    """Bytes of one packed observation of shape ``obs_shape``: ``⌈prod(obs_shape) / 8⌉``."""
    return -(-math.prod(obs_shape) // 8)


def pack(obs: ArrayLike, obs_shape: tuple[int, ...]) -> jax.Array:
    """``obs`` (``[..., *obs_shape]``, every cell 0 or 1) as bits: ``uint8[..., packed_size(obs_shape)]``.

    A cell is stored as 1 where it is nonzero, so only 0/1 observations come
    back unchanged from :func:`unpack`.

    Raises:
        ValueError: ``obs`` does not end in ``obs_shape`` (when traced).
    """
    obs = jnp.asarray(obs)
    ndim = len(obs_shape)
    if tuple(obs.shape[obs.ndim - ndim :]) != tuple(obs_shape):
        raise ValueError(f"obs must end in the observation shape {tuple(obs_shape)}, got shape {obs.shape}.")
    cells = obs.reshape(*obs.shape[: obs.ndim - ndim], -1) != 0
    return jnp.packbits(cells, axis=-1)


_PACK_HINT = "pack an observation as the environment gives it with jaxreplay.agents.packing.pack(obs, obs_shape) first"


def check_packed(packed: ArrayLike, obs_shape: tuple[int, ...], name: str = "packed", hint: str = _PACK_HINT) -> None:
    """Refuses ``packed`` unless it is bytes (an integer dtype) ending in ``packed_size(obs_shape)`` of them.

    An observation as the environment gives it, or one packed for another shape (another game), would otherwise
    be read as bits without a word.

    Raises:
        ValueError: naming ``name`` and the bytes expected, ending in ``hint`` (how to pack one).
    """
    packed = jnp.asarray(packed)
    size = packed_size(obs_shape)
    if not jnp.issubdtype(packed.dtype, jnp.integer) or packed.ndim == 0 or packed.shape[-1] != size:
        raise ValueError(
            f"{name}: packed observations of shape {tuple(obs_shape)} must be bytes ending in {size} of them "
            f"(uint8[..., {size}]), got {packed.dtype}{list(packed.shape)}: {hint}."
        )


def unpack(packed: ArrayLike, obs_shape: tuple[int, ...]) -> jax.Array:
    """The observations of :func:`pack`'s bits: ``float32[..., *obs_shape]`` of 0.0 and 1.0.

    Raises:
        ValueError: ``packed`` is not bytes ending in ``packed_size(obs_shape)`` of them (:func:`check_packed`).
    """
    check_packed(packed, obs_shape)
    packed = jnp.asarray(packed).astype(jnp.uint8)
    cells = jnp.unpackbits(packed, axis=-1, count=math.prod(obs_shape))
    return cells.reshape(*packed.shape[:-1], *obs_shape).astype(jnp.float32)


def network_input(obs: ArrayLike, packed_shape: tuple[int, ...] | None) -> jax.Array:
    """What a network computes on: ``obs`` as ``float32``, unpacked first where ``packed_shape`` is given."""
    if packed_shape is None:
        return jnp.asarray(obs, jnp.float32)
    return unpack(obs, packed_shape)
