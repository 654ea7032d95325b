"""The appendix's one-dimensional group: Fig. 1DLearning, 1DStepsVsSize, 1DOptSize and 1DPriLearning.

One stage, :func:`appendix`, from the closed forms of
:mod:`jaxreplay.paper.theory.analytic` and :mod:`~jaxreplay.paper.reproduce.linesearch.numerics`
(NumPy), and two ODE solves that check the closed forms' pER claim independently.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from jaxreplay.paper.reproduce.linesearch.numerics import (
    fixed_slope_steps,
    optimal_memory,
    prioritized_exponent_1d,
    steps_to_exponent,
)
from jaxreplay.paper.reproduce.linesearch.settings import ALPHA_1D, FIG1D_MEMORY, M_1D, TARGET_RATIO, Design


class Appendix(NamedTuple):
    """The appendix's 1-D results (fixed intercept / fixed slope), from the closed forms.

    Attributes:
        times: t of Fig. 1DLearning, 0 … 2000.
        exponent: N → k(t) for N in :data:`FIG1D_MEMORY` (m = 5, α = 2e-5).
        target: the main target K = ln 20 (Δθ/Δθ⁰ = 0.05).
        memory_sizes: the N of the steps-to-K analysis.
        steps_to_target: K → steps to reach k = K per N, for the plotted K.
        targets: the K of the optimal-N-vs-K curve.
        optimal_memory: the smallest optimal N per target.
        optimal_memory_largest: the largest optimal N per target: every N from the smallest to it reaches the
            target at the same step (below the drop to N = 1, up to N_max: the memory holds the whole history).
        steps_fast: steps to K = ln 20 per N at α = 5e-5.
        slope_steps: steps of the fixed-slope example at α = 2e-5.
        slope_steps_printed: the same at the printed α = 5e-5.
        pri_times: the fine t grid of Fig. 1DPriLearning.
        exponent_er, exponent_per: k(t) and k_pri(t) at N = 500.
        ode_times: the t of the check below, 0 … 2000.
        ode_ratio_er, ode_ratio_per: Δθ1(t)/Δθ1⁰ of the ODE itself with the intercept frozen at its target,
            ER and pER (β = 2), at N = 500: the check of the claim k_pri ≥ k that does not use the closed
            form's rate difference (a sum of squares: it cannot be negative).
    """

    times: np.ndarray
    exponent: dict[int, np.ndarray]
    target: float
    memory_sizes: np.ndarray
    steps_to_target: dict[float, np.ndarray]
    targets: np.ndarray
    optimal_memory: np.ndarray
    optimal_memory_largest: np.ndarray
    steps_fast: np.ndarray
    slope_steps: float
    slope_steps_printed: float
    pri_times: np.ndarray
    exponent_er: np.ndarray
    exponent_per: np.ndarray
    ode_times: np.ndarray
    ode_ratio_er: np.ndarray
    ode_ratio_per: np.ndarray


def appendix(design: Design) -> Appendix:
    """Stage 4: the appendix's closed forms (no compile)."""
    from jaxreplay.paper import theory

    t1d = np.linspace(0.0, 2000.0, 2001)
    k_curves = {N: np.asarray(theory.fixed_intercept_exponent(t1d, N, M_1D, ALPHA_1D)) for N in FIG1D_MEMORY}
    K_main = math.log(1.0 / TARGET_RATIO)
    appN = np.asarray(design.appendix_memory_sizes, dtype=np.float64)
    steps_K = {K: steps_to_exponent(K, appN) for K in (0.5, 1.0, 1.25, 2.0, K_main, 5.0)}
    targets = np.asarray(design.appendix_targets, dtype=np.float64)
    steps_grid = steps_to_exponent(targets[:, None], appN[None, :])  # [nK, nN]
    t_pri = np.linspace(0.0, 2000.0, 20001)
    k_er1d, k_per1d = prioritized_exponent_1d(t_pri, 500, M_1D, ALPHA_1D)
    t_ode = np.linspace(0.0, 2000.0, 201)
    fixed_intercept = theory.TheoryParams(initial_intercept=0.5)  # θ2 at its target β2: Δθ1⁰ = −0.1
    ratios = [
        np.asarray(sol.dtheta1) / np.asarray(sol.dtheta1)[0]
        for sol in (
            theory.solve(fixed_intercept, 500, M_1D, ALPHA_1D, priority_exponent=beta, times=t_ode, frozen="intercept")
            for beta in (None, 2.0)
        )
    ]
    return Appendix(
        times=t1d,
        exponent=k_curves,
        target=K_main,
        memory_sizes=appN,
        steps_to_target=steps_K,
        targets=targets,
        optimal_memory=optimal_memory(appN, steps_grid.T),
        optimal_memory_largest=optimal_memory(appN, steps_grid.T, largest=True),
        steps_fast=steps_to_exponent(K_main, appN, M_1D, 5e-5),
        slope_steps=float(fixed_slope_steps(TARGET_RATIO, M_1D, 2e-5)),
        slope_steps_printed=float(fixed_slope_steps(TARGET_RATIO, M_1D, 5e-5)),
        pri_times=t_pri,
        exponent_er=k_er1d,
        exponent_per=k_per1d,
        ode_times=t_ode,
        ode_ratio_er=ratios[0],
        ode_ratio_per=ratios[1],
    )
