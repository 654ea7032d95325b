"""One JAX compile-event listener for the whole test session (tests/ is on sys.path under pytest).

Tests that must show something happened *before* compiling (a refusal), or that a program is
reused, compare counts before and after: ``before = COMPILE_EVENTS.lowerings; ...;
assert COMPILE_EVENTS.lowerings == before``.
"""

import jax

LOWERING = "/jax/core/compile/jaxpr_to_mlir_module_duration"  # one per program lowered (cache hit or not)
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"  # one per XLA compile (not on a cache hit)


class CompileEvents:
    """Running counts of JAX lowerings and backend compiles since the session started."""

    def __init__(self):
        self.lowerings = 0
        self.backend_compiles = 0
        jax.monitoring.register_event_duration_secs_listener(self)

    def __call__(self, name, duration, **kwargs):
        if name == LOWERING:
            self.lowerings += 1
        elif name == BACKEND_COMPILE:
            self.backend_compiles += 1


COMPILE_EVENTS = CompileEvents()
