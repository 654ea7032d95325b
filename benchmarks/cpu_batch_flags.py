"""XLA:CPU batch-independence flags: their speed cost, and whether they make results batch-independent.

docs/design.md §5 records the XLA:CPU causes of a run's result depending on
how many runs share its program, and two flags that removed them on the CPUs
measured: ``--xla_cpu_max_isa=SSE4_2`` (no fused multiply-adds) and
``--xla_cpu_experimental_ynn_fusion_type=`` (:data:`FLAGS`, the engine's
``BATCH_INDEPENDENCE_FLAGS``). XLA reads
``XLA_FLAGS`` once per process, so each variant runs in its own child process
(``python -m benchmarks.cpu_batch_flags --child MODE``), and the variants
alternate (default, flags, default, flags, ...) so that both see the same load
of a shared machine; each cell is the median over its children.

Each child times one segment-sized call of the same programs as
:mod:`benchmarks.roofline`: the DQN CartPole step at 1, 10 and 100 seeds and
the LineSearch ER sweep kernel (µs per step of the whole batch; env steps/s
for DQN), and digests their outputs. Whether the *results* depend on the batch
is a separate question, answered by comparing whole sweeps at several chunk
sizes (``benchmarks/README.md``, "XLA:CPU batch-independence flags").
CPU only: on another backend the section says so and runs nothing.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable

import jax

from benchmarks import _timing
from jaxreplay.engine.batch import BATCH_INDEPENDENCE_FLAGS

TITLE = "XLA:CPU batch-independence flags (speed cost)"

FLAGS = " ".join(BATCH_INDEPENDENCE_FLAGS)
VARIANTS = {"XLA's default": "", "batch-independence flags": FLAGS}
MODES = {
    "quick": dict(dqn_seeds=(1, 10, 100), dqn_steps=250, linesearch_runs=1_000, repeats=3, rounds=2),
    "full": dict(dqn_seeds=(1, 10, 100), dqn_steps=1_000, linesearch_runs=10_000, repeats=5, rounds=3),
}
HEADLINES: list[list[str]] = []


def child(mode_name: str) -> dict:
    """In the child process: µs per step of each workload (and what one step is)."""
    from benchmarks import roofline

    mode = MODES[mode_name]
    builds: dict[str, Callable] = {
        f"DQN CartPole step, {s} seed(s)": (lambda s=s: roofline._dqn(s, mode["dqn_steps"])) for s in mode["dqn_seeds"]
    }
    builds[f"LineSearch ER kernel, {mode['linesearch_runs']:,} runs"] = lambda: roofline._linesearch(
        mode["linesearch_runs"]
    )
    out = {}
    for name, build in builds.items():
        fn, carry, steps, *_ = build()
        # With the engine's options, as the roofline compiles them: without, the "without" side also lacked the
        # engine's own YNNPACK setting, half of the flags measured (a review of the benchmarks).
        program = _timing.compile_program(fn, carry, compiler_options=getattr(fn, "compiler_options", None))
        (timing,) = _timing.time_interleaved([program], repeats=mode["repeats"], min_repeats=1)
        out[name] = dict(step_us=timing.median_s / steps * 1e6, compile_s=program.compile_s)
    return out


def _run_child(mode_name: str, flags: str) -> dict | str:
    return _timing.run_child_with_xla_flags("benchmarks.cpu_batch_flags", mode_name, flags, timeout=1200)


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    HEADLINES[:] = []
    if jax.default_backend() != "cpu":
        return f"Backend `{jax.default_backend()}`: these are XLA:CPU flags; nothing to measure here."
    results: dict[str, list[dict | str]] = {name: [] for name in VARIANTS}
    for r in range(MODES[mode_name]["rounds"]):
        for name, flags in VARIANTS.items():
            progress(f"  round {r + 1}: {name}")
            results[name].append(_run_child(mode_name, flags))
    return _report(mode_name, results)


def _report(mode_name: str, results: dict[str, list[dict | str]]) -> str:
    medians = {}
    for name, runs in results.items():
        good = [r for r in runs if isinstance(r, dict)]
        if not good:
            return f"{name} failed: {runs[0]}"
        medians[name] = {w: statistics.median(r[w]["step_us"] for r in good) for w in good[0]}
    base, flagged = medians["XLA's default"], medians["batch-independence flags"]
    rows = []
    for w in base:
        ratio = flagged[w] / base[w]
        rows.append([w, f"{base[w]:.3g} µs", f"{flagged[w]:.3g} µs", f"{ratio:.2f}×"])
        HEADLINES.append([f"{w}: time per step with the batch-independence flags ÷ without", f"{ratio:.2f}×", "–"])
    rounds = MODES[mode_name]["rounds"]
    return "\n\n".join(
        [
            f"Mode `{mode_name}`; `XLA_FLAGS={FLAGS}` vs none, each in its own process, alternating, "
            f"{rounds} processes per variant (median).",
            _timing.markdown_table(
                ["workload", "per step, default", "per step, with the flags", "flags ÷ default (> 1: slower)"], rows
            ),
        ]
    )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
    else:
        print(run(sys.argv[1] if len(sys.argv) > 1 else "quick"))
