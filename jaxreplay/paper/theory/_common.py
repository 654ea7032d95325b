"""Shared pieces of the theory package: parameters, validation, float64 scope."""

from __future__ import annotations

import contextlib
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation
from jaxreplay._typing import ArrayLike


class TheoryParams(NamedTuple):
    """LineSearch parameters for the theory (the paper's defaults).

    A pytree of scalars (Python floats or arrays of one shape), so it can be
    traced and vmapped.

    Attributes:
        initial_position: x0, the start of the state trajectory (paper: −5).
        speed: v ≥ 0, the length of one move per unit time (paper: 0.01).
        reward_slope: the first "real weight" (paper: β1 = 0.1). Read as the
            reward slope β1 or as the fixed-point slope θ1*, depending on
            ``real_weights`` (docs/paper_readings.md §8).
        reward_intercept: the second "real weight" (paper: β2 = 0.5), read
            likewise as β2 or θ2*.
        initial_slope: θ1⁰ (paper: 0).
        initial_intercept: θ2⁰ (paper: 1).
    """

    initial_position: ArrayLike = -5.0
    speed: ArrayLike = 0.01
    reward_slope: ArrayLike = 0.1
    reward_intercept: ArrayLike = 0.5
    initial_slope: ArrayLike = 0.0
    initial_intercept: ArrayLike = 1.0


class SolverOptions(NamedTuple):
    """How the replay ODE is solved: diffrax's Dopri8 under a PID step-size controller, in float64.

    One record for every entry point that solves the ODE (:func:`~jaxreplay.paper.theory.solve`,
    :func:`~jaxreplay.paper.theory.solve_grid`, :func:`~jaxreplay.paper.theory.final_dtheta`,
    :func:`~jaxreplay.paper.theory.memory_cusps` through :class:`~jaxreplay.paper.theory.CuspOptions`).
    Static: hashable, checked once per call by :func:`check_options`; each distinct
    (rtol, atol, max_steps) is one XLA compile per static configuration.

    Attributes:
        rtol: relative tolerance of the step-size controller (dimensionless, ≥ 0).
        atol: absolute tolerance, in the units of θ (≥ 0; rtol and atol not both 0).
            At the defaults (1e-10, 1e-13) the trajectories agree with an
            independent tight solve to ~1e-8 relative to max|Δθ|.
        max_steps: the step budget of one solve (int ≥ 1). A solve that needs
            more (the dynamics diverge, or change too abruptly: pER at β ≈ 10⁶) is flagged: ``ODESolution.converged``
            false and its Δθ and metric NaN (the rest of a grid unaffected).
        chunk: configurations per compiled call of a batched solve (int ≥ 1), or
            None for one call per batch. With an int every batch size shares one
            compile (the last call is padded) and a configuration's numbers are the
            same bits in any grid; with None each batch size is one compile, whose
            numbers differ from another size's within the solver's error (the ~1e-8
            above: :func:`~jaxreplay.paper.theory.solve_grid` says why).
            :func:`~jaxreplay.paper.theory.solve` (one configuration) ignores it; the cusp
            search defaults to :data:`~jaxreplay.paper.theory.cusps.CHUNK`.
    """

    rtol: float = 1e-10
    atol: float = 1e-13
    max_steps: int = 200_000
    chunk: int | None = None


def _static_int(label: str, value: object) -> int:
    """``value`` as an int ≥ 1, or ValueError naming ``label`` (a static option: no arrays, no bools)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{label} must be a Python int >= 1 (it is static), got {value!r}.")
    return _validation.check_static_int(label, value, low=1)


def check_options(options: SolverOptions, name: str = "options") -> SolverOptions:
    """``options`` with Python-number fields, or ValueError naming the bad field (``options.rtol``, ...).

    The fields are static (part of a compile's key), so they must be concrete
    numbers; they are returned as ``float``/``int`` so that equal values hash equal.
    """
    if not isinstance(options, SolverOptions):
        raise ValueError(f"{name} must be a jaxreplay.paper.theory.SolverOptions, got {type(options).__name__}.")
    tol = {}
    for field in ("rtol", "atol"):
        value = getattr(options, field)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):  # not an array, not traced
            raise ValueError(f"{name}.{field} must be a Python number (it is static), got {value!r}.")
        _validation.check_float(f"{name}.{field}", value, low=0.0)
        tol[field] = float(value)
    if tol["rtol"] == 0.0 and tol["atol"] == 0.0:
        raise ValueError(f"{name}.rtol and {name}.atol cannot both be 0 (the step-size controller needs a tolerance).")
    max_steps = _static_int(f"{name}.max_steps", options.max_steps)
    chunk = None if options.chunk is None else _static_int(f"{name}.chunk", options.chunk)
    return SolverOptions(tol["rtol"], tol["atol"], max_steps, chunk)


# The game's TD fixed point under either reading of its "real weights" (docs/paper_readings.md §8) is a
# property of the game: defined with it, re-exported here.
from jaxreplay.envs.linesearch import REAL_WEIGHTS, fixed_point_and_rewards  # noqa: E402,F401


def check_params(params: TheoryParams) -> None:
    """ValueError naming the first bad field of ``params`` (concrete values only)."""
    if not isinstance(params, TheoryParams):
        raise ValueError(f"params must be a TheoryParams, got {type(params).__name__}.")
    for name, value in params._asdict().items():
        _validation.check_float(name, value, low=0.0 if name == "speed" else None)


def check_hyper(memory_size, batch_size, step_size, discount, priority_exponent=None) -> None:
    """ValueError naming a bad hyperparameter (concrete values only)."""
    if memory_size is not None:
        _validation.check_int("memory_size", memory_size, low=1)
    _validation.check_int("batch_size", batch_size, low=1)
    _validation.check_float("step_size", step_size, low=0.0)
    _validation.check_float("discount", discount, low=0.0, high=1.0, high_inclusive=False)
    if priority_exponent is not None:
        _validation.check_float("priority_exponent", priority_exponent, low=0.0)


_MODEL_DOMAIN = {
    "memory_size": _validation.Bounds(False, 0.0),
    "batch_size": _validation.Bounds(False, 0.0),
    "step_size": _validation.Bounds(False, 0.0),
    "discount": _validation.Bounds(False, 0.0, 1.0, high_inclusive=False),
    "priority_exponent": _validation.Bounds(False, 0.0),
}
"""Where the ODE model means something, for traced values (continuous N and m included: the cusp refinement
solves between integers): finite, N, m, α, β >= 0 and γ in [0, 1)."""


def outside_model(**values) -> jax.Array:
    """``bool[]``: some traced value of ``values`` (names of :data:`_MODEL_DOMAIN`) lies outside the model's domain
    (NaN, ±inf, negative, γ >= 1). Concrete values are refused before this by :func:`check_hyper`."""
    flags = [_validation.outside_bounds(value, _MODEL_DOMAIN[name]) for name, value in values.items()]
    return jnp.any(jnp.stack(flags))


def check_real_weights(real_weights: str) -> None:
    """ValueError unless ``real_weights`` is one of :data:`REAL_WEIGHTS` (docs/paper_readings.md §8)."""
    _validation.check_choice("real_weights", real_weights, REAL_WEIGHTS)


def f64(x):
    """``x`` as a float64 JAX array (call inside :func:`x64`)."""
    return jnp.asarray(x, dtype=jnp.float64)


def host_device() -> jax.Device | None:
    """The device the theory computes on when the caller has not chosen one: the host CPU.

    The theory's work is float64 adaptive ODE stepping and closed forms on small
    arrays: a while loop of thousands of short, dependent iterations, each a few
    tiny kernels. On a GPU every iteration pays kernel launches and a host round
    trip for the loop's predicate, so the host CPU is faster: the paper-scale
    ER theory grid (10,022 solves) took 48 s on an H200 and 9 s on a 2-core CPU
    (``benchmarks/README.md``). Returns None (JAX places the work as usual) when
    the default backend is already the CPU, when the caller chose a device with
    ``jax.default_device`` (respected: that is how to run the theory on an
    accelerator), or when JAX has no CPU backend (``JAX_PLATFORMS`` without ``cpu``).
    """
    chosen = getattr(jax.config, "jax_default_device")  # set by `with jax.default_device(...)`; not in the stubs
    if chosen is not None or jax.default_backend() == "cpu":
        return None
    try:
        return jax.devices("cpu")[0]
    except RuntimeError:  # no CPU backend initialised
        return None


def x64(fn):
    """Run ``fn`` with 64-bit types enabled, scoped to the call, on the host CPU (:func:`host_device`).

    The global ``jax_enable_x64`` setting of other modules is left alone; the
    arrays returned are float64. Called on tracers of a transformation that
    was started with 64-bit types disabled (mixed precision would fail deep in
    XLA, or silently lose digits), it raises ``RuntimeError`` telling the user
    to trace inside ``with jax.enable_x64(True):``. Called on tracers at all,
    the enclosing transformation decides the device.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        traced = any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs)))
        if traced and not jax.config.read("jax_enable_x64"):
            raise RuntimeError(
                f"jaxreplay.paper.theory.{fn.__name__} computes in float64 and cannot be traced by a "
                "transformation started with 64-bit types disabled. Apply jit/vmap inside "
                "`with jax.enable_x64(True):` (the setting is scoped to the block), or use "
                "jaxreplay.paper.theory.solve_grid, which vmaps internally."
            )
        device = None if traced else host_device()
        with jax.enable_x64(True), jax.default_device(device) if device is not None else contextlib.nullcontext():
            return fn(*args, **kwargs)

    return wrapper


def concrete_times(times) -> np.ndarray | None:
    """Check a save-time grid when concrete; return it as NumPy or None if traced."""
    arr = _validation.concrete_value(times)
    if arr is None:
        return None
    if arr.ndim != 1 or arr.shape[0] < 1:
        raise ValueError(f"times must be a non-empty 1-D array, got shape {arr.shape}.")
    _validation.check_float("times", arr, low=0.0)
    if arr.shape[0] > 1 and not np.all(np.diff(arr) > 0):
        raise ValueError("times must be strictly increasing.")
    return arr
