"""Shared test configuration.

JAX compiles are the slow part of this suite: the persistent compilation cache
lets later test processes (and later CI runs on the same machine) reuse them.
"""

import os
import pathlib

# Two worker processes run the suite (pyproject's addopts): on a GPU machine neither may take 75% of its memory.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402

_CACHE = os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(pathlib.Path(__file__).resolve().parents[1] / ".jax_cache")
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def paper_tiny(tmp_path_factory):
    """One tiny ``jaxreplay reproduce all`` (LineSearch ``tiny`` mode, CartPole 2 seeds × 500 steps).

    Shared by the LineSearch, DQN and whole-paper reproduction tests, so the
    suite pays for each reproduction once (~1 min cold on 2 cores).
    """
    from jaxreplay.paper.reproduce import paper

    out = tmp_path_factory.mktemp("paper_tiny")
    summary = paper.reproduce(out, quick=True, seeds=2, progress=False, envs=("CartPole-v1",),
                              linesearch_mode="tiny", dqn_steps=500)
    return out, summary
