"""Batch: the program a sweep's runs are computed in, recorded so that a resumed sweep never mixes programs.

A chunk's bits depend on more than its runs' seeds and hyperparameters: on the
backend and device, the batch size XLA compiled for, ``XLA_FLAGS``, the
experiment's compiler options, whether runs were grouped by setup, and the
XLA (jaxlib) that compiled them. :class:`Batch` records these with every
chunk and in ``sweep.json``, with a fingerprint of the programs themselves
(:func:`program_fingerprint`: another jaxreplay, or another version of its
dependencies' code, may build other programs); :func:`check_batch` and
:func:`check_program` refuse, in one line saying what to do, to compute the
missing runs of a folder in another program.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
from typing import Any, NamedTuple

__all__ = [
    "Batch",
    "BATCH_INDEPENDENCE_FLAGS",
    "check_batch",
    "check_program",
    "compiler_options_text",
    "cpu_core_devices",
    "cpu_devices_setting",
    "cpu_thread_pool_size",
    "program_fingerprint",
    "use_cpu_cores",
    "xla_flags_in_environment",
    "xla_version",
]

BATCH_INDEPENDENCE_FLAGS = ("--xla_cpu_max_isa=SSE4_2", "--xla_cpu_experimental_ynn_fusion_type=")
"""The two XLA:CPU flags that removed the batch dependence docs/design.md §5 describes on the x86 CPU
measured: no fused multiply-add instructions (whose contraction of ``a·b + c`` depends on how XLA fuses a
program; ``AVX``, also without them, crashed XLA with SIGFPE on a 10-run DQN program) and no YNNPACK fusions
(benchmarks/README.md measures them; not a guarantee on other CPUs)."""

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
"""XLA's flag forcing the number of CPU devices: recorded as :attr:`Batch.devices`, not as a flag."""


def xla_flags_in_environment(environ=None) -> str:
    """``XLA_FLAGS`` of ``environ`` (default ``os.environ``) as XLA applies them: each flag's last value only,
    sorted, the forced host device count left out.

    XLA takes the last value of a flag given twice (``--xla_cpu_max_isa=SSE4_2 --xla_cpu_max_isa=AVX2`` compiles
    with fused multiply-adds; the other order without): an earlier value is dropped, so two orders that compile
    different code record different flags. XLA reads ``XLA_FLAGS`` once, when JAX starts its backend; this
    reads the environment now, so it is what was in force if nobody changed it after JAX's first computation
    (the CLI and the engine never change it).
    """
    last = _xla_flags(os.environ if environ is None else environ)
    return " ".join(sorted(f for name, f in last.items() if name != DEVICE_COUNT_FLAG))


def _xla_flags(environ) -> dict[str, str]:
    """``XLA_FLAGS`` of ``environ`` as ``{name: flag}``, each name's last value (the one XLA applies)."""
    return {flag.split("=", 1)[0]: flag for flag in str(environ.get("XLA_FLAGS", "")).split()}


def cpu_thread_pool_size(cpu_devices: int, environ=None) -> int:
    """The threads of XLA:CPU's pool in this process, as XLA's CPU client sizes it: the first of ``PJRT_NPROC``
    and ``NPROC`` that reads as an integer (a sign allowed; below 0 counts as 0), else the CPUs this process may
    run on (its affinity: ``taskset``, a cpuset, a SLURM allocation; not the host's count), and at least its
    ``cpu_devices``.

    XLA:CPU splits a large matrix product over these threads, and how it splits it changes how the product
    rounds: measured on MinAtar's convolutional network, whose weight gradients (a contraction over the batch
    times 64 patches) differed between pools of 2 and 4 threads in their last bits, and a run then played
    other episodes; and on 512-wide MLPs between pools of 1 and 2.
    """
    environ = os.environ if environ is None else environ
    for name in ("PJRT_NPROC", "NPROC"):
        asked = _integer(environ.get(name))
        if asked is not None:
            return max(asked, 0, cpu_devices)
    return max(_usable_cpus(), cpu_devices)


CGROUP_V2_CPU_MAX = "/sys/fs/cgroup/cpu.max"
CGROUP_V1_CPU = "/sys/fs/cgroup/cpu"
"""Where a cgroup's CPU quota is read (v2's file; v1's folder): :func:`cpu_core_devices`."""


def cpu_core_devices(environ=None, cpu_max: str = CGROUP_V2_CPU_MAX, cgroup_v1: str = CGROUP_V1_CPU) -> int:
    """The CPU devices :func:`use_cpu_cores` gives JAX: the usable cores, at most the threads of XLA:CPU's pool
    (:func:`cpu_thread_pool_size`; a ``PJRT_NPROC`` or ``NPROC`` above the cores sizes the pool, not the cores
    that run it) and at most the CPU time a cgroup grants (``cpu_max``, cgroup v2's ``"quota period"``, else
    cgroup v1's files under ``cgroup_v1``; rounded up: a container limited to 2 CPUs on a 64-core host may run
    on every core, 2 at a time)."""
    return max(1, min(cpu_thread_pool_size(1, environ), _usable_cpus(), _cgroup_cpus(cpu_max, cgroup_v1)))


def _cgroup_cpus(cpu_max: str = CGROUP_V2_CPU_MAX, v1: str = CGROUP_V1_CPU) -> int:
    """The CPUs a cgroup grants (quota ÷ period, rounded up): cgroup v2's ``cpu.max`` file (``"quota period"``),
    else cgroup v1's ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` under ``v1``; a huge number where neither
    is there or readable, or where there is no quota (``max``, ``-1``)."""
    for files in ((cpu_max,), (f"{v1}/cpu.cfs_quota_us", f"{v1}/cpu.cfs_period_us")):
        try:
            words = " ".join(pathlib.Path(f).read_text() for f in files).split()
        except OSError:
            continue
        try:
            quota, period = int(words[0]), int(words[1])
        except (IndexError, ValueError):  # ("max": no quota)
            break
        return -(-quota // period) if quota > 0 and period > 0 else 2**31
    return 2**31


def use_cpu_cores(environ=None) -> int | None:
    """Give JAX one CPU device per usable core (at most the threads of XLA:CPU's pool, :func:`cpu_thread_pool_size`),
    so that a sweep on a CPU shards each chunk over every core. The ``jaxreplay`` command calls it as it
    starts; in Python, call it before JAX's first computation.

    XLA:CPU runs one program's small kernels one after another on one core, so with one device a sweep left
    the other cores mostly idle (``python -m benchmarks --only cpu_devices`` measures the difference). The
    results keep their bits: the pool keeps its size (the count chosen here is at most that size), and the engine's
    runs are bit-identical across device counts (``docs/design.md`` §4; the benchmark checks it too).

    Where JAX is not imported yet this sets ``JAX_NUM_CPU_DEVICES`` in ``environ`` (default ``os.environ``,
    which JAX reads as it is imported, and which the processes started from this one inherit); else JAX's
    ``jax_num_cpu_devices`` option. It leaves JAX as it is, returning None, where a count was chosen already
    (``JAX_NUM_CPU_DEVICES``, the option, or ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``),
    where the pool has one thread, or where JAX's backends are running (the count can no longer change). Set
    ``JAX_NUM_CPU_DEVICES=1`` before starting for one CPU device.

    Returns:
        The number of CPU devices JAX will create, or None where this left JAX as it was.
    """
    environ = os.environ if environ is None else environ
    jax = sys.modules.get("jax")
    chosen = (
        str(environ.get("JAX_NUM_CPU_DEVICES", "")).strip() not in ("", "-1")  # (-1: JAX's own "not chosen")
        or DEVICE_COUNT_FLAG in _xla_flags(environ)
        or (jax is not None and jax.config.jax_num_cpu_devices not in (-1, None))
    )
    devices = cpu_core_devices(environ)
    if chosen or devices < 2:
        return None
    if jax is None:  # (importing JAX here would cost `jaxreplay --help` a second)
        environ["JAX_NUM_CPU_DEVICES"] = str(devices)
        return devices
    try:
        jax.config.update("jax_num_cpu_devices", devices)
    except RuntimeError:  # JAX's backends are running: its devices are what they are
        return None
    return devices


def _integer(text) -> int | None:
    """``text`` as a 32-bit integer the way XLA reads ``NPROC`` (``absl::SimpleAtoi``: surrounding whitespace
    and a sign allowed, base 10), or None."""
    text = str(text).strip() if text is not None else ""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if -(2**31) <= value < 2**31 else None


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; the host's count where the OS has none)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def compiler_options_text(options) -> str:
    """``{option: value}`` as recorded in a :class:`Batch`: ``"name=value"`` pairs, sorted, space-separated."""
    return " ".join(f"{name}={value}" for name, value in sorted(options.items()))


class Batch(NamedTuple):
    """The program a sweep's runs are computed in, as far as a run's bits depend on it.

    XLA compiles a chunk's program for its shape and the machine, and may round
    a run differently in a program of another batch size (measured:
    ``benchmarks/README.md``), on another backend or under other ``XLA_FLAGS``.
    Recorded in ``sweep.json`` and in every chunk, so a resumed sweep computes
    its missing runs in the same program or refuses (:func:`~jaxreplay.engine.plan.make_plan`).

    Attributes:
        platform: JAX's platform of the devices (``"cpu"``, ``"gpu"``, ``"tpu"``).
        device_kind: their ``Device.device_kind`` (``"cpu"``, ``"NVIDIA H100 80GB HBM3"``).
        devices: local devices a chunk's run axis is sharded over.
        runs_per_device: runs in each device's program (the chunk size over ``devices``).
        xla_flags: :func:`xla_flags_in_environment` when the runs were computed.
        grouping: ``"grouped"`` where runs were computed in programs of their
            experiment's group setups (``Experiment.setup_groups``) other than
            the sweep's own setup; ``""`` where every run was computed with the
            sweep's setup (left out of :meth:`to_dict`: the record of a sweep
            with one program is what it was before groups existed).
        compiler_options: the XLA options the programs were compiled with
            (:attr:`jaxreplay.experiments.Experiment.compiler_options` of the
            platform, :func:`compiler_options_text`); ``""`` where none (left
            out of :meth:`to_dict` then, as records written before options existed).
        xla_version: the JAX and jaxlib (XLA) versions that compiled the
            programs (:func:`xla_version`): another XLA may round a run
            otherwise. ``""`` in records written before it was recorded,
            which then resume under any version (nothing to compare).
        program: :func:`program_fingerprint` of the programs that computed the
            runs (every group's), set by :func:`jaxreplay.engine.sweep.run` once
            the plan is made (:func:`check_program` compares it); ``""`` in
            records written before it was recorded, which then resume under
            any program (nothing to compare), and in a plan (pure: it compiles nothing).
        cpu_threads: on a CPU, XLA:CPU's thread pool (:func:`cpu_thread_pool_size`), which a large matrix
            product's rounding depends on; 0 on other platforms and in records written before it was
            recorded, which then resume with any pool (nothing to compare).
        prng: JAX's PRNG settings the run keys were made under (:func:`jaxreplay._prng.settings`: another
            implementation draws other numbers); ``""`` in records written before it was recorded, which then
            resume under any (nothing to compare).
        jax_settings: the JAX settings the programs were lowered under (:func:`jaxreplay._scope.lowering_settings`:
            matmul precision, partitioner, optimization settings not at JAX's defaults); ``""`` in records written
            before it was recorded, which then resume under any (nothing to compare).
        defaults: the values the runs took for the hyperparameters the sweep does not set, as JSON
            (:meth:`~jaxreplay.engine.declaration.Sweep.unset_hyperparameters`): the experiment's defaults,
            which a later jaxreplay may change without changing the sweep's config or programs (they are traced
            inputs); ``""`` in records written before it was recorded, which then resume under any.
    """

    platform: str
    device_kind: str
    devices: int
    runs_per_device: int
    xla_flags: str
    grouping: str = ""
    compiler_options: str = ""
    xla_version: str = ""
    program: str = ""
    cpu_threads: int = 0
    prng: str = ""
    jax_settings: str = ""
    defaults: str = ""

    def unrecorded(self) -> tuple[str, ...]:
        """The fields of :data:`UNKNOWN_WHERE_UNRECORDED` this record leaves empty (written before they existed)."""
        return tuple(name for name in UNKNOWN_WHERE_UNRECORDED if not getattr(self, name))

    @property
    def chunk_size(self) -> int:
        """Runs per compiled call, over all local devices."""
        return self.devices * self.runs_per_device

    @property
    def batch_independence_flags(self) -> bool:
        """Whether both :data:`BATCH_INDEPENDENCE_FLAGS` were in ``xla_flags``."""
        return all(flag in self.xla_flags.split() for flag in BATCH_INDEPENDENCE_FLAGS)

    def to_dict(self) -> dict:
        """As stored in ``sweep.json`` and in a chunk (JSON; the derived flag spelled out for readers)."""
        stored = dict(self._asdict(), batch_independence_flags=self.batch_independence_flags)
        for optional in self._fields[_REQUIRED:]:  # (left out where empty: as records before they existed)
            if not stored[optional]:
                del stored[optional]
        return stored

    @classmethod
    def from_dict(cls, stored: dict) -> "Batch":
        """The :class:`Batch` that :meth:`to_dict` stored. ValueError if a field is missing or mistyped."""
        try:
            # (the fields after the first five: absent from records written before they existed, and where empty)
            values: dict[str, Any] = {name: stored[name] for name in cls._fields[:_REQUIRED]}
            values.update({name: stored.get(name, cls._field_defaults[name]) for name in cls._fields[_REQUIRED:]})
            batch = cls(**values)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a recorded batch ({type(e).__name__}: {e})") from None
        kinds: tuple[type, ...] = (str, str, int, int, str)
        kinds += tuple(type(cls._field_defaults[name]) for name in cls._fields[_REQUIRED:])
        if not all(isinstance(v, k) and not isinstance(v, bool) for v, k in zip(batch, kinds)):
            raise ValueError(f"not a recorded batch: {stored!r}")
        return batch

    def describe(self) -> str:
        """``"4 runs per device on 1 × cpu (cpu), XLA_FLAGS ''"`` (``", grouped by setup"`` where grouped)."""
        return (
            f"{self.runs_per_device} run(s) per device on {self.devices} × {self.device_kind} "
            f"({self.platform}), XLA_FLAGS {self.xla_flags!r}"
            + (f", compiler options {self.compiler_options!r}" if self.compiler_options else "")
            + (", grouped by setup" if self.grouping else "")
        )


_REQUIRED = 5  # Batch's fields every record has (platform ... xla_flags); those after were added since, defaulted

UNKNOWN_WHERE_UNRECORDED = ("xla_version", "cpu_threads", "prng", "jax_settings", "defaults")
"""Batch fields a record written before they existed leaves empty: such a folder resumes under any value (nothing
to compare), and its new chunks record none either, so that its old and new chunks stay one batch."""


def xla_version() -> str:
    """``"jax 0.10.2, jaxlib 0.10.2"``: the versions whose XLA compiles this process's programs."""
    import jax
    import jaxlib

    return f"jax {jax.__version__}, jaxlib {jaxlib.__version__}"


def check_batch(recorded: Batch | None, batch: Batch, chunk_size: int | None, missing: int, out) -> None:
    """Refuse (ValueError, one line) computing the ``missing`` runs of ``out`` in another program than
    its finished runs were computed in (``recorded``; None: none recorded, nothing to check).

    ``chunk_size`` is the chunk size the caller asked for (None: none; the
    plan then asked for the recorded one and got ``batch.chunk_size``).
    """
    if recorded is not None:
        # A field recorded before it existed has nothing to compare; the programs are compared once they are
        # built (check_program).
        unknown = {name: getattr(batch, name) for name in recorded.unrecorded()}
        recorded = recorded._replace(**unknown, program=batch.program)
    if recorded is None or not missing or recorded == batch:
        return
    where = f"{out} holds runs computed at {recorded.describe()}"
    keep = "so that runs computed in different programs are never mixed into one sweep (XLA may round them differently)"
    if (recorded.platform, recorded.device_kind) != (batch.platform, batch.device_kind):
        raise ValueError(
            f"{where}; this process runs on {batch.device_kind} ({batch.platform}). Finish the sweep on "
            f"{recorded.device_kind} ({recorded.platform}), or use a new output folder, {keep}."
        )
    if recorded.xla_flags != batch.xla_flags:
        raise ValueError(
            f"{where}; this process has XLA_FLAGS {batch.xla_flags!r}. Set XLA_FLAGS to {recorded.xla_flags!r} "
            f"before starting Python (XLA reads it once), or use a new output folder, {keep}."
        )
    if recorded.xla_version != batch.xla_version:
        raise ValueError(
            f"{where} with {recorded.xla_version}; this process has {batch.xla_version}. Finish the sweep with "
            f"the versions that started it (pip install the jax and jaxlib named), or use a new output folder, {keep}."
        )
    _check_jax_settings(recorded, batch, where, keep)
    if recorded.defaults != batch.defaults:
        there, here = json.loads(recorded.defaults), json.loads(batch.defaults)
        changed = "; ".join(
            f"{name} {there.get(name, 'not a hyperparameter')} there, {here.get(name, 'not a hyperparameter')} here"
            for name in sorted(set(there) | set(here))
            if there.get(name) != here.get(name)
        )
        raise ValueError(
            f"{where}, the hyperparameters it does not set at that jaxreplay's defaults; this jaxreplay's differ "
            f"({changed}), so its missing runs would run at other values. Finish the sweep with the jaxreplay "
            "that started it, or use a new output folder, so that runs computed at different values are never "
            "mixed into one sweep."
        )
    if recorded.compiler_options != batch.compiler_options:
        raise ValueError(
            f"{where}; this jaxreplay compiles the experiment with compiler options {batch.compiler_options!r} "
            "(they make a run's result independent of its chunk, and on a GPU of its process: docs/design.md §4). "
            "Finish the sweep with the "
            f"jaxreplay that started it, or use a new output folder, {keep}."
        )
    if recorded.grouping != batch.grouping:
        now = (
            "groups its runs by setup (one program per group)"
            if batch.grouping
            else "compiles every run with the sweep's own setup"
        )
        raise ValueError(
            f"{where}; this call {now}. Rerun with group_by_setup {'false' if batch.grouping else 'true'} "
            f"([run] group_by_setup in the TOML), or use a new output folder, {keep}."
        )
    _check_devices(recorded, batch, where, keep)
    if recorded.cpu_threads != batch.cpu_threads:
        raise ValueError(
            f"{where} with XLA:CPU's thread pool of {recorded.cpu_threads} threads; this process has "
            f"{batch.cpu_threads} (XLA:CPU splits large matrix products over them, which changes how they "
            f"round). Set PJRT_NPROC={recorded.cpu_threads} before starting Python, with at most "
            f"{recorded.cpu_threads} CPU device(s) (XLA gives each CPU device a thread of the pool at least: "
            f"{cpu_devices_setting(recorded.cpu_threads)}), or use a new output folder, {keep}."
        )
    if chunk_size is not None:
        raise ValueError(
            f"{where} (chunk_size {recorded.chunk_size}), but chunk_size {chunk_size} asked for computes its "
            f"{missing} missing runs at {batch.runs_per_device} per device: rerun with chunk_size "
            f"{recorded.chunk_size} (--chunk-size {recorded.chunk_size}) or none, or use a new output folder, {keep}."
        )
    raise ValueError(
        f"{where} (chunk_size {recorded.chunk_size}), but only {batch.chunk_size} runs fit the memory budget "
        f"now: free device memory or raise memory_budget / memory_fraction, or use a new output folder, {keep}."
    )


def cpu_devices_setting(devices: int) -> str:
    """How to give a process ``devices`` CPU devices, in words for a refusal (the ``jaxreplay`` command gives
    JAX one per core, a Python session one)."""
    return (
        f"set JAX_NUM_CPU_DEVICES={devices} in the environment of the jaxreplay command or of Python, or "
        f'jax.config.update("jax_num_cpu_devices", {devices}) right after importing jax'
    )


def _check_devices(recorded: Batch, batch: Batch, where: str, keep: str) -> None:
    """:func:`check_batch`'s refusal of a resume on another number of local devices, saying how to get the
    recorded number."""
    if recorded.devices == batch.devices:
        return
    if recorded.devices < batch.devices:
        # Planned only where devices were given or processes are several: one process given none resumes on the
        # recorded count by itself (runner._Planner._fewer_devices).
        how = (
            f" (pass {recorded.devices} of them as run's devices or, in a single process, none: run then takes "
            f"{recorded.devices})"
        )
    elif batch.platform == "cpu":
        how = f" ({cpu_devices_setting(recorded.devices)})"
    else:
        how = ""
    raise ValueError(
        f"{where}; this process shards over {batch.devices} device(s). Finish the sweep with "
        f"{recorded.devices} local device(s){how}, or use a new output folder, {keep}."
    )


def _check_jax_settings(recorded: Batch, batch: Batch, where: str, keep: str) -> None:
    """:func:`check_batch`'s refusal of a resume under other JAX settings (PRNG, lowering), naming both."""
    if recorded.prng != batch.prng:
        impl, partitionable = recorded.prng.split(", ")
        raise ValueError(
            f"{where} with JAX's PRNG {recorded.prng}; this process has {batch.prng}, which draws other numbers. "
            f'Set jax.config.update("jax_default_prng_impl", "{impl}") and jax.config.update('
            f'"jax_threefry_partitionable", {partitionable == "partitionable"}) before the sweep, or use a new '
            f"output folder, {keep}."
        )
    if recorded.jax_settings != batch.jax_settings:
        raise ValueError(
            f"{where} with JAX's {recorded.jax_settings}; this process has {batch.jax_settings}, which lowers "
            'other programs. Set them back before the sweep (jax.config.update("jax_default_matmul_precision", '
            '...), jax.config.update("jax_use_shardy_partitioner", ...), or the JAX_DEFAULT_MATMUL_PRECISION '
            "and JAX_USE_SHARDY_PARTITIONER environment variables; likewise JAX's optimization settings, such as "
            f"JAX_DISABLE_MOST_OPTIMIZATIONS), or use a new output folder, {keep}."
        )


def program_fingerprint(texts) -> str:
    """A short fingerprint (16 hex digits of SHA-256) of programs given as their lowered text
    (``jax.stages.Lowered.as_text()``, which leaves out source locations), in any order.

    Two calls that build the same computation get the same fingerprint whatever
    else changed in the code (a comment, a docstring, a line moved); a change to
    what the program computes (an operation, a constant, an order of
    operations) gives another.
    """
    import hashlib

    digest = hashlib.sha256()
    for text in sorted(texts):
        digest.update(hashlib.sha256(text.encode()).digest())
    return digest.hexdigest()[:16]


def check_program(recorded: Batch | None, program: str, missing: int, out) -> None:
    """Refuse (ValueError, one line) computing the ``missing`` runs of ``out`` with programs whose
    :func:`program_fingerprint` is ``program`` where its finished runs were computed by others.

    Nothing to compare where ``recorded`` is None or records no program (written
    before programs were recorded), or where no run is missing.
    """
    if recorded is None or not recorded.program or not missing or recorded.program == program:
        return
    raise ValueError(
        f"{out} holds runs computed by other programs than this jaxreplay builds for its sweep (program "
        f"{recorded.program}; now {program}): the code that builds them changed since (jaxreplay, or an "
        "experiment's or a dependency's code), or a JAX setting that shapes the programs (a jax.config or JAX_* "
        "environment setting this folder does not record), and the missing runs could come out otherwise. Finish "
        "the sweep with the code and settings that started it, or use a new output folder, so that runs "
        "computed by different programs are never mixed into one sweep."
    )
