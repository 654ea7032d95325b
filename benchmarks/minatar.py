"""MinAtar DQN throughput (Breakout-MinAtar): seeds vmapped in one program vs the same runs one after another.

The run is :func:`jaxreplay.paper.reproduce.settings.minatar_setting`'s DQN
(Young & Tian 2019: the 3×3 convolution of 16 filters and a 128-unit layer,
minibatch 32, one gradient step per environment step, uniform replay,
bit-packed observations), shortened to the mode's steps, with the greedy
evaluation off (it plays no training steps).

* **vmapped**: :func:`jaxreplay.engine.sweep.run` over 1 and 100 seeds (and
  1,000 where JAX's backend is an accelerator), each one compiled program;
  aggregate env steps/s = seeds × steps ÷ run time (compile excluded).
* **in sequence**: the same run jitted for one seed and called seed after
  seed; a few seeds are timed and the rate scaled (its cost is linear in the
  number of seeds), so the sequential rate is one seed's, whatever the count.
* **published peer figure** (accelerators only, not measured here): rejax's
  DQN on Breakout-MinAtar took 12 min 19.3 s *per agent* for 10⁶ steps with
  50 agents vmapped (its README's speedup plot, on the A100 the issue cites),
  about 1.35×10³ env steps/s in aggregate (:data:`REJAX_STEPS_PER_S`). Its
  network and update schedule are rejax's own, not this preset's: the row is
  a scale, not a like-for-like race. Goal: our 1,000-seed aggregate ≥ 50× it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

import jax

from benchmarks import _timing
from benchmarks import dqn as dqn_bench

TITLE = "MinAtar DQN (Breakout-MinAtar): seeds vmapped vs in sequence"

ENV = "Breakout-MinAtar"
MODES = {
    # CPU sizes stay small (the conv network's updates dominate: ~10³ env steps/s in all on 2 cores).
    "quick": dict(steps=200, sequential=2, seeds=(1, 100), accelerator_steps=10_000),
    "full": dict(steps=1_000, sequential=3, seeds=(1, 100), accelerator_steps=50_000),
}
ACCELERATOR_SEEDS = 1_000
"""The seed count added where the backend is an accelerator."""
REJAX_STEPS_PER_S = 50 * 1_000_000 / (50 * (12 * 60 + 19.3))
"""rejax's published DQN on Breakout-MinAtar: 50 agents × 10⁶ steps at 12 min 19.3 s per agent, the time of
the 50 vmapped agents amortised over them (~1.35×10³ env steps/s in aggregate). Not measured here. Read until
2026-11-30 as the 50 agents' wall time (6.9×10⁴, 51× too many): the plot's own speedup over cleanRL, 1.67× at
50 agents (cleanRL's 20 min 34 s ÷ 12 min 19 s), and its PPO panel (0.2 s per agent at 300 agents) are per
agent (a review)."""
GOAL = 50.0
"""Our 1,000-seed aggregate over :data:`REJAX_STEPS_PER_S`."""
HEADLINES: list[list[str]] = []  # filled by run(): the summary rows of `python -m benchmarks`


def _setup(steps: int, segments: int = 1, env: str = ENV):
    """``minatar_setting(env)`` cut to ``steps`` steps in ``segments`` segments, its memory the whole run,
    evaluation off (it plays no training steps); also the roofline's MinAtar step."""
    from jaxreplay.paper.reproduce.settings import minatar_setting

    setup, hparams = minatar_setting(env, memory_size=steps, total_steps=steps, segments=segments)
    return dataclasses.replace(setup, eval_episodes=0), hparams


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    _timing.disable_compilation_cache()
    mode = MODES[mode_name]
    backend = jax.default_backend()
    on_accelerator = backend != "cpu"
    steps = mode["accelerator_steps"] if on_accelerator else mode["steps"]
    counts = mode["seeds"] + ((ACCELERATOR_SEEDS,) if on_accelerator else ())
    rows = []
    for seeds in counts:
        progress(f"  vmapped: {seeds:,} seed(s) × {steps:,} steps, one program")
        rows.append(dqn_bench.engine_run(*_setup(steps), seeds))
    progress(f"  in sequence: 1 seed at a time, {mode['sequential']} timed")
    sequential = dqn_bench.sequential_runs(*_setup(steps), mode["sequential"])
    return _report(mode_name, backend, steps, rows, sequential)


def _rate(d: dict) -> float:
    return d["env_steps"] / d["seconds"]


def _report(mode_name: str, backend: str, steps: int, rows: list[dict], sequential: dict) -> str:
    """The section: one table row per seed count against the same seeds in sequence (one seed's rate), and on an
    accelerator the peer row and our largest count ÷ it; fills :data:`HEADLINES`."""
    one_seed = _rate(sequential)
    table = []
    HEADLINES[:] = []
    for r in rows:
        rate = _rate(r)
        table.append(
            [
                f"{r['seeds']:,}",
                f"{r['chunk']:,}",
                f"{rate:,.0f}",
                f"{r['seconds']:.2f} s",
                f"{r['env_steps'] / one_seed:.2f} s",
                f"**{rate / one_seed:.1f}×**",
                f"{r['compile_s']:.1f} s",
            ]
        )
        if r["seeds"] >= 100:
            HEADLINES.append(
                [
                    f"MinAtar DQN ({ENV}), {r['seeds']:,} seeds vmapped vs in sequence (aggregate env steps/s)",
                    f"{rate / one_seed:.1f}×",
                    "–",
                ]
            )
    table.append(
        [
            f"1 at a time ({sequential['seeds']} timed)",
            "1",
            f"{one_seed:,.0f}",
            f"{sequential['seconds']:.2f} s",
            "–",
            "1×",
            f"{sequential['compile_s']:.1f} s",
        ]
    )
    text = [
        f"{ENV}, `minatar_setting` (conv network, minibatch 32, one update per env step, uniform replay), "
        f"{steps:,} steps per seed, evaluation off; backend `{backend}`, mode `{mode_name}`. Rates are aggregate "
        "over seeds, compile excluded; *in sequence* is the time the same seeds take one after another at the "
        "one-seed rate measured below. A vmapped row is the engine's first call after compiling (its "
        "first-execution cost included: 0.5-0.8 s on a 2-core CPU) and computes its chunk (a lone seed runs "
        "in a chunk of 2), the runs in sequence are timed after a warm-up call: both understate the vmapped "
        "side, most at few seeds.",
        _timing.markdown_table(
            ["seeds", "chunk", "env steps/s", "run time", "in sequence", "÷ in sequence", "compile"], table
        ),
    ]
    largest = max(rows, key=lambda r: r["seeds"])
    if backend != "cpu" and largest["seeds"] >= ACCELERATOR_SEEDS:
        ratio = _rate(largest) / REJAX_STEPS_PER_S
        peer = _timing.markdown_table(
            ["", "env steps/s (aggregate)", "÷ rejax"],
            [
                [f"ours, {largest['seeds']:,} seeds (measured)", f"{_rate(largest):,.0f}", f"**{ratio:.1f}×**"],
                [
                    "rejax DQN, 50 agents on one A100, 12 min 19 s per agent (**published figure**, not measured here)",
                    f"{REJAX_STEPS_PER_S:,.0f}",
                    "1×",
                ],
            ],
        )
        text += [peer, f"Goal: ≥ {GOAL:.0f}× the published rejax aggregate; measured {ratio:.1f}×."]
        HEADLINES.append(
            [
                f"MinAtar DQN ({ENV}), {largest['seeds']:,} seeds ÷ rejax's published aggregate (50 agents, A100)",
                f"{ratio:.1f}×",
                f"≥ {GOAL:.0f}×",
            ]
        )
    else:
        text.append("No accelerator: the 1,000-seed row and the published rejax figure (an A100's) are GPU-only.")
    return "\n\n".join(text)


if __name__ == "__main__":
    print(run(sys.argv[1] if len(sys.argv) > 1 else "quick"))
