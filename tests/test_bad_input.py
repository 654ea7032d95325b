"""Walk the table of docs/bad_input.md: run its examples, check what they print, check its tests exist."""

from __future__ import annotations

import pathlib
import re
import shlex

import pytest

from jaxreplay import cli
from jaxreplay.engine import resources

REPO = pathlib.Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "bad_input.md"
COLUMNS = ("Bad input or fault", "Example", "What jaxreplay does", "Exit", "Says", "Test")

# The CONFIG of command examples: a tiny valid sweep.
CONFIG = """experiment = "linesearch"
seeds = 2
[setup]
steps = 20
max_capacity = 20
max_batch_size = 2
[fixed]
memory_size = 5
batch_size = 1
"""


def _rows() -> list[dict]:
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Bad input or fault |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    assert tuple(header) == COLUMNS
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(COLUMNS), line
        rows.append(dict(zip(COLUMNS, cells)))
    return rows


def _code(cell: str) -> str | None:
    """The text of the first `code span` of a cell (None if it has none)."""
    match = re.search(r"`([^`]*)`", cell)
    return match.group(1) if match else None


ROWS = _rows()


def test_the_table_covers_the_issue_and_every_row_names_a_test():
    assert len(ROWS) >= 30
    for row in ROWS:
        path, _, name = (_code(row["Test"]) or "").partition("::")
        assert name, f"no test named for {row['Bad input or fault']!r}"
        assert re.search(rf"^def {re.escape(name)}\(", (REPO / path).read_text(), re.M), f"{path}::{name} missing"
        assert row["Exit"] in ("0", "2", "130", "141", "—"), row  # (130: Ctrl-C, 141: a closed pipe)


RUNNABLE = [row for row in ROWS if (_code(row["Example"]) or "").startswith(("jaxreplay ", "experiment = "))]


@pytest.mark.parametrize("row", RUNNABLE, ids=[row["Bad input or fault"] for row in RUNNABLE])
def test_each_example_does_what_the_table_says(row, tmp_path, capsys, monkeypatch):
    # The same memory on any machine: a 2 GiB device budget on a 4 GiB host.
    monkeypatch.setattr(resources, "host_memory_bytes", lambda: 4 << 30)
    monkeypatch.setattr(resources, "default_memory_budget", lambda fraction=0.5, devices=None: 2 << 30)
    example = _code(row["Example"])
    config, out = tmp_path / "sweep.toml", tmp_path / "out"
    if example.startswith("experiment = "):  # a whole config file, "\n" for a line break
        config.write_text(example.replace("\\n", "\n") + "\n")
        argv = ["sweep", str(config), "--out", str(out), "--quiet"]
    else:
        config.write_text(CONFIG)
        argv = [arg.replace("CONFIG", str(config)).replace("OUT", str(out)) for arg in shlex.split(example)[1:]]
    status = cli.main(argv)
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert status == int(row["Exit"]), printed
    assert _code(row["Says"]) in printed, printed
    assert "Traceback" not in printed
    if status == 2:
        assert len(captured.err.strip().splitlines()) == 1, captured.err
