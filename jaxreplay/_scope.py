"""The JAX settings the experiments are written for, scoped to a call.

A notebook may turn on JAX settings meant for its own code: a global 64-bit
mode (``jax_enable_x64``, e.g. for the float64 theory), strict dtype promotion
(``jax_numpy_dtype_promotion="strict"``) or rank checks
(``jax_numpy_rank_promotion="raise"``). The experiments compute in float32
with JAX's standard promotion: under x64 their random draws and constants
would become float64 and a run would draw other numbers (or not trace at all),
and under the strict checks they would not trace. The entry points that
compute runs (the engine's ``run``, the experiments' ``run`` and
``run_batch``) therefore trace inside :func:`experiment_settings`; the user's
settings are back after the call.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TypeVar

import jax
import jax.numpy as jnp
import numpy as np

F = TypeVar("F", bound=Callable)

_NARROWER = {np.dtype(np.float64): np.float32, np.dtype(np.int64): np.int32, np.dtype(np.uint64): np.uint32}


@contextlib.contextmanager
def experiment_settings() -> Iterator[None]:
    """Within the block: float32 (``jax_enable_x64`` off), standard dtype promotion, ranks promoted."""
    with jax.enable_x64(False), jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        yield


# JAX settings that change how XLA compiles a program without changing its lowered text (so no program
# fingerprint sees them): (name, default, as said where set otherwise). A resume under
# JAX_DISABLE_MOST_OPTIMIZATIONS=1 mixed runs that differed from the others by up to 15x (a probe).
_COMPILE_SETTINGS = (
    ("jax_disable_most_optimizations", False, "most optimizations disabled"),
    ("jax_optimization_level", "UNKNOWN", "optimization level {}"),
    ("jax_exec_time_optimization_effort", 0.0, "execution-time optimization effort {}"),
    ("jax_memory_fitting_effort", 0.0, "memory-fitting effort {}"),
)


def lowering_settings() -> str:
    """The caller's JAX settings that change the programs a run is compiled into, as text:
    ``"matmul precision default, shardy partitioner"``, followed by each setting that changes how XLA compiles
    them where it is not JAX's default (``", most optimizations disabled"``).

    They are the caller's choice, not scoped (``jax_default_matmul_precision="highest"`` keeps a GPU's float32
    products out of TF32, which rounds otherwise), so what keeps compiled programs or finished runs names them
    (the engine's program cache, :class:`jaxreplay.engine.batch.Batch`). Settings at their defaults are left
    out, so the text is what it was before they were named."""
    precision = getattr(jax.config, "jax_default_matmul_precision") or "default"
    shardy = getattr(jax.config, "jax_use_shardy_partitioner")
    text = f"matmul precision {precision}, {'shardy' if shardy else 'GSPMD'} partitioner"
    for name, default, said in _COMPILE_SETTINGS:
        value = jax.config.values.get(name, default)
        if value != default:
            text += ", " + said.format(value)
    return text


def in_experiment_settings(function: F) -> F:
    """``function`` called (so traced) within :func:`experiment_settings`."""

    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        # Arrays the caller made, or traced, in 64 bits: narrowed here, outside the scope.
        if getattr(jax.config, "jax_enable_x64"):
            args, kwargs = jax.tree.map(_to_32_bits, (args, kwargs))
        with experiment_settings():
            return function(*args, **kwargs)

    return wrapped  # type: ignore[return-value]


def _to_32_bits(leaf):
    """A 64-bit array (or tracer) as the 32-bit one the experiments compute with; anything else unchanged.

    Narrowed before the scope opens, so that JAX does not warn inside it that it truncates (a caller's
    ``jax.jit(run)`` under x64 traces Python numbers as 64-bit). An integer is clipped into the 32-bit range
    first: one too large for it stays too large (flagged where it is checked), it does not wrap to a small one."""
    if not isinstance(leaf, jax.Array) or leaf.dtype not in _NARROWER:
        return leaf
    narrow = _NARROWER[leaf.dtype]
    if jnp.issubdtype(narrow, jnp.integer):
        info = jnp.iinfo(narrow)
        leaf = jnp.clip(leaf, info.min, info.max)
    return leaf.astype(narrow)
