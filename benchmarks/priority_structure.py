"""Priority structure for stored-priority replay: sum tree vs. per-slot cumsum + searchsorted.

    python benchmarks/priority_structure.py [--quick | --full (default)] [--steps T] [--repeats R]

(or ``run(mode, progress)`` from the :mod:`benchmarks` runner). For each
number of buffers ``B`` and slots ``N`` one program ``jit(vmap over B
buffers of lax.scan over T steps)`` runs, per step and buffer: one add, one
draw of a batch of 50 with probability ∝ stored priority, and one priority
update of those 50 with fresh random TD errors. Buffers start full (every
slot live). Two priority structures, same semantics:

* **sum tree**: :mod:`jaxreplay.prioritized` itself. O(log N) per draw and
  per updated slot.
* **cumsum**: one ``float32[N]`` of priorities per buffer; a batch of draws
  takes its ``cumsum`` and ``searchsorted`` (O(N) per batch), an update is a
  scatter (O(1) per slot).

A second table times the sum tree itself compiled four ways, the choices
:mod:`jaxreplay.prioritized` makes per platform when lowering: its per-level
loops (tree descent, ancestor refresh) as ``fori_loop`` s or unrolled, and a
few written leaves refreshing their ancestors level by level (one scatter
per level) or all paths at once (one scatter). Every mode gives a
bit-identical tree (``tests/test_prioritized.py``); the defaults are loops +
levels on CPU and unrolled + paths elsewhere.

All programs are compiled ahead of time (compile time reported apart), run
once as a warm-up, then timed in interleaved rounds (tree, cumsum, tree,
...) so that their ratio is robust to the load of a shared machine; each
round continues from the previous state (donated, so no per-call copy).
Reported: median microseconds per step for all ``B`` buffers together.
Configurations whose state would not fit in a third of the available memory
are skipped.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any, Callable, NamedTuple

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp

from benchmarks import _timing
from jaxreplay import buffer as buffer_lib
from jaxreplay import prioritized, samplers

TITLE = "Stored-priority replay: sum tree vs. cumsum + searchsorted"

BATCH = 50
ALPHA = 0.6  # priority exponent
BETA = 0.4  # importance exponent
EXAMPLE = jnp.zeros((), jnp.float32)

MODES: dict[str, dict[str, Any]] = {
    "quick": {"buffers": (1, 100), "slots": (1_000, 10_000), "steps": 50, "repeats": 5, "compiled_as": ((100, 1_000),)},
    "full": {
        "buffers": (1, 100, 1000),
        "slots": (1_000, 10_000, 100_000),
        "steps": 50,
        "repeats": 5,
        "compiled_as": ((1, 1_000), (100, 1_000), (100, 100_000)),
    },
}
# (label, prioritized.TreeMode): the tree compiled four ways.
COMPILED_AS = (
    ("loops + levels (CPU default)", prioritized.TreeMode(unroll=False, refresh="levels")),
    ("unrolled + levels", prioritized.TreeMode(unroll=True, refresh="levels")),
    ("unrolled + paths (accelerator default)", prioritized.TreeMode(unroll=True, refresh="paths")),
    ("loops + paths", prioritized.TreeMode(unroll=False, refresh="paths")),
)


# ----------------------------------------------------------------------------
# The alternative: flat priorities, cumsum + searchsorted per batch of draws


class FlatState(NamedTuple):
    buffer: buffer_lib.BufferState
    priorities: jax.Array  # float32[N], 0 outside the live window
    max_priority: jax.Array


def flat_init(max_capacity: int) -> FlatState:
    return FlatState(
        buffer_lib.init(EXAMPLE, max_capacity),
        jnp.zeros((max_capacity,), jnp.float32),
        jnp.ones((), jnp.float32),
    )


def flat_add(state: FlatState, transition) -> FlatState:
    old = state.buffer
    n = state.priorities.shape[0]
    forgotten = buffer_lib.oldest_index(old)
    # One scatter: zero the forgotten slot (if full and not the one being
    # overwritten) and set the new one; out-of-bounds entries are dropped.
    zero_slot = jnp.where(buffer_lib.is_full(old) & (forgotten != old.write_position), forgotten, n)
    slots = jnp.stack([zero_slot, old.write_position])
    values = jnp.stack([jnp.zeros((), jnp.float32), state.max_priority])
    prio = state.priorities.at[slots].set(values, mode="drop", unique_indices=True)
    return state._replace(buffer=buffer_lib.add(old, transition), priorities=prio)


def flat_sample(key, state: FlatState, batch_size: int, importance_exponent) -> samplers.Sample:
    cdf = jnp.cumsum(state.priorities)
    total = cdf[-1]
    u = jax.random.uniform(key, (batch_size,)) * total
    idx = jnp.searchsorted(cdf, u, side="right")
    idx = jnp.clip(idx, 0, state.priorities.shape[0] - 1).astype(jnp.int32)
    # From the cdf, not a gather of the priorities: a read of the priorities
    # scheduled after the next in-place update would cost a copy of them.
    mass = cdf[idx] - jnp.where(idx > 0, cdf[jnp.maximum(idx - 1, 0)], 0.0)
    prob = mass / jnp.where(total > 0, total, 1.0)
    weights = samplers.importance_weights(prob, state.buffer.size, importance_exponent)
    return samplers.Sample(idx, prob, weights)


def flat_update(state: FlatState, indices, td_errors, alpha, floor=1e-6) -> FlatState:
    p = jnp.power(jnp.abs(td_errors) + floor, alpha)
    n = state.priorities.shape[0]
    live = (indices - buffer_lib.oldest_index(state.buffer)) % n < state.buffer.size
    target = jnp.where(live, indices, n)
    prio = state.priorities.at[target].set(0.0, mode="drop").at[target].max(p, mode="drop")
    max_priority = jnp.maximum(state.max_priority, jnp.max(jnp.where(live, p, 0.0)))
    return state._replace(priorities=prio, max_priority=max_priority)


def flat_full(n: int) -> FlatState:
    state = flat_init(n)
    return state._replace(
        buffer=buffer_lib.add_batch(state.buffer, jnp.zeros((n,), jnp.float32)),
        priorities=jnp.ones((n,), jnp.float32),
    )


def tree_full(n: int) -> prioritized.PrioritizedState:
    state = prioritized.init(EXAMPLE, n)
    return prioritized.add_batch(state, jnp.zeros((n,), jnp.float32))


STRUCTURES = {
    "sum tree": (tree_full, prioritized.add, prioritized.sample, prioritized.update_priorities),
    "cumsum": (flat_full, flat_add, flat_sample, flat_update),
}


# ----------------------------------------------------------------------------
# Programs


def _program(structure: str, buffers: int, slots: int, steps: int, tree=None) -> tuple[Callable, Any]:
    """``(run, carry)``: ``run(carry) -> carry`` does ``steps`` steps of every buffer.

    ``tree``: a :class:`jaxreplay.prioritized.TreeMode` for the sum tree (``None``: its default).
    """
    full, add, sample, update = STRUCTURES[structure]
    if tree is not None:
        add, sample, update = (functools.partial(fn, tree=tree) for fn in (add, sample, update))

    def one_buffer(carry):
        key, state, checksum = carry
        key, scan_key = jax.random.split(key)

        def step(inner, step_key):
            state, checksum = inner
            sample_key, error_key = jax.random.split(step_key)
            state = add(state, jnp.float32(1.0))
            batch = sample(sample_key, state, BATCH, BETA)
            errors = jax.random.normal(error_key, (BATCH,))
            state = update(state, batch.indices, errors, ALPHA)
            checksum = checksum + jnp.sum(batch.weights) + jnp.sum(batch.indices).astype(jnp.float32)
            return (state, checksum), None

        (state, checksum), _ = jax.lax.scan(step, (state, checksum), jax.random.split(scan_key, steps))
        return key, state, checksum

    def make_carry():
        keys = jax.random.split(jax.random.key(0), buffers)
        states = jax.vmap(lambda _: full(slots))(jnp.arange(buffers))
        return keys, states, jnp.zeros((buffers,), jnp.float32)

    return jax.vmap(one_buffer), jax.jit(make_carry)()


def measure_compiled_as(buffers: int, slots: int, steps: int, repeats: int) -> list[_timing.Timing]:
    """Timings of the sum tree compiled in each of :data:`COMPILED_AS` (same order)."""
    programs = []
    for _, mode in COMPILED_AS:
        run, carry = _program("sum tree", buffers, slots, steps, tree=mode)
        programs.append(_timing.compile_program(run, carry))
    return _timing.time_interleaved(programs, repeats=repeats)


def _state_bytes(structure: str, buffers: int, slots: int) -> int:
    full = STRUCTURES[structure][0]
    return buffers * _timing.tree_bytes(jax.eval_shape(lambda: full(slots)))


def measure(buffers: int, slots: int, steps: int, repeats: int) -> dict[str, _timing.Timing] | str:
    """Timings per structure, or the reason the configuration was skipped."""
    need = sum(_state_bytes(s, buffers, slots) for s in STRUCTURES)
    available = _timing.available_memory_bytes()
    if available is not None and 3 * need > available:
        need_s, available_s = _timing.format_bytes(need), _timing.format_bytes(available)
        return f"skipped: state {need_s} > 1/3 of available {available_s}"
    programs = []
    for structure in STRUCTURES:
        run, carry = _program(structure, buffers, slots, steps)
        programs.append(_timing.compile_program(run, carry))
    timings = _timing.time_interleaved(programs, repeats=repeats)
    return dict(zip(STRUCTURES, timings))


def run(
    mode_name: str = "quick",
    progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    **overrides: Any,
) -> str:
    """The benchmark's markdown section (``overrides``: ``steps``, ``repeats``, ``buffers``, ``slots``)."""
    mode = {**MODES[mode_name], **{k: v for k, v in overrides.items() if v is not None}}
    _timing.disable_compilation_cache()
    steps, repeats = mode["steps"], mode["repeats"]
    rows = []
    for slots in mode["slots"]:
        for buffers in mode["buffers"]:
            progress(f"B={buffers} N={slots} ...")
            result = measure(buffers, slots, steps, repeats)
            if isinstance(result, str):
                rows.append([f"{buffers}", f"{slots:,}", result, "", "", ""])
                continue
            tree, flat = result["sum tree"], result["cumsum"]
            per_step = 1e6 / steps
            rows.append(
                [
                    f"{buffers}",
                    f"{slots:,}",
                    f"{tree.median_s * per_step:,.0f}",
                    f"{flat.median_s * per_step:,.0f}",
                    f"{flat.median_s / tree.median_s:.1f}",
                    f"{tree.compile_s:.1f} / {flat.compile_s:.1f}",
                ]
            )
            progress("  " + " | ".join(rows[-1]))
    header = [
        "B buffers",
        "N slots",
        "sum tree µs/step",
        "cumsum µs/step",
        "cumsum / sum tree",
        "compile s (tree / cumsum)",
    ]
    compiled_rows = []
    for buffers, slots in mode["compiled_as"]:
        progress(f"sum tree compiled four ways, B={buffers} N={slots} ...")
        timings = measure_compiled_as(buffers, slots, steps, repeats)
        fastest = min(t.median_s for t in timings)
        for (label, _), timing in zip(COMPILED_AS, timings):
            compiled_rows.append(
                [
                    f"{buffers}",
                    f"{slots:,}",
                    label,
                    f"{timing.median_s * 1e6 / steps:,.0f}",
                    f"{timing.median_s / fastest:.2f}",
                    f"{timing.compile_s:.1f}",
                ]
            )
            progress("  " + " | ".join(compiled_rows[-1]))
    compiled_header = ["B buffers", "N slots", "sum tree compiled as", "µs/step", "vs fastest", "compile s"]
    return (
        f"Per step of `lax.scan`, every buffer: add 1, sample {BATCH}, update {BATCH} priorities. "
        f"Median of {repeats} interleaved rounds of {steps} steps; µs per step for all B buffers together; "
        f"backend `{jax.default_backend()}`.\n\n"
        + _timing.markdown_table(header, rows)
        + "\n\nThe sum tree compiled four ways (same step; bit-identical trees):\n\n"
        + _timing.markdown_table(compiled_header, compiled_rows)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--quick", dest="mode", action="store_const", const="quick", help="B in {1, 100}, N in {1e3, 1e4}"
    )
    group.add_argument(
        "--full",
        dest="mode",
        action="store_const",
        const="full",
        help="B in {1, 100, 1000}, N in {1e3, 1e4, 1e5} (default)",
    )
    parser.set_defaults(mode="full")
    parser.add_argument("--steps", type=int, help="steps per timed round")
    parser.add_argument("--repeats", type=int, help="timed rounds per program")
    args = parser.parse_args(argv)
    print(_timing.machine_markdown() + "\n")
    print(run(args.mode, steps=args.steps, repeats=args.repeats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
