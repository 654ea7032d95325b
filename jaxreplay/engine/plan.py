"""Plan: what a sweep run will do, decided before anything is written or compiled.

:func:`make_plan` is a pure function of the sweep, the runs already finished
(from the :class:`~jaxreplay.engine.store.ChunkStore`), the run options and
the machine's :class:`Resources` (numbers measured by the caller). It returns
a :class:`Plan`, or refuses: ``ValueError`` for bad options, a
:class:`ResourceError` (a ``MemoryError`` with the numbers and the fields to
lower) for a run that cannot fit the device budget, results that cannot fit
the host's memory, or chunks and ``results.nc`` that cannot fit the disk.
Nothing in this module compiles, allocates device memory or touches a file:
the shapes come from tracing (``jax.eval_shape``, ``jax.make_jaxpr``).
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np

from jaxreplay import _prng, _scope
from jaxreplay._validation import INT32_MAX
from jaxreplay.engine import records as records_lib
from jaxreplay.engine.batch import Batch, check_batch, compiler_options_text, cpu_devices_setting, xla_version

if TYPE_CHECKING:  # (the declaration module imports this one)
    from jaxreplay.engine.declaration import Sweep

__all__ = [
    "Group",
    "Plan",
    "Resources",
    "ResourceError",
    "make_plan",
    "check_run_options",
    "estimate_bytes_per_run",
    "estimate_result_bytes_per_run",
    "TEMPORARY_ARRAYS",
    "CPU_RUNS_PER_DEVICE",
]


# ----------------------------------------------------------------------------
# Options
# ----------------------------------------------------------------------------


def check_run_options(
    prefix: str = "", chunk_size=None, memory_fraction=None, memory_budget=None, group_by_setup=None
) -> None:
    """ValueError naming ``prefix + option`` for a bad ``chunk_size``, ``memory_fraction``, ``memory_budget``
    or ``group_by_setup`` (a bool)."""

    def number(v):
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)

    whole = isinstance(chunk_size, (int, np.integer)) and not isinstance(chunk_size, bool)
    if chunk_size is not None and (not whole or not 1 <= chunk_size <= INT32_MAX):
        raise ValueError(f"{prefix}chunk_size must be a positive integer, got {chunk_size!r} (at most {INT32_MAX}).")
    if memory_fraction is not None and (not number(memory_fraction) or not 0.0 < memory_fraction <= 1.0):
        raise ValueError(f"{prefix}memory_fraction must be a number in (0, 1], got {memory_fraction!r}.")
    # (compared, not converted: float(10**400) overflows; 2**63 bytes is beyond any machine)
    if memory_budget is not None and (not number(memory_budget) or not 1 <= memory_budget <= 2**63):
        raise ValueError(f"{prefix}memory_budget must be a positive number of bytes, got {memory_budget!r}.")
    if group_by_setup is not None and not isinstance(group_by_setup, (bool, np.bool_)):
        raise ValueError(f"{prefix}group_by_setup must be true or false, got {group_by_setup!r}.")


# ----------------------------------------------------------------------------
# Shapes and bytes of one run
# ----------------------------------------------------------------------------


def _tree_bytes(tree) -> int:
    return int(sum(math.prod(x.shape) * _itemsize(x.dtype) for x in jax.tree.leaves(tree)))


def _itemsize(dtype) -> int:
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return 8  # a threefry key is two uint32 words
    return np.dtype(dtype).itemsize


class Footprint(NamedTuple):
    """Shapes of one run: ``state``, ``record`` (one segment), ``summary``, ``hparams``, and ``temporary``, the
    bytes of a step's :data:`TEMPORARY_ARRAYS` largest arrays (made in a segment's loops, not state-shaped);
    ``storage``, the bytes of the state's arrays of ``setup.max_capacity`` rows (a replay memory's)."""

    state: Any
    record: Any
    summary: Any
    hparams: Any
    temporary: int
    storage: int = 0


def footprint(sweep: Sweep, setup: Any = None) -> Footprint:
    """One run's :class:`Footprint` under ``setup`` (default: the sweep's), by tracing only
    (``jax.eval_shape``, ``jax.make_jaxpr``: nothing compiled)."""
    exp, setup = sweep.exp, sweep.make_setup() if setup is None else setup
    hparams = jax.tree.map(lambda x: jax.ShapeDtypeStruct((), x.dtype), sweep.hyperparameters(np.arange(1)))
    key = jax.eval_shape(lambda: jax.random.key(0))  # shapes only: nothing compiled
    state = jax.eval_shape(lambda k, h: exp.init(k, h, setup), key, hparams)
    jaxpr, (state2, record) = jax.make_jaxpr(lambda s, h: exp.advance(s, h, setup), return_shape=True)(state, hparams)
    summary = jax.eval_shape(lambda s, h: exp.summarize(s, h, setup), state2, hparams)
    state_like = {(tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(state)}
    largest = sorted(_loop_temporaries(jaxpr.jaxpr, state_like), reverse=True)[:TEMPORARY_ARRAYS]
    rows = getattr(setup, "max_capacity", None)
    storage = sum(_tree_bytes(x) for x in jax.tree.leaves(state) if rows is not None and x.ndim and x.shape[0] == rows)
    return Footprint(state, record, summary, hparams, sum(largest), storage)


def _loop_temporaries(jaxpr, state_like: set, in_loop: bool = False) -> list[int]:
    """Bytes of each array an equation makes inside a ``scan``/``while`` body of ``jaxpr`` (nested
    jaxprs searched), leaving out arrays shaped like a leaf of the state (in-place updates of it)."""
    from jax.extend import core as jex_core

    sizes = []
    for eqn in jaxpr.eqns:
        loop = in_loop or eqn.primitive.name in ("scan", "while")
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, jex_core.ClosedJaxpr):
                    sub = sub.jaxpr
                if isinstance(sub, jex_core.Jaxpr):
                    sizes += _loop_temporaries(sub, state_like, loop)
        avals = [v.aval for v in eqn.outvars if in_loop and hasattr(v.aval, "shape")]
        sizes += [math.prod(a.shape) * _itemsize(a.dtype) for a in avals if (a.shape, str(a.dtype)) not in state_like]
    return sizes


def segment_points(sweep: Sweep, fp: Footprint) -> int:
    """Points each kept record gets per segment (the length of its first axis), before the stride.

    ValueError naming ``record.stride`` where kept records of different lengths
    or a stride that does not fit the segments cannot be sliced as ``[::stride]``.
    """
    spec, num_segments = sweep.record, int(sweep.exp.num_segments(sweep.make_setup()))
    lengths = {fp.record[k].shape[0] for k in spec.kept(tuple(fp.record))}
    if not lengths:
        return 0
    if len(lengths) > 1 and num_segments > 1 and spec.stride > 1:
        raise ValueError(
            f"record.stride = {spec.stride}: the kept records have segments of different lengths "
            f"{sorted(lengths)}; keep records of one length to stride them."
        )
    points = max(lengths)
    records_lib.check_stride(spec, points, num_segments)
    return points


def kept_segments(sweep: Sweep, points: int) -> int:
    """How many segments hold a kept record point (all of them without a stride)."""
    num_segments = int(sweep.exp.num_segments(sweep.make_setup()))
    if points == 0:
        return 0
    return sum(records_lib.segment_kept(sweep.record, s, points) for s in range(num_segments))


def result_bytes(sweep: Sweep, fp: Footprint) -> int:
    """Host bytes of one run's results, given its :class:`Footprint` (see :func:`estimate_result_bytes_per_run`).

    With a seed reduction, a configuration's reduced records (and its int64
    index) are shared by its seeds: each run counts its share, rounded up.
    """
    spec = sweep.record
    if spec.is_default:
        num_segments = int(sweep.exp.num_segments(sweep.make_setup()))
        return _tree_bytes(fp.record) * num_segments + _tree_bytes(fp.summary) + 8  # + the int64 run index
    segments = kept_segments(sweep, segment_points(sweep, fp))
    kept = jax.eval_shape(lambda r: records_lib.select(spec, r), fp.record)
    per_run = _tree_bytes(fp.summary) + 8
    if not spec.reduce:
        return per_run + _tree_bytes(kept) * segments
    seeds = sweep.seeds
    batched = jax.tree.map(lambda x: jax.ShapeDtypeStruct((seeds,) + x.shape, x.dtype), kept)
    reduced = jax.eval_shape(lambda r: records_lib.reduce_seeds(spec, r, seeds), batched)
    per_config = _tree_bytes(reduced) * segments + (8 if segments else 0)  # + the int64 configuration index
    return per_run + -(-per_config // seeds)


def estimate_result_bytes_per_run(sweep: Sweep) -> int:
    """Host bytes of one run's results (its record over every segment, its summary and its index).

    ``runs × this`` is the size of the assembled results in memory, of
    ``results.nc`` and of the chunk files (up to their small headers).
    """
    return result_bytes(sweep, footprint(sweep))


TEMPORARY_ARRAYS = 8
"""How many of a step's largest arrays are counted as alive at once (see :func:`estimate_bytes_per_run`)."""


def estimate_bytes_per_run(sweep: Sweep) -> int:
    """Device bytes one run needs, from shapes only (nothing is allocated or compiled).

    The estimate is ``1.5 × state + record + summary + hyperparameters +
    temporary``: the run's state (replay storage × ``max_capacity``,
    parameters, optimizer and environment state) is updated in place by the
    segment's scan (the input is donated), plus room for the temporaries of an
    update; the record is one segment's curves; ``temporary`` is the sum of the
    :data:`TEMPORARY_ARRAYS` largest arrays made inside the segment's loops,
    state-shaped ones left out (minibatches of draws or of gathered
    transitions, a layer's activations): a step keeps several alive, and for a
    LineSearch minibatch of 10^6 XLA's accounting is 7.5 times the largest
    of them. So a huge ``max_batch_size`` / ``batch_size`` is refused (or
    chunked) by the memory checks instead of exhausting memory. Measured
    against XLA's own accounting of the compiled program
    (``memory_analysis``): within 0.5-2x for LineSearch ER, pER and aER, and
    for a minibatch of 10^6 (tested).
    """
    return device_bytes(footprint(sweep))


def device_bytes(fp: Footprint) -> int:
    """Device bytes of one run with this :class:`Footprint` (see :func:`estimate_bytes_per_run`)."""
    return (
        int(1.5 * _tree_bytes(fp.state))
        + _tree_bytes(fp.record)
        + _tree_bytes(fp.summary)
        + 4 * len(fp.hparams)
        + fp.temporary
    )


def mib(n: int) -> str:
    """``n`` bytes in the largest binary unit under it (``"2.0 KiB"``)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# ----------------------------------------------------------------------------
# The plan
# ----------------------------------------------------------------------------


class ResourceError(MemoryError):
    """A sweep the machine cannot hold (device memory, host memory or disk), refused before it runs.

    A caller that names the sweep's settings otherwise (the command line's
    ``--memory-size`` for ``setup.max_capacity``) reads the parts and gives
    its own advice instead of rewriting the message.

    Attributes:
        problem: what the sweep needs against what there is, with the numbers
            (``"one run needs about 55.9 GiB of device memory ..., but the memory budget is 8.0 GiB."``).
        advice: what to do, in the library's words.
        lower: the fields the advice says to lower (or drop), as the library
            names them, most effective first (``("setup.max_capacity",)``).
        cause: what dominates the need, where the advice says
            (``"replay storage dominates"``); else None.
        budget: whether the advice ends by offering to raise the memory budget (:meth:`advised` names
            its settings as the caller does).

    The message is ``f"{problem} {advice}"``.
    """

    def __init__(
        self, problem: str, advice: str, lower: tuple[str, ...] = (), cause: str | None = None, budget: bool = False
    ):
        self.problem, self.lower, self.cause, self.budget = problem, lower, cause, budget
        self._advice = advice
        self.advice = self.advised()
        super().__init__(f"{problem} {self.advice}")

    def advised(self, budget: str | None = None) -> str:
        """The advice, naming the budget's settings ``budget`` (default the ``[run]`` keys; a command line names
        its options)."""
        return self._advice + (f" or raise {budget or 'memory_budget / memory_fraction'}." if self.budget else "")


class Resources(NamedTuple):
    """What the machine offers, as numbers (measured by :func:`jaxreplay.engine.resources.measure`, so
    that :func:`make_plan` stays pure).

    Attributes:
        memory_budget: device bytes a chunk may use, over all local devices.
        host_memory: host bytes this process can still use.
        free_disk: free bytes under the output folder; ``None`` where this
            process writes no chunks or results (in memory, or not process 0).
        num_devices: local devices the run axis is sharded over.
        platform, device_kind: those devices' (see :class:`Batch`).
        xla_flags: :func:`~jaxreplay.engine.batch.xla_flags_in_environment` of this process.
        memory_scale: each run's estimate (:func:`device_bytes`) is scaled by it: XLA's accounting of a
            compiled chunk over the estimate, where the runner found it larger; 1: the estimate.
        cpu_threads: XLA:CPU's thread pool on a CPU (:func:`~jaxreplay.engine.batch.cpu_thread_pool_size`);
            0 on other platforms.
    """

    memory_budget: int
    host_memory: int
    free_disk: int | None
    num_devices: int
    platform: str = "cpu"
    device_kind: str = "cpu"
    xla_flags: str = ""
    memory_scale: float = 1.0
    cpu_threads: int = 0

    @property
    def on_cpu(self) -> bool:
        """Whether the devices are CPUs (their memory is the host's)."""
        return self.platform == "cpu"


class Group(NamedTuple):
    """Runs compiled into programs of one static setup (:attr:`jaxreplay.experiments.Experiment.setup_groups`).

    Attributes:
        setup: the experiment's ``Setup`` its programs are compiled with.
        chunk_size: runs per compiled call of this group (its chunks are padded to it).
        bytes_per_run: estimated device bytes of one of its runs.
        runs: how many of the sweep's runs it holds.
    """

    setup: Any
    chunk_size: int
    bytes_per_run: int
    runs: int


class Plan(NamedTuple):
    """What :func:`jaxreplay.engine.sweep.run` will compute, and the numbers it was decided on.

    Attributes:
        num_runs: runs in the sweep.
        chunk_size: runs per compiled call (every chunk is padded to its group's chunk size, which is this
            one unless the sweep has several groups and a group has fewer runs).
        chunks: this process's chunks, each the (sorted) run indices it computes, group by group.
        runs_done: runs already finished (in the chunk store).
        process, processes: this process's index and the process count.
        bytes_per_run: estimated device bytes of one run (the largest over the groups).
        result_bytes_per_run: host bytes of one run's results.
        memory_budget: device bytes a chunk may use.
        host_bytes: estimated peak host bytes (assembled results, a chunk).
        disk_bytes: estimated disk bytes still to write (0 where none is written).
        align: runs per configuration that must share a chunk (the seeds, for a
            seed reduction; else 1): every chunk holds whole groups of them.
        segment_points: points of each kept record per segment, before the
            stride (0 if none is kept).
        batch: the program the chunks are computed in (:class:`Batch`), or None.
        groups: the :class:`Group` s of runs, one program each (one group, the sweep's setup, unless the
            experiment groups runs and ``group_by_setup``).
        chunk_groups: the index in ``groups`` of each of ``chunks``.
        all_chunks: the chunks of every process together (``len(chunks)`` with one process; 0 only in a
            plan not made by :func:`make_plan`).
    """

    num_runs: int
    chunk_size: int
    chunks: tuple[np.ndarray, ...]
    runs_done: int
    process: int
    processes: int
    bytes_per_run: int
    result_bytes_per_run: int
    memory_budget: int
    host_bytes: int
    disk_bytes: int
    align: int = 1
    segment_points: int = 0
    batch: Batch | None = None
    groups: tuple[Group, ...] = ()
    chunk_groups: tuple[int, ...] = ()
    all_chunks: int = 0

    @property
    def runs_to_compute(self) -> int:
        """Runs this process computes."""
        return int(sum(len(c) for c in self.chunks))


# On CPU a chunk's working set should stay near the caches. On a 2-core AMD EPYC (1 MB L2 per core;
# LineSearch ER, T = 1000, 10^4 runs, three rounds each), once the replay draws were made a block ahead
# (experiments.linesearch.DRAW_BLOCK), chunks of 256-384 runs took 1.1-1.4 s, 512 runs 1.2-1.5 s, 1,024
# runs 1.6-2.1 s (the cap was 1,024 while 256 to 1,024 cost the same). A DQN CartPole sweep (1,024 seeds,
# 1,000 steps) cost the same in chunks of 256 and 1,024 (26-27 s). Accelerators: limited by memory only.
CPU_RUNS_PER_DEVICE = 256
"""The most runs per device in one chunk on CPU (accelerators: limited by memory only)."""

MIN_RUNS_PER_DEVICE = 2
"""The fewest runs per device in a program, where the memory budget allows: XLA compiles a batch of one
as another program (the run axis squeezed away), which rounded DQN runs differently from every larger
batch (measured on the CPU: CartPole's TD losses at chunk 1 differed from chunks 2, 16 and 32, which
agreed; at 4,000 steps the returns too). A lone run is padded with a copy of itself instead."""


def devices_for(sweep: Sweep, num_devices: int, group_by_setup: bool = True, memory_budget: int | None = None) -> int:
    """The devices, of ``num_devices``, a new sweep needs: enough that each holds :data:`MIN_RUNS_PER_DEVICE`
    runs of the sweep's largest group of runs (its runs, where the experiment makes no groups), in whole
    configurations under a seed reduction; with ``memory_budget`` (CPU devices, which share it), no more than
    hold that many runs each within it; at least 1.

    Used by :func:`jaxreplay.engine.sweep.run` (no ``chunk_size`` or devices given): a chunk holds at least
    that many runs a device, so a lone run on every core of a CPU was padded to a batch on each, and a
    configuration of 3 seeds reduced on the device to 3 seeds on each of 2 (a 1-seed MinAtar run on both cores
    of a 2-core CPU took 15-20 % longer than on one); and a run too large for one a core was refused where
    fewer cores held it. A run's bits do not depend on it (docs/design.md §4).
    """
    setups, config_group = setup_groups(sweep, group_by_setup)
    per_device = _least_chunk(_chunk_unit(_align(sweep), 1), 1)  # (one device's least chunk: whole configurations)
    largest = int(np.bincount(config_group, minlength=len(setups)).max()) * sweep.seeds
    fewest = -(-largest // per_device)
    if memory_budget is not None:
        per_run = max(_run_sizes([footprint(sweep, setup) for setup in setups]))
        fewest = min(fewest, memory_budget // max(per_run * per_device, 1))
    return max(1, min(num_devices, fewest))


def _run_sizes(footprints: list[Footprint], memory_scale: float = 1.0) -> list[int]:
    """Device bytes of a run of each of ``footprints`` (one a group): :func:`device_bytes` scaled by
    ``memory_scale`` (:attr:`Resources.memory_scale`), rounded up."""
    return [math.ceil(memory_scale * device_bytes(f)) for f in footprints]


def _align(sweep: Sweep) -> int:
    """The runs a chunk keeps together: a seed reduction needs every seed of a configuration in the chunk (and
    on the device) that reduces them; 1 without one."""
    return sweep.seeds if sweep.record.reduce else 1


def _least_chunk(unit: int, num_devices: int) -> int:
    """The smallest multiple of ``unit`` (a multiple of ``num_devices``) with :data:`MIN_RUNS_PER_DEVICE` runs
    per device."""
    return -(-MIN_RUNS_PER_DEVICE * num_devices // unit) * unit


def make_plan(
    sweep: Sweep,
    done: np.ndarray,
    resources: Resources,
    *,
    chunk_size: int | None = None,
    out: pathlib.Path | None = None,
    writable: bool = True,
    process: int = 0,
    processes: int = 1,
    recorded: Batch | None = None,
    group_by_setup: bool = True,
) -> Plan:
    """Decide the chunks of ``sweep`` still to compute, or refuse; pure (no file, no compilation).

    Args:
        sweep: the :class:`~jaxreplay.engine.sweep.Sweep`.
        done: ``bool[num_runs]``, the runs already finished (all False in memory).
        resources: the machine's :class:`Resources`.
        chunk_size: runs per compiled call asked for (see :func:`jaxreplay.engine.sweep.run`).
        out: the output folder (for messages), or None.
        writable: whether ``out`` can be written.
        process, processes: this process and the process count (process ``p``
            takes chunks ``p, p + P, ...`` of the missing runs).
        recorded: the :class:`Batch` the finished runs were computed at (from
            the chunk store; None: none recorded). Without ``chunk_size`` the
            missing runs are computed at its chunk size.
        group_by_setup: compile one program per group of runs of the experiment's
            ``setup_groups`` (one :class:`Group` each, chunked apart); False: every run
            with the sweep's setup. Either gives each run the same result (the
            experiment's contract); :class:`Batch` records which was done.

    Raises:
        ValueError: a bad ``chunk_size``; ``out`` is not writable but runs are missing; runs are
            missing and would be computed in another program than ``recorded`` (:func:`check_batch`).
        ResourceError: (a ``MemoryError``) one run per device does not fit the budget; the results
            do not fit the host's memory; chunks and ``results.nc`` do not fit
            ``resources.free_disk``. The message gives the numbers.
    """
    check_run_options(chunk_size=chunk_size, group_by_setup=group_by_setup)
    setups, config_group = setup_groups(sweep, group_by_setup)
    footprints = [footprint(sweep, setup) for setup in setups]
    _check_groups_agree(sweep, setups, footprints)
    sizes = _run_sizes(footprints, resources.memory_scale)
    fp = footprints[int(np.argmax(sizes))]  # the largest run: the chunk must fit it
    per_run = max(sizes)
    points = segment_points(sweep, fp)
    per_result = result_bytes(sweep, fp)
    runs = sweep.num_runs
    cpu_cap = CPU_RUNS_PER_DEVICE * resources.num_devices if resources.on_cpu else None
    align = _align(sweep)
    # Sized for the whole sweep, not for the runs still missing: a resumed sweep then runs its
    # remaining runs in programs of the same batch size as the first attempt (XLA may round a
    # run differently at another batch size, docs/design.md), at the cost of padding. Where the
    # finished runs record their batch, that one is asked for (check_batch refuses any other).
    asked = recorded.chunk_size if chunk_size is None and recorded is not None else chunk_size
    unit = _chunk_unit(align, resources.num_devices)
    if recorded is not None and align > 1 and recorded.chunk_size % unit:
        # Begun when a reduction's chunks were a multiple of lcm(seeds, devices): finished at its own batch.
        older = math.lcm(align, resources.num_devices)
        unit = older if recorded.chunk_size % older == 0 else unit
    hint = resources.on_cpu and recorded is None  # (fewer CPU devices: not for a folder, which keeps its count)
    chunk = _choose_chunk(
        per_run, resources.memory_budget, resources.num_devices, runs, asked, cpu_cap, fp, align, unit, hint
    )
    least = _least_chunk(unit, resources.num_devices)
    chunk = least if chunk < least <= resources.memory_budget // max(per_run, 1) else chunk  # never 1 per device
    batch = Batch(
        resources.platform,
        resources.device_kind,
        resources.num_devices,
        chunk // resources.num_devices,
        resources.xla_flags,
        "" if setups == (sweep.make_setup(),) else "grouped",
        compiler_options_text(sweep.exp.compiler_options_on(resources.platform)),
        xla_version(),
        cpu_threads=resources.cpu_threads if resources.on_cpu else 0,
        prng=_prng.settings(),
        jax_settings=_scope.lowering_settings(),
        defaults=json.dumps(sweep.unset_hyperparameters()),
    )
    host = _check_host_memory(
        runs, per_result, chunk, chunk * per_run if resources.on_cpu else 0, resources.host_memory
    )
    missing = np.flatnonzero(~np.asarray(done, bool))
    check_batch(recorded, batch, chunk_size, missing.size, out)
    if out is not None and not writable and missing.size:
        raise ValueError(
            f"{out} is not writable (read-only or no permission) and {missing.size} of {runs} runs are "
            "still to compute: make it writable, or choose another output folder."
        )
    disk = 0
    if out is not None and writable and resources.free_disk is not None:
        disk = _check_disk(out, missing.size, runs, per_result, resources.free_disk)
    groups, chunks, chunk_groups = _chunks_by_group(sweep, setups, sizes, config_group, missing, chunk, unit, least)
    return Plan(
        num_runs=runs,
        chunk_size=chunk,
        chunks=chunks[process::processes],
        runs_done=runs - missing.size,
        process=process,
        processes=processes,
        bytes_per_run=per_run,
        result_bytes_per_run=per_result,
        memory_budget=int(resources.memory_budget),
        host_bytes=host,
        disk_bytes=disk,
        align=align,
        segment_points=points,
        batch=batch,
        groups=groups,
        chunk_groups=chunk_groups[process::processes],
        all_chunks=len(chunks),
    )


def setup_groups(sweep: Sweep, group_by_setup: bool = True) -> tuple[tuple[Any, ...], np.ndarray]:
    """``(setups, config_group)``: the static setups the sweep's runs are compiled with and the index in
    ``setups`` of each configuration's (``int64[num_configs]``), from the experiment's ``setup_groups``
    (one group, the sweep's setup, without it or with ``group_by_setup`` False)."""
    exp, setup = sweep.exp, sweep.make_setup()
    if exp.setup_groups is None or not group_by_setup:
        return (setup,), np.zeros(sweep.num_configs, np.int64)
    first_runs = np.arange(sweep.num_configs, dtype=np.int64) * sweep.seeds  # the seeds share hyperparameters
    config_group, setups = exp.setup_groups(sweep.hyperparameters(first_runs), setup)
    return tuple(setups), np.asarray(config_group, np.int64)


def _check_groups_agree(sweep: Sweep, setups: tuple, footprints: list[Footprint]) -> None:
    """Refuse (ValueError) group setups whose runs would not be assembled like the sweep's: other record or
    summary shapes, or another number of segments (a defect of the experiment's ``setup_groups``)."""
    exp = sweep.exp

    def shapes(fp, setup):
        return jax.tree.map(lambda x: (x.shape, str(x.dtype)), (fp.record, fp.summary)), exp.num_segments(setup)

    first = shapes(footprints[0], setups[0])
    for fp, setup in zip(footprints[1:], setups[1:]):
        if shapes(fp, setup) != first:
            raise ValueError(
                f"experiment {exp.name!r}: its setup_groups gave setups whose runs record other shapes or "
                "segments; run the sweep with group_by_setup false, and report it."
            )


def _chunks_by_group(
    sweep: Sweep,
    setups: tuple,
    sizes: list[int],
    config_group: np.ndarray,
    missing: np.ndarray,
    chunk: int,
    unit: int,
    least: int,
) -> tuple[tuple[Group, ...], tuple[np.ndarray, ...], tuple[int, ...]]:
    """``(groups, chunks, chunk_groups)``: the :class:`Group` s and the ``missing`` runs chunked group by
    group. With several groups a group's chunk is its runs rounded up to ``unit`` where that is fewer than
    ``chunk`` (its programs then pay for no padding beyond a whole number of devices and
    configurations), and at least ``least`` (:data:`MIN_RUNS_PER_DEVICE`); it depends on the sweep and
    ``chunk`` alone, so a resumed sweep has the same."""
    missing_group = config_group[missing // sweep.seeds]
    group_runs = np.bincount(config_group, minlength=len(setups)) * sweep.seeds
    groups, chunks, chunk_groups = [], [], []
    for g, (setup, size) in enumerate(zip(setups, sizes)):
        runs = int(group_runs[g])
        group_chunk = chunk if len(setups) == 1 else min(chunk, max(-(-runs // unit) * unit, least))
        groups.append(Group(setup, group_chunk, size, runs))
        todo = missing[missing_group == g]
        for i in range(0, todo.size, group_chunk):
            chunks.append(todo[i : i + group_chunk])
            chunk_groups.append(g)
    return tuple(groups), tuple(chunks), tuple(chunk_groups)


def check_run_count(sweep: Sweep, available: int) -> None:
    """Refuse (:class:`ResourceError`) a sweep whose bookkeeping alone (9 bytes a run: which runs are done,
    which to compute) does not fit the host's ``available`` memory, before anything of its size is allocated."""
    need = 9 * sweep.num_runs
    if need > available:
        raise ResourceError(
            f"the sweep has {sweep.num_runs} runs ({sweep.num_configs} configurations × {sweep.seeds} seeds): "
            f"keeping track of them alone needs about {mib(need)} of host memory, but only {mib(available)} is "
            "available.",
            "Use fewer seeds or a smaller grid, or split the sweep.",
            lower=("seeds",),
        )


def _check_host_memory(runs: int, result_bytes: int, chunk: int, chunk_device_bytes: int, available: int) -> int:
    """Refuse (:class:`ResourceError` with the numbers) a sweep whose results cannot fit the host's memory.

    Peak host use: the assembled results (``runs × result_bytes``, what
    :func:`~jaxreplay.engine.sweep.run` returns), two copies of one chunk's results (the segments
    collected and their concatenation), the bookkeeping of which runs are
    done (9 bytes per run), and on CPU the chunk's device memory, which is
    host memory too. Returns that peak in bytes.
    """
    assembled = runs * result_bytes
    need = assembled + 2 * chunk * result_bytes + 9 * runs + chunk_device_bytes
    if need > available:
        raise ResourceError(
            f"the sweep's results need about {mib(need)} of host memory ({runs} runs × {mib(result_bytes)} "
            f"of results each = {mib(assembled)} assembled, plus a chunk of {chunk} runs"
            + (f" and its {mib(chunk_device_bytes)} of CPU device memory" if chunk_device_bytes else "")
            + f"), but only {mib(available)} is available.",
            "Run fewer seeds or grid points, or record less (e.g. a shorter setup.steps / fewer segments), "
            + (
                "or a smaller chunk_size (--chunk-size; a chunk's CPU device memory is host memory), "
                if chunk_device_bytes
                else ""
            )
            + "or split the sweep into several.",
            lower=("seeds", "setup.steps"),
        )
    return need


def _check_disk(out: pathlib.Path, missing_runs: int, runs: int, result_bytes: int, free: int) -> int:
    """Refuse (:class:`ResourceError` with the numbers) a sweep whose chunks and ``results.nc`` cannot fit on disk."""
    chunks, results = missing_runs * result_bytes, runs * result_bytes
    need = chunks + results
    if need > free:
        raise ResourceError(
            f"the sweep needs about {mib(need)} of disk in {out} ({mib(chunks)} of chunk files for the "
            f"{missing_runs} runs still to compute, {mib(results)} for results.nc), but only {mib(free)} is "
            "free there.",
            "Free some space, choose another --out, or run fewer seeds or grid points.",
            lower=("seeds",),
        )
    return need


def _too_large_a_run(problem: str, fp: Footprint | None) -> ResourceError:
    """The refusal of a run too large for the device budget (``problem``: the numbers), advising to lower
    whichever of state and step temporaries dominates."""
    if fp is not None and fp.temporary > 1.5 * _tree_bytes(fp.state):
        cause = f"A step's temporaries dominate (about {mib(fp.temporary)})"
        advice = f"{cause}: lower the minibatch size (setup.max_batch_size, setup.batch_size),"
        return ResourceError(problem, advice, ("setup.max_batch_size", "setup.batch_size"), cause, budget=True)
    if fp is not None and fp.storage < 0.5 * _tree_bytes(fp.state):  # (the networks, their optimizer, ...)
        cause = f"the state besides its replay storage dominates: the storage is about {mib(fp.storage)}"
        advice = f"Lower the setup's sizes that make the rest of a run's state, such as a network's widths ({cause}),"
        return ResourceError(problem, advice, (), cause, budget=True)
    cause = "replay storage dominates"
    advice = f"Lower setup.max_capacity ({cause}), shorten a segment,"
    return ResourceError(problem, advice, ("setup.max_capacity",), cause, budget=True)


def _chunk_unit(align: int, num_devices: int) -> int:
    """The runs a chunk is a multiple of: the devices, and with a seed reduction (``align`` seeds) whole
    configurations on each device. A configuration's seeds split over devices were reduced across them, in
    another order: its seed mean differed by an ulp from one device's (4 seeds on 4 devices)."""
    return align * num_devices if align > 1 else num_devices


def _choose_chunk(
    bytes_per_run: int,
    budget: int,
    num_devices: int,
    runs: int,
    chunk_size: int | None,
    cpu_chunk_cap: int | None = None,
    fp: Footprint | None = None,
    align: int = 1,
    unit: int = 1,
    fewer_cpu_devices: bool = False,
) -> int:
    """Runs per chunk: what fits ``budget``, at most ``cpu_chunk_cap`` and the work unless asked for
    ``chunk_size``, a multiple of the devices (and with ``align`` seeds reduced, of ``unit``: the caller's
    :func:`_chunk_unit`, or a resumed folder's older one); ResourceError if not one unit fits, saying how many
    CPU devices would hold it where ``fewer_cpu_devices`` (CPU devices share the host's memory, and the
    ``jaxreplay`` command makes one per core)."""
    fit = budget // max(bytes_per_run, 1)

    def fewer(devices: int) -> str:
        if not fewer_cpu_devices or not 1 <= devices < num_devices:
            return ""
        return f" On a CPU, {devices} device(s) would hold it: {cpu_devices_setting(devices)}."

    if align > 1:
        if fit < unit:
            raise ResourceError(
                f"a seed reduction (record.reduce) needs every seed of a configuration in one chunk on one device: "
                f"{unit} runs ({align} seeds on {num_devices} device(s)) need about {mib(bytes_per_run * unit)} of "
                f"device memory, but the memory budget is {mib(budget)} ({fit} runs).{fewer(fit // align)}",
                "Reduce on the host instead (no record.reduce), run fewer seeds or on fewer devices,",
                lower=("record.reduce", "seeds"),
                budget=True,
            )
        if chunk_size is None:
            wanted = min(fit, cpu_chunk_cap or fit, -(-runs // unit) * unit)
        else:
            wanted = min(fit, max(chunk_size, unit))  # asked for: at least one whole configuration per chunk
        return max(unit, wanted // unit * unit)
    if fit < num_devices:
        raise _too_large_a_run(
            f"one run needs about {mib(bytes_per_run)} of device memory and {num_devices} device(s) need at least "
            f"{num_devices} runs per chunk ({mib(bytes_per_run * num_devices)}), but the memory budget is "
            f"{mib(budget)}.{fewer(fit)}",
            fp,
        )
    if chunk_size is None:
        chunk = min(fit, cpu_chunk_cap if cpu_chunk_cap else fit)
        chunk = min(chunk, -(-runs // num_devices) * num_devices)  # no point padding beyond the work
    else:
        # Asked for: exactly that program shape (padded if the work is smaller), so that sweeps
        # of any size run their runs at one batch size (XLA may round a run differently at another).
        chunk = min(fit, chunk_size)
    return max(num_devices, chunk // num_devices * num_devices)
