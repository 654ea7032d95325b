"""The convolutional Q-network of MinAtar's DQN baseline (Young & Tian 2019).

Young and Tian's MinAtar paper ("MinAtar: An Atari-Inspired Testbed for
Thorough and Reproducible Reinforcement Learning Experiments", 2019) trains
DQN on its ``10 × 10 × C`` grids with a deliberately small network: a single
convolution of 16 filters of 3 × 3 at stride 1, without padding (so 8 × 8 × 16
features), a ReLU, one fully connected ReLU layer of 128 units and a linear
layer with one Q-value per action. :class:`ConvQNetwork` is that network; its
sizes are attributes, their defaults the paper's. Its parameter count is::

    (k·k·C·F + F) + ((H-k+1)(W-k+1)·F·U + U) + (U·A + A)

with ``k`` the kernel size, ``F`` the filters, ``U`` the hidden units, ``A``
the actions: 132,179 for Breakout (``C = 4``, ``A = 3``, gymnax's minimal
action set; the baseline's network had ``A = 6`` in every game: 132,566).

The convolution is computed as a matrix product over image patches
(:class:`PatchConv`), not with ``lax.conv``: a sweep vmaps the network over
runs that each have their own weights, and a vmapped ``lax.conv`` becomes a
*grouped* convolution (one group per run), which XLA:CPU runs several times
slower than the runs one after another; a vmapped matrix product is a batched
one. The parameters are ``nn.Conv``'s (same names, shapes and initialisers).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxreplay._typing import ArrayLike
from jaxreplay.agents import packing


class PatchConv(nn.Module):
    """A square ``VALID`` convolution at stride 1 as a product over patches: ``float32[B, H, W, C] ->
    float32[B, H-k+1, W-k+1, features]``.

    The same function as ``nn.Conv(features, (k, k), padding="VALID")`` with the same parameters
    (``kernel`` ``float32[k, k, C, features]`` and ``bias`` ``float32[features]``, the same
    initialisers), summed in another order (equal to rounding). Patches are the ``k·k`` shifted
    views of the input side by side on the channel axis, in the kernel's ``(row, column,
    channel)`` order, so the kernel reshaped to ``[k·k·C, features]`` multiplies them.

    Attributes:
        features: output channels.
        kernel_size: ``k``.
    """

    features: int
    kernel_size: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k, (h, w, c) = self.kernel_size, x.shape[-3:]
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (k, k, c, self.features), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
        rows, cols = h - k + 1, w - k + 1
        patches = jnp.concatenate([x[..., i : i + rows, j : j + cols, :] for i in range(k) for j in range(k)], axis=-1)
        return patches @ kernel.reshape(k * k * c, self.features) + bias


class ConvQNetwork(nn.Module):
    """Conv Q-network: ``[..., H, W, C] -> float32[..., num_actions]`` (module docstring: the architecture).

    Attributes:
        num_actions: number of discrete actions.
        channels: filters of the convolution (paper: 16).
        kernel_size: side of its square kernel, stride 1, no padding (paper: 3).
        hidden_size: units of the dense ReLU layer (paper: 128).
        packed_shape: ``(H, W, C)`` where the input is bit-packed
            (:func:`jaxreplay.agents.packing.pack`): it is unpacked first.
            ``None``: the input is the ``[..., H, W, C]`` grid itself.
    """

    num_actions: int
    channels: int = 16
    kernel_size: int = 3
    hidden_size: int = 128
    packed_shape: tuple[int, ...] | None = None

    @nn.compact
    def __call__(self, obs: ArrayLike) -> jax.Array:
        x = packing.network_input(obs, self.packed_shape)
        lead, grid = x.shape[:-3], x.shape[-3:]
        x = x.reshape(-1, *grid)  # flax's Conv wants one batch axis
        k = self.kernel_size
        x = nn.relu(PatchConv(self.channels, k, name="Conv_0")(x))
        x = nn.relu(nn.Dense(self.hidden_size)(x.reshape(x.shape[0], -1)))
        return nn.Dense(self.num_actions)(x).reshape(*lead, self.num_actions)
