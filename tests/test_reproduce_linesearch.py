"""Tests of the LineSearch reproduction (jaxreplay.paper.reproduce.linesearch) and its helpers.

The end-to-end tests read the reproduction in its ``tiny`` mode (a few grid
points and seeds; the compiles dominate, ~45 s cold on 2 cores), run once per
session (the ``paper_tiny`` fixture of ``tests/conftest.py``); each claim of the
registry (``rl.CLAIMS``) has its own test of the numbers it reports there.
"""

import csv
import math
import re

import numpy as np
import pytest

from jaxreplay.paper.reproduce import linesearch as rl


@pytest.fixture(scope="module")
def tiny(paper_tiny):
    # The LineSearch part of the session's tiny whole-paper run (tests/conftest.py).
    return paper_tiny[1]["linesearch"]


# ---------------------------------------------------------------- end to end


def test_tiny_writes_every_figure(tiny):
    assert set(tiny["figures"]) == set(rl.FIGURES)
    for name, path in tiny["figures"].items():
        with open(path, "rb") as fh:
            head = fh.read(8)
            size = len(head) + len(fh.read())
        assert head == b"\x89PNG\r\n\x1a\n", name
        assert size > 5000, name


def test_a_rerun_killed_while_writing_leaves_no_earlier_report_beside_its_figures(tiny, tmp_path, monkeypatch):
    """A rerun killed while writing figures left its new figures beside the earlier run's report.md and
    metric_grid.csv, and a temporary file no rerun removed (found by a probe): the earlier outputs and their
    temporary files now go before anything is written, and report.md is written last."""
    import pathlib
    import shutil

    from jaxreplay import _files
    from jaxreplay.paper import plots

    out = tmp_path / "ls"
    shutil.copytree(pathlib.Path(tiny["csv"]).parent, out)
    stale = out / f"{_files.TEMP_PREFIX}{'a' * 32}-{next(iter(rl.FIGURES))}"
    stale.write_bytes(b"partial")
    written = []
    save = plots.save

    def killed_after_two(fig, path):
        if len(written) == 2:
            raise KeyboardInterrupt  # (as a kill while writing the third figure)
        written.append(pathlib.Path(path).name)
        return save(fig, path)

    monkeypatch.setattr(plots, "save", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        rl.reproduce(out, mode="tiny", seeds=2, progress=False)
    # (summary.json is `reproduce all`'s record of the part, which that command removes before rerunning it)
    assert sorted(p.name for p in out.iterdir() if p.name not in ("summary.json", ".jaxreplay-owner")) == sorted(written)


def test_tiny_csv_columns_values_and_sources(tiny):
    with open(tiny["csv"], newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = list(reader)
    assert tuple(header) == rl.CSV_COLUMNS
    assert rows
    col = {c: i for i, c in enumerate(header)}
    sources = {r[col["source"]] for r in rows}
    assert sources == {"theory", "experiment"}
    assert {r[col["sampler"]] for r in rows} == {"uniform", "prioritized", "adaptive"}
    for r in rows:
        assert len(r) == len(header)
        M = float(r[col["final_metric"]])
        assert math.isfinite(M) and M >= 0
        for c in ("discount", "memory_size", "batch_size", "step_size"):
            assert math.isfinite(float(r[col[c]]))
        seeds = int(r[col["seeds"]])
        assert (seeds == 0) if r[col["source"]] == "theory" else (seeds > 0)
    # The contour grids are in (theory, both discounts for ER, pER at γ = 0).
    design = rl.design("tiny")
    er_grid = {(int(r[col["memory_size"]]), int(r[col["batch_size"]]), float(r[col["discount"]]))
               for r in rows if r[col["source"]] == "theory" and r[col["sampler"]] == "uniform"
               and float(r[col["step_size"]]) == 1e-3}
    for N in design.grid_memory_sizes:
        for m in design.grid_batch_sizes:
            assert (N, m, 0.0) in er_grid and (N, m, 0.5) in er_grid


def test_tiny_csv_experiment_rows_match_their_theory_twins(tiny):
    # Each experiment row whose (sampler, γ, N, m, α) also has a theory row must
    # agree with it: the seed-averaged simulation follows the ODE (O(α) error).
    with open(tiny["csv"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    def key(r):
        return r["sampler"], float(r["discount"]), int(r["memory_size"]), int(r["batch_size"]), float(r["step_size"])

    theory = {key(r): float(r["final_metric"]) for r in rows if r["source"] == "theory"}
    pairs = [(float(r["final_metric"]), theory[key(r)]) for r in rows
             if r["source"] == "experiment" and key(r) in theory]
    assert len(pairs) >= 9
    gaps = [abs(e - t) for e, t in pairs]
    assert max(gaps) <= 0.02, max(gaps)
    assert max(t for _, t in pairs) > 0.1  # the compared values span far more than the tolerance


def test_tiny_report_has_every_claim_row(tiny):
    text = open(tiny["report"], encoding="utf-8").read()
    assert "| claim | paper | ours | agrees? | source |" in text
    assert [c["id"] for c in tiny["claims"]] == list(rl.CLAIM_IDS)
    for c in tiny["claims"]:
        assert c["agrees"] in ("yes", "no", "partly")
        assert c["source"] in ("theory", "experiment", "experiment + theory")
        row = [line for line in text.splitlines() if line.startswith("| " + c["claim"].replace("|", "\\|") + " |")]
        assert len(row) == 1, c["claim"]
    for name in rl.FIGURES:
        assert f"`{name}`" in text


def test_tiny_claim_numbers(tiny):
    n = tiny["numbers"]
    # Closed-form results do not depend on the mode's resolution.
    assert n["fixed_slope_steps"] == pytest.approx(math.log(20) / (5 * 2e-5), rel=1e-9)
    assert n["fixed_intercept_best_steps"] < 1200
    assert n["fixed_intercept_best_N"] > 1000  # with t_K ≈ 1095 < N the whole history is kept
    assert n["dtheta2_600"] < 0  # Fig. 2a narrative at N = 100 (theory)
    assert 400 <= n["theta1_away_end"] <= 600
    # |Δθ1| rises from t ≈ 4; the verdict reads the time 10 % of the rise is done (the summary's "start" held it).
    assert n["theta1_away_start"] < 20 < n["theta1_away_t10"] < n["theta1_away_end"]
    # Seed-averaged experiment vs ODE: a loose bound for 1–2 seeds.
    for key in ("max_error_er", "max_error_per", "max_error_gamma05"):
        assert 0 <= n[key] < 0.05
    assert n["diverged"] == {"ER": 0, "pER": 0, "aER": 0}
    assert n["aer_mean_final_memory"] >= rl.AER_K
    for key in ("aer_M", "fixed_M", "aer_theory_M", "fixed_theory_M"):
        assert math.isfinite(n[key]) and n[key] >= 0


# ---------------------------------------------------------------- one test per claim of the registry


@pytest.fixture(scope="module")
def metric_rows(tiny):
    with open(tiny["csv"], newline="") as fh:
        return list(csv.DictReader(fh))


def _metric(rows, sampler, source, N, m, alpha=1e-3, gamma=0.0) -> float:
    """The one ``metric_grid.csv`` value of a configuration."""
    found = [float(r["final_metric"]) for r in rows
             if (r["sampler"], r["source"], int(r["memory_size"]), int(r["batch_size"])) == (sampler, source, N, m)
             and float(r["step_size"]) == alpha and float(r["discount"]) == gamma]
    assert len(found) == 1, (sampler, source, N, m, alpha, gamma)
    return found[0]


def _grid(rows, sampler, gamma=0.0) -> np.ndarray:
    """The theory contour grid of the CSV, [nN, nm]."""
    design = rl.design("tiny")
    return np.array([[_metric(rows, sampler, "theory", N, m, 1e-3, gamma) for m in design.grid_batch_sizes]
                     for N in design.grid_memory_sizes])


def _floats(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)]


def _agree(ok: bool, partly: bool = False) -> str:
    return "yes" if ok else ("partly" if partly else "no")


def _check_optimal_N_m10_theory(c, rows):
    # The optimum sits on a cusp of M(N) near the paper's 250; the grid alone says 250 (the CSV's argmin).
    assert 245 < c["value"] < 255 and c["agrees"] == "yes"
    column = _grid(rows, "uniform")[:, rl.design("tiny").grid_batch_sizes.index(10)]
    assert c["grid_value"] == rl.design("tiny").grid_memory_sizes[int(np.argmin(column))] == 250
    assert f"N* = {c['value']:.4g}, M ≈ 0 (a cusp" in c["ours"]


def _check_optimal_N_m10_experiment(c, rows):
    spots = rl.design("tiny").spot_memory_sizes
    M = [_metric(rows, "uniform", "experiment", N, 10) for N in spots]
    assert c["value"] == spots[int(np.argmin(M))] == 250 and c["agrees"] == "yes"
    assert "(2 seeds)" in c["ours"]


def _check_monotone_m40_theory(c, rows):
    assert c["value"] == 1.0 and c["agrees"] == "yes"
    gap = float(c["ours"].split("M(N_max) − min M = ")[1].split(" ")[0])
    rise = float(c["ours"].split("largest rise above the lowest M at a smaller N ")[1].split(";")[0])
    assert 0 <= gap <= rl.MONOTONE_TOL and 0 <= rise <= rl.MONOTONE_TOL
    column = _grid(rows, "uniform")[:, rl.design("tiny").grid_batch_sizes.index(40)]
    assert np.all(np.diff(column) <= rl.MONOTONE_TOL)


def _check_monotone_m40_experiment(c, rows):
    M = [_metric(rows, "uniform", "experiment", N, 40) for N in rl.design("tiny").spot_memory_sizes]
    assert c["ours"].startswith("M = [" + ", ".join(f"{x:.3g}" for x in M) + "]")
    assert np.all(np.diff(M) <= rl.MONOTONE_TOL) and c["value"] == 1.0 and c["agrees"] == "yes"


def _check_threshold(c, rows, sampler, gamma, paper_m, value, grid_value, agrees):
    """The boundaries with the cusps, and on the grid alone recomputed from the CSV's theory rows."""
    m = rl.design("tiny").grid_batch_sizes
    assert (c["value"], c["global_threshold"]) == (value, value)
    grid = _grid(rows, sampler, gamma)
    assert c["grid_threshold"] == rl.monotone_threshold(m, grid)["threshold"] == grid_value
    assert c["grid_global_threshold"] == rl.monotone_threshold(m, grid, strict=False)["threshold"] == grid_value
    assert c["agrees"] == agrees and f"for all m ≥ {value:g}" in c["ours"]
    # The boundary at other tolerances (every M(N) dips to a cusp: a looser tolerance, an earlier boundary).
    at = [float(x) if x else math.inf for x in re.findall(r"(?:m ≥ (\S+)|no m) \((?:0\.001|1e-05|1e-06)\)", c["ours"])]
    assert len(at) == 3 and at[0] <= value <= at[1] <= at[2], c["ours"]
    if paper_m is not None:
        assert c["paper"] == f"boundary m ≈ {paper_m}"


def _check_er_monotone_threshold(c, rows):
    # The tiny grid's cusp at m = 20 (N* ≈ 301) pushes the boundary to 40, far from the paper's 20.
    _check_threshold(c, rows, "uniform", 0.0, 20, 40.0, 20.0, "no")
    assert "m = 20 (N* = 301" in c["ours"]


def _check_per_monotone_threshold(c, rows):
    _check_threshold(c, rows, "prioritized", 0.0, 15, 20.0, 10.0, "yes")
    assert "non-monotone m: [1, 5, 10]" in c["ours"]


def _check_gamma05_nonmonotone(c, rows):
    _check_threshold(c, rows, "uniform", 0.5, None, 40.0, 40.0, "yes")
    assert "non-monotone m: [1, 5, 10, 20]" in c["ours"]


def _check_per_worse_region_theory(c, rows):
    dM = _grid(rows, "uniform") - _grid(rows, "prioritized")
    assert c["fraction_worse"] == pytest.approx(np.mean(dM < -rl.WHITE_THRESHOLD)) == pytest.approx(3 / 25)
    assert c["fraction_better"] == pytest.approx(np.mean(dM > rl.WHITE_THRESHOLD)) == pytest.approx(13 / 25)
    assert c["agrees"] == "yes" and "N ∈ [100, 250], m ∈ [5, 10]" in c["ours"]


def _check_per_worse_region_experiment(c, rows):
    # The ΔM = M_ER − M_pER of each spot (Fig. 2DExplain's N at m = 10), experiment and theory, from the CSV.
    for N in rl.EXPLAIN_MEMORY:
        d_exp = _metric(rows, "uniform", "experiment", N, 10) - _metric(rows, "prioritized", "experiment", N, 10)
        d_th = _metric(rows, "uniform", "theory", N, 10) - _metric(rows, "prioritized", "theory", N, 10)
        assert f"(N={N}, m=10): ΔM_exp={d_exp:+.3g}, ΔM_th={d_th:+.3g}" in c["ours"]
        assert np.sign(d_exp) == np.sign(d_th) == (1 if N == 1000 else -1)
    assert c["sign_agreement"] == 1.0 and c["agrees"] == "yes"


def _check_fixed_slope_steps(c, rows):
    assert c["value"] == pytest.approx(math.log(20) / (5 * 2e-5), rel=1e-9) and c["agrees"] == "yes"
    assert f"{math.log(20) / (5 * 5e-5):.0f} at the printed α = 5e-5" in c["ours"]


def _check_fixed_intercept_steps(c, rows):
    # From t_K ≈ 1095 < N on the whole history is kept: N = 1101 is the tiny grid's first N past it.
    assert c["best_memory"] == 1101 and 1000 < c["value"] < 1200 and c["agrees"] == "yes"
    assert c["value"] == pytest.approx(float(rl.steps_to_exponent(math.log(20), 1101, 5, 5e-5)), rel=1e-9)
    assert float(rl.steps_to_exponent(math.log(20), 1091, 5, 5e-5)) > c["value"]


def _check_optimal_N_vs_K(c, rows):
    memory = np.asarray(rl.design("tiny").appendix_memory_sizes, float)
    assert c["max_optimal"] == memory[np.argmin(rl.steps_to_exponent(1.0, memory))] == 851
    assert c["k_drop"] == 1.25 and memory[np.argmin(rl.steps_to_exponent(1.25, memory))] == 1
    assert c["agrees"] == "yes" and "(rising: True, by construction" in c["ours"]
    assert "abrupt: True, stays 1: True)" in c["ours"]
    # Below the drop every N from N* up reaches K at the same step: the claim says the optimum is that half-line
    # (it read as one optimal N per K; found by a probe).
    steps = rl.steps_to_exponent(np.array([0.25, 0.5, 0.75, 1.0])[:, None], memory[None, :])
    assert all((row == row.min()).sum() == (memory >= n).sum() for row, n in zip(steps, [121, 261, 491, 851]))
    assert "every larger N up to N_max ties at 4 of the 4 K up to it" in c["ours"]


def _check_per_1d_faster(c, rows):
    # From the ODE (the rate difference k_pri − k of the closed form is ≥ 0 by construction): pER ahead at every t.
    assert 0 < c["value"] < 1e-3 and c["agrees"] == "yes" and "> 0 at every t ∈ (0, 2000] on a 10-step grid: True" \
        in c["ours"]
    er, per = _floats(c["ours"].split(": ER ")[1])[0], _floats(c["ours"].split(", pER ")[1])[0]
    assert per < er / 3 and er == pytest.approx(0.000481, rel=0.01)  # Δθ/Δθ⁰ at t = 2000: 0.000155 vs 0.000481
    assert _floats(c["ours"].split("within ")[1])[0] < 1e-5  # the closed form (2.6e-6 off the ODE)


def _check_overshoot_theta1_N100(c, rows):
    from jaxreplay.paper import theory

    # paper: 200 → 500; the rise begins at t ≈ 4 and is read from the time 10 % of it is done
    assert 100 <= c["t10"] <= 300 and 400 <= c["end"] <= 600 and c["agrees"] == "yes"
    assert (c["start"], c["t10"], c["end"]) == (4.0, 142.0, 503.0)
    assert f"plateau {float(theory.first_stage_limit(-0.1, 0.5)[0]):.3g}" in c["ours"]


def _check_overshoot_theta2_N100(c, rows):
    assert c["value"] == pytest.approx(-0.0555, abs=5e-4) and c["agrees"] == "yes"
    assert "Δθ2 < 0 over [572, 1000]" in c["ours"]


def _check_overshoot_N1000(c, rows):
    assert c["value"] == pytest.approx(0.0218, abs=5e-4) and c["agrees"] == "yes"  # the narrative does not fit
    assert "peaks at t = 199" in c["ours"] and "Δθ2 never < 0" in c["ours"]


def _check_agreement(c, configurations, bound):
    """The worst error is the largest one the text lists (2 digits) and within an O(α)-plus-noise bound."""
    errors = [_floats(part.split(": ")[1])[0] for part in c["ours"].split("; ")[:configurations]]
    assert len(errors) == configurations
    assert float(f"{c['value']:.2g}") == max(errors) and 0 < c["value"] < bound
    late = [_floats(part.split("(")[1])[0] for part in c["ours"].split("; ")[:configurations]]
    assert float(f"{c['late']:.2g}") == max(late) and c["late"] <= c["value"]
    assert c["agrees"] == _agree(c["late"] < 1e-2, c["late"] < 3e-2)  # (after the discrete first steps)


def _check_agreement_er(c, rows):
    _check_agreement(c, 5, 0.02)
    # The spot-grid error is the largest |M_exp − M_ode| over the CSV's experiment rows with a theory twin.
    design = rl.design("tiny")

    def gap(N, m, g):
        return abs(_metric(rows, "uniform", "experiment", N, m, 1e-3, g)
                   - _metric(rows, "uniform", "theory", N, m, 1e-3, g))

    gaps = [gap(N, m, g) for N in design.spot_memory_sizes for m in design.spot_batch_sizes for g in (0.0, 0.5)]
    assert c["ours"].endswith(f"over the ER spot grid: {max(gaps):.2g}") and max(gaps) < 0.005


def _check_agreement_per(c, rows):
    _check_agreement(c, 5, 0.02)


def _check_agreement_gamma05(c, rows):
    _check_agreement(c, 2, 0.01)
    late = [_floats(part.split("(")[1])[0] for part in c["ours"].split("; ")]
    assert max(late) < c["value"] / 4  # the error is the discrete first steps'


def _check_aer_vs_fixed_M(c, rows):
    assert c["aer"] == _metric(rows, "adaptive", "experiment", rl.AER_N0, rl.AER_M)
    assert c["fixed"] == _metric(rows, "uniform", "experiment", rl.AER_N0, rl.AER_M)
    assert c["aer"] < c["fixed"] / 4 and c["agrees"] == "yes"
    assert rl.AER_N0 < c["mean_final_memory"] <= 1000 and f"mean final N = {c['mean_final_memory']:.0f}" in c["ours"]


def _check_aer_seed_fraction(c, rows):
    assert c["value"] == c["paired"] == 1.0 and c["agrees"] == "yes"  # both of 2 seeds
    assert c["ours"] == "100% vs the averaged fixed run; 100% paired by seed"


def _check_aer_vs_fixed_theory(c, rows):
    assert c["aer"] == _metric(rows, "adaptive", "theory", rl.AER_N0, rl.AER_M)
    assert c["fixed"] == _metric(rows, "uniform", "theory", rl.AER_N0, rl.AER_M)
    assert c["aer"] < c["fixed"] / 4 and c["agrees"] == "yes"
    # The ODE driven by the mean live size n(t) follows the aER experiment.
    assert abs(c["aer"] - _metric(rows, "adaptive", "experiment", rl.AER_N0, rl.AER_M)) < 1e-3


CLAIM_CHECKS = {cid: globals()[f"_check_{cid}"] for cid in rl.CLAIMS}


@pytest.mark.parametrize("cid", list(rl.CLAIMS))
def test_claim_on_tiny(cid, tiny, metric_rows):
    claims = {c["id"]: c for c in tiny["claims"]}
    CLAIM_CHECKS[cid](claims[cid], metric_rows)


def test_the_registry_is_the_report(tiny):
    """The claim ids come from the registry, in its order: the summary, CLAIM_IDS and report.md's table."""
    assert list(rl.CLAIMS) == list(rl.CLAIM_IDS) == [c["id"] for c in tiny["claims"]]
    assert len(rl.CLAIMS) == 22
    text = open(tiny["report"], encoding="utf-8").read()
    table = [line for line in text.split("## Claims")[1].split("\n## ")[0].splitlines()
             if line.startswith("| ") and not line.startswith(("| claim |", "| --- |"))]

    def cell(text):
        return str(text).replace("|", "\\|").replace("\n", " ")

    keys = ("claim", "paper", "ours", "agrees", "source")
    assert table == ["| " + " | ".join(cell(c[k]) for k in keys) + " |" for c in tiny["claims"]]
    with pytest.raises(ValueError, match="twice"):
        rl.claims._register("optimal_N_m10_theory")(lambda s: {})
    assert list(rl.CLAIMS) == list(rl.CLAIM_IDS)  # the refused duplicate left the registry alone


def test_figure_makers_are_the_figures(tiny):
    assert list(rl.FIGURE_MAKERS) == list(rl.FIGURES) == list(tiny["figures"])


# ---------------------------------------------------------------- helpers


def test_fixed_slope_steps_is_ln20_over_m_alpha():
    m = np.array([1, 5, 10])
    a = np.array([2e-5, 5e-5, 1e-3])
    got = rl.fixed_slope_steps(0.05, m[:, None], a[None, :])
    want = np.log(20.0) / (m[:, None] * a[None, :])
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert rl.fixed_slope_steps(0.05, 5, 2e-5) == pytest.approx(29957.3, abs=0.1)


def test_steps_to_exponent_is_the_root_of_k():
    from jaxreplay.paper import theory

    K = np.array([0.5, 1.0, math.log(20), 6.0])
    N = np.array([1, 50, 500, 1000, 2000])
    t = rl.steps_to_exponent(K[:, None], N[None, :])
    assert np.all(np.isfinite(t))
    k = np.asarray(theory.fixed_intercept_exponent(t, N[None, :], 5, 2e-5))
    np.testing.assert_allclose(k, np.broadcast_to(K[:, None], k.shape), rtol=1e-9)
    # Early branch (t ≤ N): root of μ(v² t³/9 + x0 v t²/2 + x0² t) = K, by numpy.roots.
    mu, v, x0, Kt = 5 * 2e-5, 0.01, -5.0, 0.5
    roots = np.roots([mu * v * v / 9, mu * x0 * v / 2, mu * x0 * x0, -Kt])
    real = min(r.real for r in roots if abs(r.imag) < 1e-9 and r.real > 0)
    assert rl.steps_to_exponent(Kt, 2000) == pytest.approx(real, rel=1e-9)
    # More steps are needed for a larger target; unreachable targets give NaN.
    assert np.all(np.diff(t, axis=0) > 0)
    assert np.isnan(rl.steps_to_exponent(1e9, 10, t_high=1e3))


def test_first_crossing():
    got = rl.first_crossing(lambda t: t**2, np.array([4.0, 0.0, 1e6]), t_high=10.0)
    assert got[0] == pytest.approx(2.0, rel=1e-12)
    assert got[1] == 0.0
    assert np.isnan(got[2])


def test_optimal_memory_nonmonotone_and_threshold():
    N = np.array([10, 100, 250, 500, 1000])
    m = np.array([1, 5, 10, 20, 40])
    M = np.array([
        [0.9, 0.50, 0.40, 0.30, 0.20],
        [0.8, 0.30, 0.20, 0.10, 0.05],
        [0.7, 0.20, 0.05, 0.12, 0.02],
        [0.6, 0.25, 0.10, 0.07, 0.01],
        [0.5, 0.40, 0.15, 0.06, 0.00],
    ])
    np.testing.assert_array_equal(rl.optimal_memory(N, M), [1000, 250, 250, 1000, 1000])
    # m = 20 has a bump (0.10 → 0.12) but its optimum is at N_max.
    np.testing.assert_array_equal(rl.nonmonotone(M), [False, True, True, True, False])
    np.testing.assert_array_equal(rl.nonmonotone(M, strict=False), [False, True, True, False, False])
    strict = rl.monotone_threshold(m, M)
    assert strict["threshold"] == 40
    assert strict["largest_nonmonotone"] == 20
    assert strict["nonmonotone_m"] == [5, 10, 20]
    assert strict["all_below_nonmonotone"] is False  # m = 1 is monotone
    glob = rl.monotone_threshold(m, M, strict=False)
    assert glob["threshold"] == 20 and glob["nonmonotone_m"] == [5, 10]
    # A tolerance absorbs small bumps.
    assert rl.monotone_threshold(m, M, tol=0.03)["threshold"] == 20
    # A rise counts from the lowest value before it, not from its neighbour: steps of 0.6 tol that rise 1.2 tol
    # in all passed the neighbours' test, whose answer then followed the grid's step (a probe).
    tol = rl.MONOTONE_TOL
    creeping = np.array([0.5, 0.4, 0.4 + 0.6 * tol, 0.4 + 1.2 * tol, np.nan, 0.4 + 0.5 * tol])
    assert rl.nonmonotone(creeping) and not rl.nonmonotone(creeping, tol=1.3 * tol)
    from jaxreplay.paper.reproduce.linesearch.numerics import largest_rise

    assert largest_rise(creeping) == pytest.approx(1.2 * tol) and largest_rise(M[:, 0]) == 0.0
    assert not rl.nonmonotone(np.array([0.5, 0.4, np.nan, 0.4 + 0.9 * tol, 0.3]))
    # NaNs (e.g. a diverged run) are skipped by the optimum.
    assert rl.optimal_memory(N, np.array([np.nan, 0.3, 0.1, 0.2, 0.4])) == 250
    # Largest m non-monotone: no threshold.
    assert math.isnan(rl.monotone_threshold(m, M[::-1])["threshold"])


def test_true_intervals_and_seed_average():
    t = np.arange(10.0)
    mask = np.array([0, 1, 1, 0, 0, 1, 1, 1, 0, 1], bool)
    assert rl.true_intervals(t, mask) == [(1.0, 2.0), (5.0, 7.0), (9.0, 9.0)]
    d = np.zeros((2, 3, 2))
    d[0, -1] = (0.1, -0.4)
    d[1, -1] = (0.3, 0.2)
    assert rl.seed_average_metric(d) == pytest.approx(0.2 + 0.1)
    # A diverged seed (NaN) is left out of M, and metric_grid.csv's ``seeds`` says how many were averaged (it
    # said the configured count, as if every seed were in the mean).
    from jaxreplay.paper.reproduce.linesearch.stages import batched

    registry = batched.Registry()
    registry.add(100, 5, 1e-3)
    registry.add(100, 10, 1e-3)
    final = np.array([[[0.1, -0.4], [np.nan, np.nan], [0.3, 0.2]], [[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]]])
    ex = batched.Experiments(registry, final, np.isnan(final[..., 0]), batched.Registry(), np.zeros((0, 3, 1, 2)),
                             None, 3, ())
    assert ex.metric_at(0) == pytest.approx(0.3) and ex.seeds_averaged_at(0) == 2
    assert ex.metric_at(1) == pytest.approx(0.4) and ex.seeds_averaged_at(1) == 3


def test_prioritized_exponent_1d_is_faster():
    t = np.linspace(0.0, 2000.0, 4001)
    k, kp = rl.prioritized_exponent_1d(t, 500)
    assert k[0] == 0 and kp[0] == 0
    assert np.all(kp[1:] > k[1:])
    assert np.all(np.diff(kp - k) >= -1e-12)  # the rate difference is ≥ 0


def test_design():
    default = rl.design("default")
    full = rl.design("full")
    assert full.grid_memory_sizes == tuple(range(10, 1001, 10))
    assert full.grid_batch_sizes == tuple(range(1, 51))
    assert full.er_seeds > default.er_seeds and full.per_seeds > default.per_seeds
    p = rl.design("default", seeds=12)
    assert (p.er_seeds, p.aer_seeds, p.per_seeds) == (12, 12, 3)
    for design in (default, full, rl.design("tiny")):
        for m in (5, 10, 40):
            assert m in design.grid_batch_sizes and m in design.spot_batch_sizes
    with pytest.raises(ValueError, match="mode"):
        rl.design("huge")
    with pytest.raises(ValueError, match="seeds"):
        rl.design("default", seeds=0)



# ---------------------------------------------------------------- cusps of M(N)


def test_monotone_threshold_accepts_curves_of_their_own_lengths():
    m = np.array([5, 10, 20])
    curves = [np.array([0.5, 0.2, 0.3]), np.array([0.4, 1e-9, 0.3, 0.2]), np.array([0.3, 0.2, 0.1])]
    glob = rl.monotone_threshold(m, curves, strict=False)
    assert glob["threshold"] == 20 and glob["nonmonotone_m"] == [5, 10]
    # The dip of the second curve, missed by a grid without it, sets the boundary.
    without_dip = [c[[0, 2, 3]] if len(c) == 4 else c for c in curves]
    assert rl.monotone_threshold(m, without_dip, strict=False)["threshold"] == 10


@pytest.mark.parametrize("prioritized,grid_boundary,boundary", [(False, 16, 25), (True, 14, 18)], ids=["ER", "pER"])
def test_cusps_move_the_boundary_on_the_default_grid(prioritized, grid_boundary, boundary):
    """The default grid (N step 30) misses the cusps of M(N) near N ≈ 290–310 for m = 16–22 (ER):
    their optimum reads N_max, so the boundary 'optimum at N_max for all m ≥ …' is 16 (pER 14).
    With the cusps located it is 25 (pER 18): M(N_max) − M(cusp) > 1e-4 up to m = 22 (pER 16)."""
    from jaxreplay.paper import theory

    design = rl.design("default")
    N, m = np.asarray(design.grid_memory_sizes, float), np.asarray(design.grid_batch_sizes)
    cusps = theory.memory_cusps(m, rl.ALPHA_GRID, 0.0, rl.PRIORITY_EXPONENT if prioritized else None, memory_sizes=N)
    grid = np.stack([c.grid_metric for c in cusps], axis=1)
    assert rl.monotone_threshold(m, grid, strict=False)["threshold"] == grid_boundary
    assert rl.monotone_threshold(m, [c.curve()[1] for c in cusps], strict=False)["threshold"] == boundary
    for mi, c in zip(m, cusps):
        assert c.best_metric <= c.grid_best_metric
        if grid_boundary <= mi < boundary:  # the m whose optimum the grid put at N_max
            assert c.grid_best_memory == N[-1] and 285 < c.best_memory < 310, (mi, c.best_memory)
            assert c.best_metric < 1e-8 and c.grid_metric[-1] - c.best_metric > rl.MONOTONE_TOL


def test_tiny_uses_the_refined_optimum(tiny):
    n = tiny["numbers"]
    design = rl.design("tiny")
    for name in ("ER", "pER", "ER_gamma0.5"):
        assert len(n["optimal_memory"][name]) == len(design.grid_batch_sizes)
        for M, Mg in zip(n["optimal_metric"][name], n["optimal_metric_grid"][name]):
            assert M <= Mg
    j20 = design.grid_batch_sizes.index(20)
    assert n["optimal_memory_grid"]["ER"][j20] == 1000  # the coarse grid misses the cusp ...
    assert 295 < n["optimal_memory"]["ER"][j20] < 305 and n["optimal_metric"]["ER"][j20] < 1e-7  # ... found
    assert 245 < n["optimal_N_m10"] < 255 and n["optimal_N_m10_grid"] == 250
    # The cusps can only lower min M, so the 'optimum at N_max' boundary can only rise.
    for key in ("er", "per", "gamma05"):
        assert n[f"{key}_threshold_global"] >= n[f"{key}_threshold_global_grid"]
    claims = {c["id"]: c for c in tiny["claims"]}
    for cid in ("er_monotone_threshold", "per_monotone_threshold", "gamma05_nonmonotone"):
        assert "Grid alone" in claims[cid]["ours"] and math.isfinite(claims[cid]["grid_global_threshold"])
    assert "m = 20 (N* = 301" in claims["er_monotone_threshold"]["ours"]
    text = open(tiny["report"], encoding="utf-8").read()
    assert text.count("## Cusps of M(N)") == 3


# ---------------------------------------------------------------- records on demand


def test_experiment_sweeps_keep_only_what_is_read():
    # Which records each experiment sweep asks for (no run: the Sweep objects only).
    from jaxreplay.engine.records import Record
    from jaxreplay.experiments import linesearch as ls
    from jaxreplay.paper.reproduce.linesearch.stages import batched, er_per

    reg = batched.Registry()
    curves = er_per.er_curves()
    for key in curves.keys:
        reg.add(*key)
    spots = [reg.add(N, m, rl.ALPHA_GRID, g) for N in (10, 250) for m in (1, 40) for g in (0.0, 0.5)]
    setup = ls.Setup(steps=rl.T, max_capacity=1000, max_batch_size=50, sampler="uniform")
    split = batched.experiment_sweeps(reg, setup, seeds=3, seed=0, curves=curves)
    assert [name for name, _, _ in split] == ["uniform: curves", "uniform: finals"]
    (_, whole, whole_keys), (_, finals, final_keys) = split
    assert whole.record == Record(keep=("dtheta",)) and whole_keys == curves.keys
    # The spot checks keep Δθ at steps 1 and T only (step T is what M of the seed mean reads).
    assert finals.record == Record(keep=("dtheta",), stride=rl.T - 1) and final_keys == spots
    assert finals.num_runs == 3 * len(spots)
    # One sweep when every configuration needs its curves; the memory size only where asked (aER).
    ((name, one, keys),) = batched.experiment_sweeps(reg, setup, 3, 0, memory=True)
    assert name == "uniform" and one.record == Record(keep=("dtheta", "capacity")) and keys == reg.keys
    # Never a reduction on the device: the claims read per-seed values and NaN-aware host means.
    assert not any(s.record.reduce for _, s, _ in split)


def test_er_finals_apart_is_bit_identical_and_moves_little():
    import dataclasses

    from jaxreplay.paper.reproduce.linesearch.stages import er_per

    design = dataclasses.replace(rl.design("tiny"), er_chunk=64)  # small programs, the same size in both variants
    one = er_per.experiment_er(design, 0, apart=False)
    two = er_per.experiment_er(design, 0, apart=True)
    assert one.registry.keys == two.registry.keys and len(one.registry.keys) == 22
    assert two.curves.keys == er_per.er_curves().keys and one.curves.keys == one.registry.keys
    np.testing.assert_array_equal(one.final, two.final)  # NaN only where diverged, in both
    np.testing.assert_array_equal(one.diverged, two.diverged)
    for key in two.curves.keys:
        np.testing.assert_array_equal(one.runs(*key), two.runs(*key))
    assert [one.metric_at(i) for i in range(22)] == [two.metric_at(i) for i in range(22)]
    with pytest.raises(KeyError, match="no curves kept"):
        two.runs(250, 40, rl.ALPHA_GRID, 0.0)
    # Bytes per run: Δθ at 1000 steps (8000 B) + summaries; Δθ at 2 steps (16 B) + summaries.
    assert [(r.name, r.runs, r.result_bytes_per_run) for r in one.sweeps] == [("uniform", 44, 8014)]
    assert [(r.name, r.runs, r.result_bytes_per_run) for r in two.sweeps] == [
        ("uniform: curves", 14, 8014),
        ("uniform: finals", 30, 30),
    ]
    assert two.result_bytes == 14 * 8014 + 30 * 30 < 0.33 * one.result_bytes


def test_tiny_sweeps_keep_no_unused_records(tiny):
    # What the tiny reproduction's sweeps kept (CPU: the ER spot checks stay in the curves' sweep).
    sweeps = {s["name"]: s for s in tiny["sweeps"]}
    assert set(sweeps) == {"uniform", "prioritized", "adaptive"}
    assert sweeps["uniform"]["record"] == {"keep": ["dtheta"]}
    assert sweeps["prioritized"]["record"] == {"keep": ["dtheta"]}
    assert sweeps["adaptive"]["record"] == {"keep": ["dtheta", "capacity"]}
    # 12014 B per run when every record was kept; the capacity (4000 B) stays on the device for ER/pER.
    assert sweeps["uniform"]["result_bytes_per_run"] == sweeps["prioritized"]["result_bytes_per_run"] == 8014
    assert sweeps["adaptive"]["result_bytes_per_run"] == 12014
    assert [sweeps[k]["runs"] for k in ("uniform", "prioritized", "adaptive")] == [44, 5, 2]


@pytest.mark.parametrize("worse_at, agrees", [
    ((slice(0, 2), slice(0, 2)), "yes"),  # small N, small m: the paper's region
    ((slice(0, 2), slice(2, 4)), "partly"),  # small N, but at the larger m
    ((slice(2, 4), slice(2, 4)), "no"),  # large N, large m
])
def test_the_per_worse_region_claim_tests_the_papers_region_and_can_fail(worse_at, agrees):
    """'pER worse at small N, particularly when m is not large': the pER-worse share at smaller N against
    larger N, and among smaller N at smaller m against larger m. (The rule compared mean N and m of the worse
    cells with the grid's; the experiment's row compared the simulation with the ODE and said 'yes' to the
    paper whatever the signs.)"""
    import types

    from jaxreplay.paper.reproduce.linesearch import claims

    dM = np.full((4, 4), 0.01)  # pER better everywhere ...
    dM[worse_at] = -0.01  # ... but here
    s = types.SimpleNamespace(delta_metric=dM, grid_memory=np.array([10, 40, 250, 1000]),
                              grid_batch=np.array([1, 5, 20, 50]))
    assert claims.per_worse_region_theory(s)["agrees"] == agrees


def test_the_per_1d_claim_is_decided_by_the_ode_and_can_fail():
    """k_pri − k is ≥ 0 by construction (it said 'yes' with a rate 10⁶ times too large): the claim now rests on
    the ODE's own pER and ER curves, and on the closed form agreeing with the ODE."""
    import types

    from jaxreplay.paper.reproduce.linesearch import claims

    t = np.linspace(0.0, 2000.0, 201)
    er, per = np.exp(-1e-3 * t), np.exp(-2e-3 * t)

    def verdict(er_curve, per_curve, k_per):
        a = types.SimpleNamespace(ode_times=t, ode_ratio_er=er_curve, ode_ratio_per=per_curve, pri_times=t,
                                  exponent_per=k_per)
        return claims.per_1d_faster(types.SimpleNamespace(appendix=a))["agrees"]

    assert verdict(er, per, 2e-3 * t) == "yes"
    assert verdict(er, per, 3e-3 * t) == "partly"  # the ODE says faster, the closed form disagrees with it
    assert verdict(per, er, 1e-3 * t) == "no"  # pER slower in the ODE


def test_figure_helpers_show_a_missing_difference_and_a_clipped_colour_scale():
    """Fig. 2e drew a NaN difference white, "|ΔM| < threshold" (equal); the log contours clipped M more than five
    decades below its maximum into the bottom colour with nothing on the colour bar (found by a probe)."""
    import matplotlib

    matplotlib.use("Agg")
    from jaxreplay.paper import plots

    diff = np.array([[0.01, -0.01], [np.nan, 0.0]])
    fig = plots.comparison_map([10, 100], [1, 5], diff, 0.0015, title="t")
    ax = fig.axes[0]
    classes = np.asarray(ax.collections[0].get_array()).reshape(2, 2)  # [m, N]
    assert classes[0, 1] == -2 and classes[1, 1] == 0  # NaN: its own class (grey), not the white "equal" one
    assert "no value (NaN)" in [t.get_text() for t in ax.get_legend().get_texts()]
    # A spot check whose every seed diverged (NaN) was a white diamond, "equal", too: now grey, and the legend
    # says "no value (NaN)" even where every theory cell has one.
    from matplotlib.colors import to_hex

    spots = np.array([(100, 5, np.nan), (100, 1, 0.0), (10, 1, 0.01), (10, 5, -0.01)])
    fig = plots.comparison_map([10, 100], [1, 5], np.zeros((2, 2)), 0.0015, title="t", experiment_points=spots)
    ax = fig.axes[0]
    (diamonds,) = [c for c in ax.collections if len(c.get_offsets()) == len(spots)]
    assert [to_hex(c) for c in diamonds.get_facecolors()] == ["#999999", "#ffffff", "#d62728", "#1f77b4"]
    assert "no value (NaN)" in [t.get_text() for t in ax.get_legend().get_texts()]
    M = np.array([[1e-9, 1e-2], [1e-3, 1e-1]])
    fig = plots.metric_contour([10, 100], [1, 5], M, title="t")
    assert fig.axes[1].get_ylabel() == r"$\log_{10} M$ (below -6.0 drawn as -6.0)"
    fig = plots.metric_contour([10, 100], [1, 5], M * 0 + 0.1, title="t", log=False)
    assert fig.axes[1].get_ylabel() == "$M$"


def test_fig2e_draws_a_spot_check_without_a_value_grey():
    """Fig. 2e's maker dropped a pER spot check whose every seed diverged (ΔM NaN) before comparison_map, which
    draws it grey and says so in its legend: the diamond vanished without a word (found by a probe)."""
    import types

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.colors import to_hex

    from jaxreplay.paper.reproduce.linesearch import figures

    spots = [(100, 10, 0.01, 0.01), (250, 10, float("nan"), 0.01), (500, 5, -0.01, 0.0)]
    stages = types.SimpleNamespace(grid_memory=np.array([50, 100, 250, 500]), grid_batch=np.array([5, 10, 20]),
                                   delta_metric=np.full((4, 3), 0.01), per_spot_checks=spots)
    ax = figures.FIGURE_MAKERS["fig2e_er_vs_per_map.png"](stages).axes[0]
    (diamonds,) = [c for c in ax.collections if len(getattr(c, "get_offsets", lambda: [])()) == len(spots)]
    np.testing.assert_array_equal(diamonds.get_offsets(), [[100, 10], [250, 10], [500, 5]])
    assert [to_hex(c) for c in diamonds.get_facecolors()] == ["#d62728", "#999999", "#1f77b4"]
    assert "no value (NaN)" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_the_optimal_memory_band_the_boundary_text_and_fig2e_stop_where_the_numbers_do():
    """Found by a probe: Fig. A2b drew one optimal N per K where every larger N ties (the rising branch is the
    smallest of a band); the boundary claim printed M* = 0.3 vs M(N_max) = 0.26 for 0.2555 vs 0.2593 (one digit
    against two); Fig. 2e painted classes half a cell beyond its grid (N from -35 on the tiny grid)."""
    import matplotlib

    matplotlib.use("Agg")
    from jaxreplay.paper import plots
    from jaxreplay.paper.reproduce.linesearch import claims

    memory, targets = np.array([1.0, 11.0, 21.0, 31.0]), np.array([0.25, 0.5, 2.0])
    steps = np.array([[9.0, 5.0, 5.0, 5.0], [40.0, 30.0, 20.0, 20.0], [3.0, 7.0, 8.0, np.nan]])  # [K, N]
    smallest, largest = rl.optimal_memory(memory, steps.T), rl.optimal_memory(memory, steps.T, largest=True)
    np.testing.assert_array_equal(smallest, [11, 21, 1])
    np.testing.assert_array_equal(largest, [31, 31, 1])
    ax = plots.optimal_memory_vs_target(targets, smallest, largest=largest, title="t").axes[0]
    band = ax.collections[0].get_paths()[0].vertices
    assert {tuple(v) for v in band} >= {(0.25, 11.0), (0.25, 31.0), (0.5, 21.0), (0.5, 31.0), (2.0, 1.0)}
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["smallest optimal N", "every N in the band ties"]
    assert claims._apart(0.25545704547617376, 0.25933483904068727) == ("0.255", "0.259")
    assert claims._apart(0.5, 0.25) == ("0.5", "0.25") and claims._apart(1.0, 1.0) == ("1", "1")
    ax = plots.comparison_map([10, 500, 1000], [1, 20, 40], np.zeros((3, 3)), 0.0015, title="t").axes[0]
    assert ax.get_xlim() == (10, 1000) and ax.get_ylim() == (1, 40)


def test_the_numerics_and_the_figures_refuse_a_grid_that_is_not_increasing():
    """They read a grid's first and last values as its smallest and largest and draw it as given: a permuted N made
    a decreasing M(N) "non-monotone", the "smallest" optimum larger than the "largest", the m-threshold NaN, a
    zigzag line, a folded contour and Fig. 2e's cells elsewhere, without a word (found by a probe)."""
    import matplotlib

    matplotlib.use("Agg")
    from jaxreplay.paper import plots

    permuted, m = [100.0, 10.0, 50.0, 20.0], [1.0, 5.0]
    metric = np.ones((4, 2))
    with pytest.raises(ValueError, match=r"^memory_sizes must be a strictly increasing 1-D array"):
        rl.optimal_memory(permuted, metric)
    with pytest.raises(ValueError, match=r"^batch_sizes must be a strictly increasing 1-D array"):
        rl.monotone_threshold([1.0, 5.0, 5.0], np.ones((4, 3)))
    figures = {
        "steps_vs_memory('t'): memory_sizes": lambda: plots.steps_vs_memory(permuted, {"K = 1": np.ones(4)}, title="t"),
        "metric_vs_memory('t'): memory_sizes": lambda: plots.metric_vs_memory(permuted, {"m = 1": np.ones(4)},
                                                                              title="t"),
        "metric_contour('t'): memory_sizes": lambda: plots.metric_contour(permuted, m, metric, title="t"),
        "difference_contour('t'): batch_sizes": lambda: plots.difference_contour(sorted(permuted), m[::-1], metric,
                                                                                 title="t"),
        "comparison_map('t'): memory_sizes": lambda: plots.comparison_map(permuted, m, metric, 0.1, title="t"),
    }
    for name, draw in figures.items():
        with pytest.raises(ValueError, match=re.escape(name) + " must be a strictly increasing"):
            draw()
    # A curve with its cusps merged may repeat an N (a cusp at a grid point): allowed, as a line it is no zigzag.
    plots.metric_vs_memory([10.0, 20.0], {"m = 1": (np.array([10.0, 15.0, 15.0, 20.0]), np.ones(4))}, title="t")
    # Sorted, the answers (the smallest optimal N on the first of a tie, a decreasing M(N) monotone).
    assert rl.optimal_memory(sorted(permuted), np.array([4.0, 1.0, 1.0, 2.0])) == 20
    assert rl.monotone_threshold(m, np.array([[3.0, 3.0], [2.0, 2.0], [2.5, 1.0], [1.0, 0.5]]))["threshold"] == 5.0


def test_figure_helpers_refuse_experiment_curves_they_would_not_draw():
    """An experiment curve under a label the theory lacks ("m=1" beside "m = 1") was left out of the figure
    without a word; a learning curve without its times failed with "tuple index out of range" (probe minatar)."""
    import matplotlib

    matplotlib.use("Agg")
    from jaxreplay.paper import plots

    N, t = np.array([10, 100, 1000]), np.arange(100.0)
    with pytest.raises(ValueError, match=r"^metric_vs_memory\('t'\): experiment_metrics has labels the theory does "
                                         r"not: \['m=1'\] \(the theory's: \['m = 1'\]\)"):
        plots.metric_vs_memory(N, {"m = 1": np.ones(3)}, N, {"m=1": np.ones(3)}, title="t")
    with pytest.raises(ValueError, match=r"^compare_learning_curves\('t'\): experiment has labels .*\['pER'\]"):
        plots.compare_learning_curves(t, {"ER": np.zeros((100, 2))}, t, {"pER": np.ones((100, 2))}, title="t")
    with pytest.raises(ValueError, match=r"^learning_curves\('t'\): t_experiment is needed with dtheta_experiment"):
        plots.learning_curves(t, np.zeros((100, 2)), None, np.zeros((100, 2)), title="t")
    with pytest.raises(ValueError, match=r"^metric_vs_memory\('t'\): experiment_memory_sizes is needed"):
        plots.metric_vs_memory(N, {"m = 1": np.ones(3)}, None, {"m = 1": np.ones(3)}, title="t")
    fig = plots.metric_vs_memory(N, {"m = 1": np.ones(3), "m = 5": np.ones(3)}, N, {"m = 5": 2 * np.ones(3)}, title="t")
    assert [line.get_label() for line in fig.axes[0].lines] == ["m = 1 (theory)", "m = 5 (theory)", "m = 5 (experiment)"]
    fig = plots.compare_learning_curves(t, {"ER": np.zeros((100, 2))}, t, {"ER": np.ones((100, 2))}, title="t")
    assert len(fig.axes[0].lines) == 4 + 1  # two theory lines, two marker lines, the zero line


def test_figure_helpers_leave_an_infinite_value_blank_and_say_a_never_reached_target():
    """metric_contour with an inf M (a diverged solve) raised "lower_level and upper_level cannot be NaN",
    difference_contour's levels went NaN, and steps_vs_memory with a K no size reaches raised "All-NaN slice
    encountered", none naming the quantity (found by a probe)."""
    import matplotlib

    matplotlib.use("Agg")
    from jaxreplay.paper import plots

    M = np.array([[1e-2, 2e-2], [np.inf, 3e-3]])
    fig = plots.metric_contour([10, 100], [1, 5], M, title="t")
    np.testing.assert_allclose(fig.axes[1].get_ylim(), (np.log10(3e-3), np.log10(2e-2)))  # the finite values' range
    fig = plots.difference_contour([10, 100], [1, 5], np.array([[0.5, -1.0], [np.inf, 0.0]]), title="t")
    np.testing.assert_allclose(fig.axes[1].get_ylim(), (-1.0, 1.0))
    with pytest.raises(ValueError, match=r"metric_contour\('t'\): metric has no finite value to draw"):
        plots.metric_contour([10, 100], [1, 5], np.full((2, 2), np.inf), title="t")
    with pytest.raises(ValueError, match=r"difference_contour\('t'\): difference has no finite value to draw"):
        plots.difference_contour([10, 100], [1, 5], np.full((2, 2), np.nan), title="t")
    # One finite value, a constant M, or one below the 1e-12 floor: a band around it ("levels must be increasing").
    for M, log, band in ((np.full((2, 2), 0.1), True, (-1.5, -0.5)), (np.full((2, 2), 0.1), False, (-0.4, 0.6)),
                         (np.full((2, 2), 1e-15), True, (-12.5, -11.5)),
                         (np.array([[np.nan, np.nan], [np.nan, 0.1]]), True, (-1.5, -0.5)),
                         (np.array([[1.0, 1.0], [1.0, 1.0 + 1e-15]]), False, (0.5, 1.5)),  # within rounding
                         (np.array([[100.0, 100.0], [100.0, 100.0 * (1 + 1e-14)]]), True, (1.5, 2.5))):
        fig = plots.metric_contour([10, 100], [1, 5], M, title="t", log=log)
        np.testing.assert_allclose(fig.axes[1].get_ylim(), band)
    sizes = np.array([10.0, 100.0, 1000.0])
    fig = plots.steps_vs_memory(sizes, {"K = 5": np.array([30.0, 20.0, np.inf]), "K = 50": np.full(3, np.nan)}, title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["K = 5", "K = 50 (never reached)"]
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert len(stars) == 1 and stars[0].get_xdata().tolist() == [100.0]  # K = 5's optimum; none for K = 50
