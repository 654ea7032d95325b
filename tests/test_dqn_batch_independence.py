"""A DQN run's results do not depend on the chunk the engine computed it in.

Without the experiment's CPU compiler options (YNNPACK fusions off,
``jaxreplay.experiments.COMPILER_OPTIONS_CPU``) XLA:CPU handed the reductions
of a 64-run chunk to YNNPACK, which rounds them otherwise: the mean TD loss
and aER's ``adaptive_change_sum`` then differed from the same runs computed
8 at a time (measured on the 2-core AMD EPYC where CI runs: 71 of 320 TD
losses and 69 of 80 change sums between chunks of 80 and 8; chunks of 64 and
80 agree with each other). Weights, returns and capacities agreed either way.
"""

import jax
import numpy as np
import pytest

from jaxreplay.engine import sweep as sw
from jaxreplay.experiments import dqn

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's choice of kernels")

SWEEP = sw.Sweep(
    "dqn",
    seeds=16,
    setup={
        "env_params": {"max_steps_in_episode": 30},
        "total_steps": 200,
        "steps_per_segment": 100,
        "hidden_sizes": [8],
        "max_capacity": 64,
        "batch_size": 8,
        "adaptive": True,
    },
    fixed={"learning_starts": 20, "target_period": 30, "epsilon_decay_steps": 150, "adaptive_num_old": 8},
    grid={"memory_size": [16, 32, 48, 64]},
)


def test_an_aer_sweep_gives_the_same_bits_in_chunks_of_64_and_of_8():
    assert dqn.EXPERIMENT.compiler_options_on("cpu") == {"xla_cpu_experimental_ynn_fusion_type": ""}
    large, small = (sw.run(SWEEP, None, chunk_size=c, progress=False).dataset for c in (64, 8))
    for name in large.data_vars:
        np.testing.assert_array_equal(np.asarray(large[name]), np.asarray(small[name]), err_msg=name)
    losses = np.asarray(large["td_loss"])
    assert np.isfinite(losses[:, :, -1]).all() and float(np.std(losses[..., -1])) > 0
    assert float(np.abs(np.asarray(large["adaptive_change_sum"])).sum()) > 0  # aER compared something
