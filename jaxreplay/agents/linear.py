"""The linear Q agent of the LineSearch game.

``Q(x, a; θ) = θ1 · (x + a) + θ2`` with ``θ = (θ1, θ2)``; the greedy policy
moves right (``a = +v``) when ``θ1 >= 0`` and left otherwise, so
``max_a' Q(x', a') = θ1 · x' + θ2 + |θ1| · v`` (the paper's Q_real for γ > 0 read
this way: docs/paper_readings.md §7). One TD update on a transition
``(x, a, r, x')`` is ``θ ← θ + α · δ · ∇θQ`` with ``∇θQ = (x + a, 1)`` and
``δ = r + γ · max_a' Q(x', a') − Q(x, a)``.

A transition is the dict ``{"position": x, "move": a, "reward": r,
"next_position": x'}`` of ``float32`` scalars (``move`` is ±v itself, not
the action id, so the agent needs no environment parameters beyond ``v``);
:func:`pack` lays it out as one ``float32[4]`` row, the form a replay memory
stores, and :func:`unpack` gives the dict back.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxreplay._typing import ArrayLike

Transition = dict[str, jax.Array]
"""One LineSearch transition, ``{"position", "move", "reward", "next_position"}``; leaves of any
leading shape."""

EXAMPLE_TRANSITION = {
    "position": jnp.float32(0),
    "move": jnp.float32(0),
    "reward": jnp.float32(0),
    "next_position": jnp.float32(0),
}
"""One LineSearch transition of float32 scalars, the example a replay memory is initialised from."""


FIELDS = ("position", "move", "reward", "next_position")
"""The fields of a transition in the order :func:`pack` lays them out in a row."""


def pack(transition: Transition) -> jax.Array:
    """``transition`` (leaves of leading shape ``...``) as rows: ``float32[..., 4]`` in :data:`FIELDS` order.

    LineSearch's replay memory stores these rows, not four columns: a uniform
    draw then reads one 16-byte row (one cache line) instead of four values
    from four arrays, which made the 10⁴-run ER kernel about 1.3× faster on a
    2-core CPU with the same bits (``benchmarks/README.md``).
    """
    return jnp.stack([jnp.asarray(transition[f], jnp.float32) for f in FIELDS], axis=-1)


def unpack(rows: ArrayLike) -> Transition:
    """The transition dict of :func:`pack`'s rows (``float32[..., 4]``): leaves of shape ``...``."""
    rows = jnp.asarray(rows)
    return {f: rows[..., i] for i, f in enumerate(FIELDS)}


def greedy_action(theta: jax.Array) -> jax.Array:
    """``int32[]``: 1 (move right) when ``θ1 >= 0``, else 0."""
    return (theta[..., 0] >= 0).astype(jnp.int32)


def features(transition: Transition) -> jax.Array:
    """``∇θQ = (x + a, 1)``, ``float32[..., 2]`` for transitions of leading shape ``...``."""
    x_plus_a = transition["position"] + transition["move"]
    return jnp.stack([x_plus_a, jnp.ones_like(x_plus_a)], axis=-1)


def td_error(theta: jax.Array, transition: Transition, discount: ArrayLike, speed: ArrayLike) -> jax.Array:
    """TD error ``δ`` of ``transition`` (any leading shape ``...``) under ``θ`` (``float32[2]``).

    Args:
        theta: ``(θ1, θ2)``.
        transition: transition dict, leaves of shape ``...``.
        discount: γ in [0, 1).
        speed: v, the move length (the action set is {−v, +v}).

    Returns:
        ``float32[...]``.
    """
    q = features(transition) @ theta
    best_next = theta[0] * transition["next_position"] + theta[1] + jnp.abs(theta[0]) * speed
    return transition["reward"] + discount * best_next - q


def td_update(
    theta: jax.Array,
    transition: Transition,
    step_size: ArrayLike,
    discount: ArrayLike,
    speed: ArrayLike,
    trainable: ArrayLike,
) -> jax.Array:
    """One TD update on a single transition; ``trainable`` (``float32[2]`` of 0/1) freezes weights."""
    delta = td_error(theta, transition, discount, speed)
    return theta + step_size * delta * features(transition) * trainable
