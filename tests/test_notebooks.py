"""Every notebook runs top to bottom in their default (small) mode.

Each notebook is a jupytext "percent" script (``notebooks/*.py``, reviewable in
diffs, no stored outputs). The slow test (``python -m pytest -m slow``, minutes
per notebook) converts it to a notebook in memory, executes it in a fresh
Python kernel with nbclient and asserts that

* no cell raised (each notebook ends with a *Checks* cell whose ``assert``\\ s
  test the science: theory against simulation, map locations, aER bounds);
* it displayed at least the number of figures listed below (PNG outputs).

The default run keeps a bounded version: every code cell compiles, and each
notebook's first cells (its settings, imports and definitions: no experiment)
run in a kernel and give the small mode's numbers.

The kernel inherits ``JAX_COMPILATION_CACHE_DIR`` (set to the repository's
``.jax_cache`` when unset) so reruns reuse compilations.
"""

from __future__ import annotations

import os
import pathlib

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

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

# notebook → (how many leading code cells the bounded test runs, a cell it then runs that asserts their numbers).
# The first cells set the scale, import and define; the experiments come after them.
BOUNDED = {
    "01_linesearch_theory_vs_experiment.py": (3, """
assert (SEEDS, PER_SEEDS, MEMORY_SIZE, BATCH_SIZE) == (32, 8, 100, 5)
curve = np.array([[[1.0, -2.0], [0.5, -0.25]]])  # [1 setting, T = 2, 2 weights]
assert metric_of(curve).tolist() == [0.75]
mean, se = seed_mean(np.stack([curve[0], 3 * curve[0]]))  # two seeds
assert mean.tolist() == [[2.0, -4.0], [1.0, -0.5]] and se[0].tolist() == [1.0, 2.0]
assert diverged_seeds(np.stack([curve[0], np.full_like(curve[0], np.nan), 3 * curve[0]])) == 1
"""),
    "02_memory_size_and_prioritization_maps.py": (3, """
assert (ER_SEEDS, PER_SEEDS, AER_SEEDS) == (32, 8, 32)
assert (len(gridN), len(gridm)) == (14, 9) and gridN[[0, -1]].tolist() == [10, 1000]
assert len(er_spots) == 15 and times[-1] == T == 1000
"""),
    "03_adaptive_replay_dqn.py": (3, """
assert SEEDS == 4
for env in GAMES:
    for label, sw in SWEEPS[env].items():
        setup = sw.make_setup()
        assert setup.total_steps == SMALL_STEPS[env] and setup.steps_per_segment * SMALL_SEGMENTS == setup.total_steps
        assert sw.num_runs == SEEDS * len(PAPER_SIZES[env][label]), (env, label)
# The paper's sizes scaled by the small run's length (CartPole's 100 and 40,000 of 200,000 steps, in 20,000).
sizes = {env: [p["memory_size"] for sw in SWEEPS[env].values() for p in sw.points] for env in GAMES}
assert sizes == {"CartPole-v1": [50, 20000, 50], "MountainCar-v0": [667, 1667, 5000, 667, 5000],
                 "Acrobot-v1": [2000, 8000, 2000, 8000]}, sizes
"""),
    # Their figures and Checks read the committed studies (docs/study/, docs/replay_study/): all of each runs
    # but its tiny CPU study.
    "04_dqn_replay_study.py": (5, None),
    "05_replay_study.py": (6, None),
}


def _png_outputs(nb) -> int:
    return sum(
        1
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") in ("display_data", "execute_result") and "image/png" in out.get("data", {})
    )


def _execute(nb, workdir: pathlib.Path, monkeypatch):
    # The kernel is a child process: give it a plotting backend that renders
    # inline and the shared compilation cache.
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", os.environ.get("JAX_COMPILATION_CACHE_DIR", str(ROOT / ".jax_cache")))
    monkeypatch.setenv("JAX_PLATFORMS", os.environ.get("JAX_PLATFORMS", "cpu"))
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(workdir)}})
    client.execute()
    return nb


def _bounded_notebook(name: str):
    """The notebook ``name`` cut to its first cells and a cell that asserts their numbers (see BOUNDED)."""
    nb = jupytext.read(NOTEBOOKS / name)
    cells, checks = BOUNDED[name]
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    if checks is None:  # notebooks 04, 05: their own Checks cell, without the lines about the tiny run it skipped
        checks = code[-1].source.split("# The tiny")[0]
        assert "tiny" not in checks and checks.count("assert ") >= 8, "the Checks cell changed: update BOUNDED"
    nb.cells = [*code[:cells], nbformat.v4.new_code_cell(checks)]
    return nb


def test_every_notebook_is_listed():
    assert sorted(p.name for p in NOTEBOOKS.glob("[0-9]*.py")) == sorted(EXPECTED_FIGURES) == sorted(BOUNDED)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED_FIGURES))
def test_notebook_runs_and_draws_its_figures(name, tmp_path, monkeypatch):
    path = NOTEBOOKS / name
    assert path.exists(), f"{path} is missing"
    nb = _execute(jupytext.read(path), tmp_path, monkeypatch)
    figures = _png_outputs(nb)
    assert figures >= EXPECTED_FIGURES[name], f"{name} drew {figures} figures, expected ≥ {EXPECTED_FIGURES[name]}"


@pytest.mark.parametrize("name", sorted(EXPECTED_FIGURES))
def test_every_code_cell_compiles_and_the_first_cells_give_the_small_mode_s_numbers(name, tmp_path, monkeypatch):
    """The bounded version of the slow test above: a syntax error anywhere, an import or a definition that
    fails, or a changed small-mode setting fails here in seconds."""
    for i, cell in enumerate(jupytext.read(NOTEBOOKS / name).cells):
        if cell.cell_type == "code":
            compile(cell.source, f"{name}, cell {i}", "exec")
    nb = _execute(_bounded_notebook(name), tmp_path, monkeypatch)
    if name.startswith("04_"):  # its three figures of the committed study (the fourth is the tiny run's)
        assert _png_outputs(nb) == 3
    if name.startswith("05_"):  # three figures per committed game study
        assert _png_outputs(nb) == 3 * len(list((ROOT / "docs" / "replay_study").glob("*/study.json"))) == 9


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
