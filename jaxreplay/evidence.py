"""Accumulated evidence for a stream of grow/shrink votes: a two-sided CUSUM test, as pure functions.

A resizing rule that acts on every vote (aER: one comparison of two noisy
sums per check) moves its size as a ±k random walk when the votes carry no
signal: after ``T`` votes its spread is ``k √T``. In the DQN study
(docs/study.md) aER's grow share was 0.49 to 0.52 in every game, so its
memory size drifted like that walk. This module decides instead *when the
votes have drifted*: it keeps Page's two-sided CUSUM statistic over the votes
``x = +1`` (grow) or ``-1`` (shrink),

    U ← max(0, U + x - δ),    D ← max(0, D - x - δ),

acts (+1 grow if ``U >= h``, -1 shrink if ``D >= h``) and restarts both at 0
after acting; otherwise it keeps the size (``act = 0``).

Why this test. Page's CUSUM is the optimal detector (Lorden, Moustakides) of
a change in a stream's mean; on ±1 votes with allowance ``δ`` it is the
likelihood-ratio test between a grow share of 1/2 and one of ``p₁`` with
``δ = -(L₊ + L₋) / (L₊ - L₋)``, ``L₊ = ln 2p₁``, ``L₋ = ln 2(1 - p₁)`` (``δ ≈
0.26`` for ``p₁ = 3/4``), the increments scaled so a grow vote adds ``1 - δ``.
What it buys over acting on every vote:

* fair-coin votes (no signal): ``U`` and ``D`` drift *down* by ``δ`` per vote
  and sit near 0; they reach ``h`` only after a number of votes that grows
  exponentially in ``h`` (for ``δ > 0``), so the size barely moves (``h = 4,
  δ = 0.25``: 1.8 resizes expected in 65 votes, where aER makes 65);
* votes with a grow share ``p`` and ``2p - 1 > δ``: ``U`` climbs by at least
  ``2p - 1 - δ`` per vote on average (more near 0, where the max clips shrink
  votes), so the size grows by ``k`` at least every ``≈ (h + 1 - δ) / (2p - 1
  - δ)`` votes (exactly every ``⌈h / (1 - δ)⌉`` when every vote agrees).

The price is a dead band and a delay: grow shares below ``(1 + δ) / 2`` are
treated as noise, and a real lean is followed more slowly (``h = 4, δ =
0.25``: a share of 3/4 moves the size by 0.08 k per vote over 97 votes, aER
by 0.5 k).

``h = 1, δ = 0`` acts on every vote: Algorithm 2, bit for bit. ``δ = 0`` and
``h > 1`` only slows the walk (``U`` and ``D`` are then reflected walks, and
one reaches ``h`` after ``h (h + 1) / 2`` coin votes on average: 3, 10, 36
for ``h = 2, 4, 8``, simulated), which is why the allowance is the part that
tells signal from noise. The state is ``float32[2]`` (``U, D``);
with dyadic settings (``δ = 0.25``, ``h = 4``) every step is exact.

Usage (what :func:`jaxreplay.adaptive.evidence_controller` does with its
``evidence_threshold`` and ``evidence_allowance``)::

    stat = evidence.init()
    stat, act = evidence.update(stat, shrink_vote, threshold=h, allowance=delta)
    # act: +1 grow, -1 shrink, 0 keep
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxreplay import _validation
from jaxreplay._typing import ArrayLike


def init() -> jax.Array:
    """The statistic before any vote: ``float32[2]`` zeros (``U`` for growing, ``D`` for shrinking)."""
    return jnp.zeros((2,), jnp.float32)


THRESHOLD_BOUNDS = _validation.Bounds(False, 1.0)
"""``h``: finite, ``>= 1`` (read by :func:`check`, :func:`valid` and DQN's ``adaptive_evidence_threshold``)."""

ALLOWANCE_BOUNDS = _validation.Bounds(False, 0.0, 1.0, high_inclusive=False)
"""``δ``: finite, in ``[0, 1)`` (read by :func:`check`, :func:`valid` and DQN's ``adaptive_evidence_allowance``)."""


def valid(threshold: ArrayLike, allowance: ArrayLike) -> jax.Array:
    """``bool[]``: ``h`` and ``δ`` within their bounds (a traced setting cannot raise; :func:`check` refuses
    exactly the concrete values this calls invalid)."""
    outside = _validation.outside_bounds
    return ~outside(threshold, THRESHOLD_BOUNDS) & ~outside(allowance, ALLOWANCE_BOUNDS)


def check(threshold: ArrayLike, allowance: ArrayLike) -> None:
    """Refuse a concrete ``threshold`` below 1 or ``allowance`` outside ``[0, 1)`` (``ValueError`` naming it);
    each may be a scalar or an array of any shape (every entry is checked).

    An allowance of 1 or more would never let a grow vote raise ``U``: the
    rule could never act.
    """
    _validation.check_bounds("evidence_threshold", threshold, THRESHOLD_BOUNDS)
    _validation.check_bounds("evidence_allowance", allowance, ALLOWANCE_BOUNDS)  # (0.99999999 runs as 1.0)


def update(
    statistic: ArrayLike, shrink_vote: ArrayLike, threshold: ArrayLike, allowance: ArrayLike = 0.0
) -> tuple[jax.Array, jax.Array]:
    """One vote added: ``(statistic float32[2], act int32[])``; pure, jit- and vmap-able.

    Args:
        statistic: ``float32[2]``, ``(U, D)`` from :func:`init` or a previous update.
        shrink_vote: ``bool[]``; the vote asks to shrink (``x = -1``), else to grow (``x = +1``).
        threshold: ``h`` (>= 1; may be traced, :func:`check` refuses a concrete bad one).
        allowance: ``δ`` in ``[0, 1)`` (may be traced).

    Returns:
        The new ``(U, D)`` (both 0 after acting) and ``act``: +1 when ``U``
        reached ``h`` (grow), -1 when ``D`` did (shrink), 0 otherwise. Only
        one side can cross at a vote (a vote raises one side and lowers the
        other). With a traced setting :func:`valid` refuses, ``act`` is 0 and
        the statistic NaN (a threshold of 0 answered every vote with a grow).

    Raises:
        ValueError: a concrete setting :func:`check` refuses (naming it), before anything is traced.
    """
    check(threshold, allowance)
    stat = jnp.asarray(statistic, jnp.float32)
    x = jnp.where(shrink_vote, -1.0, 1.0).astype(jnp.float32)
    delta = jnp.asarray(allowance, jnp.float32)
    up = jnp.maximum(stat[..., 0] + x - delta, 0.0)
    down = jnp.maximum(stat[..., 1] - x - delta, 0.0)
    h = jnp.asarray(threshold, jnp.float32)
    ok = valid(threshold, allowance)
    act = jnp.where(ok & (up >= h), 1, jnp.where(ok & (down >= h), -1, 0)).astype(jnp.int32)
    acted = act != 0
    new = jnp.stack([jnp.where(acted, 0.0, up), jnp.where(acted, 0.0, down)], axis=-1)
    return jnp.where(ok[..., None], new, jnp.nan).astype(jnp.float32), act
