"""The sweep engine: labels, determinism (chunks, devices, processes, kill -9), compile count, memory, config errors."""

from __future__ import annotations

import json
import shutil
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

from jaxreplay.engine import batch as batch_lib
from jaxreplay.engine import declaration, resources, store
from jaxreplay.engine import sweep as sw
from jaxreplay.experiments import linesearch as ls

REPO = pathlib.Path(__file__).resolve().parents[1]

# Small but not trivial: aER (data-dependent resizing) with sums over old transitions.
AER_TOML = """
experiment = "linesearch"
seeds = 3
seed = 7
[setup]
steps = 60
max_capacity = 40
max_batch_size = 4
sampler = "adaptive"
max_num_old = 8
[fixed]
step_size = 0.05
adaptive_interval = 5
[grid]
memory_size = [4, 10, 40]
batch_size = [1, 4]
adaptive_num_old = [2, 8]
"""


def _write(tmp_path, text, name="sweep.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _same(a, b):
    assert set(a.data_vars) == set(b.data_vars)
    for name in a.data_vars:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


@pytest.fixture(scope="module")
def aer_reference(tmp_path_factory):
    """The aER sweep in this process: 1 device, one chunk, in memory."""
    tmp = tmp_path_factory.mktemp("ref")
    sweep = sw.Sweep.from_toml(_write(tmp, AER_TOML))
    return sweep, sw.run(sweep, None, progress=False)


# ----------------------------------------------------------------------------
# Labels and values
# ----------------------------------------------------------------------------


def test_results_are_labeled_runs_of_the_experiment(aer_reference):
    sweep, result = aer_reference
    ds = result.dataset
    assert dict(ds.sizes) == {"memory_size": 3, "batch_size": 2, "adaptive_num_old": 2, "seed": 3, "step": 60,
                              "weight": 2}
    assert list(ds.memory_size.values) == [4, 10, 40] and list(ds.step.values[[0, -1]]) == [1, 60]
    setup = sweep.make_setup()
    run = jax.jit(ls.run, static_argnums=2)
    for N, m, n_old, seed in [(4, 1, 2, 0), (10, 4, 8, 2), (40, 4, 2, 1)]:
        key = jax.random.fold_in(jax.random.key(7), seed)
        hp = ls.Hyperparameters(memory_size=N, batch_size=m, step_size=np.float32(0.05), adaptive_interval=5,
                                adaptive_num_old=n_old)
        direct = run(key, hp, setup)
        cell = ds.sel(memory_size=N, batch_size=m, adaptive_num_old=n_old, seed=seed)
        np.testing.assert_array_equal(cell.dtheta.values, np.asarray(direct.dtheta))
        np.testing.assert_array_equal(cell.capacity.values, np.asarray(direct.memory_size))
        assert cell.final_metric.item() == float(direct.final_metric)
    # aER really resized (the grid is not a no-op) and nothing diverged.
    assert ds.capacity.min() < 40 and ds.capacity.sel(memory_size=4).max() > 4
    assert not ds.diverged.any() and result.stats.diverged == 0
    config = json.loads(ds.attrs["config"])
    assert config["grid"]["memory_size"] == [4, 10, 40] and config["seed"] == 7
    assert json.loads(ds.attrs["versions"])["jax"] == jax.__version__


def test_points_sweep_and_chunking_give_identical_runs(aer_reference):
    sweep, result = aer_reference
    points = [{"memory_size": 10, "batch_size": 4, "adaptive_num_old": 8},
              {"memory_size": 40, "batch_size": 1, "adaptive_num_old": 2}]
    psweep = sw.Sweep("linesearch", seeds=3, seed=7, setup=sweep.setup, fixed=sweep.fixed, points=points)
    pres = sw.run(psweep, None, chunk_size=2, progress=False)  # 3 chunks, the last one padded
    assert pres.stats.chunks == 3 and pres.stats.compilations == 1
    ds = pres.dataset
    assert list(ds.memory_size.values) == [10, 40] and ds.memory_size.dims == ("config",)
    for c, p in enumerate(points):
        np.testing.assert_array_equal(ds.dtheta.isel(config=c).values, result.dataset.dtheta.sel(**p).values)


def test_divergence_is_flagged_not_fatal():
    sweep = sw.Sweep("linesearch", seeds=2, setup={"steps": 200, "max_capacity": 50, "max_batch_size": 5},
                     fixed={"batch_size": 5, "memory_size": 50}, grid={"step_size": [0.01, 50.0]})
    result = sw.run(sweep, None, progress=False)
    diverged = result.dataset.diverged.values
    np.testing.assert_array_equal(diverged, [[False, False], [True, True]])
    assert result.stats.diverged == 2
    assert np.isfinite(result.dataset.final_metric.sel(step_size=0.01)).all()


# ----------------------------------------------------------------------------
# Compilation and memory
# ----------------------------------------------------------------------------


from compile_events import COMPILE_EVENTS as _LOWERINGS  # noqa: E402


def test_one_compilation_for_any_number_of_memory_sizes_and_none_when_run_again():
    setup = {"steps": 20, "max_capacity": 64, "max_batch_size": 3}
    sw.clear_program_cache()
    for num_sizes, compilations in ((1, 1), (50, 0)):  # the second grid reuses the first one's program
        sweep = sw.Sweep("linesearch", seeds=16, setup=setup, fixed={"batch_size": 2},
                         grid={"memory_size": list(range(1, num_sizes + 1))})
        mark = _LOWERINGS.lowerings
        result = sw.run(sweep, None, chunk_size=16, progress=False)
        assert result.stats.compilations == compilations
        assert _LOWERINGS.lowerings - mark == compilations
        assert result.stats.chunks == num_sizes  # chunks of 16 runs = one memory size × 16 seeds
        assert result.dataset.capacity.isel(step=-1, seed=0).values.tolist() == list(range(1, num_sizes + 1))
    # A different chunk shape is a new signature of the same programs; another setup, new programs.
    mark = _LOWERINGS.lowerings
    assert sw.run(sweep, None, chunk_size=8, progress=False).stats.compilations == 1
    other = sw.Sweep("linesearch", seeds=2, setup={**setup, "steps": 21}, fixed={"batch_size": 2, "memory_size": 8})
    assert sw.run(other, None, chunk_size=8, progress=False).stats.compilations == 1
    assert _LOWERINGS.lowerings - mark == 2


@pytest.mark.parametrize("setup", [
    {"steps": 400, "max_capacity": 2000, "max_batch_size": 20, "sampler": "uniform"},
    {"steps": 100, "max_capacity": 500, "max_batch_size": 4, "sampler": "prioritized"},
    {"steps": 200, "max_capacity": 1000, "max_batch_size": 10, "sampler": "adaptive", "max_num_old": 50},
    # A huge minibatch: its temporaries, not the state, set the memory (once ignored: estimate 0.0002x).
    {"steps": 20, "max_capacity": 100, "max_batch_size": 10**6, "sampler": "uniform"},
])
def test_memory_estimate_within_factor_two_of_compiled_program(setup):
    sweep = sw.Sweep("linesearch", seeds=32, setup=setup, fixed={"batch_size": 4})
    estimate = sw.estimate_bytes_per_run(sweep)
    programs = sw._Programs(sweep, jax.local_devices())
    hparams = jax.device_put(sweep.hyperparameters(np.arange(32)), programs.batched)
    compiled = programs._first.lower(np.uint32(0), np.zeros(32, np.uint32), hparams).compile()
    m = compiled.memory_analysis()
    measured = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes) / 32
    assert 0.5 <= estimate / measured <= 2.0, (estimate, measured)


def test_impossible_sweep_is_refused_before_anything_is_compiled(tmp_path):
    sweep = sw.Sweep("linesearch", seeds=4, setup={"steps": 10, "max_capacity": 100_000, "max_batch_size": 2},
                     fixed={"batch_size": 1})
    per_run = sw.estimate_bytes_per_run(sweep)
    assert per_run > 100_000 * 16  # four float32 fields per slot
    mark = _LOWERINGS.lowerings
    with pytest.raises(MemoryError, match=r"one run needs about .*MiB.*budget is"):
        sw.run(sweep, tmp_path / "out", memory_budget=per_run // 2, progress=False)
    assert _LOWERINGS.lowerings == mark
    assert not list((tmp_path / "out" / "chunks").glob("*.npz"))
    # A budget of a few runs gives chunks of that many runs.
    result = sw.run(sweep, None, memory_budget=3 * per_run, progress=False)
    assert result.stats.chunk_size == 3 and result.stats.chunks == 2


def test_host_memory_is_checked_before_anything_is_written_or_compiled(tmp_path, monkeypatch):
    sweep = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))
    per_run = sw.estimate_result_bytes_per_run(sweep)
    # dtheta, capacity, final_metric, diverged, invalid_hyperparameters, run index
    assert per_run == 20 * 2 * 4 + 20 * 4 + 4 + 1 + 1 + 8
    monkeypatch.setattr(resources, "host_memory_bytes", lambda: 8 * per_run)  # the results alone need 8 runs' worth
    mark = _LOWERINGS.lowerings
    with pytest.raises(MemoryError, match=r"results need about .* of host memory \(8 runs × 254 B of results "
                                          r"each = 2.0 KiB assembled.*but only 2.0 KiB is available"):
        sw.run(sweep, tmp_path / "out", memory_budget=10**6, progress=False)
    assert _LOWERINGS.lowerings == mark and not (tmp_path / "out").exists()


def test_disk_is_checked_before_anything_is_written_or_compiled(tmp_path, monkeypatch, capsys):
    config = _write(tmp_path, TINY_TOML)
    per_run = sw.estimate_result_bytes_per_run(sw.Sweep.from_toml(config))
    monkeypatch.setattr(resources, "free_disk_bytes", lambda path: 10 * per_run)
    mark = _LOWERINGS.lowerings
    assert _cli("sweep", config, "--out", tmp_path / "out", "--quiet") == 2
    err = capsys.readouterr().err
    assert f"the sweep needs about 4.0 KiB of disk in {tmp_path / 'out'} (2.0 KiB of chunk files for the 8 runs " \
           "still to compute, 2.0 KiB for results.nc), but only 2.5 KiB is free there" in err, err
    assert _LOWERINGS.lowerings == mark
    assert not (tmp_path / "out" / "sweep.json").exists() and not list((tmp_path / "out").rglob("*.npz"))


def test_a_billion_seeds_is_refused_by_the_cli_without_allocating_them(capsys):
    import resource

    from jaxreplay import cli

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert cli.main(["linesearch", "--steps", "200", "--seeds", "1000000000"]) == 2
    err = capsys.readouterr().err
    assert "1000000000 runs × 2.4 KiB of results each = 2248.2 GiB assembled" in err and "is available" in err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 2**20  # KiB: under 1 GiB more at peak


def _peak_rss_during(fn):
    """(result of fn(), bytes the resident set grew at its peak), from /proc/self (Linux)."""
    import gc

    def status(field):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))

    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM (the peak) to the current resident set
    base = status("VmRSS")
    out = fn()
    return out, status("VmHWM") - base


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux /proc/self/clear_refs")
def test_results_are_assembled_one_chunk_at_a_time_and_written_streaming(tmp_path):
    import xarray as xr

    # ~29 MiB of results in 8 chunk files: big enough that copies of them dominate the noise.
    sweep = sw.Sweep("linesearch", seeds=16, setup={"steps": 40000, "max_capacity": 20, "max_batch_size": 2},
                     fixed={"step_size": 0.05}, grid={"memory_size": [5, 20], "batch_size": [1, 2]})
    out = tmp_path / "out"
    first = sw.run(sweep, out, chunk_size=8, progress=False)
    total = sum(v.nbytes for v in first.dataset.data_vars.values())
    assert sweep.num_runs * sw.estimate_result_bytes_per_run(sweep) == total + 8 * sweep.num_runs
    assert first.stats.result_bytes_per_run == sw.estimate_result_bytes_per_run(sweep)
    # results.nc is exactly what xarray's own SciPy writer gives, without its copies.
    reference = tmp_path / "reference.nc"
    first.dataset.to_netcdf(reference, engine="scipy")
    assert (out / "results.nc").read_bytes() == reference.read_bytes()
    del first
    # A resume computes nothing: it reads the chunks back, assembles and writes results.nc.
    again, grew = _peak_rss_during(lambda: sw.run(sweep, out, chunk_size=8, progress=False))
    assert again.stats.runs_computed == 0
    # One copy of the results (what run returns) plus one chunk and small slices; xarray's
    # writer alone adds 1.7-2.6 copies, and holding every chunk as well one more.
    assert grew < 1.6 * total, (grew / total)
    _same(again.dataset, xr.open_dataset(reference, engine="scipy").load())


def test_a_huge_minibatch_is_refused_by_memory_before_compiling(capsys, monkeypatch):
    # --batch-size 10^8 used to start 16 runs of ~3 GiB of step temporaries each and hang.
    from jaxreplay import cli

    monkeypatch.setattr(resources, "host_memory_bytes", lambda: 4 << 30)  # a 4 GiB host: a 2 GiB CPU budget
    mark = _LOWERINGS.lowerings
    assert cli.main(["linesearch", "--steps", "200", "--batch-size", "100000000"]) == 2
    err = capsys.readouterr().err
    assert "one run needs about 4.1 GiB of device memory" in err and "budget is 2.0 GiB" in err, err
    assert "A step's temporaries dominate (about 4.1 GiB): lower the minibatch size" in err
    assert _LOWERINGS.lowerings == mark
    # DQN: a minibatch of 10^5 (activations 10^5 x 64 float32) is counted too.
    small = sw.estimate_bytes_per_run(sw.Sweep("dqn", setup={"batch_size": 50}))
    huge = sw.estimate_bytes_per_run(sw.Sweep("dqn", setup={"batch_size": 100_000}))
    assert huge - small >= sw.TEMPORARY_ARRAYS * (100_000 - 50) * 64 * 4


# ----------------------------------------------------------------------------
# Persistence and resume
# ----------------------------------------------------------------------------


def test_saved_results_round_trip_and_resume_computes_nothing(tmp_path, aer_reference):
    sweep, result = aer_reference
    first = sw.run(sweep, tmp_path / "out", chunk_size=5, progress=False)
    _same(first.dataset, result.dataset)
    loaded = sw.load(tmp_path / "out")
    _same(loaded, result.dataset)
    # The coordinates' types too (the returned grid was int64, the loaded int32: NetCDF-3 has no int64; the
    # weight names were NumPy strings returned, Python objects loaded).
    assert {k: first.dataset[k].dtype for k in first.dataset.coords} == {k: loaded[k].dtype for k in loaded.coords}
    assert loaded.weight.dtype == np.dtype("<U6") and first.dataset.identical(loaded)
    manifest = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert manifest["fingerprint"] == sweep.fingerprint() and manifest["versions"]["jax"] == jax.__version__
    again = sw.run(sweep, tmp_path / "out", chunk_size=5, progress=False)
    assert again.stats.runs_computed == 0 and again.stats.runs_resumed == sweep.num_runs
    _same(again.dataset, result.dataset)


def test_a_changed_config_is_refused_in_the_same_directory(tmp_path, aer_reference):
    sweep, _ = aer_reference
    small = sw.Sweep("linesearch", seeds=1, setup={"steps": 20, "max_capacity": 10, "max_batch_size": 2},
                     fixed={"batch_size": 1, "memory_size": 10})
    sw.run(small, tmp_path / "out", progress=False)
    changed = sw.Sweep("linesearch", seeds=2, setup=small.setup, fixed=small.fixed)
    with pytest.raises(ValueError, match=r"different sweep \(differs in: seeds\)"):
        sw.run(changed, tmp_path / "out", progress=False)


# A tiny grid shared by the results-integrity tests (one compilation for all of them).
TINY_TOML = """
experiment = "linesearch"
seeds = 2
[setup]
steps = 20
max_capacity = 20
max_batch_size = 2
[fixed]
step_size = 0.05
[grid]
memory_size = [5, 20]
batch_size = [1, 2]
"""


def _cli(*args):
    from jaxreplay import cli

    return cli.main([*map(str, args)])


def test_swapped_grid_axes_are_a_different_sweep_end_to_end(tmp_path, capsys):
    config = _write(tmp_path, TINY_TOML)
    swapped = _write(tmp_path, TINY_TOML.replace("memory_size = [5, 20]\nbatch_size = [1, 2]",
                                                 "batch_size = [1, 2]\nmemory_size = [5, 20]"), "swapped.toml")
    a, b = sw.Sweep.from_toml(config), sw.Sweep.from_toml(swapped)
    assert a.to_dict()["grid"] == b.to_dict()["grid"]  # equal as tables ...
    assert a.fingerprint() != b.fingerprint()  # ... but they number their runs differently
    out = tmp_path / "out"
    assert _cli("sweep", config, "--out", out, "--quiet") == 0
    reference = sw.load(out)
    capsys.readouterr()
    assert _cli("sweep", swapped, "--out", out, "--quiet") == 2
    err = capsys.readouterr().err
    assert "different sweep" in err and "grid axis order: ['memory_size', 'batch_size'] there" in err
    _same(sw.load(out), reference)  # results.nc untouched
    # Labels are right either way: the swapped sweep is the same runs, transposed.
    assert _cli("sweep", swapped, "--out", tmp_path / "out2", "--quiet") == 0
    other = sw.load(tmp_path / "out2")
    assert other.dtheta.dims[:3] == ("batch_size", "memory_size", "seed")
    for N, m, seed in [(5, 2, 0), (20, 1, 1), (20, 2, 0)]:
        np.testing.assert_array_equal(other.dtheta.sel(memory_size=N, batch_size=m, seed=seed).values,
                                      reference.dtheta.sel(memory_size=N, batch_size=m, seed=seed).values)
        assert other.capacity.sel(memory_size=N, batch_size=m, seed=seed).values[-1] == N


def test_chunks_carry_their_sweep_so_a_deleted_manifest_never_mixes_configs(tmp_path, capsys):
    config = _write(tmp_path, TINY_TOML)
    out = tmp_path / "out"
    assert _cli("sweep", config, "--out", out, "--quiet", "--chunk-size", "3") == 0
    reference = sw.load(out)
    sweep = sw.Sweep.from_toml(config)
    chunks = sorted((out / "chunks").glob("runs-*.npz"))
    assert len(chunks) == 3
    with np.load(chunks[-1]) as data:  # self-describing: fingerprint, run count and run range
        assert str(data["meta.fingerprint"]) == sweep.fingerprint() and int(data["meta.num_runs"]) == 8
        assert data["meta.run_range"].tolist() == [6, 8] and data["run_index"].tolist() == [6, 7]
    for changed in (TINY_TOML.replace("step_size = 0.05", "step_size = 0.01"),
                    TINY_TOML.replace("seeds = 2", "seeds = 1"), TINY_TOML.replace("seeds = 2", "seeds = 3")):
        (out / "sweep.json").unlink(missing_ok=True)
        capsys.readouterr()
        assert _cli("sweep", _write(tmp_path, changed, "changed.toml"), "--out", out, "--quiet") == 2
        err = capsys.readouterr().err
        assert "runs-000000000-0000003" in err and "belongs to another sweep" in err, err
        assert not (out / "sweep.json").exists()  # no manifest written that would refuse the original
        _same(sw.load(out), reference)
    # The original config, manifest still deleted: its own chunks are recognised and reused.
    assert _cli("sweep", config, "--out", out, "--quiet") == 0
    assert "(0 computed, 8 resumed)" in capsys.readouterr().out
    _same(sw.load(out), reference)
    assert json.loads((out / "sweep.json").read_text())["fingerprint"] == sweep.fingerprint()


def _make_legacy(out, sweep):
    """Turn ``out`` into what jaxreplay wrote before chunks carried a fingerprint and the fingerprint covered
    the grid order: chunks without meta.*, sweep.json with the old fingerprint."""
    import hashlib

    for path in (out / "chunks").glob("runs-*.npz"):
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files if not k.startswith("meta.")}
        np.savez(path, **arrays)
    manifest = json.loads((out / "sweep.json").read_text())
    manifest["fingerprint"] = hashlib.sha256(json.dumps(sweep.to_dict(), sort_keys=True).encode()).hexdigest()
    (out / "sweep.json").write_text(json.dumps(manifest, indent=2))


def test_a_folder_of_an_older_jaxreplay_is_adopted_only_with_its_verified_manifest(tmp_path, capsys):
    config = _write(tmp_path, TINY_TOML)
    swapped = _write(tmp_path, TINY_TOML.replace("memory_size = [5, 20]\nbatch_size = [1, 2]",
                                                 "batch_size = [1, 2]\nmemory_size = [5, 20]"), "swapped.toml")
    sweep = sw.Sweep.from_toml(config)
    out = tmp_path / "out"
    assert _cli("sweep", config, "--out", out, "--quiet", "--chunk-size", "3") == 0
    reference = sw.load(out)
    _make_legacy(out, sweep)
    legacy_manifest = (out / "sweep.json").read_text()
    # The swapped grid has the same old fingerprint: the stored axis order still refuses it.
    assert _cli("sweep", swapped, "--out", out, "--quiet") == 2
    assert "grid axis order" in capsys.readouterr().err
    # The same sweep: its manifest is verified (old fingerprint, same axis order), its chunks adopted.
    assert _cli("sweep", config, "--out", out, "--quiet") == 0
    assert "(0 computed, 8 resumed)" in capsys.readouterr().out
    _same(sw.load(out), reference)
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["fingerprint"] == sweep.fingerprint() and len(manifest["unfingerprinted_chunks"]) == 3
    assert _cli("sweep", config, "--out", out, "--quiet") == 0  # and stays adopted
    # Without a verified manifest, fingerprint-less chunks are never used.
    (out / "sweep.json").write_text(legacy_manifest)
    (out / "sweep.json").unlink()
    assert _cli("sweep", config, "--out", out, "--quiet") == 2
    assert "carries no fingerprint" in capsys.readouterr().err


def _damage(path, how):
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "random":
        path.write_bytes(np.random.default_rng(0).bytes(len(data)))
    elif how == "flipped":  # one byte of the first array's data: the zip directory still reads
        path.write_bytes(data[:200] + bytes([data[200] ^ 0xFF]) + data[201:])


@pytest.mark.parametrize("how, found", [("truncated", "BadZipFile"), ("empty", "EOFError"),
                                        ("random", "not an npz archive"), ("flipped", "Bad CRC-32")])
def test_a_damaged_chunk_is_named_set_aside_and_recomputed_never_reused(tmp_path, capsys, how, found):
    config = _write(tmp_path, TINY_TOML)
    out = tmp_path / "out"
    assert _cli("sweep", config, "--out", out, "--quiet", "--chunk-size", "3") == 0
    reference = sw.load(out)
    chunk = sorted((out / "chunks").glob("runs-*.npz"))[1]  # runs 3, 4, 5
    _damage(chunk, how)
    capsys.readouterr()
    status = _cli("sweep", config, "--out", out, "--quiet")
    captured = capsys.readouterr()
    err = captured.err
    assert f"{chunk} " in err and found in err and f"renamed to {chunk.name}.damaged" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    if how == "flipped":  # found only when its data is read: the message says to rerun
        assert status == 2 and "rerun the same sweep to recompute its runs" in err
        assert _cli("sweep", config, "--out", out, "--quiet") == 0
        captured = capsys.readouterr()
    else:
        assert status == 0 and "its runs are computed again" in err
    assert "(3 computed, 5 resumed)" in captured.out
    assert (chunk.parent / (chunk.name + ".damaged")).exists()
    _same(sw.load(out), reference)


def test_unusable_output_folders_and_a_damaged_manifest_get_one_line(tmp_path, capsys, monkeypatch):
    config = _write(tmp_path, TINY_TOML)
    cases = {
        "file": (config, f"the output folder {config} is a file, not a folder"),
        "under a file": (config / "out", f"the output folder {config / 'out'} cannot be created: {config} is a file"),
    }
    for name, (out, message) in cases.items():
        assert _cli("sweep", config, "--out", out, "--quiet") == 2, name
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    out = tmp_path / "out"
    assert _cli("sweep", config, "--out", out, "--quiet", "--chunk-size", "3") == 0
    reference = sw.load(out)
    manifest = (out / "sweep.json").read_text()
    (out / "sweep.json").write_text(manifest[: len(manifest) // 2])  # truncated
    capsys.readouterr()
    assert _cli("sweep", config, "--out", out, "--quiet") == 2
    err = capsys.readouterr().err
    assert f"{out / 'sweep.json'} is damaged (not a sweep manifest: " in err and "Delete it and rerun" in err
    (out / "sweep.json").unlink()
    assert _cli("sweep", config, "--out", out, "--quiet") == 0  # as it says: the chunks are reused
    assert "(0 computed, 8 resumed)" in capsys.readouterr().out

    # A read-only folder (simulated: tests may run as root, for whom permissions do not apply).
    monkeypatch.setattr(resources, "writable", lambda folder: False)
    summary = (out / "summary.json").read_bytes()
    again = sw.run(sw.Sweep.from_toml(config), out, progress=False)  # finished: read, nothing rewritten
    assert again.stats.runs_computed == 0 and (out / "summary.json").read_bytes() == summary
    _same(again.dataset, reference)
    sorted((out / "chunks").glob("*.npz"))[0].unlink()
    assert _cli("sweep", config, "--out", out, "--quiet") == 2
    err = capsys.readouterr().err
    assert f"{out} is not writable (read-only or no permission) and 3 of 8 runs are still to compute" in err


def test_a_failed_write_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    config = _write(tmp_path, TINY_TOML)
    out = tmp_path / "out"

    def full(path, data):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(store, "atomic_write", full)  # the chunk store writes every file of the folder
    assert _cli("sweep", config, "--out", out, "--quiet") == 2
    err = capsys.readouterr().err
    assert err == f"jaxreplay sweep: error: cannot write {out / 'sweep.json'}: No space left on device.\n"
    assert not (out / "sweep.lock").exists()  # released however the run ends


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_a_really_read_only_folder(tmp_path, capsys):
    config = _write(tmp_path, TINY_TOML)
    out = tmp_path / "out"
    assert _cli("sweep", config, "--out", out, "--quiet") == 0
    for path in (out, out / "chunks"):
        path.chmod(0o555)
    try:
        assert _cli("sweep", config, "--out", out, "--quiet") == 0  # finished: summary.json is not rewritten
        assert _cli("sweep", config, "--out", out / "new", "--quiet") == 2
        assert "cannot be created (Permission denied)" in capsys.readouterr().err
    finally:
        for path in (out, out / "chunks"):
            path.chmod(0o755)


def test_sweep_killed_with_sigkill_resumes_to_identical_results(tmp_path):
    config = _write(tmp_path, """
        experiment = "linesearch"
        seeds = 40
        [setup]
        steps = 500
        max_capacity = 256
        max_batch_size = 4
        sampler = "prioritized"
        [fixed]
        batch_size = 4
        step_size = 0.01
        [grid]
        memory_size = [16, 256]
        """)
    out = tmp_path / "out"
    # One CPU device, as this test process has (the command would give JAX one per core: resumed here, with
    # one, the folder would be refused; tests/test_cli.py covers that).
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="1")
    proc = subprocess.Popen([sys.executable, "-m", "jaxreplay", "sweep", str(config), "--out", str(out),
                             "--chunk-size", "1", "--quiet"], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while time.time() < deadline and len(list((out / "chunks").glob("runs-*.npz"))) < 5:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(list((out / "chunks").glob("runs-*.npz")))
    assert 5 <= finished < 40, f"the kill did not land mid-sweep ({finished} of 40 chunks)"
    assert not (out / "results.nc").exists()

    sweep = sw.Sweep.from_toml(config)
    with pytest.warns(sw.SweepWarning, match=rf"left by process {proc.pid}@.*killed\?\): taken over"):
        with pytest.raises(ValueError, match=r"rerun with chunk_size 2 \(--chunk-size 2\) or none"):
            sw.run(sweep, out, chunk_size=16, progress=False)  # never mixed with runs of another batch
    assert not (out / "sweep.lock").exists()  # released by the refused run
    resumed = sw.run(sweep, out, progress=False)  # at the recorded chunk size
    assert not (out / "sweep.lock").exists()
    assert resumed.stats.runs_resumed == 2 * finished and resumed.stats.runs_computed == 80 - 2 * finished
    assert resumed.stats.chunk_size == 2  # --chunk-size 1 runs in programs of 2 (plan.MIN_RUNS_PER_DEVICE)
    assert not list(out.rglob(".tmp-*")), "a partial file was left behind"
    # The killed call is in summary.json's calls too, from the chunks it saved (it never wrote a summary).
    killed, last = json.loads((out / "summary.json").read_text())["calls"]
    assert (killed["interrupted"], killed["runs_computed"], killed["chunks"]) == (True, 2 * finished, finished)
    assert killed["seconds_to_last_chunk"] > 0 and killed["started"] <= last["started"]
    assert (last["runs_computed"], "interrupted" in last, last["id"] != killed["id"]) == (80 - 2 * finished, False, True)
    for path in (out / "chunks").glob("*.npz"):
        with np.load(path, allow_pickle=False) as data:
            assert data["run_index"].size >= 1
    _same(resumed.dataset, sw.run(sweep, None, chunk_size=80, progress=False).dataset)  # any chunk: the same


def test_an_edited_manifest_is_refused_as_damaged_and_deleting_it_alone_is_enough(tmp_path, capsys):
    config = _write(tmp_path, TINY_TOML)
    out = tmp_path / "out"
    assert _cli("sweep", config, "--out", out, "--quiet", "--chunk-size", "3") == 0
    reference = sw.load(out)
    original = json.loads((out / "sweep.json").read_text())
    edits = {
        "setup.steps": lambda c: c["setup"].update(steps=30),
        "grid.memory_size": lambda c: c["grid"].update(memory_size=[5, 21]),
        "seeds": lambda c: c.update(seeds=3),
    }
    for key, edit in edits.items():
        manifest = json.loads(json.dumps(original))
        edit(manifest["config"])
        (out / "sweep.json").write_text(json.dumps(manifest, indent=2))
        capsys.readouterr()
        assert _cli("sweep", config, "--out", out, "--quiet") == 2, key
        err = capsys.readouterr().err
        assert err == (f"jaxreplay sweep: error: {out / 'sweep.json'} is damaged: its config does not match its "
                       f"fingerprint (edited: {key}). Delete sweep.json alone and rerun: the chunks carry their "
                       "sweep's fingerprint, so only this sweep's finished runs are reused.\n"), err
        _same(sw.load(out), reference)  # results.nc untouched
    (out / "sweep.json").unlink()  # as it says
    assert _cli("sweep", config, "--out", out, "--quiet") == 0
    assert "(0 computed, 8 resumed)" in capsys.readouterr().out
    assert json.loads((out / "sweep.json").read_text())["config"] == original["config"]
    _same(sw.load(out), reference)


# The first writer of the two-writer test: it holds the folder's lock, blocked before saving its first chunk
# until the test says go.
_HELD_WRITER = """
import pathlib, sys, time
from jaxreplay.engine import store, sweep as sw
config, out, ready, go = sys.argv[1:]
save = store.ChunkStore.save
def held(self, part):
    pathlib.Path(ready).touch()
    while not pathlib.Path(go).exists():
        time.sleep(0.01)
    save(self, part)
store.ChunkStore.save = held
r = sw.run(sw.Sweep.from_toml(config), out, chunk_size=3, progress=False)
print("computed", r.stats.runs_computed)
"""


def test_a_second_writer_is_refused_naming_the_first_which_finishes_undisturbed(tmp_path, capsys):
    config = _write(tmp_path, TINY_TOML)
    out, ready, go = tmp_path / "out", tmp_path / "ready", tmp_path / "go"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    first = subprocess.Popen([sys.executable, "-c", _HELD_WRITER, config, out, ready, go], env=env, cwd=REPO,
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 180
        while not ready.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        assert ready.exists(), first.communicate()[1] if first.poll() is not None else "the first writer hung"
        assert _cli("sweep", config, "--out", out, "--quiet") == 2
        err = capsys.readouterr().err
        assert err.startswith(f"jaxreplay sweep: error: {out} is being written by another sweep (process "
                              f"{first.pid}@{socket.gethostname()}, started "), err
        assert f"; lock file {out / 'sweep.lock'}): wait for it to finish, or write into another folder.\n" in err
        assert len(err.splitlines()) == 1
        go.touch()
        stdout, stderr = first.communicate(timeout=180)
    finally:
        if first.poll() is None:  # (a failed assertion above: not left running)
            first.kill()
            first.communicate()
    assert first.returncode == 0, stderr
    assert stdout.split() == ["computed", "8"]
    assert not (out / "sweep.lock").exists()  # released at the end
    _same(sw.load(out), sw.run(sw.Sweep.from_toml(config), None, progress=False).dataset)


def test_a_new_folder_is_locked_before_planning_and_removed_if_the_plan_refuses(tmp_path, monkeypatch):
    """A new folder was planned (compiling the chunk program to measure it) before its lock was taken: a second
    writer started meanwhile compiled the whole program and was refused only then (found by a probe). The lock is
    now taken first, the folder created for it; a plan that refuses the sweep leaves no folder behind."""
    from jaxreplay.engine import plan as plan_lib

    sweep = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))
    out = tmp_path / "new" / "out"
    held = []
    real = plan_lib.make_plan

    def planning(*args, **kwargs):
        held.append((out / "sweep.lock").exists())
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_lib, "make_plan", planning)
    with pytest.raises(MemoryError):
        sw.run(sweep, out, memory_budget=1, progress=False)  # refused by the plan: no run fits the budget
    assert held and all(held) and not out.exists()
    held.clear()
    sw.run(sweep, out, chunk_size=4, progress=False)
    assert held and all(held) and not (out / "sweep.lock").exists() and (out / "results.nc").exists()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_stale_lock_is_taken_over_and_a_lock_is_released_however_the_run_ends(tmp_path, capsys):
    config = _write(tmp_path, TINY_TOML)
    out, host = tmp_path / "out", socket.gethostname()
    assert _cli("sweep", config, "--out", out, "--quiet") == 0
    assert not (out / "sweep.lock").exists()
    dead = _dead_pid()
    stale = json.dumps({"pid": dead, "host": host, "started": "2026-01-02T03:04:05Z"})
    (out / "sweep.lock").write_text(stale)  # left by a killed sweep (the kernel released its flock)
    capsys.readouterr()
    assert _cli("sweep", config, "--out", out, "--quiet") == 0
    captured = capsys.readouterr()
    assert captured.err == (f"jaxreplay: warning: {out / 'sweep.lock'} was left by process {dead}@{host}, started "
                            "2026-01-02T03:04:05Z, which stopped without releasing it (killed?): taken over.\n")
    assert "(0 computed, 8 resumed)" in captured.out and not (out / "sweep.lock").exists()
    # A refused run releases the lock it took.
    assert _cli("sweep", _write(tmp_path, TINY_TOML.replace("seeds = 2", "seeds = 3"), "other.toml"),
                "--out", out, "--quiet") == 2
    assert "different sweep (differs in: seeds)" in capsys.readouterr().err
    assert not (out / "sweep.lock").exists()

    # In one process too: a second hold of a held folder is refused, naming this process.
    with store.lock_folder(out) as held:
        assert json.loads(held.path.read_text())["pid"] == os.getpid()
        with pytest.raises(ValueError, match=rf"is being written by another sweep \(process {os.getpid()}@"):
            store.lock_folder(out)
    assert not (out / "sweep.lock").exists()


def test_without_file_locks_the_pid_in_the_lock_file_decides(tmp_path, monkeypatch):
    from jaxreplay.engine import folder

    monkeypatch.setattr(folder, "_flock", lambda fd: None)  # a file system without locks
    lock, host = tmp_path / "sweep.lock", socket.gethostname()
    # A live pid on this host may since belong to another program (a reboot, a busy node): the advice to delete the
    # lock file is given here too (it was only for other hosts; found by a probe).
    for pid, where, refused in [(os.getppid(), host, f"wait for it to finish, or write into another folder (if that "
                                                     f"process no longer runs, delete {lock})."),
                                (os.getpid(), "another-host", f"if that process no longer runs, delete {lock}"),
                                (_dead_pid(), host, None)]:
        lock.write_text(json.dumps({"pid": pid, "host": where, "started": "2026-01-02T03:04:05Z"}))
        if refused:
            with pytest.raises(ValueError, match=rf"\(process {pid}@{where}, started .*{re.escape(refused)}"):
                store.lock_folder(tmp_path)
            assert json.loads(lock.read_text())["pid"] == pid  # the holder's file kept
        else:
            with pytest.warns(store.SweepWarning, match=rf"left by process {pid}@{host}.*taken over"):
                store.lock_folder(tmp_path).release()
    assert not lock.exists()


# ----------------------------------------------------------------------------
# Devices and processes (subprocesses: the device count is fixed at JAX start)
# ----------------------------------------------------------------------------


FEW_RUNS_TOML = """
experiment = "linesearch"
seeds = {seeds}
seed = 3
[setup]
steps = 40
max_capacity = 20
max_batch_size = 2
[fixed]
step_size = 0.05
memory_size = 10
batch_size = 2
"""


def test_four_devices_and_any_chunk_size_match_one_device(tmp_path, aer_reference):
    # Also, on 4 devices: a folder begun on 1 or 2 of them resumes on that many (its missing runs computed in
    # the program its finished ones were), and a new sweep of 1 or 3 runs takes 1 or 2 devices (2 runs a
    # device at least), unless the chunk size or the devices were asked for: the same bits every way.
    _, result = aer_reference
    config = _write(tmp_path, AER_TOML)
    tiny = [_write(tmp_path, FEW_RUNS_TOML.format(seeds=seeds), f"tiny{seeds}.toml") for seeds in (1, 3)]
    script = textwrap.dedent(f"""
        import pathlib
        import jax
        from jaxreplay.engine import plan as plan_lib, sweep as sw
        assert jax.device_count() == 4
        tmp, sweep = {str(tmp_path)!r}, sw.Sweep.from_toml({str(config)!r})
        for chunk in (100, 8):
            r = sw.run(sweep, tmp + f"/d4_{{chunk}}", chunk_size=chunk, progress=False)
            print("devices", r.stats.devices, "chunks", r.stats.chunks)
        for k in (1, 2):
            sw.run(sweep, tmp + f"/begun_{{k}}", chunk_size=8, devices=jax.local_devices()[:k], progress=False)
            sorted(pathlib.Path(tmp, f"begun_{{k}}", "chunks").glob("*.npz"))[-1].unlink()
            r = sw.run(sweep, tmp + f"/begun_{{k}}", progress=False)
            print("resumed", r.stats.devices, r.stats.runs_computed)
        for i, path in enumerate({[str(t) for t in tiny]!r}):
            tiny = sw.Sweep.from_toml(path)
            print("tiny", sw.run(tiny, tmp + f"/tiny_{{i}}", progress=False).stats.devices,
                  sw.run(tiny, tmp + f"/tiny_{{i}}_chunk", chunk_size=8, progress=False).stats.devices,
                  sw.run(tiny, tmp + f"/tiny_{{i}}_devices", devices=jax.local_devices(), progress=False).stats.devices)
        # The fewer CPU devices keep the whole memory budget (the host's memory is theirs): a lone run with room
        # for 5 runs is not squeezed into a program of one, and a folder begun on 1 device with chunks of 8
        # resumes within a budget of 10 runs (a quarter of it held 2).
        lone = sw.Sweep.from_toml({str(tiny[0])!r})
        per = plan_lib.estimate_bytes_per_run(lone)
        print("budget", sw.run(lone, None, memory_budget=5 * per, progress=False).stats.chunk_size,
              sw.run(lone, None, memory_budget=5 * per, devices=jax.local_devices()[:1], progress=False).stats.chunk_size)
        sorted(pathlib.Path(tmp, "begun_1", "chunks").glob("*.npz"))[0].unlink()
        per = plan_lib.estimate_bytes_per_run(sweep)
        r = sw.run(sweep, tmp + "/begun_1", memory_budget=10 * per, progress=False)
        print("resumed", r.stats.devices, r.stats.runs_computed)
        # A new sweep whose runs do not fit 2 a device on all 4 (a budget of 3 runs) runs on 1, where it was refused.
        r = sw.run(sweep, tmp + "/fit", memory_budget=3 * per, progress=False)
        print("fit", r.stats.devices, r.stats.chunk_size >= 2)  # (XLA's accounting may cut the chunk below 3)
        """)
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["devices 4 chunks 1", "devices 4 chunks 5", "resumed 1 4", "resumed 2 4",
                                        "tiny 1 4 4", "tiny 2 4 4", "budget 2 2", "resumed 1 8", "fit 1 True"]
    for folder in ("d4_100", "d4_8", "begun_1", "begun_2", "fit"):
        _same(sw.load(tmp_path / folder), result.dataset)
    for i in range(2):
        _same(sw.load(tmp_path / f"tiny_{i}"), sw.load(tmp_path / f"tiny_{i}_devices"))
        _same(sw.load(tmp_path / f"tiny_{i}_chunk"), sw.load(tmp_path / f"tiny_{i}_devices"))
    assert [json.loads((tmp_path / f"tiny_{i}" / "sweep.json").read_text())["batch"]["devices"] for i in (0, 1)] == [1, 2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_under_jax_distributed_match_one(tmp_path, aer_reference):
    _, result = aer_reference
    config = _write(tmp_path, AER_TOML)
    out = tmp_path / "mp"
    script = textwrap.dedent(f"""
        import sys, jax
        jax.distributed.initialize(coordinator_address="127.0.0.1:{_free_port()}", num_processes=2,
                                   process_id=int(sys.argv[1]))
        from jaxreplay.engine import sweep as sw
        r = sw.run(sw.Sweep.from_toml({str(config)!r}), {str(out)!r}, chunk_size=4, progress=False)
        print("computed", r.stats.runs_computed, "processes", r.stats.processes)
        """)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(i)], env=env, cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
    outputs = [p.communicate(timeout=240) for p in procs]
    for p, (stdout, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr
        assert "processes 2" in stdout
    computed = [int(line.split()[1]) for stdout, _ in outputs for line in stdout.splitlines()
                if line.startswith("computed")]
    assert computed == [36, 36]  # the call's runs, on both processes (each computed its share: 5 and 4 chunks)
    _same(sw.load(out), result.dataset)
    # One call, though each process saved its own chunks (under process 0's call id: none counted as interrupted).
    calls = json.loads((out / "summary.json").read_text())["calls"]
    assert len(calls) == 1 and "interrupted" not in calls[0]
    assert (calls[0]["runs_computed"], calls[0]["chunks"], calls[0]["processes"]) == (36, 9, 2)


def _two_processes(script: str, *args: str) -> list[str]:
    """Run ``script`` (its argv[1]: the process id) as 2 jax.distributed processes; their stdout lines."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, "-c", script, str(i), port, *args], env=env, cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
    outputs = [p.communicate(timeout=240) for p in procs]
    for p, (_, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr
    # (Gloo prints lines of its own to stdout: only the script's are kept.)
    return [next(line for line in stdout.splitlines() if line.startswith(("computed", "refused:")))
            for stdout, _ in outputs]


def test_processes_plan_one_chunking_and_share_a_refusal(tmp_path, aer_reference):
    """Each process planned from its own memory budget: budgets of 8 and 9 runs chunked the sweep differently,
    leaving runs computed by nobody or twice and two programs' chunks in one folder; and a refusal on process 0
    reached process 1 only as a Gloo timeout 30 s later (found by a probe). Now every process plans from the
    smallest budget, and a refusal is raised on every process, in one line."""
    _, result = aer_reference
    config = _write(tmp_path, AER_TOML)
    other = _write(tmp_path, AER_TOML.replace("seed = 7", "seed = 8"), "other.toml")
    out = tmp_path / "mp"
    script = textwrap.dedent("""
        import sys, jax
        jax.distributed.initialize(coordinator_address="127.0.0.1:" + sys.argv[2], num_processes=2,
                                   process_id=int(sys.argv[1]))
        from jaxreplay.engine import plan, sweep as sw
        s = sw.Sweep.from_toml(sys.argv[4])
        budget = plan.estimate_bytes_per_run(s) * (8 + jax.process_index())  # as if free memory differed
        try:
            r = sw.run(s, sys.argv[3], memory_budget=budget, progress=False)
            print("computed", r.stats.runs_computed, "chunk", r.stats.chunk_size)
        except ValueError as e:
            print("refused:", e)
        """)
    lines = _two_processes(script, str(out), str(config))
    # One chunking, from the smaller budget: 8 estimated runs, fewer where XLA's accounting of the compiled
    # chunk exceeds the estimate (the runner then plans again with the estimate scaled to it).
    chunks = {int(line.split()[3]) for line in lines}
    assert len(chunks) == 1 and [line.split()[2] for line in lines] == ["chunk"] * 2
    chunk = chunks.pop()
    assert 4 <= chunk <= 8
    assert [int(line.split()[1]) for line in lines] == [36, 36]  # the call's runs, on both processes
    assert len(list((out / "chunks").glob("runs-*.npz"))) == -(-36 // chunk)  # none computed twice
    _same(sw.load(out), result.dataset)
    refused = _two_processes(script, str(out), str(other))
    said = f"{out} holds a different sweep (differs in: seed)."
    assert refused[0].startswith(f"refused: {said}")
    assert refused[1].startswith(f"refused: process 0 refused the sweep (ValueError: {said}")


def test_processes_that_disagree_or_fail_are_stopped_together_in_one_line(tmp_path):
    """Found by a probe of jax.distributed sweeps: processes given other chunk sizes each computed every other
    chunk of their own list (runs computed by nobody or twice, a folder no rerun could resume); a sweep kept in
    memory computed everything and then failed on every process; a process given another folder, or stopped by
    Ctrl-C while computing, left the others waiting at the end barrier until JAX aborted them (~5 minutes).
    Now each is one line on every process, at once (the interrupted process's chunks kept for a resume)."""
    config = _write(tmp_path, AER_TOML)
    script = textwrap.dedent("""
        import sys, jax
        jax.distributed.initialize(coordinator_address="127.0.0.1:" + sys.argv[2], num_processes=2,
                                   process_id=int(sys.argv[1]))
        from jaxreplay.engine import store, sweep as sw
        p, s, out = jax.process_index(), sw.Sweep.from_toml(sys.argv[4]), sys.argv[3]
        said = []
        def attempt(*args, **kwargs):
            try:
                sw.run(s, *args, progress=False, **kwargs)
                said.append("ran")
            except BaseException as e:
                said.append(f"{type(e).__name__}: {e}")
        attempt(None, chunk_size=4)
        attempt(out + "/a", chunk_size=4 * (1 + p))
        attempt(out + ("/b" if p == 0 else "/c"), chunk_size=4)
        if p == 1:  # a Ctrl-C while its second chunk is saved
            save, count = store.ChunkStore.save, []
            def interrupted(self, result):
                count.append(1)
                if len(count) == 2:
                    raise KeyboardInterrupt
                return save(self, result)
            store.ChunkStore.save = interrupted
        attempt(out + "/d", chunk_size=4)
        print("refused: " + " | ".join(said))
        """)
    lines = _two_processes(script, str(tmp_path / "mp"), str(config))
    said = [line.removeprefix("refused: ").split(" | ") for line in lines]
    memory = ("ValueError: a sweep of several jax.distributed processes needs an output folder (out_dir) that every "
              "process sees")
    assert said[0][0].startswith(memory) and said[1][0].startswith(memory)
    chunking = ("process 1 chunks the sweep otherwise than process 0: chunk_size 8 (process 0: 4), chunks 5 "
                "(process 0: 9), group_chunk_sizes [8] (process 0: [4])")
    assert said[1][1].startswith("ValueError: " + chunking)
    assert said[0][1].startswith("ValueError: process 1 refused the sweep (ValueError: " + chunking)
    assert not list((tmp_path / "mp" / "a").glob("chunks/*.npz"))  # refused before any chunk
    folder = f"ValueError: {tmp_path / 'mp' / 'c'} is not the folder process 0 prepared (its lock, held by pid"
    assert said[1][2].startswith(folder) and said[0][2].startswith("ValueError: process 1 refused the sweep (" + folder)
    assert said[1][3] == "KeyboardInterrupt: "
    assert said[0][3] == "ValueError: process 1 failed computing its chunks (KeyboardInterrupt)"
    assert len(list((tmp_path / "mp" / "d").glob("chunks/*.npz"))) == 6  # process 0's 5 and process 1's first


# ----------------------------------------------------------------------------
# Config errors
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ('experiment = "linesearch"\nseeds = 2\ncolour = "red"\n', r"unknown key 'colour'"),
    ('experiment = "cartpole"\n', r"experiment: experiment must be one of"),
    ('seeds = 2\n', r"experiment: missing"),
    ('experiment = "linesearch"\n[setup]\nmax_capacty = 10\n', r"setup\.max_capacty: unknown setting"),
    ('experiment = "linesearch"\n[setup]\nsteps = "ten"\n', r"setup\.steps must be of type int"),
    ('experiment = "linesearch"\n[fixed]\nstep_size = "big"\n', r"fixed\.step_size must be a number"),
    ('experiment = "linesearch"\n[fixed]\nlearning_rate = 0.1\n', r"fixed\.learning_rate: unknown hyperparameter"),
    ('experiment = "linesearch"\n[grid]\nmemory_size = []\n', r"grid\.memory_size is empty"),
    ('experiment = "linesearch"\n[grid]\nmemory_size = [10.5]\n', r"grid\.memory_size must be an integer"),
    ('experiment = "linesearch"\n[grid]\nmemory_size = [10, 10]\n', r"grid\.memory_size has repeated values"),
    # Where the value came from, as a plain number (once: "got an array with min np.int32(10) and max ...").
    ('experiment = "linesearch"\n[grid]\nmemory_size = [10, 5000]\n',
     r"^grid\.memory_size = 5000: memory_size must be <= 1000 \(allowed range \[1, 1000\]\), got 5000\.$"),
    ('experiment = "linesearch"\n[[points]]\nmemory_size = 10\n[[points]]\nmemory_size = 1001\n',
     r"^points\[1\]\.memory_size = 1001: memory_size must be <= 1000"),
    ('experiment = "linesearch"\n[fixed]\nmemory_size = 0\n', r"^fixed\.memory_size = 0: memory_size must be >= 1"),
    ('experiment = "linesearch"\n[setup]\nmax_capacity = 50\n',
     r"^memory_size = 100 \(its default; set it in \[fixed\] or \[grid\]\): memory_size must be <= 50"),
    ('experiment = "linesearch"\n[[points]]\nmemory_size = 10\nbatch_size = 2\n[[points]]\nmemory_size = 20\n',
     r"points\[1\] sets \['memory_size'\], points\[0\] sets \['batch_size', 'memory_size'\] \(missing "
     r"\['batch_size'\]\)"),
    ('experiment = "linesearch"\n[grid]\ndiscount = [0.5, 1.0]\n', r"discount must be < 1"),
    ('experiment = "linesearch"\nseeds = 0\n', r"seeds must be an integer in \[1, 2147483647\], got 0"),
    ('experiment = "linesearch"\nseed = -1\n', r"seed must be an integer in \[0, 4294967295\], got -1"),
    ('experiment = "linesearch"\n[run]\nchunks = 3\n', r"run\.chunks: unknown run option"),
    # Once tracebacks: a TypeError, an int32 overflow, a JAX TypeError at compile time.
    ('experiment = "linesearch"\n[run]\nmemory_fraction = "half"\n',
     r"run\.memory_fraction must be a number in \(0, 1\], got 'half'"),
    ('experiment = "linesearch"\n[run]\nmemory_budget = nan\n', r"run\.memory_budget must be a positive number"),
    ('experiment = "linesearch"\n[run]\nchunk_size = 2.5\n', r"run\.chunk_size must be a positive integer"),
    # A whole float too: the one check run() itself makes (it used to pass here and fail in run()).
    ('experiment = "linesearch"\n[run]\nchunk_size = 4.0\n', r"^run\.chunk_size must be a positive integer, got 4\.0"),
    ('experiment = "dqn"\n[setup]\nenv_params = {gravity = "x"}\n',
     r"setup\.env_params\.gravity must be a number, got 'x'"),
    ('experiment = "linesearch"\n[setup]\nmax_capacity = 10000000000\n',
     r"setup\.max_capacity = 10000000000 does not fit an int32 \(at most 2147483647\)"),
    ('experiment = "linesearch"\n[fixed]\nmemory_size = 3000000000\n',
     r"fixed\.memory_size = 3000000000 does not fit an int32"),
    ('experiment = "linesearch"\n[fixed]\nstep_size = 1e300\n', r"fixed\.step_size = 1e\+300 does not fit a float32"),
    # Found by a probe: accepted, then a JAX reshape error (or a message naming no key).
    ('experiment = "linesearch"\n[setup]\ninitial_weights = [[0.0, 1.0], [2.0, 3.0]]\n',
     r"^setup: initial_weights must be two numbers \(θ1, θ2\), got \(\[0\.0, 1\.0\], \[2\.0, 3\.0\]\)\.$"),
    ('experiment = "linesearch"\n[setup]\ninitial_weights = [0, "x"]\n', r"^setup: initial_weights must be two numbers"),
    # (a sweep ran the agent at speed 0, never moving, unflagged, where the game refuses it: a probe)
    ('experiment = "linesearch"\n[setup]\nspeed = 0.0\n', r"^setup: speed must be > 0\.0, got 0\.0\.$"),
    ('experiment = "dqn"\n[setup]\nenv_params = [1, 2]\n',
     r"^setup: env_params must be a table of the environment's parameters \(\{name = value\}\), got \(1, 2\)\.$"),
    ('experiment = "linesearch"\n[record]\nreduce = ["q0.5", "q0.50"]\n', r"record\.reduce names a reduction twice"),
    # A float32 value as its own digits (it printed -0.10000000149011612).
    ('experiment = "dqn"\n[fixed]\nepsilon_end = -0.1\n',
     r"^fixed\.epsilon_end = -0\.1: epsilon_end must be >= 0\.0 \(allowed range \[0\.0, 1\.0\]\), got -0\.1\.$"),
    # tomllib reads integers of any size (TOML's are 64-bit): 10**400 failed as an OverflowError traceback.
    ('experiment = "linesearch"\n[grid]\ndiscount = [0.0, 1' + "0" * 400 + ']\n',
     r"^grid\.discount\[1\] = 100000\.\.\. \(401 digits\) is beyond TOML's 64-bit integers"),
    ('experiment = "linesearch"\n[run]\nmemory_budget = -1' + "0" * 400 + '\n', r"^run\.memory_budget must be a positive number of bytes"),
    # Within 64 bits, beyond int32: they failed inside JAX with a traceback.
    ('experiment = "linesearch"\n[record]\nstride = 9223372036854775807\n',
     r"^record\.stride must be a positive integer, got 9223372036854775807 \(at most 2147483647\)\.$"),
    ('experiment = "dqn"\n[setup]\nhidden_sizes = [4611686018427387904]\n', r"hidden_sizes must be <= 2147483647"),
])
def test_bad_config_files_name_the_key(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=message):
        config = __import__("tomllib").loads(path.read_text())
        sw.run_options(config)
        sw.Sweep.from_toml(path)


_TINY_SETUP = 'experiment = "linesearch"\n[setup]\nsteps = 20\nmax_capacity = 20\nmax_batch_size = 5\n'


@pytest.mark.parametrize("text, message", [
    # Above float32's range: a constant that ran as inf (NumPy's overflow warning then hung the CLI).
    (_TINY_SETUP + "reward_slope = 1e39\n[fixed]\nmemory_size = 5\n",
     "setup.reward_slope = 1e+39 does not fit a float32 (at most 3.403e+38 in magnitude): it would run as inf."),
    ('experiment = "dqn"\n[setup]\nenv_params = {gravity = -1e39}\n',
     "setup.env_params.gravity must be a finite number within float32 (like its default 9.8), got -1e+39."),
    (_TINY_SETUP + "[fixed]\nmemory_size = 5\nstep_size = 1e300\n", "fixed.step_size = 1e+300 does not fit a float32"),
    # Below it: would run as 0 (or a subnormal, which XLA flushes to 0) under the label 1e-40.
    (_TINY_SETUP + "speed = 1e-40\n[fixed]\nmemory_size = 5\n",
     "setup.speed = 1e-40 does not fit a float32 (its smallest normal magnitude is 1.175e-38): it would run as 0"),
    ('experiment = "dqn"\n[setup]\nenv_params = {gravity = 1e-40}\n',
     "setup.env_params.gravity = 1e-40 does not fit a float32 (its smallest normal magnitude is 1.175e-38)"),
    (_TINY_SETUP + "[fixed]\nmemory_size = 5\n[grid]\nstep_size = [0.01, 1e-45]\n",
     "grid.step_size = 1e-45 does not fit a float32 (its smallest normal magnitude is 1.175e-38)"),
    # Two grid values, or two points, that are one float32: one configuration under two labels.
    (_TINY_SETUP + "[fixed]\nmemory_size = 5\n[grid]\nstep_size = [0.1, 0.10000000001]\n",
     "grid.step_size has values 0.1 and 0.10000000001, which are one float32: both would run as "
     "0.10000000149011612, one configuration under two labels; keep one"),
    (_TINY_SETUP + "[[points]]\nmemory_size = 5\ndiscount = 0.5\n[[points]]\nmemory_size = 5\ndiscount = 0.50000001\n",
     "points[0] {'memory_size': 5, 'discount': 0.5} and points[1] {'memory_size': 5, 'discount': 0.50000001} are "
     "one configuration in float32"),
    # Two points equal as given (1 and 1.0 are one value): they were accepted as two configurations.
    (_TINY_SETUP + "[[points]]\nmemory_size = 5\ndiscount = 0.5\n[[points]]\nmemory_size = 5\ndiscount = 0.5\n"
     "[[points]]\nmemory_size = 8\ndiscount = 0.5\n",
     "points[0] and points[1] are the same configuration {'memory_size': 5, 'discount': 0.5}: each point must be "
     "distinct"),
    (_TINY_SETUP + "[[points]]\nmemory_size = 5\ndiscount = 1\n[[points]]\nmemory_size = 5\ndiscount = 1.0\n",
     "points[0] and points[1] are the same configuration"),
])
def test_floats_that_do_not_survive_the_cast_to_float32_are_refused_before_compiling(tmp_path, capsys, text, message):
    path = _write(tmp_path, text)
    before = _LOWERINGS.lowerings
    assert _cli("sweep", path, "--out", tmp_path / "out", "--quiet") == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert _LOWERINGS.lowerings == before and not (tmp_path / "out").exists()


def test_float32_checks_of_setups_and_accepted_values():
    from jaxreplay.experiments import dqn

    with pytest.raises(ValueError, match=r"^initial_weights = .* does not fit a float32 .* it would run as 0"):
        ls.Setup(initial_weights=(1e-39, 1.0))
    with pytest.raises(ValueError, match=r"^setup\.env_params\.gravity = 1e-39 does not fit a float32 .* run as 0"):
        dqn.Setup(env_params={"gravity": 1e-39})
    # Zero, the smallest normal float32 and values 7 digits apart are kept, each as itself.
    sweep = sw.Sweep("linesearch", setup={"max_capacity": 20, "speed": 1.1754944e-38}, fixed={"memory_size": 5},
                     grid={"step_size": [0.0, 1.1754944e-38, 0.1, 0.1000001]})
    assert sweep.hyperparameters().step_size.tolist() == np.float32([0.0, 1.1754944e-38, 0.1, 0.1000001]).tolist()
    assert len(set(sweep.hyperparameters().step_size.tolist())) == 4


def test_points_with_the_same_keys_in_another_order_are_one_sweep():
    setup = {"steps": 20, "max_capacity": 20, "max_batch_size": 2}
    mixed = sw.Sweep("linesearch", setup=setup, points=[{"memory_size": 5, "batch_size": 1},
                                                        {"batch_size": 2, "memory_size": 7}])
    ordered = sw.Sweep("linesearch", setup=setup, points=[{"memory_size": 5, "batch_size": 1},
                                                          {"memory_size": 7, "batch_size": 2}])
    assert mixed.points == ordered.points and mixed.fingerprint() == ordered.fingerprint()
    assert mixed.axes == ("memory_size", "batch_size")
    assert mixed.configurations()["memory_size"].tolist() == [5, 7]


def test_cli_reports_config_errors_with_exit_code_2(tmp_path):
    from jaxreplay import cli

    path = _write(tmp_path, 'experiment = "linesearch"\n[grid]\nmemory_size = []\n')
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    assert cli.main(["sweep", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o")]) == 2


# ----------------------------------------------------------------------------
# Canonical config and TOML round trip
# ----------------------------------------------------------------------------


def test_setup_table_and_instance_are_one_sweep_and_round_trip_through_toml(tmp_path):
    import dataclasses
    import tomllib

    from jaxreplay.experiments import dqn
    from jaxreplay.paper.reproduce import dqn as rdqn

    fixed_setup, _, common, points, _ = rdqn.fixed_vs_adaptive("MountainCar-v0", quick=True)
    defaults = {f.name: f.default for f in dataclasses.fields(dqn.Setup)}
    table = {k: v for k, v in dataclasses.asdict(fixed_setup).items() if v != defaults[k]}
    from_instance = sw.Sweep("dqn", seeds=3, setup=fixed_setup, fixed=common, points=points)
    from_table = sw.Sweep("dqn", seeds=3, setup=table, fixed=common, points=points)
    assert from_instance.fingerprint() == from_table.fingerprint()
    assert set(from_table.setup) == set(defaults)  # canonical: every field of the Setup
    path = tmp_path / "mc.toml"
    path.write_text(from_instance.to_toml())
    assert sw.Sweep.from_toml(path).fingerprint() == from_instance.fingerprint()
    assert "[[points]]" in path.read_text() and "max_num_old" not in path.read_text()  # None: the default

    grid = sw.Sweep("linesearch", seeds=2, setup={"max_capacity": 50}, fixed={"step_size": 1e-5, "discount": 0.5},
                    grid={"memory_size": [5, 50], "priority_exponent": [0.0, 2.5]})
    back = sw.Sweep.from_dict(tomllib.loads(grid.to_toml()))
    assert back.fingerprint() == grid.fingerprint() and back.grid == grid.grid


def test_toml_values():
    assert declaration._toml_value([1, 2.5, True, "a\"b", float("inf"), float("-inf")]) == '[1, 2.5, true, "a\\"b", inf, -inf]'
    assert declaration._toml_value({"x y": 1e-05}) == '{"x y" = 1e-05}'
    with pytest.raises(ValueError, match="TOML"):
        declaration._toml_value(object())


def test_a_resumed_sweep_runs_its_missing_runs_at_the_original_batch_size(tmp_path):
    """The chunk is sized for the whole sweep, not for what is missing: XLA:CPU may round a run
    differently in a program of another batch size (docs/design.md), so a resume pads instead."""
    import json

    config = _write(tmp_path, TINY_TOML)
    out = tmp_path / "out"
    assert _cli("sweep", config, "--out", out, "--quiet", "--chunk-size", "3") == 0
    reference = sw.load(out)
    last = sorted((out / "chunks").glob("runs-*.npz"))[-1]  # runs 6, 7: 2 of 8 missing after this
    last.unlink()
    assert _cli("sweep", config, "--out", out, "--quiet", "--chunk-size", "3") == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs_computed"] == 2 and summary["chunk_size"] == 3  # not 2: the same program shape
    # Both computing calls are kept: 8 runs in 3 chunks, then the 2 missing ones in 1.
    assert [(c["runs_computed"], c["chunks"]) for c in summary["calls"]] == [(8, 3), (2, 1)]
    assert all(c["run_seconds"] > 0 for c in summary["calls"])
    assert _cli("sweep", config, "--out", out, "--quiet", "--chunk-size", "3") == 0  # finished: nothing computed
    again = json.loads((out / "summary.json").read_text())
    assert again["runs_computed"] == 0 and again["calls"] == summary["calls"]
    _same(sw.load(out), reference)
    # An asked-for chunk larger than the whole sweep is honoured too (padded): one shape for any sweep.
    other = tmp_path / "other"
    assert _cli("sweep", config, "--out", other, "--quiet", "--chunk-size", "12") == 0
    assert json.loads((other / "summary.json").read_text())["chunk_size"] == 12
    _same(sw.load(other), reference)


# ----------------------------------------------------------------------------
# The batch a chunk was computed at: recorded, and never mixed on resume
# ----------------------------------------------------------------------------


@jax.custom_batching.custom_vmap
def _plus_batch_size(x):
    return x


@_plus_batch_size.def_vmap
def _plus_batch_size_rule(axis_size, in_batched, x):
    return x + axis_size, in_batched[0]


@pytest.fixture
def batch_dependent(monkeypatch):
    """LineSearch whose Δθ record is shifted by the batch size of the program it runs in: a stand-in for
    XLA rounding a DQN run differently at another batch size (benchmarks/README.md), at LineSearch's cost."""
    from jaxreplay import experiments
    from jaxreplay.engine import execute

    real = ls.EXPERIMENT

    def advance(state, hparams, setup):
        state, record = real.advance(state, hparams, setup)
        return state, dict(record, dtheta=_plus_batch_size(record["dtheta"]))

    fake = real._replace(advance=advance)
    monkeypatch.setattr(experiments, "get", lambda name: fake if name == "linesearch" else real)
    execute.clear_program_cache()  # (programs are cached by experiment name and setup)
    yield
    execute.clear_program_cache()


def test_a_resume_computes_its_missing_runs_at_the_recorded_batch_or_refuses(tmp_path, batch_dependent):
    sweep = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))  # 8 runs
    reference = sw.run(sweep, tmp_path / "ref", chunk_size=2, progress=False).dataset
    default = sw.run(sweep, None, progress=False)  # all 8 runs in one program: Δθ shifted by 8, not 2
    assert default.stats.chunk_size == 8
    np.testing.assert_allclose(default.dataset.dtheta - reference.dtheta, 6.0)
    out = tmp_path / "out"
    sw.run(sweep, out, chunk_size=2, progress=False)
    chunks = sorted((out / "chunks").glob("runs-*.npz"))
    # Resumed without a chunk size: not at the default 8 (mixing runs of two programs), at the recorded 2.
    chunks[-1].unlink()
    resumed = sw.run(sweep, out, progress=False)
    _same(resumed.dataset, reference)
    assert (resumed.stats.runs_computed, resumed.stats.chunk_size) == (2, 2)
    with np.load(chunks[0], allow_pickle=False) as data:
        recorded = json.loads(str(data["meta.batch"]))
    device = jax.devices()[0]
    # LineSearch's compiler options on this platform (on the CPU: without YNNPACK's fusions) are part of the batch.
    from jaxreplay.engine import plan as plan_lib

    options = plan_lib.compiler_options_text(sweep.exp.compiler_options.get(device.platform, {}))
    assert recorded == dict(platform=device.platform, device_kind=device.device_kind, devices=1, runs_per_device=2,
                            xla_flags=recorded["xla_flags"], batch_independence_flags=False,
                            xla_version=plan_lib.xla_version(), program=recorded["program"],
                            prng="threefry2x32, partitionable",
                            jax_settings="matmul precision default, shardy partitioner",
                            defaults=json.dumps(sweep.unset_hyperparameters()),
                            **({"compiler_options": options} if options else {}),
                            **({"cpu_threads": batch_lib.cpu_thread_pool_size(1)} if device.platform == "cpu" else {}))
    assert re.fullmatch(r"[0-9a-f]{16}", recorded["program"])
    assert device.platform != "cpu" or options == "xla_cpu_experimental_ynn_fusion_type="
    assert json.loads((out / "sweep.json").read_text())["batch"] == recorded

    # Asked for another chunk size: refused, naming it and the recorded one; nothing written.
    chunks[0].unlink()
    before = sorted(p.name for p in (out / "chunks").iterdir())
    refused = (r"^\S+ holds runs computed at 2 run\(s\) per device on 1 × .* \(chunk_size 2\), but chunk_size 4 "
               r"asked for computes its 2 missing runs at 4 per device: "
               r"rerun with chunk_size 2 \(--chunk-size 2\) or none")
    with pytest.raises(ValueError, match=refused):
        sw.run(sweep, out, chunk_size=4, progress=False)
    assert sorted(p.name for p in (out / "chunks").iterdir()) == before
    # A finished sweep is only assembled: any chunk size is fine, the manifest keeps the recorded batch.
    sw.run(sweep, out, chunk_size=2, progress=False)
    _same(sw.run(sweep, out, chunk_size=4, progress=False).dataset, reference)
    assert json.loads((out / "sweep.json").read_text())["batch"] == recorded


def test_a_resume_at_another_chunk_size_is_refused_in_one_line(tmp_path, capsys):
    config = _write(tmp_path, TINY_TOML)
    out = tmp_path / "out"
    assert _cli("sweep", config, "--out", out, "--quiet", "--chunk-size", "3") == 0
    sorted((out / "chunks").glob("runs-*.npz"))[-1].unlink()
    capsys.readouterr()
    assert _cli("sweep", config, "--out", out, "--quiet", "--chunk-size", "2") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"jaxreplay sweep: error: {out} holds runs computed at 3 run(s) ")
    assert "rerun with chunk_size 3 (--chunk-size 3) or none, or use a new output folder" in err
    assert _cli("sweep", config, "--out", out, "--quiet") == 0  # without one: at the recorded 3
    assert json.loads((out / "summary.json").read_text())["chunk_size"] == 3


def test_the_chunks_of_two_batches_in_one_folder_are_refused(tmp_path):
    sweep = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))
    out = tmp_path / "out"
    sw.run(sweep, out, chunk_size=4, progress=False)
    first = sorted((out / "chunks").glob("runs-*.npz"))[0]
    with np.load(first, allow_pickle=False) as data:
        arrays = dict(data)
    batch = json.loads(str(arrays["meta.batch"]))
    arrays["meta.batch"] = np.array(json.dumps(dict(batch, runs_per_device=8), sort_keys=True))
    np.savez(first, **arrays)  # as an older jaxreplay's mixed resume (plus the record) would have left it
    with pytest.raises(ValueError, match=r"holds chunks computed at different batches .*delete the chunks of one"):
        sw.run(sweep, out, progress=False)


def test_a_chunk_the_estimate_lets_through_but_xla_counts_over_the_budget_is_made_smaller(monkeypatch):
    # On an H100 a 10^6-run sweep planned by the estimate alone ran out of device memory. Here the estimate
    # is made 1 byte a run (far too low): the plan's chunk of all 64 runs is measured by XLA's accounting of
    # its compiled program, found over the budget, and planned again with each run's bytes as XLA counts them.
    from jaxreplay.engine import execute, plan as plan_lib

    sweep = sw.Sweep("linesearch", seeds=64, setup={"steps": 30, "max_capacity": 200, "max_batch_size": 2},
                     fixed={"batch_size": 2, "memory_size": 100})
    programs = execute.programs_for(sweep, jax.local_devices())
    need_64 = programs.device_bytes(sweep, np.arange(64))
    assert need_64 > 64 * 200 * 4 * 4  # at least the 64 rings of 200 slots × 4 float32 fields
    budget = need_64 // 3
    monkeypatch.setattr(plan_lib, "device_bytes", lambda fp: 1)
    result = sw.run(sweep, None, memory_budget=budget, progress=False)
    chunk = result.stats.chunk_size
    assert 8 <= chunk < 64 and result.stats.chunks == -(-64 // chunk)
    assert programs.device_bytes(sweep, np.arange(chunk)) <= budget  # what XLA counts for the chunk fits
    assert programs.device_bytes(sweep, np.arange(chunk + 8)) > budget  # and it is not needlessly small
    same = sw.run(sweep, None, chunk_size=chunk, progress=False)
    np.testing.assert_array_equal(result.dataset.final_metric.values, same.dataset.final_metric.values)
    # Resuming keeps the recorded chunk; an estimate that fits is not second-guessed (one plan, no re-plan).
    monkeypatch.undo()
    fits = sw.run(sweep, None, progress=False)
    assert fits.stats.chunk_size == 64


def test_preparing_a_folder_deletes_only_a_killed_sweeps_own_temp_files(tmp_path):
    """A killed writer's temp files are deleted where this folder's writers write (the folder and its chunks),
    not in a subfolder: that may be another sweep, live under its own lock, whose chunk in flight it would be.
    And only those of the files a sweep writes: every `.tmp-*` was deleted, a user's `.tmp-draft.md` and another
    command's write in flight in the folder (which then failed, advising to free space) included (found by a
    probe)."""
    from jaxreplay._files import TEMP_PREFIX

    sweep = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))
    out = tmp_path / "out"
    (out / "chunks").mkdir(parents=True)
    (out / "inner" / "chunks").mkdir(parents=True)
    killed = [out / f"{TEMP_PREFIX}{'a' * 32}-results.nc", out / f"{TEMP_PREFIX}{'d' * 32}-summary.json",
              out / "chunks" / f"{TEMP_PREFIX}{'b' * 32}-runs-000000000-0000004-0123abcd.npz"]
    kept = [out / "inner" / "chunks" / f"{TEMP_PREFIX}{'c' * 32}-runs-000000000-0000004-0123abcd.npz",
            out / f"{TEMP_PREFIX}draft.md", out / "chunks" / f"{TEMP_PREFIX}mine",
            out / f"{TEMP_PREFIX}{'e' * 32}-README.md"]  # (a subfolder's, the user's, another command's in flight)
    for path in (*killed, *kept):
        path.write_bytes(b"partial")
    sw.run(sweep, out, progress=False)
    assert not any(path.exists() for path in killed)
    assert [path.read_bytes() for path in kept] == [b"partial"] * len(kept)


def test_runs_computed_by_another_xla_are_never_mixed_into_a_resumed_sweep(tmp_path, monkeypatch):
    """Chunks record the JAX and jaxlib versions that compiled them: a sweep resumed under others is refused,
    naming both (it used to finish without a word, results.nc then naming only the resuming versions). A folder
    recorded before versions were resumes under any, and stays one batch: a rerun computes nothing."""
    sweep = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))
    out = tmp_path / "out"
    sw.run(sweep, out, chunk_size=2, progress=False)
    import jaxlib

    from jaxreplay.engine import plan as plan_lib

    assert plan_lib.xla_version() == f"jax {jax.__version__}, jaxlib {jaxlib.__version__}"
    assert json.loads((out / "sweep.json").read_text())["batch"]["xla_version"] == plan_lib.xla_version()
    chunks = sorted((out / "chunks").glob("*.npz"))
    chunks[-1].unlink()
    monkeypatch.setattr(plan_lib, "xla_version", lambda: "jax 9.9.9, jaxlib 9.9.9")
    with pytest.raises(ValueError, match=r"with jax .*; this process has jax 9\.9\.9, jaxlib 9\.9\.9\. Finish the sweep"):
        sw.run(sweep, out, chunk_size=2, progress=False)
    # Recorded without versions (an older jaxreplay): resumed, and the new chunks are recorded the same way.
    old = tmp_path / "old"
    monkeypatch.setattr(plan_lib, "xla_version", lambda: "")
    sw.run(sweep, old, chunk_size=2, progress=False)
    sorted((old / "chunks").glob("*.npz"))[-1].unlink()
    monkeypatch.undo()
    assert sw.run(sweep, old, chunk_size=2, progress=False).stats.runs_computed == 2
    assert sw.run(sweep, old, chunk_size=2, progress=False).stats.runs_computed == 0


def test_a_resume_after_a_default_changed_is_refused_naming_it(tmp_path, monkeypatch):
    """A hyperparameter the sweep leaves at its default runs at the experiment's default, which a later jaxreplay
    may change: neither the config nor the programs (a traced input) show it, and a probe's resume after the
    default step size changed mixed runs at 0.01 and at 0.02 in one results.nc. The folder records the values;
    a resume under other defaults is refused, naming them; a folder recorded before resumes and stays one batch."""
    sweep = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))
    assert sweep.unset_hyperparameters() == {"adaptive_interval": 20, "adaptive_num_old": 50, "adaptive_tolerance": 0.0,
                                             "discount": 0.0, "priority_exponent": 2.0}
    out = tmp_path / "out"
    sw.run(sweep, out, chunk_size=2, progress=False)
    assert json.loads(json.loads((out / "sweep.json").read_text())["batch"]["defaults"]) == sweep.unset_hyperparameters()
    sorted((out / "chunks").glob("*.npz"))[-1].unlink()
    changed = ls.Hyperparameters()._replace(discount=0.5)
    monkeypatch.setattr(ls.Hyperparameters.__new__, "__defaults__", tuple(changed))
    assert sweep.unset_hyperparameters()["discount"] == 0.5
    with pytest.raises(ValueError, match=r"the hyperparameters it does not set at that jaxreplay's defaults; this "
                                         r"jaxreplay's differ \(discount 0\.0 there, 0\.5 here\), so its missing runs"):
        sw.run(sweep, out, chunk_size=2, progress=False)
    # Recorded before the defaults were (an older jaxreplay): resumed, and its new chunks record none either.
    from jaxreplay.engine import plan as plan_lib

    old = tmp_path / "old"
    monkeypatch.undo()
    monkeypatch.setattr(plan_lib.Batch, "__new__", _without_defaults(plan_lib.Batch.__new__))
    sw.run(sweep, old, chunk_size=2, progress=False)
    monkeypatch.undo()
    sorted((old / "chunks").glob("*.npz"))[-1].unlink()
    assert "defaults" not in json.loads((old / "sweep.json").read_text())["batch"]
    assert sw.run(sweep, old, chunk_size=2, progress=False).stats.runs_computed == 2
    assert sw.run(sweep, old, chunk_size=2, progress=False).stats.runs_computed == 0


def test_a_sweep_of_more_configurations_than_it_may_have_is_refused_before_they_are_checked(monkeypatch):
    """6 axes of 40 values (4.1e9 configurations) spent hours checking each configuration (3 s per 10^6) before
    the plan refused the sweep for memory (a probe): refused before any configuration is checked, with the
    numbers."""
    grid = {name: [float(i) for i in range(1, 41)] for name in ("step_size", "discount", "priority_exponent")}
    grid |= {name: list(range(1, 41)) for name in ("memory_size", "adaptive_num_old", "adaptive_interval")}
    checked = []  # (the blocks of configurations the declaration builds to check them)
    monkeypatch.setattr(declaration.Sweep, "hyperparameters", lambda self, runs=None: checked.append(runs))
    with pytest.raises(ValueError, match=r"^the sweep has 4096000000 configurations, more than a sweep may have "
                                         r"\(2147483647, which the engine numbers as int32\): use a smaller grid"):
        sw.Sweep.from_dict({"experiment": "linesearch", "seeds": 1, "grid": grid})
    assert checked == []


def test_chunks_with_different_arrays_are_refused_naming_both(tmp_path):
    """A chunk rewritten as a valid npz without one of its arrays read as zeros there (a run that had diverged, NaN,
    then read 0.0), with no word; one with a shorter record or an extra array failed naming no file (a probe).
    Which of the two is wrong cannot be told from the chunks: the sweep stops, naming both and the arrays."""
    sweep = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))
    out = tmp_path / "out"
    sw.run(sweep, out, chunk_size=2, progress=False)
    (out / "results.nc").unlink()
    first, *_, last = sorted((out / "chunks").glob("*.npz"))
    with np.load(last) as data:
        arrays = {k: data[k] for k in data.files if k != "summary.final_metric"}
    np.savez(last, **arrays)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(out))} holds chunks of one sweep with different arrays "
                                         rf"\(summary\.final_metric float32\[\] in chunks/{first.name}, absent in "
                                         rf"chunks/{last.name}\): one of them was edited .* Delete the one that is "
                                         r"wrong \(or both; their runs are recomputed\) and rerun\.$"):
        sw.run(sweep, out, chunk_size=2, progress=False)
    assert not (out / "results.nc").exists()
    last.unlink()  # (the wrong one deleted: its runs computed again, the results whole)
    assert sw.run(sweep, out, chunk_size=2, progress=False).stats.runs_computed == 2


def test_numpy_grids_and_a_byte_order_mark_are_read_as_what_they_hold(tmp_path):
    """A grid given as a NumPy array (np.linspace, np.arange: the usual grid in Python) and a fixed value given as a
    0-d array were refused ("must be a list of values"); a TOML file saved with a UTF-8 byte-order mark was "not
    valid TOML: Invalid statement (at line 1, column 1)" (a probe). Each is the sweep of the values it holds."""
    plain = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))
    arrays = sw.Sweep("linesearch", seeds=2, setup=dict(plain.setup), fixed={"step_size": np.array(0.05)},
                      grid={"memory_size": np.array([5, 20]), "batch_size": np.arange(1, 3)})
    assert arrays.fingerprint() == plain.fingerprint()
    marked = tmp_path / "marked.toml"
    marked.write_bytes("\ufeff".encode() + TINY_TOML.encode())
    assert sw.Sweep.from_toml(marked).fingerprint() == plain.fingerprint()
    for grid, message in (({"memory_size": np.array([[5, 20]])}, r"^grid\.memory_size must be a list of values"),
                          ({"memory_size": np.array([True, False])}, r"^grid\.memory_size must be a number, got")):
        with pytest.raises(ValueError, match=message):
            sw.Sweep("linesearch", grid=grid)


def _without_defaults(new):
    """``Batch.__new__`` that records no defaults, as a jaxreplay did before it recorded them."""
    return lambda cls, *args, **kwargs: new(cls, *args, **{**kwargs, "defaults": ""})


def _shifted(env_params):
    """``env_params`` with the start moved by 1e-6: another program that builds the same sweep."""
    return lambda h, s: env_params(h, s).replace(initial_position=env_params(h, s).initial_position + 1e-6)


def test_runs_computed_by_another_program_are_never_mixed_into_a_resumed_sweep(tmp_path, monkeypatch):
    """Chunks record a fingerprint of the lowered programs that computed them: a sweep resumed after the code
    that builds them changed (here LineSearch's environment parameters, 1e-6 off) is refused before anything
    is computed (it finished without a word, mixing runs of the two codes). The same code resumes, and a
    folder recorded before programs were resumes under any and stays one batch."""
    from jaxreplay.engine import execute as execute_lib
    from jaxreplay.engine import runner as runner_lib
    from jaxreplay.experiments import linesearch as ls

    sweep = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))
    out = tmp_path / "out"
    reference = sw.run(sweep, out, chunk_size=2, progress=False).dataset
    program = json.loads((out / "sweep.json").read_text())["batch"]["program"]
    assert re.fullmatch(r"[0-9a-f]{16}", program)
    chunks = sorted((out / "chunks").glob("*.npz"))
    chunks[-1].unlink()
    original = ls._env_params
    monkeypatch.setattr(ls, "_env_params", _shifted(original))
    execute_lib.clear_program_cache()
    refused = rf"holds runs computed by other programs than this jaxreplay builds for its sweep \(program {program}; now "
    with pytest.raises(ValueError, match=refused):
        sw.run(sweep, out, chunk_size=2, progress=False)
    assert len(list((out / "chunks").glob("*.npz"))) == len(chunks) - 1
    monkeypatch.undo()
    execute_lib.clear_program_cache()
    resumed = sw.run(sweep, out, chunk_size=2, progress=False)
    assert resumed.stats.runs_computed == 2
    _same(resumed.dataset, reference)
    # Recorded before programs were (an older jaxreplay): resumed under any, and recorded the same way.
    old = tmp_path / "old"
    monkeypatch.setattr(runner_lib._Planner, "program", lambda self, plan: "")
    sw.run(sweep, old, chunk_size=2, progress=False)
    monkeypatch.undo()
    assert "program" not in json.loads((old / "sweep.json").read_text())["batch"]
    sorted((old / "chunks").glob("*.npz"))[-1].unlink()
    monkeypatch.setattr(ls, "_env_params", _shifted(original))
    execute_lib.clear_program_cache()
    assert sw.run(sweep, old, chunk_size=2, progress=False).stats.runs_computed == 2
    monkeypatch.undo()
    execute_lib.clear_program_cache()
    assert sw.run(sweep, old, chunk_size=2, progress=False).stats.runs_computed == 0


def test_a_huge_sweep_is_refused_before_anything_of_its_size_is_made(monkeypatch, tmp_path):
    """The declaration checked every configuration in one array (a 5e8-configuration grid asked NumPy for
    3.7 GiB, a traceback naming no key), and 2^31 seeds allocated a flag a run before the host-memory check
    (found by a probe). Configurations are checked a block at a time (a bad one found in a later block is
    named as before), and a sweep whose bookkeeping alone exceeds the host's memory is refused in one line."""
    from jaxreplay.engine import declaration

    monkeypatch.setattr(declaration, "_CHECK_BLOCK", 4)
    config = {"experiment": "linesearch", "setup": {"max_capacity": 100}, "grid": {"memory_size": list(range(1, 11)) + [500]}}
    with pytest.raises(ValueError, match=r"^grid\.memory_size = 500: memory_size must be <= 100"):
        sw.Sweep.from_dict(config)
    huge = sw.Sweep.from_dict({"experiment": "linesearch", "seeds": 2147483647, "grid": {"memory_size": [10, 20, 30]}})
    with pytest.raises(MemoryError, match=r"^the sweep has 6442450941 runs \(3 configurations × 2147483647 seeds\): "
                                          r"keeping track of them alone needs about 54\.0 GiB of host memory"):
        sw.run(huge, tmp_path / "huge", memory_budget=1 << 30, progress=False)
    assert not (tmp_path / "huge").exists()


def test_a_sweep_runs_in_float32_under_a_global_x64_mode(tmp_path):
    """Under JAX_ENABLE_X64=1 a sweep died tracing (a scan's float32 carry against float64 outputs): it now runs
    in a float32 scope, with the same bits as without x64."""
    config = _write(tmp_path, TINY_TOML)
    script = textwrap.dedent(f"""
        import numpy as np
        from jaxreplay.engine import sweep as sw
        r = sw.run(sw.Sweep.from_toml({str(config)!r}), None, progress=False)
        print(r.dataset.final_metric.dtype, np.asarray(r.dataset.final_metric).tobytes().hex())
        """)
    outputs = []
    for x64 in ("1", "0"):
        env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_ENABLE_X64=x64)
        proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
                              timeout=240)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout.split())
    assert outputs[0] == outputs[1] and outputs[0][0] == "float32"


def test_a_truncated_results_file_is_named_and_a_rerun_writes_it_again(tmp_path):
    """``load`` of a truncated ``results.nc`` says which file and what to do (it raised NumPy internals), and the
    same command writes it again from the chunks; an unfinished folder says it is unfinished."""
    sweep = sw.Sweep.from_toml(_write(tmp_path, TINY_TOML))
    out = tmp_path / "out"
    reference = sw.run(sweep, out, chunk_size=2, progress=False).dataset
    data = (out / "results.nc").read_bytes()
    (out / "results.nc").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"results\.nc is not a readable results file .*rerun the sweep's command"):
        sw.load(out)
    sw.run(sweep, out, chunk_size=2, progress=False)
    _same(sw.load(out), reference)
    (out / "results.nc").unlink()
    with pytest.raises(FileNotFoundError, match=r"holds no results\.nc yet: its sweep has not finished"):
        sw.load(out)


@pytest.mark.parametrize("kwargs, message", [
    ({"fixed": {"step_size": 10**400}}, r"^fixed\.step_size = 1000.* does not fit a float32"),
    ({"fixed": {"memory_size": 10**400}}, r"^fixed\.memory_size = 1000.* does not fit an int32"),
    ({"setup": {"speed": 10**400}}, r"^setup\.speed = 1000.* does not fit a float32"),
    ({"setup": {"initial_weights": [10**400, 1]}}, r"initial_weights must be two numbers"),
    ({"setup": {"subsample_size": 10**400}}, r"subsample_size must be <= 2147483647"),
])
def test_integers_beyond_float64_given_to_the_library_are_named_not_an_overflow_error(kwargs, message):
    """Python ints have no size limit: float(10**400) raised OverflowError in the checks (a traceback naming
    nothing), and a subsample size of 10**400 was accepted."""
    with pytest.raises(ValueError, match=message):
        sw.Sweep("linesearch", **kwargs)


def test_a_sweep_refuses_another_commands_folder_and_counts_only_its_own_calls(tmp_path, capsys):
    """`jaxreplay sweep` into a folder `reproduce linesearch` claimed replaced its record (summary.json), and
    `reproduce all` took a sweep's summary.json in its linesearch/ for a damaged record of its own, deleted it
    and wrote its own; a sweep begun where another sweep's summary.json was left counted that sweep's calls as
    its own (10 runs computed for 6); found by a probe."""
    from jaxreplay._files import claim_folder
    from jaxreplay.paper.reproduce import paper

    config = _write(tmp_path, TINY_TOML)
    claimed = claim_folder(tmp_path / "ls", "reproduce linesearch")
    (claimed / "summary.json").write_text('{"settings": {}}')
    assert _cli("sweep", config, "--out", claimed, "--quiet") == 2
    assert capsys.readouterr().err.endswith(f"{claimed} holds the output of `jaxreplay reproduce linesearch`; "
                                            "`jaxreplay sweep` would overwrite its files: give it another --out.\n")
    assert (claimed / "summary.json").read_text() == '{"settings": {}}'

    sweep_folder = tmp_path / "all" / "linesearch"
    assert _cli("sweep", config, "--out", sweep_folder, "--quiet") == 0
    (tmp_path / "all" / "report.md").write_text("the earlier table")
    before = {p: p.read_bytes() for p in (tmp_path / "all").rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"linesearch holds the output of `jaxreplay sweep`; `jaxreplay reproduce "
                                         r"linesearch` would overwrite its files"):
        paper.reproduce(tmp_path / "all", quick=True, envs=("CartPole-v1",), linesearch_mode="tiny")
    assert {p: p.read_bytes() for p in (tmp_path / "all").rglob("*") if p.is_file()} == before

    # Another sweep's leftover summary.json: its calls are not this sweep's.
    for name in ("sweep.json", "results.nc"):
        (sweep_folder / name).unlink()
    shutil.rmtree(sweep_folder / "chunks")
    other = _write(tmp_path, TINY_TOML.replace("memory_size = [5, 20]", "memory_size = [5, 10, 20]"), "other.toml")
    assert _cli("sweep", other, "--out", sweep_folder, "--quiet") == 0
    calls = json.loads((sweep_folder / "summary.json").read_text())["calls"]
    assert [c["runs_computed"] for c in calls] == [12]
    # Another sweep's record with its results (chunks and sweep.json gone): its results.nc is not replaced.
    for name in ("sweep.json",):
        (sweep_folder / name).unlink()
    shutil.rmtree(sweep_folder / "chunks")
    results_before = (sweep_folder / "results.nc").read_bytes()
    assert _cli("sweep", config, "--out", sweep_folder, "--quiet") == 2
    assert capsys.readouterr().err.endswith(
        f"{sweep_folder} holds results.nc, the results of another sweep (its summary.json records another fingerprint), "
        "and `jaxreplay sweep` would replace it: move it or give another folder.\n")
    assert (sweep_folder / "results.nc").read_bytes() == results_before


def test_runs_computed_one_a_device_for_want_of_memory_are_warned_about():
    # Budgets from 4 runs down to about 1 (XLA's accounting of the compiled chunk decides where 2 stop fitting):
    # a call that computes its runs 1 a device, in the program XLA compiles with the run axis squeezed away
    # (other kernels, other last bits for DQN), warns naming the budget; one that computes them 2 a device
    # does not. Both happen.
    import warnings

    from jaxreplay.engine import plan as plan_lib

    sweep = sw.Sweep("linesearch", seeds=2, setup={"steps": 20, "max_capacity": 20, "max_batch_size": 2},
                     fixed={"step_size": 0.05, "memory_size": 5, "batch_size": 2})
    per = plan_lib.estimate_bytes_per_run(sweep)
    seen, datasets = set(), []
    for budget in (per * 4, per * 3, per * 2, per * 3 // 2, per * 5 // 4):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = sw.run(sweep, None, memory_budget=budget, progress=False)
            except MemoryError:  # (not even one run fits what XLA counts)
                continue
        warned = [w for w in caught if issubclass(w.category, sw.SweepWarning)]
        assert len(warned) == (result.stats.chunk_size == 1), (budget, result.stats.chunk_size, warned)
        if warned:
            assert re.match(rf"runs are computed 1 a device: the memory budget \({budget:,} bytes\) holds no more "
                            r".* Raise memory_budget / memory_fraction", str(warned[0].message))
        seen.add(result.stats.chunk_size)
        datasets.append(result.dataset)
    assert seen == {1, 2}
    for dataset in datasets[1:]:  # (LineSearch on the CPU: its compiler options make the chunk not matter)
        _same(dataset, datasets[0])
