"""The cost of DQN's n-step targets and of traced replay ratios, mixed in one program vs grouped by bound.

* **n-step**: one DQN segment (CartPole-v1, uniform replay, one update per
  step) vmapped over seeds, at ``max_n_step`` = 1, 3 and 10 with ``n_step``
  at its bound. Each update gathers ``batch_size × max_n_step`` rewards and
  flags (``jaxreplay.returns.n_step``), whatever the traced n; at 1 the
  program is the plain 1-step one.
* **replay ratios 0.25, 1 and 4**: the runs of the three ratios (a third of
  the seeds each) in *one* program, whose ``max_updates_per_unit`` is 4: every
  run pays for 4 masked update slots per step; against the same runs
  *grouped* into programs by the slots they need (0.25 and 1: one slot, 4:
  four), as the sweep engine runs them by default (``group_by_setup``;
  ``[run] group_by_setup = false`` is the mixed program). Reported: each program's time per segment
  and the grouped programs' sum, with the gradient updates made per second.
* **through the sweep engine**: the same 30 runs as one sweep (a grid over
  the three ratios, ``max_updates_per_unit = 4``), run by
  :func:`jaxreplay.engine.sweep.run` grouped (the default: two programs,
  chunked apart) and with ``group_by_setup=False`` (one program), alternating,
  ``repeats`` rounds after a first one that compiles; the median run time of
  each (compile excluded, the engine's own ``run_seconds``).

Compile time is reported apart; timings interleave the programs
(:func:`benchmarks._timing.time_interleaved`). Not a target, a measurement:
how much a sweep over n or ratios in one program costs.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

import jax
import numpy as np

from benchmarks import _timing

TITLE = "DQN: the cost of n-step targets (n = 1, 3, 10) and of replay ratios 0.25, 1, 4 mixed vs grouped"

MODES = {
    # "smoke": tiny sizes to check that the benchmark runs (not a measurement).
    "smoke": dict(seeds=6, steps=40, capacity=64, repeats=1),
    "quick": dict(seeds=30, steps=1_000, capacity=1_000, repeats=3),
    "full": dict(seeds=99, steps=2_000, capacity=10_000, repeats=5),
}
N_STEPS = (1, 3, 10)
RATIOS = (0.25, 1.0, 4.0)


def _setup(mode: dict, **fields):
    from jaxreplay.experiments import dqn

    return dqn.Setup(
        env_id="CartPole-v1",
        total_steps=mode["steps"],
        steps_per_segment=mode["steps"],
        hidden_sizes=(64,),
        max_capacity=mode["capacity"],
        batch_size=50,
        **fields,
    )


def _program(setup, hparams, seeds: int) -> _timing.Program:
    """A compiled ``(states, hparams) -> (states, hparams)``: one segment of ``seeds`` runs."""
    from jaxreplay.experiments import dqn

    hparams = dqn.broadcast_hyperparameters(hparams, seeds)
    keys = jax.random.split(jax.random.key(0), seeds)
    states = jax.vmap(dqn.init, in_axes=(0, 0, None))(keys, hparams, setup)

    def segment(carry):
        states, hp = carry
        states, _ = jax.vmap(dqn.advance, in_axes=(0, 0, None))(states, hp, setup)
        return states, hp

    # Not donated: a fresh state shares leaves (the target network is the online one).
    return _timing.compile_program(segment, (states, jax.tree.map(jax.numpy.asarray, hparams)), donate=False)


def _updates(program: _timing.Program) -> int:
    return int(np.sum(np.asarray(program.carry[0].gradient_steps)))


def _engine(mode: dict, base, per_ratio: int) -> dict:
    """Median run seconds of the ratio sweep through the engine, grouped and mixed, and their compile seconds."""
    import statistics

    from jaxreplay.engine import sweep as sw

    setup = dataclasses.asdict(_setup(mode, max_updates_per_unit=4))
    sweep = sw.Sweep("dqn", seeds=per_ratio, setup=setup, grid={"replay_ratio": list(RATIOS)},
                     fixed={k: getattr(base, k) for k in ("memory_size", "learning_starts", "target_period")})
    seconds: dict[bool, list[float]] = {True: [], False: []}
    compile_s = {}
    for round_ in range(1 + mode["repeats"]):
        for grouped in (True, False):
            stats = sw.run(sweep, None, progress=False, group_by_setup=grouped).stats
            if round_ == 0:
                compile_s[grouped] = stats.compile_seconds
            else:
                seconds[grouped].append(stats.run_seconds)
    return {grouped: (statistics.median(times), compile_s[grouped]) for grouped, times in seconds.items()}


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    from jaxreplay.experiments import dqn

    _timing.disable_compilation_cache()
    mode = MODES[mode_name]
    seeds, repeats = mode["seeds"], mode["repeats"]
    base = dqn.Hyperparameters(memory_size=mode["capacity"], learning_starts=0, target_period=500)

    progress(f"  n-step: max_n_step {N_STEPS}, {seeds} seeds × {mode['steps']} steps")
    n_programs = [_program(_setup(mode, max_n_step=n), base._replace(n_step=n), seeds) for n in N_STEPS]
    n_timings = _timing.time_interleaved(n_programs, repeats=repeats, min_repeats=repeats)
    rows = []
    for n, timing in zip(N_STEPS, n_timings):
        per_step = timing.median_s / mode["steps"]
        rows.append([str(n), f"{timing.compile_s:.1f} s", f"{timing.median_s * 1e3:.1f} ms",
                     _timing.format_rate(seeds / per_step), f"{timing.median_s / n_timings[0].median_s:.2f}×"])
    n_table = _timing.markdown_table(["max_n_step = n", "compile", "segment", "env steps/s", "vs n = 1"], rows)

    per_ratio = seeds // len(RATIOS)
    ratios = np.repeat(np.asarray(RATIOS, np.float32), per_ratio)
    progress(f"  replay ratios {RATIOS}: {per_ratio} seeds each, one program vs grouped by update slots")
    mixed = _program(_setup(mode, max_updates_per_unit=4), base._replace(replay_ratio=ratios), len(ratios))
    grouped = [
        _program(_setup(mode, max_updates_per_unit=1), base._replace(replay_ratio=ratios[ratios <= 1]),
                 int(np.sum(ratios <= 1))),
        _program(_setup(mode, max_updates_per_unit=4), base._replace(replay_ratio=ratios[ratios > 1]),
                 int(np.sum(ratios > 1))),
    ]
    timings = _timing.time_interleaved([mixed, *grouped], repeats=repeats, min_repeats=repeats)
    mixed_s, grouped_s = timings[0].median_s, sum(t.median_s for t in timings[1:])
    updates = _updates(mixed) / (1 + repeats)  # per segment call (the warm-up and the timed repeats)
    rows = [
        ["mixed (one program, 4 slots)", f"{timings[0].compile_s:.1f} s", f"{mixed_s * 1e3:.1f} ms",
         _timing.format_rate(updates / mixed_s)],
        ["grouped (1 slot: 0.25 and 1; 4 slots: 4)", f"{sum(t.compile_s for t in timings[1:]):.1f} s",
         f"{grouped_s * 1e3:.1f} ms", _timing.format_rate(updates / grouped_s)],
    ]
    ratio_table = _timing.markdown_table(["programs", "compile", "segment", "gradient updates/s"], rows)
    progress(f"  the same runs through the sweep engine, grouped and group_by_setup=False, {repeats} rounds")
    engine = _engine(mode, base, per_ratio)
    rows = [[label, f"{engine[grouped][1]:.1f} s", f"{engine[grouped][0]:.2f} s"]
            for label, grouped in (("grouped (default)", True), ("mixed (`group_by_setup=False`)", False))]
    engine_table = _timing.markdown_table(["engine", "compile", "run (median)"], rows)
    engine_ratio = engine[False][0] / engine[True][0]
    return (
        f"### n-step targets\n\n{n_table}\n\n### Replay ratios {RATIOS}, {per_ratio} seeds each\n\n{ratio_table}\n\n"
        f"Mixed ÷ grouped time: {mixed_s / grouped_s:.2f}×.\n\n### The same runs through the sweep engine\n\n"
        f"{engine_table}\n\nMixed ÷ grouped run time: {engine_ratio:.2f}×."
    )
