"""Argument checks shared by the public API.

Every check runs in plain Python *before* any tracing or compilation, and only
when the value is concrete (a Python number, a NumPy value, or a JAX array
outside ``jit``). Traced values pass through unchecked: jitted code cannot
raise, so the functions that accept them clip and flag instead (each says how
in its docstring; :func:`clip_traced_int` is the shared clip for integers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_UNSHOWN = object()  # FieldError's value when its message does not show one


class FieldError(ValueError):
    """A ``ValueError`` about one field's value, naming the field as the library does.

    A caller that names things otherwise (the command line's ``--step-size``
    for ``step_size``) reads the parts instead of rewriting the message.

    Attributes:
        field: the field, dotted as the library names it (``"step_size"``,
            ``"setup.max_capacity"``, ``"fixed.step_size"``).
        problem: the rest of the sentence (``"must be >= 0.0, got -1.0."``).
        value: the value refused, where the message shows it beside the field
            (else None, and :attr:`shows_value` is False).
        about: whether the problem is about what that value names (given as
            ``about=``) rather than said of the value itself (``value=``).

    The message is ``f"{field} {problem}"`` (``step_size must be >= 0.0, got
    -1.0.``); with ``value=v``, ``f"{field} = {v!r} {problem}"``
    (``fixed.step_size = 1e-50 does not fit a float32 ...``); with ``about=v``,
    ``f"{field} {v!r}: {problem}"`` (``env_id 'Pendulum-v1': DQN needs ...``).
    """

    def __init__(self, field: str, problem: str, value: object = _UNSHOWN, *, about: object = _UNSHOWN):
        if value is not _UNSHOWN and about is not _UNSHOWN:
            raise TypeError("FieldError takes value= or about=, not both.")
        self.field, self.problem, self.about = field, problem, about is not _UNSHOWN
        shown = about if self.about else value
        self.shows_value = shown is not _UNSHOWN
        self.value = shown if self.shows_value else None
        if not self.shows_value:
            message = f"{field} {problem}"
        elif self.about:
            message = f"{field} {shown!r}: {problem}"
        else:
            message = f"{field} = {shown!r} {problem}"
        super().__init__(message)


def concrete_value(value: object) -> np.ndarray | None:
    """Return ``value`` as a NumPy scalar/array if it is concrete, else ``None``; a bfloat16 (or another
    ml_dtypes float, whose NumPy kind is ``"V"``, not ``"f"``) as the float32 array of the same values."""
    if isinstance(value, jax.core.Tracer):
        return None
    try:
        arr = np.asarray(value)
    except Exception:  # e.g. a tracer hidden in a container: nothing to check
        return None
    if arr.dtype.kind != dtype_kind(arr.dtype):  # a bfloat16: kind "V" to NumPy
        return arr.astype(np.float32)  # (exact: every bfloat16 is a float32)
    return arr


def dtype_kind(dtype) -> str:
    """NumPy's kind of ``dtype`` (``"f"``, ``"i"``, ...), with ``"f"`` for bfloat16 and the other ml_dtypes
    floats too, whose NumPy kind is ``"V"``."""
    return "f" if jnp.issubdtype(dtype, jnp.floating) else np.dtype(dtype).kind


def check_choice(name: str, value: object, allowed: Iterable[object]) -> None:
    """Raise :class:`FieldError` naming ``name`` unless ``value`` is one of ``allowed`` (static options: strings,
    or ``None`` where it is one).

    Only a string or ``None`` is an option: ``value in allowed`` with an array raised NumPy's "truth value of an
    array is ambiguous", naming nothing, and a large value's repr filled the message (it is named by its type)."""
    allowed = tuple(allowed)
    if not isinstance(value, (str, type(None))) or value not in allowed:
        shown = repr(value)
        if len(shown) > 80:
            shown = f"a value of type {type(value).__name__}"
        raise FieldError(name, f"must be one of {allowed}, got {shown}.")


def check_int(
    name: str, value: object, low: int | None = None, high: int | None = None, *, scalar: bool = False
) -> None:
    """Raise :class:`FieldError` naming ``name`` unless every concrete entry of ``value`` is an integer in
    [low, high] (and, with ``scalar``, ``value`` is one number: :func:`check_scalar`)."""
    if scalar:
        check_scalar(name, value)
    arr = concrete_value(value)
    if arr is None:
        return
    # The kind first (a string or None has no remainder), NaN and inf before the remainder (no warning); a
    # Python int beyond int64 is an object to NumPy, and whole.
    python_ints = arr.dtype.kind == "O" and all(type(v) is int for v in arr.reshape(-1))
    whole = (
        arr.dtype.kind in "iu"
        or python_ints
        or (arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(np.mod(arr, 1) == 0))
    )
    if not whole or _holds_bool(value):
        raise FieldError(name, f"must be an integer, got {value!r}.")
    _check_range(name, arr, low, high)


def check_scalar(name: str, value: object) -> None:
    """Raise :class:`FieldError` naming ``name`` unless ``value`` is one number (shape ``()``), concrete or
    traced: an array where a scalar hyperparameter belongs would be broadcast against whatever it meets
    (each slot of a batch its own exponent) or fail far from the cause. Under ``vmap`` each member's
    value is a scalar, which is what a sweep passes."""
    shape = np.shape(value)  # type: ignore[call-overload]  # (any array-like; a tracer has .shape)
    if shape != ():
        raise FieldError(name, f"must be a scalar (one number), got shape {shape}; sweep values with vmap.")


def check_bool(name: str, value: object) -> None:
    """Raise :class:`FieldError` naming ``name`` unless every concrete entry of ``value`` is a bool or 0/1
    (a string ``"False"``, None or NaN would otherwise run as True, or fail in JAX naming nothing)."""
    given = concrete_value(value)
    if given is not None and (given.dtype.kind not in "biu" or not np.all((given == 0) | (given == 1))):
        raise FieldError(name, f"must be True or False, got {value!r}.")


def _holds_bool(value: object) -> bool:
    """Whether a list or tuple holds a ``bool`` anywhere (NumPy turns ``[1, True]`` into integers)."""
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, (bool, np.bool_)) or _holds_bool(v) for v in value)
    return False


def check_float(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    high_inclusive: bool = True,
    *,
    scalar: bool = False,
    low_inclusive: bool = True,
) -> None:
    """Raise :class:`FieldError` naming ``name`` unless every concrete entry is a finite number in the range
    (``low_inclusive=False``: above ``low``, not at it) and, with ``scalar``, ``value`` is one number
    (:func:`check_scalar`)."""
    if scalar:
        check_scalar(name, value)
    arr = concrete_value(value)
    if arr is None:
        return
    if arr.dtype.kind not in "iuf" or _holds_bool(value):
        raise FieldError(name, f"must be a real number, got {value!r}.")
    if not np.all(np.isfinite(arr)):
        raise FieldError(name, f"must be finite, got {value!r}.")
    _check_range(name, arr, low, high, high_inclusive, low_inclusive)


# Every traced integer runs as an int32, every traced float as a float32 (JAX's default; x64 is never enabled).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
FLOAT32_MAX = float(np.finfo(np.float32).max)  # 3.4028235e38
FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # 1.1754944e-38, the smallest normal float32


def as_float(value: float | np.number) -> float:
    """``float(value)``, or ±inf for an integer beyond float64 (``float(10**400)`` raises OverflowError)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def float32_problem(value: float | np.number) -> str | None:
    """Why the finite number ``value`` does not survive the cast to float32, or None if it does.

    Above ``FLOAT32_MAX`` in magnitude it would run as ±inf. A nonzero value
    below ``FLOAT32_TINY`` would run as 0: it rounds to 0 or to a subnormal
    float32, and XLA flushes subnormals to zero on CPU and GPU (measured:
    ``jit(lambda x: x * 1e30)(float32(1e-40))`` is 0), so a run labelled 1e-40
    would really be a run at 0. Precision loss of normal values (0.1 is
    0.100000001 in float32) is not a problem: each value still runs as itself,
    to about 7 significant digits.
    """
    magnitude = abs(as_float(value))
    if magnitude > FLOAT32_MAX:
        return f"does not fit a float32 (at most {FLOAT32_MAX:.4g} in magnitude): it would run as inf"
    if 0.0 < magnitude < FLOAT32_TINY:
        return (
            f"does not fit a float32 (its smallest normal magnitude is {FLOAT32_TINY:.4g}): it would run as 0 "
            "(XLA flushes subnormal numbers to zero); give a larger value"
        )
    return None


def check_float32(name: str, value: object) -> None:
    """Raise :class:`FieldError` naming ``name`` if a concrete finite entry of ``value`` (a number or an array of them)
    does not survive the cast to float32 (:func:`float32_problem`)."""
    arr = concrete_value(value)
    if arr is None or arr.dtype.kind not in "iuf":
        return
    for x in arr.reshape(-1):
        problem = float32_problem(x) if np.isfinite(x) else None
        if problem:
            raise FieldError(name, f"{problem}.", value)


def check_static_int(name: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """Check a *static* integer (a shape): it must be a Python/NumPy int, not a traced value (else
    :class:`FieldError` naming ``name``)."""
    if isinstance(value, jax.core.Tracer) or isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise FieldError(name, f"must be a Python int (it sets an array shape and is static), got {value!r}.")
    # (a shape or an index: within int32 whatever the caller's bound; 10**400 failed inside JAX)
    _check_range(name, np.asarray(value), low, INT32_MAX if high is None else min(high, INT32_MAX))
    return int(value)


def clip_traced_int(value: object, low: int, high: int, fallback: object) -> tuple[jax.Array, jax.Array]:
    """``(int32[] value in [low, high], bool[] flag)`` for a possibly traced integer setting.

    Out of range: clipped; fractional: truncated; NaN: ``fallback``. The flag
    is set whenever the result differs from ``value``. (NaN must be caught
    before the cast: ``clip`` keeps NaN and ``int32(NaN)`` is 0 on CPU.)
    """
    value = jnp.asarray(value)
    # A bool is no count (flagged); a type narrower than 32 bits is widened first, because the
    # clip computes in the value's type and its bound would wrap there (300 in uint8 is 44).
    is_bool = value.dtype == jnp.bool_
    if is_bool or value.dtype.itemsize < 4:
        value = value.astype(jnp.float32 if jnp.issubdtype(value.dtype, jnp.floating) else jnp.int32)
    is_nan = jnp.isnan(value) if jnp.issubdtype(value.dtype, jnp.floating) else jnp.bool_(False)
    clipped = jnp.clip(jnp.where(is_nan, low, value), low, high)
    result = jnp.where(is_nan, jnp.asarray(fallback, jnp.int32), clipped.astype(jnp.int32))
    return result, is_nan | is_bool | (result != value)


class Bounds(NamedTuple):
    """The values a numeric hyperparameter allows, shared by the concrete check and the traced flag.

    An experiment lists its fields' bounds once; :func:`check_bounds` refuses a
    concrete value outside them (a :class:`FieldError` naming the field) and
    :func:`outside_bounds` flags a traced one, so the two cannot disagree.

    Attributes:
        integer: the field takes integers (a fractional value is outside).
        low, high: the closed range (None: unbounded on that side).
        high_inclusive: False for a half-open ``[low, high)``.
        low_inclusive: False for a half-open ``(low, high]`` (a value that must be positive).
    """

    integer: bool
    low: float | None = None
    high: float | None = None
    high_inclusive: bool = True
    low_inclusive: bool = True


NONNEGATIVE = Bounds(integer=False, low=0.0)
"""A real number ``>= 0`` that runs as itself in float32 (the replay memory's exponents and floors)."""


def check_bounds(name: str, value: object, bounds: Bounds, *, scalar: bool = False) -> None:
    """:func:`check_int` within int32, or :func:`check_float` and :func:`check_float32` with the range read on
    the float32 that runs, of ``value`` against ``bounds`` (concrete values only): this refuses exactly what
    :func:`outside_bounds` flags (``tests/test_traced_bounds.py``). With ``scalar``, ``value`` must be one
    number (:func:`check_scalar`)."""
    if scalar:
        check_scalar(name, value)
    if bounds.integer:  # within int32 too, the type it runs as (a NumPy int64 2**32 + 100 would wrap to 100)
        low = INT32_MIN if bounds.low is None else max(bounds.low, INT32_MIN)
        high = INT32_MAX if bounds.high is None else min(bounds.high, INT32_MAX)
        check_int(name, value, low=low, high=high)  # type: ignore[arg-type]
        return
    check_float(name, value)
    check_float32(name, value)  # 1e-40 would run as 0 under its label (a replay ratio: no updates)
    # The range on the float32 that runs, as outside_bounds reads it: 0.99999999 is in [0, 1) but runs as
    # 1.0 (a discount of 1: an infinite fixed point), and 1.00000001 runs as 1.0, inside [0, 1].
    given = concrete_value(value)
    if given is None:
        return
    ran = given.astype(np.float32)
    try:
        _check_range(name, ran, bounds.low, bounds.high, bounds.high_inclusive, bounds.low_inclusive)
    except FieldError as error:
        try:  # outside as given too (-1e-06 runs as -9.9999997e-07): said plainly, without the float32
            _check_range(name, given, bounds.low, bounds.high, bounds.high_inclusive, bounds.low_inclusive)
        except FieldError:
            raise error from None
        raise FieldError(name, f"(runs as {_show(ran)}, a float32): {error.problem}", value) from None


def outside_bounds(value: object, bounds: Bounds) -> jax.Array:
    """``bool[]``: whether any entry of a (possibly traced) ``value`` is one :func:`check_bounds` refuses.

    NaN and ±inf are outside, and so is a fractional value of an integer field
    (so this must see the value *before* any cast to an integer dtype: the cast
    would truncate 2.5 to 2; so is one beyond int32), and a float32 subnormal (:func:`check_float32`:
    it runs as 0). Booleans pass: a traced value has no "bool" kind to refuse
    once it is a number.
    """
    arr = jnp.asarray(value)
    if arr.dtype == jnp.bool_:
        arr = arr.astype(jnp.int32)
    bad = jnp.zeros(arr.shape, jnp.bool_)
    if jnp.issubdtype(arr.dtype, jnp.floating):  # integers are finite and whole
        bad = ~jnp.isfinite(arr)
        if bounds.integer:  # (a float beyond int32 would run as another integer once cast; 2**31 is exact in
            # float32, INT32_MAX is not)
            bad = bad | (jnp.floor(arr) != arr) | (arr < -(2.0**31)) | (arr >= 2.0**31)
        if arr.dtype == jnp.float32:  # check_float32's other half: a subnormal runs as 0 (XLA flushes it), so
            # compare bits, not values: exponent field 0 with a nonzero fraction
            bits = jax.lax.bitcast_convert_type(arr, jnp.uint32)
            bad = bad | (((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0))
    if bounds.low is not None:
        bad = bad | ((arr < bounds.low) if bounds.low_inclusive else (arr <= bounds.low))
    if bounds.high is not None:
        bad = bad | ((arr > bounds.high) if bounds.high_inclusive else (arr >= bounds.high))
    return jnp.any(bad)


def check_increasing(name: str, values: object, strict: bool = True, min_size: int = 1) -> np.ndarray:
    """``values`` as a NumPy array, refused (``ValueError`` naming ``name``) unless 1-D, of at least ``min_size``
    values and strictly increasing (non-decreasing where not ``strict``): for code that reads a grid's first and
    last entries as its smallest and largest, its neighbours as the next values, or draws it as a line or a
    contour's coordinates."""
    array = np.asarray(values)
    steps = np.diff(array) if array.ndim == 1 else np.zeros(1)
    if array.ndim != 1 or array.size < max(min_size, 1) or np.any(steps <= 0 if strict else steps < 0):
        order = "strictly increasing" if strict else "non-decreasing"
        size = f" of at least {min_size} values" if min_size > 1 else ""
        raise ValueError(f"{name} must be a {order} 1-D array{size} (sort it, and what goes with it).")
    return array


def check_known(owner: str, given: Iterable[str], known: Iterable[str]) -> None:
    """Raise ``ValueError`` listing the names of ``given`` not in ``known`` (``owner``'s parameters), and the
    known ones, if there are any."""
    known = sorted(known)
    if unknown := sorted(set(given) - set(known)):
        raise ValueError(f"{unknown} are not parameters of {owner}; it has {known}.")


def _check_range(
    name: str,
    arr: np.ndarray,
    low: float | None,
    high: float | None,
    high_inclusive: bool = True,
    low_inclusive: bool = True,
) -> None:
    allowed = _allowed(low, high, high_inclusive, low_inclusive)
    if low is not None and (np.any(arr < low) if low_inclusive else np.any(arr <= low)):
        raise FieldError(name, f"must be {'>=' if low_inclusive else '>'} {low}{allowed}, got {_show(arr)}.")
    if high is not None and (np.any(arr > high) if high_inclusive else np.any(arr >= high)):
        raise FieldError(name, f"must be {'<=' if high_inclusive else '<'} {high}{allowed}, got {_show(arr)}.")


def _allowed(low: float | None, high: float | None, high_inclusive: bool, low_inclusive: bool = True) -> str:
    if low is None or high is None:
        return ""
    return f" (allowed range {'[' if low_inclusive else '('}{low}, {high}{']' if high_inclusive else ')'})"


def _show(arr: np.ndarray) -> str:
    if arr.ndim == 0:
        return number_text(arr)
    return f"an array with min {number_text(arr.min())} and max {number_text(arr.max())}"


def number_text(x: np.ndarray | np.generic) -> str:
    """A Python number's repr, not NumPy's; a float32 with its own shortest digits (-0.1, not -0.10000000149011612)."""
    if np.asarray(x).dtype == np.float32:
        return repr(float(str(np.float32(x))))
    return repr(np.asarray(x).item())
