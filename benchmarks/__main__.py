"""Run the project's benchmarks and write one markdown report.

    python -m benchmarks [--quick | --full] [--only NAME ...] [--out FILE.md] [--readme docs/benchmarks.md]

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
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", help="fewer configurations, about 10 minutes on 2 cores (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full", help="every configuration (longer: minatar alone ~3 min on 2 cores)")
    parser.set_defaults(mode="quick")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable); one of: {', '.join(sorted(BENCHMARKS))}",
    )
    parser.add_argument("--out", metavar="FILE.md", help="also write the markdown report to this file")
    parser.add_argument("--readme", metavar="docs/benchmarks.md",
                        help="also write the summary of ratios, the machine and the roofline table into this file's "
                             "<!-- benchmarks:begin/end --> block (<!-- benchmarks-gpu:begin/end --> "
                             "when JAX's backend is a GPU)")
    return parser


def _readme_block() -> str:
    """The README block of this process's JAX backend: one per backend, so a CPU run keeps the GPU numbers."""
    import jax

    backend = jax.default_backend()
    return "benchmarks" if backend == "cpu" else f"benchmarks-{backend}"


def _check_outputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """Refuse an ``--out`` or ``--readme`` that could not be written, in one line, before any benchmark runs
    (they were found after minutes of benchmarking, as tracebacks); returns the README block to write."""
    import pathlib

    from jaxreplay.paper.reproduce.paper import read_readme

    if args.out:
        out = pathlib.Path(args.out)
        if out.is_dir() or not out.parent.is_dir():
            parser.error(f"--out {args.out}: " + ("is a folder" if out.is_dir() else f"no folder {out.parent}"))
    block = _readme_block()
    if args.readme:
        try:
            read_readme(args.readme, block)
        except ValueError as e:
            parser.error(f"--readme: {e}")
    return block


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    names = args.only or list(BENCHMARKS)
    # As the `jaxreplay` command does, before JAX starts (_check_outputs starts it): one CPU device per usable
    # core, so the engine's sweeps use them all.
    from jaxreplay.engine.batch import use_cpu_cores

    use_cpu_cores()
    block_name = _check_outputs(parser, args)

    from benchmarks import _timing  # imports jax

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.perf_counter()
    description = _timing.machine_description()
    machine = _timing.machine_markdown(description)
    sections = []
    headlines = []
    rows: dict[str, list[list[str]]] = {}  # each benchmark run so far: its summary rows (the --readme block's)
    extras: dict[str, list[str]] = {}  # blocks a module adds to the --readme block (the roofline table)
    started_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    failed: list[str] = []
    command = f"python -m benchmarks --{args.mode}{''.join(' --only ' + n for n in args.only or [])}"

    def write(done: int) -> None:
        """Write the report (and the README block) of the benchmarks run so far: a run stopped by a deadline
        (``timeout`` on a lent GPU machine) keeps every finished benchmark's numbers."""
        total = time.perf_counter() - started
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        partial = "" if done == len(names) else f" (partial: {done} of {len(names)} benchmarks finished)"
        summary = _timing.markdown_table(["benchmark", "quantity", "measured", "target"], headlines)
        report = "\n\n".join(
            [
                f"# jaxreplay benchmarks ({args.mode})",
                f"`{command}`, {now}, {total:.0f} s in total{partial}.",
                machine,
                "## Summary of ratios\n\n" + summary if headlines else "",
                *sections,
            ]
        )
        from jaxreplay._files import atomic_write_text  # a full disk leaves the old file whole

        if done == len(names):
            print(report)
        if args.out:
            atomic_write_text(args.out, report + "\n")
            progress(f"wrote {args.out}{partial}")
        if args.readme:
            from benchmarks import _readme_block
            from jaxreplay.paper.reproduce.paper import read_readme, replace_block

            where = (f"{description['cpu']}, {description['cores']} cores, {description['memory']}, JAX backend "
                     f"`{description['jax backend']}` ({description['jax devices']})")
            text = read_readme(args.readme, block_name)  # (checked before the benchmarks: read again, as it is now)
            begin, end = f"<!-- {block_name}:begin -->", f"<!-- {block_name}:end -->"
            block = _readme_block.compose(
                text.split(begin)[1].split(end)[0], order=list(BENCHMARKS), where=where, run=started_at,
                command=command, canonical=f"python -m benchmarks --{args.mode} --readme docs/benchmarks.md",
                partial=partial, rows=rows, extras=extras)
            atomic_write_text(args.readme, replace_block(text, block_name, block))  # never a truncated README
            progress(f"updated {args.readme}{partial}")

    for done, name in enumerate(names, start=1):
        module = importlib.import_module(BENCHMARKS[name])
        progress(f"== {name}: {module.TITLE} ({args.mode})")
        t0 = time.perf_counter()
        try:
            body = module.run(args.mode, progress)
        except Exception as e:  # one failed benchmark (a failed agreement check) must not lose the others' numbers
            failed.append(name)
            message = " ".join(f"{type(e).__name__}: {e}".split())
            progress(f"  FAILED: {message}")
            body = f"**Failed**: {message}"
        elapsed = time.perf_counter() - t0
        sections.append(f"## {module.TITLE}\n\n{body}\n\n_`{name}` took {elapsed:.0f} s._")
        if name in failed:
            # A module may have set its ratios before it failed (dqn's _report before _scaling): their numbers
            # went with the failed section, so the summary (and the README block) says it failed instead.
            rows[name] = [["failed: " + message.replace("|", "/"), "–", "–"]]
        else:
            rows[name] = [list(row) for row in getattr(module, "HEADLINES", [])]
            extras[name] = list(getattr(module, "README", []))
        headlines += [[f"`{name}`", *row] for row in rows[name]]
        if done < len(names):
            write(done)
    write(len(names))
    if failed:
        progress(f"failed: {', '.join(failed)} (their sections say why)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
