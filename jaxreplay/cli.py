"""The ``jaxreplay`` command line.

Subcommands:
    info    versions of jaxreplay and its stack, and the devices JAX sees.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import sys

import jaxreplay

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
    parser = argparse.ArgumentParser(prog="jaxreplay", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"jaxreplay {jaxreplay.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = commands.add_parser("info", help="print versions and the devices JAX sees")
    info.set_defaults(handler=_info)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
