"""The chunk store: one sweep's output folder, and the only code that reads or writes it.

The folder holds ``sweep.json`` (the config, its fingerprint, the software
versions and the batch its runs are computed at), ``chunks/*.npz`` (finished
runs; each also carries its sweep's fingerprint, run count, run range, the
batch it was computed at, :class:`jaxreplay.engine.plan.Batch`, and the call
that saved it), ``results.nc``
and ``summary.json``.
A :class:`ChunkStore` is used in three steps by :func:`jaxreplay.engine.sweep.run`:

.. code-block:: text

    scan()     read only: the manifest checked against the sweep, which runs are finished,
               which chunks are damaged (nothing renamed or written yet: the plan may still refuse)
    lock()     one writer per folder: a live holder refuses the run (taken before scan() in a folder
               that exists, else once the plan has accepted the sweep; released at the end)
    prepare()  create the folders, delete a killed writer's temp files, set damaged chunks aside
               (renamed *.damaged, warned), write or upgrade sweep.json
    save() / parts() / write_results()
               a finished chunk saved atomically; chunks read back one at a time; results.nc and
               summary.json written atomically

A chunk is only ever used by the sweep that wrote it: a chunk of another sweep
(another fingerprint, with or without ``sweep.json``) refuses the run with a
``ValueError``; a damaged one is set aside and its runs are computed again.
:meth:`ChunkStore.scan` reports the batch the chunks were computed at, so the
plan computes the missing runs in the same program or refuses.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from jaxreplay._files import (
    TEMP_PREFIX,
    atomic_write,
    check_output_folder,
    clear_temporaries,
    json_object,
    refuse_foreign_files,
    refuse_other_owner,
)
from jaxreplay.engine.folder import FolderLock, SweepWarning, lock_folder

if TYPE_CHECKING:
    from jaxreplay.engine.declaration import Sweep

__all__ = [
    "ChunkStore",
    "FolderLock",
    "Scan",
    "SweepWarning",
    "software_versions",
    "atomic_write",
    "lock_folder",
]

_OWN_FILES = ("sweep.json", "summary.json", "results.nc")  # what a sweep writes in its folder, beside chunks/
_OWN_CHUNK_TEMP = re.compile(re.escape(TEMP_PREFIX) + r"[0-9a-f]{32}-runs-[^/]*\.npz")  # a chunk's, being written


def software_versions() -> dict[str, str]:
    """Versions of Python and the packages that determine results."""
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for name in ("jaxreplay", "jax", "jaxlib", "flax", "optax", "gymnax", "diffrax", "numpy", "xarray"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


# A chunk is self-describing: besides its arrays (record.*, summary.*) and run_index it
# carries the fingerprint of its sweep, the sweep's run count and its run range, so a
# chunk is only ever used by the sweep that wrote it, with or without sweep.json. It also
# carries the batch it was computed at (JSON of plan.Batch.to_dict; absent before jaxreplay
# recorded it), so a resume never mixes runs of two programs.
_META_FINGERPRINT, _META_NUM_RUNS, _META_RUN_RANGE = "meta.fingerprint", "meta.num_runs", "meta.run_range"
_META_BATCH = "meta.batch"
_META_CALL = "meta.call"  # JSON: the computing call that saved the chunk (id, start, seconds since its start)


class _Chunk(NamedTuple):
    """What :meth:`ChunkStore._chunk` read of one chunk file."""

    runs: np.ndarray  # int[R]: the run indices it holds
    fingerprinted: bool  # False: an older jaxreplay's chunk, adopted with its manifest
    batch: str | None  # the recorded plan.Batch as JSON (None: recorded before batches were)
    call: str | None  # the call that saved it, as JSON (None: saved before calls were recorded)


class _DamagedChunk(Exception):
    """A chunk file that cannot be read, or whose contents contradict themselves."""


class Scan(NamedTuple):
    """What :meth:`ChunkStore.scan` found (nothing changed yet).

    Attributes:
        done: ``bool[num_runs]``, the runs held by this sweep's intact chunks.
        damaged: ``(path, reason)`` of each damaged chunk (its runs are not done).
        unfingerprinted: names of fingerprint-less chunks of an older jaxreplay
            accepted as this sweep's (vouched for by its verified manifest).
        write_manifest: whether ``sweep.json`` is missing or of an older jaxreplay.
        batch: the batch (:meth:`jaxreplay.engine.plan.Batch.to_dict`) the intact
            chunks were computed at; None if none records one (none yet, or
            written by a jaxreplay that did not record it).
    """

    done: np.ndarray
    damaged: tuple[tuple[pathlib.Path, str], ...]
    unfingerprinted: tuple[str, ...]
    write_manifest: bool
    batch: dict | None = None


class ChunkStore:
    """The output folder ``out`` of ``sweep`` (see the module docstring).

    Args:
        out: the folder (created by :meth:`prepare` if needed).
        sweep: the sweep whose runs it holds.
        repair: whether this process may repair the folder: set damaged chunks
            aside (False: a read-only folder, or a process other than 0 of
            several; a damaged chunk is then a ValueError saying what to do).
    """

    def __init__(self, out: str | os.PathLike, sweep: Sweep, repair: bool = True):
        self.out = pathlib.Path(out)
        self.sweep = sweep
        self.repair = repair
        self.fingerprint = sweep.fingerprint()
        self._vouched: frozenset[str] = frozenset()
        # The config of the folder's sweep.json where it is this sweep's under another fingerprint (keep typed
        # in another order, before keep was held in the experiment's order): results.nc names the folder's.
        self.folder_config: dict | None = None
        # The batch (plan.Batch.to_dict) this call computes at: set by sweep.run once the plan is
        # made, written into sweep.json by prepare and into every chunk by save.
        self.batch: dict | None = None
        # This call, as its chunks record it: a call killed before it wrote summary.json is still counted
        # there by the call that finishes the sweep (_calls), from its chunks.
        self._call = {"id": uuid.uuid4().hex[:12], "started": _utc_now()}
        self._t0 = time.monotonic()
        self._earlier: dict[str, dict] = {}  # call id -> what its chunks found by scan() say about it

    @property
    def chunk_dir(self) -> pathlib.Path:
        return self.out / "chunks"

    # -- the folder ---------------------------------------------------------------

    def check_folder(self) -> None:
        """ValueError (one line naming the path) if ``out`` is a file or lies under one, or holds the output of
        another command (a study's, a reproduction's: :func:`~jaxreplay._files.owner_of`), whose files of the
        same names (``summary.json``) a sweep would overwrite."""
        check_output_folder(self.out, "folder")
        refuse_other_owner(self.out, "sweep")
        summary = json_object(self.out / "summary.json") or {}  # (a sweep's records its fingerprint and calls)
        recorded = summary.get("fingerprint") if "calls" in summary else None
        if self._chunk_paths() or recorded == self.fingerprint:
            return  # this sweep's leftovers without its sweep.json: resumed (another sweep's chunks are refused)
        other = recorded is not None  # another sweep's record: its results are not replaced
        whose = "the results of another sweep (its summary.json records another fingerprint)" if other else None
        refuse_foreign_files(self.out, "sweep", ("results.nc",) if other else _OWN_FILES, "folder", whose)

    def lock(self) -> FolderLock:
        """Create the folder if needed and take its lock (:func:`lock_folder`): one writer per folder.

        Taken before :meth:`prepare` deletes temp files (a live writer's would be
        its chunks in flight); :meth:`FolderLock.release` at the end.
        """
        self._create()
        return lock_folder(self.out)

    def _create(self) -> None:
        """Create ``out`` (and its parents); ValueError naming the folder if it cannot be."""
        out = self.out
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            parent = out
            while not parent.exists() and parent != parent.parent:
                parent = parent.parent
            raise ValueError(
                f"the output folder {out} cannot be created ({e.strerror}): choose another folder, or "
                f"fix the permissions of {parent}."
            ) from None

    def scan(self, *, legacy_ok: bool = True) -> Scan:
        """Check ``sweep.json`` and every chunk against the sweep, changing nothing.

        Raises:
            ValueError: the folder holds another sweep (by its manifest, or by a
                chunk's fingerprint); the manifest is damaged; a chunk is damaged
                and the folder cannot be written (it cannot be set aside); its
                chunks record two different batches.
        """
        self.check_folder()
        manifest = self._check_manifest()
        legacy = manifest is not None and manifest["legacy"]
        vouched: frozenset[str] | bool = True if legacy else (manifest["vouched"] if manifest else frozenset())
        done = np.zeros(self.sweep.num_runs, bool)
        damaged, unfingerprinted = [], []
        batches: dict[str, str] = {}  # recorded batch (JSON) -> the first chunk recording it
        for path in self._chunk_paths():
            try:
                chunk = self._chunk(path, vouched)
            except _DamagedChunk as e:
                if not self.repair:
                    raise ValueError(
                        f"{path} is damaged ({e}): delete it (its runs are then recomputed) and rerun "
                        "from a writable folder."
                    ) from None
                damaged.append((path, str(e)))
                continue
            done[chunk.runs] = True
            self._count_call(chunk)
            if not chunk.fingerprinted:
                unfingerprinted.append(path.name)
            if chunk.batch is not None:
                batches.setdefault(chunk.batch, path.name)
        if len(batches) > 1:
            (a, first), (b, second) = list(batches.items())[:2]
            raise ValueError(
                f"{self.out} holds chunks computed at different batches ({first}: {a}; {second}: {b}), which "
                "may round runs differently: delete the chunks of one of them (their runs are then recomputed) "
                "or the folder to start over."
            )
        self._vouched = frozenset(unfingerprinted)
        batch = None
        if batches:
            (text, name), *_ = batches.items()
            try:
                batch = json.loads(text)
            except ValueError:
                raise ValueError(
                    f"{self.chunk_dir / name}'s meta.batch is not JSON ({text[:40]!r}): delete that chunk (its "
                    "runs are then recomputed) and rerun."
                ) from None
        return Scan(done, tuple(damaged), tuple(unfingerprinted), manifest is None or legacy, batch)

    def prepare(self, scan: Scan) -> None:
        """Make the folder ready for writing: create it and ``chunks/``, delete temp files a killed writer
        left, set the damaged chunks of ``scan`` aside (warning), write ``sweep.json`` if needed (missing,
        of an older jaxreplay, or recording another batch than :attr:`batch`, which the plan has accepted).

        Chunks are checked (by :meth:`scan`) before a missing manifest is
        written: chunks of another sweep (``sweep.json`` deleted, config
        changed) must refuse the run, not be adopted.
        """
        out = self.out
        self._create()
        self.chunk_dir.mkdir(exist_ok=True)
        # A killed writer's partial files: only where this folder's writers write (out and its chunks), never in
        # a subfolder, which may be another sweep's, live under its own lock; and only of the names a sweep
        # writes (a user's `.tmp-draft.md`, or another command's write in flight in the folder, are theirs).
        clear_temporaries(out, _OWN_FILES)
        for stale in self.chunk_dir.glob(f"{TEMP_PREFIX}*"):
            if _OWN_CHUNK_TEMP.fullmatch(stale.name):
                stale.unlink(missing_ok=True)
        for path, reason in scan.damaged:
            self._set_aside(path, reason)
            warnings.warn(
                f"{path} is damaged ({reason}): renamed to {path.name}.damaged; its runs are computed again.",
                SweepWarning,
                stacklevel=3,
            )
        if scan.write_manifest:  # (an older jaxreplay's manifest of this sweep: upgraded)
            manifest = {
                "fingerprint": self.fingerprint,
                "config": self.sweep.to_dict(),
                "versions": software_versions(),
            }
            if scan.unfingerprinted:  # an older jaxreplay's chunks of this sweep, adopted with its manifest
                manifest["unfingerprinted_chunks"] = sorted(scan.unfingerprinted)
            if self.batch is not None:
                manifest["batch"] = self.batch
            atomic_write(out / "sweep.json", json.dumps(manifest, indent=2).encode())
        elif self.batch is not None:
            self._record_batch_in_manifest()

    def _record_batch_in_manifest(self) -> None:
        """Set ``sweep.json``'s ``batch`` to :attr:`batch` (a manifest of this sweep, checked by :meth:`scan`;
        its other fields kept): one written before batches were recorded, or whose chunks were all deleted."""
        path = self.out / "sweep.json"
        manifest = json.loads(path.read_text())
        if manifest.get("batch") != self.batch:
            manifest["batch"] = self.batch
            atomic_write(path, json.dumps(manifest, indent=2).encode())

    # -- chunks -------------------------------------------------------------------

    def save(self, part: dict[str, np.ndarray]) -> None:
        """Save one finished chunk (its arrays and ``run_index``) atomically, with this sweep's fingerprint
        and the batch it was computed at (:attr:`batch`, if set)."""
        runs = part["run_index"]
        meta = {
            _META_FINGERPRINT: np.array(self.fingerprint),
            _META_NUM_RUNS: np.array(self.sweep.num_runs, np.int64),
            _META_RUN_RANGE: np.array([runs.min(), runs.max() + 1], np.int64),
        }
        if self.batch is not None:
            meta[_META_BATCH] = np.array(json.dumps(self.batch, sort_keys=True))
        call = dict(self._call, seconds=round(time.monotonic() - self._t0, 3))
        meta[_META_CALL] = np.array(json.dumps(call, sort_keys=True))
        atomic_write(
            self.chunk_dir / f"runs-{int(runs[0]):09d}-{len(runs):07d}-{uuid.uuid4().hex[:8]}.npz",
            lambda f: np.savez(f, **part, **meta),  # type: ignore[arg-type]  # numpy's stub: **kwds vs allow_pickle
        )

    def parts(self) -> Iterator[dict[str, np.ndarray]]:
        """The arrays of each chunk (``meta.*`` left out), one chunk in memory at a time.

        A chunk found damaged only now (a bad checksum in its data) is set
        aside (if the folder is writable) and the sweep stops with a ValueError
        saying to rerun: its runs are then recomputed. Never are its contents used.
        """
        first: tuple[pathlib.Path, dict] | None = None
        for path in self._chunk_paths():
            part = self._read(path)
            layout = {k: (v.shape[1:], v.dtype.str) for k, v in part.items()}
            first = first or (path, layout)
            if layout != first[1]:  # (a chunk without an array read as zeros there, a probe)
                raise ValueError(_layouts_differ(first, (path, layout)))
            yield part

    def write_results(self, write_dataset: Callable, summary: dict) -> None:
        """Write ``summary.json`` and ``results.nc`` (``write_dataset(f)`` streams it into the open file).

        ``summary`` describes this call; ``summary.json`` also keeps ``calls``, one entry per call
        that computed runs into this folder (this one included; a killed one from its chunks, see
        :meth:`_calls`), so the compute time of a sweep finished over several calls (or assembled by
        a call that only resumed) is not lost.
        """
        summary = dict(summary, fingerprint=self.fingerprint, calls=self._calls(summary))
        atomic_write(self.out / "summary.json", json.dumps(summary, indent=2).encode())
        atomic_write(self.out / "results.nc", write_dataset)

    _CALL_FIELDS = ("runs_computed", "chunks", "chunk_size", "devices", "processes", "compile_seconds", "run_seconds")

    @property
    def call(self) -> dict:
        """This call as its chunks record it: ``id`` (12 hex digits) and ``started`` (UTC)."""
        return dict(self._call)

    def share_call(self, call: dict) -> None:
        """Record this call as ``call`` (process 0's :attr:`call`): the processes of one ``jax.distributed``
        sweep are one call, whose chunks each process saves."""
        self._call = dict(call)

    def _count_call(self, chunk: _Chunk) -> None:
        """Add ``chunk`` to the tally of the call that saved it (:attr:`_earlier`)."""
        try:
            call = json.loads(chunk.call) if chunk.call is not None else None
        except ValueError:
            call = None
        if not isinstance(call, dict) or not isinstance(call.get("id"), str):
            return
        entry = self._earlier.setdefault(
            call["id"],
            {
                "id": call["id"],
                "started": call.get("started"),
                "runs_computed": 0,
                "chunks": 0,
                "seconds_to_last_chunk": 0.0,
            },
        )
        entry["runs_computed"] += int(chunk.runs.size)
        entry["chunks"] += 1
        if isinstance(call.get("seconds"), (int, float)):
            entry["seconds_to_last_chunk"] = max(entry["seconds_to_last_chunk"], float(call["seconds"]))

    def _calls(self, summary: dict) -> list[dict]:
        """The computing calls recorded so far, plus this one if it computed runs.

        A call stopped before it wrote ``summary.json`` (killed, out of memory) is recorded from the chunks
        it saved (found by :meth:`scan`): ``interrupted``, with its runs, chunks and the seconds from its
        start to its last chunk (its compile and run times were never known). Entries are in start order.
        """
        calls: list[dict] = []
        try:
            previous = json.loads((self.out / "summary.json").read_text())
        except (OSError, ValueError):
            previous = None
        # Another sweep's summary.json (its chunks and sweep.json deleted, this one begun in their place) counts
        # none of its calls here: its fingerprint, or, written before it was recorded, no runs of it resumed.
        if isinstance(previous, dict) and (
            previous["fingerprint"] == self.fingerprint if "fingerprint" in previous else summary.get("runs_resumed")
        ):
            if isinstance(previous.get("calls"), list):
                calls = [c for c in previous["calls"] if isinstance(c, dict)]
            elif previous.get("runs_computed"):  # written before calls were recorded: it was one
                calls = [{k: previous.get(k) for k in self._CALL_FIELDS}]
        known = {c.get("id") for c in calls}
        this = self._call["id"]
        calls += [dict(e, interrupted=True) for i, e in self._earlier.items() if i not in known and i != this]
        if summary.get("runs_computed"):
            calls.append({**self._call, **{k: summary.get(k) for k in self._CALL_FIELDS}})
        # (entries written before calls had a start time keep their place at the front)
        return sorted(calls, key=lambda c: str(c.get("started") or ""))

    # -- internals ----------------------------------------------------------------

    def _chunk_paths(self) -> list[pathlib.Path]:
        return sorted(self.chunk_dir.glob("runs-*.npz")) if self.chunk_dir.is_dir() else []

    def _legacy_fingerprint(self) -> str:
        """The fingerprint jaxreplay wrote before it covered the grid axis order (and before chunks carried one)."""
        return _legacy_fingerprint_of(self.sweep.to_dict())

    def _check_manifest(self) -> dict | None:
        """``sweep.json`` checked against the sweep: None if absent, else ``{"legacy": bool, "vouched": set}``.

        ``vouched`` names chunk files without a fingerprint that are this sweep's
        (written by an older jaxreplay and adopted when the manifest was upgraded).
        ``legacy`` is a manifest of that older jaxreplay that is this sweep's: its
        old-scheme fingerprint matches and its grid axes are in the same order;
        its fingerprint-less chunks are then this sweep's too. ValueError if the
        manifest describes another sweep or is damaged.
        """
        path, sweep = self.out / "sweep.json", self.sweep
        if not path.exists():
            return None
        try:
            stored = json.loads(path.read_text())
            if not isinstance(stored, dict):
                raise ValueError(f"a JSON {type(stored).__name__}, not an object")
            edited = self._edited_config(stored)
        except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError is a ValueError
            raise ValueError(
                f"{path} is damaged (not a sweep manifest: {e}). Delete it and rerun: the chunks carry their "
                "sweep's fingerprint, so only this sweep's finished runs are reused."
            ) from None
        if edited is not None:
            raise ValueError(
                f"{path} is damaged: its config does not match its fingerprint ({edited}). Delete sweep.json "
                "alone and rerun: the chunks carry their sweep's fingerprint, so only this sweep's finished runs "
                "are reused."
            )
        if stored.get("fingerprint") == self.fingerprint:
            return {"legacy": False, "vouched": _vouched(stored)}
        old = stored.get("config", {})
        if (
            stored.get("fingerprint") == self._legacy_fingerprint()
            and isinstance(old, dict)
            and list(old.get("grid") or {}) == list(sweep.grid)
        ):  # (sweep.json keeps the order it was written in)
            return {"legacy": True, "vouched": frozenset()}
        old, new = old if isinstance(old, dict) else {}, sweep.to_dict()
        if _differs_in_keep_order_only(old, new):
            # Written before a sweep held record.keep in the experiment's order: the same sweep, whose chunks
            # carry the fingerprint of the order it was typed in. The folder keeps that one.
            self.fingerprint = str(stored["fingerprint"])
            self.folder_config = old
            return {"legacy": False, "vouched": _vouched(stored)}
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        old_axes, new_axes = list(old.get("grid") or {}), list(new.get("grid") or {})
        if "grid" not in diff and old_axes != new_axes:
            diff.append(f"grid axis order: {old_axes} there, {new_axes} here; the order numbers the runs")
        if not diff:
            diff = [
                "fingerprint (sweep.json was written by another jaxreplay version, which fingerprints "
                "configs differently)"
            ]
        raise ValueError(
            f"{self.out} holds a different sweep (differs in: {'; '.join(diff)}). Results of two "
            "configs are never mixed: use a new output directory, or delete this one to start over."
        )

    def _edited_config(self, stored: dict) -> str | None:
        """None if the manifest ``stored`` is intact (its config hashes to its fingerprint, by this jaxreplay's
        scheme or the older one), else what is wrong with it, naming the edited keys where it can.

        Raises:
            ValueError: it has no fingerprint or no config (not a sweep manifest).
        """
        fingerprint, config = stored.get("fingerprint"), stored.get("config")
        if not isinstance(fingerprint, str) or not isinstance(config, dict):
            raise ValueError("no fingerprint and config")
        if fingerprint in (self.sweep.fingerprint_of(config), _legacy_fingerprint_of(config)):
            return None
        if fingerprint == self.fingerprint:  # it was this sweep's: what differs from it was edited
            edited = _differing_keys(config, self.sweep.to_dict())
            if edited:
                return f"edited: {', '.join(edited)}"
        return "edited by hand, or written by another jaxreplay version, which fingerprints configs differently"

    def _chunk_runs(self, path: pathlib.Path, vouched: frozenset[str] | bool = frozenset()) -> np.ndarray:
        """The run indices held by the chunk file ``path`` (:meth:`_chunk`'s ``runs``)."""
        return self._chunk(path, vouched).runs

    def _chunk(self, path: pathlib.Path, vouched: frozenset[str] | bool = frozenset()) -> _Chunk:
        """What the chunk file ``path`` holds (its run indices, whether it carries a fingerprint, its
        recorded batch), read in one opening of the file.

        ``vouched``: names of fingerprint-less chunks known to be this sweep's (or
        True: all of them), see :meth:`_check_manifest`.

        Raises:
            ValueError: it is not a chunk of the sweep (another fingerprint, or none).
            _DamagedChunk: it cannot be read (truncated, not an npz, ...) or its run range is inconsistent.
        """
        fingerprint, num_runs = self.fingerprint, self.sweep.num_runs
        legacy = _is_vouched(path.name, vouched)
        try:
            with np.load(path, allow_pickle=False) as data:
                stored = str(data[_META_FINGERPRINT]) if _META_FINGERPRINT in data.files else None
                fingerprinted = stored is not None
                batch = str(data[_META_BATCH]) if _META_BATCH in data.files else None
                call = str(data[_META_CALL]) if _META_CALL in data.files else None
                if stored == fingerprint:
                    runs = np.asarray(data["run_index"])
                    lo, hi = (int(x) for x in data[_META_RUN_RANGE])
                    stored_runs = int(data[_META_NUM_RUNS])
                elif stored is None and legacy:
                    runs = np.asarray(data["run_index"])
                    stored, stored_runs = fingerprint, num_runs
                    lo, hi = (int(runs.min()), int(runs.max()) + 1) if runs.size and runs.ndim == 1 else (0, 0)
        except Exception as e:  # BadZipFile, EOFError, "pickled data", zlib / CRC errors, a missing key, ...
            if "pickled" in str(e):  # NumPy took it for a pickle (and suggests loading it unsafely: never)
                raise _DamagedChunk("not an npz archive") from None
            raise _DamagedChunk(f"{type(e).__name__}: {e}") from None
        if stored is None:
            reason = "carries no fingerprint (written by an older jaxreplay, or not a chunk)"
        elif stored != fingerprint:
            reason = f"belongs to another sweep (fingerprint {stored[:12]}..., this sweep's is {fingerprint[:12]}...)"
        elif stored_runs != num_runs:
            reason = f"holds runs of a sweep of {stored_runs} runs, this one has {num_runs}"
        else:
            if (
                runs.ndim != 1
                or runs.size == 0
                or runs.dtype.kind not in "iu"
                or lo != runs.min()
                or hi != runs.max() + 1
                or lo < 0
                or hi > num_runs
            ):
                raise _DamagedChunk(f"its run range [{lo}, {hi}) does not match its run indices")
            return _Chunk(runs, fingerprinted, batch, call)
        raise ValueError(
            f"{path} {reason}. Results of two configs are never mixed: run into a new output directory, or "
            f"delete {path.parent.parent} to start over."
        )

    def _read(self, path: pathlib.Path) -> dict[str, np.ndarray]:
        try:
            runs = self._chunk_runs(path, self._vouched)  # (a chunk of another sweep: its ValueError goes through)
            try:
                with np.load(path, allow_pickle=False) as data:
                    part = {k: data[k] for k in data.files if not k.startswith("meta.")}
            except Exception as e:  # BadZipFile("Bad CRC-32"), zlib errors, ...
                raise _DamagedChunk(f"{type(e).__name__}: {e}") from None
            bad = [k for k, v in part.items() if v.ndim == 0 or v.shape[0] != _leading(k, runs.size, part)]
            if bad:
                raise _DamagedChunk(
                    f"{bad[0]} does not hold {_leading(bad[0], runs.size, part)} "
                    f"{'configurations' if bad[0].startswith('reduced.') else 'runs'}"
                )
            return part
        except _DamagedChunk as e:
            reason = str(e)
        if not self.repair:
            raise ValueError(
                f"{path} is damaged ({reason}): delete it (its runs are then recomputed) and rerun "
                "from a writable folder."
            )
        self._set_aside(path, reason)
        raise ValueError(
            f"{path} was found damaged while assembling the results ({reason}) and renamed to "
            f"{path.name}.damaged: rerun the same sweep to recompute its runs."
        )

    @staticmethod
    def _set_aside(path: pathlib.Path, reason: str) -> None:
        """Rename the damaged chunk ``path`` to ``*.npz.damaged`` (its runs are then recomputed)."""
        os.replace(path, path.with_name(path.name + ".damaged"))


def _layouts_differ(first: tuple[pathlib.Path, dict], other: tuple[pathlib.Path, dict]) -> str:
    """Why two chunks of one sweep cannot both be intact: they hold other arrays (``{key: (shape, dtype)}``)."""
    (a, one), (b, two) = first, other

    def said(layout: tuple | None) -> str:  # ((10000, 2), "<f4") -> "float32[10000, 2]" (a run's part)
        return "absent" if layout is None else f"{np.dtype(layout[1]).name}{list(layout[0])}"

    differences = "; ".join(
        f"{k} {said(one.get(k))} in chunks/{a.name}, {said(two.get(k))} in chunks/{b.name}"
        for k in sorted(set(one) | set(two))
        if one.get(k) != two.get(k)
    )
    return (
        f"{a.parent.parent} holds chunks of one sweep with different arrays ({differences}): one of them was edited "
        "or written by another program. Delete the one that is wrong (or both; their runs are recomputed) and rerun."
    )


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _vouched(stored: dict) -> frozenset[str]:
    """The fingerprint-less chunk files a stored manifest vouches for (an older jaxreplay's, adopted)."""
    vouched = stored.get("unfingerprinted_chunks", [])
    return frozenset(str(name) for name in vouched) if isinstance(vouched, list) else frozenset()


def _differs_in_keep_order_only(old: dict, new: dict) -> bool:
    """Whether the configs ``old`` (as stored) and ``new`` differ only in the order of ``record.keep``."""
    old_record, new_record = old.get("record"), new.get("record")
    if not isinstance(old_record, dict) or not isinstance(new_record, dict):
        return False
    old_keep, new_keep = old_record.get("keep"), new_record.get("keep")
    if not isinstance(old_keep, list) or not isinstance(new_keep, list) or old_keep == new_keep:
        return False
    if sorted(map(str, old_keep)) != sorted(new_keep):
        return False
    return {**old, "record": {**old_record, "keep": new_keep}} == new


def _legacy_fingerprint_of(config: dict) -> str:
    """The fingerprint of ``config`` by the scheme of jaxreplay before it covered the grid axis order."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _differing_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between the tables ``old`` and ``new`` (``setup.steps``, ``seeds``),
    sorted; nested tables are compared key by key."""
    keys = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += _differing_keys(a, b, f"{prefix}{key}.")
        elif a != b:
            keys.append(f"{prefix}{key}")
    return keys


def _leading(key: str, runs: int, part: dict) -> int:
    """The leading length an array of a chunk must have: its runs, or for ``reduced.*`` its configurations."""
    if key.startswith("reduced."):
        index = part.get("config_index")
        return -1 if index is None else int(np.size(index))
    if key == "config_index":
        return int(np.size(part["config_index"]))
    return runs


def _is_vouched(name: str, vouched: frozenset[str] | bool) -> bool:
    """Whether the fingerprint-less chunk ``name`` is vouched for (``True``: all are)."""
    return vouched is True or (not isinstance(vouched, bool) and name in vouched)
