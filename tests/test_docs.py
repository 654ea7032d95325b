"""Documentation checks: every public module, class and function has a docstring; pydoc renders them; the
repository documents itself (no pointer outside it, every cited reading of the paper exists, the README's counts
and the module docstrings' references are true).

The core modules (buffer, samplers, stored priorities, aER) promise shapes in
their docstrings: each public function there names at least one array shape
(``int32[...]``, ``float32[...]``, ``[batch_size]`` …) or says it returns a
state.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import pydoc
import re
import subprocess

import pytest

import jaxreplay

MODULES = ["jaxreplay"] + sorted(
    m.name for m in pkgutil.walk_packages(jaxreplay.__path__, "jaxreplay.") if not m.name.endswith("__main__")
)
CORE = ["jaxreplay.buffer", "jaxreplay.samplers", "jaxreplay.prioritized", "jaxreplay.adaptive", "jaxreplay.returns",
        "jaxreplay.evidence"]


def _public(module):
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield name, obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and inspect.isfunction(member):
                        yield f"{name}.{attr}", member


def _has_doc(obj, name) -> bool:
    # A method may inherit its docstring from a base class (what help() shows); a class may not:
    # dataclasses and NamedTuples get a generated "Name(field, ...)" docstring.
    doc = obj.__doc__ if inspect.isclass(obj) else inspect.getdoc(obj)
    return bool(doc and doc.strip()) and not doc.startswith(name.split(".")[-1] + "(")


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_object_has_a_docstring(module_name):
    module = importlib.import_module(module_name)
    assert (module.__doc__ or "").strip(), f"{module_name} has no module docstring"
    missing = [name for name, obj in _public(module) if not _has_doc(obj, name)]
    assert not missing, f"{module_name}: no docstring on {missing}"


@pytest.mark.parametrize("module_name", CORE)
def test_core_functions_state_shapes(module_name):
    module = importlib.import_module(module_name)
    shape = re.compile(r"(int32|float32|bool|uint32)\[|\[[A-Za-z_ ,.*0-9]+\]|[Ss]hape|State\b")
    vague = [name for name, obj in _public(module) if inspect.isfunction(obj) and not shape.search(obj.__doc__)]
    assert not vague, f"{module_name}: docstrings without shapes: {vague}"


@pytest.mark.parametrize("module_name", MODULES)
def test_pydoc_renders(module_name):
    text = pydoc.render_doc(importlib.import_module(module_name), renderer=pydoc.plaintext)
    assert module_name in text and len(text) > 200


# ---------------------------------------------------------------------------
# The repository documents itself: no pointer to a file or tracker it does not ship.

ROOT = pathlib.Path(__file__).resolve().parents[1]
READINGS = "docs/paper_readings.md"
# Generated run logs are records of a machine's output (paths on that machine included), not documentation.
GENERATED_LOGS = ("docs/paper_scale/", "docs/study/")
OUTSIDE = re.compile(r"\.\./shared|\bshared/paper\b|\bERRATA\b|STACK_NOTES|GPU_NOTES|\b[Ii]ssue \d+")
CITATION = re.compile(r"§(\d+)")


def _tracked_text_files() -> dict[str, str]:
    """path → text of every tracked text file (binary files, e.g. PNGs, are left out)."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    texts = {}
    for name in filter(None, listing.decode().split("\0")):
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return texts


def _readings_sections() -> dict[int, str]:
    """Section number → title of docs/paper_readings.md (its ``## §N. title`` headings)."""
    text = (ROOT / READINGS).read_text()
    return {int(n): title for n, title in re.findall(r"^## §(\d+)\. (.+)$", text, flags=re.MULTILINE)}


def test_no_tracked_file_points_outside_the_repository():
    """No file names the paper's errata file, a shared notes file, a folder beside the repository or an issue
    number of a tracker the repository does not ship; the readings are in docs/paper_readings.md."""
    this = pathlib.Path(__file__).relative_to(ROOT).as_posix()
    found = [
        f"{name}:{i}: {line.strip()[:100]}"
        for name, text in _tracked_text_files().items()
        if name != this and not (name.startswith(GENERATED_LOGS) and name.endswith(".log"))
        for i, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "pointers outside the repository:\n" + "\n".join(found)


def test_outside_pattern_catches_each_kind_of_pointer():
    for line in (
        "see ../shared/paper/ERRATA.md",
        "(ERRATA item 8)",
        "(STACK_NOTES)",
        "GPU_NOTES.md",
        "Moves (issue 14):",
        "Issue 15 asks",
    ):
        assert OUTSIDE.search(line), line
    for line in ("the errata applied", "docs/paper_readings.md §8", "issues of the sum tree", "shared memory"):
        assert not OUTSIDE.search(line), line


def test_paper_readings_has_every_section_cited_and_no_other():
    """Every §N cited by a file that cites docs/paper_readings.md is one of its sections, numbered 1, 2, … with
    no gap, and every section is cited somewhere; the code cites each erratum it relies on (§1–§10)."""
    sections = _readings_sections()
    assert sorted(sections) == list(range(1, len(sections) + 1)) and len(sections) >= 10
    assert sections[8].startswith('The "real weights"') and sections[9].startswith("Algorithm 1")
    cited: dict[int, list[str]] = {}
    for name, text in _tracked_text_files().items():
        if name != READINGS and "paper_readings" in text:
            for n in CITATION.findall(text):
                cited.setdefault(int(n), []).append(name)
    unknown = {n: sorted(set(files)) for n, files in cited.items() if n not in sections}
    assert not unknown, f"sections cited but missing from {READINGS}: {unknown}"
    assert set(cited) == set(sections), f"sections never cited: {sorted(set(sections) - set(cited))}"
    in_code = {n for n, files in cited.items() if any(f.startswith("jaxreplay/") for f in files)}
    assert in_code >= set(range(1, 11)), f"errata the code never cites: {sorted(set(range(1, 11)) - in_code)}"


def test_readme_and_design_link_the_paper_readings():
    for doc, link in (("README.md", "(docs/paper_readings.md)"), ("docs/design.md", "(paper_readings.md)")):
        assert link in (ROOT / doc).read_text(), doc


NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def test_readme_counts_the_notebooks_that_exist():
    """The user guide's notebook counts ("Four notebooks in `notebooks/`", "executes all four", "executes the four
    notebooks") match notebooks/, and its table lists each of them (docs/guide.md: the README is a front page)."""
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9]*.py"))
    text = (ROOT / "docs" / "guide.md").read_text()
    counts = re.findall(r"(\w+) notebooks in `notebooks/`|executes all (\w+)\.|executes the (\w+) notebooks", text)
    words = [w.lower() for match in counts for w in match if w]
    assert len(words) == 3 and all(NUMBERS.get(w) == len(notebooks) for w in words), (words, notebooks)
    assert all(f"| `{name}` |" in text for name in notebooks)


_REF = re.compile(r":(?:mod|func|class|data|meth|attr):`~?([A-Za-z_][\w.]*)`")


def _resolves(name: str, module) -> bool:
    """Whether a Sphinx-style reference in ``module``'s docstring names an object that exists."""
    for candidate in (name, f"{module.__name__}.{name}"):
        parts = candidate.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr, None)
            if obj is not None:
                return True
            break
    return False


@pytest.mark.parametrize("module_name", MODULES)
def test_module_docstring_references_exist(module_name):
    """Every module, function, class or data item a module docstring names (``:mod:``, ``:func:`` …) exists."""
    module = importlib.import_module(module_name)
    missing = [name for name in _REF.findall(module.__doc__ or "") if not _resolves(name, module)]
    assert not missing, f"{module_name}'s docstring names what does not exist: {missing}"


def test_paper_readings_names_code_that_exists():
    """Each module, function or attribute that docs/paper_readings.md names (relative to ``jaxreplay``) exists."""
    text = (ROOT / READINGS).read_text()
    names = set(re.findall(r"`((?:paper|envs|experiments|agents|adaptive)(?:\.[A-Za-z_]\w*)*)`", text))
    assert {"paper.theory.analytic.b_coefficients", "adaptive.controller", "agents.linear.td_error"} <= names
    missing = sorted(name for name in names if not _resolves(f"jaxreplay.{name}", jaxreplay))
    assert not missing, f"{READINGS} names what does not exist: {missing}"
