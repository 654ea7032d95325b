"""The machine's resources: device memory, host memory and disk, measured as numbers.

The plan (:func:`jaxreplay.engine.plan.make_plan`) is a pure function of
numbers; this module is where they come from. :func:`measure` probes the
machine once per call of :func:`jaxreplay.engine.runner.run` and returns a
:class:`jaxreplay.engine.plan.Resources`. Each probe is its own function so
that a test can stand in a machine of known size for it (``monkeypatch`` this
module's :func:`host_memory_bytes`, :func:`default_memory_budget`,
:func:`free_disk_bytes` or :func:`writable`).
"""

from __future__ import annotations

import os
import pathlib
import shutil
from collections.abc import Sequence

import jax

from jaxreplay.engine import batch as batch_lib
from jaxreplay.engine import folder as folder_lib
from jaxreplay.engine import plan as plan_lib

__all__ = ["measure", "default_memory_budget", "host_memory_bytes", "free_disk_bytes", "writable"]


def measure(
    devices: Sequence[jax.Device],
    memory_budget: int | None = None,
    memory_fraction: float = 0.5,
    disk_at: pathlib.Path | None = None,
) -> plan_lib.Resources:
    """What ``devices`` and this host offer a sweep now.

    Args:
        devices: the local devices the run axis is sharded over (at least one).
        memory_budget: device bytes a chunk may use in all; ``None``:
            :func:`default_memory_budget` of ``memory_fraction``.
        memory_fraction: see above.
        disk_at: the folder this process writes chunks and results into, whose
            file system's free bytes are measured; ``None`` where it writes none.
    """
    budget = default_memory_budget(memory_fraction, devices) if memory_budget is None else int(memory_budget)
    return plan_lib.Resources(
        memory_budget=budget,
        host_memory=host_memory_bytes(),
        free_disk=free_disk_bytes(disk_at) if disk_at is not None else None,
        num_devices=len(devices),
        platform=devices[0].platform,
        device_kind=devices[0].device_kind,
        xla_flags=batch_lib.xla_flags_in_environment(),
        cpu_threads=batch_lib.cpu_thread_pool_size(jax.local_device_count("cpu"))
        if devices[0].platform == "cpu"
        else 0,
    )


def default_memory_budget(fraction: float = 0.5, devices: Sequence[jax.Device] | None = None) -> int:
    """``fraction`` of the free memory of ``devices`` (default: the local ones), in bytes.

    Accelerators report their limit through ``Device.memory_stats()``; CPU
    devices share the host's RAM (:func:`host_memory_bytes`), which is then
    split evenly.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"memory_fraction must be in (0, 1], got {fraction!r}.")
    devices = list(devices or jax.local_devices())
    total = 0
    for device in devices:
        stats = None
        try:
            stats = device.memory_stats()
        except Exception:  # some backends do not implement it
            stats = None
        if stats and "bytes_limit" in stats:
            total += stats["bytes_limit"] - stats.get("bytes_in_use", 0)
        else:
            total += host_memory_bytes() // len(devices)
    return int(fraction * total)


def host_memory_bytes() -> int:
    """Host memory this process can still use: ``MemAvailable`` (free plus reclaimable cache), capped by
    the cgroup's limit if one is set; ``os.sysconf``'s free pages where ``/proc`` is missing."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return 4 << 30
    try:  # cgroup v2: a container's limit can be far below the machine's memory
        limit = pathlib.Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(pathlib.Path("/sys/fs/cgroup/memory.current").read_text())
            available = min(available, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return available


def free_disk_bytes(path: pathlib.Path) -> int:
    """Free bytes (for this user) on the file system that holds ``path`` or its nearest existing parent."""
    path = pathlib.Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def writable(folder: pathlib.Path) -> bool:
    """Whether a file can be created in ``folder``, an existing folder (tried, so read-only mounts count)."""
    return folder_lib.writable(folder)
