"""Type aliases shared by the package (static typing only; nothing here changes what runs).

Arrays are typed with JAX's own names: :class:`jax.typing.ArrayLike` for an
input that may be traced or concrete (a JAX array or tracer, a NumPy array or
scalar, a Python number), :class:`jax.Array` for an array that a function
returns or that must already be a JAX array (a PRNG key, a state field).
:data:`PyTree` is the one ``Any``: a structure chosen by the user.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from jax import Array
from jax.typing import ArrayLike

PyTree: TypeAlias = Any
"""Any pytree of arrays (nested tuples, lists, dicts, NamedTuples, dataclasses): its structure is the caller's, so no
narrower static type fits (optax's ``Params`` and chex's ``ArrayTree`` are ``Any`` for the same reason)."""

__all__ = ["Array", "ArrayLike", "PyTree"]
