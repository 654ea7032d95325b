"""The sweep engine's parts on their own: the pure plan and the chunk store (no compilation here, but for one
matrix product in a subprocess that counts XLA:CPU's threads)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from jaxreplay.engine import batch as batch_lib
from jaxreplay.engine import plan as plan_lib
from jaxreplay.engine import store as store_lib
from jaxreplay.engine import sweep as sw

SWEEP = sw.Sweep("linesearch", seeds=2, setup={"steps": 20, "max_capacity": 20, "max_batch_size": 2},
                 fixed={"step_size": 0.05}, grid={"memory_size": [5, 20], "batch_size": [1, 2]})
PLENTY = plan_lib.Resources(memory_budget=1 << 30, host_memory=1 << 30, free_disk=1 << 30, num_devices=1)


def test_plan_splits_the_missing_runs_between_processes():
    done = np.zeros(8, bool)
    done[[1, 2, 6]] = True  # missing: 0, 3, 4, 5, 7
    plans = [plan_lib.make_plan(SWEEP, done, PLENTY, chunk_size=2, process=p, processes=2) for p in (0, 1)]
    assert [c.tolist() for c in plans[0].chunks] == [[0, 3], [7]]
    assert [c.tolist() for c in plans[1].chunks] == [[4, 5]]
    assert [p.runs_to_compute for p in plans] == [3, 2] and plans[0].runs_done == 3
    assert plans[0].chunk_size == 2 and plans[0].num_runs == 8
    per_result = sw.estimate_result_bytes_per_run(SWEEP)
    assert plans[0].result_bytes_per_run == per_result == 254
    assert plans[0].bytes_per_run == sw.estimate_bytes_per_run(SWEEP)
    # Default chunk on CPU: no more than the sweep's runs (and the device count divides it).
    four = PLENTY._replace(num_devices=4)
    assert plan_lib.make_plan(SWEEP, np.zeros(8, bool), four).chunk_size == 8
    assert plan_lib.make_plan(SWEEP, np.zeros(8, bool), four, chunk_size=11).chunk_size == 8  # a multiple of 4
    # Never one run per device where two fit (XLA compiles a batch of one into another program).
    assert plan_lib.make_plan(SWEEP, np.zeros(8, bool), four, chunk_size=7).chunk_size == 8
    assert plan_lib.make_plan(SWEEP, np.zeros(8, bool), PLENTY, chunk_size=1).chunk_size == 2
    per_run = sw.estimate_bytes_per_run(SWEEP)
    tight = PLENTY._replace(memory_budget=per_run * 3 // 2)  # one run fits, two do not: one it is
    assert plan_lib.make_plan(SWEEP, np.zeros(8, bool), tight).chunk_size == 1


def test_a_refusal_names_the_fields_to_lower_in_the_parts_of_its_message():
    """A ResourceError is the numbers, the library's advice, the fields that advice says to lower and what dominates;
    its message is the numbers then the advice, so a command gives its own advice from the parts."""
    per_run = sw.estimate_bytes_per_run(SWEEP)
    with pytest.raises(plan_lib.ResourceError) as device:
        plan_lib.make_plan(SWEEP, np.zeros(8, bool), PLENTY._replace(memory_budget=per_run - 1))
    e = device.value
    assert isinstance(e, MemoryError) and str(e) == f"{e.problem} {e.advice}"
    assert e.problem == (f"one run needs about {plan_lib.mib(per_run)} of device memory and 1 device(s) need at least "
                         f"1 runs per chunk ({plan_lib.mib(per_run)}), but the memory budget is {plan_lib.mib(per_run - 1)}.")
    assert e.advice == ("Lower setup.max_capacity (replay storage dominates), shorten a segment, or raise "
                        "memory_budget / memory_fraction.")
    assert e.lower == ("setup.max_capacity",) and e.cause == "replay storage dominates"
    # On a CPU of 4 devices (cores sharing the host's memory) where 2 runs fit, the numbers say how many would do.
    with pytest.raises(plan_lib.ResourceError, match=r"4 device\(s\) need at least 4 runs per chunk .*\. On a CPU, 2 "
                       r"device\(s\) would hold it: set JAX_NUM_CPU_DEVICES=2 in the environment .* importing jax\. Lower"):
        plan_lib.make_plan(SWEEP, np.zeros(8, bool), PLENTY._replace(memory_budget=per_run * 5 // 2, num_devices=4))
    # Not when resuming a folder: its runs keep their device count (the other refusal would send the user back).
    four_done = plan_lib.make_plan(SWEEP, np.zeros(8, bool), PLENTY._replace(num_devices=4)).batch
    with pytest.raises(plan_lib.ResourceError) as resumed:
        plan_lib.make_plan(SWEEP, np.arange(8) < 4, PLENTY._replace(memory_budget=per_run * 5 // 2, num_devices=4),
                           recorded=four_done)
    assert "JAX_NUM_CPU_DEVICES" not in str(resumed.value)
    # A seed reduction on 4 CPU devices needs 4 × seeds runs; the hint counts whole configurations per device.
    reduced = sw.Sweep("linesearch", seeds=3, setup={"steps": 10}, grid={"memory_size": [10, 20]},
                       record={"keep": ["dtheta"], "reduce": "mean"})
    per_reduced = sw.estimate_bytes_per_run(reduced)
    with pytest.raises(plan_lib.ResourceError, match=r"\(7 runs\)\. On a CPU, 2 device\(s\) would hold it: set "
                       r"JAX_NUM_CPU_DEVICES=2 in the environment .* importing jax\."):
        plan_lib.make_plan(reduced, np.zeros(6, bool), PLENTY._replace(memory_budget=per_reduced * 7, num_devices=4))
    with pytest.raises(plan_lib.ResourceError) as gpu:
        plan_lib.make_plan(SWEEP, np.zeros(8, bool), PLENTY._replace(memory_budget=per_run * 5 // 2, num_devices=4,
                                                                     platform="gpu"))
    assert "JAX_NUM_CPU_DEVICES" not in str(gpu.value)
    # A huge minibatch: its step's temporaries dominate, and the advice names the minibatch size.
    huge = sw.Sweep("linesearch", setup={"steps": 10, "max_batch_size": 10**8}, fixed={"batch_size": 10**8})
    with pytest.raises(plan_lib.ResourceError) as temporaries:
        plan_lib.make_plan(huge, np.zeros(1, bool), PLENTY._replace(memory_budget=2 << 30))
    e = temporaries.value
    assert e.lower == ("setup.max_batch_size", "setup.batch_size")
    # Its 8 largest arrays: the gathered rows (10^8 × 4 float32, 1.5 GiB) and seven of 10^8 × 4 bytes.
    assert e.cause == "A step's temporaries dominate (about 4.1 GiB)"
    assert e.advice.startswith(f"{e.cause}: lower the minibatch size (setup.max_batch_size, setup.batch_size")
    # A wide network and a small memory: the rest of the state dominates, and the advice does not say to lower
    # setup.max_capacity (at 1 it would still be refused).
    wide = sw.Sweep("dqn", setup={"total_steps": 200, "steps_per_segment": 100, "hidden_sizes": [2048, 2048],
                                  "max_capacity": 200}, fixed={"memory_size": 200})
    with pytest.raises(plan_lib.ResourceError) as network:
        plan_lib.make_plan(wide, np.zeros(1, bool), PLENTY._replace(memory_budget=16 << 20))
    e = network.value
    assert e.lower == () and "max_capacity" not in str(e), str(e)
    assert e.cause.startswith("the state besides its replay storage dominates: the storage is about")
    assert e.advice.startswith("Lower the setup's sizes that make the rest of a run's state, such as a network's widths")
    per_result = sw.estimate_result_bytes_per_run(SWEEP)
    with pytest.raises(plan_lib.ResourceError) as host:
        plan_lib.make_plan(SWEEP, np.zeros(8, bool), PLENTY._replace(host_memory=8 * per_result))
    assert host.value.lower == ("seeds", "setup.steps") and host.value.cause is None
    assert host.value.problem.endswith("but only 2.0 KiB is available.")
    # On a CPU the chunk's device memory is host memory: the advice names a smaller chunk size.
    assert "or a smaller chunk_size (--chunk-size; a chunk's CPU device memory is host memory)" in host.value.advice


def test_plan_refusals_carry_their_numbers_and_touch_nothing(tmp_path):
    out = tmp_path / "never"
    per_run = sw.estimate_bytes_per_run(SWEEP)
    per_result = sw.estimate_result_bytes_per_run(SWEEP)
    with pytest.raises(MemoryError, match="one run needs about"):
        plan_lib.make_plan(SWEEP, np.zeros(8, bool), PLENTY._replace(memory_budget=per_run - 1), out=out)
    with pytest.raises(MemoryError, match=r"8 runs × 254 B of results each = 2.0 KiB assembled"):
        plan_lib.make_plan(SWEEP, np.zeros(8, bool), PLENTY._replace(host_memory=8 * per_result), out=out)
    done = np.arange(8) < 5  # 3 runs to compute: 3 chunk files + results.nc of 8
    need = 11 * per_result
    assert plan_lib.make_plan(SWEEP, done, PLENTY._replace(free_disk=need), out=out).disk_bytes == need
    with pytest.raises(MemoryError, match=r"for the 3 runs still to compute"):
        plan_lib.make_plan(SWEEP, done, PLENTY._replace(free_disk=need - 1), out=out)
    with pytest.raises(ValueError, match=r"not writable .* 3 of 8 runs are still to compute"):
        plan_lib.make_plan(SWEEP, done, PLENTY, out=out, writable=False)
    assert plan_lib.make_plan(SWEEP, np.ones(8, bool), PLENTY, out=out, writable=False).chunks == ()
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        plan_lib.make_plan(SWEEP, done, PLENTY, chunk_size=0)
    for bad in (True, 2.0, "2"):  # one check (plan.check_run_options) for the plan, run() and [run]
        with pytest.raises(ValueError, match=f"^chunk_size must be a positive integer, got {bad!r}"):
            plan_lib.make_plan(SWEEP, done, PLENTY, chunk_size=bad)
        with pytest.raises(ValueError, match=f"^chunk_size must be a positive integer, got {bad!r}"):
            sw.run(SWEEP, out, chunk_size=bad, progress=False)
    assert not out.exists()


def test_store_scan_changes_nothing_and_prepare_sets_damaged_chunks_aside(tmp_path):
    out = tmp_path / "out"
    store = store_lib.ChunkStore(out, SWEEP)
    scan = store.scan()
    assert not out.exists() and scan.write_manifest and not scan.done.any()
    store.prepare(scan)
    assert json.loads((out / "sweep.json").read_text())["fingerprint"] == SWEEP.fingerprint()
    part = {"record.x": np.arange(6, dtype=np.float32).reshape(3, 2), "run_index": np.array([2, 3, 4])}
    store.save(part)
    (out / "chunks" / "runs-000000005-0000001-bad.npz").write_bytes(b"not a zip")
    scan = store_lib.ChunkStore(out, SWEEP).scan()
    assert np.flatnonzero(scan.done).tolist() == [2, 3, 4] and not scan.write_manifest
    assert [p.name for p, _ in scan.damaged] == ["runs-000000005-0000001-bad.npz"]
    assert (out / "chunks" / "runs-000000005-0000001-bad.npz").exists()  # scanning renamed nothing
    with pytest.raises(ValueError, match="is damaged .* rerun from a writable folder"):
        store_lib.ChunkStore(out, SWEEP, repair=False).scan()
    with pytest.warns(store_lib.SweepWarning, match="renamed to runs-000000005-0000001-bad.npz.damaged"):
        store.prepare(scan)
    (back,) = list(store_lib.ChunkStore(out, SWEEP).parts())
    np.testing.assert_array_equal(back["record.x"], part["record.x"])
    np.testing.assert_array_equal(back["run_index"], [2, 3, 4])
    other = sw.Sweep("linesearch", seeds=2, setup=SWEEP.setup, fixed={"step_size": 0.01}, grid=SWEEP.grid)
    with pytest.raises(ValueError, match=r"holds a different sweep \(differs in: fixed\)"):
        store_lib.ChunkStore(out, other).scan()


def test_sweep_is_normalised_once_on_construction():
    from jaxreplay.experiments import linesearch as ls

    a = sw.Sweep("linesearch", setup=ls.Setup(steps=20, max_capacity=20, max_batch_size=2),
                 grid={"memory_size": [5, 20.0]}, fixed={"step_size": 1, "batch_size": 2})
    b = sw.Sweep("linesearch", setup={"steps": 20, "max_capacity": 20, "max_batch_size": 2},
                 grid={"memory_size": (5, 20)}, fixed={"step_size": 1.0, "batch_size": 2})
    assert a == b and a.fingerprint() == b.fingerprint()
    assert a.grid == {"memory_size": (5, 20)} and isinstance(a.grid["memory_size"][1], int)
    assert a.fixed == {"step_size": 1.0, "batch_size": 2} and isinstance(a.fixed["step_size"], float)
    import dataclasses

    c = dataclasses.replace(a, seeds=3)  # replace goes through the same normalisation
    assert c.seeds == 3 and c.setup == a.setup and c.fingerprint() != a.fingerprint()


def test_a_resume_at_another_batch_is_refused_by_the_plan_naming_what_differs(tmp_path):
    out = tmp_path / "out"
    done = np.arange(8) < 4  # 4 runs missing
    options = plan_lib.compiler_options_text(SWEEP.exp.compiler_options["cpu"])
    recorded = plan_lib.Batch("cpu", "cpu", 1, 2, "", compiler_options=options, xla_version=plan_lib.xla_version(),
                              prng="threefry2x32, partitionable",
                              jax_settings="matmul precision default, shardy partitioner",
                              defaults=json.dumps(SWEEP.unset_hyperparameters()))
    # Without a chunk size the recorded one is asked for; with it, or on a finished sweep, anything goes.
    assert plan_lib.make_plan(SWEEP, done, PLENTY, out=out, recorded=recorded).chunk_size == 2
    assert plan_lib.make_plan(SWEEP, done, PLENTY, chunk_size=2, out=out, recorded=recorded).batch == recorded
    # A folder recorded before the PRNG settings were resumes under any (nothing to compare).
    assert plan_lib.make_plan(SWEEP, done, PLENTY, out=out, recorded=recorded._replace(prng="")).batch == recorded
    assert plan_lib.make_plan(SWEEP, done, PLENTY, out=out, recorded=recorded._replace(jax_settings="")
                              ).batch == recorded
    assert plan_lib.make_plan(SWEEP, np.ones(8, bool), PLENTY._replace(platform="gpu"), chunk_size=8,
                              recorded=recorded).chunks == ()
    cases = [
        (dict(chunk_size=4), {}, r"but chunk_size 4 asked for computes its 4 missing runs at 4 per device: rerun with "
                                 r"chunk_size 2 \(--chunk-size 2\) or none"),
        ({}, dict(platform="gpu", device_kind="NVIDIA H100"), r"this process runs on NVIDIA H100 \(gpu\)\. Finish the "
                                                              r"sweep on cpu \(cpu\)"),
        ({}, dict(xla_flags="--xla_cpu_max_isa=AVX2"), r"this process has XLA_FLAGS '--xla_cpu_max_isa=AVX2'\. Set "
                                                       r"XLA_FLAGS to '' before starting Python"),
        # More devices than recorded are only planned where run was given them (or over processes): it names
        # its devices argument.
        ({}, dict(num_devices=2), r"this process shards over 2 device\(s\)\. Finish the sweep with 1 local device\(s\) "
                                  r"\(pass 1 of them as run's devices or, in a single process, none: run then takes 1\), "
                                  r"or use a new"),
        ({}, dict(memory_budget=plan_lib.estimate_bytes_per_run(SWEEP)),
         r"\(chunk_size 2\), but only 1 runs fit the memory budget now"),
    ]
    for options, machine, message in cases:
        where = rf"^{out} holds runs computed at 2 run\(s\) per device on 1 × cpu \(cpu\), XLA_FLAGS '', compiler options"
        with pytest.raises(ValueError, match=rf"{where}.*{message}"):
            plan_lib.make_plan(SWEEP, done, PLENTY._replace(**machine), out=out, recorded=recorded, **options)
    # Fewer devices than recorded: the process needs more, which only its environment gives.
    with pytest.raises(ValueError, match=r"1 run\(s\) per device on 2 × cpu .*this process shards over 1 device\(s\)\. "
                                         r"Finish the sweep with 2 local device\(s\) \(set JAX_NUM_CPU_DEVICES=2 in the "
                                         r"environment of the jaxreplay command or of Python, or jax\.config\.update\("
                                         r"\"jax_num_cpu_devices\", 2\) right after importing jax\), or use a new"):
        plan_lib.make_plan(SWEEP, done, PLENTY, out=out, recorded=recorded._replace(devices=2, runs_per_device=1))
    assert not out.exists()


def test_a_resume_under_another_matmul_precision_or_partitioner_is_refused_naming_them(tmp_path):
    """JAX_DEFAULT_MATMUL_PRECISION=highest or JAX_USE_SHARDY_PARTITIONER=0 lower other programs: a resume under
    either was refused as if the code had changed ("finish the sweep with the code that started it": the code
    running), found by a probe. The folder records them and names them."""
    import jax

    out, done = tmp_path / "out", np.arange(8) < 4
    recorded = plan_lib.make_plan(SWEEP, done, PLENTY, chunk_size=2, out=out).batch
    assert recorded.jax_settings == "matmul precision default, shardy partitioner"
    assert recorded.to_dict()["jax_settings"] == recorded.jax_settings
    assert plan_lib.Batch.from_dict(recorded.to_dict()) == recorded
    with jax.default_matmul_precision("highest"), pytest.raises(
            ValueError, match=r"with JAX's matmul precision default, shardy partitioner; this process has matmul "
                              r"precision highest, shardy partitioner, which lowers other programs\. Set them back"):
        plan_lib.make_plan(SWEEP, done, PLENTY, out=out, recorded=recorded)
    with jax.default_matmul_precision("highest"):  # (a folder recorded before the settings: nothing to compare)
        assert plan_lib.make_plan(SWEEP, done, PLENTY, out=out, recorded=recorded._replace(jax_settings="")
                                  ).chunk_size == 2
    shardy = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", not shardy)
    try:
        with pytest.raises(ValueError, match=r"this process has matmul precision default, GSPMD partitioner"):
            plan_lib.make_plan(SWEEP, done, PLENTY, out=out, recorded=recorded)
    finally:
        jax.config.update("jax_use_shardy_partitioner", shardy)
    # JAX_DISABLE_MOST_OPTIMIZATIONS=1 compiles the same lowered text otherwise: a resume under it was accepted and
    # its runs differed from the others' (a probe). Named where set, left out at JAX's default.
    jax.config.update("jax_disable_most_optimizations", True)
    try:
        with pytest.raises(ValueError, match=r"this process has matmul precision default, shardy partitioner, most "
                                             r"optimizations disabled, which lowers other programs"):
            plan_lib.make_plan(SWEEP, done, PLENTY, out=out, recorded=recorded)
    finally:
        jax.config.update("jax_disable_most_optimizations", False)
    assert plan_lib.make_plan(SWEEP, done, PLENTY, out=out, recorded=recorded).batch.jax_settings == recorded.jax_settings
    assert not out.exists()


def test_a_gpu_plan_records_autotuning_off_and_refuses_to_finish_a_folder_begun_with_autotuning(tmp_path):
    """On a GPU the experiments compile without XLA's autotuning (another process picked other kernels: a
    DQN study's identical runs differed in all 100 seeds); a GPU folder begun before that, with autotuning,
    is finished only by the jaxreplay that began it."""
    out, done = tmp_path / "out", np.arange(8) < 4
    gpu = PLENTY._replace(platform="gpu", device_kind="NVIDIA H200")
    batch = plan_lib.make_plan(SWEEP, done, gpu, chunk_size=2, out=out).batch
    assert (batch.platform, batch.device_kind, batch.compiler_options) == ("gpu", "NVIDIA H200", "xla_gpu_autotune_level=0")
    begun_autotuned = batch._replace(compiler_options="")  # recorded by a jaxreplay before 2026-11-28
    with pytest.raises(ValueError, match=r"this jaxreplay compiles the experiment with compiler options "
                                         r"'xla_gpu_autotune_level=0' \(they make a run's result independent of its "
                                         r"chunk, and on a GPU of its process"):
        plan_lib.make_plan(SWEEP, done, gpu, out=out, recorded=begun_autotuned)
    assert not out.exists()

def test_a_cpu_plan_records_xlas_thread_pool_and_refuses_to_finish_a_folder_begun_with_another(tmp_path):
    """XLA:CPU splits a large matrix product over its thread pool (max of PJRT_NPROC, else NPROC, else the
    host's CPUs, and the CPU devices), and the split changes its rounding: a MinAtar run resumed on a host with
    4 cores differed from the 2-core host's that began it, and the folder accepted it (found by a probe)."""
    assert batch_lib.cpu_thread_pool_size(1, {"NPROC": "4"}) == 4
    assert batch_lib.cpu_thread_pool_size(8, {"NPROC": "4"}) == 8  # at least the devices
    assert batch_lib.cpu_thread_pool_size(1, {"PJRT_NPROC": "3", "NPROC": "4"}) == 3
    assert batch_lib.cpu_thread_pool_size(1, {"NPROC": "many"}) == batch_lib.cpu_thread_pool_size(1, {}) >= 1
    out, done = tmp_path / "out", np.arange(8) < 4
    here = PLENTY._replace(cpu_threads=2)
    batch = plan_lib.make_plan(SWEEP, done, here, chunk_size=2, out=out).batch
    assert batch.cpu_threads == 2 and batch.to_dict()["cpu_threads"] == 2
    assert plan_lib.Batch.from_dict(batch.to_dict()) == batch
    assert plan_lib.make_plan(SWEEP, done, here, out=out, recorded=batch).batch == batch
    older = plan_lib.Batch.from_dict({k: v for k, v in batch.to_dict().items() if k != "cpu_threads"})
    assert plan_lib.make_plan(SWEEP, done, here._replace(cpu_threads=4), out=out, recorded=older).chunk_size == 2
    with pytest.raises(ValueError, match=r"with XLA:CPU's thread pool of 2 threads; this process has 4 \(XLA:CPU "
                                         r"splits large matrix products over them.*Set PJRT_NPROC=2 before starting Python, "
                                         r"with at most 2 CPU device\(s\) \(XLA gives each CPU device a thread of the "
                                         r"pool at least: set JAX_NUM_CPU_DEVICES=2"):
        plan_lib.make_plan(SWEEP, done, here._replace(cpu_threads=4), out=out, recorded=batch)
    gpu = PLENTY._replace(platform="gpu", device_kind="NVIDIA H200", cpu_threads=2)
    assert plan_lib.make_plan(SWEEP, done, gpu, chunk_size=2, out=out).batch.cpu_threads == 0
    assert not out.exists()


def test_the_recorded_thread_pool_is_the_one_xla_starts_under_an_affinity_mask_and_any_nproc():
    """The pool was recorded as PJRT_NPROC, else NPROC (digits only, 0 skipped), else the host's CPU count; XLA
    takes the first that reads as an integer (a sign allowed, below 0 as 0) and else the CPUs the process may
    run on. Under ``taskset -c 0`` a 512-wide DQN folder was finished with a pool of 1 where it was begun with 2,
    both recorded as 2, and its td_loss differed (found by a probe). Here XLA's own pool threads are counted."""
    assert batch_lib.cpu_thread_pool_size(1, {"PJRT_NPROC": "0", "NPROC": "4"}) == 1  # (0 is read: XLA's floor)
    assert batch_lib.cpu_thread_pool_size(1, {"PJRT_NPROC": "-1"}) == 1
    assert batch_lib.cpu_thread_pool_size(1, {"PJRT_NPROC": " +4 "}) == 4
    assert batch_lib.cpu_thread_pool_size(1, {"PJRT_NPROC": "4x", "NPROC": "3"}) == 3
    assert batch_lib.cpu_thread_pool_size(1, {"PJRT_NPROC": "99999999999"}) == len(os.sched_getaffinity(0))
    script = ("import collections, os, jax, jax.numpy as jnp\n"
              "x = jnp.ones((256, 256)); (x @ x).block_until_ready()\n"
              "from jaxreplay.engine.batch import cpu_thread_pool_size\n"
              "names = [open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task')]\n"
              "print(sum(n.startswith('tf_XLAEigen') for n in names), cpu_thread_pool_size(jax.device_count()))")
    cases = [({}, None), ({"PJRT_NPROC": "+3"}, None), ({"PJRT_NPROC": "0", "NPROC": "4"}, None)]
    if shutil.which("taskset") and len(os.sched_getaffinity(0)) > 1:
        cases.append(({}, ["taskset", "-c", "0"]))
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_NPROC", "NPROC", "XLA_FLAGS")}
    counted = {}
    for extra, prefix in cases:
        counted[str(extra), bool(prefix)] = subprocess.run(
            [*(prefix or []), sys.executable, "-c", script], env={**env, **extra, "JAX_PLATFORMS": "cpu"},
            capture_output=True, text=True, timeout=120, check=True).stdout.split()
    for case, (threads, recorded) in counted.items():
        assert threads == recorded, case  # XLA's pool threads, and what a Batch records
    assert counted[str({"PJRT_NPROC": "+3"}), False] == ["3", "3"]
    assert counted.get(("{}", True), ["1", "1"]) == ["1", "1"]  # (under taskset -c 0, where there is one)


def test_a_flag_given_twice_is_recorded_with_the_value_xla_applies_its_last():
    """``XLA_FLAGS`` was recorded sorted: ``--xla_cpu_max_isa=SSE4_2 --xla_cpu_max_isa=AVX2`` (fused multiply-adds)
    and the other order (none) recorded one Batch, so a folder begun without them was finished with them, and
    both recorded batch_independence_flags (found by a probe). XLA applies a flag's last value: only it is kept."""
    fma_last = "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_max_isa=SSE4_2 --xla_cpu_max_isa=AVX2"
    no_fma_last = "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_max_isa=AVX2 --xla_cpu_max_isa=SSE4_2"
    fma = batch_lib.xla_flags_in_environment({"XLA_FLAGS": fma_last})
    no_fma = batch_lib.xla_flags_in_environment({"XLA_FLAGS": no_fma_last})
    assert fma == "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_max_isa=AVX2"
    assert no_fma == "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_max_isa=SSE4_2"
    assert not plan_lib.Batch("cpu", "cpu", 1, 2, fma).batch_independence_flags
    assert plan_lib.Batch("cpu", "cpu", 1, 2, no_fma).batch_independence_flags
    assert batch_lib.xla_flags_in_environment({"XLA_FLAGS": "--a=1 --xla_force_host_platform_device_count=2 --a"}) == "--a"


def test_the_recorded_xla_flags_leave_out_the_device_count_and_name_the_batch_independence_flags():
    flags = "--xla_force_host_platform_device_count=4 --xla_cpu_experimental_ynn_fusion_type= --xla_cpu_max_isa=SSE4_2"
    assert batch_lib.xla_flags_in_environment({"XLA_FLAGS": flags}) == (
        "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_max_isa=SSE4_2")
    assert batch_lib.xla_flags_in_environment({}) == ""
    batch = plan_lib.Batch("cpu", "cpu", 4, 3, batch_lib.xla_flags_in_environment({"XLA_FLAGS": flags}))
    assert batch.chunk_size == 12 and batch.batch_independence_flags
    assert plan_lib.Batch.from_dict(json.loads(json.dumps(batch.to_dict()))) == batch
    assert not batch._replace(xla_flags="--xla_cpu_max_isa=SSE4_2").batch_independence_flags
    # (AVX2 keeps the fused multiply-adds that made batches differ: not the flags)
    assert not batch._replace(xla_flags=flags.replace("=SSE4_2", "=AVX2")).batch_independence_flags
    with pytest.raises(ValueError, match="not a recorded batch"):
        plan_lib.Batch.from_dict(dict(batch.to_dict(), devices="4"))


def test_a_new_sweep_takes_the_devices_that_hold_two_runs_each_in_whole_configurations():
    # 1 run: 1 device of 4; 3 runs: 2; the 8-run SWEEP: all 4 (and no more than there are). Under a seed
    # reduction a device holds whole configurations: 1 configuration × 3 seeds fills 1 device (not 3 seeds on
    # each of 2), 3 × 4 seeds fill 3 of 4.
    fixed = {"step_size": 0.05, "memory_size": 5, "batch_size": 2}
    lone = sw.Sweep("linesearch", seeds=1, setup=SWEEP.setup, fixed=fixed)
    three = sw.Sweep("linesearch", seeds=3, setup=SWEEP.setup, fixed=fixed)
    assert [plan_lib.devices_for(s, 4) for s in (lone, three, SWEEP)] == [1, 2, 4]
    assert plan_lib.devices_for(SWEEP, 2) == 2 and plan_lib.devices_for(three, 1) == 1
    reduced = dict(record={"keep": ["dtheta"], "reduce": "mean"}, setup=SWEEP.setup)
    assert plan_lib.devices_for(sw.Sweep("linesearch", seeds=3, fixed=fixed, **reduced), 4) == 1
    assert plan_lib.devices_for(sw.Sweep("linesearch", seeds=4, fixed={"step_size": 0.05, "batch_size": 2},
                                         grid={"memory_size": [5, 10, 20]}, **reduced), 4) == 3
    # CPU devices share the memory budget: no more than hold 2 runs each in it (at least 1, which the plan then
    # sizes or refuses).
    per_run = plan_lib.estimate_bytes_per_run(SWEEP)
    assert [plan_lib.devices_for(SWEEP, 4, memory_budget=b * per_run) for b in (100, 5, 4, 1)] == [4, 2, 2, 1]
