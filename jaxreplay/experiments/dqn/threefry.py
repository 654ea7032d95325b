"""Threefry-2x32 as straight-line code on the CPU, inside DQN's step: the same bits, far fewer kernels.

JAX lowers its random-number hash (Threefry-2x32, 20 rounds in five groups
of four) on the CPU as a rolled loop of five iterations, to keep compile
times short. Every ``split``, ``fold_in`` and draw of a DQN step is then an
XLA ``while`` loop of about ten kernels per iteration that nothing fuses
across: of the 1,231 kernels and 62 loop iterations of one 100-seed CartPole
step, all but 121 kernels and 2 iterations were those loops
(``benchmarks/README.md``, "What binds the DQN step on the 2-core CPU").
Written out, the hash is 60 integer operations that XLA fuses into its
neighbours.

:func:`unrolled` is a context: the CPU lowering registered here writes the
hash out for the draws traced inside it and lowers every other one with
JAX's own rule, so no other program changes. The hash is the same integer
function either way (tested against ``jax.random``), so the bits drawn, and
every result computed from them, are the same. Where this JAX does not expose
its CPU rule the registration is skipped and nothing changes.
"""

from __future__ import annotations

import contextlib

import jax
import numpy as np
from jax import lax
from jax.extend.random import threefry2x32_p
from jax.interpreters import mlir

_MARK = "jaxreplay_threefry"  # the XLA metadata key that :func:`unrolled` sets
# Threefry-2x32 (Salmon et al., 2011): the rotation of each round, four rounds per group, alternating.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)  # the key schedule's third word is k0 ^ k1 ^ this constant


def hash_2x32(k0, k1, x0, x1):
    """Threefry-2x32 of counters ``(x0, x1)`` under key ``(k0, k1)``, all ``uint32`` (broadcast): 5 groups of
    4 rounds (add, rotate, xor), the key and the group number injected after each group."""
    keys = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = x0 + keys[0], x1 + keys[1]
    for group in range(1, 6):
        for r in _ROTATIONS[(group - 1) % 2]:
            x0 = x0 + x1
            x1 = lax.shift_left(x1, np.uint32(r)) | lax.shift_right_logical(x1, np.uint32(32 - r))
            x1 = x0 ^ x1
        x0 = x0 + keys[group % 3]
        x1 = x1 + keys[(group + 1) % 3] + np.uint32(group)
    return x0, x1


def unrolled():
    """A context manager inside which traced draws lower to the written-out hash on the CPU.

    It marks the operations traced inside it with XLA metadata (``jaxreplay_threefry=unrolled``, carried
    into the functions they call, unlike a name scope); the CPU rule reads the mark. Where JAX's default
    backend is not the CPU it does nothing, so programs for an accelerator are exactly what they were.
    """
    if not _REGISTERED or jax.default_backend() != "cpu":
        return contextlib.nullcontext()
    from jax.experimental.xla_metadata import set_xla_metadata

    return set_xla_metadata(**{_MARK: "unrolled"})


def _register() -> bool:
    try:  # JAX's own CPU rule, kept for every draw outside the scope; private, hence the guard
        from jax._src.interpreters.mlir import _platform_specific_lowerings

        default = _platform_specific_lowerings["cpu"][threefry2x32_p].rule
    except (ImportError, KeyError, AttributeError):
        return False
    written_out = mlir.lower_fun(hash_2x32, multiple_results=True)

    def rule(ctx, *args):
        metadata = getattr(ctx.jaxpr_eqn_ctx, "xla_metadata", None) or {}
        return (written_out if metadata.get(_MARK) == "unrolled" else default)(ctx, *args)

    # Not cacheable: JAX's cache of lowerings would serve one rule's result to the other.
    mlir.register_lowering(threefry2x32_p, rule, platform="cpu", cacheable=False)
    return True


_REGISTERED = _register()
