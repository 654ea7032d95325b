"""Where the ODE theory runs: the host CPU (the default) vs the accelerator.

:mod:`jaxreplay.paper.theory` computes on the host CPU unless the caller
picks a device (``jaxreplay.paper.theory._common.host_device``): its work is
float64 adaptive ODE stepping, a long loop of tiny dependent kernels, which
is launch- and sync-bound on a GPU. This benchmark checks that default where
it matters: a batch of the reproduction's ER contour-grid solves (random
(N, m) at α = 1e-3, γ = 0, saved at every step of T = 1000) solved once on
the host CPU and, when JAX's default backend is an accelerator, once on it
(``with jax.default_device(accelerator)``), each after a warm-up call that
compiles it. The two must agree (same solver, float64): checked to rtol 1e-6, atol 1e-10.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable

import jax
import numpy as np

from benchmarks import _timing

TITLE = "Theory: the ER ODE grid on the host CPU (default) vs the accelerator"

MODES = {"quick": dict(configs=512), "full": dict(configs=2048)}
HEADLINES: list[list[str]] = []


def _grid(configs: int):
    rng = np.random.default_rng(0)
    return rng.integers(10, 1001, configs), rng.integers(1, 51, configs)


def _solve_seconds(memory_size, batch_size, device) -> tuple[float, float, np.ndarray]:
    """(first call s, second call s, metrics) of the grid, on ``device`` (None: the theory's default)."""
    from jaxreplay.paper import theory

    times = np.arange(1.0, 1001.0)

    def solve():
        sol = theory.solve_grid(memory_size=memory_size, batch_size=batch_size, step_size=1e-3, discount=0.0,
                                times=times, options=theory.SolverOptions(chunk=theory.cusps.CHUNK))
        return np.asarray(sol.metric)

    with jax.default_device(device) if device is not None else contextlib.nullcontext():
        t0 = time.perf_counter()
        solve()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        metric = solve()
        second = time.perf_counter() - t0
    return first, second, metric


def run(mode_name: str = "quick", progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> str:
    _timing.disable_compilation_cache()
    configs = MODES[mode_name]["configs"]
    memory_size, batch_size = _grid(configs)
    progress(f"  host CPU: {configs} solves")
    host = _solve_seconds(memory_size, batch_size, None)
    rows = [["host CPU (default)", f"{host[0]:.2f} s", f"{host[1]:.2f} s", f"{host[1] / configs * 1e3:.3g} ms"]]
    backend = jax.default_backend()
    HEADLINES[:] = []
    text = [f"{configs} solves (random N in [10, 1000], m in [1, 50]; α = 1e-3, γ = 0; 1,000 save times), "
            f"in batches of `theory.cusps.CHUNK`; backend `{backend}`, mode `{mode_name}`."]
    if backend != "cpu":
        progress(f"  {backend}: {configs} solves")
        accelerator = _solve_seconds(memory_size, batch_size, jax.devices()[0])
        # The adaptive solver picks its steps from float sums that round differently per platform, so the two
        # agree to the global error its local tolerances (rtol 1e-10, atol 1e-13 per step) allow, not bit for bit.
        np.testing.assert_allclose(accelerator[2], host[2], rtol=1e-6, atol=1e-10)
        rows.append([f"{jax.devices()[0].device_kind} (`jax.default_device`)", f"{accelerator[0]:.2f} s",
                     f"{accelerator[1]:.2f} s", f"{accelerator[1] / configs * 1e3:.3g} ms"])
        ratio = accelerator[1] / host[1]
        HEADLINES.append(["ODE theory grid: accelerator time ÷ host-CPU time (> 1: the host default is right)",
                          f"{ratio:.1f}×", "> 1×"])
        worst = float(np.max(np.abs(accelerator[2] - host[2])))
        text.append(f"The accelerator takes **{ratio:.1f}×** the host CPU's time; the metrics agree to rtol 1e-6, "
                    f"atol 1e-10 (largest difference {worst:.1e}).")
    else:
        text.append("No accelerator: the host CPU is the only device, nothing to compare.")
    table = _timing.markdown_table(["where", "first call (compile + solve)", "second call", "per solve"], rows)
    return "\n\n".join([text[0], table, *text[1:]])


if __name__ == "__main__":
    print(run(sys.argv[1] if len(sys.argv) > 1 else "quick"))
