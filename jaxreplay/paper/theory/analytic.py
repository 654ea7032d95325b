"""Closed forms of the appendix of Liu & Zou (2018), with the errata of ``docs/paper_readings.md`` applied.

All functions are elementwise in their array arguments (broadcast together),
jittable and vmappable, and compute in float64 inside a scoped
``jax.enable_x64`` context. Time ``t`` is in steps; μ = m α below
(``batch_size * step_size``). The state trajectory is the paper's
y(t') = x0 + v t' (θ1 ≥ 0, moving right; see :mod:`jaxreplay.paper.theory.ode`),
and γ = 0 unless stated.

Contents:

* :func:`b_coefficients`: the ER ODE in b-coefficient form, Eqs. (dtheta1),
  (dtheta2): dΔθ1/dt = −(b10 + b11 t + b12 t²) Δθ1 − (b20 + b21 t) Δθ2,
  dΔθ2/dt = −(b20 + b21 t) Δθ1 − b22 Δθ2 (docs/paper_readings.md §1: b12 = μv²; the window
  n = min(t, N) goes into b10, b11, b20).
* :func:`fixed_intercept_exponent`, :func:`fixed_intercept_solution`: θ2
  frozen at β2, Δθ1 = Δθ1⁰ e^{−k(t)}, both branches t ≤ N and t > N.
* :func:`fixed_slope_solution`: θ1 frozen at β1, Δθ2 = Δθ2⁰ e^{−μt} (§2).
* :func:`prioritized_rate_difference`: d(k_pri − k)/dt for β = 2 in the
  fixed-intercept case (§5: a rate, and 2vN in the t > N bracket).
* :func:`first_stage_solution`, :func:`first_stage_limit`: Eqs. (Beginning),
  (BeginningConv).
* :func:`last_stage_solution`, :func:`last_stage_limit`: Eqs. (Last),
  (LastConv) with the "+" of §4.
* :func:`second_order_coefficients`, :func:`second_order_terms`,
  :func:`second_order_initial_slope`: the second-order equation for Δθ1 with
  coefficients re-derived (§3), see below.

Second-order equation for Δθ1. Writing P(t) = b10 + b11 t + b12 t²,
R(t) = b20 + b21 t (with n = min(t, N)), eliminating Δθ2 = −(Δθ1' + P Δθ1)/R
from the first-order system gives::

    Δθ1'' + [(P + μ) R − R'] / R · Δθ1' + [P' R − R³ + μ P R − P R'] / R · Δθ1 = 0.

Multiplying numerators and denominator by 24/μ gives the paper's form with
D(t) = 24 R / μ:

* t ≤ N (n = t): D = d0 + d1 t, d0 = 24 x0, **d1 = 12 v**;
  c00 = 12 μ v x0², **c01 = 16 μ v² x0**, c02 = 2 μ² v² x0 + 4 μ v³,
  c03 = μ² v³; c10 = 24 μ x0³ + 24 μ x0 − 12 v, c11 = 12 μ v + 36 μ v x0²,
  c12 = 20 μ v² x0, c13 = 4 μ v³.
* t ≥ N (n = N): D = h0 + h1 t, h0 = 24 x0 − 12 N v, **h1 = 24 v**;
  g00 = μ v [N² v² (4 − μ N) + 2 N v x0 (μ N − 12) + 24 x0²],
  g01 = 2 μ v² [N v (μ N − 12) + 24 x0], g02 = 24 μ v³,
  **g10 = −4 [v (μ N (N² v² + 3) + 6) − μ x0 (5 N² v² + 6) + 9 μ N v x0² − 6 μ x0³]**,
  **g11 = 4 μ v (5 N² v² − 18 N v x0 + 18 x0² + 6)**,
  **g12 = 36 μ v² (2 x0 − N v)**, g13 = 24 μ v³.

(Bold: differs from the printed paper.) Compactly for t ≥ N, with
w = x0 + v (t − N/2) the window's mean position and κ = N² v²/12 its
variance: C1 = 24 μ (w³ + (κ + 1) w) − 24 v and C0 = 24 μ v (w² − κ) + 24 μ² κ w.
D vanishes where the window's mean position is 0 (t = −2 x0 / v for t ≤ N,
t = N/2 − x0/v for t ≥ N): an apparent singularity of the second-order form,
where Δθ2 cannot be recovered from Δθ1; the first-order system is regular.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gamma as _gamma
from jax.scipy.special import gammaincc as _gammaincc

from jaxreplay import _validation
from jaxreplay._typing import ArrayLike
from jaxreplay.paper.theory._common import check_hyper, f64, x64

__all__ = [
    "b_coefficients",
    "fixed_intercept_exponent",
    "fixed_intercept_solution",
    "fixed_slope_solution",
    "prioritized_rate_difference",
    "first_stage_solution",
    "first_stage_limit",
    "last_stage_solution",
    "last_stage_limit",
    "second_order_coefficients",
    "second_order_terms",
    "second_order_initial_slope",
]

X0, V = -5.0, 0.01


def _check(memory_size=None, batch_size=1, step_size=0.0, initial_position=X0, speed=V, t=None):
    check_hyper(memory_size, batch_size, step_size, 0.0)
    _validation.check_float("initial_position", initial_position)
    _validation.check_float("speed", speed, low=0.0)
    if t is not None:
        _validation.check_float("t", t, low=0.0)


def _finite(**initial: ArrayLike) -> None:
    """ValueError naming the first of ``initial`` (Δθ at a stage's start) with a NaN or infinite entry: the
    solutions are linear in them, so a bad one would come back as NaN or inf, silently."""
    for name, value in initial.items():
        _validation.check_float(name, value)


def _moving(function: str, speed: ArrayLike) -> None:
    """ValueError naming ``speed`` where the last stage's solution is undefined: it divides by ``3 v``."""
    value = _validation.concrete_value(speed)
    if value is not None and np.any(np.asarray(value) <= 0):
        raise _validation.FieldError(
            "speed",
            f"must be > 0 in {function} (the last stage divides by 3 v), got {_validation._show(np.asarray(value))}.",
        )


@x64
def b_coefficients(
    t: ArrayLike,
    memory_size: ArrayLike,
    batch_size: ArrayLike,
    step_size: ArrayLike,
    initial_position: ArrayLike = X0,
    speed: ArrayLike = V,
) -> tuple[jax.Array, ...]:
    """(b10, b11, b12, b20, b21, b22) of the ER ODE at time t (docs/paper_readings.md §1).

    b10 = μ(n² v²/3 + x0² − n v x0), b11 = μ(2 v x0 − n v²), b12 = μ v²,
    b20 = μ(x0 − n v/2), b21 = μ v, b22 = μ with n = min(t, N). The same
    coefficients enter the γ > 0 form (Eqs. dtheta1Nonzero, dtheta2Nonzero).
    Shapes: broadcast of the arguments; units 1/step^(1+power of t).
    """
    _check(memory_size, batch_size, step_size, initial_position, speed, t)
    t, N, x0, v = f64(t), f64(memory_size), f64(initial_position), f64(speed)
    mu = f64(batch_size) * f64(step_size)
    n = jnp.minimum(t, N)
    one = jnp.ones_like(n)
    return (
        mu * (n * n * v * v / 3 + x0 * x0 - n * v * x0),
        mu * (2 * v * x0 - n * v * v),
        mu * v * v * one,
        mu * (x0 - n * v / 2),
        mu * v * one,
        mu * one,
    )


@x64
def fixed_intercept_exponent(
    t: ArrayLike,
    memory_size: ArrayLike,
    batch_size: ArrayLike,
    step_size: ArrayLike,
    initial_position: ArrayLike = X0,
    speed: ArrayLike = V,
) -> jax.Array:
    """k(t) of Eq. (1Dk): θ2 frozen at β2, Δθ1(t) = Δθ1⁰ e^{−k(t)} (ER, γ = 0).

    t ≤ N: k = μ [v² t³/9 + x0 v t²/2 + x0² t];
    t > N: k = μ [v² t³/3 + v (2 x0 − N v) t²/2 + (x0² − N v x0 + N² v²/3) t
    − N² v (N v − 9 x0)/18]. Dimensionless; shape of the broadcast inputs.
    """
    _check(memory_size, batch_size, step_size, initial_position, speed, t)
    t, N, x0, v = f64(t), f64(memory_size), f64(initial_position), f64(speed)
    mu = f64(batch_size) * f64(step_size)
    early = v * v * t**3 / 9 + x0 * v * t**2 / 2 + x0 * x0 * t
    late = (
        v * v * t**3 / 3
        + v * (2 * x0 - N * v) * t**2 / 2
        + (x0 * x0 - N * v * x0 + N * N * v * v / 3) * t
        - N * N * v * (N * v - 9 * x0) / 18
    )
    return mu * jnp.where(t <= N, early, late)


@x64
def fixed_intercept_solution(
    t: ArrayLike,
    memory_size: ArrayLike,
    batch_size: ArrayLike,
    step_size: ArrayLike,
    dtheta0: ArrayLike,
    initial_position: ArrayLike = X0,
    speed: ArrayLike = V,
) -> jax.Array:
    """Δθ1(t) = Δθ1⁰ e^{−k(t)} with θ2 frozen at β2 (ER, γ = 0)."""
    _finite(dtheta0=dtheta0)
    k = fixed_intercept_exponent(t, memory_size, batch_size, step_size, initial_position, speed)
    return f64(dtheta0) * jnp.exp(-k)


@x64
def fixed_slope_solution(t: ArrayLike, batch_size: ArrayLike, step_size: ArrayLike, dtheta0: ArrayLike) -> jax.Array:
    """Δθ2(t) = Δθ2⁰ e^{−m α t} with θ1 frozen at β1 (ER or pER, any N, γ = 0).

    It reaches 0.05 Δθ2⁰ at t = ln 20 / (m α) (docs/paper_readings.md §2).
    """
    _check(None, batch_size, step_size, t=t)
    _finite(dtheta0=dtheta0)
    return f64(dtheta0) * jnp.exp(-f64(batch_size) * f64(step_size) * f64(t))


@x64
def prioritized_rate_difference(
    t: ArrayLike,
    memory_size: ArrayLike,
    batch_size: ArrayLike,
    step_size: ArrayLike,
    initial_position: ArrayLike = X0,
    speed: ArrayLike = V,
) -> jax.Array:
    """d(k_pri − k)/dt for pER with β = 2, θ2 frozen at β2 (docs/paper_readings.md §5). Units 1/step.

    With Δθ1 = Δθ1⁰ e^{−k}, ER has dk/dt = μ⟨y²⟩ and pER (β = 2) has
    dk_pri/dt = μ⟨y⁴⟩/⟨y²⟩ over the window, so the difference is
    μ Var(y²)/⟨y²⟩ ≥ 0, which is the paper's bracket form:

    * t ≤ N: c(t) v³ t³ [(2 v t + 15 x0/4)² + 15 x0²/16], c = μ / (45 v t ⟨y²⟩);
    * t > N: c'(t) v³ N³ [(2 v N − 15 (v t + x0)/4)² + 15 (v t + x0)²/16],
      c' = μ / (45 v N ⟨y²⟩),

    with ⟨y²⟩ the window's mean squared position. Zero at t = 0.
    """
    _check(memory_size, batch_size, step_size, initial_position, speed, t)
    t, N, x0, v = f64(t), f64(memory_size), f64(initial_position), f64(speed)
    mu = f64(batch_size) * f64(step_size)
    n = jnp.minimum(t, N)
    ya, yb = x0 + v * (t - n), x0 + v * t
    m2 = (ya * ya + ya * yb + yb * yb) / 3
    early = (v * t) ** 3 * ((2 * v * t + 15 * x0 / 4) ** 2 + 15 * x0**2 / 16)
    late = (v * N) ** 3 * ((2 * v * N - 15 * (v * t + x0) / 4) ** 2 + 15 * (v * t + x0) ** 2 / 16)
    bracket = jnp.where(t <= N, early, late)
    denom = 45 * v * n * m2
    ok = denom > 0
    return jnp.where(ok, mu * bracket / jnp.where(ok, denom, 1.0), 0.0)


@x64
def first_stage_solution(
    t: ArrayLike,
    batch_size: ArrayLike,
    step_size: ArrayLike,
    dtheta1_0: ArrayLike,
    dtheta2_0: ArrayLike,
    initial_position: ArrayLike = X0,
) -> tuple[jax.Array, jax.Array]:
    """Eq. (Beginning): (Δθ1, Δθ2) for v t ≪ |x0| (ER, γ = 0).

    Freezing the window at x0: the component of Δθ along (x0, 1) decays at
    rate μ (x0² + 1); the one along (1, −x0) is constant.
    """
    _check(None, batch_size, step_size, initial_position, t=t)
    _finite(dtheta1_0=dtheta1_0, dtheta2_0=dtheta2_0)
    t, x0, d1, d2 = f64(t), f64(initial_position), f64(dtheta1_0), f64(dtheta2_0)
    mu = f64(batch_size) * f64(step_size)
    e = jnp.exp(-mu * t * (x0 * x0 + 1))
    den = x0 * x0 + 1
    dth1 = (d1 + d1 * x0 * x0 * e - d2 * x0) / den + d2 * x0 * e / den
    dth2 = (d1 * x0 * e + d2 * e) / den + (d2 * x0 * x0 - d1 * x0) / den
    return dth1, dth2


@x64
def first_stage_limit(
    dtheta1_0: ArrayLike, dtheta2_0: ArrayLike, initial_position: ArrayLike = X0
) -> tuple[jax.Array, jax.Array]:
    """Eq. (BeginningConv): the plateau after the first stage (independent of N, m, α, v)."""
    _validation.check_float("initial_position", initial_position)
    _finite(dtheta1_0=dtheta1_0, dtheta2_0=dtheta2_0)
    x0, d1, d2 = f64(initial_position), f64(dtheta1_0), f64(dtheta2_0)
    c = (d2 + d1 * x0) / (x0 * x0 + 1)
    return d1 - x0 * c, d2 - c


@x64
def last_stage_solution(
    t: ArrayLike,
    batch_size: ArrayLike,
    step_size: ArrayLike,
    dtheta1_1: ArrayLike,
    dtheta2_1: ArrayLike,
    speed: ArrayLike = V,
) -> tuple[jax.Array, jax.Array]:
    """Eq. (Last) with the "+" of docs/paper_readings.md §4: the last stage, where b12 t² and b21 t dominate.

    Δθ1 = Δθ1¹ e^{−μ v² t³/3};
    Δθ2 = [3^{2/3} Δθ1¹ (μ v²)^{1/3} Γ(2/3, μ v² t³/3) + 3 Δθ2¹ v] / (3 v)
          − 3^{2/3} Δθ1¹ Γ(2/3) (μ v²)^{1/3} / (3 v),
    the solution of dΔθ1/dt = −μ v² t² Δθ1, dΔθ2/dt = −μ v t Δθ1 from
    (Δθ1¹, Δθ2¹) at t = 0. Γ(a, z) is the upper incomplete gamma function.
    """
    _check(None, batch_size, step_size, speed=speed, t=t)
    _moving("last_stage_solution", speed)
    _finite(dtheta1_1=dtheta1_1, dtheta2_1=dtheta2_1)
    t, v, d1, d2 = f64(t), f64(speed), f64(dtheta1_1), f64(dtheta2_1)
    mu = f64(batch_size) * f64(step_size)
    z = mu * v * v * t**3 / 3
    a = 2.0 / 3.0
    cbrt = jnp.cbrt(mu * v * v)
    g_upper = _gammaincc(a, z) * _gamma(a)
    dth1 = d1 * jnp.exp(-z)
    dth2 = (3**a * d1 * cbrt * g_upper + 3 * d2 * v) / (3 * v) - 3**a * d1 * _gamma(a) * cbrt / (3 * v)
    return dth1, dth2


@x64
def last_stage_limit(
    batch_size: ArrayLike, step_size: ArrayLike, dtheta1_1: ArrayLike, dtheta2_1: ArrayLike, speed: ArrayLike = V
) -> tuple[jax.Array, jax.Array]:
    """Eq. (LastConv): (0, [3 Δθ2¹ v − 3^{2/3} Δθ1¹ Γ(2/3) (μ v²)^{1/3}] / (3 v))."""
    _check(None, batch_size, step_size, speed=speed)
    _moving("last_stage_limit", speed)
    _finite(dtheta1_1=dtheta1_1, dtheta2_1=dtheta2_1)
    v, d1, d2 = f64(speed), f64(dtheta1_1), f64(dtheta2_1)
    mu = f64(batch_size) * f64(step_size)
    a = 2.0 / 3.0
    lim2 = (3 * d2 * v - 3**a * d1 * _gamma(a) * jnp.cbrt(mu * v * v)) / (3 * v)
    # Δθ1 decays as e^{−μ v² t³/3}: to 0 unless μ = 0 (m α = 0: nothing moves, it stays Δθ1¹).
    return jnp.where(mu > 0, jnp.zeros_like(lim2), d1 * jnp.ones_like(lim2)), lim2


@x64
def second_order_coefficients(
    memory_size: ArrayLike,
    batch_size: ArrayLike,
    step_size: ArrayLike,
    initial_position: ArrayLike = X0,
    speed: ArrayLike = V,
) -> dict[str, jax.Array]:
    """The corrected coefficients of the second-order Δθ1 equation (docs/paper_readings.md §3).

    Returns a dict with keys c00..c03, c10..c13, d0, d1 (branch t ≤ N) and
    g00..g02, g10..g13, h0, h1 (branch t ≥ N); formulas in the module
    docstring. The equation is
    Δθ1'' + (Σ_k c1k t^k)/(d0 + d1 t) Δθ1' + (Σ_k c0k t^k)/(d0 + d1 t) Δθ1 = 0
    for t ≤ N, and likewise with g, h for t ≥ N.
    """
    _check(memory_size, batch_size, step_size, initial_position, speed)
    N, x0, v = f64(memory_size), f64(initial_position), f64(speed)
    mu = f64(batch_size) * f64(step_size)
    out = dict(
        c00=12 * mu * v * x0**2,
        c01=16 * mu * v**2 * x0,
        c02=2 * mu**2 * v**2 * x0 + 4 * mu * v**3,
        c03=mu**2 * v**3,
        c10=24 * mu * x0**3 + 24 * mu * x0 - 12 * v,
        c11=12 * mu * v + 36 * mu * v * x0**2,
        c12=20 * mu * v**2 * x0,
        c13=4 * mu * v**3,
        d0=24 * x0,
        d1=12 * v,
        g00=mu * v * (N**2 * v**2 * (4 - mu * N) + 2 * N * v * x0 * (mu * N - 12) + 24 * x0**2),
        g01=2 * mu * v**2 * (N * v * (mu * N - 12) + 24 * x0),
        g02=24 * mu * v**3,
        g10=-4
        * (
            v * (mu * N * (N**2 * v**2 + 3) + 6)
            - mu * x0 * (5 * N**2 * v**2 + 6)
            + 9 * mu * N * v * x0**2
            - 6 * mu * x0**3
        ),
        g11=4 * mu * v * (5 * N**2 * v**2 - 18 * N * v * x0 + 18 * x0**2 + 6),
        g12=36 * mu * v**2 * (2 * x0 - N * v),
        g13=24 * mu * v**3,
        h0=24 * x0 - 12 * N * v,
        h1=24 * v,
    )
    shape = jnp.broadcast_shapes(*(jnp.shape(a) for a in out.values()))
    return {k: jnp.broadcast_to(a, shape) for k, a in out.items()}


@x64
def second_order_terms(
    t: ArrayLike,
    memory_size: ArrayLike,
    batch_size: ArrayLike,
    step_size: ArrayLike,
    initial_position: ArrayLike = X0,
    speed: ArrayLike = V,
) -> tuple[jax.Array, jax.Array]:
    """(p(t), q(t)) with Δθ1'' + p Δθ1' + q Δθ1 = 0, both branches (t ≤ N, t > N).

    Units 1/step and 1/step². Infinite/NaN at the apparent singularity D = 0.
    """
    _validation.check_float("t", t, low=0.0)
    c = second_order_coefficients(memory_size, batch_size, step_size, initial_position, speed)
    t, N = f64(t), f64(memory_size)
    p_early = (c["c10"] + c["c11"] * t + c["c12"] * t**2 + c["c13"] * t**3) / (c["d0"] + c["d1"] * t)
    q_early = (c["c00"] + c["c01"] * t + c["c02"] * t**2 + c["c03"] * t**3) / (c["d0"] + c["d1"] * t)
    p_late = (c["g10"] + c["g11"] * t + c["g12"] * t**2 + c["g13"] * t**3) / (c["h0"] + c["h1"] * t)
    q_late = (c["g00"] + c["g01"] * t + c["g02"] * t**2) / (c["h0"] + c["h1"] * t)
    early = t <= N
    return jnp.where(early, p_early, p_late), jnp.where(early, q_early, q_late)


@x64
def second_order_initial_slope(
    batch_size: ArrayLike,
    step_size: ArrayLike,
    dtheta1_0: ArrayLike,
    dtheta2_0: ArrayLike,
    initial_position: ArrayLike = X0,
) -> jax.Array:
    """dΔθ1/dt at t = 0: −μ x0² Δθ1⁰ − μ x0 Δθ2⁰ (1/step)."""
    _check(None, batch_size, step_size, initial_position)
    x0 = f64(initial_position)
    mu = f64(batch_size) * f64(step_size)
    return -mu * x0 * x0 * f64(dtheta1_0) - mu * x0 * f64(dtheta2_0)
