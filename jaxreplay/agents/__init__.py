"""Agents: what learns from replayed transitions (they know nothing of sweeps).

* :mod:`jaxreplay.agents.linear`: the paper's linear Q agent for LineSearch,
  Q(x, a) = θ1·(x + a) + θ2, with m sequential TD updates per step.
* :mod:`jaxreplay.agents.dqn`: DQN (flax MLP, optax optimiser, target network,
  ε-greedy), its loss and update on a minibatch.
"""

from jaxreplay import _extras  # noqa: E402

_extras.require("jaxreplay.agents", "rl", "flax", "optax")
