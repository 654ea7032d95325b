"""The LineSearch kernel's CPU-friendly forms give the numbers of the plain ones, bit for bit.

``linear.td_error`` writes Q = θ1 · (x + a) + θ2 out instead of ``features @ θ`` (a length-2 dot that XLA:CPU
hands to a library kernel under vmap) and must keep its two roundings (no FMA); the memory stores packed
``float32[4]`` transitions (``linear.pack``) instead of a dict of four columns.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay.agents import linear


def test_q_keeps_the_two_roundings_of_the_dot_at_a_batch_xla_sends_to_a_library():
    runs = 10_000  # XLA:CPU fuses the vmapped length-2 dot into a library kernel from about here
    rng = np.random.default_rng(0)
    transitions = {name: jnp.asarray(rng.normal(size=runs), jnp.float32) for name in linear.FIELDS}
    theta = jnp.asarray(rng.normal(size=(runs, 2)), jnp.float32).at[:3, 0].set(jnp.nan).at[3:6, 1].set(jnp.inf)
    transitions["position"] = transitions["position"].at[6:9].set(jnp.nan)

    def by_dot(theta, t):  # td_error as it was written: features @ θ
        best_next = theta[0] * t["next_position"] + theta[1] + jnp.abs(theta[0]) * 0.01
        return t["reward"] + 0.0 * best_next - linear.features(t) @ theta

    ours = jax.jit(jax.vmap(lambda th, t: linear.td_error(th, t, 0.0, 0.01)))(theta, transitions)
    reference = jax.jit(jax.vmap(by_dot))(theta, transitions)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(reference))
    # Float64 arithmetic rounded once (an FMA) differs from it in many places: the test can tell them apart.
    x = np.asarray(transitions["position"] + transitions["move"], np.float64)
    fused = (x * np.asarray(theta[:, 0], np.float64) + np.asarray(theta[:, 1], np.float64)).astype(np.float32)
    q = np.asarray(jax.vmap(lambda th, t: linear.features(t) @ th)(theta, transitions))
    assert np.sum((q != fused) & np.isfinite(q)) > 100


def test_pack_lays_out_the_fields_in_order_and_unpack_inverts_it():
    transition = {
        "position": jnp.float32(-5.0),
        "move": jnp.float32(0.01),
        "reward": jnp.float32(0.3),
        "next_position": jnp.float32(-4.99),
    }
    packed = linear.pack(transition)
    assert packed.dtype == jnp.float32 and packed.shape == (4,)
    np.testing.assert_array_equal(np.asarray(packed), np.float32([-5.0, 0.01, 0.3, -4.99]))
    back = linear.unpack(packed[None].repeat(3, 0))
    assert set(back) == set(linear.FIELDS) and back["reward"].shape == (3,)
    np.testing.assert_array_equal(np.asarray(back["next_position"]), np.float32([-4.99] * 3))
    assert linear.unpack(transition) is transition
