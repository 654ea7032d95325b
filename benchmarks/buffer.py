"""Replay-buffer throughput: jaxreplay against flashbax, vmapped over B buffers.

Every workload is one jitted program: ``jit(vmap over B buffers of lax.scan
over T steps)``. One *buffer·step* is one step of one buffer:

* **uniform**: add 1 transition, draw a batch of 50 uniformly, gather it.
  Ours: ``buffer.add`` + ``samplers.uniform`` + ``buffer.get``. flashbax:
  ``make_flat_buffer(add_batch_size=None)`` (one unbatched transition per
  ``add``, stored internally as an add batch of 1) + ``sample``.
* **stored-priority**: add 1, draw 50 with probability ∝ stored priority,
  gather them, compute a TD-error-like value from the gathered data and the
  importance weights, write the 50 new priorities back. Ours:
  ``prioritized.add`` / ``sample`` / ``buffer.get`` / ``update_priorities``.
  flashbax: ``make_prioritised_flat_buffer(priority_exponent=0.6)`` +
  ``sample`` + ``set_priorities`` (importance weights computed from the
  returned probabilities, as a flashbax user must).

Transitions are a DQN's: ``obs float32[4], action int32, reward float32,
next_obs float32[4], done bool``, made from the step counter (no RNG, so the
random numbers timed are the samplers' own). flashbax's flat buffer is used
the way its docs and PureJaxRL's DQN use it: it stores *timesteps*
``(obs, action, reward, done)`` and samples consecutive pairs, the transition
being ``(first.obs, first.action, first.reward, second.obs, first.done)`` —
the same 14 numbers gathered per sampled transition as ours. Every gathered
number and every importance weight flows into a per-buffer checksum that the
program returns, so XLA cannot drop any of the work.

Each program is compiled ahead of time (compile time reported apart), run once
as a warm-up, then timed over repeats that each continue from the previous
state (donated, so no per-call copy). Throughput = B · T / median time.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import _timing
from jaxreplay import buffer as buffer_lib
from jaxreplay import samplers

TITLE = "Replay buffer: add + sample throughput vs flashbax"

BATCH_SIZE = 50
PRIORITY_EXPONENT = 0.6
IMPORTANCE_EXPONENT = 0.4
HEADLINE = (100, 1000)  # (B, N) of the target
TARGET_RATIO = 15.0  # stored-priority, quick mode (raised from the first target, 10×)
UNIFORM_TARGET_RATIO = 2.0  # uniform add + sample + gather

# What each mode measures.
MODES: dict[str, dict[str, Any]] = {
    "quick": dict(
        buffers=(1, 100),  # at N = 1000
        capacities=(100, 1000, 10_000),  # at B = 100
        work_per_call=10_000,  # buffer·steps per timed call (T = work / B, clipped)
        repeats=7,  # timed rounds (at least MIN_REPEATS; fewer past max_seconds)
        max_seconds=1.0,  # per group: stop adding rounds after this much timed wall time
    ),
    "full": dict(
        buffers=(1, 100, 1000, 10_000),
        capacities=(100, 1000, 10_000, 100_000),
        work_per_call=50_000,
        repeats=7,
        max_seconds=10.0,
    ),
}
MIN_STEPS, MAX_STEPS = 10, 5000
MIN_REPEATS = 3
MEMORY_FRACTION = 0.6  # of MemAvailable a measurement may plan to use


def _example() -> dict[str, jax.Array]:
    return {
        "obs": jnp.zeros((4,), jnp.float32),
        "action": jnp.zeros((), jnp.int32),
        "reward": jnp.zeros((), jnp.float32),
        "next_obs": jnp.zeros((4,), jnp.float32),
        "done": jnp.zeros((), jnp.bool_),
    }


def _transition(t: jax.Array) -> dict[str, jax.Array]:
    """The transition written at step ``t`` (deterministic, cheap, varies with t)."""
    tf = t.astype(jnp.float32)
    obs = tf * 1e-3 + jnp.arange(4, dtype=jnp.float32)
    return {
        "obs": obs,
        "action": (t % 2).astype(jnp.int32),
        "reward": (t % 7).astype(jnp.float32) * 0.1,
        "next_obs": obs + 1e-3,
        "done": t % 200 == 199,
    }


def _timestep(t: jax.Array) -> dict[str, jax.Array]:
    """What flashbax stores per step: the transition without next_obs."""
    tr = _transition(t)
    return {k: tr[k] for k in ("obs", "action", "reward", "done")}


def _checksum(batch: dict[str, jax.Array]) -> jax.Array:
    return (
        jnp.sum(batch["obs"])
        + jnp.sum(batch["next_obs"])
        + jnp.sum(batch["reward"])
        + jnp.sum(batch["action"]).astype(jnp.float32)
        + jnp.sum(batch["done"]).astype(jnp.float32)
    )


def _td_errors(batch: dict[str, jax.Array]) -> jax.Array:
    """A TD-error-like value per sampled transition that depends on all its fields."""
    bootstrap = 0.99 * (1.0 - batch["done"].astype(jnp.float32)) * jnp.mean(batch["next_obs"], axis=-1)
    return batch["reward"] + bootstrap - jnp.mean(batch["obs"], axis=-1) + 0.1 * batch["action"]


def _pairs_to_transitions(first: dict, second: dict) -> dict[str, jax.Array]:
    return {
        "obs": first["obs"],
        "action": first["action"],
        "reward": first["reward"],
        "next_obs": second["obs"],
        "done": first["done"],
    }


# ----------------------------------------------------------------------------
# Workloads. Each returns (init, step): init(key) -> one buffer's state (already
# holding two transitions, so that flashbax's pair sampler has a valid item),
# step(state, key, t) -> (state, checksum contribution).


def _ours_uniform(N: int):
    def init(key, capacity):
        state = buffer_lib.init(_example(), N, capacity)
        return buffer_lib.add(buffer_lib.add(state, _transition(jnp.int32(0))), _transition(jnp.int32(1)))

    def step(state, key, t):
        state = buffer_lib.add(state, _transition(t))
        sample = samplers.uniform(key, state, BATCH_SIZE)
        batch = buffer_lib.get(state, sample.indices)
        return state, _checksum(batch)

    return init, step


def _ours_prioritized(N: int):
    from jaxreplay import prioritized

    def init(key, capacity):
        state = prioritized.init(_example(), N, capacity)
        return prioritized.add(prioritized.add(state, _transition(jnp.int32(0))), _transition(jnp.int32(1)))

    def step(state, key, t):
        state = prioritized.add(state, _transition(t))
        sample = prioritized.sample(key, state, BATCH_SIZE, IMPORTANCE_EXPONENT)
        batch = buffer_lib.get(state.buffer, sample.indices)
        td = _td_errors(batch)
        state = prioritized.update_priorities(state, sample.indices, td, PRIORITY_EXPONENT)
        return state, _checksum(batch) + jnp.sum(sample.weights * td)

    return init, step


def _flashbax_uniform(N: int):
    import flashbax as fbx

    fb = fbx.make_flat_buffer(max_length=N, min_length=1, sample_batch_size=BATCH_SIZE, add_batch_size=None)

    def init(key, capacity):
        state = fb.init(_timestep(jnp.int32(0)))
        return fb.add(fb.add(state, _timestep(jnp.int32(0))), _timestep(jnp.int32(1)))

    def step(state, key, t):
        state = fb.add(state, _timestep(t))
        pair = fb.sample(state, key).experience
        batch = _pairs_to_transitions(pair.first, pair.second)
        return state, _checksum(batch)

    return init, step


def _flashbax_prioritized(N: int):
    import flashbax as fbx

    fb = fbx.make_prioritised_flat_buffer(
        max_length=N,
        min_length=1,
        sample_batch_size=BATCH_SIZE,
        add_batch_size=None,
        priority_exponent=PRIORITY_EXPONENT,
        device=jax.default_backend(),
    )

    def init(key, capacity):
        state = fb.init(_timestep(jnp.int32(0)))
        return fb.add(fb.add(state, _timestep(jnp.int32(0))), _timestep(jnp.int32(1)))

    def step(state, key, t):
        state = fb.add(state, _timestep(t))
        sample = fb.sample(state, key)
        batch = _pairs_to_transitions(sample.experience.first, sample.experience.second)
        # flashbax returns probabilities, not weights: compute them as a user must.
        size = jnp.where(state.is_full, N, state.current_index)
        weights = samplers.importance_weights(sample.probabilities, size, IMPORTANCE_EXPONENT)
        td = _td_errors(batch)
        state = fb.set_priorities(state, sample.indices, jnp.abs(td) + 1e-6)
        return state, _checksum(batch) + jnp.sum(weights * td)

    return init, step


WORKLOADS: dict[tuple[str, str], Callable[[int], tuple[Callable, Callable]]] = {
    ("uniform", "ours"): _ours_uniform,
    ("uniform", "flashbax"): _flashbax_uniform,
    ("priority", "ours"): _ours_prioritized,
    ("priority", "flashbax"): _flashbax_prioritized,
}


# ----------------------------------------------------------------------------
# Measurement


@dataclasses.dataclass(frozen=True)
class Case:
    workload: str  # "uniform" | "priority"
    impl: str  # "ours" | "flashbax"
    B: int
    N: int
    T: int
    mixed_capacities: bool = False  # ours only: capacities linspace(N/B, N, B) in one program


@dataclasses.dataclass
class Result:
    case: Case
    timing: _timing.Timing | None = None
    state_bytes: int | None = None
    note: str = ""

    @property
    def throughput(self) -> float:
        """buffer·steps per second (nan if not measured)."""
        if self.timing is None:
            return float("nan")
        return self.case.B * self.case.T / self.timing.median_s


def _capacities(case: Case) -> jax.Array:
    if not case.mixed_capacities:
        return jnp.full((case.B,), case.N, jnp.int32)
    return jnp.round(jnp.linspace(case.N / case.B, case.N, case.B)).astype(jnp.int32).clip(1, case.N)


def _programs(case: Case):
    """(make_carry, run): run(carry) -> carry advances all B buffers by T steps."""
    init_one, step_one = WORKLOADS[(case.workload, case.impl)](case.N)

    def make_carry(keys, capacities):
        states = jax.vmap(init_one)(keys, capacities)
        return states, keys, jnp.full((case.B,), 2, jnp.int32), jnp.zeros((case.B,), jnp.float32)

    def run_one(state, key, t0, acc):
        def body(carry, _):
            state, t, acc = carry
            state, check = step_one(state, jax.random.fold_in(key, t), t)
            return (state, t + 1, acc + check), None

        (state, t, acc), _ = jax.lax.scan(body, (state, t0, acc), None, length=case.T)
        return state, key, t, acc

    def run(carry):
        return jax.vmap(run_one)(*carry)

    return make_carry, run


def _prepare(case: Case) -> tuple[_timing.Program | None, Result]:
    """Build and compile one case, unless it is unavailable or would not fit in memory."""
    try:
        make_carry, run = _programs(case)
    except ImportError as error:
        return None, Result(case, note=f"not available: {error}")
    keys = jax.random.split(jax.random.key(0), case.B)
    capacities = _capacities(case)
    state_bytes = _timing.tree_bytes(jax.eval_shape(make_carry, keys, capacities))
    available = _timing.available_memory_bytes()
    # Input and output carries are aliased (donation); allow 3x for XLA temporaries.
    if available is not None and 3 * state_bytes > MEMORY_FRACTION * available:
        note = (
            f"skipped: state {_timing.format_bytes(state_bytes)} × 3 > "
            f"{MEMORY_FRACTION:.0%} of {_timing.format_bytes(available)} available"
        )
        return None, Result(case, state_bytes=state_bytes, note=note)
    carry = jax.jit(make_carry)(keys, capacities)
    program = _timing.compile_program(run, carry)
    for _ in range(fill_calls(case)):
        program.carry = program.compiled(program.carry)
    jax.block_until_ready(program.carry)
    return program, Result(case, state_bytes=state_bytes)


def fill_calls(case: Case) -> int:
    """Untimed calls of ``case``'s program (``T`` steps each) that fill its buffers before they are measured, so
    every measured step overwrites the oldest transition, as a full replay memory does: the headline N = 1000
    buffer reached at most 802 of its slots over the warm-up and the timed rounds, and filled, uniform ours ÷
    flashbax fell from 2.1× to 1.6-1.7× on 2 cores (a review of the benchmarks)."""
    return -(-case.N // case.T)


NON_FINITE = "non-finite checksum"
"""A :class:`Result`'s note where its program's output check failed: its time is not a working buffer's."""


def measure(cases: list[Case], mode: dict[str, Any]) -> list[Result]:
    """Compile the cases, then time them interleaved (so their ratios see the same machine load)."""
    prepared = [_prepare(case) for case in cases]
    programs = [p for p, _ in prepared if p is not None]
    timings = iter(
        _timing.time_interleaved(
            programs, repeats=mode["repeats"], min_repeats=MIN_REPEATS, max_seconds=mode["max_seconds"]
        )
    )
    results = []
    for program, result in prepared:
        if program is not None:
            result.timing = next(timings)
            checksum = np.asarray(program.carry[-1])
            if not np.all(np.isfinite(checksum)):
                result.note = NON_FINITE
            program.carry = None  # free the state now
        results.append(result)
    return results


def _steps(B: int, mode: dict[str, Any]) -> int:
    return int(np.clip(mode["work_per_call"] // B, MIN_STEPS, MAX_STEPS))


# ----------------------------------------------------------------------------
# Report


def _ratio(ours: Result, theirs: Result) -> float:
    return ours.throughput / theirs.throughput


def _fmt_ratio(r: float) -> str:
    return "—" if not math.isfinite(r) else f"**{r:.1f}×**" if r >= 10 else f"{r:.2f}×"


def _fmt_rate(res: Result) -> str:
    if res.timing is None:
        return res.note or "—"
    return _timing.format_rate(res.throughput)


def _fmt_compile(res: Result) -> str:
    return "—" if res.timing is None else f"{res.timing.compile_s:.2f}"


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    """Run the benchmark in ``mode_name`` ('quick' or 'full'); return its markdown section."""
    mode = MODES[mode_name]
    _timing.disable_compilation_cache()

    configs: list[tuple[int, int]] = []  # (B, N), in report order, no duplicates
    for B in mode["buffers"]:
        configs.append((B, 1000))
    for N in mode["capacities"]:
        if (100, N) not in configs:
            configs.append((100, N))

    results: dict[tuple[str, str, int, int], Result] = {}
    mixed: dict[str, Result] = {}
    groups = [(w, B, N) for (B, N) in configs for w in ("uniform", "priority")]
    for i, (w, B, N) in enumerate(groups, 1):
        T = _steps(B, mode)
        cases = [Case(w, "ours", B, N, T), Case(w, "flashbax", B, N, T)]
        if (B, N) == HEADLINE:
            # Ours over B buffers with different capacities, one program (flashbax: one per capacity).
            cases.append(Case(w, "ours", B, N, T, mixed_capacities=True))
        for res in measure(cases, mode):
            c = res.case
            if c.mixed_capacities:
                mixed[w] = res
            else:
                results[(w, c.impl, B, N)] = res
            label = f"[buffer {i}/{len(groups)}] {w:8s} {c.impl + (' mixed N' if c.mixed_capacities else ''):16s} B={B:<6d} N={N:<7d} T={T:<5d}"
            if res.timing is not None:
                progress(
                    f"{label} {_timing.format_rate(res.throughput):>8s} buffer·steps/s  "
                    f"compile {res.timing.compile_s:5.2f} s  spread {res.timing.spread:4.0%} "
                    f"({len(res.timing.times_s)} repeats) {res.note}"
                )
            else:
                progress(f"{label} {res.note}")

    return _report(mode_name, mode, configs, results, mixed)


HEADLINES: list[list[str]] = []  # filled by run(): the summary rows of `python -m benchmarks`


def headline_ratio(ours: Result, theirs: Result) -> str:
    """A summary row's measured column: the ratio, followed by the side whose output check failed, if any (its
    time is then not that of a working buffer: flashbax's prioritised checksum came out non-finite on an H200,
    and the ratio was published without a word in the summary, a review of the benchmarks)."""
    failed = [r.case.impl for r in (ours, theirs) if r.note == NON_FINITE]
    return f"{_ratio(ours, theirs):.1f}×" + (f" ({' and '.join(failed)}: {NON_FINITE})" if failed else "")


def _report(mode_name, mode, configs, results, mixed) -> str:
    out: list[str] = []
    B0, N0 = HEADLINE
    head_ratio = _ratio(results[("priority", "ours", B0, N0)], results[("priority", "flashbax", B0, N0)])
    HEADLINES[:] = [
        [f"uniform add+sample+gather, ours / flashbax (N = {N0}, B = {B0}, batch {BATCH_SIZE})",
         headline_ratio(results[("uniform", "ours", B0, N0)], results[("uniform", "flashbax", B0, N0)]),
         f"≥ {UNIFORM_TARGET_RATIO:.0f}×"],
        [f"stored-priority add+sample+update, ours / flashbax (N = {N0}, B = {B0}, batch {BATCH_SIZE})",
         headline_ratio(results[("priority", "ours", B0, N0)], results[("priority", "flashbax", B0, N0)]),
         f"≥ {TARGET_RATIO:.0f}×"],
    ]
    if math.isfinite(head_ratio):
        verdict = "met" if head_ratio >= TARGET_RATIO else "**not met**"
        out.append(
            f"Target — stored-priority add + sample + update at N = {N0}, B = {B0}, batch {BATCH_SIZE}: "
            f"ours / flashbax = **{head_ratio:.1f}×** (target ≥ {TARGET_RATIO:.0f}×: {verdict})."
        )
    else:
        out.append("Target — stored-priority ratio at the target configuration was not measured.")
    bound = _ratio(results[("uniform", "ours", B0, N0)], results[("priority", "flashbax", B0, N0)])
    if math.isfinite(bound):
        out.append(
            f"For scale: our *uniform* add + sample + gather (no priorities at all) runs at {bound:.1f}× "
            "flashbax's prioritised buffer in the same configuration: roughly the ceiling for a "
            "stored-priority step on the same buffer and RNG (it draws one random number per sample too)."
        )
    out.append("")

    # Headline: ratios.
    out.append(f"### Ratios ours / flashbax (throughput; > 1 means jaxreplay is faster), batch {BATCH_SIZE}")
    out.append("")
    rows = []
    for B, N in configs:
        rows.append(
            [
                f"{B}",
                f"{N}",
                _fmt_ratio(_ratio(results[("uniform", "ours", B, N)], results[("uniform", "flashbax", B, N)])),
                _fmt_ratio(_ratio(results[("priority", "ours", B, N)], results[("priority", "flashbax", B, N)])),
            ]
        )
    out.append(_timing.markdown_table(["B buffers", "N capacity", "uniform", "stored-priority"], rows))
    out.append("")

    # Absolute throughput.
    out.append("### Throughput (buffer·steps/s) and compile time (s)")
    out.append("")
    rows = []
    for B, N in configs:
        r = [results[(w, impl, B, N)] for w in ("uniform", "priority") for impl in ("ours", "flashbax")]
        rows.append(
            [f"{B}", f"{N}", f"{r[0].case.T}"]
            + [_fmt_rate(x) for x in r]
            + [" / ".join(_fmt_compile(x) for x in r)]
        )
    out.append(
        _timing.markdown_table(
            [
                "B",
                "N",
                "T steps",
                "uniform ours",
                "uniform flashbax",
                "priority ours",
                "priority flashbax",
                "compile s (same order)",
            ],
            rows,
        )
    )
    out.append("")

    # Cost vs N at B = 100.
    out.append("### Cost vs N at B = 100: µs per buffer·step (growth relative to the smallest N)")
    out.append("")
    ns = [N for B, N in configs if B == 100]
    ns.sort()
    rows = []
    base = {}
    for N in ns:
        row = [f"{N}"]
        for w in ("uniform", "priority"):
            for impl in ("ours", "flashbax"):
                res = results[(w, impl, 100, N)]
                if res.timing is None:
                    row.append(res.note or "—")
                    continue
                us = 1e6 / res.throughput
                base.setdefault((w, impl), us)
                row.append(f"{us:.3g} ({us / base[(w, impl)]:.2g}×)")
        row.append(
            " / ".join(
                _timing.format_bytes(results[(w, impl, 100, N)].state_bytes or 0)
                for w, impl in (("uniform", "ours"), ("uniform", "flashbax"), ("priority", "ours"), ("priority", "flashbax"))
            )
        )
        rows.append(row)
    out.append(
        _timing.markdown_table(
            ["N", "uniform ours", "uniform flashbax", "priority ours", "priority flashbax", "state bytes, all 100 buffers (same order)"],
            rows,
        )
    )
    out.append("")

    # Mixed capacities.
    out.append(f"### Ours over B = {B0} buffers with *different* capacities in one program")
    out.append("")
    caps = np.asarray(_capacities(Case("uniform", "ours", B0, N0, 1, mixed_capacities=True)))
    rows = []
    for w, label in (("uniform", "uniform"), ("priority", "stored-priority")):
        same = results[(w, "ours", B0, N0)]
        diff = mixed[w]
        rows.append(
            [
                label,
                _fmt_rate(same),
                _fmt_rate(diff),
                _fmt_compile(diff),
                "n/a: capacity is a shape, one program per capacity",
            ]
        )
    out.append(
        _timing.markdown_table(
            [
                "workload",
                f"ours, all N = {N0}",
                f"ours, N = {caps[0]}, …, {caps[-1]} (linspace)",
                "compile s",
                "flashbax",
            ],
            rows,
        )
    )
    out.append("")

    out.append(
        f"Mode `{mode_name}`: each group (ours, flashbax[, ours with mixed capacities]) is compiled, run once "
        f"untimed, then timed in interleaved rounds ({MIN_REPEATS} to {max(MIN_REPEATS, mode['repeats'])}, fewer "
        f"once {mode['max_seconds']:g} s of timed calls are spent); the median is reported. "
        f"T = clip({mode['work_per_call']} / B, {MIN_STEPS}, {MAX_STEPS}) steps per call. "
        f"Batch {BATCH_SIZE}, priority exponent {PRIORITY_EXPONENT}, importance exponent {IMPORTANCE_EXPONENT}."
    )
    notes = [r for r in list(results.values()) + list(mixed.values()) if r.note]
    for r in notes:
        c = r.case
        extra = " (mixed capacities)" if c.mixed_capacities else ""
        out.append(f"- {c.workload} {c.impl} B={c.B} N={c.N}{extra}: {r.note}")
    return "\n".join(out)


if __name__ == "__main__":
    print(run(sys.argv[1] if len(sys.argv) > 1 else "quick"))
