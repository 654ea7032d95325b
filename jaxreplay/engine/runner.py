"""Running a sweep: plan, lock, execute, assemble.

:func:`run` takes a :class:`~jaxreplay.engine.declaration.Sweep` and an
output folder (or none: everything in memory) and returns its labeled results:

.. code-block:: text

    lock       one writer per folder (jaxreplay.engine.store.FolderLock), held from before the
               folder is read to the end of the call
    plan       jaxreplay.engine.plan.make_plan of the sweep, the runs already in the chunk store,
               the options and the machine's resources (jaxreplay.engine.resources.measure);
               every refusal happens here, before anything is written or compiled
    execute    jaxreplay.engine.execute: the chunks, each handed to the store when finished
    assemble   jaxreplay.engine.assemble: the chunks read back one at a time into one labeled
               xarray Dataset, saved as results.nc with summary.json

Reproducibility. Run r's key is ``fold_in(key(sweep.seed), r % seeds)``: it
depends only on the seed index, never on the chunk or device a run lands on, and
runs with the same seed index share their random numbers across the grid
(common random numbers: differences between settings are not seed noise).
A run's floating-point result can still depend on the program it is computed
in (XLA picks kernels by batch shape), so every chunk records its batch
(:class:`jaxreplay.engine.plan.Batch`) and a resumed sweep computes its missing
runs at the recorded batch, or refuses (naming ``chunk_size``, the device count,
platform or ``XLA_FLAGS``): however often it was interrupted, a sweep gives
exactly the results of an uninterrupted run (tested on the CPU; on a GPU the
programs compile without autotuning for this; ``python -m benchmarks.determinism``
checks it there: two processes agreed in all 128 runs of its Acrobot sweep on an H200).

Devices and hosts. The run axis of each chunk is sharded over all local
devices with a one-axis :class:`jax.sharding.Mesh` (``"runs"``) and
:class:`~jax.sharding.NamedSharding`. Started on several processes under
:func:`jax.distributed.initialize`, process p runs chunks p, p + P, p + 2P, … of
the missing runs (all processes plan the same list: from the smallest memory
budget of any, and from the folder process 0 prepared, before anyone writes a
chunk; a refusal on one process is raised on all, and so are a chunking that
differs between processes, a process given another folder than process 0's,
a sweep kept in memory, and a failure or Ctrl-C while computing chunks, which
the others raise once they have finished theirs), and after a final barrier
every process assembles the results
from the shared output directory; process 0 writes ``results.nc``. Launch one
process per host with the same command, e.g. under SLURM::

    srun --ntasks-per-node=1 python -c "import jax; jax.distributed.initialize(); \\
        from jaxreplay.engine import sweep; sweep.run(sweep.Sweep.from_toml('s.toml'), 'out/')"

(``jax.distributed.initialize()`` reads SLURM's and Cloud TPU's environment by
itself; elsewhere pass ``coordinator_address``, ``num_processes`` and
``process_id``). ``out/`` must be on a file system all hosts share.

Compilation cache. The compiled programs depend only on the experiment, its
``setup`` and the devices; the process keeps them (the last
:data:`jaxreplay.engine.execute.PROGRAM_CACHE_SIZE` setups), so running a sweep
again, or another grid or seed count over the same setup -- a notebook cell
edited and rerun -- compiles nothing new unless the chunk shape changes
(:func:`jaxreplay.engine.execute.clear_program_cache` frees them).

The output directory holds ``sweep.json`` (the config, its fingerprint, the
software versions and the batch), ``chunks/*.npz`` (finished runs; each also
carries its sweep's fingerprint, run count, run range and batch), ``results.nc`` and
``summary.json`` (this call's statistics, and under ``calls`` those of every
call that computed runs here). Rerunning the same sweep into it computes only the
missing runs; a different sweep is refused, by ``sweep.json`` (itself refused
as damaged if its config was edited: it must hash to its fingerprint) or, if
that was deleted, by the chunks themselves (a chunk is only ever used by the
sweep that wrote it). One process writes into a folder at a time: its lock file
``sweep.lock`` names the holder (pid@host), and a second writer is refused.
"""

from __future__ import annotations

from jaxreplay import _extras  # noqa: E402

_extras.require("jaxreplay.engine.runner", "sweep")


import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxreplay import _scope
from jaxreplay.engine import assemble as assemble_lib
from jaxreplay.engine import batch as batch_lib
from jaxreplay.engine import execute as execute_lib
from jaxreplay.engine import folder as folder_lib
from jaxreplay.engine import plan as plan_lib
from jaxreplay.engine import resources as resources_lib
from jaxreplay.engine import store as store_lib
from jaxreplay.engine.declaration import Sweep
from jaxreplay.engine.store import SweepWarning

__all__ = ["run", "SweepStats", "SweepResult"]


@dataclasses.dataclass
class SweepStats:
    """What a call of :func:`run` did (not part of the results: it varies between machines).

    ``chunk_size`` is the sweep's chunk; where the engine grouped runs by setup, ``group_chunk_sizes``
    holds each group's (smaller where a group has fewer runs), and the summary line names them.
    ``runs_computed`` and ``chunks`` count the call's, on all its processes (``jax.distributed``);
    ``runs_per_second`` is ``runs_computed`` over this process's ``run_seconds``. ``diverged`` and
    ``soft_diverged`` count the runs so flagged in the results (an experiment without the flag: 0);
    ``untrained`` the runs whose summary counts no ``gradient_steps`` (DQN: learning starts at or after
    the run's end, or a replay ratio too small for one update; their returns are the untrained network's).
    """

    runs: int
    runs_computed: int
    runs_resumed: int
    chunks: int
    chunk_size: int
    devices: int
    processes: int
    compilations: int
    compile_seconds: float
    run_seconds: float
    runs_per_second: float
    diverged: int
    bytes_per_run: int
    memory_budget: int
    result_bytes_per_run: int = 0
    group_chunk_sizes: tuple[int, ...] = ()
    soft_diverged: int = 0
    untrained: int = 0

    def _chunk_sizes(self) -> str:
        sizes = sorted(set(self.group_chunk_sizes))
        if not sizes:
            return str(self.chunk_size)
        if len(sizes) == 1:  # the groups' chunks, not the sweep's (two groups of 40 of an 80-run sweep: 40)
            return str(sizes[0])
        return f"{' / '.join(map(str, sizes))} (by setup group)"

    def describe(self) -> str:
        """One line: runs computed/resumed, chunks, devices, compilations, timings, runs/s, diverged runs."""
        return (
            f"{self.runs} runs ({self.runs_computed} computed, {self.runs_resumed} resumed) in {self.chunks} "
            f"chunk(s) of {self._chunk_sizes()} on {self.devices} device(s) × {self.processes} process(es); "
            f"{self.compilations} compilation(s) in {self.compile_seconds:.1f} s; run {self.run_seconds:.1f} s "
            f"({self.runs_per_second:.1f} runs/s); {self.diverged} diverged; "
            + (f"{self.soft_diverged} soft-diverged (Q-values beyond every return); " if self.soft_diverged else "")
            + (
                f"{self.untrained} made no gradient step (no update due from learning_starts to the run's end: "
                "learning starts too late or the replay ratio is too small; their returns are the untrained "
                "network's); "
                if self.untrained
                else ""
            )
            + f"~{plan_lib.mib(self.bytes_per_run)} per run, budget {plan_lib.mib(self.memory_budget)}"
        )


class SweepResult(NamedTuple):
    """``dataset`` (labeled results, see :func:`jaxreplay.engine.assemble.to_dataset`) and ``stats``
    (:class:`SweepStats`)."""

    dataset: Any
    stats: SweepStats


def run(
    sweep: Sweep,
    out_dir: str | os.PathLike | None = None,
    *,
    chunk_size: int | None = None,
    memory_budget: int | None = None,
    memory_fraction: float = 0.5,
    progress: bool = True,
    devices: Sequence[jax.Device] | None = None,
    group_by_setup: bool = True,
) -> SweepResult:
    """Run ``sweep`` (resuming from ``out_dir`` if it holds part of it) and return its labeled results.

    Args:
        sweep: the :class:`~jaxreplay.engine.declaration.Sweep`.
        out_dir: where chunks, ``results.nc``, ``sweep.json`` and
            ``summary.json`` go; ``None`` keeps everything in memory (no resume).
        chunk_size: runs per compiled call (rounded down to a multiple of
            the device count, at most what fits ``memory_budget``, at least
            :data:`~jaxreplay.engine.plan.MIN_RUNS_PER_DEVICE` per device
            where they fit: XLA rounds a program of one run differently); a sweep
            with fewer runs is padded to it, so every sweep given the same
            ``chunk_size`` runs in programs of one shape. Default: the chunk
            size ``out_dir``'s finished runs record, else as many as fit
            ``memory_budget`` (on CPU at most
            :data:`~jaxreplay.engine.plan.CPU_RUNS_PER_DEVICE` per device),
            and no more than the sweep's runs.
        memory_budget: device bytes the chunk may use in all (default:
            ``memory_fraction`` of the free device memory, see
            :func:`~jaxreplay.engine.resources.default_memory_budget`).
        memory_fraction: see above.
        progress: show a progress bar (runs/s, ETA) and print a summary.
        devices: local devices to shard over, used as given (default: all local devices; fewer where
            ``out_dir``'s runs were computed on fewer, which then shard its missing runs, or where a new sweep
            without ``chunk_size`` has fewer than 2 runs a device, or on a CPU runs too large for 2 a device in
            the memory budget: :func:`~jaxreplay.engine.plan.devices_for`).
        group_by_setup: where the experiment groups runs by the static setup
            they need (``Experiment.setup_groups``; DQN: the update slots of
            each replay ratio), compile one program per group and chunk each
            group apart, so a run does not pay for a bound only others need;
            False: one program with the sweep's setup for every run. A run's
            result is the same either way; which was done is recorded
            (:class:`~jaxreplay.engine.plan.Batch`), and a resumed sweep
            must keep it. ``benchmarks/README.md`` measures both.

    Returns:
        A :class:`SweepResult`.

    Raises:
        ValueError: ``out_dir`` holds a different sweep, is being written by
            another process (one writer per folder: its lock file
            ``sweep.lock`` names it), or bad options, or runs of this sweep
            computed at another batch than the missing runs would be (another
            ``chunk_size``, device count, platform, ``XLA_FLAGS`` or ``group_by_setup``:
            :func:`jaxreplay.engine.plan.check_batch`).
        MemoryError: a single run (per device) does not fit the budget, the
            results do not fit the host's available memory, or the chunks and
            ``results.nc`` do not fit the free disk under ``out_dir``; raised
            with the numbers before anything is written or compiled (a
            :class:`~jaxreplay.engine.plan.ResourceError`, which also names
            the fields to lower).
    """
    # Options first: nothing read, written or compiled yet (on every process, before any barrier).
    plan_lib.check_run_options(
        chunk_size=chunk_size,
        memory_fraction=memory_fraction,
        memory_budget=memory_budget,
        group_by_setup=group_by_setup,
    )
    # Every experiment computes in float32 with standard promotion (a global x64 mode would draw other numbers
    # or not trace at all: jaxreplay._scope), compiled ahead of time, and flags a diverged run: the sweep runs
    # in that scope, whatever the process's JAX settings, and says which of them it did not follow.
    with _scope.experiment_settings(), _compiled_and_never_fatal():
        return _run(sweep, out_dir, chunk_size, memory_budget, memory_fraction, progress, devices, group_by_setup)


@contextlib.contextmanager
def _compiled_and_never_fatal():
    """``jax_debug_nans`` and ``jax.disable_jit()`` off within the block, with a warning where either was on.

    The engine compiles its programs ahead of time, which ``disable_jit`` refuses; and a NaN in one run is
    that run's divergence, flagged in its results (``diverged``), which ``jax_debug_nans`` would turn into an
    error that loses the whole sweep (and only where the program was compiled under it, so depending on
    what ran before in the process)."""
    ignored = [name for name in ("jax_debug_nans", "jax_disable_jit") if getattr(jax.config, name)]
    if ignored:
        warnings.warn(
            f"{' and '.join(ignored)} on: a sweep compiles its programs ahead of time and flags a run that "
            "diverges in its results (diverged), so it runs without them; to step through one run, call the "
            "experiment's run_batch on it.",
            SweepWarning,
            stacklevel=4,
        )
    with jax.debug_nans(False), jax.disable_jit(False):
        yield


def _run(sweep, out_dir, chunk_size, memory_budget, memory_fraction, progress, devices, group_by_setup) -> SweepResult:
    """:func:`run`, its options checked."""
    chosen, devices = devices is not None, list(devices or jax.local_devices())
    process, processes = jax.process_index(), jax.process_count()
    out = pathlib.Path(out_dir) if out_dir is not None else None
    if processes > 1:  # (agreed: a process given a folder must not wait for one that refused)
        _agree(lambda: _check_shared_folder(out))

    # One writer per folder: the lock is held from before the folder is read (if it exists) or
    # prepared (if not) to the end, and released however the call ends.
    locks: list[store_lib.FolderLock] = []  # (taken while planning, released however the call ends)
    try:
        # Plan: the store is only read (scan) before the plan has accepted the sweep. Every process
        # plans the same chunks: from one budget (the smallest: each measures its own memory) and from
        # the same folder (process 0 prepares it first; nobody writes a chunk until all have planned);
        # a refusal on any process is raised on every one (else the others would wait at a barrier).
        store: store_lib.ChunkStore | None = None
        writable = True
        if out is not None:
            if process == 0 and out.is_dir():  # (a new folder: created by prepare, or refused there)
                writable = resources_lib.writable(out)
            store = store_lib.ChunkStore(out, sweep, repair=writable and process == 0)
            if processes > 1:
                store.share_call(_from_process_zero(store.call))
        disk_at = out if out is not None and writable and process == 0 else None
        resources = resources_lib.measure(devices, memory_budget, memory_fraction, disk_at)
        plan_lib.check_run_count(sweep, resources.host_memory)  # before a scan allocates one entry a run
        if processes > 1:
            resources = resources._replace(memory_budget=_smallest(resources.memory_budget))
        measured: list[tuple[int, float]] = []  # (compilations, seconds) spent measuring chunk programs
        planner = _Planner(
            sweep,
            resources,
            store,
            out,
            writable,
            chunk_size,
            process,
            processes,
            group_by_setup,
            devices,
            measured,
            chosen,
        )

        plan = _plan_everywhere(planner, locks)
        devices = devices[: plan.batch.devices] if plan.batch is not None else devices  # (_Planner._fewer_devices)
        if process == 0:
            _warn_if_one_a_device(plan)
        if processes > 1:
            _agree(lambda: _check_same_chunking(plan))
        # Execute: finished chunks go to the store, or (in memory) straight into the assembled arrays.
        programs = [execute_lib.programs_for(sweep, devices, group.setup) for group in plan.groups]
        assembler = assemble_lib.Assembler(sweep)
        # Agreed, Ctrl-C included: a process whose chunks failed waits for the others to finish theirs, then
        # every process raises (the others waited at the end barrier until JAX aborted them, ~5 minutes).
        execution = _agree(
            lambda: execute_lib.execute(
                sweep, plan, programs, store.save if store is not None else assembler.add, progress=progress
            ),
            catch=BaseException,
            failed="failed computing its chunks",
        )
        _barrier("jaxreplay-sweep-end")
        if measured:  # programs compiled while planning (to measure them) are this call's compilations too
            execution = execution._replace(
                compilations=execution.compilations + sum(n for n, _ in measured),
                compile_seconds=execution.compile_seconds + sum(t for _, t in measured),
            )

        # Assemble: one chunk in memory at a time.
        dataset = assemble_lib.assemble(sweep, store.parts()) if store is not None else assembler.dataset()
        stats = _stats(plan, execution, dataset, len(devices))
        _save(dataset, stats, store, out, writable, process == 0, progress)
        return SweepResult(dataset, stats)
    finally:
        for lock in locks:
            lock.release()


def _warn_if_one_a_device(plan: plan_lib.Plan) -> None:
    """Warn where runs are computed in a program of 1 run a device: the memory budget held no more
    (:data:`~jaxreplay.engine.plan.MIN_RUNS_PER_DEVICE`, docs/design.md §4). XLA compiles it with the run axis
    squeezed away, into kernels that round otherwise: such runs may differ in their last bits from the same runs
    computed 2 or more a device (DQN's TD losses did), which is not to pass silently. (A group's chunk is 1 a
    device only where the plan's is: the plan gives a group at least 2 a device where the chunk has them.)"""
    if plan.runs_to_compute and plan.batch is not None and plan.batch.runs_per_device == 1:
        warnings.warn(
            f"runs are computed 1 a device: the memory budget ({plan.memory_budget:,} bytes) holds no more "
            f"(about {plan.bytes_per_run:,} bytes a run). XLA compiles a program of one run into other kernels, so "
            "these runs may differ in their last bits from the same runs computed 2 or more a device. Raise "
            "memory_budget / memory_fraction (--memory-budget-mib / --memory-fraction), or make the runs smaller, "
            "to compute them 2 a device.",
            SweepWarning,
            stacklevel=4,
        )


def _save(dataset, stats: SweepStats, store, out, writable: bool, main: bool, progress: bool) -> None:
    """On the ``main`` process (0): write ``results.nc`` and the call's summary into ``store``'s folder if it is
    ``writable`` (else warn: the results are returned), and print the summary with ``progress``. Every process
    labels ``dataset`` with the folder's fingerprint and config."""
    if store is not None and store.folder_config is not None:  # (results.nc, sweep.json and chunks agree)
        dataset.attrs.update(fingerprint=store.fingerprint, config=json.dumps(store.folder_config, sort_keys=True))
    if not main:
        return
    if store is not None and writable:
        store.write_results(lambda f: assemble_lib.write_netcdf(dataset, f), dataclasses.asdict(stats))
    elif out is not None and not (out / "results.nc").exists():
        warnings.warn(
            f"{out} is not writable: results.nc was not written (the results are returned; save them "
            "elsewhere with dataset.to_netcdf).",
            SweepWarning,
            stacklevel=4,
        )
    if progress:
        print(stats.describe(), file=sys.stderr)


class _Planner(NamedTuple):
    """What :func:`run` plans from, but for what the store's scan finds (it scans again under the lock)."""

    sweep: Sweep
    resources: plan_lib.Resources
    store: store_lib.ChunkStore | None
    out: pathlib.Path | None
    writable: bool
    chunk_size: int | None
    process: int
    processes: int
    group_by_setup: bool = True
    devices: Sequence[jax.Device] = ()
    measured: list | None = None
    devices_chosen: bool = False  # (the caller named the devices: used as given)

    def plan(self, found: store_lib.Scan | None) -> plan_lib.Plan:
        """The plan, given what the store's scan ``found`` (None: in memory, nothing done or recorded).

        The chunk is sized by the estimate of each run's device bytes (:func:`jaxreplay.engine.plan.make_plan`),
        then checked against XLA's accounting of the compiled chunk program (:meth:`Programs.device_bytes
        <jaxreplay.engine.execute.Programs.device_bytes>`, compiled as it will run, so nothing is compiled
        twice): where a group's program needs more than the memory budget, the plan is made again with each
        run's estimate scaled to what XLA counts (a smaller chunk), at most twice. The estimate is within
        0.5-2x of XLA's accounting on the CPU; on an H100 a 10⁶-run LineSearch sweep planned by it ran out of
        device memory. A resumed sweep keeps the chunk its finished runs record (they were computed at it).
        """
        recorded = None
        if found is not None and found.batch is not None:
            try:
                recorded = plan_lib.Batch.from_dict(found.batch)
            except ValueError as e:
                raise ValueError(
                    f"{self.out}: a chunk's meta.batch is {e}: delete that chunk (its runs are then recomputed)."
                ) from None
        missing = self.sweep.num_runs - (int(np.count_nonzero(found.done)) if found is not None else 0)
        fewer = self._fewer_devices(recorded, missing)
        if fewer < len(self.devices):
            # CPU devices share the host's memory: the fewer have all of it (a budget cut to their share refused a
            # resume that fit, or squeezed a lone run into a program of one, which rounds otherwise). An
            # accelerator's memory is its own: the fewer have their share.
            budget = self.resources.memory_budget
            budget = budget if self.resources.on_cpu else budget * fewer // len(self.devices)
            resources = self.resources._replace(num_devices=fewer, memory_budget=budget)
            return self._replace(devices=list(self.devices[:fewer]), resources=resources).plan(found)
        scale = 1.0
        for _ in range(3):
            plan = plan_lib.make_plan(
                self.sweep,
                found.done if found is not None else np.zeros(self.sweep.num_runs, bool),
                self.resources._replace(memory_scale=scale),
                chunk_size=self.chunk_size,
                out=self.out,
                writable=self.writable,
                process=self.process,
                processes=self.processes,
                recorded=recorded,
                group_by_setup=bool(self.group_by_setup),
            )
            if recorded is not None or not plan.chunks or not self.devices:
                break
            factor = self._over_budget(plan)
            if factor <= 1.0:
                break
            scale *= factor
        if self.store is not None and found is not None and plan.batch is not None:
            # What the chunks are computed at (a finished sweep keeps what its chunks record; a folder recorded
            # before a field was keeps recording none, so that its old and new chunks stay one batch).
            batch = plan.batch
            if recorded is not None:
                empty = batch_lib.Batch._field_defaults
                batch = batch._replace(**{name: empty[name] for name in recorded.unrecorded()})
            if plan.runs_done < plan.num_runs and self.devices:
                program = self.program(plan)
                batch_lib.check_program(recorded, program, plan.num_runs - plan.runs_done, self.out)
                if recorded is None or recorded.program:  # (a folder recorded before programs were: none)
                    batch = batch._replace(program=program)
            self.store.batch = batch.to_dict() if plan.runs_done < plan.num_runs else found.batch
        return plan

    def _fewer_devices(self, recorded: plan_lib.Batch | None, missing: int) -> int:
        """How many of this process's local devices the plan shards over: all of them, but

        * a folder whose runs were computed on fewer devices of this kind: that many (the first ones), so its
          missing runs are computed in the program its finished ones were (more than this process has is
          refused by the plan, naming the setting);
        * a new sweep (no chunk_size asked for) of fewer runs than
          :data:`~jaxreplay.engine.plan.MIN_RUNS_PER_DEVICE` per device, or on a CPU of runs too large for that
          many on every device within the memory budget: the devices
          :func:`~jaxreplay.engine.plan.devices_for` gives, so a lone run is not padded to a batch on every
          device, and a run too large for 2 a core runs on fewer cores instead of being refused.

        A run's bits do not depend on the device count (docs/design.md §4). Devices the caller named, and a
        sweep over several processes, are used as they are.
        """
        n = len(self.devices)
        if self.devices_chosen or self.processes > 1 or n <= 1:
            return n
        if recorded is not None:
            here = (self.resources.platform, self.resources.device_kind)
            same_kind = (recorded.platform, recorded.device_kind) == here
            return recorded.devices if same_kind and 1 <= recorded.devices < n else n
        if self.chunk_size is None and missing > 0:
            budget = self.resources.memory_budget if self.resources.on_cpu else None
            return plan_lib.devices_for(self.sweep, n, bool(self.group_by_setup), budget)
        return n

    def program(self, plan: plan_lib.Plan) -> str:
        """:func:`~jaxreplay.engine.batch.program_fingerprint` of every group's programs at its chunk size
        (lowered, not compiled: the compile that follows reuses the trace)."""
        texts: list[str] = []
        for group in plan.groups:
            texts += execute_lib.programs_for(self.sweep, self.devices, group.setup).program_texts(
                self.sweep, group.chunk_size
            )
        return batch_lib.program_fingerprint(texts)

    def _over_budget(self, plan: plan_lib.Plan) -> float:
        """What the plan's bytes per run must be multiplied by to be what XLA counts for the largest group's
        chunk program over the budget (1.0 where every group's program fits the budget)."""
        scale = 1.0
        for g, group in enumerate(plan.groups):
            chunk = next(
                (c for c, cg in zip(plan.chunks, plan.chunk_groups or (0,) * len(plan.chunks)) if cg == g), None
            )
            if chunk is None:
                continue
            programs = execute_lib.programs_for(self.sweep, self.devices, group.setup)
            before = (programs.compilations, programs.compile_seconds)
            need = programs.device_bytes(self.sweep, execute_lib.padded_runs(chunk, group.chunk_size, plan.align))
            if self.measured is not None and programs.compilations > before[0]:
                self.measured.append((programs.compilations - before[0], programs.compile_seconds - before[1]))
            if need > self.resources.memory_budget:
                scale = max(scale, need / (group.chunk_size * max(group.bytes_per_run, 1)))
        return scale


def _stats(plan: plan_lib.Plan, execution: execute_lib.Execution, dataset, devices: int) -> SweepStats:
    """The :class:`SweepStats` of a call that ran ``plan`` as ``execution`` into ``dataset`` on ``devices``."""
    computed = plan.num_runs - plan.runs_done  # (by every process: a call computes every missing run)
    return SweepStats(
        runs=plan.num_runs,
        runs_computed=computed,
        runs_resumed=plan.runs_done,
        chunks=plan.all_chunks,
        chunk_size=plan.chunk_size,
        group_chunk_sizes=tuple(g.chunk_size for g in plan.groups),
        devices=devices,
        processes=plan.processes,
        compilations=execution.compilations,
        compile_seconds=execution.compile_seconds,
        run_seconds=execution.run_seconds,
        runs_per_second=computed / execution.run_seconds if execution.run_seconds > 0 and computed else 0.0,
        diverged=int(np.sum(dataset["diverged"].values)) if "diverged" in dataset else 0,
        soft_diverged=int(np.sum(dataset["soft_diverged"].values)) if "soft_diverged" in dataset else 0,
        untrained=int(np.sum(dataset["gradient_steps"].values == 0)) if "gradient_steps" in dataset else 0,
        bytes_per_run=plan.bytes_per_run,
        memory_budget=plan.memory_budget,
        result_bytes_per_run=plan.result_bytes_per_run,
    )


def _plan_everywhere(planner: _Planner, locks: list) -> plan_lib.Plan:
    """The plan, the same on every process: process 0 locks the folder (created for it if new; its lock goes
    into ``locks``), reads it, plans and prepares it (every refusal before anything is written in it; a new
    folder a refusal removed again), then the others plan from the folder it prepared (in
    memory: every process plans), each step agreed (:func:`_agree`) so that a refusal reaches every process."""
    store, process, writable = planner.store, planner.process, planner.writable

    def first() -> plan_lib.Plan | None:
        if store is None or process != 0:
            return None
        # Locked before reading (a live writer's chunks would change what is read) and before planning, which
        # may compile: a second writer on a new folder was refused only after compiling the whole program. A
        # new folder is created for its lock, and removed again if the plan refuses the sweep.
        created = writable and not store.out.is_dir()
        if writable:
            locks.append(store.lock())
        try:
            scan = store.scan()
            plan = planner.plan(scan)
        except BaseException:
            if created:
                locks.pop().release()
                _remove_if_empty(store.out)
            raise
        if writable:
            store.prepare(scan)
        return plan

    def then() -> plan_lib.Plan | None:
        if store is None:
            return planner.plan(None)
        if planner.processes > 1:  # (every process: a collective) the folder process 0 locked is everyone's
            holder = _from_process_zero(_lock_holder(locks) if process == 0 else {})
            if process != 0:
                _check_folder_of_process_zero(store.out, holder)
        return planner.plan(store.scan()) if process != 0 else None

    planned = _agree(first)  # (process 0 has set damaged chunks aside and written sweep.json before the others scan)
    plan = _agree(then) or planned  # (nobody writes a chunk before every process has planned)
    assert plan is not None
    return plan


def _check_shared_folder(out: pathlib.Path | None) -> None:
    """ValueError for a sweep kept in memory under ``jax.distributed``: each process holds only the chunks it
    computed, so none could assemble the results."""
    if out is None:
        raise ValueError(
            "a sweep of several jax.distributed processes needs an output folder (out_dir) that every process "
            "sees: each keeps only the chunks it computed, so in memory no process could assemble the results."
        )


def _lock_holder(locks: list) -> dict:
    """What process 0's lock file says (pid, host, start), or ``{}`` where it took no lock (a read-only folder)."""
    if not locks:
        return {}
    try:
        return json.loads(locks[0].path.read_text())
    except (OSError, ValueError):
        return {}


def _check_folder_of_process_zero(out: pathlib.Path, holder: dict) -> None:
    """ValueError where ``out`` does not hold the lock process 0 took on its folder (``holder``): this process
    was given another folder (or one the others cannot see), where its chunks would be lost to the sweep."""
    if not holder:
        return
    try:
        found = json.loads((out / folder_lib.LOCK_NAME).read_text())
    except (OSError, ValueError):
        found = None
    if found != holder:
        raise ValueError(
            f"{out} is not the folder process 0 prepared (its lock, held by pid {holder.get('pid')} on "
            f"{holder.get('host')}, is not in it): give every process the same output folder, on a file system "
            "every process sees."
        )


def _chunking(plan: plan_lib.Plan) -> dict:
    """What must be the same on every process for their chunks to make one sweep: the chunks of all of them,
    their size and groups, and the program (:class:`~jaxreplay.engine.batch.Batch`, as a short digest)."""
    batch = json.dumps(plan.batch.to_dict() if plan.batch is not None else None, sort_keys=True)
    return {
        "chunk_size": plan.chunk_size,
        "chunks": plan.all_chunks,
        "group_chunk_sizes": [g.chunk_size for g in plan.groups],
        "batch": hashlib.sha256(batch.encode()).hexdigest()[:16],
    }


def _check_same_chunking(plan: plan_lib.Plan) -> None:
    """ValueError on a process whose plan chunks the sweep otherwise than process 0's (another ``chunk_size``,
    ``group_by_setup``, device count or ``XLA_FLAGS``): each process computes every ``processes``-th chunk of
    its own list, so runs would be computed by nobody or twice (one collective; every process calls it)."""
    mine = _chunking(plan)
    first = _from_process_zero(mine)
    if first != mine:
        differs = ", ".join(f"{k} {mine[k]} (process 0: {first.get(k)})" for k in mine if mine[k] != first.get(k))
        raise ValueError(
            f"process {plan.process} chunks the sweep otherwise than process 0: {differs}; give every process the "
            "same chunk_size, group_by_setup, device count and XLA_FLAGS."
        )


def _remove_if_empty(folder: pathlib.Path) -> None:
    """Remove ``folder`` if nothing is in it (a new sweep's folder, created for its lock, whose plan refused)."""
    try:
        folder.rmdir()
    except OSError:  # not empty, or gone: left as it is
        pass


def _smallest(budget: int) -> int:
    """The smallest of every process's ``budget`` (one collective; every process calls it)."""
    from jax.experimental import multihost_utils

    # (As two 31-bit halves: JAX carries int32 unless x64 is on, and a budget is up to terabytes.)
    halves = np.asarray([budget >> 31, budget & (2**31 - 1)], np.int32)
    gathered = np.asarray(multihost_utils.process_allgather(halves)).reshape(-1, 2)
    return min((int(high) << 31) | int(low) for high, low in gathered)


def _from_process_zero(value: dict) -> dict:
    """Process 0's ``value`` (a JSON-able dict) on every process (one collective; every process calls it)."""
    from jax.experimental import multihost_utils

    text = np.frombuffer(json.dumps(value, sort_keys=True).encode().ljust(256), np.uint8)  # (one length everywhere)
    first = np.asarray(multihost_utils.broadcast_one_to_all(text))
    return json.loads(bytes(first.astype(np.uint8)).decode())


def _agree(step, catch: type[BaseException] = Exception, failed: str = "refused the sweep"):
    """``step()`` on this process, then agree: where any process's step raised (a refusal: a ValueError or
    a ResourceError; with ``catch=BaseException`` a Ctrl-C too), every process raises (its own error, or a
    ValueError naming the process that ``failed`` and its one line), so that no process waits for the others
    at a barrier until a timeout. The gather of the errors is itself the barrier: no process goes on before
    every one has finished its step. A single process just calls ``step``."""
    if jax.process_count() == 1:
        return step()
    from jax.experimental import multihost_utils

    result, error = None, None
    try:
        result = step()
    except catch as e:  # (any failure: the others must not wait for this process at a barrier)
        error = e
    mine = "" if error is None else f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    text = np.frombuffer(mine.encode(), np.uint8)
    lengths = np.asarray(multihost_utils.process_allgather(np.asarray(text.size, np.int32))).reshape(-1)
    if not lengths.any():
        return result
    # (Every process has the same lengths, so every one, the refusing one too, takes part in this gather.)
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[: text.size] = text
    texts = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(lengths), -1)
    if error is not None:
        raise error
    p = int(np.flatnonzero(lengths)[0])
    said = bytes(texts[p, : lengths[p]]).decode(errors="replace")
    raise ValueError(f"process {p} {failed} ({said})")


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
