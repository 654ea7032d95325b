"""Execute: a :class:`~jaxreplay.engine.plan.Plan`'s chunks through the compiled programs.

:func:`execute` dispatches each chunk of runs (padded to its group's chunk
size, so one compilation serves every chunk of a group) through ``jit(vmap(...))``
programs sharded over the local devices, one set per
:class:`~jaxreplay.engine.plan.Group` (its static setup), and hands each finished chunk's
arrays to a ``sink`` (the :class:`~jaxreplay.engine.store.ChunkStore`'s
``save``, or an in-memory assembler). Host work on segment k's outputs
(transfer, saving) overlaps the device's work on segment k + 1.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _prng, _scope
from jaxreplay._typing import ArrayLike
from jaxreplay.engine import records as records_lib

if TYPE_CHECKING:
    from jaxreplay.engine.declaration import Sweep
    from jaxreplay.engine.plan import Plan

__all__ = [
    "execute",
    "Execution",
    "padded_runs",
    "programs_for",
    "clear_program_cache",
    "PROGRAM_CACHE_SIZE",
    "RUN_AXIS",
]

RUN_AXIS = "runs"
"""The name of the mesh axis the run axis (configurations × seeds) is sharded over."""


class Programs:
    """The compiled programs of one sweep with one static setup (default: the sweep's).

    ``rest`` runs one segment and the summary on a chunk of states. A
    one-segment experiment (LineSearch) fuses the initialisation into it as
    ``first`` (one program); a multi-segment one (DQN) runs a small ``init``
    program and then ``rest`` for every segment, the first included, so the
    segment (the costly compile) is compiled once, not twice.

    Programs are compiled ahead of time on first use, once per argument
    signature (the chunk's shapes and dtypes), and kept: :func:`programs_for`
    keeps this object for the process, so a sweep run again (a notebook cell)
    or another grid over the same setup compiles nothing.
    """

    def __init__(self, sweep: Sweep, devices: Sequence[jax.Device], setup: object = None):
        from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

        exp, spec, seeds = sweep.exp, sweep.record, sweep.seeds
        setup = sweep.make_setup() if setup is None else setup
        # Auto axes: jax.make_mesh defaults to Explicit axes, under which vmap refuses
        # a mapped axis sharded differently from its outputs ("Mapped away dimension ... sharded the same").
        mesh = Mesh(np.array(devices), (RUN_AXIS,), axis_types=(AxisType.Auto,))
        self.devices = tuple(devices)
        self.batched = NamedSharding(mesh, PartitionSpec(RUN_AXIS))
        self.replicated = NamedSharding(mesh, PartitionSpec())
        self.compilations = 0
        self.compile_seconds = 0.0

        def one_segment(state, hparams):
            state, record = exp.advance(state, hparams, setup)
            if not spec.is_default:  # records on demand: only what is kept leaves the program
                record = records_lib.select(spec, record)
            return state, record, exp.summarize(state, hparams, setup)

        def segment(state, hparams):
            state, record, summary = jax.vmap(one_segment)(state, hparams)
            if spec.reduce:  # over the seeds of each configuration (the chunk holds whole ones)
                record = records_lib.reduce_seeds(spec, record, seeds)
            return state, record, summary

        platform = devices[0].platform

        def init(base_seed, seed_index, hparams):
            keys = run_keys(base_seed, seed_index, platform)
            return jax.vmap(lambda k, h: exp.init(k, h, setup))(keys, hparams)

        def first(base_seed, seed_index, hparams):
            # The final state of a one-segment run is never read: not an output, so it is never written
            # out (a 10^6-run LineSearch chunk's rings are ~20 GB) nor kept alive beside the next chunk.
            _, record, summary = segment(init(base_seed, seed_index, hparams), hparams)
            return record, summary

        self.fused = int(exp.num_segments(setup)) == 1
        # Reduced records have one row per configuration: too few to shard evenly, and small.
        outputs = (self.batched, self.replicated if spec.reduce else self.batched, self.batched)
        self._first = jax.jit(
            first if self.fused else init,
            in_shardings=(self.replicated, self.batched, self.batched),
            out_shardings=outputs[1:] if self.fused else self.batched,
        )
        self._rest = jax.jit(
            segment, in_shardings=(self.batched, self.batched), out_shardings=outputs, donate_argnums=0
        )
        self._compiled: dict = {}
        self._texts: dict[int, tuple[str, ...]] = {}
        self.compiler_options = exp.compiler_options_on(devices[0].platform)

    def _get(self, name, jitted, *args):
        leaves, treedef = jax.tree.flatten(args)
        # Shapes and dtypes only (never np.asarray on a device array: that would copy it to the host).
        signature = (name, treedef, tuple((np.shape(x), x.dtype) for x in leaves))
        compiled = self._compiled.get(signature)
        if compiled is None:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
                compiled = jitted.lower(*args).compile(compiler_options=self.compiler_options)
            self.compile_seconds += time.perf_counter() - t0
            self.compilations += 1
            self._compiled[signature] = compiled
        return compiled

    def device_bytes(self, sweep: Sweep, runs: np.ndarray) -> int:
        """Device bytes a chunk of ``runs`` (the padded chunk) needs at once, by XLA's accounting of its
        compiled program (``memory_analysis``), over all the devices: arguments, temporaries, and outputs
        twice (a segment's or chunk's outputs are still alive while the next one is dispatched, see
        :func:`execute`). The program is compiled here as :func:`execute` will call it (kept, not compiled
        again); 0 where the backend gives no accounting."""
        # The last program sets the memory: the fused one, or the segment program (not its small init).
        compiled = self._get(*self._chunk_programs(sweep, runs)[-1])
        try:
            m = compiled.memory_analysis()
        except Exception:  # a backend without the accounting
            return 0
        if m is None:
            return 0
        per_device = (
            m.argument_size_in_bytes + 2 * m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
        )
        return int(per_device) * len(self.devices)

    def program_texts(self, sweep: Sweep, chunk_size: int) -> tuple[str, ...]:
        """The lowered text (``Lowered.as_text()``: no source locations) of the programs a chunk of
        ``chunk_size`` runs goes through: ``first`` and, for a multi-segment experiment, ``rest``.
        Lowered only (the trace; XLA compiles nothing here), and kept per chunk size."""
        texts = self._texts.get(chunk_size)
        if texts is None:
            # Shapes and dtypes are all that a program depends on: any runs of the chunk's size will do.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
                texts = tuple(
                    jitted.lower(*args).as_text()
                    for _, jitted, *args in self._chunk_programs(sweep, np.zeros(chunk_size, np.int64))
                )
            self._texts[chunk_size] = texts
        return texts

    def _chunk_programs(self, sweep: Sweep, runs: np.ndarray) -> list[tuple]:
        """``(name, jitted, *args)`` of each program a chunk of ``runs`` goes through, in order: ``first``,
        and for a multi-segment experiment ``rest`` with its state's shapes (not computed)."""
        seed_index, hparams = self.chunk_inputs(sweep, runs)  # (tiny: a few numbers a run)
        base_seed = jax.device_put(np.uint32(sweep.seed), self.replicated)
        programs: list[tuple] = [("first", self._first, base_seed, seed_index, hparams)]
        if not self.fused:
            state = jax.eval_shape(self._first, base_seed, seed_index, hparams)
            programs.append(("rest", self._rest, state, hparams))
        return programs

    def chunk_inputs(self, sweep: Sweep, runs: np.ndarray) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        """``(seed_index, hparams)`` of the (padded) chunk ``runs``, on the devices, sharded over the run axis."""
        seed_index = jax.device_put((runs % sweep.seeds).astype(np.uint32), self.batched)
        return seed_index, jax.device_put(sweep.hyperparameters(runs), self.batched)

    def run_first(
        self, base_seed: jax.Array, seed_index: jax.Array, hparams: tuple[jax.Array, ...]
    ) -> tuple[object, dict[str, jax.Array], dict[str, jax.Array]]:
        """Initialise a chunk of runs (keys ``fold_in(key(base_seed), seed_index)``) and run its first
        segment: ``(state, record, summary)``; ``state`` is None for a one-segment experiment (its final state
        is never read, so never kept)."""
        out = self._get("first", self._first, base_seed, seed_index, hparams)(base_seed, seed_index, hparams)
        return (None, *out) if self.fused else self.run_rest(out, hparams)

    def run_rest(
        self, state: object, hparams: tuple[jax.Array, ...]
    ) -> tuple[object, dict[str, jax.Array], dict[str, jax.Array]]:
        """Run the next segment of a chunk of runs (``state`` is donated): ``(state, record, summary)``."""
        compiled = self._get("rest", self._rest, state, hparams)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
            return compiled(state, hparams)


PROGRAM_CACHE_SIZE = 8
"""How many sweeps' compiled programs the process keeps (least recently used dropped first)."""
_PROGRAM_CACHE: OrderedDict = OrderedDict()


def programs_for(sweep: Sweep, devices: Sequence[jax.Device], setup: object = None) -> Programs:
    """The :class:`Programs` of ``sweep`` with ``setup`` (default: the sweep's) on ``devices``, kept for
    the process (the last :data:`PROGRAM_CACHE_SIZE`)."""
    # What a program depends on: the experiment, its static setup, the devices and JAX's PRNG settings.
    # Hyperparameters, seeds and grids are arguments, so they share the programs.
    # What is kept of the records is compiled in too (and the seed count, to reduce over seeds).
    setup = sweep.make_setup() if setup is None else setup
    fields = {f.name: getattr(setup, f.name) for f in dataclasses.fields(setup)}  # type: ignore[arg-type]
    key = (
        sweep.experiment,
        _prng.settings(),  # (the run keys are made inside the programs: another PRNG, other draws)
        _scope.lowering_settings(),  # (matmul precision, partitioner: lowered into the programs)
        json.dumps(fields, sort_keys=True, default=repr),
        tuple((d.platform, d.id) for d in devices),
        sweep.record,
        sweep.seeds if sweep.record.reduce else None,
    )
    programs = _PROGRAM_CACHE.pop(key, None) or Programs(sweep, devices, setup)
    _PROGRAM_CACHE[key] = programs
    while len(_PROGRAM_CACHE) > PROGRAM_CACHE_SIZE:
        _PROGRAM_CACHE.popitem(last=False)
    return programs


def clear_program_cache() -> None:
    """Forget every compiled sweep program kept by this process (frees their device memory)."""
    _PROGRAM_CACHE.clear()


def run_keys(base_seed: ArrayLike, seed_index: ArrayLike, platform: str) -> jax.Array:
    """The PRNG keys of runs of seed indices ``seed_index`` (``[R]``) in a sweep of base seed ``base_seed``:
    ``fold_in(key(base_seed), seed_index)``, the one place the engine derives them (traceable).

    The base key is :func:`jaxreplay._prng.key`'s: JAX's default bits, its hash written out as
    straight-line code on the CPU (``platform``), so a run's draws are those of ``jax.random.key``'s key.
    """
    base = _prng.key(base_seed, platform)
    return jax.vmap(lambda s: jax.random.fold_in(base, s))(jnp.asarray(seed_index, jnp.uint32))


def padded_runs(runs: np.ndarray, chunk: int, align: int) -> np.ndarray:
    """``runs`` padded to ``chunk`` runs with copies of the last ``align`` (the last configuration's runs,
    to keep whole configurations), so every chunk of a group has one shape (no recompile); the copies'
    results are dropped."""
    return np.concatenate([runs, np.resize(runs[-align:], chunk - len(runs))])


class Execution(NamedTuple):
    """What :func:`execute` did: ``compilations`` (new programs compiled), ``compile_seconds`` and
    ``run_seconds`` (wall time less compilation)."""

    compilations: int
    compile_seconds: float
    run_seconds: float


def execute(
    sweep: Sweep,
    plan: Plan,
    programs: Programs | Sequence[Programs],
    sink: Callable[[dict], None],
    progress: bool = False,
) -> Execution:
    """Compute the chunks of ``plan`` and hand each finished one to ``sink``.

    ``programs`` are those of each of ``plan.groups`` (:func:`programs_for` of its setup), in order; one
    :class:`Programs` where the plan has one group.

    ``sink`` receives ``{"record.<name>": [runs, points, ...], "summary.<name>": [runs, ...],
    "run_index": int64[runs]}`` for each chunk (padding removed); with a seed
    reduction, ``"reduced.<name>": [configurations, reductions, points, ...]``
    and ``"config_index": int64[configurations]`` instead of ``record.*``.
    Only the segments holding a kept record point are copied to the host.
    """
    exp, setup, spec = sweep.exp, sweep.make_setup(), sweep.record
    num_segments = int(exp.num_segments(setup))  # (every group's: the plan checked it)
    align = plan.align
    prefix = "reduced." if spec.reduce else "record."
    axis = 2 if spec.reduce else 1  # the points axis, concatenated over segments
    by_group = [programs] if isinstance(programs, Programs) else list(programs)
    compilations_before = sum(p.compilations for p in by_group)
    compile_seconds_before = sum(p.compile_seconds for p in by_group)
    bar = None
    if progress and plan.chunks and sys.stderr is not None:  # (None where the process began with stderr closed)
        from tqdm.auto import tqdm

        # Counted in run-segments (integers: no float drift) and shown in runs, to one decimal (tqdm shows
        # the scaled count as it is: 76 segments of 5 were "15.200000000000001").
        bar = tqdm(
            total=plan.runs_to_compute * num_segments,
            unit="run",
            unit_scale=1 / num_segments,
            desc=f"sweep {sweep.experiment}",
            file=sys.stderr,
            dynamic_ncols=True,
            bar_format="{l_bar}{bar}| {n:.1f}/{total:.0f} [{elapsed}<{remaining}, {rate_fmt}{postfix}]",
        )
    t_start = time.perf_counter()
    base_seed = jax.device_put(np.uint32(sweep.seed), by_group[0].replicated)  # (one mesh: the same devices)
    # JAX dispatches asynchronously: dispatch segment k + 1 first, then drain segment k
    # (one step behind). At most two segments' records are in flight at once.
    collected: dict[int, list] = {}
    pending = None

    def drain(item):
        chunk_id, runs, record, summary = item
        valid = len(runs)
        rows = valid // sweep.seeds if spec.reduce else valid
        segments = collected.setdefault(chunk_id, [])
        if record is not None:
            segments.append({k: np.asarray(v)[:rows] for k, v in record.items()})
        if bar is not None:
            bar.update(valid)
        if summary is None:
            return
        del collected[chunk_id]
        result = {
            f"{prefix}{k}": np.concatenate([r[k] for r in segments], axis=axis)
            for k in (segments[0] if segments else ())
        }
        result.update({f"summary.{k}": np.asarray(v)[:valid] for k, v in summary.items()})
        result["run_index"] = runs.astype(np.int64)
        if spec.reduce:
            result["config_index"] = runs[:: sweep.seeds].astype(np.int64) // sweep.seeds
        sink(result)

    try:  # (the bar is closed however the loop ends: an interrupted sweep's bar would stay drawn)
        for chunk_id, runs in enumerate(plan.chunks):
            group = plan.chunk_groups[chunk_id] if plan.chunk_groups else 0
            chunk_programs = by_group[group]
            chunk = plan.groups[group].chunk_size if plan.groups else plan.chunk_size
            seed_index, hparams = chunk_programs.chunk_inputs(sweep, padded_runs(runs, chunk, align))
            for segment in range(num_segments):
                if segment == 0:
                    state, record, summary = chunk_programs.run_first(base_seed, seed_index, hparams)
                else:
                    state, record, summary = chunk_programs.run_rest(state, hparams)
                if pending is not None:
                    drain(pending)
                kept = plan.segment_points and records_lib.segment_kept(spec, segment, plan.segment_points)
                pending = (chunk_id, runs, record if kept else None, summary if segment == num_segments - 1 else None)
        if pending is not None:
            drain(pending)
    finally:
        if bar is not None:
            bar.close()
    compile_seconds = sum(p.compile_seconds for p in by_group) - compile_seconds_before
    run_seconds = time.perf_counter() - t_start - compile_seconds
    compilations = sum(p.compilations for p in by_group) - compilations_before
    return Execution(compilations, compile_seconds, max(run_seconds, 0.0))
