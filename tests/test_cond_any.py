"""``_cond.cond_any``: lax.cond's results, and under vmap a branch, not a select of both."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay import _cond


def _branches(scale):
    def true_fn(o):
        return {"x": o["x"] * scale + 1.0, "n": o["n"] + 1}

    def false_fn(o):
        return {"x": o["x"] - scale, "n": o["n"]}

    return true_fn, false_fn


def _both(pred, scale, operand):
    true_fn, false_fn = _branches(scale)
    return _cond.cond_any(pred, true_fn, false_fn, operand), jax.lax.cond(pred, true_fn, false_fn, operand)


@pytest.mark.parametrize("preds", [[True, False, True, False, False], [False] * 5, [True] * 5])
def test_under_vmap_each_run_gets_the_branch_lax_cond_gives_it(preds):
    # The branches close over a vmapped value (scale), as aER's check closes over θ.
    operand = {"x": jnp.arange(5.0), "n": jnp.arange(5, dtype=jnp.int32)}
    scale = jnp.array([2.0, 3.0, 0.5, -1.0, 4.0])
    ours, plain = jax.vmap(_both)(jnp.array(preds), scale, operand)
    for name in ("x", "n"):
        np.testing.assert_array_equal(ours[name], plain[name])
    expected = np.where(preds, np.arange(5.0) * np.asarray(scale) + 1.0, np.arange(5.0) - np.asarray(scale))
    np.testing.assert_array_equal(ours["x"], expected)


def test_unbatched_predicate_or_operand_and_no_vmap_at_all():
    operand = {"x": jnp.float32(3.0), "n": jnp.int32(1)}
    scale = jnp.array([2.0, 5.0])
    ours, plain = jax.vmap(_both, in_axes=(None, 0, None))(jnp.bool_(True), scale, operand)
    np.testing.assert_array_equal(ours["x"], [7.0, 16.0])
    np.testing.assert_array_equal(ours["x"], plain["x"])
    ours, plain = _both(jnp.bool_(False), jnp.float32(2.0), operand)
    assert float(ours["x"]) == float(plain["x"]) == 1.0 and int(ours["n"]) == 1


def test_vmapped_it_is_a_branch_on_any_run_where_lax_cond_is_a_select():
    operand = {"x": jnp.arange(4.0), "n": jnp.zeros(4, jnp.int32)}
    preds, scale = jnp.array([True, False, False, False]), jnp.ones(4)

    def ours(p, s, o):
        return _cond.cond_any(p, *_branches(s), o)

    def plain(p, s, o):
        return jax.lax.cond(p, *_branches(s), o)

    ours_jaxpr = str(jax.make_jaxpr(jax.vmap(ours))(preds, scale, operand))
    plain_jaxpr = str(jax.make_jaxpr(jax.vmap(plain))(preds, scale, operand))
    assert "cond[" in ours_jaxpr and "reduce_or" in ours_jaxpr  # a branch on any(pred)
    assert "cond[" not in plain_jaxpr and "select_n" in plain_jaxpr  # both branches, every call


def test_a_vmapped_aer_check_equals_each_run_checked_alone():
    from jaxreplay import adaptive, buffer

    capacity = 16
    example = {"td": jnp.float32(0)}
    aer = adaptive.controller(interval=jnp.int32(4), num_old=4, max_num_old=8)

    def one(key, sizes, values, step):
        memory = buffer.init(example, capacity, sizes)
        for v in values:
            memory = buffer.add(memory, {"td": v})
        state = aer.init()
        return aer.update(key, state, memory, lambda t: t["td"], step)

    keys = jax.random.split(jax.random.key(0), 3)
    sizes = jnp.array([8, 16, 12], jnp.int32)
    values = jax.random.normal(jax.random.key(1), (3, 10))  # only the first memory is full
    for step in (8, 9):  # 8: the full memory checks (interval 4), the others do not; 9: none does
        batched = jax.vmap(one, in_axes=(0, 0, 0, None))(keys, sizes, values, step)
        for r in range(3):
            alone = one(keys[r], sizes[r], values[r], step)
            for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(batched)):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[r])
        assert np.asarray(batched[0].diagnostics.num_checks).tolist() == ([1, 0, 0] if step == 8 else [0, 0, 0])
