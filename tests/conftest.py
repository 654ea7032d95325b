"""Shared test configuration.

JAX compiles are the slow part of this suite: the persistent compilation cache
lets later test processes (and later CI runs on the same machine) reuse them.
"""

import os
import pathlib

import jax

_CACHE = os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(pathlib.Path(__file__).resolve().parents[1] / ".jax_cache")
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
