"""The sweep engine: a grid of hyperparameters × seeds as one compiled program.

A :class:`Sweep` declares an experiment (:mod:`jaxreplay.experiments`), its
static ``setup``, hyperparameters ``fixed`` for the whole sweep, and either a
``grid`` (cartesian product of axes, in the order given) or an explicit list of
``points``, times ``seeds`` seeds. Configurations × seeds are one run axis
(run r: configuration r // seeds, seed r % seeds). :func:`run` is three steps,
each its own module, and this one gathers the names a user needs:

.. code-block:: text

    Sweep(...)   jaxreplay.engine.declaration: validated and normalised on construction (ValueError
                 naming the key), read from TOML (Sweep.from_toml, run_options)
    run          jaxreplay.engine.runner: lock the output folder, then the three steps below
    plan         jaxreplay.engine.plan: a pure function of the sweep, the runs already in the
                 chunk store, the options and the machine's resources (measured by
                 jaxreplay.engine.resources) → a Plan
                 (chunk size, this process's chunks, bytes estimates); every refusal (bad options,
                 MemoryError for device memory, host memory or disk) happens here, before
                 anything is written or compiled
    execute      jaxreplay.engine.execute: per chunk, jit(vmap(one segment)) sharded over the
                 local devices, one compilation shared by every chunk (padded); each finished
                 chunk handed to the store (jaxreplay.engine.store.ChunkStore: saved atomically)
    assemble     jaxreplay.engine.assemble: the chunks read back one at a time into preallocated
                 arrays, labeled as an xarray Dataset, saved as NetCDF (streamed) with config and
                 versions, and summary.json

Why xarray. A sweep's results are dense N-d arrays: one axis per grid axis,
one for seeds, and the experiment's own axes (a learning curve per run). An
``xarray.Dataset`` keeps exactly that shape with labeled coordinates, so
``ds.final_metric.mean("seed").sel(batch_size=10)`` or
``ds.dtheta.mean("seed").idxmin("memory_size")`` need no bookkeeping; a long
pandas table would repeat every label once per recorded time step. It is saved
as NetCDF (an open, self-describing format; written with SciPy's NetCDF-3
writer so no HDF5 library is needed) and converts to pandas with
``ds.to_dataframe()`` when a table is wanted.

Records on demand. By default every run's full records (a LineSearch run's
Δθ and capacity at each step) come back to the host. ``Sweep(...,
record=Record(keep=("dtheta",), stride=10, reduce=("mean", "q0.1")))``, or a
``[record]`` table in TOML, keeps only the named records, every 10th point,
reduced over the seeds of each configuration on the device
(:mod:`jaxreplay.engine.records`); summaries are always kept per run.

How a run stays reproducible when it is interrupted and resumed, how it spreads
over devices and hosts, what it compiles once, and what its output folder holds:
:mod:`jaxreplay.engine.runner`.
"""

from __future__ import annotations

from jaxreplay import _extras  # noqa: E402

_extras.require("jaxreplay.engine.sweep", "sweep")


from jaxreplay.engine.assemble import load
from jaxreplay.engine.declaration import Sweep, run_options  # noqa: F401 (public here)
from jaxreplay.engine.execute import PROGRAM_CACHE_SIZE, clear_program_cache
from jaxreplay.engine.execute import Programs as _Programs  # noqa: F401 (tests measure its memory)
from jaxreplay.engine.plan import (  # noqa: F401 (public here)
    CPU_RUNS_PER_DEVICE,
    TEMPORARY_ARRAYS,
    check_run_options,
    estimate_bytes_per_run,
    estimate_result_bytes_per_run,
)
from jaxreplay.engine.records import Record
from jaxreplay.engine.resources import default_memory_budget
from jaxreplay.engine.runner import SweepResult, SweepStats, run
from jaxreplay.engine.store import SweepWarning, software_versions

__all__ = [
    "Sweep",
    "Record",
    "SweepStats",
    "SweepResult",
    "SweepWarning",
    "run",
    "estimate_bytes_per_run",
    "estimate_result_bytes_per_run",
    "default_memory_budget",
    "software_versions",
    "load",
    "clear_program_cache",
    "PROGRAM_CACHE_SIZE",
]
