"""The ``jaxreplay`` command line.

Subcommands, one module each:
    info        versions of jaxreplay and its stack, and the devices JAX sees.
    linesearch  one LineSearch configuration: the ODE theory and the seed-averaged
                experiment side by side (:mod:`jaxreplay.cli.linesearch`).
    dqn         one DQN setting on a gymnax game, vmapped over seeds (:mod:`jaxreplay.cli.dqn`).
    sweep       run a sweep declared in a TOML file: ``sweep CONFIG.toml --out DIR`` (:mod:`jaxreplay.cli.sweep`).
    reproduce   reproduce the paper: ``reproduce linesearch --out DIR [--full]`` (:mod:`jaxreplay.cli.paper`).
    study       the DQN replay study: ``study dqn --env ENV --out DIR [--quick]`` (:mod:`jaxreplay.cli.paper`).

What they share (running a sweep, bad input named as options): :mod:`jaxreplay.cli.common`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib.metadata
import os
import platform
import signal
import sys
import threading
import warnings

import jaxreplay
from jaxreplay.cli import dqn, linesearch, paper, sweep

_STACK = ("jax", "jaxlib", "flax", "optax", "chex", "gymnax", "diffrax", "equinox", "numpy", "scipy", "matplotlib")


def _versions() -> dict[str, str]:
    versions = {"jaxreplay": jaxreplay.__version__, "python": platform.python_version()}
    for name in _STACK:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _info(args: argparse.Namespace) -> int:
    import jax

    for name, version in _versions().items():
        print(f"{name:<11} {version}")
    print(f"{'backend':<11} {jax.default_backend()}")
    for device in jax.devices():
        print(f"{'device':<11} {device.id}: {device.device_kind} ({device.platform})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxreplay`` argument parser (subcommands info, linesearch, dqn, sweep, reproduce, study)."""
    parser = argparse.ArgumentParser(prog="jaxreplay", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"jaxreplay {jaxreplay.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = commands.add_parser("info", help="print versions and the devices JAX sees")
    info.set_defaults(handler=_info)
    for add_parser in (linesearch.add_parser, dqn.add_parser, sweep.add_parser, paper.add_reproduce_parser):
        add_parser(commands)
    paper.add_study_parser(commands)
    return parser


def _interrupt(signum, frame) -> None:
    """SIGINT: raise KeyboardInterrupt, unless the signal landed in a garbage-collector callback (JAX registers
    one), where Python prints the exception as "ignored" and carries on: the command then ran to its end and
    exited 0 after a Ctrl-C. There the signal is sent again a moment later, when the callback has returned."""
    callbacks = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks:
            timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
            _DEFERRED.append(timer)
            timer.start()
            return
        frame = frame.f_back
    _cancel_deferred()  # (raised now: a re-send still pending would interrupt the handling of this one)
    raise KeyboardInterrupt


_DEFERRED: list[threading.Timer] = []  # re-sends of a SIGINT that landed in a gc callback


def _cancel_deferred() -> bool:
    """Cancel the pending re-sends of a deferred SIGINT; whether one had not been sent yet."""
    pending = any(not timer.finished.is_set() for timer in _DEFERRED)
    for timer in _DEFERRED:
        timer.cancel()
    _DEFERRED.clear()
    return pending


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit status (2: bad input)."""
    # Only where Python's own handler is in place (not under another program's), and put back on return.
    ours = threading.current_thread() is threading.main_thread()
    ours = ours and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # Building the parser imports JAX (about a second): a Ctrl-C then raised inside its extension's
    # initialisation, a 30-line traceback ending in a false ImportError. It is noted and answered after.
    early: list[int] = []
    if ours:
        signal.signal(signal.SIGINT, lambda signum, frame: early.append(signum))
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if early:
        print("\njaxreplay: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    if ours:
        signal.signal(signal.SIGINT, _interrupt)
    formatted = warnings.formatwarning
    warnings.formatwarning = functools.partial(_format_warning, formatted)
    strict = _escape_what_the_streams_cannot_encode()
    try:
        status = _run(args)
    finally:
        interrupted = _cancel_deferred()  # (before Python's handler is back: a re-send would land anywhere)
        warnings.formatwarning = formatted
        for stream in strict:
            stream.reconfigure(errors="strict")
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupted:  # a Ctrl-C deferred out of a gc callback as the command ended: it was interrupted all the same
        print(f"\njaxreplay {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    return status


def _escape_what_the_streams_cannot_encode() -> list:
    """stdout and stderr write a character their encoding lacks as an escape (``\\xd7`` for ``×``), where they
    raised: under an ASCII locale (``LC_ALL=POSIX``, ``PYTHONIOENCODING=ascii``) a finished sweep's summary line
    failed the command, exit 2, its results written. Returns the streams changed (set back on return)."""
    changed = []
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
            changed.append(stream)
    return changed


def _format_warning(formatted, message, category, filename, lineno, line=None) -> str:
    """The engine's warnings (a stale lock taken over, a damaged chunk set aside) as one line, ``jaxreplay:
    warning: ...``, wherever a command meets them (the study and reproduce commands printed Python's two-line
    form with a source line); any other as Python formats it. (A format, so a caller recording warnings around
    a command, ``catch_warnings(record=True)`` or ``pytest.warns``, still records them.)"""
    if category.__name__ == "SweepWarning":  # (by name: the engine is not imported by every command)
        return f"jaxreplay: warning: {message}\n"
    return formatted(message, category, filename, lineno, line)


def _run(args) -> int:
    try:
        if hasattr(args, "out"):  # every command that writes a folder: refused before anything runs
            from jaxreplay import _files

            _files.check_output_folder(args.out)
        return args.handler(args)
    except BrokenPipeError:  # the reader left (`| head`): not bad input; stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (the exit's flush would fail again)
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback (a sweep's finished chunks are kept for a resume)
        print(f"\njaxreplay {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    # Bad input, a file that cannot be read or written (a full disk: WriteError names the file, kept whole), or a
    # sweep the machine cannot hold (the engine's ResourceError, a MemoryError raised with the numbers before
    # anything runs: a study's or a reproduction's sweeps too).
    except (ValueError, OSError, MemoryError) as error:
        print(f"jaxreplay {args.command}: error: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:
        if "pip install 'jaxreplay[" not in str(error):  # not an optional dependency of ours
            raise
        print(f"jaxreplay {args.command}: error: {error}", file=sys.stderr)
        return 2


def entry() -> None:
    """The ``jaxreplay`` command: :func:`main` on ``sys.argv``, its status the process's exit status.

    After a Ctrl-C the process ends at once (``os._exit``), its output flushed: XLA may still be compiling or
    computing in its own threads, and Python's shutdown beside them crashed the process after it said
    "interrupted" (SIGSEGV, SIGABRT "pure virtual method called", in 5 of 6 tries a probe timed into a study's
    first compilation). By then every folder lock is released and every written file is whole.

    Before anything runs, JAX gets one CPU device per usable core
    (:func:`jaxreplay.engine.batch.use_cpu_cores`: a sweep on a CPU then uses every core; set
    ``JAX_NUM_CPU_DEVICES=1`` for one device). Only here, not in :func:`main`: a program calling
    :func:`main` keeps its own JAX devices."""
    from jaxreplay.engine.batch import use_cpu_cores

    use_cpu_cores()
    status = main()
    if status == 128 + signal.SIGINT:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    entry()
