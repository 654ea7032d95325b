"""``lax.cond`` that stays a branch under ``vmap`` when no run takes it.

Under ``vmap`` with a batched predicate, ``lax.cond`` becomes a ``select``
that computes both branches for every run at every call. For a branch that
is rarely taken and costly (aER's check: the TD errors of up to
``max_num_old`` transitions, every ``interval`` steps) that turns an
occasional cost into a per-step one. :func:`cond_any` batches differently:
the vmapped call is a ``lax.cond`` on "does any run take the true branch",
whose true side computes both branches for all runs and selects per run
(what ``select`` would have computed, only when needed) and whose false side
computes the false branch alone. Each run's result is the one
``lax.cond`` gives it.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap


def _explicit(fn: Callable[[Any], Any], operand: Any) -> tuple[Callable[[Any, list], Any], list]:
    """``fn`` as ``(converted, consts)`` with ``converted(operand, consts) == fn(operand)``: the values
    ``fn`` closes over (the vmapped ones included) become the explicit argument ``consts``, as
    ``custom_vmap`` needs (its function may not close over batched values)."""
    closed, shape = jax.make_jaxpr(fn, return_shape=True)(operand)
    out_tree = jax.tree.structure(shape)

    def converted(operand: Any, consts: list) -> Any:
        return jax.tree.unflatten(out_tree, jax.core.eval_jaxpr(closed.jaxpr, consts, *jax.tree.leaves(operand)))

    return converted, list(closed.consts)


def cond_any(pred: jax.Array, true_fn: Callable[[Any], Any], false_fn: Callable[[Any], Any], operand: Any) -> Any:
    """``lax.cond(pred, true_fn, false_fn, operand)``; under ``vmap``, ``true_fn`` runs only when some run's
    ``pred`` is true (then for all runs, each keeping its own branch's result).

    Both functions take ``operand`` and return pytrees of the same structure, shapes and dtypes (as for
    ``lax.cond``); they may close over traced values. Not differentiable (nothing here needs it).
    """
    t_fn, t_consts = _explicit(true_fn, operand)
    f_fn, f_consts = _explicit(false_fn, operand)

    @custom_vmap
    def cond(pred, t_consts, f_consts, operand):
        return lax.cond(pred, lambda o: t_fn(o, t_consts), lambda o: f_fn(o, f_consts), operand)

    @cond.def_vmap
    def batched(axis_size, in_batched, pred, t_consts, f_consts, operand):
        pred_b, t_b, f_b, operand_b = in_batched

        def axes(batched):
            return jax.tree.map(lambda b: 0 if b else None, batched)

        t_all = jax.vmap(t_fn, in_axes=(axes(operand_b), axes(t_b)), axis_size=axis_size)
        f_all = jax.vmap(f_fn, in_axes=(axes(operand_b), axes(f_b)), axis_size=axis_size)
        pred = pred if pred_b else jnp.broadcast_to(pred, (axis_size,))

        def some(operand):
            t, f = t_all(operand, t_consts), f_all(operand, f_consts)
            return jax.tree.map(lambda a, b: jnp.where(pred.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), t, f)

        out = lax.cond(jnp.any(pred), some, lambda o: f_all(o, f_consts), operand)
        return out, jax.tree.map(lambda _: True, out)

    return cond(pred, t_consts, f_consts, operand)
