"""benchmarks/determinism.py: the GPU check that a sweep's runs do not depend on the process computing them."""

import json
import pathlib

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
    determinism.compile_as("engine, cuBLAS dots")
    assert experiments.get("dqn").compiler_options_on("gpu") == {"xla_gpu_autotune_level": 0,
                                                                 "xla_gpu_enable_triton_gemm": False}
    determinism.compile_as("engine")  # a variant's options replace an earlier call's, they do not add to them
    assert experiments.get("dqn").compiler_options_on("gpu") == {"xla_gpu_autotune_level": 0}
    assert experiments.get("dqn").compiler_options_on("cpu") == dict(experiments.COMPILER_OPTIONS_CPU)


@pytest.mark.slow
def test_two_processes_on_the_cpu_agree_to_the_bit(tmp_path):
    assert determinism.main([str(tmp_path), "--seeds", "1", "--steps", "400"]) == 0
    text = (tmp_path / "determinism.md").read_text()
    for variant in ("engine", "autotuned", "engine, cuBLAS dots"):
        assert f"| {variant} | 2 of 2 |" in text
    assert determinism.main([str(tmp_path), "--seeds", "1", "--steps", "400"]) == 0  # computed again, not resumed
    for folder in ("engine-1", "engine-2", "autotuned-1", "autotuned-2"):
        summary = json.loads((tmp_path / folder / "summary.json").read_text())
        assert (summary["runs_computed"], summary["runs_resumed"]) == (2, 0), folder


def test_a_variant_whose_process_fails_is_a_row_saying_so_and_the_others_still_run(monkeypatch, tmp_path):
    """A flag the GPU machine's XLA rejects (the cuBLAS variant's) made the whole check raise after minutes."""
    import subprocess
    import types

    calls = []

    def fake_run(command):
        calls.append(command[command.index("--one") + 1])
        folder = pathlib.Path(command[3])
        if calls[-1] == "engine":  # a computed sweep: two identical runs
            _results(folder, np.arange(6, dtype=np.float32).reshape(2, 3))
        return types.SimpleNamespace(returncode=0 if calls[-1] == "engine" else 3)

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert determinism.main([str(tmp_path), "--variant", "autotuned", "--variant", "engine"]) == 0
    assert calls == ["autotuned", "engine", "engine"]  # a failed first process: its second is not started
    text = (tmp_path / "determinism.md").read_text()
    assert "| autotuned | failed (exit 3: the child's message is above) | – |" in text
    assert "| engine | 6 of 6 |" in text
