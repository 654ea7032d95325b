"""XLA:GPU command buffers (CUDA graphs) on the launch-bound steps: one process per flag set, side by side.

The roofline shows the small-batch steps bound by kernel launches and by the
host round trip of every loop iteration and conditional. XLA:GPU can record a
step's kernels into a command buffer (a CUDA graph) and, with ``WHILE`` and
``CONDITIONAL`` commands, keep the loop's control on the device. Which
commands it records is the ``--xla_gpu_enable_command_buffer`` flag, read
once per process, so each variant of :data:`VARIANTS` runs in its own child
process (``python -m benchmarks.xla_flags --child``) with that flag appended
to ``XLA_FLAGS``. Each child times one segment-sized call of two programs:
the LineSearch ER sweep kernel (10⁴ runs) and the DQN CartPole step (1,000
seeds), the same programs as :mod:`benchmarks.roofline`, and hashes their
outputs, so the table says whether a flag changes results as well as speed.
A flag XLA rejects is reported as such (the child exits with XLA's message).
GPU only: on another backend the section says so and runs nothing.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable

import jax
import numpy as np

from benchmarks import _timing

TITLE = "XLA:GPU command buffers (CUDA graphs) for the launch-bound steps"

FLAG = "--xla_gpu_enable_command_buffer"
VARIANTS = {
    "XLA's default": "",
    "no command buffers": f"{FLAG}=",
    "default + WHILE": f"{FLAG}=+WHILE",
    "default + WHILE, graphs from 1 op": f"{FLAG}=+WHILE --xla_gpu_graph_min_graph_size=1",
}
MODES = {"quick": dict(linesearch_runs=10_000, dqn_seeds=1_000, dqn_steps=250, repeats=3),
         "full": dict(linesearch_runs=10_000, dqn_seeds=1_000, dqn_steps=1_000, repeats=5)}
HEADLINES: list[list[str]] = []


def _digest(tree) -> str:
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        h.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return h.hexdigest()[:12]


def child(mode_name: str) -> dict:
    """In the child process: µs per step and an output digest of each workload."""
    from benchmarks import roofline

    mode = MODES[mode_name]
    builds = {"LineSearch ER kernel": lambda: roofline._linesearch(mode["linesearch_runs"]),
              "DQN CartPole step": lambda: roofline._dqn(mode["dqn_seeds"], mode["dqn_steps"])}
    out = {}
    for name, build in builds.items():
        fn, carry, steps, *_, what = build()
        program = _timing.compile_program(fn, carry)
        (timing,) = _timing.time_interleaved([program], repeats=mode["repeats"], min_repeats=1)
        fn, carry, *_ = build()  # a fresh carry (the timed calls donated theirs): one call for the digest
        out[name] = dict(what=what, step_us=timing.median_s / steps * 1e6, compile_s=program.compile_s,
                         digest=_digest(jax.jit(fn)(carry)[2]))
    return out


def _run_child(mode_name: str, flags: str) -> dict | str:
    return _timing.run_child_with_xla_flags("benchmarks.xla_flags", mode_name, flags, timeout=600)


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    HEADLINES[:] = []
    if jax.default_backend() != "gpu":
        return f"Backend `{jax.default_backend()}`: these are XLA:GPU flags; nothing to measure here."
    results = {}
    for name, flags in VARIANTS.items():
        progress(f"  {name}: XLA_FLAGS += {flags!r}")
        results[name] = _run_child(mode_name, flags)
    return _report(mode_name, results)


def _report(mode_name: str, results: dict) -> str:
    base = results["XLA's default"]
    workloads = list(base) if isinstance(base, dict) else []
    rows = []
    for name, result in results.items():
        if isinstance(result, str):
            rows.append([name, f"`{VARIANTS[name]}`", result] + [""] * (2 * len(workloads) - 1))
            continue
        cells = []
        for w in workloads:
            r = result[w]
            ratio = base[w]["step_us"] / r["step_us"]
            same = "same outputs" if r["digest"] == base[w]["digest"] else "**outputs differ**"
            cells += [f"{r['step_us']:.3g} µs ({ratio:.2f}×)", same]
        rows.append([name, f"`{VARIANTS[name]}`" if VARIANTS[name] else "–", *cells])
    header = ["variant", "XLA_FLAGS added"]
    for w in workloads:
        header += [f"{w} ({base[w]['what']}): per step (speed-up)", "vs default"]
    measured = {n: r for n, r in results.items() if isinstance(r, dict)}
    for w in workloads:
        best = min(measured, key=lambda n: measured[n][w]["step_us"])
        HEADLINES.append([f"{w}: best command-buffer variant ({best}) ÷ XLA's default, per step",
                          f"{base[w]['step_us'] / measured[best][w]['step_us']:.2f}×", "–"])
    return "\n\n".join([f"Mode `{mode_name}`; each variant in its own process, one after another.",
                        _timing.markdown_table(header, rows) if workloads else f"XLA's default failed: {base}"])


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
    else:
        print(run(sys.argv[1] if len(sys.argv) > 1 else "quick"))
