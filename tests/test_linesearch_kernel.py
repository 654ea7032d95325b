"""The LineSearch memory's packed transitions: ``linear.pack`` lays the four fields side by side, ``unpack`` inverts it.

The memory stores ``float32[4]`` rows instead of a dict of four columns (one random row per draw, not four).
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay.agents import linear


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
