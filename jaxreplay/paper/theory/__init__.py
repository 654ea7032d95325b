"""Theory of replay on LineSearch (Liu & Zou 2018, Sections 2–3 and the appendix).

* :mod:`jaxreplay.paper.theory.ode`: the replay ODE (ER and pER, γ ≥ 0, fixed or
  driven window, frozen weights) solved with diffrax in float64.
* :mod:`jaxreplay.paper.theory.analytic`: the appendix's closed forms, errata applied (docs/paper_readings.md).
* :mod:`jaxreplay.paper.theory.cusps`: the cusps of M(N) (sign changes of a
  component of Δθ(T) in a continuous memory size N) and the optimum of M
  over N including them.

How the ODE is solved (tolerances, step budget, batching) is one
:class:`SolverOptions` record, passed as ``options=`` (the cusp search takes a
:class:`CuspOptions`, which holds its own tolerances and a ``SolverOptions``).

No random keys anywhere. All computations run in float64 inside a scoped
``jax.enable_x64`` context; the global JAX configuration is left alone.
They run on the host CPU even where JAX's default backend is a GPU: adaptive
ODE stepping is a long loop of tiny dependent kernels, which a GPU runs
several times slower than a CPU (``_common.host_device`` says why, with
numbers). To run them on an accelerator anyway, call them inside
``with jax.default_device(device):``.
"""

from jaxreplay import _extras  # noqa: E402

_extras.require("jaxreplay.paper.theory", "paper", "diffrax", "equinox")

from jaxreplay.paper.theory import analytic
from jaxreplay.paper.theory._common import REAL_WEIGHTS, SolverOptions, TheoryParams, fixed_point_and_rewards
from jaxreplay.paper.theory.analytic import (
    b_coefficients,
    first_stage_limit,
    first_stage_solution,
    fixed_intercept_exponent,
    fixed_intercept_solution,
    fixed_slope_solution,
    last_stage_limit,
    last_stage_solution,
    prioritized_rate_difference,
    second_order_coefficients,
    second_order_initial_slope,
    second_order_terms,
)
from jaxreplay.paper.theory.cusps import CuspOptions, MemoryCusps, final_dtheta, memory_cusps
from jaxreplay.paper.theory.ode import MemorySizeSchedule, ODESolution, solve, solve_grid, window_averages

__all__ = [
    "REAL_WEIGHTS",
    "TheoryParams",
    "SolverOptions",
    "fixed_point_and_rewards",
    "MemorySizeSchedule",
    "ODESolution",
    "solve",
    "solve_grid",
    "window_averages",
    "CuspOptions",
    "MemoryCusps",
    "final_dtheta",
    "memory_cusps",
    "analytic",
    "b_coefficients",
    "first_stage_limit",
    "first_stage_solution",
    "fixed_intercept_exponent",
    "fixed_intercept_solution",
    "fixed_slope_solution",
    "last_stage_limit",
    "last_stage_solution",
    "prioritized_rate_difference",
    "second_order_coefficients",
    "second_order_initial_slope",
    "second_order_terms",
]
