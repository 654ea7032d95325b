"""The JAX settings the experiments are written for, scoped to a call.

A notebook may turn on JAX settings meant for its own code: a global 64-bit
mode (``jax_enable_x64``, e.g. for the float64 theory), strict dtype promotion
(``jax_numpy_dtype_promotion="strict"``) or rank checks
(``jax_numpy_rank_promotion="raise"``). The experiments compute in float32
with JAX's standard promotion: under x64 their random draws and constants
would become float64 and a run would draw other numbers (or not trace at all),
and under the strict checks they would not trace. The entry points that
compute runs (the engine's ``run``, the experiments' ``run_batch``) therefore
trace inside :func:`experiment_settings`; the user's settings are back after
the call.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TypeVar

import jax

F = TypeVar("F", bound=Callable)


@contextlib.contextmanager
def experiment_settings() -> Iterator[None]:
    """Within the block: float32 (``jax_enable_x64`` off), standard dtype promotion, ranks promoted."""
    with jax.enable_x64(False), jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        yield


def in_experiment_settings(function: F) -> F:
    """``function`` called (so traced) within :func:`experiment_settings`."""

    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        with experiment_settings():
            return function(*args, **kwargs)

    return wrapped  # type: ignore[return-value]
