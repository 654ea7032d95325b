"""The MinAtar benchmark's report, on made-up measurements (no timing here: performance is measured in
benchmarks/, never in tests)."""

import pathlib
import sys

_ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks import BENCHMARKS, minatar  # noqa: E402


def rows(counts, rate_per_seed):
    """Runs of 100 steps per seed at ``rate_per_seed[i]`` env steps/s per seed."""
    return [
        dict(seeds=s, seconds=100 / r, compile_s=2.0, chunk=s, env_steps=s * 100) for s, r in zip(counts, rate_per_seed)
    ]


SEQUENTIAL = dict(seeds=2, seconds=2.0, compile_s=3.0, env_steps=200)  # 100 env steps/s, one seed at a time


def test_cpu_report_compares_each_seed_count_with_the_same_seeds_in_sequence():
    text = minatar._report("quick", "cpu", 100, rows((1, 100), (100.0, 30.0)), SEQUENTIAL)
    # 100 seeds at 30 steps/s each: 3,000 env steps/s, 30× one seed at a time; in sequence they take 100 s.
    assert "| 100 | 100 | 3,000 | 3.33 s | 100.00 s | **30.0×** | 2.0 s |" in text
    assert "| 1 | 1 | 100 | 1.00 s | 1.00 s | **1.0×** | 2.0 s |" in text
    assert "| 1 at a time (2 timed) | 1 | 100 | 2.00 s | – | 1× | 3.0 s |" in text
    assert "published figure" not in text and "GPU-only" in text
    assert minatar.HEADLINES == [
        ["MinAtar DQN (Breakout-MinAtar), 100 seeds vmapped vs in sequence (aggregate env steps/s)", "30.0×", "–"]
    ]


def test_gpu_report_sets_the_1000_seed_aggregate_beside_rejax_published_figure():
    # 1,000 seeds at 4,000 env steps/s each: 4e6 in aggregate, 2957.2× rejax's 50 × 10^6 steps in 50 × 739.3 s
    # (12 min 19.3 s per agent; it was read as the 50 agents' wall time, 51× too fast: a review).
    text = minatar._report("quick", "gpu", 100, rows((1, 100, 1000), (100.0, 3000.0, 4000.0)), SEQUENTIAL)
    assert round(minatar.REJAX_STEPS_PER_S) == 1_353
    assert "| ours, 1,000 seeds (measured) | 4,000,000 | **2957.2×** |" in text
    assert ("| rejax DQN, 50 agents on one A100, 12 min 19 s per agent (**published figure**, not measured here) "
            "| 1,353 | 1× |") in text
    assert "Goal: ≥ 50× the published rejax aggregate; measured 2957.2×." in text
    assert minatar.HEADLINES[-1][1:] == ["2957.2×", "≥ 50×"]
    assert [h[1] for h in minatar.HEADLINES[:-1]] == ["3000.0×", "40000.0×"]


def test_the_benchmark_is_registered_and_run_on_a_gpu_with_the_others():
    assert BENCHMARKS["minatar"] == "benchmarks.minatar"
    script = (pathlib.Path(_ROOT) / "benchmarks" / "run_on_gpu.sh").read_text()
    # run_on_gpu.sh runs every registered benchmark (no --only list of its own) and names MinAtar.
    assert 'python3 -m benchmarks --quick "$@"' in script and "MinAtar" in script
