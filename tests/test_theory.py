"""Tests of jaxreplay.paper.theory: the replay ODE against the appendix's closed forms.

Comparisons of trajectories that cross zero use an error relative to the
trajectory's scale, max_t |Δθ(t)| ("scaled" below); pointwise relative errors
are meaningless at zero crossings. All solves share a handful of
compilations (one per static configuration; grids have one flattened size).
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from scipy.integrate import quad, solve_ivp

from jaxreplay.paper import theory as th

P = th.TheoryParams()  # x0 = −5, v = 0.01, β = (0.1, 0.5), θ⁰ = (0, 1)
T = np.linspace(0.0, 1000.0, 1001)
X0, V, B1, B2 = -5.0, 0.01, 0.1, 0.5


def np_sol(sol):
    return jax.tree.map(np.asarray, sol)


def scaled_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


# --------------------------------------------------------------------------- 1-D closed forms


@pytest.mark.parametrize("memory_size,batch_size,step_size", [(50, 5, 2e-5), (500, 5, 2e-5), (300, 10, 1e-4)])
def test_fixed_intercept_matches_k_both_branches(memory_size, batch_size, step_size):
    params = P._replace(initial_intercept=B2)  # θ2 frozen at β2
    sol = np_sol(th.solve(params, memory_size, batch_size, step_size, frozen="intercept"))
    exact = np.asarray(th.fixed_intercept_solution(T, memory_size, batch_size, step_size, -0.1))
    assert np.all(np.asarray(th.fixed_intercept_exponent(T, memory_size, batch_size, step_size)) >= 0)
    assert np.any(T < memory_size) and np.any(T > memory_size)  # both branches covered
    np.testing.assert_allclose(sol.dtheta1, exact, rtol=1e-6, atol=0)
    np.testing.assert_array_equal(sol.dtheta2, 0.0)
    assert not sol.direction_changed


def test_fixed_intercept_k_is_continuous_at_N():
    N = 400.0
    k = np.asarray(th.fixed_intercept_exponent(np.array([N, np.nextafter(N, 1e9)]), N, 5, 2e-5))
    assert abs(k[1] - k[0]) <= 1e-12 * k[0]


@pytest.mark.parametrize("memory_size,priority_exponent", [(1, None), (100, None), (1000, None), (100, 2.0)])
def test_fixed_slope_matches_exponential(memory_size, priority_exponent):
    params = P._replace(initial_slope=B1)  # θ1 frozen at β1
    sol = np_sol(th.solve(params, memory_size, 5, 1e-3, priority_exponent=priority_exponent, frozen="slope"))
    exact = np.asarray(th.fixed_slope_solution(T, 5, 1e-3, 0.5))
    np.testing.assert_allclose(sol.dtheta2, exact, rtol=1e-6, atol=0)
    np.testing.assert_array_equal(sol.dtheta1, 0.0)


def test_fixed_slope_erratum_2_times():
    # Δθ/Δθ⁰ = 0.05 at t = ln 20/(mα): ≈ 30 000 steps for m = 5, α = 2e-5 (not 5e-5).
    t = math.log(20) / (5 * 2e-5)
    assert 29_000 < t < 31_000
    assert float(th.fixed_slope_solution(t, 5, 2e-5, 1.0)) == pytest.approx(0.05, rel=1e-12)
    # Fixed intercept reaches k = 3 in < 1200 steps at α = 5e-5 (N large, e.g. 1000).
    k = np.asarray(th.fixed_intercept_exponent(np.arange(0, 1201.0), 1000, 5, 5e-5))
    assert k[-1] > 3


def test_prioritized_rate_difference_matches_ode():
    """k_pri − k from the ODEs (θ2 frozen, β = 2) equals ∫ d(k_pri − k)/dt (docs/paper_readings.md §5)."""
    params = P._replace(initial_intercept=B2)
    N, m, a = 500, 5, 2e-5
    er = np_sol(th.solve(params, N, m, a, frozen="intercept"))
    per = np_sol(th.solve(params, N, m, a, priority_exponent=2.0, frozen="intercept"))
    diff_ode = np.log(er.dtheta1 / per.dtheta1)  # k_pri − k
    rate = lambda t: float(th.prioritized_rate_difference(t, N, m, a))  # noqa: E731
    for t in (100.0, 500.0, 800.0, 1000.0):
        pts = [N] if t > N else None
        expected = quad(rate, 0.0, t, points=pts, epsabs=0, epsrel=1e-11, limit=200)[0]
        assert diff_ode[int(t)] == pytest.approx(expected, rel=1e-6)
        assert expected > 0  # pER converges faster with θ2 fixed
    # The bracket form equals μ Var(y²)/⟨y²⟩ over the window.
    for t in (50.0, 700.0):
        ya, yb = X0 + V * (t - min(t, N)), X0 + V * t
        m2 = (yb**3 - ya**3) / (3 * (yb - ya))
        m4 = (yb**5 - ya**5) / (5 * (yb - ya))
        assert float(th.prioritized_rate_difference(t, N, m, a)) == pytest.approx(
            m * a * (m4 - m2 * m2) / m2, rel=1e-9)


# --------------------------------------------------------------------------- b-coefficient form


def b_form_rhs(N, m, a, g, beta1, beta2, x0=X0, v=V):
    mu = m * a

    def rhs(t, th_):
        n = min(t, N)
        b10 = mu * (n * n * v * v / 3 + x0 * x0 - n * v * x0)
        b11 = mu * (2 * v * x0 - n * v * v)
        b12 = mu * v * v  # docs/paper_readings.md §1
        b20, b21, b22 = mu * (x0 - n * v / 2), mu * v, mu
        e1 = (1 - g) * th_[0] - beta1
        e2 = (1 - g) * th_[1] - g * v * abs(th_[0]) - beta2
        return [-(b10 + b11 * t + b12 * t * t) * e1 - (b20 + b21 * t) * e2,
                -(b20 + b21 * t) * e1 - b22 * e2]

    return rhs


def solve_piecewise(rhs, y0, N, t_eval):
    """solve_ivp (DOP853, tight) in pieces split at the kink t = N."""
    out, y, t0 = [], np.asarray(y0, float), 0.0
    for t1 in sorted({min(N, t_eval[-1]), t_eval[-1]}):
        sel = t_eval[(t_eval >= t0) & (t_eval <= t1)]
        if out:
            sel = sel[sel > t0]
        r = solve_ivp(rhs, (t0, t1), y, method="DOP853", t_eval=sel, rtol=1e-12, atol=1e-15)
        assert r.success
        out.append(r.y)
        y, t0 = r.y[:, -1], t1
    return np.concatenate(out, axis=1)


@pytest.mark.parametrize("N,m,a,g", [(100, 5, 1e-2, 0.0), (250, 10, 1e-3, 0.0), (700, 40, 1e-3, 0.0),
                                     (100, 5, 1e-2, 0.5), (300, 10, 1e-3, 0.7)])
def test_ode_matches_b_coefficient_form(N, m, a, g):
    sol = np_sol(th.solve(P, N, m, a, g))
    assert not sol.direction_changed
    ref = solve_piecewise(b_form_rhs(N, m, a, g, B1, B2), [0.0, 1.0], N, T)
    th1s, th2s = sol.fixed_point
    assert scaled_err(sol.dtheta1, ref[0] - th1s) <= 1e-6
    assert scaled_err(sol.dtheta2, ref[1] - th2s) <= 1e-6


def test_b_coefficients_values():
    N, m, a = 300, 10, 1e-3
    mu = m * a
    for t in (0.0, 120.0, 300.0, 650.0):
        n = min(t, N)
        got = [float(c) for c in th.b_coefficients(t, N, m, a)]
        want = [mu * (n * n * V * V / 3 + X0 * X0 - n * V * X0), mu * (2 * V * X0 - n * V * V), mu * V * V,
                mu * (X0 - n * V / 2), mu * V, mu]
        np.testing.assert_allclose(got, want, rtol=1e-14)


# --------------------------------------------------------------------------- second-order equation


def second_order_solution(coef, N, m, a, t_eval, d1_0=-0.1, d2_0=0.5):
    c = {k: float(v) for k, v in coef.items()}

    def rhs(t, y):
        if t <= N:
            den = c["d0"] + c["d1"] * t
            p = (c["c10"] + c["c11"] * t + c["c12"] * t**2 + c["c13"] * t**3) / den
            q = (c["c00"] + c["c01"] * t + c["c02"] * t**2 + c["c03"] * t**3) / den
        else:
            den = c["h0"] + c["h1"] * t
            p = (c["g10"] + c["g11"] * t + c["g12"] * t**2 + c["g13"] * t**3) / den
            q = (c["g00"] + c["g01"] * t + c["g02"] * t**2) / den
        return [y[1], -p * y[1] - q * y[0]]

    slope0 = float(th.second_order_initial_slope(m, a, d1_0, d2_0))
    return solve_piecewise(rhs, [d1_0, slope0], N, t_eval)[0]


@pytest.mark.parametrize("N,m,a,t_end", [(100, 10, 1e-3, 540.0), (300, 5, 1e-2, 640.0), (50, 40, 1e-3, 500.0)])
def test_second_order_equation_reproduces_first_order(N, m, a, t_end):
    # The second-order form is singular where the window's mean position is 0
    # (t = N/2 − x0/v for t ≥ N); stop before it.
    assert t_end < N / 2 - X0 / V
    sol = np_sol(th.solve(P, N, m, a))
    t_eval = T[T <= t_end]
    d1 = second_order_solution(th.second_order_coefficients(N, m, a), N, m, a, t_eval)
    assert scaled_err(d1, sol.dtheta1[: t_eval.size]) <= 1e-6


def test_printed_second_order_coefficients_are_wrong():
    """The paper's d1 = 24v and c01 = 6αmv²x0 (docs/paper_readings.md §3) do not reproduce the system."""
    N, m, a = 100, 10, 1e-3
    sol = np_sol(th.solve(P, N, m, a))
    coef = dict(th.second_order_coefficients(N, m, a))
    coef["d1"] = 24 * V
    coef["c01"] = 6 * a * m * V**2 * X0
    t_eval = T[T <= N]
    d1 = second_order_solution(coef, N, m, a, t_eval)
    assert scaled_err(d1, sol.dtheta1[: t_eval.size]) > 1e-3


def test_second_order_coefficients_match_elimination():
    """(p, q) equal [(P+μ)R − R']/R and [P'R − R³ + μPR − PR']/R from the b-form."""
    N, m, a = 200, 10, 1e-3
    mu = m * a
    for t in (5.0, 150.0, 200.0, 350.0, 900.0):
        n = min(t, N)
        Pt = mu * (n * n * V * V / 3 + X0 * X0 - n * V * X0 + (2 * V * X0 - n * V * V) * t + V * V * t * t)
        Rt = mu * (X0 - n * V / 2 + V * t)
        if t <= N:
            dP, dR = mu * (X0 * V + 2 * V * V * t / 3), mu * V / 2
        else:
            dP, dR = mu * (2 * V * X0 - N * V * V + 2 * V * V * t), mu * V
        p_want = ((Pt + mu) * Rt - dR) / Rt
        q_want = (dP * Rt - Rt**3 + mu * Pt * Rt - Pt * dR) / Rt
        p, q = (float(z) for z in th.second_order_terms(t, N, m, a))
        assert p == pytest.approx(p_want, rel=1e-11)
        assert q == pytest.approx(q_want, rel=1e-11)


# --------------------------------------------------------------------------- asymptotic stages


def test_first_stage_matches_ode():
    """Eq. (Beginning) freezes the window at x0; the neglected drift is O(v t/|x0|).

    With m = 10, α = 0.01 the fast mode decays at μ(x0²+1) = 2.6/step. Over
    t ≤ 20 the error is bounded by (v t/|x0|)·max|Δθ⁰| and scales with v.
    """
    errs = {}
    for v in (1e-2, 1e-4):
        sol = np_sol(th.solve(P._replace(speed=v), 100, 10, 1e-2))
        d1, d2 = (np.asarray(z) for z in th.first_stage_solution(T[:21], 10, 1e-2, -0.1, 0.5))
        err = max(np.abs(sol.dtheta1[:21] - d1).max(), np.abs(sol.dtheta2[:21] - d2).max())
        assert err <= (v * 20 / 5.0) * 0.5
        errs[v] = err
    assert 50 < errs[1e-2] / errs[1e-4] < 200  # first order in v
    lim1, lim2 = (float(z) for z in th.first_stage_limit(-0.1, 0.5))
    assert lim1 == pytest.approx(-0.1 + 5 / 26, rel=1e-14)
    sol = np_sol(th.solve(P._replace(speed=1e-4), 100, 10, 1e-2))
    assert abs(sol.dtheta1[10] - lim1) <= 1e-4 and abs(sol.dtheta2[10] - lim2) <= 1e-4


def test_last_stage_matches_ode():
    """Eq. (Last) (docs/paper_readings.md §4) in its regime: x0 = 0 and an online window (n ≡ 0), so
    b10 = b11 = b20 = 0; it then neglects R Δθ2 in dΔθ1/dt and μ Δθ2 in dΔθ2/dt,
    relative size O((μ/v)^{2/3}) on the time scale (3/(μ v²))^{1/3}."""
    params = th.TheoryParams(initial_position=0.0, speed=1.0, initial_slope=0.0, initial_intercept=0.5)
    online = th.MemorySizeSchedule(np.array([0.0]), np.array([0.0]))
    for mu in (1e-4, 1e-6):
        sol = np_sol(th.solve(params, online, 1, mu))
        l1, l2 = (np.asarray(z) for z in th.last_stage_solution(T, 1, mu, -0.1, 0.0, speed=1.0))
        bound = (mu / 1.0) ** (2 / 3) * 0.1
        assert np.abs(sol.dtheta1 - l1).max() <= bound
        assert np.abs(sol.dtheta2 - l2).max() <= bound
        _, lim2 = th.last_stage_limit(1, mu, -0.1, 0.0, speed=1.0)
        assert abs(sol.dtheta2[-1] - float(lim2)) <= bound


# --------------------------------------------------------------------------- ER / pER / windows / grids


def test_per_with_zero_exponent_equals_er():
    for args in ((100, 10, 1e-3, 0.0), (400, 5, 1e-2, 0.5)):
        er = np_sol(th.solve(P, *args))
        per = np_sol(th.solve(P, *args, priority_exponent=0.0))
        # Different formulas, same integrand: equal to the solver's accuracy.
        assert scaled_err(per.dtheta1, er.dtheta1) <= 1e-7
        assert scaled_err(per.dtheta2, er.dtheta2) <= 1e-7


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.3, 2.0, 3.7])
def test_window_averages_exact(beta):
    cases = [(-5.0, -4.0, 0.3, 1.2), (-5.0, -4.0, 0.3, 1.4), (-5.0, 5.0, 0.1, 0.05), (2.0, 2.0, 0.7, -1.0),
             (-3.0, -2.9, 1e-9, 0.4), (-1.0, 3.0, 0.0, 0.2), (-1.0, 1.0, 1.0, 0.0), (1.0, 1.0001, 2.0, -2.0)]
    for ya, yb, A, B in cases:
        g1, g2 = (float(z) for z in th.window_averages(ya, yb, A, B, beta))
        if ya == yb:
            u = A * ya + B
            want1, want2 = (ya * u, u) if abs(u) > 0 else (0.0, 0.0)
        else:
            def avg(f):  # ⟨|u|^β f(y)⟩ with the |y − root|^β factor as an exact quadrature weight
                r = -B / A if A != 0 else np.inf
                if not ya <= r <= yb:  # no root: a smooth integrand
                    g = lambda y: abs(A * y + B) ** beta * f(y)  # noqa: E731
                    return quad(g, ya, yb, epsabs=0, epsrel=1e-13)[0] / (yb - ya)
                total, c = 0.0, abs(A) ** beta
                if r > ya:  # (r − y)^β on [ya, min(r, yb)]
                    total += quad(f, ya, min(r, yb), weight="alg", wvar=(0.0, beta), epsabs=0, epsrel=1e-13)[0]
                if r < yb:  # (y − r)^β on [max(r, ya), yb]
                    total += quad(f, max(r, ya), yb, weight="alg", wvar=(beta, 0.0), epsabs=0, epsrel=1e-13)[0]
                return c * total / (yb - ya)

            e0 = avg(lambda y: 1.0)
            want1 = avg(lambda y: (A * y + B) * y) / e0
            want2 = avg(lambda y: A * y + B) / e0
        assert g1 == pytest.approx(want1, rel=1e-9, abs=1e-14)
        assert g2 == pytest.approx(want2, rel=1e-9, abs=1e-14)


@pytest.mark.parametrize("beta", [200, 1000, 10_000])
def test_window_averages_exact_at_large_exponents(beta):
    """Against the antiderivatives in 80-digit decimal arithmetic (integer β, the float inputs' exact values). The
    averages read |u|^β unscaled: at β = 200 they were off by 1e-4, from β ≈ 1000 they underflowed to (0, 0),
    so the pER theory stopped learning (M = 0.6 at β = 10^6 where the game reaches 0.49), a probe."""
    import decimal

    def G(u, p):  # sign(u)^(p+1) |u|^k / k, the antiderivative of |u|^β u^p
        k = beta + p + 1
        return (1 if u >= 0 else -1) ** (p + 1) * abs(u) ** k / k

    def exact(ya, yb, A, B):
        with decimal.localcontext(prec=80):
            ya, yb, A, B = map(decimal.Decimal, (ya, yb, A, B))  # (a float's exact value)
            ua, ub = A * ya + B, A * yb + B
            e0, e1, e2 = ((G(ub, p) - G(ua, p)) / (ub - ua) for p in range(3))
            ey = (ya + yb) / 2 * e1 + (e2 - (ua + ub) / 2 * e1) / A
            return float(ey / e0), float(e1 / e0)

    cases = [(-5.0, -4.0, 0.3, 1.2), (-5.0, -4.0, 0.3, 1.4), (-5.0, 5.0, 0.1, 0.05), (1.0, 1.0001, 2.0, -2.0),
             (-5.0, -4.99, 0.1, 0.6), (-5.0, -3.0, -0.05, 0.45), (-2.0, 1.0, 0.25, 0.125)]
    for ya, yb, A, B in cases:
        got = [float(z) for z in th.window_averages(ya, yb, A, B, float(beta))]
        assert got == pytest.approx(exact(ya, yb, A, B), rel=1e-12, abs=1e-15), (ya, yb, A, B)
    # β → ∞: the average moves to the end of the window with the larger |u| (u = −0.3 at y = −5; at y = −4, 0).
    g1, g2 = (float(z) for z in th.window_averages(-5.0, -4.0, 0.3, 1.2, 1e8))
    assert (g1, g2) == pytest.approx((1.5, -0.3), rel=1e-7)


def test_driven_window_constant_equals_fixed():
    fixed = np_sol(th.solve(P, 200, 10, 1e-3, priority_exponent=2.0))
    sched = th.MemorySizeSchedule(np.array([0.0, 1000.0]), np.array([200.0, 200.0]))
    driven = np_sol(th.solve(P, sched, 10, 1e-3, priority_exponent=2.0))
    assert scaled_err(driven.dtheta1, fixed.dtheta1) <= 1e-7
    assert scaled_err(driven.dtheta2, fixed.dtheta2) <= 1e-7
    er = np_sol(th.solve(P, 200, 10, 1e-3))
    er_fn = np_sol(th.solve(P, lambda t: 200.0, 10, 1e-3))
    assert scaled_err(er_fn.dtheta1, er.dtheta1) <= 1e-7


def test_driven_window_follows_schedule():
    # A growing memory N(t) = 50 + t/2 is between fixed N = 50 and N = 550 in effect.
    sched = th.MemorySizeSchedule(T, 50.0 + T / 2)
    driven = np_sol(th.solve(P, sched, 10, 1e-3))
    ref = np_sol(th.solve(P, 50.0 + 1000.0 / 2, 10, 1e-3))
    assert np.isfinite(driven.metric) and not driven.direction_changed
    # Until t = 100 the window is min(t, N(t)) = t for both.
    assert scaled_err(driven.dtheta1[:100], ref.dtheta1[:100]) <= 1e-7


def grid_axes():
    return np.array([10, 100, 250, 500, 1000]), np.array([5, 10, 40]), np.array([1e-3, 3e-3, 1e-2, 2e-4]), \
        np.array([0.0, 0.3, 0.5, 0.7, 0.9])


def test_grid_equals_one_by_one():
    Ns, ms, alphas, gammas = grid_axes()
    N, m, a, g = np.meshgrid(Ns, ms, alphas, gammas, indexing="ij")  # 300 configurations
    grid = np_sol(th.solve_grid(P, N, m, a, g))
    assert grid.dtheta1.shape == (5, 3, 4, 5, T.size) and grid.metric.shape == (5, 3, 4, 5)
    for idx in [(0, 0, 0, 0), (2, 1, 0, 2), (4, 2, 2, 4), (1, 1, 3, 3), (3, 0, 1, 1)]:
        one = np_sol(th.solve(P, N[idx], m[idx], a[idx], g[idx]))
        # Batched adaptive stepping rounds differently: equal to the solver's accuracy.
        assert scaled_err(grid.dtheta1[idx], one.dtheta1) <= 1e-7
        assert scaled_err(grid.dtheta2[idx], one.dtheta2) <= 1e-7
        assert grid.metric[idx] == pytest.approx(float(one.metric), rel=1e-6, abs=1e-9)
    # Solved in fixed batches (the compile memory_cusps shares): same values, same shapes.
    chunked = np_sol(th.solve_grid(P, N, m, a, g, options=th.SolverOptions(chunk=th.cusps.CHUNK)))
    assert jax.tree.map(np.shape, chunked) == jax.tree.map(np.shape, grid)
    assert scaled_err(chunked.dtheta1, grid.dtheta1) <= 1e-7 and scaled_err(chunked.dtheta2, grid.dtheta2) <= 1e-7
    np.testing.assert_array_equal(chunked.direction_changed, grid.direction_changed)
    th1s = B1 / (1 - gammas)
    np.testing.assert_allclose(grid.fixed_point[0, 0, 0, :, 0], th1s, rtol=1e-15)
    np.testing.assert_allclose(grid.fixed_point[0, 0, 0, :, 1], (B2 + gammas * V * th1s) / (1 - gammas), rtol=1e-15)


def test_paper_claims_memory_size_effect():
    """Fig. 2c/2d (γ = 0, α = 1e-3): M(N) over N ∈ [10, 1000]."""
    Ns = np.arange(10, 1001, 10)
    ms = np.array([5, 10, 40])
    N, m = np.meshgrid(Ns, ms)
    M = np.asarray(th.solve_grid(P, N, m, 1e-3).metric)
    assert not np.any(np.asarray(th.solve_grid(P, N, m, 1e-3).direction_changed))
    # m = 10: interior minimum near N = 250 (the paper: "around 250").
    best10 = Ns[np.argmin(M[1])]
    assert 200 <= best10 <= 300
    assert M[1].min() < 0.05 * min(M[1, 0], M[1, -1])
    # m = 5: interior minimum too (at N ≈ 100).
    assert 10 < Ns[np.argmin(M[0])] < 1000
    # m = 40: decreasing in N, up to wiggles < 2.5e-5 where |Δθ(T)| crosses 0.
    assert np.all(np.diff(M[2]) < 2.5e-5)
    assert M[2, -1] < 1e-6 * M[2, 0]
    assert np.all(np.diff(M[2, :30]) < 0)  # strictly decreasing for N ≤ 300


# --------------------------------------------------------------------------- options, flags, errors


def test_real_weights_readings():
    g = 0.5
    reward = np_sol(th.solve(P, 100, 5, 1e-2, g))
    np.testing.assert_allclose(reward.fixed_point, [B1 / (1 - g), (B2 + g * V * B1 / (1 - g)) / (1 - g)], rtol=1e-15)
    fp = np_sol(th.solve(P, 100, 5, 1e-2, g, real_weights="fixed_point"))
    np.testing.assert_allclose(fp.fixed_point, [B1, B2], rtol=1e-15)
    beta1, beta2, _, _ = th.fixed_point_and_rewards(B1, B2, V, g, "fixed_point")
    same = np_sol(th.solve(P._replace(reward_slope=float(beta1), reward_intercept=float(beta2)), 100, 5, 1e-2, g))
    assert scaled_err(same.dtheta1, fp.dtheta1) <= 1e-7
    at_zero = np_sol(th.solve(P, 100, 5, 1e-2, 0.0, real_weights="fixed_point"))
    assert scaled_err(at_zero.dtheta1, np_sol(th.solve(P, 100, 5, 1e-2)).dtheta1) <= 1e-12


def test_direction_change_is_flagged():
    assert not np_sol(th.solve(P, 100, 5, 1e-2)).direction_changed
    flipped = np_sol(th.solve(P._replace(reward_slope=-0.1), 100, 5, 1e-2))  # θ1 → −0.1 < 0
    assert flipped.direction_changed


def test_untraced_x64_scope_and_dtype():
    sol = th.solve(P, 100, 10, 1e-3)
    assert sol.dtheta1.dtype == np.float64
    assert jax.numpy.asarray(1.0).dtype == np.float32 or jax.config.jax_enable_x64  # global untouched


def test_theory_runs_on_the_host_cpu_unless_the_caller_chose_a_device(monkeypatch):
    from jaxreplay.paper.theory import _common

    seen = []
    probe = _common.x64(lambda: seen.append(jax.config.jax_default_device))
    cpu = jax.devices("cpu")[0]
    probe()  # CPU backend: placement left to JAX
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")  # as on a GPU machine
    probe()
    with jax.default_device(cpu):  # the caller's choice is kept, not replaced
        assert _common.host_device() is None
        probe()
    monkeypatch.setattr(jax, "devices", lambda backend=None: (_ for _ in ()).throw(RuntimeError("no cpu")))
    probe()  # no CPU backend (JAX_PLATFORMS=cuda): placement left to JAX
    assert seen == [None, cpu, cpu, None]
    assert _common.host_device() is None


def test_tracing_without_x64_raises_clear_error():
    with pytest.raises(RuntimeError, match="enable_x64"):
        jax.vmap(lambda n: th.solve(P, n, 10, 1e-3).metric)(np.array([10, 20]))
    with jax.enable_x64(True):
        out = jax.vmap(lambda n: th.solve(P, n, 10, 1e-3).metric)(np.array([100.0, 250.0]))
    np.testing.assert_allclose(np.asarray(out), [float(th.solve(P, 100, 10, 1e-3).metric),
                                                 float(th.solve(P, 250, 10, 1e-3).metric)], rtol=1e-9)


@pytest.mark.parametrize("kwargs,name", [
    (dict(memory_size=0), "memory_size"),
    (dict(memory_size=2.5), "memory_size"),
    (dict(batch_size=0), "batch_size"),
    (dict(step_size=float("nan")), "step_size"),
    (dict(step_size=-1e-3), "step_size"),
    (dict(discount=1.0), "discount"),
    (dict(discount=-0.1), "discount"),
    (dict(priority_exponent=-1.0), "priority_exponent"),
    (dict(frozen="both"), "frozen"),
    (dict(real_weights="true"), "real_weights"),
    (dict(times=np.array([0.0, 2.0, 1.0])), "times"),
    (dict(params=th.TheoryParams(speed=-1.0)), "speed"),
    (dict(params=th.TheoryParams(initial_position=float("inf"))), "initial_position"),
    (dict(memory_size=th.MemorySizeSchedule(np.array([0.0, 1.0]), np.array([1.0, -1.0]))), "memory_size.sizes"),
])
def test_bad_input_raises(kwargs, name):
    args = dict(params=P, memory_size=100, batch_size=5, step_size=1e-3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        th.solve(**args)
    if not isinstance(kwargs.get("memory_size"), th.MemorySizeSchedule) and "times" not in kwargs:
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            th.solve_grid(**args)


def test_analytic_bad_input_raises():
    with pytest.raises(ValueError, match="memory_size"):
        th.fixed_intercept_exponent(1.0, 0, 5, 1e-3)
    with pytest.raises(ValueError, match="step_size"):
        th.fixed_slope_solution(1.0, 5, float("nan"), 1.0)
    with pytest.raises(ValueError, match="batch_size"):
        th.second_order_coefficients(100, 0, 1e-3)
    # The last stage divides by 3 v: a standing agent (v = 0) is refused, not NaN.
    with pytest.raises(ValueError, match=r"speed must be > 0 in last_stage_limit .*got 0\.0"):
        th.last_stage_limit(5, 1e-3, 1.0, 1.0, speed=0.0)
    with pytest.raises(ValueError, match=r"speed must be > 0 in last_stage_solution"):
        th.last_stage_solution(10.0, 5, 1e-3, 1.0, 1.0, speed=0.0)


# --------------------------------------------------------------------------- cusps of M(N)

GRID30 = np.arange(10.0, 1001.0, 30.0)  # the default reproduction's N grid


@pytest.fixture(scope="module", params=[None, 2.0], ids=["ER", "pER"])
def cusps_16_20(request):
    """memory_cusps for m = 16, 18, 20 (α = 1e-3, γ = 0) on the step-30 grid, and a brute-force
    scan of Δθ(T) over every integer N in [10, 1000] (one batched solve; pER, 6x dearer per
    solve, scans m = 18 only)."""
    pe = request.param
    ms = np.array([16, 18, 20])
    found = th.memory_cusps(ms, 1e-3, 0.0, pe, memory_sizes=GRID30)
    scanned = [0, 1, 2] if pe is None else [1]
    fine = np.arange(10.0, 1001.0)
    scan = th.final_dtheta(fine[None, :], ms[scanned, None], 1e-3, 0.0, pe)  # [len(scanned), 991, 2]
    return pe, ms, found, scanned, fine, scan


def test_cusp_refined_minimum_beats_the_grid(cusps_16_20):
    pe, ms, found = cusps_16_20[:3]
    for m, c in zip(ms, found):
        # On the step-30 grid the optimum of m = 16..20 sits at N_max ...
        assert c.grid_best_memory == 1000, m
        # ... but M(N) has a cusp near N ≈ 290–306 where Δθ(T) changes sign, far below it.
        assert 280 < c.best_memory < 310, (m, c.best_memory)
        assert c.best_metric < 1e-7 < 1e-2 * c.grid_best_metric, (m, c.best_metric, c.grid_best_metric)
        j = int(np.argmin(np.abs(c.cusp_memory - c.best_memory)))
        assert c.cusp_memory[j] == c.best_memory
        # At the cusp the component that changes sign is ~0, and so is M.
        assert abs(c.cusp_dtheta[j, c.cusp_component[j]]) < 1e-8
        assert c.cusp_metric[j] == pytest.approx(np.abs(c.cusp_dtheta[j]).sum(), rel=1e-12)
        # The merged curve holds the dip; the grid values are untouched.
        N, M = c.curve()
        assert np.all(np.diff(N) >= 0) and N.size == GRID30.size + c.cusp_memory.size
        assert M.min() == c.best_metric
        np.testing.assert_array_equal(c.grid_metric, np.abs(c.grid_dtheta).sum(-1))
    if pe is None:  # ER: the cusp's N grows with m (Fig. 2d's ridge of stars)
        assert found[0].best_memory < found[1].best_memory < found[2].best_memory


def test_cusps_match_a_brute_force_scan(cusps_16_20):
    pe, ms, found, scanned, fine, scan = cusps_16_20
    for k, j in enumerate(scanned):
        m, c = ms[j], found[j]
        # Every sign change of a component between neighbouring integers (above solver noise) ...
        brute = []
        for comp in range(2):
            v = scan[k, :, comp]
            idx = np.nonzero((np.sign(v[:-1]) * np.sign(v[1:]) < 0)
                             & (np.maximum(np.abs(v[:-1]), np.abs(v[1:])) >= 1e-9))[0]
            brute += [(float(fine[i]), comp) for i in idx]
        # ... is a located cusp of that component, within 1 in N (in [n, n + 1]), and there are no others.
        assert len(brute) == c.cusp_memory.size, (m, brute, c.cusp_memory)
        for comp in range(2):
            xs = np.sort(c.cusp_memory[c.cusp_component == comp])
            ns = sorted(n for n, cc in brute if cc == comp)
            assert len(xs) == len(ns) and all(n <= x <= n + 1 for n, x in zip(ns, xs)), (m, comp, ns, xs)
        # The brute-force optimum over integer N is next to the refined one, and not below it.
        M_scan = np.abs(scan[k]).sum(-1)
        assert abs(fine[np.argmin(M_scan)] - c.best_memory) <= 1
        assert M_scan.min() >= c.best_metric
        assert M_scan[np.nonzero(np.isin(fine, GRID30))[0]].min() == pytest.approx(c.grid_best_metric, rel=1e-6)


def test_final_dtheta_agrees_with_solve():
    for pe in (None, 2.0):
        one = np_sol(th.solve(P, 300, 18, 1e-3, priority_exponent=pe))
        d = th.final_dtheta(np.array([300.0, 300.5]), 18, 1e-3, 0.0, pe)
        np.testing.assert_allclose(d[0], [one.dtheta1[-1], one.dtheta2[-1]], rtol=1e-6, atol=1e-12)
        assert not np.allclose(d[1], d[0], rtol=1e-6)  # a non-integer N is used as given


def test_memory_cusps_with_given_grid_and_chunked_grid():
    ms = np.array([5, 18])
    N, m = np.meshgrid(GRID30, ms)  # [2, 34]
    grid = np_sol(th.solve_grid(P, N, m, 1e-3, options=th.SolverOptions(chunk=th.cusps.CHUNK)))
    assert grid.dtheta1.shape == (2, GRID30.size, T.size)
    gd = np.stack([grid.dtheta1[..., -1], grid.dtheta2[..., -1]], axis=-1)
    given = th.memory_cusps(ms, 1e-3, memory_sizes=GRID30, grid_dtheta=gd)
    solved = th.memory_cusps(ms, 1e-3, memory_sizes=GRID30)
    for a, b in zip(given, solved):
        np.testing.assert_allclose(a.cusp_memory, b.cusp_memory, rtol=0, atol=1e-2)
        np.testing.assert_array_equal(a.cusp_component, b.cusp_component)
        assert a.best_memory == pytest.approx(b.best_memory, abs=1e-2)
    # m = 5: the optimum N ≈ 95 (grid: 100) is a cusp too; M drops by > 1e4.
    assert 90 < given[0].best_memory < 100 and given[0].grid_best_memory == 100
    assert given[0].best_metric < 1e-4 * given[0].grid_best_metric
    scalar = th.memory_cusps(18, 1e-3, memory_sizes=GRID30, grid_dtheta=gd[1])
    assert isinstance(scalar, th.MemoryCusps) and scalar.best_memory == given[1].best_memory


def test_memory_cusps_bad_input_raises():
    with pytest.raises(ValueError, match="memory_sizes"):
        th.memory_cusps(18, memory_sizes=np.array([100.0, 50.0]))
    with pytest.raises(ValueError, match="memory_sizes"):
        th.memory_cusps(18, memory_sizes=np.array([0.5, 50.0]))
    with pytest.raises(ValueError, match="batch_size"):
        th.memory_cusps(0, memory_sizes=GRID30)
    with pytest.raises(ValueError, match="grid_dtheta"):
        th.memory_cusps(18, memory_sizes=GRID30, grid_dtheta=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="memory_size"):
        th.final_dtheta(0.5, 18)


def test_solver_options_defaults():
    # The documented defaults; the cusp search batches its solves in CHUNK lanes (one compile).
    assert th.SolverOptions() == (1e-10, 1e-13, 200_000, None)
    assert th.CuspOptions() == (1e-3, 1e-10, 1e-9, 100, th.SolverOptions(chunk=th.cusps.CHUNK))
    assert th.cusps.CHUNK == 64


@pytest.mark.parametrize("options,message", [
    (th.SolverOptions(rtol=-1e-6), "options.rtol must be >= 0.0"),
    (th.SolverOptions(atol=float("nan")), "options.atol"),
    (th.SolverOptions(rtol=0.0, atol=0.0), "options.rtol and options.atol cannot both be 0"),
    (th.SolverOptions(rtol=np.array([1e-6, 1e-7])), "options.rtol must be a Python number"),
    (th.SolverOptions(max_steps=0), "options.max_steps must be >= 1"),
    (th.SolverOptions(max_steps=1e5), "options.max_steps must be a Python int"),
    (th.SolverOptions(chunk=0), "options.chunk must be >= 1"),
    ((1e-10, 1e-13, 200_000, None), "options must be a jaxreplay.paper.theory.SolverOptions, got tuple"),
])
def test_bad_solver_options_name_the_field(options, message):
    # Refused before anything is compiled, by every entry point that solves.
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        th.solve(P, 100, 5, 1e-3, options=options)
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        th.solve_grid(P, np.array([100, 200]), 5, 1e-3, options=options)
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        th.final_dtheta(100.0, 5, options=options)


@pytest.mark.parametrize("options,message", [
    (th.CuspOptions(xtol=-1.0), "options.xtol must be >= 0.0"),
    (th.CuspOptions(ftol=float("inf")), "options.ftol"),
    (th.CuspOptions(noise_floor=-1e-9), "options.noise_floor must be >= 0.0"),
    (th.CuspOptions(max_iterations=0), "options.max_iterations must be >= 1"),
    (th.CuspOptions(solver=th.SolverOptions(chunk=2.5)), "options.solver.chunk must be a Python int"),
    (th.SolverOptions(), "options must be a jaxreplay.paper.theory.CuspOptions, got SolverOptions"),
])
def test_bad_cusp_options_name_the_field(options, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        th.memory_cusps(18, memory_sizes=GRID30, grid_dtheta=np.ones((GRID30.size, 2)), options=options)


def test_driven_window_argument_is_checked():
    with pytest.raises(ValueError, match="memory_size must be a number of transitions, a MemorySizeSchedule"):
        th.solve(P, None, 5, 1e-3)
    with pytest.raises(ValueError, match=r"memory_size\.times must be a non-empty, strictly increasing"):
        th.solve(P, th.MemorySizeSchedule(np.array([1.0, 0.0]), np.array([5.0, 5.0])), 5, 1e-3)
    with pytest.raises(ValueError, match=r"memory_size\.sizes must have the shape of memory_size\.times"):
        th.solve(P, th.MemorySizeSchedule(np.array([0.0, 1.0]), np.array([5.0])), 5, 1e-3)


def test_step_budget_of_the_options_is_the_solvers():
    # 10 steps cannot cover 100 steps of dynamics at rtol 1e-10: flagged (it raised equinox's step-budget error).
    sol = th.solve(P, 100, 5, 1e-3, times=np.linspace(0.0, 100.0, 11), options=th.SolverOptions(max_steps=10))
    assert not bool(sol.converged) and np.isnan(float(sol.metric)) and np.isnan(np.asarray(sol.dtheta1)).all()
    assert bool(th.solve(P, 100, 5, 1e-3, times=np.linspace(0.0, 100.0, 11)).converged)


def test_theory_signatures_have_at_most_ten_parameters():
    import ast
    import pathlib

    root = pathlib.Path(th.__file__).parent
    wide = {}
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                if count > 10:
                    wide[f"{path.name}:{node.name}"] = count
    assert wide == {}


def test_a_solve_that_runs_out_of_steps_is_flagged_and_its_grid_goes_on():
    """α = 100 diverges: its solve exhausts the step budget. It used to raise out of the whole ``solve_grid``
    (the two good configurations lost); now that one is ``converged`` false with NaN numbers, the others
    are what they are alone."""
    options, times = th.SolverOptions(max_steps=2_000), np.arange(201.0)
    grid = th.solve_grid(memory_size=50.0, batch_size=1, step_size=np.array([1e-3, 2e-3, 100.0]), times=times,
                         options=options)
    assert np.asarray(grid.converged).tolist() == [True, True, False]
    metric = np.asarray(grid.metric)
    assert np.isnan(metric[2]) and np.isfinite(metric[:2]).all()
    alone = th.solve(memory_size=50.0, batch_size=1, step_size=2e-3, times=times, options=options)
    assert bool(alone.converged) and float(alone.metric) == pytest.approx(float(metric[1]), rel=1e-12)


def test_traced_hyperparameters_outside_the_model_are_flagged():
    """Under jit nothing can be refused: N = -5 ran as N = 0 and γ = -0.5 gave a plausible M, unflagged. Now the
    solution says so; a continuous N (the cusp refinement's) is inside the model's domain."""
    times = np.arange(101.0)
    with jax.enable_x64(True):
        solve = jax.jit(lambda n, a, g: th.solve(P, n, 5, a, g, times=times))
        flags = [bool(solve(np.float64(n), np.float64(a), np.float64(g)).invalid_hyperparameters)
                 for n, a, g in ((50.0, 1e-3, 0.0), (50.5, 1e-3, 0.5), (-5.0, 1e-3, 0.0), (50.0, 1e-3, -0.5),
                                 (50.0, -1e-3, 0.0), (50.0, 1e-3, 1.0), (float("nan"), 1e-3, 0.0))]
    assert flags == [False, False, True, True, True, True, True]


def test_the_ode_says_where_the_step_size_leaves_its_small_step_regime():
    """At α(1 − γ)(x² + 1) ≥ 1 at the farthest position (x0 = −5: 26α) one update overshoots its target; from 2
    the simulated game diverges (all seeds at α = 0.08) while the ODE still gives M = 7e-5 as if nothing were
    wrong. The solution says so (it did not)."""
    alphas = np.array([0.01, 1 / 26 - 1e-4, 1 / 26 + 1e-4, 0.08])
    sol = th.solve_grid(memory_size=100, batch_size=5, step_size=alphas, times=np.arange(101.0))
    assert sol.overshoots.tolist() == [False, False, True, True]
    assert bool(sol.converged[-1]) and float(sol.metric[-1]) < 1.0  # the ODE alone would not tell
    # γ = 0.5 halves the update's reach; with the intercept frozen only x² counts.
    assert not bool(th.solve(memory_size=100, step_size=0.05, discount=0.5, times=np.arange(11.0)).overshoots)
    frozen = th.solve(th.TheoryParams(initial_intercept=0.5), memory_size=100, step_size=1 / 25 + 1e-4,
                          times=np.arange(11.0), frozen="intercept")
    assert bool(frozen.overshoots)
    # The simulation agrees that the boundary of divergence is near 2 / 26.
    from jaxreplay.experiments import linesearch as ls

    setup = ls.Setup(steps=300, max_capacity=100, max_batch_size=5)
    hp = ls.broadcast_hyperparameters(ls.Hyperparameters(memory_size=100, batch_size=5,
                                                         step_size=np.array([0.07, 0.08], np.float32)), 2)
    result = jax.jit(ls.run_batch, static_argnums=2)(jax.random.split(jax.random.key(0), 2), hp, setup)
    assert result.diverged.tolist() == [False, True]


def test_theory_inputs_that_gave_silent_nan_or_zero_are_named_or_flagged():
    import jax.numpy as jnp

    # Δθ at a stage's start: the solutions are linear in it, a NaN came back as NaN.
    for call, name in ((lambda: th.fixed_intercept_solution(10.0, 100, 5, 1e-3, np.nan), "dtheta0"),
                       (lambda: th.fixed_slope_solution(10.0, 5, 1e-3, np.inf), "dtheta0"),
                       (lambda: th.first_stage_solution(10.0, 5, 1e-3, np.nan, 0.5), "dtheta1_0"),
                       (lambda: th.last_stage_limit(5, 1e-3, 0.1, np.nan), "dtheta2_1")):
        with pytest.raises(ValueError, match=f"^{name} must be finite"):
            call()
    # With m α = 0 nothing moves: the last stage's limit is where it starts (Δθ1 was 0).
    assert [float(x) for x in th.last_stage_limit(5, 0.0, 0.1, 0.2)] == pytest.approx([0.1, 0.2], abs=1e-15)
    assert float(th.last_stage_limit(5, 1e-3, 0.1, 0.2)[0]) == 0.0
    with pytest.raises(ValueError, match="^priority_exponent must be >= 0.0"):  # (it gave (0, 0))
        th.window_averages(0.0, 1.0, 1.0, 1.0, -1.0)
    with pytest.raises(ValueError, match=r"must broadcast together; got shapes memory_size \(3,\), batch_size \(2,\)"):
        th.solve_grid(memory_size=np.array([1, 2, 3]), batch_size=np.array([1, 2]), times=np.arange(5.0))
    # A window that turns NaN: flagged invalid, not only "not converged" (the step budget's meaning).
    sol = th.solve(memory_size=lambda t: jnp.where(t > 50, jnp.nan, 100.0), times=np.arange(101.0))
    assert not bool(sol.converged) and bool(sol.invalid_hyperparameters)
    assert not bool(th.solve(memory_size=lambda t: 100.0 + 0 * t, times=np.arange(101.0)).invalid_hyperparameters)
    # A negative window size ran as 0 (online TD), converged and unflagged; a concrete schedule refuses it (a probe).
    negative = th.solve(memory_size=lambda t: jnp.where(t > 50, -5.0, 100.0), times=np.arange(101.0))
    assert bool(negative.converged) and bool(negative.invalid_hyperparameters)
    with jax.enable_x64(True):
        traced = jax.jit(lambda sizes: th.solve(memory_size=th.MemorySizeSchedule(jnp.array([0.0, 100.0]), sizes),
                                                times=np.arange(101.0)).invalid_hyperparameters)
        assert [bool(traced(jnp.array(v))) for v in ([10.0, 0.0], [10.0, -1.0], [10.0, np.inf])] == [False, True, True]
    with pytest.raises(ValueError, match=r"^memory_size\.sizes must be >= 0"):
        th.solve(memory_size=th.MemorySizeSchedule(np.array([0.0, 100.0]), np.array([10.0, -1.0])))
