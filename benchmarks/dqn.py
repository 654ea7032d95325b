"""DQN throughput on CartPole-v1: a 100-seed sweep vs the same code one seed at a time, and vs Stable-Baselines3.

All three do the same training: an MLP Q-network (one hidden layer of 64),
minibatch 50, one gradient step per environment step, uniform replay.

* **ours, 100 seeds**: :func:`jaxreplay.engine.sweep.run` over 100 seeds (one
  compiled program, vmapped); aggregate env steps/s = seeds × steps / run time.
* **ours, 1 seed × 100 in sequence**: the same experiment jitted for one seed
  and called seed after seed. Timed on a few seeds (its cost is linear in the
  number of seeds) and reported per seed.
* **SB3**: ``stable_baselines3.DQN`` on ``gymnasium``'s CartPole-v1 with the
  same network and batch (:mod:`benchmarks._sb3_cartpole`; needs the
  ``bench`` extra: torch, stable-baselines3). Skipped with a note if missing.

Compile time is reported apart. Targets: ≥ 10× the sequential
single-seed runs, ≥ 100× SB3 (aggregate env steps/s).

**Scaling with seeds**: the same sweep at growing seed counts, up to
the largest that the engine runs in one chunk (on the CPU only up to
:data:`MODES`' ``scaling`` list, in time's interest). Targets on a GPU: at
1,000 and 4,000 seeds, twice the env steps/s measured before the GPU performance work
(:data:`BEFORE`, one H100).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import jax

from benchmarks import _timing

TITLE = "DQN on CartPole-v1: 100-seed sweep vs sequential seeds vs Stable-Baselines3"

MODES = {
    "quick": dict(steps=4_000, seeds=100, sequential=3, sb3_steps=4_000, scaling=(10, 30)),
    "full": dict(steps=20_000, seeds=100, sequential=5, sb3_steps=20_000, scaling=(10, 30, 300)),
}
#: Seed counts of the scaling table on an accelerator (then 4× the last, see MAX_ACCELERATOR_SEEDS).
ACCELERATOR_SCALING = (1_000, 4_000, 16_000)
MAX_ACCELERATOR_SEEDS = 64_000  # 4× steps on from 16,000 while one chunk holds them, up to 64,000 (time)
#: Env steps/s of the 4,000-step CartPole sweep measured before the GPU performance work, on one H100.
BEFORE = {1_000: 7.0e6, 4_000: 11.4e6}
HEADLINES: list[list[str]] = []  # filled by run(): the summary rows of `python -m benchmarks`


def _setup(steps: int):
    from jaxreplay.experiments import dqn

    segment = steps // 4
    setup = dqn.Setup(env_id="CartPole-v1", total_steps=steps, steps_per_segment=segment, hidden_sizes=(64,),
                      max_capacity=steps, batch_size=50, sampler="uniform", train_frequency=1, eval_episodes=0)
    hparams = dqn.Hyperparameters(memory_size=steps, step_size=1e-3, discount=0.99, learning_starts=100,
                                  epsilon_decay_steps=steps // 2, target_period=500)
    return setup, hparams


def engine_run(setup, hparams, seeds: int) -> dict:
    """``seeds`` runs of ``(setup, hparams)`` as one sweep through the engine: run and compile seconds,
    env steps, gradient updates and the chunk size (shared with the MinAtar benchmark).

    The sweep's one call is timed, compile excluded but its first execution's cost included (no warm-up: a
    second call would double the largest sweeps' time on a GPU), while :func:`sequential_runs` warms up
    first; a lone seed runs in the engine's chunk of 2. Both understate the sweep, most at few seeds."""
    from jaxreplay.engine import sweep as sw

    t0 = time.perf_counter()
    result = sw.run(sw.Sweep("dqn", seeds=seeds, setup=setup, fixed=hparams._asdict()), None, progress=False)
    s = result.stats
    seconds = time.perf_counter() - t0 - s.compile_seconds  # the whole call, planning and assembly included
    return dict(seconds=seconds, compile_s=s.compile_seconds, env_steps=seeds * setup.total_steps,
                updates=float(result.dataset.gradient_steps.sum()), chunk=s.chunk_size, seeds=seeds)


def sequential_runs(setup, hparams, seeds: int) -> dict:
    """``seeds`` runs of ``(setup, hparams)`` one after another in one jitted program (compiled first,
    apart): the keys :func:`engine_run`'s sweep gives its seeds (base seed 0), one run per call."""
    from jaxreplay.engine.execute import run_keys
    from jaxreplay.experiments import dqn

    keys = list(run_keys(0, jax.numpy.arange(seeds), jax.default_backend()))  # made before the clock
    t0 = time.perf_counter()
    fn = _timing.compiled_as_the_engine(dqn.run, dqn.EXPERIMENT, keys[0], hparams, setup, static_argnums=2)
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(fn(keys[0], hparams, setup))  # warm up
    t0 = time.perf_counter()
    grads = 0
    for i in range(seeds):
        _, summary = jax.block_until_ready(fn(keys[i], hparams, setup))
        grads += int(summary["gradient_steps"])
    seconds = time.perf_counter() - t0
    return dict(seconds=seconds, compile_s=compile_s, env_steps=seeds * setup.total_steps, updates=grads, seeds=seeds)


def _ours_sweep(steps: int, seeds: int) -> dict:
    return engine_run(*_setup(steps), seeds)


def _ours_sequential(steps: int, seeds: int) -> dict:
    return sequential_runs(*_setup(steps), seeds)


def _sb3(steps: int) -> dict | str:
    from benchmarks import _sb3_cartpole  # imports torch / SB3 only inside measure_sb3

    try:
        out = _sb3_cartpole.measure_sb3(total_steps=steps, hidden_sizes=(64,), batch_size=50, train_freq=1,
                                        learning_starts=100)
    except ImportError as e:
        return f"skipped: {e}"
    return dict(seconds=out["seconds"], env_steps=out["env_steps"], updates=out["updates"])


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    _timing.disable_compilation_cache()
    mode = MODES[mode_name]
    progress(f"  ours: {mode['seeds']} seeds × {mode['steps']} steps, one program")
    sweep = _ours_sweep(mode["steps"], mode["seeds"])
    progress(f"  ours: 1 seed at a time, {mode['sequential']} seeds")
    seq = _ours_sequential(mode["steps"], mode["sequential"])
    progress(f"  SB3: {mode['sb3_steps']} steps")
    sb3 = _sb3(mode["sb3_steps"])
    report = _report(mode_name, mode, sweep, seq, sb3)
    scaling = _scaling(mode, sweep, progress)
    return report + "\n\n" + _scaling_report(mode, scaling)


def _scaling(mode: dict, at_seeds: dict, progress: Callable[[str], None]) -> list[dict]:
    """The sweep at each seed count (the main sweep's result reused at its count), in one chunk each."""
    on_accelerator = jax.default_backend() != "cpu"
    counts = sorted(set(mode["scaling"]) | {mode["seeds"]} | (set(ACCELERATOR_SCALING) if on_accelerator else set()))
    rows = []
    while counts:
        seeds = counts.pop(0)
        progress(f"  scaling: {seeds:,} seeds")
        result = at_seeds if seeds == mode["seeds"] else _ours_sweep(mode["steps"], seeds)
        rows.append(result)  # engine_run's dict names its seed count
        if result["chunk"] < seeds:  # the engine split it: more seeds would not run in one program
            break
        if on_accelerator and not counts and seeds < MAX_ACCELERATOR_SEEDS:
            counts.append(4 * seeds)
    return rows


def _scaling_report(mode: dict, rows: list[dict]) -> str:
    table_rows = []
    for r in rows:
        rate = _rate(r, "env_steps")
        before = BEFORE.get(r["seeds"]) if jax.default_backend() == "gpu" else None
        table_rows.append([f"{r['seeds']:,}", f"{r['chunk']:,}", f"{rate:,.0f}",
                           f"{r['seconds'] / mode['steps'] * 1e6:.3g}", f"{r['compile_s']:.1f} s",
                           f"{rate / before:.2f}×" if before else "–"])
        if before:
            HEADLINES.append([f"DQN CartPole, {r['seeds']:,}-seed sweep: env steps/s ÷ before the GPU work "
                              f"({before / 1e6:.1f} M, one H100)", f"{rate / before:.2f}×", "≥ 2×"])
    table = _timing.markdown_table(["seeds", "chunk", "env steps/s", "µs per env step (all seeds)", "compile",
                                    "÷ before (H100)"], table_rows)
    last = rows[-1]
    stop = ("the engine split the last count into chunks (its memory budget)" if last["chunk"] < last["seeds"]
            else "the list ends there")
    return "\n\n".join([f"**Scaling with seeds**: the same sweep ({mode['steps']:,} steps per seed), one program "
                         f"per seed count; {stop}.", table])


def _rate(d: dict, key: str) -> float:
    return d[key] / d["seconds"]


def _report(mode_name, mode, sweep, seq, sb3) -> str:
    rows = [
        [f"ours, {mode['seeds']} seeds in one program", f"{_rate(sweep, 'env_steps'):,.0f}",
         f"{_rate(sweep, 'updates'):,.0f}", f"{sweep['compile_s']:.1f} s", "1×"],
        [f"ours, 1 seed at a time ({seq['seeds']} timed)", f"{_rate(seq, 'env_steps'):,.0f}",
         f"{_rate(seq, 'updates'):,.0f}", f"{seq['compile_s']:.1f} s",
         f"**{_rate(sweep, 'env_steps') / _rate(seq, 'env_steps'):.1f}×** slower"],
    ]
    ratio_seq = _rate(sweep, "env_steps") / _rate(seq, "env_steps")
    HEADLINES[:] = [["DQN CartPole, 100-seed sweep vs seeds in sequence (aggregate env steps/s)",
                     f"{ratio_seq:.1f}×", "≥ 10×"]]
    if isinstance(sb3, dict):
        ratio_sb3 = _rate(sweep, "env_steps") / _rate(sb3, "env_steps")
        rows.append(["Stable-Baselines3 DQN (torch, 1 thread), 1 seed", f"{_rate(sb3, 'env_steps'):,.0f}",
                     f"{_rate(sb3, 'updates'):,.0f}", "–", f"**{ratio_sb3:.1f}×** slower"])
        HEADLINES.append(["DQN CartPole, 100-seed sweep vs Stable-Baselines3 (aggregate env steps/s)",
                          f"{ratio_sb3:.0f}×", "≥ 100×"])
        sb3_note = ""
    else:
        sb3_note = f"Stable-Baselines3: {sb3} (`pip install -e '.[bench]'`)."
        HEADLINES.append(["DQN CartPole vs Stable-Baselines3", "not measured", "≥ 100×"])
    table = _timing.markdown_table(["implementation", "env steps/s", "gradient updates/s", "compile",
                                    "vs ours (100 seeds)"], rows)
    text = [
        f"CartPole-v1, MLP (64), minibatch 50, one update per env step, {mode['steps']:,} steps per seed; "
        f"backend `{jax.default_backend()}`, mode `{mode_name}`. Rates are aggregate over seeds, compile excluded.",
        table,
    ]
    if sb3_note:
        text.append(sb3_note)
    return "\n\n".join(text)


if __name__ == "__main__":
    print(run(sys.argv[1] if len(sys.argv) > 1 else "quick"))
