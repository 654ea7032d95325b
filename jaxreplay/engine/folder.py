"""A sweep's output folder as a place: whether it can be written, its one-writer lock (``sweep.lock``), and the
warning raised when something in it is repaired or skipped. What the folder holds is
:mod:`jaxreplay.engine.store`'s."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import time
import uuid
import warnings
from typing import NamedTuple

from jaxreplay._files import TEMP_PREFIX

__all__ = ["LOCK_NAME", "FolderLock", "SweepWarning", "lock_folder", "writable"]

LOCK_NAME = "sweep.lock"
"""The lock file's name in a sweep's folder: its holder's pid, host and start time (JSON), held with ``flock``."""


class SweepWarning(UserWarning):
    """Something in an output folder was repaired or skipped (a damaged chunk set aside to be recomputed,
    results not written to a read-only folder); the message names the file."""


def writable(folder: pathlib.Path) -> bool:
    """Whether a file can be created in ``folder`` (tried, so read-only mounts count, even for root)."""
    probe = folder / f"{TEMP_PREFIX}probe-{uuid.uuid4().hex}"
    try:
        probe.open("wb").close()
        probe.unlink(missing_ok=True)  # (another writer's prepare() may have deleted it already)
        return True
    except OSError:
        return False


class _Holder(NamedTuple):
    """Who holds a folder's lock, as its lock file says (``pid`` None: the file is empty or unreadable)."""

    pid: int | None
    host: str
    started: str

    def describe(self) -> str:
        """``pid@host, started <UTC time>``, or what is known of it."""
        if self.pid is None:
            return "a process that has not written its pid yet"
        return f"process {self.pid}@{self.host}, started {self.started}"


class FolderLock:
    """This process's hold on an output folder (see :func:`lock_folder`); :meth:`release` lets go of it."""

    def __init__(self, path: pathlib.Path, fd: int):
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        """Delete the lock file, then close it, which releases the kernel's lock (a second call does nothing)."""
        if self._fd is None:
            return
        # Deleted while still held: a process that opens the path from now on opens a new file, and one
        # that opened this file before sees (after locking it) that it is no longer the path's file.
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def lock_folder(folder: pathlib.Path) -> FolderLock:
    """Take the lock of the existing ``folder``: one writer per sweep folder.

    The lock file ``folder/sweep.lock`` holds the holder's pid, host and start
    time (JSON), and is locked with ``flock``: the kernel releases that lock
    when the holder exits, even by SIGKILL, and Linux's NFS client forwards it
    to the server, so it is seen across hosts. A lock file found unlocked was
    left by a process that stopped without releasing it: taken over with a
    :class:`SweepWarning` naming it. Where the file system has no locks
    (``flock`` fails other than "held"), the file's pid decides: a live
    process on this host, or any process on another host, holds it.

    Raises:
        ValueError: a live process holds it (one line naming it, ``pid@host``, and the folder).
        OSError: the lock file cannot be created or written.
    """
    path = folder / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            locked = _flock(fd)
            holder = _read_holder(fd)
            if locked is False or (locked is None and holder.pid is not None and _alive_or_unknown(holder)):
                # Without file locks the pid alone decides, and a pid may since belong to another program
                # (here too: after a reboot, or on a busy node): the file may be stale wherever its holder ran.
                raise ValueError(
                    f"{folder} is being written by another sweep ({holder.describe()}; lock file {path}): wait "
                    "for it to finish, or write into another folder"
                    + (f" (if that process no longer runs, delete {path})." if locked is None else ".")
                )
            if not _is_path_of(fd, path):  # its holder released it (deleting it) while we opened it: again
                os.close(fd)
                continue
            if holder.pid is not None:
                warnings.warn(
                    f"{path} was left by {holder.describe()}, which stopped without releasing it (killed?): "
                    "taken over.",
                    SweepWarning,
                    stacklevel=4,
                )
            _write_holder(fd)
            return FolderLock(path, fd)
        except BaseException:
            os.close(fd)
            raise


def _flock(fd: int) -> bool | None:
    """Lock the open file ``fd`` without waiting: True if locked, False if another process holds it, None
    if the file system (or the platform) has no such locks."""
    try:
        import fcntl
    except ImportError:  # (not POSIX)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # ENOLCK, EOPNOTSUPP, ...: no locks on this file system
        return None
    return True


def _read_holder(fd: int) -> _Holder:
    """The holder recorded in the lock file ``fd`` (pid None if it is empty or not one)."""
    os.lseek(fd, 0, os.SEEK_SET)
    data = os.read(fd, 4096)
    try:
        stored = json.loads(data)
        return _Holder(int(stored["pid"]), str(stored["host"]), str(stored["started"]))
    except (ValueError, TypeError, KeyError):
        return _Holder(None, "", "")


def _write_holder(fd: int) -> None:
    """Record this process (pid, host, UTC start time) in the lock file ``fd``."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    data = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}).encode()
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, data)
    os.fsync(fd)


def _is_path_of(fd: int, path: pathlib.Path) -> bool:
    """Whether ``path`` still names the open file ``fd`` (not deleted or replaced since it was opened)."""
    try:
        found, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (found.st_dev, found.st_ino) == (held.st_dev, held.st_ino)


def _alive_or_unknown(holder: _Holder) -> bool:
    """Whether ``holder`` may still run: a live pid on this host, or any pid on another (which cannot be asked)."""
    if holder.host != socket.gethostname():
        return True
    try:
        os.kill(holder.pid or 0, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, run by another user
        return True
    return True
