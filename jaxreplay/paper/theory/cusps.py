"""Cusps of the final metric M(N) = |Δθ1(T; N)| + |Δθ2(T; N)| over the memory size N.

Where a component of Δθ(T) changes sign as N varies, M(N) has a V-shaped
cusp (a sharp local minimum) that a coarse N grid steps over: the minimum of
M over the grid can then be far above the minimum over N. For 16 ≤ m ≤ 20
(ER, γ = 0, α = 1e-3) such a cusp near N ≈ 290 decides where the optimal
memory size is, and with it the paper's "monotone for m > 20" boundary.

:func:`memory_cusps` brackets every sign change of Δθ1(T) and Δθ2(T) between
neighbours of an N grid and refines it by the Illinois variant of regula
falsi on the ODE solution as a function of a **continuous** N (the window
n(t) = min(t, N) is continuous in N, and Δθ(T; N) is smooth in N below T),
then returns the cusps and the minimum of M over the grid and the cusps.

Cost: one XLA compile per static configuration (ER or pER) of a fixed-size
batched solve (``chunk`` configurations, 1001 save times: the compile that
:func:`jaxreplay.paper.theory.solve_grid` with ``options=SolverOptions(chunk=CHUNK)`` uses, so a caller
that solved its grid that way pays no second compile); every root-finding
iteration is one call per ``chunk`` open brackets, about ten iterations
(~20 ms per call for ER, ~0.1 s for pER on a CPU).

No random keys. Float64 inside a scoped ``jax.enable_x64`` context.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike  # host-side NumPy: these functions are not traced

from jaxreplay import _validation
from jaxreplay.paper.theory._common import (
    SolverOptions,
    TheoryParams,
    check_hyper,
    check_options,
    check_params,
    check_real_weights,
    f64,
    x64,
)

__all__ = ["CHUNK", "CuspOptions", "MemoryCusps", "memory_cusps", "final_dtheta"]

CHUNK = 64
"""Configurations per compiled batched solve (fixed, so that ER and pER compile once each)."""
_SAVE_POINTS = 1001  # save times of the batched solve (solve's default grid)


class MemoryCusps(NamedTuple):
    """The cusps of M(N) for one configuration (m, α, γ, ER or pER) and the refined optimum.

    Attributes:
        memory_sizes: float64[nN], the bracketing grid of N.
        grid_dtheta: float64[nN, 2], Δθ(T) on the grid.
        grid_metric: float64[nN], M on the grid.
        cusp_memory: float64[c], the N (continuous) where a component of
            Δθ(T) changes sign, increasing; c may be 0.
        cusp_component: int64[c], which component vanishes there (0: Δθ1, 1: Δθ2).
        cusp_dtheta: float64[c, 2], Δθ(T) at the cusps (the vanishing
            component is ~0, to the root tolerance).
        cusp_metric: float64[c], M at the cusps.
        grid_best_memory, grid_best_metric: the optimum over the grid alone.
        best_memory, best_metric: the optimum over the grid and the cusps
            (``best_metric`` ≤ ``grid_best_metric``; equal when no cusp is lower).
    """

    memory_sizes: np.ndarray
    grid_dtheta: np.ndarray
    grid_metric: np.ndarray
    cusp_memory: np.ndarray
    cusp_component: np.ndarray
    cusp_dtheta: np.ndarray
    cusp_metric: np.ndarray
    grid_best_memory: float
    grid_best_metric: float
    best_memory: float
    best_metric: float

    def curve(self) -> tuple[np.ndarray, np.ndarray]:
        """(N, M) over the grid and the cusps merged, N increasing: M(N) with its dips resolved."""
        N = np.concatenate([self.memory_sizes, self.cusp_memory])
        M = np.concatenate([self.grid_metric, self.cusp_metric])
        order = np.argsort(N, kind="stable")
        return N[order], M[order]


class CuspOptions(NamedTuple):
    """How :func:`memory_cusps` refines the cusps, and the solver of every solve it makes.

    Static: checked once per call (ValueError naming ``options.xtol``, ``options.solver.rtol``, ...).

    Attributes:
        xtol: a root is accepted when its bracket is narrower than this, in
            transitions of N (≥ 0).
        ftol: ... or when the vanishing component of Δθ(T) is below this in
            magnitude (≥ 0; about the solver's accuracy at the default tolerances).
        noise_floor: sign changes where the component is below this on both
            grid neighbours are ignored (≥ 0; at the default tolerances a
            component of ~1e-10 is solver noise, its "cusps" change M by less).
        max_iterations: cap on the refinement iterations (int ≥ 1).
        solver: the :class:`~jaxreplay.paper.theory.SolverOptions` of the
            solves; its ``chunk`` (default :data:`CHUNK`) is the lanes of each
            batched solve, one compile shared by every iteration (None: one
            compile per number of open brackets).
    """

    xtol: float = 1e-3
    ftol: float = 1e-10
    noise_floor: float = 1e-9
    max_iterations: int = 100
    solver: SolverOptions = SolverOptions(chunk=CHUNK)


def _check_cusp_options(options: CuspOptions) -> CuspOptions:
    """``options`` with its solver checked (:func:`check_options`), or ValueError naming the bad field."""
    if not isinstance(options, CuspOptions):
        raise ValueError(f"options must be a jaxreplay.paper.theory.CuspOptions, got {type(options).__name__}.")
    for name in ("xtol", "ftol", "noise_floor"):
        _validation.check_float(f"options.{name}", getattr(options, name), low=0.0)
    max_iterations = _validation.check_static_int("options.max_iterations", options.max_iterations, low=1)
    solver = check_options(options.solver, "options.solver")
    return options._replace(max_iterations=max_iterations, solver=solver)


def _check_common(params, batch_size, step_size, discount, priority_exponent, horizon, real_weights):
    check_params(params)
    check_hyper(None, batch_size, step_size, discount, priority_exponent)
    check_real_weights(real_weights)
    _validation.check_float("horizon", horizon, low=0.0)
    if not float(horizon) > 0:
        raise ValueError(f"horizon must be > 0, got {horizon!r}.")


@x64
def _final_core(params, hyper, horizon, prioritized, real_weights, solver):
    """Δθ(T) float64[C, 2] for the 5 flat hyperparameter columns ``hyper`` (N, m, α, γ, β), float64[C] each."""
    from jaxreplay.paper.theory import ode

    # The save grid of solve's default times: the compiled batched solve is the one
    # solve_grid(..., options=SolverOptions(chunk=chunk)) uses at 1001 save times (no second compile).
    times = f64(np.linspace(0.0, float(horizon), _SAVE_POINTS))
    program = ode._Program("fixed", prioritized, real_weights, None, solver)
    sol = ode._solve_flat(
        TheoryParams(*map(f64, params)), [f64(x) for x in hyper], times, None, f64(np.ones(2)), program
    )
    return np.stack([np.asarray(sol.dtheta1)[:, -1], np.asarray(sol.dtheta2)[:, -1]], axis=-1)


def final_dtheta(
    memory_size: ArrayLike,
    batch_size: ArrayLike = 5,
    step_size: ArrayLike = 1e-3,
    discount: ArrayLike = 0.0,
    priority_exponent: float | None = None,
    *,
    params: TheoryParams = TheoryParams(),
    horizon: float = 1000.0,
    real_weights: str = "reward",
    options: SolverOptions = SolverOptions(chunk=CHUNK),
) -> np.ndarray:
    """Δθ(T) of the replay ODE for a **continuous** memory size N (ER or pER), broadcast over the arguments.

    Same model and solver as :func:`jaxreplay.paper.theory.solve` at its default
    save times (1001 from 0 to T = ``horizon``), but ``memory_size`` may be any
    real N ≥ 1 (the window n(t) = min(t, N) is continuous in N). Returns
    float64[*G, 2] (Δθ1, Δθ2) for the broadcast shape G; the solves run in
    batches of ``options.chunk`` (default :data:`CHUNK`: one compile per ER/pER,
    reused by every call).
    """
    _check_common(params, batch_size, step_size, discount, priority_exponent, horizon, real_weights)
    _validation.check_float("memory_size", memory_size, low=1.0)
    solver = check_options(options)
    beta = 0.0 if priority_exponent is None else priority_exponent
    columns = (memory_size, batch_size, step_size, discount, beta)
    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in columns))
    shape = arrays[0].shape
    flat = [x.reshape(-1) for x in arrays]
    if flat[0].size == 0:
        return np.zeros(shape + (2,))
    out = _final_core(params, flat, horizon, priority_exponent is not None, real_weights, solver)
    return out.reshape(shape + (2,))


def _refine(grid: np.ndarray, gd: np.ndarray, evaluate, options: CuspOptions):
    """Bracket every sign change of Δθ(T) between grid neighbours and refine it to a root in continuous N.

    Args:
        grid: float64[nN], the memory sizes.
        gd: float64[K, nN, 2], Δθ(T) on the grid for each of K configurations.
        evaluate: (N float64[B], configuration index int[B]) ↦ Δθ(T) float64[B, 2].
        options: the checked :class:`CuspOptions`.

    Returns:
        (configuration int[c], component int[c], root N float64[c], Δθ(T) at the root float64[c, 2]).
    """
    # Brackets: (configuration, component, left grid index) with a strict sign change.
    sign = np.sign(gd)  # [K, nN, 2]
    big = np.maximum(np.abs(gd[:, :-1, :]), np.abs(gd[:, 1:, :])) >= options.noise_floor
    kk, ii, cc = np.nonzero((sign[:, :-1, :] * sign[:, 1:, :] < 0) & big)
    lo, hi = grid[ii].copy(), grid[ii + 1].copy()
    flo, fhi = gd[kk, ii, cc].copy(), gd[kk, ii + 1, cc].copy()
    dlo, dhi = gd[kk, ii].copy(), gd[kk, ii + 1].copy()  # both components at the bracket ends
    open_ = np.ones(kk.size, bool)
    side = np.zeros(kk.size, np.int8)  # last retained end: −1 lo, +1 hi (Illinois halving)
    for _ in range(options.max_iterations):
        idx = np.nonzero(open_)[0]
        if idx.size == 0:
            break
        # Regula falsi point, kept inside the open bracket (bisection otherwise).
        with np.errstate(divide="ignore", invalid="ignore"):
            xr = (lo[idx] * fhi[idx] - hi[idx] * flo[idx]) / (fhi[idx] - flo[idx])
        inside = np.isfinite(xr) & (xr > lo[idx]) & (xr < hi[idx])
        xi = np.where(inside, xr, 0.5 * (lo[idx] + hi[idx]))
        d = evaluate(xi, kk[idx])
        f = d[np.arange(idx.size), cc[idx]]
        left = np.sign(f) == np.sign(flo[idx])  # root in (x, hi): x replaces lo
        zero = np.abs(f) <= options.ftol
        # Illinois: when the same end is replaced twice in a row, halve the other end's value.
        new_side = np.where(left, -1, 1).astype(np.int8)
        same = side[idx] == new_side
        fhi[idx] = np.where(left & same, 0.5 * fhi[idx], fhi[idx])
        flo[idx] = np.where(~left & same, 0.5 * flo[idx], flo[idx])
        lo[idx] = np.where(left, xi, lo[idx])
        flo[idx] = np.where(left, f, flo[idx])
        dlo[idx] = np.where(left[:, None], d, dlo[idx])
        hi[idx] = np.where(left, hi[idx], xi)
        fhi[idx] = np.where(left, fhi[idx], f)
        dhi[idx] = np.where(left[:, None], dhi[idx], d)
        side[idx] = new_side
        open_[idx] = ~zero & (hi[idx] - lo[idx] > options.xtol)
    # The root: the bracket end with the smaller |component| (halved Illinois values are not
    # the function's: compare the stored solutions).
    kb = np.arange(kk.size)
    pick_lo = np.abs(dlo[kb, cc]) <= np.abs(dhi[kb, cc])
    x = np.where(pick_lo, lo, hi)
    dx = np.where(pick_lo[:, None], dlo, dhi)
    return kk, cc, x, dx


def _collect(grid: np.ndarray, gd: np.ndarray, kk, cc, x, dx) -> list[MemoryCusps]:
    """One :class:`MemoryCusps` per configuration of ``gd`` [K, nN, 2] from the roots of :func:`_refine`."""
    results = []
    grid_metric = np.abs(gd).sum(-1)  # [K, nN]
    for k in range(gd.shape[0]):
        sel = np.nonzero(kk == k)[0]
        sel = sel[np.lexsort((cc[sel], x[sel]))]
        cN, cC, cD = x[sel], cc[sel].astype(np.int64), dx[sel].reshape(-1, 2)
        cM = np.abs(cD).sum(-1)
        Mg = grid_metric[k]
        filled = np.where(np.isfinite(Mg), Mg, np.inf)
        jg = int(np.argmin(filled))
        best_N, best_M = float(grid[jg]), float(Mg[jg])
        if cM.size and np.nanmin(cM) < best_M:
            jc = int(np.nanargmin(cM))
            best_N, best_M = float(cN[jc]), float(cM[jc])
        results.append(
            MemoryCusps(
                grid.copy(), gd[k].copy(), Mg.copy(), cN, cC, cD, cM, float(grid[jg]), float(Mg[jg]), best_N, best_M
            )
        )
    return results


def memory_cusps(
    batch_size: ArrayLike,
    step_size: ArrayLike = 1e-3,
    discount: ArrayLike = 0.0,
    priority_exponent: float | None = None,
    *,
    memory_sizes: ArrayLike,
    grid_dtheta: ArrayLike | None = None,
    params: TheoryParams = TheoryParams(),
    horizon: float = 1000.0,
    real_weights: str = "reward",
    options: CuspOptions = CuspOptions(),
) -> MemoryCusps | list[MemoryCusps]:
    """Locate the cusps of M(N) on [N_min, N_max] and the minimum of M including them.

    For each configuration (``batch_size``, ``step_size``, ``discount``
    broadcast together; ``priority_exponent`` None for ER, β for pER) every
    sign change of Δθ1(T; N) or Δθ2(T; N) between neighbours of
    ``memory_sizes`` is refined to a root in continuous N (Illinois regula
    falsi, all brackets of all configurations in lockstep, until the bracket
    is narrower than ``options.xtol`` in N or the component is below
    ``options.ftol``). Two sign changes of one component inside one grid cell
    (no net change) are not seen: use a grid finer than the distance between
    such roots; a component exactly 0 on a grid point is not listed as a cusp
    (M there is on the grid).

    Args:
        batch_size, step_size, discount: m, α, γ (scalars or arrays
            broadcasting to a shape K; 0- or 1-D).
        priority_exponent: None (ER) or β ≥ 0 (pER, P ∝ |δ|^β).
        memory_sizes: float[nN], the bracketing grid, strictly increasing, ≥ 1.
        grid_dtheta: optional float[*K, nN, 2], Δθ(T) already solved on the grid
            (e.g. by :func:`jaxreplay.paper.theory.solve_grid`); solved here if None.
        params, real_weights: as in :func:`jaxreplay.paper.theory.solve`.
        horizon: T, the time of Δθ(T) and M (steps, > 0).
        options: :class:`CuspOptions`, the refinement's tolerances and the solver's.

    Returns:
        One :class:`MemoryCusps` if the hyperparameters are all scalars, else
        a list of them in the flattened order of K.
    """
    _check_common(params, batch_size, step_size, discount, priority_exponent, horizon, real_weights)
    grid = _validation.check_increasing("memory_sizes", np.asarray(memory_sizes, dtype=np.float64), min_size=2)
    _validation.check_float("memory_sizes", grid, low=1.0)
    options = _check_cusp_options(options)
    hyper = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (batch_size, step_size, discount)))
    scalar = hyper[0].ndim == 0
    if hyper[0].ndim > 1:
        raise ValueError(f"batch_size, step_size and discount must broadcast to 0-D or 1-D, got {hyper[0].shape}.")
    m, a, g = (np.atleast_1d(x) for x in hyper)
    K, nN = m.size, grid.size
    solve = functools.partial(
        final_dtheta,
        priority_exponent=priority_exponent,
        params=params,
        horizon=horizon,
        real_weights=real_weights,
        options=options.solver,
    )
    if grid_dtheta is None:
        gd = solve(grid[None, :], m[:, None], a[:, None], g[:, None])
    else:
        want = (nN, 2) if scalar else (K, nN, 2)
        if np.shape(grid_dtheta) != want:
            raise ValueError(f"grid_dtheta must have shape {want}, got {np.shape(grid_dtheta)}.")
        _validation.check_float("grid_dtheta", grid_dtheta)
        gd = np.asarray(grid_dtheta, dtype=np.float64).reshape(K, nN, 2)

    roots = _refine(grid, gd, lambda xi, k: solve(xi, m[k], a[k], g[k]), options)
    results = _collect(grid, gd, *roots)
    return results[0] if scalar else results
