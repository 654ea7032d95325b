"""Shared timing helpers for every benchmark: machine description and jitted timing.

The rules every benchmark in this package follows (and this module enforces
where it can):

* **Compile time is measured apart from run time.** :func:`time_jitted`
  lowers and compiles ahead of time (``jax.jit(fn).lower(...).compile()``)
  and reports that wall time as ``compile_s``; it then runs the compiled
  program once more as a warm-up before any timed repeat.
* **Steady state is the median of repeats**, each ended by
  ``jax.block_until_ready`` on the *whole* output, so asynchronous dispatch
  never hides work.
* **Outputs must depend on the work** (XLA deletes whatever does not reach an
  output). The benchmark functions carry a checksum of the data they read.
* The persistent compilation cache is turned off for the process (see
  :func:`disable_compilation_cache`), so ``compile_s`` is a cold compile even
  when ``JAX_COMPILATION_CACHE_DIR`` is set in the environment.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import jax
import numpy as np

# ----------------------------------------------------------------------------
# Machine description


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _memory_bytes(field: str) -> int | None:
    """A field of /proc/meminfo (``MemTotal``, ``MemAvailable``) in bytes, or None."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_memory_bytes() -> int | None:
    """Memory the OS says is available now (``MemAvailable``), or None if unknown."""
    return _memory_bytes("MemAvailable")


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_description(packages: tuple[str, ...] = ("jaxreplay", "jax", "jaxlib", "numpy", "flashbax")) -> dict[str, str]:
    """What the numbers were measured on: CPU, cores, memory, JAX backend and devices, versions."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 0
    total = _memory_bytes("MemTotal")
    devices = jax.devices()
    kinds: dict[str, int] = {}
    for d in devices:
        kinds[f"{d.device_kind} ({d.platform})"] = kinds.get(f"{d.device_kind} ({d.platform})", 0) + 1
    info = {
        "cpu": _cpu_model(),
        "cores": f"{usable} usable of {os.cpu_count()} logical",
        "memory": f"{total / 2**30:.1f} GiB" if total else "unknown",
        "os": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "python": platform.python_version(),
        "jax backend": jax.default_backend(),
        "jax devices": ", ".join(f"{n} × {k}" for k, n in kinds.items()),
    }
    for name in packages:
        info[name] = _version(name)
    try:
        info["load average"] = " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1 / 5 / 15 min, at start)"
    except OSError:
        pass
    xla_flags = os.environ.get("XLA_FLAGS")
    if xla_flags:
        info["XLA_FLAGS"] = xla_flags
    return info


def machine_markdown(info: dict[str, str] | None = None) -> str:
    """The machine description as a two-column markdown table."""
    info = machine_description() if info is None else info
    lines = ["| machine | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in info.items()]
    return "\n".join(lines)


def run_child_with_xla_flags(
    module: str, mode_name: str, flags: str, timeout: float, environ: dict[str, str] | None = None
) -> dict | str:
    """``python -m module --child mode_name`` in a fresh process with ``flags`` added to ``XLA_FLAGS`` (XLA
    reads them once, when JAX's backend starts) and ``environ`` added to its environment. Returns the JSON
    object the child prints last, or one line saying how it failed (a flag XLA rejects is reported, never
    fatal to the benchmark)."""
    env = dict(os.environ, **(environ or {}))
    env["XLA_FLAGS"] = " ".join(x for x in (env.get("XLA_FLAGS", ""), flags) if x)
    proc = subprocess.run(
        [sys.executable, "-m", module, "--child", mode_name], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        return f"failed (exit {proc.returncode}): {tail[:200]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def disable_compilation_cache() -> None:
    """Turn JAX's persistent compilation cache off so compile times are cold."""
    try:
        jax.config.update("jax_enable_compilation_cache", False)
    except (AttributeError, KeyError):  # option renamed in some future JAX
        pass


# ----------------------------------------------------------------------------
# Timing


@dataclasses.dataclass(frozen=True)
class Timing:
    """Result of :func:`time_jitted`.

    Attributes:
        compile_s: wall time of trace + lower + XLA compile (ahead of time).
        warmup_s: wall time of the first run of the compiled program
            (excluded from the statistics).
        times_s: wall time of each timed repeat.
    """

    compile_s: float
    warmup_s: float
    times_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeats: a noise indicator."""
        return (max(self.times_s) - min(self.times_s)) / self.median_s if self.times_s else float("nan")


@dataclasses.dataclass
class Program:
    """A compiled ``carry -> carry`` program and its current carry (see :func:`compile_program`)."""

    compiled: Any
    carry: Any
    compile_s: float
    warmup_s: float = float("nan")


def compile_program(
    fn: Callable[[Any], Any], carry: Any, *, donate: bool = True, compiler_options: dict[str, Any] | None = None
) -> Program:
    """Compile ``fn(carry) -> carry`` ahead of time, timing trace + lower + compile.

    ``fn`` maps a carry pytree to a new carry of the same structure (for
    example the state after T more steps, including a checksum of what was
    read). With ``donate=True`` the carry is donated, so state is updated in
    place (no O(state) copy per call) and each call continues from the last.
    ``compiler_options`` are XLA debug options for this compilation only
    (e.g. ``{"xla_cpu_copy_insertion_use_region_analysis": True}``).
    """
    jitted = jax.jit(fn, donate_argnums=(0,) if donate else ())
    start = time.perf_counter()
    compiled = jitted.lower(carry).compile(compiler_options=compiler_options)
    return Program(compiled, carry, time.perf_counter() - start)


def _call(program: Program) -> float:
    start = time.perf_counter()
    program.carry = jax.block_until_ready(program.compiled(program.carry))
    return time.perf_counter() - start


def time_interleaved(
    programs: list[Program],
    *,
    repeats: int = 5,
    min_repeats: int = 3,
    max_seconds: float | None = None,
) -> list[Timing]:
    """Warm up, then time compiled programs in interleaved rounds (A, B, A, B, ...).

    Interleaving makes the *ratio* of two programs robust to slow changes in
    the load of a shared machine: both see the same conditions. Each program
    is called once untimed (warm-up), then ``repeats`` timed rounds run
    (at least ``min_repeats``; after that, stop once the rounds have used
    ``max_seconds`` of wall time in total). Each call continues from the
    previous call's output (``program.carry`` is updated).
    """
    for program in programs:
        program.warmup_s = _call(program)
    times: list[list[float]] = [[] for _ in programs]
    spent = 0.0
    for i in range(max(repeats, min_repeats)):
        if i >= min_repeats and max_seconds is not None and spent >= max_seconds:
            break
        for program, program_times in zip(programs, times):
            elapsed = _call(program)
            program_times.append(elapsed)
            spent += elapsed
    return [Timing(p.compile_s, p.warmup_s, tuple(t)) for p, t in zip(programs, times)]


def time_jitted(
    fn: Callable[[Any], Any],
    carry: Any,
    *,
    repeats: int = 5,
    min_repeats: int = 3,
    max_seconds: float | None = None,
    donate: bool = True,
) -> tuple[Timing, Any]:
    """Compile, warm up and time one ``fn(carry) -> carry``; returns ``(timing, final_carry)``."""
    program = compile_program(fn, carry, donate=donate)
    (timing,) = time_interleaved([program], repeats=repeats, min_repeats=min_repeats, max_seconds=max_seconds)
    return timing, program.carry


def tree_bytes(tree: Any) -> int:
    """Bytes of every array (or ``ShapeDtypeStruct``) leaf in ``tree``."""
    total = 0
    for x in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            itemsize = 4 * int(np.prod(jax.random.key_data(jax.random.key(0)).shape))  # key data words
        else:
            itemsize = np.dtype(x.dtype).itemsize
        total += int(np.prod(x.shape, dtype=np.int64)) * itemsize
    return total


# ----------------------------------------------------------------------------
# Formatting


def format_rate(per_second: float) -> str:
    """``1234567.0`` -> ``'1.23 M'``."""
    if not np.isfinite(per_second):
        return "—"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_second >= scale:
            return f"{per_second / scale:.3g} {suffix}"
    return f"{per_second:.3g}"


def format_bytes(n: float) -> str:
    for scale, suffix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:.3g} {suffix}"
    return f"{n:.0f} B"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def engine_call(run: Callable, sweep) -> tuple[float, Any]:
    """``(seconds, result)`` of ``run(sweep, None)``: the wall time of the engine's whole call (planning, the
    chunks, the dataset assembled) less any compilation in it, what a user waits for once the programs are
    built. (The engine's own ``run_seconds`` counts the chunk loop only: 6-15 % less at 10⁴ LineSearch runs on
    the 2-core CPU.)"""
    t0 = time.perf_counter()
    result = run(sweep, None, progress=False)
    return time.perf_counter() - t0 - result.stats.compile_seconds, result


def engine_call_seconds(run: Callable, sweep) -> float:
    """The seconds of :func:`engine_call`."""
    return engine_call(run, sweep)[0]


def compiled_as_the_engine(fn: Callable, experiment, *args, static_argnums=()) -> Callable:
    """``fn`` compiled for ``args`` with the XLA options the engine compiles ``experiment``'s programs with,
    so that a baseline run one at a time is the same program as the engine's, unbatched (the options change
    the kernels: YNNPACK off on a CPU made one DQN seed 28 % slower than plain ``jax.jit``)."""
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    options = experiment.compiler_options_on(jax.default_backend())
    compiled = jax.jit(fn, static_argnums=static).lower(*args).compile(compiler_options=options)
    return lambda *call_args: compiled(*(a for i, a in enumerate(call_args) if i not in static))
