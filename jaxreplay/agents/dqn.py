"""Deep Q-network (DQN) agent: pure functions over flax parameters and optax state.

The Q-network is an MLP ``obs -> Q(obs, ·)`` with ReLU hidden layers
(:class:`QNetwork`; the paper uses one hidden layer for CartPole and two for
MountainCar and Acrobot), or MinAtar's convolutional network
(:class:`~jaxreplay.agents.conv.ConvQNetwork`); either may read bit-packed
observations (:mod:`jaxreplay.agents.packing`), unpacked at its input. Everything here is a pure function that jits and
vmaps; every number that a sweep may vary (step size, discount, ε schedule,
target period or τ, Adam's ε) is an argument that may be traced. What changes
code or shapes (network widths, loss, double DQN, optimizer) is a Python
value fixed at trace time. The TD loss a gradient step descends (discount,
loss, double DQN, batch reduction) is one record, :class:`LossOptions`.

A *transition batch* is a dict of arrays with a leading batch axis ``B``::

    obs         float32[B, *obs_shape]   (or uint8[B, packed bytes]: what the network reads)
    action      int32[B]
    reward      float32[B]
    next_obs    float32[B, *obs_shape]   the true next observation (before any auto-reset); as obs
    terminated  float32[B]               1.0 where the episode *terminated* (no bootstrap)

Only ``terminated`` stops bootstrapping: a time-limit truncation is not a
terminal state, so its target bootstraps from ``next_obs`` (the caller stores
the final observation there, not the reset one).

TD error and target (``Q`` online, ``Q̄`` target network)::

    δ = r + γ (1 - terminated) Q̄(s', a*) - Q(s, a)
    a* = argmax_a Q̄(s', a)        (DQN)
    a* = argmax_a Q(s', a)        (double DQN, van Hasselt et al. 2016)

Losses (per transition, then averaged with importance weights ``w``):
``"mse"`` is ``δ² / 2`` (its gradient is the TD update ``-δ ∇Q``) and
``"huber"`` is ``optax.huber_loss(δ, delta=1)`` (quadratic ``δ²/2`` for
``|δ| <= 1``, linear beyond). The target is held fixed (``stop_gradient``).

Optimizers are built with a *unit* learning rate and the step size is applied
by :func:`apply_updates` as a multiplication, so the step size is an ordinary
traced scalar (``optax.inject_hyperparams`` would do the same but stores the
rate in the optimizer state; a plain product keeps the state free of it).
"""

from __future__ import annotations

from typing import NamedTuple, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxreplay import _ordered, _validation
from jaxreplay._typing import ArrayLike, PyTree
from jaxreplay.agents import packing
from jaxreplay.agents.conv import ConvQNetwork

LOSSES = ("mse", "huber")
"""The TD losses :func:`loss_fn` accepts: squared error, or Huber (quadratic within 1, linear outside)."""
OPTIMIZERS = ("adam", "sgd")
"""The optax optimizers :func:`make_optimizer` builds."""
REDUCTIONS = ("mean", "sum")
"""How :func:`loss_fn` reduces the minibatch: its mean (the usual DQN loss) or its sum."""

Params = PyTree
"""A flax parameter pytree (``{"params": {...}}``)."""
OptState = PyTree
"""An optax optimizer state."""
Batch = dict[str, jax.Array]
"""A minibatch of transitions, ``{name: array[batch, ...]}`` (keys in the module docstring)."""


class QNetwork(nn.Module):
    """MLP Q-network: ``float32[..., obs_dim] -> float32[..., num_actions]``.

    Observations with more than one axis (e.g. MinAtar's ``[10, 10, C]``)
    are flattened: pass ``obs_ndim`` so the leading (batch) axes are kept.

    Attributes:
        hidden_sizes: widths of the ReLU hidden layers, e.g. ``(64,)``.
        num_actions: number of discrete actions.
        obs_ndim: number of trailing axes that form one observation (1 for a
            flat vector).
        packed_shape: the observation's shape where the input is bit-packed
            (:func:`jaxreplay.agents.packing.pack`): it is unpacked first
            (then ``obs_ndim`` must be ``len(packed_shape)``). ``None``: the
            input is the observation itself.
    """

    hidden_sizes: tuple[int, ...]
    num_actions: int
    obs_ndim: int = 1
    packed_shape: tuple[int, ...] | None = None

    @nn.compact
    def __call__(self, obs: ArrayLike) -> jax.Array:
        x = packing.network_input(obs, self.packed_shape)
        lead = x.shape[: x.ndim - self.obs_ndim]
        x = x.reshape(*lead, -1)
        for width in self.hidden_sizes:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.num_actions)(x)


Network = QNetwork | ConvQNetwork
"""A Q-network of this module's functions: ``obs -> float32[..., num_actions]`` (MLP or MinAtar's conv)."""


def init_params(key: jax.Array, network: Network, obs_shape: tuple[int, ...], obs_dtype=jnp.float32) -> Params:
    """Random initial parameters (flax defaults: LeCun-normal kernels, zero biases).

    Args:
        key: PRNG key.
        network: the Q-network (:data:`Network`).
        obs_shape, obs_dtype: shape and dtype of one input of the network (a
            packed observation: ``(packed bytes,)`` and ``uint8``).

    Returns:
        The parameter pytree (``{"params": {...}}``). Cost: O(#parameters).
    """
    return network.init(key, jnp.zeros(obs_shape, obs_dtype))


def q_values(network: Network, params: Params, obs: ArrayLike) -> jax.Array:
    """``Q(obs, ·)``: ``float32[..., num_actions]`` (``network.apply``, typed: it returns no mutated collections)."""
    return cast(jax.Array, network.apply(params, obs))


def make_optimizer(name: str, adam_epsilon: ArrayLike = 1e-8) -> optax.GradientTransformation:
    """The optimizer *without* its step size (see :func:`apply_updates`).

    Args:
        name: ``"adam"`` (``optax.scale_by_adam``'s update, β = (0.9, 0.999)) or
            ``"sgd"`` (identity: plain gradient steps).
        adam_epsilon: Adam's ε (may be traced; build the optimizer inside the
            traced function then). Ignored for ``"sgd"``.

    Returns:
        An ``optax.GradientTransformation`` whose ``init`` does not depend on
        ``adam_epsilon`` (so the optimizer state can be created with any ε).
    """
    if name == "adam":
        return _scale_by_adam(adam_epsilon)
    if name == "sgd":
        return optax.identity()
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}.")


def _scale_by_adam(eps: ArrayLike, b1: float = 0.9, b2: float = 0.999) -> optax.GradientTransformation:
    """``optax.scale_by_adam(b1, b2, eps)`` (its state, its moments, its update), the bias corrections
    applied as a product with ``1 / (1 - β^t)``, not optax's quotient by ``1 - β^t``.

    Why: vmapped over runs, ``1 - β^t`` is one number per run broadcast over the run's parameters, and
    XLA:CPU rewrites that quotient into the product in a program for one device but not in the partitioned
    program of several, whose Adam steps then rounded otherwise: a DQN run's weights, TD loss and (over
    20,000 steps, one run in 8) returns depended on the device count. Written as the product, every program
    computes what the one-device program computed before (tested bit-identical to ``optax.scale_by_adam``
    on one device).
    """

    def init(params):
        return optax.scale_by_adam(b1, b2, eps).init(params)

    def update(updates, state, params=None):
        del params
        mu = optax.tree_utils.tree_update_moment(updates, state.mu, b1, 1)
        nu = optax.tree_utils.tree_update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = optax.safe_increment(state.count)
        mu_scale, nu_scale = 1 / (1 - b1**count), 1 / (1 - b2**count)
        scaled = jax.tree.map(
            lambda m, v: (m * mu_scale.astype(m.dtype)) / (jnp.sqrt(v * nu_scale.astype(v.dtype)) + eps), mu, nu
        )
        return scaled, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def apply_updates(params: Params, updates: Params, step_size: ArrayLike) -> Params:
    """``params - step_size · updates`` (gradient *descent*; ``step_size`` may be traced)."""
    step_size = jnp.asarray(step_size, jnp.float32)
    return jax.tree.map(lambda p, u: p - step_size * u.astype(p.dtype), params, updates)


def epsilon_schedule(step: ArrayLike, start: ArrayLike, end: ArrayLike, decay_steps: ArrayLike) -> jax.Array:
    """Linear ε schedule: ``start`` at step 0, ``end`` from ``decay_steps`` on.

    Args:
        step: environment steps done so far (integer, may be traced).
        start, end: ε at the two ends (in [0, 1]; may be traced).
        decay_steps: length of the ramp (integer >= 0; 0 means ``end`` at once).

    Returns:
        ``float32[]``.
    """
    step = jnp.asarray(step, jnp.float32)
    decay_steps = jnp.asarray(decay_steps, jnp.float32)
    fraction = jnp.where(decay_steps > 0, jnp.clip(step / jnp.maximum(decay_steps, 1.0), 0.0, 1.0), 1.0)
    # (1 - f)·start + f·end is exactly ``end`` at f = 1 (start + f·(end - start) is not, in float32).
    return ((1.0 - fraction) * start + fraction * end).astype(jnp.float32)


def epsilon_greedy(key: jax.Array, q_values: jax.Array, epsilon: ArrayLike) -> jax.Array:
    """Pick ``argmax q`` with probability ``1 - ε``, else a uniform random action.

    Args:
        key: PRNG key.
        q_values: ``float32[num_actions]``.
        epsilon: exploration probability (may be traced).

    Returns:
        ``int32[]``. Ties in ``argmax`` go to the lowest action. Cost: two
        random numbers.
    """
    explore_key, action_key = jax.random.split(key)
    greedy = jnp.argmax(q_values, axis=-1).astype(jnp.int32)
    random_action = jax.random.randint(action_key, (), 0, q_values.shape[-1], jnp.int32)
    return jnp.where(jax.random.uniform(explore_key, (), jnp.float32) < epsilon, random_action, greedy)


def td_errors(
    network: Network,
    params: Params,
    target_params: Params,
    batch: Batch,
    discount: ArrayLike,
    *,
    double: bool = False,
) -> jax.Array:
    """TD errors ``δ = r + γ (1 - terminated) Q̄(s', a*) - Q(s, a)`` of a batch.

    Args:
        network: the Q-network (:data:`Network`).
        params: online parameters (``Q``).
        target_params: target-network parameters (``Q̄``).
        batch: transition batch with leading axis ``B`` (module docstring).
        discount: γ in [0, 1) (may be traced).
        double: choose ``a*`` with the online network (double DQN).

    Returns:
        ``float32[B]``; the target part carries no gradient. Cost: two
        (three with ``double``) forward passes on ``B`` observations.

    Raises:
        ValueError: a concrete ``batch["action"]`` outside ``[0, num_actions)`` (-1 trained the last action's
            Q-value, one beyond the last gave a NaN loss whose step dropped the sample without a word).
            Traced actions cannot be checked: the experiments only store actions they took.
    """
    q = q_values(network, params, batch["obs"])
    actions = _validation.concrete_value(batch["action"])
    if actions is not None and (outside := (actions < 0) | (actions >= q.shape[-1])).any():
        bad = actions[outside].reshape(-1)[:3].tolist()
        raise ValueError(f'batch["action"] must be in [0, {q.shape[-1]}) (the network\'s actions), got {bad}.')
    q_taken = jnp.take_along_axis(q, batch["action"][:, None].astype(jnp.int32), axis=-1)[:, 0]
    return _target(network, params, target_params, batch, discount, double) - q_taken


def _target(
    network: Network, params: Params, target_params: Params, batch: Batch, discount: ArrayLike, double: bool
) -> jax.Array:
    next_target = q_values(network, target_params, batch["next_obs"])
    if double:
        best = jnp.argmax(q_values(network, params, batch["next_obs"]), axis=-1)
        bootstrap = jnp.take_along_axis(next_target, best[:, None], axis=-1)[:, 0]
    else:
        bootstrap = jnp.max(next_target, axis=-1)
    not_terminal = 1.0 - batch["terminated"].astype(jnp.float32)
    target = batch["reward"].astype(jnp.float32) + discount * not_terminal * bootstrap
    return jax.lax.stop_gradient(target)


def elementwise_loss(delta: jax.Array, loss: str) -> jax.Array:
    """``δ²/2`` (``"mse"``) or the Huber loss with threshold 1 (``"huber"``); shape of ``delta``."""
    if loss == "mse":
        return 0.5 * jnp.square(delta)
    if loss == "huber":
        return optax.huber_loss(delta, delta=1.0)
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}.")


class LossOptions(NamedTuple):
    """The TD loss that :func:`loss_fn` computes and :func:`train_step` descends.

    One record of the loss's variants, so a gradient step takes them as one
    argument. ``discount`` may be traced (a sweep varies it in one compiled
    program); the other fields are Python values that pick the code at trace
    time, checked (``ValueError`` naming the field) before anything is traced.

    Attributes:
        discount: γ in [0, 1) of the TD target (a scalar; may be traced).
        loss: ``"mse"`` (``δ²/2``) or ``"huber"`` (:func:`elementwise_loss`).
        double: double DQN targets (a Python ``bool``; :func:`td_errors`).
        reduction: ``"mean"`` (the usual DQN loss: the step size applies to
            the batch average) or ``"sum"`` (the step size applies to every
            transition: with SGD, one step is the paper's Algorithm 1 update
            ``θ += α Σ_i δ_i ∇Q_i`` with the batch's transitions applied at
            once instead of one after another).
    """

    discount: ArrayLike
    loss: str = "mse"
    double: bool = False
    reduction: str = "mean"


def _check_options(options: LossOptions) -> None:
    """Raise ValueError naming the field of ``options`` that is not a :class:`LossOptions` choice.

    Only the static fields are checked (``discount`` may be traced; its range
    is the caller's to check, as ``jaxreplay.experiments.dqn.check`` does).
    """
    if not isinstance(options, LossOptions):
        raise ValueError(f"options must be an agents.dqn.LossOptions, got {type(options).__name__}.")
    for name, value, allowed in (("loss", options.loss, LOSSES), ("reduction", options.reduction, REDUCTIONS)):
        if not isinstance(value, str) or value not in allowed:
            raise ValueError(f"options.{name} must be one of {allowed}, got {value!r}.")
    if not isinstance(options.double, bool):
        raise ValueError(
            f"options.double must be a Python bool (it picks the target's code when traced), got {options.double!r}."
        )


def loss_fn(
    params: Params,
    network: Network,
    target_params: Params,
    batch: Batch,
    weights: jax.Array,
    options: LossOptions,
) -> tuple[jax.Array, jax.Array]:
    """Importance-weighted TD loss over the batch and the TD errors.

    Args:
        params: online parameters (differentiated).
        network, target_params, batch: as :func:`td_errors`.
        weights: ``float32[B]`` importance weights (ones for uniform replay).
        options: the discount and the loss's variants (:class:`LossOptions`).

    Returns:
        ``(loss float32[], td_errors float32[B])``: the loss is
        ``mean(weights · ℓ(δ))`` or ``sum(weights · ℓ(δ))``.

    Raises:
        ValueError: a bad static field of ``options`` (named), when traced.
    """
    _check_options(options)
    delta = td_errors(network, params, target_params, batch, options.discount, double=options.double)
    weighted = weights * elementwise_loss(delta, options.loss)
    total = _ordered.pairwise_sum(weighted)
    return (total / weighted.shape[-1] if options.reduction == "mean" else total), delta


def train_step(
    network: Network,
    optimizer: optax.GradientTransformation,
    params: Params,
    target_params: Params,
    opt_state: OptState,
    batch: Batch,
    weights: jax.Array,
    step_size: ArrayLike,
    options: LossOptions,
) -> tuple[Params, OptState, jax.Array, jax.Array]:
    """One gradient step on the TD loss of ``batch``.

    Args:
        network: the Q-network (:data:`Network`).
        optimizer: from :func:`make_optimizer` (unit step size).
        params, target_params: online and target parameters.
        opt_state: the optimizer state for ``params``.
        batch: transition batch, leading axis ``B``.
        weights: ``float32[B]`` importance weights.
        step_size: learning rate α (may be traced).
        options: the discount (may be traced) and the loss's static variants
            (:class:`LossOptions`, :func:`loss_fn`).

    Returns:
        ``(params, opt_state, loss float32[], td_errors float32[B])``; the TD
        errors are those *before* the step (what prioritized replay stores).
        Cost: one forward and backward pass on ``B`` transitions plus the
        target's forward pass(es).

    Raises:
        ValueError: a bad static field of ``options`` (named), when traced.
    """
    (value, delta), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, network, target_params, batch, weights, options
    )
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return apply_updates(params, updates, step_size), opt_state, value, delta


def hard_target_update(params: Params, target_params: Params, copy: ArrayLike) -> Params:
    """``params`` where ``copy`` (``bool[]``, may be traced) else ``target_params``."""
    return jax.tree.map(lambda p, t: jnp.where(copy, p, t), params, target_params)


def polyak_target_update(params: Params, target_params: Params, tau: ArrayLike) -> Params:
    """``τ · params + (1 - τ) · target_params`` (τ in [0, 1], may be traced)."""
    tau = jnp.asarray(tau, jnp.float32)
    return jax.tree.map(lambda p, t: tau * p + (1.0 - tau) * t, params, target_params)


def greedy_action(network: Network, params: Params, obs: ArrayLike) -> jax.Array:
    """``argmax_a Q(obs, a)``: ``int32[...]`` for observations of leading shape ``...``."""
    return jnp.argmax(q_values(network, params, obs), axis=-1).astype(jnp.int32)


def is_finite(params: Params) -> jax.Array:
    """``bool[]``: every parameter is finite."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(params)]))
