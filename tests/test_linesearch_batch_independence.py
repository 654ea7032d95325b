"""A LineSearch run's result does not depend on the chunk it was computed in.

From some batch size on, XLA:CPU hands a program's reductions to YNNPACK, which
rounds them differently from XLA's own loops: without the experiment's
compiler options (``linesearch.COMPILER_OPTIONS_CPU``) the uniform sweep below
differs in 4 of its 4,096 runs between chunks of 1,024 and 4,096, and the
prioritized one in 1 of its 80 runs between chunks of 8 and 80 (measured on
the 2-core AMD EPYC where CI runs; the shapes are the smallest found that
show it).
"""

import json

import jax
import numpy as np
import pytest

from jaxreplay.engine import plan as plan_lib
from jaxreplay.engine import sweep as sw
from jaxreplay.experiments import linesearch as ls

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's choice of kernels")


def _results_at(sweep, chunk_sizes):
    return [sw.run(sweep, None, chunk_size=c, progress=False).dataset for c in chunk_sizes]


def _assert_same_runs(a, b):
    for name in ("dtheta", "final_metric", "capacity"):
        np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), err_msg=name)


def test_the_engine_compiles_linesearch_on_the_cpu_without_ynnpack():
    setup = ls.Setup(steps=5, max_capacity=64, max_batch_size=5)
    runs = 4096  # the smallest power of two at which ER's TD update goes to YNNPACK without the options
    hparams = ls.broadcast_hyperparameters(ls.Hyperparameters(memory_size=64, discount=0.5), runs)
    keys = jax.random.split(jax.random.key(0), runs)
    lowered = jax.jit(ls.run_batch, static_argnums=2).lower(keys, hparams, setup)
    assert "__ynn_fusion" not in lowered.compile(compiler_options=ls.COMPILER_OPTIONS_CPU).as_text()
    assert ls.EXPERIMENT.compiler_options_on("cpu") == ls.COMPILER_OPTIONS_CPU  # what the engine compiles with
    assert ls.EXPERIMENT.compiler_options_on("gpu") == {"xla_gpu_autotune_level": 0}  # no XLA:CPU option there


def test_the_gpu_options_are_options_this_xla_knows():
    """On a GPU both experiments compile without autotuning (another process picked other kernels); XLA
    refuses an option it does not know ("No such compile option"), so a renamed flag fails here, on the CPU,
    not on the next GPU machine."""
    from jaxreplay.experiments import dqn

    options = ls.EXPERIMENT.compiler_options_on("gpu")
    assert options == dqn.EXPERIMENT.compiler_options_on("gpu") == {"xla_gpu_autotune_level": 0}
    compiled = jax.jit(lambda x: 2 * x).lower(np.ones(3, np.float32)).compile(compiler_options=options)
    np.testing.assert_array_equal(compiled(np.ones(3, np.float32)), [2, 2, 2])
    with pytest.raises(Exception, match="No such compile option"):
        jax.jit(lambda x: 2 * x).lower(np.ones(3, np.float32)).compile(compiler_options={"xla_gpu_autotune_lvl": 0})


def test_uniform_runs_are_identical_in_chunks_below_and_above_the_ynnpack_threshold():
    sweep = sw.Sweep(
        "linesearch",
        seeds=1024,
        setup={"steps": 40, "max_capacity": 64, "max_batch_size": 5},
        fixed={"batch_size": 5, "discount": 0.5, "step_size": 0.01},
        grid={"memory_size": [8, 16, 32, 64]},
    )
    small, large = _results_at(sweep, (1024, 4096))
    _assert_same_runs(small, large)
    assert np.isfinite(np.asarray(large["final_metric"])).all() and float(np.asarray(large["final_metric"]).std()) > 0


def test_prioritized_runs_are_identical_in_chunks_of_8_and_80():  # (4 s on 2 cores: no longer marked slow)
    sweep = sw.Sweep(
        "linesearch",
        seeds=40,
        setup={"steps": 500, "max_capacity": 256, "max_batch_size": 4, "sampler": "prioritized"},
        fixed={"batch_size": 4, "step_size": 0.01},
        grid={"memory_size": [16, 256]},
    )
    _assert_same_runs(*_results_at(sweep, (8, 80)))


def test_the_options_are_recorded_and_a_folder_computed_without_them_is_refused(tmp_path):
    sweep = sw.Sweep(
        "linesearch",
        seeds=2,
        setup={"steps": 3, "max_capacity": 4, "max_batch_size": 1},
        fixed={"memory_size": 4, "batch_size": 1},
    )
    sw.run(sweep, tmp_path / "s", progress=False)
    batch = plan_lib.Batch.from_dict(json.loads((tmp_path / "s" / "sweep.json").read_text())["batch"])
    assert batch.compiler_options == "xla_cpu_experimental_ynn_fusion_type="
    assert plan_lib.Batch.from_dict(batch.to_dict()) == batch
    older = batch._replace(compiler_options="")
    assert "compiler_options" not in older.to_dict()  # a record of an older jaxreplay reads back as this
    with pytest.raises(ValueError, match=r"compiler options 'xla_cpu_experimental_ynn_fusion_type='.*new output"):
        plan_lib.check_batch(older, batch, None, 1, tmp_path / "s")
