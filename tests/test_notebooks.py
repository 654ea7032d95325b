"""Every notebook runs top to bottom in their default (small) mode.

Each notebook is a jupytext "percent" script (``notebooks/*.py``, reviewable in
diffs, no stored outputs). The test converts it to a notebook in memory,
executes it in a fresh Python kernel with nbclient and asserts that

* no cell raised (each notebook ends with a *Checks* cell whose ``assert``\\ s
  test the science: theory against simulation, map locations, aER bounds);
* it displayed at least the number of figures listed below (PNG outputs).

The kernel inherits ``JAX_COMPILATION_CACHE_DIR`` (set to the repository's
``.jax_cache`` when unset) so reruns reuse compilations.
"""

from __future__ import annotations

import os
import pathlib

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

# notebook → minimum number of figures (PNG display outputs) it must produce.
EXPECTED_FIGURES = {
    "01_linesearch_theory_vs_experiment.py": 4,
    "02_memory_size_and_prioritization_maps.py": 4,
    "03_adaptive_replay_dqn.py": 3,
    "04_dqn_replay_study.py": 4,
    "05_replay_study.py": 4,
}

pytestmark = pytest.mark.slow


def _png_outputs(nb) -> int:
    return sum(
        1
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") in ("display_data", "execute_result") and "image/png" in out.get("data", {})
    )


def _execute(path: pathlib.Path, workdir: pathlib.Path, monkeypatch):
    # The kernel is a child process: give it a plotting backend that renders
    # inline and the shared compilation cache.
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", os.environ.get("JAX_COMPILATION_CACHE_DIR", str(ROOT / ".jax_cache")))
    monkeypatch.setenv("JAX_PLATFORMS", os.environ.get("JAX_PLATFORMS", "cpu"))
    nb = jupytext.read(path)
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(workdir)}})
    client.execute()
    return nb


def test_every_notebook_is_listed():
    assert sorted(p.name for p in NOTEBOOKS.glob("[0-9]*.py")) == sorted(EXPECTED_FIGURES)


@pytest.mark.parametrize("name", sorted(EXPECTED_FIGURES))
def test_notebook_runs_and_draws_its_figures(name, tmp_path, monkeypatch):
    path = NOTEBOOKS / name
    assert path.exists(), f"{path} is missing"
    nb = _execute(path, tmp_path, monkeypatch)
    figures = _png_outputs(nb)
    assert figures >= EXPECTED_FIGURES[name], f"{name} drew {figures} figures, expected ≥ {EXPECTED_FIGURES[name]}"


@pytest.mark.parametrize("name", sorted(EXPECTED_FIGURES))
def test_notebook_has_a_paper_scale_switch(name):
    text = (NOTEBOOKS / name).read_text()
    assert "\nPAPER_SCALE = False" in text, "the default (small) mode must be the committed one"
    assert text.count("\nPAPER_SCALE = ") == 1, "one switch, set in one place"


def test_no_notebook_with_stored_outputs_is_committed():
    """Only the jupytext scripts are tracked: an .ipynb (which stores outputs) must stay untracked."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "notebooks"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert sorted(pathlib.Path(t).name for t in tracked if t.endswith(".py")) == sorted(EXPECTED_FIGURES)
    assert not [t for t in tracked if t.endswith(".ipynb")]
    ignored = subprocess.run(["git", "check-ignore", "-q", "notebooks/x.ipynb"], cwd=ROOT)
    assert ignored.returncode == 0, "notebooks/*.ipynb must be git-ignored (jupytext --to ipynb writes them there)"
