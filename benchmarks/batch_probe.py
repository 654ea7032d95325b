"""Which chunk sizes give which results: one small sweep run in memory at several chunk sizes.

    python -m benchmarks.batch_probe dqn CartPole-v1 4000 9 1 2 4 8 9
    python -m benchmarks.batch_probe linesearch prioritized 500 40 1 9 12 16 80
    XLA_FLAGS="--xla_cpu_max_isa=AVX2 --xla_cpu_experimental_ynn_fusion_type=" python -m benchmarks.batch_probe ...

Arguments: the experiment, the game (DQN) or sampler (LineSearch), steps per
run, seeds, then the chunk sizes. The sweep is DQN with a 1,000-transition
memory (learning from step 200, ε over half the run), or LineSearch with
memory sizes 16 and 256 and minibatches of 4 (the sweep of
``tests/test_sweep.py``'s SIGKILL test). Prints one JSON line: for each chunk
size a digest of all results, the same without DQN's ``td_loss`` record, and
which variables differ from the first chunk size in which seeds. XLA reads
``XLA_FLAGS`` once per process: run it once per flag set. Not part of
``python -m benchmarks`` (results, not speed).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np


def _config(experiment: str, what: str, steps: int, seeds: int) -> dict:
    if experiment == "dqn":
        return {
            "experiment": "dqn",
            "seeds": seeds,
            "setup": {"env_id": what, "total_steps": steps, "steps_per_segment": steps // 2, "max_capacity": 1000},
            "fixed": {"memory_size": 1000, "learning_starts": 200, "epsilon_decay_steps": steps // 2},
        }
    return {
        "experiment": "linesearch",
        "seeds": seeds,
        "setup": {"steps": steps, "max_capacity": 256, "max_batch_size": 4, "sampler": what},
        "fixed": {"batch_size": 4, "step_size": 0.01},
        "grid": {"memory_size": [16, 256]},
    }


def _digest(ds, names) -> str:
    h = hashlib.sha256()
    for name in names:
        h.update(np.ascontiguousarray(ds[name].values).tobytes())
    return h.hexdigest()[:8]


def probe(experiment: str, what: str, steps: int, seeds: int, chunks: list[int]) -> dict:
    """Run the sweep at each chunk size; compare every result with the first chunk size's, seed by seed."""
    from jaxreplay.engine import sweep as sweep_lib

    sweep = sweep_lib.Sweep.from_dict(_config(experiment, what, steps, seeds))
    out: dict = {"xla_flags": os.environ.get("XLA_FLAGS", ""), "sweep": [experiment, what, steps, seeds], "chunks": {}}
    first = None
    for chunk in chunks:
        ds = sweep_lib.run(sweep, None, chunk_size=chunk, progress=False).dataset
        first = ds if first is None else first
        names = sorted(ds.data_vars)
        differ = {}
        for name in names:
            a, b = first[name], ds[name]
            seeds_differing = [
                s for s in range(seeds) if a.isel(seed=s).values.tobytes() != b.isel(seed=s).values.tobytes()
            ]
            if seeds_differing:
                differ[name] = seeds_differing
        out["chunks"][chunk] = {
            "digest": _digest(ds, names),
            "digest_without_td_loss": _digest(ds, [n for n in names if n != "td_loss"]),
            "differ_from_first": differ,
        }
        print(chunk, out["chunks"][chunk], file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    experiment, what, steps, seeds, *chunks = sys.argv[1:]
    print(json.dumps(probe(experiment, what, int(steps), int(seeds), [int(c) for c in chunks])))
