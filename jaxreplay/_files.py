"""Files: every file jaxreplay writes goes through here, and every file or folder a user names is checked here.

Writes are atomic: a file is written to a temporary file in the same folder (named ``.tmp-<hex>-<name>``),
flushed to disk (fsync) and renamed over its target, so a reader (or the user, after a
full disk, a killed process or a crash) sees the whole old file or the whole new one, never
a truncated mix. A failed write deletes the temporary file and raises :class:`WriteError`
naming the target.

Three forms, one mechanism (:func:`replacing`):

* :func:`atomic_write` – bytes, or a function streaming into the open binary file
  (``np.savez``, ``fig.savefig``, a NetCDF writer);
* :func:`atomic_write_text` – a string, as UTF-8;
* :func:`replacing` – a context manager yielding the open temporary file, for writers that
  write row by row (``csv.writer``).

Reads of a file a user names (:func:`read_text`, :func:`read_json`) and the check of an output
folder (:func:`check_output_folder`) refuse bad input with one ``ValueError`` line naming the path.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

__all__ = [
    "WriteError",
    "atomic_write",
    "atomic_write_text",
    "replacing",
    "read_text",
    "read_json",
    "check_output_folder",
]

TEMP_PREFIX = ".tmp-"
_NAME_BYTES = 120  # a temporary file's name keeps at most this much (UTF-8) of its target's: within NAME_MAX


def _temp_tail(name: str) -> str:
    """What a temporary file's name (``.tmp-<32 hex>-<tail>``) holds of its target's ``name``: the name itself
    up to 120 bytes of UTF-8, else a hash of the whole name and the end of it that fits (two long names with
    one ending still get two tails)."""
    if len(os.fsencode(name)) <= _NAME_BYTES:  # (fsencode: a name the file system gave that is not UTF-8)
        return name
    tail = name
    while len(os.fsencode(tail)) > _NAME_BYTES - 13:
        tail = tail[1:]
    return f"{hashlib.sha256(os.fsencode(name)).hexdigest()[:12]}~{tail}"


class WriteError(OSError):
    """A file could not be written (disk full, read-only folder, ...); the old file, if any, is unchanged.

    ``filename`` is the target (not the temporary file), ``errno``/``strerror`` the operating
    system's reason; ``str()`` is one line saying both and what to do.
    """

    def __str__(self) -> str:
        return (
            f"cannot write {self.filename}: {self.strerror}; it was left as it was. "
            "Free some space or fix the folder's permissions, and run again."
        )


def _target(path: str | os.PathLike) -> pathlib.Path:
    """The file to replace: a symlink's destination (so the link itself stays a link)."""
    path = pathlib.Path(path)
    return path.resolve() if path.is_symlink() else path


@contextlib.contextmanager
def replacing(path: str | os.PathLike, text: bool = False, newline: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing; on a clean exit it replaces ``path``.

    Args:
        path: the file to write (its folder must exist). An existing file keeps its permission bits.
        text: yield a text file (UTF-8) instead of a binary one.
        newline: as :func:`open`'s, for text (``""`` for :mod:`csv` writers).

    Yields:
        The open temporary file. The ``with`` body should only write to it.

    Raises:
        WriteError: writing, flushing or renaming failed (an ``OSError``, e.g. ENOSPC); the
            temporary file is deleted and ``path`` is untouched. Any other exception from the
            body also deletes the temporary file and propagates unchanged.
    """
    target = _target(path)
    tmp = target.parent / f"{TEMP_PREFIX}{uuid.uuid4().hex}-{_temp_tail(target.name)}"
    try:
        with open(tmp, "w" if text else "wb", encoding="utf-8" if text else None, newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes it the file
        with contextlib.suppress(FileNotFoundError):  # a new file gets the folder's defaults
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, WriteError):
            raise
        raise WriteError(e.errno, e.strerror or str(e), str(path)) from e
    except BaseException:  # (KeyboardInterrupt, a bug in the body): no temp file left either
        tmp.unlink(missing_ok=True)
        raise


def clear_outputs(folder: str | os.PathLike, names) -> None:
    """Delete the files ``names`` in ``folder``, and the temporary files an atomic write of one of them left
    (a killed run), before a command writes them again: a rerun killed part way then leaves a folder that
    holds only its own files (and lacks its report), never its new figures beside an earlier run's report."""
    folder = pathlib.Path(folder)
    clear_temporaries(folder, names)
    for name in set(names):
        (folder / name).unlink(missing_ok=True)


def clear_temporaries(folder: str | os.PathLike, names, min_age_s: float = 0.0) -> None:
    """Delete the temporary files that atomic writes of ``names`` in ``folder`` left (a killed write's), those
    last written at least ``min_age_s`` seconds ago (where no lock keeps another writer of them out: a write in
    flight is seconds old)."""
    tails = {_temp_tail(name) for name in names}  # what a temporary file holds of each name
    now = time.time()
    for path in pathlib.Path(folder).glob(f"{TEMP_PREFIX}*"):
        # .tmp-<32 hex>-<name>: only these names, so another writer's temporary files are left alone
        if len(path.name) > len(TEMP_PREFIX) + 33 and path.name[len(TEMP_PREFIX) + 33 :] in tails:
            with contextlib.suppress(FileNotFoundError):
                if now - path.stat().st_mtime >= min_age_s:
                    path.unlink(missing_ok=True)


def atomic_write(path: str | os.PathLike, data: bytes | Callable[[IO[bytes]], object]) -> pathlib.Path:
    """Write ``data`` to ``path`` so a reader sees the whole file or none of it (temp file, fsync, rename).

    ``data`` is bytes, or a function that writes the file's contents to the open binary file
    it is given (so large files are streamed, never held in memory whole). Returns ``path``.

    Raises:
        WriteError: the write failed; ``path`` is unchanged and no temporary file is left.
    """
    with replacing(path) as f:
        if callable(data):
            data(f)
        else:
            f.write(data)
    return pathlib.Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, clear_leftovers: bool = False) -> pathlib.Path:
    """:func:`atomic_write` of ``text`` encoded as UTF-8. Returns ``path``.

    ``clear_leftovers``: then delete the temporary files that earlier, killed writes of ``path`` left beside
    it (for a file of the user's, a README, in a folder no command clears), those over a minute old (another
    process's write of it in flight is left alone).
    """
    with replacing(path, text=True) as f:
        f.write(text)
    if clear_leftovers:
        clear_temporaries(_target(path).parent, [_target(path).name], min_age_s=60.0)
    return pathlib.Path(path)


# ----------------------------------------------------------------------------
# Files and folders a user names: read or checked, or refused in one line naming the path
# ----------------------------------------------------------------------------


def read_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of the file ``path``, or ``ValueError``: one line naming the file (as ``what``, e.g.
    ``"the README"``) when it is missing, a folder, unreadable or not UTF-8."""
    path = pathlib.Path(path)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # (NotADirectoryError: a parent is a file)
        raise ValueError(f"{what} {path}: no such file.") from None
    except IsADirectoryError:
        raise ValueError(f"{what} {path} is a folder, not a file.") from None
    except OSError as e:
        raise ValueError(f"{what} {path} cannot be read ({e.strerror or e}).") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} {path} is not UTF-8 text (byte {e.start} is {data[e.start]:#04x}).") from None


def read_json(
    path: str | os.PathLike, what: str, keys: Iterable[str] = (), elsewhere: tuple[Iterable[str], str] | None = None
) -> dict:
    """The JSON object in the file ``path``, holding at least ``keys``, or ``ValueError``: one line naming
    the file (as ``what``) when :func:`read_text` refuses it, it is not JSON (e.g. truncated), or it is
    JSON of another shape (not an object, or without one of ``keys``). ``elsewhere``, ``(other_keys, advice)``:
    a file that lacks ``keys`` but holds all of ``other_keys`` is another kind jaxreplay writes, and the error
    says ``advice`` (what to do with that kind) instead of listing the keys it lacks."""
    text = read_text(path, what)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{what} {path} is not valid JSON ({e.msg}: line {e.lineno} column {e.colno}; truncated?)."
        ) from None
    if not isinstance(value, dict):
        kind = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(value), "null")
        raise ValueError(f"{what} {path} holds a JSON {kind}, not the object jaxreplay writes.")
    missing = [k for k in keys if k not in value]
    if missing and elsewhere is not None and all(k in value for k in elsewhere[0]):
        raise ValueError(f"{what} {path} is not the kind this command reads: {elsewhere[1]}")
    if missing:
        raise ValueError(
            f"{what} {path} is not one jaxreplay wrote: it lacks the key(s) {', '.join(map(repr, missing))}."
        )
    return value


NAME_MAX = 255
"""Bytes in one name of a path, at most (Linux's and macOS's file systems)."""


def check_output_folder(out: str | os.PathLike, name: str = "--out") -> pathlib.Path:
    """``out`` as a path, or ``ValueError`` (one line) if no output folder can be made there: empty (it would
    be the current folder), an existing file, below a file, through a symbolic link to nothing (or a loop of
    links), or with a name over :data:`NAME_MAX` bytes. ``name`` is how the caller calls it."""
    if not str(out):
        raise ValueError(f"{name} is empty: name an output folder (e.g. {name} results).")
    path = pathlib.Path(out)
    for link in (path, *path.parents):
        if os.path.lexists(link) and not os.path.exists(link):  # (a link to nothing, or a loop of links)
            raise ValueError(
                f"the output folder {path} cannot be created: {link} is a symbolic link to nothing (or a loop of "
                f"links). Create its target, or choose another {name}."
            )
    long = [part for part in path.parts if len(os.fsencode(part)) > NAME_MAX]
    if long:
        raise ValueError(
            f"the output folder {path} cannot be created: a name in it is longer than {NAME_MAX} bytes "
            f"({long[0][:24]}...), the file systems' limit. Choose another {name}."
        )
    if path.exists() and not path.is_dir():
        raise ValueError(f"the output folder {path} is a file, not a folder: choose another {name}.")
    parent = path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"the output folder {path} cannot be created: {parent} is a file. Choose another {name}.")
    return path


OWNER_FILE = ".jaxreplay-owner"
"""The file in an output folder naming the command that writes it (:func:`claim_folder`)."""


def json_object(path: str | os.PathLike) -> dict | None:
    """The JSON object in ``path``; None where it is missing, unreadable or not an object (a guess at whose file
    it is, never a refusal: :func:`read_json` refuses a damaged file)."""
    try:
        value = json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _json_keys(path: pathlib.Path) -> set[str]:
    """The top-level keys of the JSON object in ``path`` (none where :func:`json_object` finds none)."""
    return set(json_object(path) or {})


def _first_line(path: pathlib.Path) -> str:
    """The first line of the text file ``path`` ("" where it is missing or unreadable)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _is_sweeps_folder(folder: pathlib.Path) -> bool:
    """Whether ``folder`` holds a sweep's folder (one with a sweep.json of a fingerprint and a config)."""
    return folder.is_dir() and any(
        {"fingerprint", "config"} <= _json_keys(manifest) for manifest in folder.glob("*/sweep.json")
    )


def owner_of(folder: str | os.PathLike) -> str | None:
    """The command whose output ``folder`` holds: the one its :data:`OWNER_FILE` names, else, for a folder
    written before owners were recorded (the repository's own ``docs/paper_scale``), the one its files show by
    their names and content (``study.json``: a study's result, told apart by a key only the replay study writes;
    ``claims.json`` with its claims: ``reproduce all``; ``metric_grid.csv`` with its header: ``reproduce
    linesearch``; ``runs.csv`` beside ``sweeps/`` holding sweeps: ``reproduce dqn``; ``sweep.json`` with a
    fingerprint and a config: ``sweep``, the engine's folder); None where it holds none of them. (By name alone, a
    user's study.json or a runs.csv beside a sweeps/ of theirs made the folder a command's, whose files then
    replaced the user's: found by a probe.)"""
    folder = pathlib.Path(folder)
    marker = folder / OWNER_FILE
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if marker.is_file():
            return marker.read_text().strip() or None
    study = _json_keys(folder / "study.json")
    if {"env", "ratios"} <= study:
        return "study replay"
    if {"env", "response"} <= study:
        return "study dqn"
    if "claims" in _json_keys(folder / "claims.json"):
        return "reproduce all"
    if _first_line(folder / "metric_grid.csv").startswith("sampler,discount,memory_size,"):
        return "reproduce linesearch"
    if (folder / "runs.csv").is_file() and _is_sweeps_folder(folder / "sweeps"):
        return "reproduce dqn"
    return "sweep" if {"fingerprint", "config"} <= _json_keys(folder / "sweep.json") else None


def refuse_other_owner(folder: str | os.PathLike, owner: str) -> None:
    """ValueError (one line naming both) where :func:`owner_of` ``folder`` is a command other than ``owner``."""
    found = owner_of(folder)
    if found is not None and found != owner:
        raise ValueError(
            f"{folder} holds the output of `jaxreplay {found}`; `jaxreplay {owner}` would overwrite its "
            "files: give it another --out."
        )


def refuse_foreign_files(
    folder: str | os.PathLike, owner: str, names, option: str = "--out", whose: str | None = None
) -> None:
    """ValueError (one line) where ``folder`` holds no command's output (:func:`owner_of` is None) but holds a
    file named as one ``owner`` writes (``names``): nothing of jaxreplay's wrote it, so it is the user's, and the
    command would replace it (``--out ~/notes`` replaced the user's report.md). Other files (the user's notes
    beside the outputs) are left alone and do not refuse the folder. ``whose``: what the files are, where the
    caller knows better than "no jaxreplay command wrote there"."""
    folder = pathlib.Path(folder)
    if not folder.is_dir() or owner_of(folder) is not None:
        return
    clash = [name for name in names if os.path.lexists(folder / name)]
    if clash:
        them = "it" if len(clash) == 1 else "them"
        whose = whose or f"which no jaxreplay command wrote there (it has no {OWNER_FILE})"
        raise ValueError(
            f"{folder} holds {', '.join(clash)}, {whose}, and `jaxreplay {owner}` would replace {them}: move {them} "
            f"or give another {option}."
        )


def claim_folder(folder: str | os.PathLike, owner: str, writes=()) -> pathlib.Path:
    """Create ``folder`` for the command ``owner`` (``"study replay"``), or refuse one another command writes,
    or one whose files named as ``owner``'s outputs (``writes``) no command wrote (:func:`refuse_foreign_files`).

    Two studies write files of the same names (``study.json``, ``report.md``, ``runs.csv``), and so do the
    reproductions, and a sweep and ``reproduce all``'s LineSearch part (``summary.json``): one run into the
    other's folder would overwrite them and leave a mixed folder. The first call records ``owner`` in
    :data:`OWNER_FILE`; a later call of another command is a ``ValueError`` (one line naming both), as is one
    into a folder written before owners were recorded whose files show another command (:func:`owner_of`).
    """
    folder = pathlib.Path(folder)
    marker = folder / OWNER_FILE
    refuse_other_owner(folder, owner)
    refuse_foreign_files(folder, owner, writes)
    folder.mkdir(parents=True, exist_ok=True)
    # Created exclusively, whole (written under a temporary name, then linked: a link fails if the name
    # exists): of two commands claiming a new folder at once exactly one records itself, and the other reads
    # it. (Read, then written, the marker could name the refused one: 4 times in 5 at the same instant.)
    staged = folder / f".{OWNER_FILE}.{os.getpid()}.tmp"
    staged.write_text(owner + "\n")
    try:
        os.link(staged, marker)
    except FileExistsError:
        refuse_other_owner(folder, owner)
    except OSError:  # a file system without hard links: written as before, not exclusively
        if not marker.is_file():
            atomic_write_text(marker, owner + "\n")
    finally:
        staged.unlink(missing_ok=True)
    return folder
