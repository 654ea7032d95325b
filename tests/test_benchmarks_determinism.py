"""benchmarks/determinism.py: the GPU check that a sweep's runs do not depend on the process computing them."""

import json

import numpy as np
import pytest
import xarray as xr

from benchmarks import determinism
from jaxreplay import experiments
from jaxreplay.experiments import dqn


def _results(folder, returns):
    folder.mkdir()
    ds = xr.Dataset(
        {
            "final_return": (("memory_size", "seed"), returns),
            "returns": (("memory_size", "seed", "segment"), np.repeat(returns[..., None], 3, axis=-1)),
        },
        coords={"memory_size": [1000, 10000], "seed": [0, 1, 2]},
    )
    ds.to_netcdf(folder / "results.nc")


def test_agreement_counts_the_runs_identical_in_every_summary(tmp_path):
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    base[1, 2] = np.nan  # a diverged run: NaN in both is agreement
    other = base.copy()
    other[0, 1] = np.nextafter(other[0, 1], np.float32(10))  # one run off by its last bit
    _results(tmp_path / "a", base)
    _results(tmp_path / "b", other)
    _results(tmp_path / "c", base.copy())
    assert determinism.agreement(tmp_path / "a", tmp_path / "b") == (5, 6)
    assert determinism.agreement(tmp_path / "a", tmp_path / "c") == (6, 6)


def test_the_autotuned_variant_compiles_dqn_with_autotuning_on_a_gpu_only(monkeypatch):
    monkeypatch.setattr(dqn, "EXPERIMENT", dqn.EXPERIMENT)  # restored after the test
    determinism.compile_as("engine")
    assert experiments.get("dqn").compiler_options_on("gpu") == {"xla_gpu_autotune_level": 0}
    determinism.compile_as("autotuned")
    assert experiments.get("dqn").compiler_options_on("gpu") == {"xla_gpu_autotune_level": 4}
    assert experiments.get("dqn").compiler_options_on("cpu") == dict(experiments.COMPILER_OPTIONS_CPU)


@pytest.mark.slow
def test_two_processes_on_the_cpu_agree_to_the_bit(tmp_path):
    assert determinism.main([str(tmp_path), "--seeds", "1", "--steps", "400"]) == 0
    text = (tmp_path / "determinism.md").read_text()
    assert "| engine | 2 of 2 |" in text and "| autotuned | 2 of 2 |" in text
    assert determinism.main([str(tmp_path), "--seeds", "1", "--steps", "400"]) == 0  # computed again, not resumed
    for folder in ("engine-1", "engine-2", "autotuned-1", "autotuned-2"):
        summary = json.loads((tmp_path / folder / "summary.json").read_text())
        assert (summary["runs_computed"], summary["runs_resumed"]) == (2, 0), folder
