"""Agents: what learns from replayed transitions (they know nothing of sweeps).

* :mod:`jaxreplay.agents.linear`: the paper's linear Q agent for LineSearch,
  Q(x, a) = θ1·(x + a) + θ2, with m sequential TD updates per step.
* :mod:`jaxreplay.agents.dqn`: DQN (flax MLP, optax optimiser, target network,
  ε-greedy), its loss and update on a minibatch.
* :mod:`jaxreplay.agents.conv`: MinAtar's convolutional Q-network (Young & Tian 2019).
* :mod:`jaxreplay.agents.packing`: 0/1 observations kept as bits (``uint8``),
  unpacked to float32 at a network's input.
"""

from jaxreplay import _extras  # noqa: E402

_extras.require("jaxreplay.agents", "rl", "flax", "optax")
