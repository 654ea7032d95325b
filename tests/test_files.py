"""Atomic writes: a write that fails part way (a full disk) leaves the old file whole and no temporary file,
for every kind of file jaxreplay writes into a user's folder."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import pathlib
import shutil
import time

import pytest

from jaxreplay import _files, cli

REPO = pathlib.Path(__file__).resolve().parents[1]
STUDY = REPO / "docs" / "study" / "CartPole-v1"


class _FillsUp:
    """An open file on a disk with ``room`` bytes (characters, for text) left: the write that crosses it
    writes what fits, then fails with ENOSPC, as a full disk does."""

    def __init__(self, f, room: int):
        self._f, self._room = f, room

    def write(self, data):
        if len(data) > self._room:
            self._f.write(data[: self._room])
            self._f.flush()
            self._room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def _disk_fills_up(monkeypatch, name: str, room: int) -> None:
    """Every file opened for writing whose name ends with ``name`` (so also a ``.tmp-*-name`` beside it)
    gets ``room`` bytes. Patched at ``open`` itself (builtins and io, which pathlib and Pillow call), so
    it hits any writer, atomic or not."""
    real = io.open

    def fake_open(file, *args, **kwargs):
        f = real(file, *args, **kwargs)
        mode = args[0] if args else kwargs.get("mode", "r")
        if isinstance(file, (str, os.PathLike)) and str(file).endswith(name) and "w" in mode:
            return _FillsUp(f, room)
        return f

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)


def _temp_files(folder: pathlib.Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(_files.TEMP_PREFIX))


# -- the writer itself ----------------------------------------------------------------------------


def test_atomic_write_replaces_the_file_keeps_its_mode_and_writes_through_a_symlink(tmp_path):
    real, link = tmp_path / "real.md", tmp_path / "link.md"
    real.write_text("old\n")
    real.chmod(0o640)
    link.symlink_to(real)
    assert _files.atomic_write_text(link, "new ü\n") == link
    assert link.is_symlink() and real.read_bytes() == "new ü\n".encode()
    assert oct(real.stat().st_mode & 0o777) == "0o640"
    assert _files.atomic_write(tmp_path / "fresh.bin", lambda f: f.write(b"\x00\x01")) == tmp_path / "fresh.bin"
    assert (tmp_path / "fresh.bin").read_bytes() == b"\x00\x01"
    assert _temp_files(tmp_path) == []


@pytest.mark.parametrize("fails_at", ["write", "fsync", "rename"])
def test_a_failed_write_leaves_the_old_file_and_names_the_target(fails_at, tmp_path, monkeypatch):
    path = tmp_path / "study.json"
    path.write_text('{"old": true}\n')

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    if fails_at == "write":
        _disk_fills_up(monkeypatch, "study.json", room=5)
    else:
        monkeypatch.setattr(_files.os, {"fsync": "fsync", "rename": "replace"}[fails_at], full)
    with pytest.raises(_files.WriteError) as caught:
        _files.atomic_write_text(path, '{"new": true, "longer": "than five bytes"}\n')
    assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(path))
    assert str(caught.value) == (
        f"cannot write {path}: No space left on device; it was left as it was. "
        "Free some space or fix the folder's permissions, and run again."
    )
    assert path.read_text() == '{"old": true}\n'
    assert _temp_files(tmp_path) == []


def test_an_error_in_the_writing_code_propagates_unchanged_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("a,b\n")
    with pytest.raises(ZeroDivisionError), _files.replacing(path, text=True) as f:
        f.write("c,d\n")
        1 / 0
    assert path.read_text() == "a,b\n" and _temp_files(tmp_path) == []


# -- every kind of file jaxreplay writes: the old one stays whole --------------------------------


def _readme(tmp_path):
    readme = tmp_path / "study.md"
    shutil.copy(REPO / "docs" / "study.md", readme)
    return readme, lambda: cli.main(["study", "readme", str(REPO / "docs" / "study"), "--readme", str(readme)])


def _study_folder(tmp_path, name):
    for f in ("study.json", "report.md"):
        shutil.copy(STUDY / f, tmp_path / f)
    return tmp_path / name, lambda: cli.main(["study", "refresh", str(tmp_path)])


def _figure(tmp_path):
    from matplotlib.figure import Figure

    from jaxreplay.paper import plots

    path = tmp_path / "response.png"
    shutil.copy(STUDY / "response.png", path)
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    return path, lambda: plots.save(fig, path)


def _csv(tmp_path):
    from jaxreplay.paper.reproduce.linesearch import report

    path = tmp_path / "metric_grid.csv"
    rows = [("uniform", 0.0, n, 1, 0.1, "theory", n / 3, 0) for n in range(1, 201)]
    report.write_metric_grid(path, rows[:5])
    return path, lambda: report.write_metric_grid(path, rows)


WRITERS = {
    "README block": _readme,
    "JSON": lambda tmp_path: _study_folder(tmp_path, "study.json"),
    "text report": lambda tmp_path: _study_folder(tmp_path, "report.md"),
    "figure": _figure,
    "CSV": _csv,
}


@pytest.mark.parametrize("kind", WRITERS)
def test_a_full_disk_leaves_each_kind_of_file_whole(kind, tmp_path, monkeypatch, capsys):
    path, write = WRITERS[kind](tmp_path)
    old, others = path.read_bytes(), sorted(os.listdir(tmp_path))
    _disk_fills_up(monkeypatch, path.name, room=1000)
    if kind in ("README block", "JSON", "text report"):  # through the command line: one line, exit 2
        assert write() == 2
        assert capsys.readouterr().err == (
            f"jaxreplay study: error: cannot write {path}: No space left on device; it was left as it was. "
            "Free some space or fix the folder's permissions, and run again.\n"
        )
    else:
        with pytest.raises(_files.WriteError, match=f"cannot write {path}: No space left on device"):
            write()
    assert path.read_bytes() == old, f"{path.name} was damaged: {len(path.read_bytes())} of {len(old)} bytes left"
    assert sorted(os.listdir(tmp_path)) == others  # no temporary file left
    monkeypatch.undo()
    write()  # with room, the same call succeeds
    assert _temp_files(tmp_path) == []
    if kind == "README block":
        assert path.read_text().count("<!-- study:begin -->") == 1 and path.read_text().endswith(
            (REPO / "docs" / "study.md").read_text().split("<!-- study:end -->")[1]
        )
    if kind == "CSV":
        assert len(path.read_text().splitlines()) == 201


# -- files and folders a user names: one line naming the path -------------------------------------

_MARKERS = "<!-- study:begin -->\n<!-- study:end -->\n<!-- claims:begin -->\n<!-- claims:end -->\n"


def _bad_inputs(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Each kind of unusable input file under ``root``, plus a good README (name → path)."""
    (root / "README.md").write_text(_MARKERS)
    (root / "latin.md").write_bytes(b"\xff\xfe caf\xe9")
    (root / "folder.md").mkdir()
    study = json.loads((STUDY / "study.json").read_text())
    del study["adaptive"][0]["mean_size"]
    claims = json.loads((REPO / "docs" / "paper_scale" / "claims.json").read_text())
    del claims["context"]["devices"]
    contents = {
        "s_folder": None,
        "s_truncated": (STUDY / "study.json").read_text()[:100],
        "s_bytes": b"\xff{}",
        "s_list": "[]",
        "s_keys": json.dumps({"env": "CartPole-v1"}),
        "s_nested": json.dumps(study),
        "c_folder": None,
        "c_truncated": '{"context": {',
        "c_list": "[1]",
        "c_nested": json.dumps(claims),
    }
    for name, content in contents.items():
        file = root / name / ("study.json" if name.startswith("s_") else "claims.json")
        if content is None:
            file.mkdir(parents=True)
        else:
            file.parent.mkdir()
            (file.write_bytes if isinstance(content, bytes) else file.write_text)(content)
    return {name: root / name for name in ("README.md", "latin.md", "folder.md", *contents)}


@pytest.mark.parametrize("args, message", [
    (["study", "refresh", "s_folder"], "the study result s_folder/study.json is a folder, not a file."),
    (["study", "refresh", "s_truncated"], "the study result s_truncated/study.json is not valid JSON (Expecting "
                                          "value: line 6 column 20; truncated?)."),
    (["study", "refresh", "s_bytes"], "the study result s_bytes/study.json is not UTF-8 text (byte 0 is 0xff)."),
    (["study", "refresh", "s_list"], "the study result s_list/study.json holds a JSON array, not the object"),
    (["study", "refresh", "s_keys"], "the study result s_keys/study.json is not one jaxreplay wrote: it lacks the "
                                     "key(s) 'seeds', 'total_steps', 'response'"),
    (["study", "refresh", "s_nested"], "the study result s_nested/study.json is not one `jaxreplay study dqn` wrote "
                                       "(KeyError: 'mean_size')."),
    (["study", "readme", "s_nested", "--readme", "README.md"], "the study result s_nested/study.json is not one"),
    # A study of the other kind says which command reads it (it listed the keys it lacked).
    (["study", "readme", "REPLAY", "--readme", "README.md"], "the study result REPLAY/study.json is not the kind "
     "this command reads: it is a `jaxreplay study replay` result (use `study replay-readme`)."),
    (["study", "replay-readme", "STUDY", "--readme", "README.md"], "the replay study result STUDY/study.json is not "
     "the kind this command reads: it is a `jaxreplay study dqn` result (use `study readme`)."),
    (["study", "readme", "STUDY", "--readme", "missing.md"], "the README missing.md: no such file."),
    (["study", "readme", "STUDY", "--readme", "folder.md"], "the README folder.md is a folder, not a file."),
    (["study", "readme", "STUDY", "--readme", "latin.md"], "the README latin.md is not UTF-8 text (byte 0 is 0xff)."),
    (["study", "readme", "STUDY", "--readme", "s_keys/study.json"], "the README s_keys/study.json: expected exactly "
                                                                     "one '<!-- study:begin -->'"),
    (["reproduce", "readme", "c_folder", "--readme", "README.md"], "the claims file c_folder/claims.json is a folder"),
    (["reproduce", "readme", "c_truncated", "--readme", "README.md"], "the claims file c_truncated/claims.json is not "
                                                                      "valid JSON (Expecting property name"),
    (["reproduce", "readme", "c_list", "--readme", "README.md"],
     "the claims file c_list/claims.json holds a JSON array"),
    (["reproduce", "readme", "c_nested", "--readme", "README.md"],
     "the claims file c_nested/claims.json is not one `jaxreplay reproduce all` wrote (KeyError: 'devices')."),
    (["reproduce", "readme", "PAPER", "--readme", "latin.md"], "the README latin.md is not UTF-8 text"),
    (["reproduce", "readme", "PAPER", "--readme", "missing.md"], "the README missing.md: no such file."),
    (["reproduce", "all", "--out", "o", "--quick", "--readme", "missing.md"], "the README missing.md: no such file."),
    (["sweep", "folder.md", "--out", "o"], "CONFIG folder.md is a folder, not a file."),
    (["sweep", "latin.md", "--out", "o"], "CONFIG latin.md is not UTF-8 text (byte 0 is 0xff)."),
    (["sweep", "missing.toml", "--out", "o"], "CONFIG missing.toml: no such file."),
])
def test_an_unusable_input_file_is_one_line_naming_it(args, message, tmp_path, monkeypatch, capsys):
    """Missing, a folder, not UTF-8, truncated JSON, JSON of another shape: one line naming the file, exit 2,
    nothing written or run (these were KeyError/TypeError tracebacks, or an OS error without the file's role)."""
    from compile_events import COMPILE_EVENTS

    monkeypatch.chdir(tmp_path)
    _bad_inputs(tmp_path)
    paper = REPO / "docs" / "paper_scale"
    folders = {"STUDY": STUDY, "PAPER": paper, "REPLAY": REPO / "docs" / "replay_study" / "CartPole-v1"}
    argv = [str(folders[a]) if a in folders else a for a in args]
    message = message.replace("STUDY", str(STUDY)).replace("REPLAY", str(folders["REPLAY"]))
    before = sorted(p.name for p in tmp_path.iterdir()), COMPILE_EVENTS.lowerings
    readme = (tmp_path / "README.md").read_text()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jaxreplay {args[0]}: error: ") and message in err and len(err.splitlines()) == 1, err
    assert (sorted(p.name for p in tmp_path.iterdir()), COMPILE_EVENTS.lowerings) == before
    assert (tmp_path / "README.md").read_text() == readme


@pytest.mark.parametrize("command", [
    ["sweep", "CONFIG", "--quiet"],
    ["reproduce", "linesearch", "--quiet"],
    ["reproduce", "dqn", "--env", "CartPole-v1", "--quiet"],
    ["reproduce", "all", "--quick", "--quiet"],
    ["study", "dqn", "--env", "CartPole-v1", "--quiet"],
    ["study", "dqn", "--env", "all", "--quiet"],
])
def test_every_out_that_is_empty_a_file_or_below_a_file_is_refused_in_one_line(command, tmp_path, monkeypatch, capsys):
    """`--out ""` used to write into the current folder; a file, or a path below one, gave FileExistsError or
    NotADirectoryError. Every command refuses them before anything runs."""
    from compile_events import COMPILE_EVENTS

    monkeypatch.chdir(tmp_path)
    config = tmp_path / "sweep.toml"
    config.write_text('experiment = "linesearch"\n[setup]\nmax_capacity = 20\n[fixed]\nmemory_size = 5\n')
    argv = [str(config) if a == "CONFIG" else a for a in command]
    # A link to nothing, a loop of links and a name over 255 bytes gave raw OS errors ("[Errno 17] File exists" for
    # a folder that does not exist, with advice about permissions; Errno 40; Errno 36) (found by a probe).
    os.symlink(tmp_path / "nothing", tmp_path / "gone")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    nothing = "a symbolic link to nothing (or a loop of links). Create its target, or choose another --out."
    for out, message in [
        ("", "--out is empty: name an output folder (e.g. --out results)."),
        ("sweep.toml", "the output folder sweep.toml is a file, not a folder: choose another --out."),
        ("sweep.toml/sub",
         "the output folder sweep.toml/sub cannot be created: sweep.toml is a file. Choose another --out."),
        ("gone", f"the output folder gone cannot be created: gone is {nothing}"),
        ("loop/sub", f"the output folder loop/sub cannot be created: loop is {nothing}"),
        ("x" * 256, f"the output folder {'x' * 256} cannot be created: a name in it is longer than 255 bytes "
                    f"({'x' * 24}...), the file systems' limit. Choose another --out."),
    ]:
        before = COMPILE_EVENTS.lowerings
        assert cli.main([*argv, "--out", out]) == 2
        err = capsys.readouterr().err
        assert err == f"jaxreplay {command[0]}: error: {message}\n"
        assert sorted(os.listdir(tmp_path)) == ["gone", "loop", "sweep.toml"] and COMPILE_EVENTS.lowerings == before
    if command[-2:] == ["all", "--quiet"]:  # each game's folder too, before the first game runs
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "MountainCar-v0").write_text("")
        assert cli.main([*argv, "--out", "out"]) == 2
        assert "the output folder out/MountainCar-v0 is a file, not a folder" in capsys.readouterr().err
        assert sorted(os.listdir(tmp_path / "out")) == ["MountainCar-v0"]


def test_a_rerun_clears_its_earlier_outputs_and_their_temporary_files_first(tmp_path):
    """A `reproduce linesearch` rerun killed while writing figures left its new figures beside the earlier run's
    report.md (which still named the earlier seeds) and a temporary file no rerun removed (found by a probe).
    The command now clears its own files first (report.md is written last), and only its own temporaries."""
    mine = ["fig2a.png", "metric_grid.csv", "report.md"]
    for name in mine + ["notes.txt"]:
        (tmp_path / name).write_text("earlier run")
    stale = tmp_path / f"{_files.TEMP_PREFIX}{'a' * 32}-fig2b.png"
    others = tmp_path / f"{_files.TEMP_PREFIX}{'b' * 32}-results.nc"  # another writer's, in flight
    for path in (stale, others):
        path.write_bytes(b"partial")
    _files.clear_outputs(tmp_path, mine + ["fig2b.png"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["notes.txt", others.name])


def test_the_temporary_file_of_a_long_name_is_cleared_too(tmp_path):
    """A temporary file's name keeps at most 120 bytes of its target's (NAME_MAX is 255 bytes). clear_outputs
    compared the whole name, so a killed write of a longer name left its temporary file for good; two long
    names with the same last 120 characters shared a tail (one command cleared the other's file); 120
    non-ASCII characters made a 278-byte name the file system refused (found by a probe and a review)."""
    long_name, other_name = "s" * 150 + "-a.png", "t" * 150 + "-a.png"  # the same last 120 characters
    with pytest.raises(RuntimeError):  # a write stopped part way (any exception) leaves no temporary file...
        with _files.replacing(tmp_path / long_name) as f:
            f.write(b"partial")
            raise RuntimeError
    assert list(tmp_path.iterdir()) == []
    tails = [_files._temp_tail(name) for name in (long_name, other_name)]
    assert tails[0] != tails[1] and all(len(t.encode()) <= 120 for t in tails)
    stale, other = (tmp_path / f"{_files.TEMP_PREFIX}{c * 32}-{t}" for c, t in zip("ab", tails))  # a SIGKILL's
    for path in (stale, other):
        path.write_bytes(b"partial")
    _files.clear_outputs(tmp_path, [long_name])
    assert [p.name for p in tmp_path.iterdir()] == [other.name]
    accented = "é" * 120 + ".md"  # 243 bytes: a legal name, whose temporary name must fit too
    _files.atomic_write_text(tmp_path / accented, "whole")
    assert (tmp_path / accented).read_text() == "whole" and _files._temp_tail("short.md") == "short.md"

def test_a_readme_write_clears_the_temporary_files_of_killed_writes(tmp_path):
    """`study readme` killed while writing left a whole `.tmp-<hex>-README.md` beside the user's README, which no
    later write removed (found by a probe): a README write now clears its name's leftovers, only those."""
    readme = tmp_path / "README.md"
    readme.write_text("old")
    leftover = tmp_path / f"{_files.TEMP_PREFIX}{'c' * 32}-README.md"
    other = tmp_path / f"{_files.TEMP_PREFIX}{'d' * 32}-notes.md"
    for path in (leftover, other):
        path.write_text("partial")
    _files.atomic_write_text(readme, "new")
    assert leftover.exists()  # (by default a write leaves other temporaries alone)
    _files.atomic_write_text(readme, "newer", clear_leftovers=True)
    assert leftover.exists()  # seconds old: maybe another process's write in flight (no lock guards a README)
    os.utime(leftover, (time.time() - 120, time.time() - 120))
    _files.atomic_write_text(readme, "newest", clear_leftovers=True)
    assert readme.read_text() == "newest" and not leftover.exists() and other.exists()
    undecodable = os.fsdecode(b"caf\xe9-" + b"x" * 130 + b".md")  # a name the file system gave, not UTF-8
    _files.atomic_write_text(tmp_path / undecodable, "whole", clear_leftovers=True)
    assert (tmp_path / undecodable).read_text() == "whole"


def test_a_folder_written_before_owners_were_recorded_is_refused_to_every_other_command(tmp_path, capsys):
    """Only a study's folder was recognised without its owner marker: `reproduce linesearch` into a copy of
    docs/paper_scale/dqn/CartPole-v1 replaced its Fig. 4 report.md, and `reproduce all` into a copy of
    docs/paper_scale/linesearch deleted its report.md at once (found by a probe). The files a command writes
    tell its folder apart; each is refused to the others before anything is deleted, and resumed by its own."""
    # Each file with what the command writes at its head (a name alone is no command's: the user's study.json).
    heads = {"study.json": '{"env": "CartPole-v1", "response": []}', "claims.json": '{"claims": []}',
             "metric_grid.csv": "sampler,discount,memory_size,batch_size\n", "sweep.json": '{"fingerprint": "f", "config": {}}'}

    def legacy(name: str, files: list[str]) -> pathlib.Path:
        folder = tmp_path / name
        for file in files:
            (folder / file).parent.mkdir(parents=True, exist_ok=True)
            (folder / file).write_text(heads.get(pathlib.Path(file).name, "theirs"))
        return folder

    folders = {
        "reproduce all": legacy("all", ["claims.json", "report.md", "linesearch/metric_grid.csv"]),
        "reproduce linesearch": legacy("ls", ["metric_grid.csv", "report.md", "summary.json"]),
        "reproduce dqn": legacy("fig4", ["runs.csv", "report.md", "sweeps/fixed-0123456789/sweep.json"]),
        "sweep": legacy("sweep", ["sweep.json", "summary.json", "results.nc"]),
        "study dqn": legacy("study", ["study.json", "runs.csv", "report.md"]),
    }
    assert {owner: _files.owner_of(folder) for owner, folder in folders.items()} == {o: o for o in folders}
    assert _files.owner_of(legacy("mine", ["notes.txt", "report.md", "runs.csv"])) is None  # (no command's)
    committed = {REPO / "docs" / "paper_scale": "reproduce all", REPO / "docs" / "paper_scale" / "linesearch":
                 "reproduce linesearch", REPO / "docs" / "paper_scale" / "dqn" / "CartPole-v1": "reproduce dqn"}
    assert {folder: _files.owner_of(folder) for folder in committed} == committed
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for owner, folder in folders.items():
        for command in (["reproduce", "linesearch"], ["reproduce", "all", "--quick"], ["study", "dqn", "--env", "CartPole-v1", "--quick"],
                        ["reproduce", "dqn", "--env", "CartPole-v1", "--quick"]):
            if " ".join(command[:2]) == owner:
                continue
            assert cli.main([*command, "--out", str(folder)]) == 2
            assert capsys.readouterr().err.endswith(
                f"{folder} holds the output of `jaxreplay {owner}`; `jaxreplay {' '.join(command[:2])}` would "
                "overwrite its files: give it another --out.\n")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing written or deleted
    _files.claim_folder(folders["reproduce linesearch"], "reproduce linesearch")  # its own command resumes it


def test_a_folder_no_command_wrote_is_refused_where_a_command_would_replace_the_users_file(tmp_path, capsys):
    """`--out` into a folder of the user's own (no owner marker, no command's files) was every command's: its
    report.md, runs.csv or summary.json was replaced by the command's (found by a probe). Such a folder is refused
    where it holds a file named as one the command writes, before anything runs; the user's other files (notes
    beside the outputs) do not refuse it."""
    from jaxreplay.engine import sweep as sweep_lib

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my draft")
    (mine / "notes.txt").write_text("my notes")
    for command in (["reproduce", "linesearch"], ["reproduce", "all", "--quick"], ["study", "dqn", "--env", "CartPole-v1", "--quick"],
                    ["reproduce", "dqn", "--env", "CartPole-v1", "--quick"], ["study", "replay", "--env", "CartPole-v1", "--quick"]):
        assert cli.main([*command, "--out", str(mine)]) == 2
        assert capsys.readouterr().err.endswith(
            f"{mine} holds report.md, which no jaxreplay command wrote there (it has no .jaxreplay-owner), and "
            f"`jaxreplay {' '.join(command[:2])}` would replace it: move it or give another --out.\n")
    (mine / "summary.json").write_text("{}")
    (mine / "results.nc").write_text("mine")
    with pytest.raises(ValueError, match=r"holds summary.json, results.nc, which no jaxreplay command wrote there .*"
                                         r"`jaxreplay sweep` would replace them: move them or give another folder\.$"):
        sweep_lib.run(sweep_lib.Sweep("linesearch", seeds=1, setup={"steps": 10, "max_capacity": 100, "max_batch_size": 10}), mine, progress=False)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt", "report.md", "results.nc", "summary.json"]
    assert (mine / "report.md").read_text() == "my draft"
    # A file that only looks like a command's by its name is the user's too: their own study.json (not a study's
    # result), a runs.csv beside a sweeps/ of theirs; and a sweep's chunks/ must hold chunks (found by a probe).
    study, fig4 = tmp_path / "study", tmp_path / "fig4"
    (fig4 / "sweeps").mkdir(parents=True)
    study.mkdir()
    (study / "study.json").write_text('{"my": "own study notes"}')
    (fig4 / "runs.csv").write_text("my,data\n")
    (fig4 / "sweeps" / "mine.txt").write_text("keep")
    assert _files.owner_of(study) is None and _files.owner_of(fig4) is None
    assert cli.main(["study", "dqn", "--env", "CartPole-v1", "--quick", "--out", str(study)]) == 2
    assert "holds study.json, which no jaxreplay command wrote there" in capsys.readouterr().err
    assert cli.main(["reproduce", "dqn", "--env", "CartPole-v1", "--quick", "--out", str(fig4)]) == 2
    assert "holds runs.csv, which no jaxreplay command wrote there" in capsys.readouterr().err
    (mine / "chunks").mkdir()
    with pytest.raises(ValueError, match="holds summary.json, results.nc, which no jaxreplay command wrote there"):
        sweep_lib.run(sweep_lib.Sweep("linesearch", seeds=1, setup={"steps": 10, "max_capacity": 100, "max_batch_size": 10}), mine, progress=False)
    assert (study / "study.json").read_text() == '{"my": "own study notes"}' and (fig4 / "runs.csv").read_text() == "my,data\n"
    # Notes alone do not refuse a folder; a folder the command claimed is its own from then on.
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("my notes")
    _files.claim_folder(notes, "reproduce dqn", ("report.md",))
    assert _files.owner_of(notes) == "reproduce dqn"
    (notes / "report.md").write_text("the command's")
    assert _files.claim_folder(notes, "reproduce dqn", ("report.md",)) == notes  # its own report.md: resumed
    assert sorted(p.name for p in notes.iterdir()) == [".jaxreplay-owner", "notes.txt", "report.md"]


def test_a_study_or_reproduction_too_big_for_the_machine_is_one_line_and_leaves_no_claimed_folder(tmp_path, capsys):
    """`reproduce dqn`, `study dqn` and `study replay` with 2×10⁸ seeds ended in a ResourceError traceback (exit
    1), and left their folder claimed, empty: another command was then refused it, "would overwrite its files"
    (found by a probe). One line, exit 2, and the claim taken back."""
    for command in (["reproduce", "dqn"], ["study", "dqn"], ["study", "replay"]):
        out = tmp_path / command[1]
        assert cli.main([*command, "--env", "CartPole-v1", "--quick", "--seeds", "200000000", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"jaxreplay {command[0]}: error: ") and "host memory" in err and err.count("\n") == 1
        assert not out.exists()
    kept = tmp_path / "kept"
    (kept / "notes").mkdir(parents=True)
    (kept / "notes" / "mine.txt").write_text("mine")
    assert cli.main(["reproduce", "dqn", "--env", "CartPole-v1", "--quick", "--seeds", "200000000",
                     "--out", str(kept)]) == 2
    capsys.readouterr()
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*")) == ["notes", "notes/mine.txt"]


def test_loading_a_study_or_reproduction_folder_names_its_sweeps(tmp_path):
    """`sw.load` of a study's or a reproduction's folder said only "No such file ... results.nc" (found by a
    probe): it names the sweeps under its sweeps/ to load instead."""
    from jaxreplay.engine import sweep as sw

    for name in ("fixed-0123456789", "adaptive-abcdef0123"):
        (tmp_path / "sweeps" / name).mkdir(parents=True)
        (tmp_path / "sweeps" / name / "results.nc").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=rf"^{tmp_path} holds no results.nc of its own: it is a study's or "
                                                rf"a reproduction's folder, whose sweeps are its subfolders "
                                                rf"{tmp_path / 'sweeps'}/<name> \(adaptive-abcdef0123, "
                                                r"fixed-0123456789\): load one of them\.$"):
        sw.load(tmp_path)
