"""``jaxreplay sweep CONFIG.toml --out DIR``: run a sweep declared in a TOML file (resumable)."""

from __future__ import annotations

import argparse

from jaxreplay.cli.common import positive, run_sweep

# The memory budget's settings as this command names them (the engine's advice names the [run] keys).
BUDGET = "--memory-budget-mib / --memory-fraction"


def add_parser(commands) -> None:
    """Declare ``jaxreplay sweep`` and its options among ``commands`` (argparse's subparsers)."""
    sw = commands.add_parser("sweep", help="run a sweep declared in a TOML file (resumable)")
    sw.add_argument("config", help="TOML file: experiment, seeds, [setup], [fixed], [grid] or [[points]], [run]")
    sw.add_argument("--out", required=True, help="output folder (rerun with the same config to resume)")
    sw.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="most runs per compiled call, over all devices (at least 2 a device; on a CPU, one device per core)",
    )
    sw.add_argument("--memory-fraction", type=float, default=None, help="fraction of free device memory to use")
    sw.add_argument("--memory-budget-mib", type=float, default=None, help="device memory budget in MiB")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``jaxreplay sweep``: the TOML file read into a sweep and run options, the sweep run, its statistics shown."""
    from jaxreplay import _files
    from jaxreplay.engine import declaration
    from jaxreplay.engine import sweep as sweep_lib

    config = declaration.parse_toml(_files.read_text(args.config, "CONFIG"), f"CONFIG {args.config}")
    options = sweep_lib.run_options(config)
    if args.chunk_size is not None:
        positive("chunk-size", args.chunk_size)
        options["chunk_size"] = args.chunk_size
    if args.memory_fraction is not None:
        if not 0.0 < args.memory_fraction <= 1.0:  # (NaN fails too)
            raise ValueError(f"--memory-fraction must be in (0, 1], got {args.memory_fraction}.")
        options["memory_fraction"] = args.memory_fraction
    if args.memory_budget_mib is not None:
        if not 0.0 < args.memory_budget_mib * 2**20 < float("inf"):  # (in bytes: 1e308 MiB overflowed there)
            raise ValueError(f"--memory-budget-mib must be a positive number of MiB, got {args.memory_budget_mib}.")
        options["memory_budget"] = max(int(args.memory_budget_mib * 2**20), 1)
    sweep = sweep_lib.Sweep.from_dict(config)
    result = run_sweep(sweep, args.out, budget=BUDGET, progress=not args.quiet, **options)
    print(result.stats.describe())
    print(f"results: {args.out}/results.nc (open with jaxreplay.engine.sweep.load)")
    return 0
