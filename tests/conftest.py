"""Shared test configuration.

JAX compiles are the slow part of this suite: the persistent compilation cache
lets later test processes (and later CI runs on the same machine) reuse them.
The cache is set in the environment too, so that the subprocesses tests start
(the command line, several devices or processes, a killed and resumed sweep)
reuse each other's programs.
"""

import os
import pathlib

# Three worker processes run the suite (pyproject's addopts): on a GPU machine none may take 75% of its memory.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402

_CACHE = os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(pathlib.Path(__file__).resolve().parents[1] / ".jax_cache")
_MIN_COMPILE_SECS = 0.5
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", _MIN_COMPILE_SECS)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", str(_MIN_COMPILE_SECS))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def paper_tiny(tmp_path_factory):
    """One tiny ``jaxreplay reproduce all`` (LineSearch ``tiny`` mode, CartPole 2 seeds × 500 steps).

    Shared by the LineSearch, DQN and whole-paper reproduction tests, so the
    suite pays for the reproduction once (~1.5 min cold on 2 cores): under
    pytest-xdist the first worker to ask computes it (the others wait on a lock:
    their files would be computing it too) and every worker gets its own copy
    of the folder (the tests rerun into it), with the summary's paths moved there.
    """
    import fcntl
    import pickle
    import shutil

    from jaxreplay.paper.reproduce import paper

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    shared = tmp_path_factory.getbasetemp().parent if worker else tmp_path_factory.getbasetemp()
    source, pickled = shared / "paper_tiny_source", shared / "paper_tiny_summary.pickle"
    with open(shared / "paper_tiny.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (released when the file closes)
        if not pickled.exists():
            summary = paper.reproduce(source, quick=True, seeds=2, progress=False, envs=("CartPole-v1",),
                                      linesearch_mode="tiny", dqn_steps=500)
            pickled.write_bytes(pickle.dumps(summary))
    out = tmp_path_factory.mktemp("paper_tiny")
    shutil.copytree(source, out, dirs_exist_ok=True)
    return out, _moved(pickle.loads(pickled.read_bytes()), str(source), str(out))


def _moved(value, source: str, out: str):
    """``value`` (a summary: dicts, lists, tuples, paths, strings) with every path under ``source`` under ``out``."""
    if isinstance(value, dict):
        return {k: _moved(v, source, out) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(v, source, out) for v in value)
    if isinstance(value, pathlib.Path) and (value == pathlib.Path(source) or pathlib.Path(source) in value.parents):
        return pathlib.Path(out) / value.relative_to(source)
    if isinstance(value, str) and value.startswith(source + os.sep):
        return out + value[len(source):]
    return value
