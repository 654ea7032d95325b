"""Run the project's benchmarks and write one markdown report.

    python -m benchmarks [--quick | --full] [--only NAME ...] [--out FILE.md]

Progress goes to stderr; the report goes to stdout and, with ``--out``, to a file.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import sys
import time

from benchmarks import BENCHMARKS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", help="fewer configurations, about a minute on 2 cores (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full", help="every configuration, ~4-6 min on 2 cores")
    parser.set_defaults(mode="quick")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable); one of: {', '.join(sorted(BENCHMARKS))}",
    )
    parser.add_argument("--out", metavar="FILE.md", help="also write the markdown report to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = args.only or list(BENCHMARKS)

    from benchmarks import _timing  # imports jax: after argument errors are reported

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.perf_counter()
    machine = _timing.machine_markdown()
    sections = []
    headlines = []
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        progress(f"== {name}: {module.TITLE} ({args.mode})")
        t0 = time.perf_counter()
        body = module.run(args.mode, progress)
        elapsed = time.perf_counter() - t0
        sections.append(f"## {module.TITLE}\n\n{body}\n\n_`{name}` took {elapsed:.0f} s._")
        headlines += [[f"`{name}`", *row] for row in getattr(module, "HEADLINES", [])]
    total = time.perf_counter() - started
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report = "\n\n".join(
        [
            f"# jaxreplay benchmarks ({args.mode})",
            f"`python -m benchmarks --{args.mode}{''.join(' --only ' + n for n in args.only or [])}`, "
            f"{now}, {total:.0f} s in total.",
            machine,
            "## Summary of ratios\n\n" + _timing.markdown_table(["benchmark", "quantity", "measured", "target"], headlines)
            if headlines else "",
            *sections,
        ]
    )
    print(report)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(report + "\n")
        progress(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
