"""The ODE model of replay on LineSearch (Liu & Zou, Eqs. theta_memory, theta_memory_pri).

Model. LineSearch has state x, actions a = ±v, next state x' = x + a and
reward r = β1 x' + β2; the agent's value is Q(x, a; θ) = θ1 (x + a) + θ2, so
∇θQ = (x + a, 1). With discount γ the TD error of a transition whose landing
position is y = x + a is (TD target r + γ max_a' Q(x', a'; θ), and
max_a' Q(x', a') = θ1 x' + v|θ1| + θ2, docs/paper_readings.md §7)::

    δ(y; θ) = A(θ) y + B(θ),   A = β1 − (1−γ) θ1,   B = β2 + γ v |θ1| − (1−γ) θ2.

Its zero for every y is the TD fixed point θ* = (β1/(1−γ), (β2 + γ v|θ1*|)/(1−γ))
(docs/paper_readings.md §8); the returned Δθ = θ − θ* are measured from it.

Replay (ER) averages the update over the buffer window [t − n(t), t] of
stored transitions, n(t) = min(t, N) (or a given n(t)), with m updates of
step α per unit time::

    dθ/dt = m α ⟨δ ∇θQ⟩_window,
    pER:   dθ/dt = m α ⟨|δ|^β δ ∇θQ⟩_window / ⟨|δ|^β⟩_window      (β ≥ 0; paper: β = 2).

State trajectory (monotone motion). The transition stored at time t' lands
at y(t') = x0 + s v t', with s = +1 if θ1⁰ ≥ 0 and s = −1 otherwise: the
greedy policy's motion as long as θ1 keeps the sign it started with. This is
the paper's model (its b-coefficients use x0 + v t'); to use the discrete
game's x0 + v (t' + 1) instead, pass ``initial_position = x0 + s v``. The
solver does **not** follow a reversal of the policy: it detects one and
reports it in ``ODESolution.direction_changed`` (true when θ1 spent a
positive time on the other side of 0, measured by an extra ODE state
∫ max(0, −s θ1) dt, or sits there at a saved time). When the flag is set the
solution is that of the monotone model, not of the greedy game.

Window averages are exact: y is uniform over the window, so ER needs the
closed-form moments ⟨y⟩, ⟨y²⟩. For pER, u = δ(y) is linear in y and the
averages of |u|^β, |u|^β u, |u|^β u y come from exact antiderivatives in u
(sign(u)|u|^(β+1)/(β+1), |u|^(β+2)/(β+2), sign(u)|u|^(β+3)/(β+3)), computed in
units of the larger |u| at the window's ends (so no power overflows or, at that
end, underflows, at any β) and, where u keeps one sign, as expm1 of a log1p, so
the difference does not cancel. Where u varies by less than a quarter of its
size over the window and β times that relative variation is at most 1/2
(|u|^β nearly constant), an 8-point Gauss–Legendre rule is used instead, exact
to rounding there because |u|^β is analytic with its nearest singularity far
away. For even integer β (the paper's β = 2) both are exact. Tested against
the antiderivatives in 80-digit decimal arithmetic up to β = 10⁴.

Everything runs in float64 inside a scoped ``jax.enable_x64`` context; the
global setting is untouched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation
from jaxreplay._typing import ArrayLike
from jaxreplay.paper.theory._common import (
    SolverOptions,
    TheoryParams,
    check_hyper,
    check_options,
    check_params,
    check_real_weights,
    concrete_times,
    f64,
    fixed_point_and_rewards,
    outside_model,
    x64,
)

__all__ = ["MemorySizeSchedule", "ODESolution", "SolverOptions", "solve", "solve_grid", "window_averages"]

FROZEN = (None, "slope", "intercept")
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)
_NARROW = 0.25  # relative variation of u below which Gauss–Legendre may be used
_NARROW_POWER = 0.5  # ... and of β·log|u| (|u|^β nearly constant): 0.25 · the paper's β = 2


class MemorySizeSchedule(NamedTuple):
    """A memory size N(t) given as samples, linearly interpolated in t.

    E.g. the mean memory-size trajectory of the adaptive algorithm. Outside
    ``[times[0], times[-1]]`` the end values hold. The window used is
    n(t) = min(t, max(N(t), 0)) (a buffer cannot hold more than t transitions);
    N(t) may be fractional (a mean) and may be 0 (online TD, the window
    collapses to the current transition).

    Attributes:
        times: float[K], strictly increasing sample times (steps).
        sizes: float[K], N at those times (transitions), ≥ 0.
    """

    times: ArrayLike
    sizes: ArrayLike


class ODESolution(NamedTuple):
    """Result of :func:`solve` (leading batch axes from :func:`solve_grid`).

    Attributes:
        times: float64[S], the save times (steps).
        dtheta1: float64[S], Δθ1(t) = θ1(t) − θ1*.
        dtheta2: float64[S], Δθ2(t) = θ2(t) − θ2*.
        metric: float64[], M = |Δθ1(T)| + |Δθ2(T)| at T = times[-1].
        direction_changed: bool[], θ1 left the sign it started with (the
            greedy policy would have reversed; the monotone-motion model no
            longer describes the game after that time).
        fixed_point: float64[2], θ* = (θ1*, θ2*) the Δθ are measured from.
        converged: bool[], the solver reached ``times[-1]`` within its step
            budget (``SolverOptions.max_steps``). Where it did not (the
            dynamics diverge, or change too abruptly), ``dtheta1``, ``dtheta2`` and ``metric`` are
            NaN: one such solve no longer stops a whole :func:`solve_grid`.
        invalid_hyperparameters: bool[], a traced hyperparameter lay outside
            the model's domain (NaN, ±inf, a negative N, m, α or β, γ outside
            [0, 1)), or a driven window's size was NaN, infinite or negative (a traced
            :class:`MemorySizeSchedule`'s sizes, or a window callable's at a save time): the numbers mean
            nothing (concrete ones are refused).
        overshoots: bool[], the step size is outside the small-step regime the ODE is the limit of: one TD
            update at the farthest position the model visits, x = x0 or x0 ± v·T, moves the weights past
            their target, α(1 − γ)(x² + 1) ≥ 1 (x² alone with the intercept frozen, 1 with the slope
            frozen). From 2 on the simulated game diverges (each update multiplies the error by
            1 − α(1 − γ)(x² + 1) < −1) while the ODE still converges: its numbers do not describe the game.
            (At LineSearch's x0 = −5, γ = 0: α ≥ 1/26 ≈ 0.038; the simulation diverges from α ≈ 0.077.)
    """

    times: jax.Array
    dtheta1: jax.Array
    dtheta2: jax.Array
    metric: jax.Array
    direction_changed: jax.Array
    fixed_point: jax.Array
    converged: jax.Array
    invalid_hyperparameters: jax.Array
    overshoots: jax.Array


@x64
def window_averages(y_start, y_end, slope, offset, priority_exponent=None):
    """Window averages of the update for y uniform on [y_start, y_end].

    With u = slope · y + offset (the TD error δ):

    * ER (``priority_exponent=None``): returns (⟨u y⟩, ⟨u⟩).
    * pER with exponent β: returns (⟨|u|^β u y⟩ / ⟨|u|^β⟩, ⟨|u|^β u⟩ / ⟨|u|^β⟩),
      and (0, 0) where u ≡ 0 on the window.

    All arguments are float scalars (or broadcastable arrays); y_start may
    equal y_end (a point window). Call with float64 inputs for the accuracy
    stated in the module docstring. A concrete ``priority_exponent`` must be a finite β ≥ 0 (ValueError
    naming it: NaN or −1 gave (0, 0), silently); traced values are the caller's to check.
    """
    if priority_exponent is not None:
        _validation.check_float("priority_exponent", priority_exponent, low=0.0)
    ya, yb = y_start, y_end
    A, B = slope, offset
    if priority_exponent is None:
        m1 = 0.5 * (ya + yb)
        m2 = (ya * ya + ya * yb + yb * yb) / 3.0
        return A * m2 + B * m1, A * m1 + B
    beta = priority_exponent
    ua, ub = A * ya + B, A * yb + B
    umax = jnp.maximum(jnp.abs(ua), jnp.abs(ub))
    ok = umax > 0  # (u ≡ 0 on the window: no priority, no update)
    # In units of the larger |u| at an end, so |w| <= 1 and |w|^β neither overflows nor, at that end,
    # underflows: the common factor umax^β cancels in every ratio (|u|^1000 with |u| = 0.5 underflowed to 0,
    # and at β = 10^6 the whole average read (0, 0), no learning, a probe).
    scale = jnp.where(ok, umax, 1.0)
    wa, wb = ua / scale, ub / scale
    dw = wb - wa
    # Gauss–Legendre where |w|^β varies little over the window: w varies by at most a quarter and β·|dw| is
    # at most _NARROW_POWER (for β <= 2, exactly the first condition); the antiderivatives elsewhere.
    wide = ((jnp.abs(dw) > _NARROW) | (beta * jnp.abs(dw) > _NARROW_POWER)) & (dw != 0)
    safe_dw = jnp.where(wide, dw, 1.0)
    safe_A = jnp.where(wide, A, 1.0)
    one_signed = wa * wb >= 0
    near = jnp.minimum(jnp.abs(wa), jnp.abs(wb))  # the end nearer 0 (the other is at |w| = 1)
    rising = jnp.where(jnp.abs(wb) >= jnp.abs(wa), 1.0, -1.0)  # |w| grows from y_start to y_end

    def moment(p):  # ⟨|w|^β w^p⟩ over the window: (G(wb) − G(wa)) / dw, G(w) = sign(w)^(p+1) |w|^k / k
        k = beta + p + 1
        across = (jnp.sign(wb) ** (p + 1) * jnp.abs(wb) ** k - jnp.sign(wa) ** (p + 1) * jnp.abs(wa) ** k) / k
        # One-signed: |wb|^k − |wa|^k = ±(1 − near^k), with 1 − near^k = −expm1(k log1p(near − 1)), no
        # cancellation in a window where w barely changes.
        sign = jnp.sign(wa + wb) ** (p + 1)
        along = sign * rising * -jnp.expm1(k * jnp.log1p(near - 1.0)) / k
        return jnp.where(one_signed, along, across) / safe_dw

    e0w, e1w, e2w = moment(0), moment(1), moment(2)
    ybar, wbar = 0.5 * (ya + yb), 0.5 * (wa + wb)
    eyw = ybar * e1w + scale * (e2w - wbar * e1w) / safe_A  # y − ȳ = (u − ū)/A = scale·(w − w̄)/A

    # Gauss–Legendre in y (narrow branch: w keeps one sign and |w|^β is nearly constant).
    nodes = jnp.asarray(_GL_NODES)
    weights = jnp.asarray(_GL_WEIGHTS / 2.0)
    col = lambda z: jnp.asarray(z)[..., None]  # noqa: E731
    y = col(ybar) + col(0.5 * (yb - ya)) * nodes
    w = (col(A) * y + col(B)) / col(scale)
    mass = jnp.abs(w) ** col(beta) * weights
    e0n = jnp.sum(mass, axis=-1)
    e1n = jnp.sum(mass * w, axis=-1)
    eyn = jnp.sum(mass * w * y, axis=-1)

    e0 = jnp.where(wide, e0w, e0n)
    e1 = jnp.where(wide, e1w, e1n)
    ey = jnp.where(wide, eyw, eyn)
    ok = ok & (e0 > 0)
    safe_e0 = jnp.where(ok, e0, 1.0)
    return jnp.where(ok, scale * ey / safe_e0, 0.0), jnp.where(ok, scale * e1 / safe_e0, 0.0)


class _Program(NamedTuple):
    """The static part of a solve: what selects its compiled program (hashable, a ``jit`` static argument).

    Attributes:
        kind: the window: ``"fixed"`` (N), ``"schedule"`` (a :class:`MemorySizeSchedule`)
            or ``"callable"`` (``size_fn``).
        prioritized: pER (True) or ER (False).
        real_weights: the reading of the params' real weights (:data:`REAL_WEIGHTS`).
        size_fn: the callable t ↦ N(t) when ``kind == "callable"``, else None.
        solver: the checked :class:`SolverOptions` (its ``chunk`` only splits a
            batched solve into calls; the traced program does not read it).
    """

    kind: str
    prioritized: bool
    real_weights: str
    size_fn: Callable | None
    solver: SolverOptions


def _window_cap(program: _Program, memory_size, schedule):
    """(t ↦ the window's cap N(t) ≥ 0, the times the step-size controller must not step over, or None)."""
    if program.kind == "fixed":
        N = f64(memory_size)
        return (lambda t: N), jnp.reshape(N, (1,))
    if program.kind == "schedule":
        st, sz = f64(schedule.times), f64(schedule.sizes)
        return (lambda t: jnp.maximum(jnp.interp(t, st, sz), 0.0)), st
    size_fn = program.size_fn
    assert size_fn is not None  # kind == "callable"
    return (lambda t: jnp.maximum(f64(size_fn(t)), 0.0)), None


@functools.partial(jax.jit, static_argnames=("program",))
def _solve_core(
    params, memory_size, batch_size, step_size, discount, priority_exponent, times, schedule, learn, *, program
):
    x0, v, p1, p2, th10, th20 = (f64(p) for p in params)
    mu = f64(batch_size) * f64(step_size)
    g = f64(discount)
    beta = f64(priority_exponent) if program.prioritized else None
    beta1, beta2, th1s, th2s = fixed_point_and_rewards(p1, p2, v, g, program.real_weights)
    s = jnp.where(th10 >= 0, 1.0, -1.0)
    times = f64(times)
    window_cap, jumps = _window_cap(program, memory_size, schedule)

    def field(t, state, args):
        th1, th2, _ = state
        n = jnp.clip(window_cap(t), 0.0, t)
        A = beta1 - (1.0 - g) * th1
        B = beta2 + g * v * jnp.abs(th1) - (1.0 - g) * th2
        y_end = x0 + s * v * t
        y_start = y_end - s * v * n
        g1, g2 = window_averages(y_start, y_end, A, B, beta)
        d1 = learn[0] * mu * g1
        d2 = learn[1] * mu * g2
        return d1, d2, jax.nn.relu(-s * th1)

    controller = diffrax.PIDController(rtol=program.solver.rtol, atol=program.solver.atol)
    if jumps is not None:
        controller = diffrax.ClipStepSizeController(controller, jump_ts=jumps)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Dopri8(),
        t0=f64(0.0),
        t1=times[-1],
        dt0=None,
        y0=(th10, th20, f64(0.0)),
        saveat=diffrax.SaveAt(ts=times),
        stepsize_controller=controller,
        max_steps=program.solver.max_steps,
        throw=False,  # a solve that runs out of steps is flagged (converged), not fatal to its grid
    )
    converged = sol.result == diffrax.RESULTS.successful
    th1, th2, viol = sol.ys
    dth1 = jnp.where(converged, th1 - th1s, jnp.nan)
    dth2 = jnp.where(converged, th2 - th2s, jnp.nan)
    wrong_side = jnp.where(s > 0, th1 < 0, th1 >= 0)
    changed = (viol[-1] > 0) | jnp.any(wrong_side)
    metric = jnp.abs(dth1[-1]) + jnp.abs(dth2[-1])
    named = {"batch_size": batch_size, "step_size": step_size, "discount": discount}
    if program.kind == "fixed":
        named["memory_size"] = memory_size
    if program.prioritized:
        named["priority_exponent"] = priority_exponent
    invalid = outside_model(**named)
    # A driven window's sizes: NaN makes the whole solve NaN (say why, not only "not converged"); a negative
    # size, which a concrete schedule refuses, was run as 0 (online TD) without a word (a probe).
    if program.kind == "callable":
        invalid = invalid | _validation.outside_bounds(f64(program.size_fn(times)), _validation.NONNEGATIVE)
    elif program.kind == "schedule":
        invalid = invalid | _validation.outside_bounds(f64(schedule.sizes), _validation.NONNEGATIVE)
    far = jnp.maximum(x0**2, (x0 + s * v * times[-1]) ** 2)  # the motion is monotone: an end is farthest
    overshoots = f64(step_size) * (1.0 - g) * (learn[0] * far + learn[1]) >= 1.0
    return ODESolution(times, dth1, dth2, metric, changed, jnp.stack([th1s, th2s]), converged, invalid, overshoots)


def _window(memory_size):
    """Check the window argument: (N or 1 when driven, the schedule or None, size_fn or None, kind).

    ``memory_size`` is N (a number of transitions, int ≥ 1 when concrete), a
    :class:`MemorySizeSchedule` or a callable t ↦ N(t); ValueError naming it otherwise.
    """
    if isinstance(memory_size, MemorySizeSchedule):
        st = _validation.concrete_value(memory_size.times)
        sz = _validation.concrete_value(memory_size.sizes)
        if st is not None:
            if st.ndim != 1 or st.shape[0] < 1 or (st.shape[0] > 1 and not np.all(np.diff(st) > 0)):
                raise ValueError("memory_size.times must be a non-empty, strictly increasing 1-D array.")
        if sz is not None:
            _validation.check_float("memory_size.sizes", sz, low=0.0)
            if st is not None and sz.shape != st.shape:
                raise ValueError("memory_size.sizes must have the shape of memory_size.times.")
        return 1, memory_size, None, "schedule"
    if callable(memory_size):
        return 1, None, memory_size, "callable"
    if memory_size is None:
        raise ValueError(
            "memory_size must be a number of transitions, a MemorySizeSchedule or a callable t -> N(t), got None."
        )
    _validation.check_int("memory_size", memory_size, low=1)
    return memory_size, None, None, "fixed"


def _save_times(times):
    """The save grid: ``times`` checked, or the default ``linspace(0, 1000, 1001)`` (the paper's T = 1000)."""
    if times is None:
        return np.linspace(0.0, 1000.0, 1001)
    concrete_times(times)
    return times


def _prepare(
    params, memory_size, batch_size, step_size, discount, priority_exponent, times, frozen, real_weights, options
):
    """Check the arguments of :func:`solve` / :func:`solve_grid` (ValueError naming the first bad one).

    Returns (N, β, times, schedule, learn, program): N is 1 for a driven window,
    β is 0 for ER, learn is float64[2], the weights' learning mask.
    """
    check_params(params)
    memory_size, schedule, size_fn, kind = _window(memory_size)
    check_hyper(None, batch_size, step_size, discount, priority_exponent)
    _validation.check_choice("frozen", frozen, FROZEN)
    check_real_weights(real_weights)
    program = _Program(kind, priority_exponent is not None, real_weights, size_fn, check_options(options))
    learn = np.array([frozen != "slope", frozen != "intercept"], dtype=np.float64)
    beta = 0.0 if priority_exponent is None else priority_exponent
    return memory_size, beta, _save_times(times), schedule, learn, program


def _f64_schedule(schedule: MemorySizeSchedule | None) -> MemorySizeSchedule | None:
    return None if schedule is None else MemorySizeSchedule(f64(schedule.times), f64(schedule.sizes))


@x64
def solve(
    params: TheoryParams = TheoryParams(),
    memory_size: ArrayLike | MemorySizeSchedule | Callable = 1000,
    batch_size: ArrayLike = 5,
    step_size: ArrayLike = 1e-3,
    discount: ArrayLike = 0.0,
    priority_exponent: ArrayLike | None = None,
    *,
    times: ArrayLike | None = None,
    frozen: str | None = None,
    real_weights: str = "reward",
    options: SolverOptions = SolverOptions(),
) -> ODESolution:
    """Solve the replay ODE on LineSearch with diffrax (Dopri8, float64).

    Args:
        params: :class:`TheoryParams` (x0, v, real weights, θ⁰).
        memory_size: the window's cap. N, a capacity in transitions (int ≥ 1;
            may be traced), or a window driven by a given N(t): a
            :class:`MemorySizeSchedule` (samples, linearly interpolated; may be
            traced) or a jittable callable t ↦ N(t) (static; one compile per
            function object). The window is n(t) = min(t, N(t)).
        batch_size: m, updates per step (int ≥ 1; may be traced).
        step_size: α ≥ 0 (may be traced).
        discount: γ in [0, 1) (may be traced).
        priority_exponent: None for uniform replay (ER); β ≥ 0 for prioritized
            replay with P(i) ∝ |δ_i|^β (paper: β = 2). May be traced; None vs
            not-None is static.
        times: float[S] strictly increasing save times in steps, ≥ 0; the
            solve runs from 0 to ``times[-1]``. Default
            ``linspace(0, 1000, 1001)`` (the paper's horizon T = 1000).
        frozen: None (both weights learn), ``"slope"`` (θ1 stays at θ1⁰) or
            ``"intercept"`` (θ2 stays at θ2⁰). The appendix's 1-D cases set
            the frozen weight to its real value through ``params``.
        real_weights: ``"reward"`` (params' real weights are β, default) or
            ``"fixed_point"`` (they are θ*) — docs/paper_readings.md §8.
        options: :class:`SolverOptions`, the solver's tolerances and step budget
            (static; ``chunk`` is ignored here).

    Returns:
        :class:`ODESolution` (float64 arrays; scalars for scalar inputs).

    Raises:
        ValueError: naming the argument, for concrete bad input
            (memory_size < 1 or not an integer, batch_size < 1, non-finite or
            negative step_size, discount outside [0, 1), negative
            priority_exponent, bad params, times, schedule, frozen,
            real_weights or options field).

    Jittable and vmappable over memory_size, batch_size, step_size,
    discount, priority_exponent and params (one compilation per static
    configuration and shape): apply ``jax.jit``/``jax.vmap`` inside
    ``with jax.enable_x64(True):`` (tracing it with 64-bit types disabled
    raises ``RuntimeError``), or use :func:`solve_grid`, which does this for
    a grid. Traced values are not checked; a traced memory_size that is not
    an integer is used as given (the window is continuous in N).

    Accuracy: at the default tolerances the trajectories agree with an
    independent tight solve of the paper's b-coefficient form to ~1e-8
    relative to max|Δθ| (tests require 1e-6).
    """
    memory_size, beta, times, schedule, learn, program = _prepare(
        params, memory_size, batch_size, step_size, discount, priority_exponent, times, frozen, real_weights, options
    )
    # Float64 arrays throughout, so that ints vs floats do not recompile.
    hyper = (f64(memory_size), f64(batch_size), f64(step_size), f64(discount), f64(beta))
    return _solve_core(
        TheoryParams(*map(f64, params)), *hyper, f64(times), _f64_schedule(schedule), f64(learn), program=program
    )


@functools.partial(jax.jit, static_argnames=("program",))
def _solve_grid_core(params, hyper, times, schedule, learn, *, program):
    """:func:`_solve_core` vmapped over ``hyper``, the 5 columns (N, m, α, γ, β), float64[C] each."""
    core = functools.partial(_solve_core, program=program)
    return jax.vmap(core, in_axes=(None, 0, 0, 0, 0, 0, None, None, None))(params, *hyper, times, schedule, learn)


def _solve_flat(params, flat, times, schedule, learn, program) -> ODESolution:
    """:func:`_solve_grid_core` over the flat float64 hyperparameter columns ``flat`` (5 arrays [C]).

    ``program.solver.chunk`` None (or traced columns): one call of size C (one compile per C);
    ``k``: calls of exactly k configurations, the last padded with copies
    of its final configuration, so every grid size shares one compile per
    static configuration and save-time count; padding and slicing run in
    NumPy (eager JAX ops would compile once per slice size). Call inside
    ``jax.enable_x64``.
    """
    chunk = program.solver.chunk
    concrete = [_validation.concrete_value(x) for x in flat]
    host = [h for h in concrete if h is not None]
    if chunk is None or len(host) < len(concrete) or host[0].shape[0] == 0:
        return _solve_grid_core(params, tuple(flat), times, schedule, learn, program=program)
    n = host[0].shape[0]
    parts = []
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        cols = [np.concatenate([h[start:stop], np.repeat(h[stop - 1 : stop], chunk - (stop - start))]) for h in host]
        out = _solve_grid_core(params, tuple(map(f64, cols)), times, schedule, learn, program=program)
        parts.append(jax.tree.map(lambda a, k=stop - start: np.asarray(a)[:k], out))
    return jax.tree.map(lambda *a: f64(np.concatenate(a, axis=0)), *parts)


@x64
def solve_grid(
    params: TheoryParams = TheoryParams(),
    memory_size: ArrayLike | MemorySizeSchedule | Callable = 1000,
    batch_size: ArrayLike = 5,
    step_size: ArrayLike = 1e-3,
    discount: ArrayLike = 0.0,
    priority_exponent: ArrayLike | None = None,
    *,
    times: ArrayLike | None = None,
    frozen: str | None = None,
    real_weights: str = "reward",
    options: SolverOptions = SolverOptions(),
) -> ODESolution:
    """:func:`solve` over a broadcast grid of hyperparameters, vmapped in one compilation.

    ``memory_size`` (when a number), ``batch_size``, ``step_size``, ``discount``
    and ``priority_exponent`` (if not None) are broadcast together to a shape G
    (e.g. build a grid with ``np.meshgrid``); ``params``, ``times`` and a
    driven window (``memory_size`` a schedule or callable) are shared. Every
    field of the result gets the leading shape G: ``dtheta1`` is
    float64[*G, S], ``metric`` float64[*G], and so on. Same arguments, checks
    and errors as :func:`solve`; ``options.chunk``: None solves the whole grid
    in one vmapped call (one compile per grid size); an int solves it in calls
    of exactly ``chunk`` configurations (the last padded), so grids of any
    size, and :func:`jaxreplay.paper.theory.memory_cusps` with the same
    ``chunk`` and save-time count, share one compile.

    A configuration's numbers do not depend on the others in its call (the order or subset of the grid), but
    they depend on the call's size: a vmapped program of another size is compiled into other kernels, which
    round in the last bits otherwise, and the step-size controller may then accept other steps. Measured
    (LineSearch, default options): Δθ1 differed from :func:`solve` one configuration at a time by up to
    1.3e-8 of its trajectory's largest value, M by 3e-13 (well inside the model's error against the game).
    With the same ``chunk`` every call has one size, so a grid's numbers are the same bits whatever the
    grid's size or order.
    """
    memory_size, beta, times, schedule, learn, program = _prepare(
        params, memory_size, batch_size, step_size, discount, priority_exponent, times, frozen, real_weights, options
    )
    named: dict[str, Any] = dict(memory_size=memory_size, batch_size=batch_size, step_size=step_size)
    named.update(discount=discount, priority_exponent=beta)
    try:
        np.broadcast_shapes(*(np.shape(v) for v in named.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {np.shape(v)}" for k, v in named.items())
        raise ValueError(f"solve_grid's hyperparameters must broadcast together; got shapes {shapes}.") from None
    arrays = jnp.broadcast_arrays(f64(memory_size), f64(batch_size), f64(step_size), f64(discount), f64(beta))
    shape = arrays[0].shape
    flat = [a.reshape(-1) for a in arrays]
    params64 = TheoryParams(*map(f64, params))
    out = _solve_flat(params64, flat, f64(times), _f64_schedule(schedule), f64(learn), program)
    return jax.tree.map(lambda a: a.reshape(shape + a.shape[1:]), out)
