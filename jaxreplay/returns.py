"""n-step returns, computed at sample time from the stored single transitions.

A memory stores one transition per environment step, in the order they
happened (the ring of :mod:`jaxreplay.buffer`). For a start transition ``t``
(a sampled slot) and a horizon ``n`` (traced, ``1 <= n <= max_n_step`` with
``max_n_step`` static) the n-step target is::

    G      = r_t + γ r_{t+1} + ... + γ^(k-1) r_{t+k-1}
    target = G + γ^k (1 - terminated_{t+k-1}) V(next_obs_{t+k-1})

where ``k <= n`` is the number of rewards summed. The sum stops

* after ``n`` transitions;
* at the end of the episode, i.e. at the first transition whose
  ``terminated`` or ``truncated`` flag is set: after a termination nothing is
  bootstrapped (discount 0); after a time-limit truncation the target
  bootstraps from that transition's stored next observation (the episode's
  final observation, not the reset one), as the 1-step target does;
* at the newest transition in the memory (an incomplete window, below).

Nothing is stored twice, and the capacity, its resizes and ``n`` stay traced:
the window is read from the ring (:func:`jaxreplay.buffer.successors`) and
never crosses the write head or leaves the live window, so a start that
survives a shrink (aER) reads only transitions that are still live.

**Incomplete windows are truncated, not excluded.** A start among the
``n - 1`` newest transitions whose episode has not ended yet has fewer than
``n`` successors in the memory. Its target uses the ``k < n`` transitions
that exist and bootstraps from the newest one's stored next observation with
``γ^k``: a shorter multi-step target, as valid as the n-step one (it is the
same sum cut at a state the agent did visit). Excluding such starts instead
would make every sampler draw from a window other than the live one (uniform,
stored priorities kept per slot, CER whose first draw *is* the newest
transition) and would make aER's resize depend on ``n``; truncation leaves
samplers and resizing unchanged and is nothing at ``n = 1``. The price: at
most ``n - 1`` starts per memory (a fraction ``(n - 1) / size``) have
shorter horizons, and a start's target lengthens as new transitions arrive.

**Arithmetic order** (fixed, so that a plain-Python reference reproduces the
float32 results bit for bit): ``G = r_t``, then ``G = G + γ^j · r_{t+j}`` for
``j = 1 .. k-1`` with the powers ``γ^1 = γ``, ``γ^(j+1) = γ^j · γ`` in
float32; the bootstrap discount is ``γ^k``, or 0 if the ``k``-th transition
terminated. XLA:CPU fuses each ``G + γ^j · r_{t+j}`` into one fused
multiply-add, rounded once (measured; a backend that does not fuse also
rounds the product, an error of half an ulp of ``γ^j · r`` per step); the
tests' reference rounds as the backend does. At ``n = 1`` no step is taken:
``G = r_t`` and the discount is ``γ · (1 - terminated_t)`` exactly, so
``G + discount · V`` is the 1-step target bit for bit.

Bad ``n``: a concrete one that is not an integer in ``[1, max_n_step]`` is a
``ValueError`` naming it, before anything is traced. A traced one cannot
raise: it is clipped into ``[1, max_n_step]`` (fractional: truncated; NaN:
1, the 1-step target) and :attr:`NStep.n_clipped` is set, as a traced
capacity sets ``BufferState.capacity_clipped``. ``n`` is one horizon for
all starts: a scalar (``vmap`` for one per run).

Bad ``discount``: a concrete one outside ``[0, 1]`` is a ``ValueError``; a
traced one outside it (or NaN) makes every ``reward`` and ``discount`` NaN,
so that whatever learns from them diverges loudly instead of learning from
a target that is no return (the DQN experiment also flags it in its summary).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation
from jaxreplay import buffer as buffer_lib
from jaxreplay._typing import ArrayLike

STORED_FIELDS = ("reward", "terminated", "truncated")
"""The storage keys :func:`n_step` reads by default: the reward, and the two episode-end flags (nonzero = set)."""


class NStep(NamedTuple):
    """The pieces of n-step targets ``reward + discount · V(bootstrap observation)``, shape ``S`` each.

    Attributes:
        reward: ``float32[*S]``; the discounted sum of the first ``steps``
            rewards (0 where ``steps`` is 0).
        discount: ``float32[*S]``; what multiplies the bootstrap value:
            ``γ^steps``, or 0 where the last summed transition terminated (or
            ``steps`` is 0).
        steps: ``int32[*S]``; how many rewards were summed: ``min(n, to the
            end of the episode, to the newest transition)``, at least 1 for a
            live start; 0 for a start that is not live.
        n_clipped: ``bool[]``; a traced ``n`` was not an integer in
            ``[1, max_n_step]`` and was clipped (module docstring).
    """

    reward: jax.Array
    discount: jax.Array
    steps: jax.Array
    n_clipped: jax.Array


def accumulate(
    rewards: ArrayLike,
    terminated: ArrayLike,
    truncated: ArrayLike,
    valid: ArrayLike,
    n: ArrayLike,
    discount: ArrayLike,
) -> NStep:
    """n-step pieces from windows of consecutive transitions (the arithmetic of the module docstring).

    Entry ``[..., j]`` of every window is the ``j``-th transition after the
    start (``j = 0``: the start itself), as :func:`jaxreplay.buffer.successors`
    orders them; the window length ``L`` is the static ``max_n_step``.

    Args:
        rewards: ``float[*S, L]``.
        terminated: ``[*S, L]``, nonzero where the episode terminated at that
            transition (no bootstrap after it).
        truncated: ``[*S, L]``, nonzero where it was cut by a time limit
            (bootstrap from that transition's next observation).
        valid: ``bool[*S, L]``; false entries (past the newest transition, or
            a start that is not live) are never read.
        n: the horizon, an integer in ``[1, L]``; may be traced (then clipped
            and flagged, module docstring).
        discount: γ in ``[0, 1]``; may be traced (outside it: NaN pieces, module docstring).

    Returns:
        An :class:`NStep` of shape ``S``. Cost: O(|S| · L) elementwise
        operations (``L`` unrolled steps).

    Raises:
        ValueError: ``n`` is not a scalar, a concrete ``n`` that is not an
            integer in ``[1, L]``, a concrete ``discount`` outside ``[0, 1]``,
            or windows of different shapes.
    """
    shape = jnp.shape(rewards)
    shapes = {
        name: jnp.shape(x) for name, x in zip(("terminated", "truncated", "valid"), (terminated, truncated, valid))
    }
    if len(shape) < 1 or any(other != shape for other in shapes.values()):
        raise ValueError(
            f"rewards, terminated, truncated and valid must share one shape [*S, L], got rewards {shape} and {shapes}."
        )
    length = shape[-1]
    _check_horizon(n, length)
    _validation.check_float("discount", discount, low=0.0, high=1.0)
    horizon, n_clipped = _validation.clip_traced_int(n, 1, length, fallback=1)
    terminal = jnp.asarray(terminated).astype(bool)  # (nonzero: a float or int flag as well as a bool)
    ends = terminal | jnp.asarray(truncated).astype(bool)
    valid = jnp.asarray(valid, bool)
    gamma = jnp.asarray(discount, jnp.float32)
    good_gamma = (gamma >= 0) & (gamma <= 1)
    gamma = jnp.where(good_gamma, gamma, jnp.nan)  # a traced bad γ is loud (module docstring)
    rewards = jnp.asarray(rewards, jnp.float32)

    included = valid[..., 0]
    total = jnp.where(included, rewards[..., 0], 0.0)
    power = gamma  # γ^(j+1) after step j
    bootstrap = jnp.where(included & ~terminal[..., 0], power, 0.0)
    steps = included.astype(jnp.int32)
    for j in range(1, length):
        # Transition j is summed if its predecessor was and did not end the episode.
        included = included & ~ends[..., j - 1] & valid[..., j] & (j < horizon)
        total = jnp.where(included, total + power * rewards[..., j], total)
        power = power * gamma
        bootstrap = jnp.where(included, jnp.where(terminal[..., j], 0.0, power), bootstrap)
        steps = steps + included.astype(jnp.int32)
    # Every piece NaN, a start that ends at a termination included (its γ powers never reach the sum).
    total = jnp.where(good_gamma, total, jnp.nan)
    bootstrap = jnp.where(good_gamma, bootstrap, jnp.nan)
    return NStep(reward=total, discount=bootstrap.astype(jnp.float32), steps=steps, n_clipped=n_clipped)


def _check_horizon(n: ArrayLike, length: int) -> None:
    """ValueError naming ``n`` unless it is one horizon (a scalar) that is, if concrete, an integer in
    ``[1, length]``."""
    shape = n.shape if hasattr(n, "shape") else np.shape(n)  # a tracer, an array, or a Python value
    if shape != ():
        raise _validation.FieldError("n", f"must be one horizon (a scalar; vmap for one per run), got shape {shape}.")
    _validation.check_int("n", n, low=1, high=length)


def n_step(
    state: buffer_lib.BufferState,
    indices: ArrayLike,
    n: ArrayLike,
    discount: ArrayLike,
    max_n_step: int,
    fields: tuple[str, str, str] = STORED_FIELDS,
) -> tuple[NStep, jax.Array]:
    """n-step target pieces for the starts at ``indices``, read from the memory at sample time.

    The full target of start ``i`` is ``pieces.reward[i] + pieces.discount[i]
    · V(next_obs at bootstrap_slots[i])``; the start's own observation and
    action are those at ``indices[i]``.

    Args:
        state: the memory (``memory.buffer(state)`` for any kind); its
            storage must be a mapping whose ``fields`` (reward, terminated,
            truncated) are scalars per transition.
        indices: ``int`` slots of the starts, any shape ``S`` (a
            :class:`~jaxreplay.samplers.Sample`'s ``indices``, from any sampler).
        n: horizon, integer in ``[1, max_n_step]``; may be traced (then
            clipped and flagged, module docstring).
        discount: γ in ``[0, 1]``; may be traced (outside it: NaN pieces, module docstring).
        max_n_step: static longest horizon (the window length read per start), at most the
            memory's ``max_capacity``.
        fields: the storage keys of the reward and the two episode-end flags.

    Returns:
        ``(pieces, bootstrap_slots)``: an :class:`NStep` of shape ``S`` and
        ``int32[*S]``, the slot of the last summed transition, whose stored
        next observation is bootstrapped from (the start's own slot where
        ``steps`` is 0). Cost: O(|S| · max_n_step): three gathers of
        ``|S| · max_n_step`` scalars, no observation gathered.

    Raises:
        ValueError: ``max_n_step`` is not a Python int in ``[1, max_capacity]``; ``n`` is not
            a scalar; a concrete ``n``, ``discount`` or index out of range;
            the storage lacks a field or stores it with more than one number
            per transition.
    """
    # A window longer than the memory never holds more transitions, and its loop is unrolled: 4,000 steps on 8
    # slots compiled for 17 s, 10**6 did not finish (a probe).
    max_n_step = _validation.check_static_int("max_n_step", max_n_step, low=1, high=state.max_capacity)
    _check_horizon(n, max_n_step)
    _validation.check_float("discount", discount, low=0.0, high=1.0)
    storage = state.storage
    for name in fields:
        if not isinstance(storage, Mapping) or name not in storage:
            raise ValueError(
                f"n-step returns read the storage field {name!r}: store it with every transition "
                f"(the fields read are {fields})."
            )
        if storage[name].shape != (state.max_capacity,):
            raise ValueError(
                f"storage field {name!r} must have shape (max_capacity,) = ({state.max_capacity},), one number "
                f"per transition, got {storage[name].shape}; for a batch of memories, vmap n_step over them."
            )
    slots, valid = buffer_lib.successors(state, indices, max_n_step)  # (refuses concrete indices off the ring)
    rewards, terminated, truncated = (storage[name][slots] for name in fields)
    pieces = accumulate(rewards, terminated, truncated, valid, n, discount)
    last = jnp.maximum(pieces.steps - 1, 0)
    bootstrap_slots = (jnp.asarray(indices, jnp.int32) + last) % state.max_capacity
    return pieces, bootstrap_slots
