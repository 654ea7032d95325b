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
the actions: 132,179 for Breakout (``C = 4``, ``A = 3``).
"""

from __future__ import annotations

import flax.linen as nn
import jax

from jaxreplay._typing import ArrayLike
from jaxreplay.agents import packing


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
        x = nn.relu(nn.Conv(self.channels, (k, k), strides=(1, 1), padding="VALID")(x))
        x = nn.relu(nn.Dense(self.hidden_size)(x.reshape(x.shape[0], -1)))
        return nn.Dense(self.num_actions)(x).reshape(*lead, self.num_actions)
