"""Whether a DQN sweep's results depend on the process that computes them: a check for a GPU.

``python -m benchmarks.determinism OUT [--seeds 64] [--steps 20000] [--env Acrobot-v1]`` computes one small
DQN sweep (the game's paper setting, or a MinAtar game's preset with its convolutional network, static memories
of 1,000 and 10,000, ``--seeds`` seeds each; ``--steps`` a multiple of 20 for MinAtar) four
times, each in a fresh process and its own folder under ``OUT``: twice as the engine compiles it (the
experiment's :data:`jaxreplay.experiments.COMPILER_OPTIONS`: on a GPU, no autotuning), and twice with
XLA:GPU's autotuning at its default level (4). For each pair it reports how many runs agree to the bit
(every summary of the run) and each process's wall time, and writes ``OUT/determinism.md``.

Why: on one H200 a fixed memory of 200,000 run in two stages of Acrobot's DQN study, one compiled
program in two processes, differed in all 100 seeds, where MountainCar's pair, in one process, agreed
(``docs/study.md``). Autotuning times candidate kernels while compiling, so another process may pick
another kernel that rounds otherwise; the experiments now compile without it on a GPU. This checks both
halves on the machine at hand: that the autotuned pair can differ, that the engine's pair does not, and
what turning autotuning off costs. On a CPU both pairs agree (XLA:CPU does not autotune) and take the
same time: the tests run it there, small, to keep the mechanics right.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import shutil
import subprocess
import sys
import time

VARIANTS = {
    "engine": None,  # the experiment's own options
    "autotuned": {"xla_gpu_autotune_level": 4},  # XLA's default on a GPU
    # Without autotuning XLA:GPU gives a dot a default Triton tiling; cuBLAS picks its kernel by a heuristic of the
    # shapes, deterministic for a given library and GPU. On an H200 (2026-11-30) the DQN step's batched dots took
    # 1.3-1.7x their autotuned time untuned (benchmarks/README.md): is cuBLAS both deterministic and fast?
    "engine, cuBLAS dots": {"xla_gpu_enable_triton_gemm": False},
}
SIZES = (1_000, 10_000)


def _sweep(env: str, seeds: int, steps: int):
    from jaxreplay.engine import sweep as sweep_lib
    from jaxreplay.experiments import dqn
    from jaxreplay.paper.reproduce import settings

    if env.endswith("-MinAtar"):  # the convolutional network: its backward pass has kernels of its own
        setup, hp = settings.minatar_setting(env, min(SIZES[0], steps), total_steps=steps, segments=1)
    else:
        setup, hp = settings.paper_setting(env, SIZES[0], adaptive=False)
        setup = dqn.with_total_steps(setup, steps)
    setup = dataclasses.replace(setup, max_capacity=max(SIZES))
    fixed = {k: v for k, v in hp._asdict().items() if k != "memory_size"}
    fixed["learning_starts"] = min(fixed["learning_starts"], steps // 4)
    return sweep_lib.Sweep("dqn", seeds=seeds, seed=0, fixed=fixed, grid={"memory_size": list(SIZES)}, setup=setup)


def compile_as(variant: str) -> None:
    """Make this process's DQN experiment compile as ``variant`` says (for the rest of the process)."""
    from jaxreplay.experiments import COMPILER_OPTIONS_GPU, dqn

    # On the engine's own GPU options, not on those of an earlier call: a variant names all of its options.
    gpu = {**COMPILER_OPTIONS_GPU, **(VARIANTS[variant] or {})}
    # experiments.get reads the module's EXPERIMENT when a sweep asks for it
    dqn.EXPERIMENT = dqn.EXPERIMENT._replace(compiler_options={**dqn.EXPERIMENT.compiler_options, "gpu": gpu})


def compute(variant: str, out: pathlib.Path, env: str, seeds: int, steps: int) -> None:
    """Compute the sweep into ``out`` in this process, compiled as ``variant`` says."""
    from jaxreplay.engine import sweep as sweep_lib

    compile_as(variant)
    sweep_lib.run(_sweep(env, seeds, steps), out, progress=False)


def agreement(a: pathlib.Path, b: pathlib.Path) -> tuple[int, int]:
    """``(runs whose every summary is bit-identical in folders a and b, runs)``."""
    import numpy as np
    import xarray as xr

    with xr.open_dataset(a / "results.nc") as da, xr.open_dataset(b / "results.nc") as db:
        names = [n for n in da.data_vars if "seed" in da[n].dims and n in db.data_vars]
        same = None
        for name in names:
            x, y = np.asarray(da[name]), np.asarray(db[name])
            eq = (x == y) | (np.isnan(x) & np.isnan(y)) if x.dtype.kind == "f" else x == y
            eq = eq.reshape(eq.shape[: da[name].dims.index("seed") + 1] + (-1,)).all(axis=-1)
            same = eq if same is None else same & eq
        return int(same.sum()), int(same.size)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.determinism", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--seeds", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--env", default="Acrobot-v1")
    parser.add_argument("--variant", action="append", choices=list(VARIANTS), dest="variants",
                        help="compile only this way (repeatable; default: every variant)")
    parser.add_argument("--one", choices=sorted(VARIANTS), help=argparse.SUPPRESS)  # a child process
    args = parser.parse_args(argv)
    if args.one:
        compute(args.one, args.out, args.env, args.seeds, args.steps)
        return 0
    import jax

    rows, seconds = [], {}
    device = jax.devices()[0]

    def write() -> None:  # after every variant: a deadline (timeout on a lent GPU) keeps the finished rows
        text = "\n".join(
            [
                f"# The same DQN sweep in two processes ({args.env}, memories {SIZES}, {args.seeds} seeds, "
                f"{args.steps} steps)",
                "",
                f"Device: {device.device_kind} ({device.platform}), jax {jax.__version__}.",
                "",
                "| compiled | runs bit-identical in both processes | wall time of each process |",
                "| --- | --- | --- |",
                *rows,
                "",
            ]
        )
        (args.out / "determinism.md").write_text(text)

    for variant in args.variants or VARIANTS:
        folders, failed = [], None
        for process in (1, 2):
            folder = args.out / f"{variant.replace(' ', '_').replace(',', '')}-{process}"
            shutil.rmtree(folder, ignore_errors=True)  # an earlier call's: a resumed sweep would compute nothing
            t0 = time.perf_counter()
            command = [sys.executable, "-m", "benchmarks.determinism", str(folder), "--one", variant]
            command += ["--seeds", str(args.seeds), "--steps", str(args.steps), "--env", args.env]
            rc = subprocess.run(command).returncode  # a flag this XLA rejects fails its row, not the others
            seconds[folder.name] = time.perf_counter() - t0
            folders.append(folder)
            if rc != 0:
                failed = f"failed (exit {rc}: the child's message is above)"
                break
        if failed:
            rows.append(f"| {variant} | {failed} | – |")
        else:
            same, runs = agreement(*folders)
            times = ", ".join(f"{seconds[f.name]:.1f} s" for f in folders)
            rows.append(f"| {variant} | {same} of {runs} | {times} |")
        print(rows[-1], flush=True)
        write()
    print(f"wrote {args.out / 'determinism.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
