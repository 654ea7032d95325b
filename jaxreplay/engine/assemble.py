"""Assemble: finished chunks into one labeled ``xarray.Dataset`` (and NetCDF).

:func:`assemble` fills preallocated ``[runs, ...]`` arrays one chunk at a
time (never a list of every chunk plus a concatenated copy) and labels them
(:func:`to_dataset`); :func:`write_netcdf` streams a Dataset to a file in
the bytes xarray's SciPy writer would give, without its copies; :func:`load`
opens ``results.nc``.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxreplay.engine.records import STAT_DIM
from jaxreplay.engine.results import CONFIG_DIM, SEED_DIM  # defined once, with the statistics that read them
from jaxreplay.engine.store import software_versions

if TYPE_CHECKING:
    from jaxreplay.engine.declaration import Sweep

__all__ = ["assemble", "Assembler", "to_dataset", "write_netcdf", "load", "SEED_DIM", "CONFIG_DIM"]


def assemble(sweep: Sweep, parts: Iterable[Mapping[str, np.ndarray]]):
    """The labeled results (:func:`to_dataset`) of ``sweep`` from its chunks' arrays, one chunk at a time.

    Raises ``RuntimeError`` if a run is missing (a process failed).
    """
    assembler = Assembler(sweep)
    for part in parts:
        assembler.add(part)
    return assembler.dataset()


class Assembler:
    """Fills ``[num_runs, ...]`` arrays (``[num_configs, ...]`` for ``reduced.*``) from chunks, one at a time
    (a sink for :func:`jaxreplay.engine.execute.execute` when nothing is saved)."""

    def __init__(self, sweep: Sweep):
        self.sweep = sweep
        self.num_runs, self.num_configs = sweep.num_runs, sweep.num_configs
        self.arrays: dict[str, np.ndarray] = {}
        self.filled = np.zeros(self.num_runs, bool)

    def add(self, part: Mapping[str, np.ndarray]) -> None:
        """Copy one chunk's arrays (``run_index``, ``config_index`` for ``reduced.*``) into place."""
        idx = part["run_index"]
        for k, v in part.items():
            if k in ("run_index", "config_index"):
                continue
            reduced = k.startswith("reduced.")
            if k not in self.arrays:
                rows = self.num_configs if reduced else self.num_runs
                self.arrays[k] = np.zeros((rows,) + v.shape[1:], v.dtype)
            self.arrays[k][part["config_index"] if reduced else idx] = v
        self.filled[idx] = True

    def dataset(self):
        """The labeled results (:func:`to_dataset`); RuntimeError if a run is missing."""
        return to_dataset(self.sweep, self.finish())

    def finish(self) -> dict[str, np.ndarray]:
        """The filled arrays by key; RuntimeError if no chunk came, or a run is missing (a process failed)."""
        if not self.arrays:
            raise RuntimeError("no finished chunks to assemble")
        if not self.filled.all():
            raise RuntimeError(
                f"{int((~self.filled).sum())} runs missing after the sweep: a process failed; rerun to finish."
            )
        return self.arrays


def _as_stored(values: np.ndarray) -> np.ndarray:
    """A coordinate as results.nc stores it (NetCDF-3 has no int64: int32, which every integer hyperparameter
    fits), so that the dataset a sweep returns and the one :func:`~jaxreplay.engine.sweep.load` reads agree."""
    return values.astype(np.int32) if values.dtype.kind in "iu" and values.dtype.itemsize > 4 else values


def write_netcdf(dataset, f) -> None:
    """Write ``dataset`` to the binary file ``f`` as xarray's ``to_netcdf(engine="scipy")`` does (NetCDF-3,
    the same bytes), but streaming each variable from its array in slices.

    xarray's SciPy backend copies every variable into SciPy's in-memory
    ``netcdf_file`` and then each into one more ``bytes`` object: up to three
    times the results in memory. Here xarray still encodes the variables and
    attributes (CF conventions, NetCDF-3 types), but the data are recorded
    instead of copied, and written in slices of about 1 MiB (big-endian, as
    NetCDF-3 requires) when SciPy writes the file.
    """
    import scipy.io
    from xarray.backends.file_manager import DummyFileManager
    from xarray.backends.locks import ensure_lock
    from xarray.backends.scipy_ import ScipyDataStore

    sources: dict[str, np.ndarray] = {}

    class File(scipy.io.netcdf_file):
        def _write_var_data(self, name):
            var, source = self.variables[name], sources.get(name)
            if source is None or var.isrec:
                return super()._write_var_data(name)
            begin = self.fp.tell()  # as SciPy: record where the data begins in the header
            self.fp.seek(var._begin)
            self._pack_begin(begin)
            self.fp.seek(begin)
            flat = np.ravel(source)  # C order, a view of a contiguous array
            step = max(1, (1 << 20) // flat.itemsize)
            for i in range(0, flat.size, step):
                self.fp.write(np.ascontiguousarray(flat[i : i + step], dtype=var.data.dtype).tobytes())
            self._write_var_padding(var, var._vsize - source.size * var.data.itemsize)

        def close(self):  # flush only: the caller owns (fsyncs and closes) the file
            if not self.fp.closed:
                self.flush()

        def __del__(self):  # SciPy's __del__ closes the file
            pass

    class Recorded:
        def __init__(self, name):
            self.name = name

        def __setitem__(self, key, value):
            if key is not Ellipsis:
                raise NotImplementedError(key)
            sources[self.name] = np.asarray(value)

    class Store(ScipyDataStore):
        def __init__(self, file):
            self._manager = DummyFileManager(file)
            self.lock = ensure_lock(False)

        def prepare_variable(self, name, variable, check_encoding=False, unlimited_dims=None):
            # SciPy's variable is np.empty, never written to: its pages are never touched.
            _, data = super().prepare_variable(name, variable, check_encoding, unlimited_dims)
            return Recorded(name), data

    store = Store(File(f, mode="w", version=2))
    dataset.dump_to_store(store)
    store.close()


def to_dataset(sweep: Sweep, arrays: Mapping[str, np.ndarray]):
    """Label flat per-run arrays (``record.*``/``summary.*``, leading axis R) as an ``xarray.Dataset``.

    Dims: each grid axis (or ``config`` for ``points``), then ``seed``, then
    the experiment's own dims (``record_dims``/``summary_dims``). Records
    reduced over seeds (``reduced.*``, leading axis C) have ``stat`` (the
    reductions' names) in place of ``seed``; a record's first dim keeps the
    coordinates of its kept points (``[::stride]``). Attributes:
    ``config`` (JSON of :meth:`Sweep.to_dict`), ``fingerprint``, ``versions``
    (the software of the process that assembled the results; ``sweep.json``
    keeps those of the process that began the sweep, and a resume under other
    JAX or jaxlib versions is refused).

    The ``seed`` coordinate is the seed *index* i, 0 … seeds − 1: run i's key is
    ``fold_in(key(seed), i)`` with the sweep's base ``seed`` (in ``config``). Two
    sweeps of other base seeds label their runs alike, so combine them along a new
    dimension (``xr.concat(..., dim="base_seed")``), never by aligning ``seed``.
    """
    import xarray as xr

    exp, setup = sweep.exp, sweep.make_setup()
    lead_dims: tuple[str, ...]
    lead_shape: tuple[int, ...]
    coords: dict[str, Any]  # dim -> values, or (dim, values) for a non-dimension coordinate
    if sweep.points is not None:
        lead_dims, lead_shape = (CONFIG_DIM,), (sweep.num_configs,)
        coords = {CONFIG_DIM: np.arange(sweep.num_configs, dtype=np.int32)}
        coords.update({k: (CONFIG_DIM, _as_stored(v)) for k, v in sweep.configurations().items()})
    else:
        lead_dims, lead_shape = tuple(sweep.grid), tuple(len(v) for v in sweep.grid.values())
        coords = {k: _as_stored(np.array(v)) for k, v in sweep.grid.items()}
    coords[SEED_DIM] = np.arange(sweep.seeds, dtype=np.int32)
    coords.update({k: _as_stored(np.asarray(v)) for k, v in exp.coords(setup).items()})  # (DQN's segment was int64)
    spec, record_dims = sweep.record, exp.record_dims(setup)
    dims = {
        **{f"record.{k}": d for k, d in record_dims.items()},
        **{f"reduced.{k}": d for k, d in record_dims.items()},
        **{f"summary.{k}": d for k, d in exp.summary_dims(setup).items()},
    }
    if spec.reduce:
        coords[STAT_DIM] = np.array(spec.reduce)
    if spec.stride > 1:  # the coordinates of the kept points of each record's first dim
        for first in {d[0] for d in record_dims.values() if d}:
            if first in coords and not isinstance(coords[first], tuple):
                coords[first] = np.asarray(coords[first])[:: spec.stride]
    data_vars = {}
    for key, value in arrays.items():
        name = key.split(".", 1)[1]
        if name in coords or name in sweep.exp.hyperparameter_names:
            raise ValueError(f"{exp.name}: result {name!r} clashes with a coordinate or hyperparameter name.")
        own = tuple(dims[key])
        inner = (STAT_DIM,) if key.startswith("reduced.") else (SEED_DIM,)
        value = value.reshape(
            lead_shape + value.shape[1:]
            if key.startswith("reduced.")
            else lead_shape + (sweep.seeds,) + value.shape[1:]
        )
        data_vars[name] = (lead_dims + inner + own, value)
    # The first axis of a record is concatenated over segments; give coords only where lengths match.
    coords = {k: v for k, v in coords.items() if _fits(k, v, data_vars)}
    if not spec.is_default:  # a dim only of records not kept: its coordinate goes with them
        used = {d for dims_, _ in data_vars.values() for d in dims_}
        only_records = {d for ds in record_dims.values() for d in ds} - {
            d for ds in exp.summary_dims(setup).values() for d in ds
        }
        coords = {k: v for k, v in coords.items() if isinstance(v, tuple) or k in used or k not in only_records}
    return xr.Dataset(
        data_vars,
        coords=coords,
        attrs={
            "experiment": sweep.experiment,
            "config": json.dumps(sweep.to_dict(), sort_keys=True),
            "fingerprint": sweep.fingerprint(),
            "versions": json.dumps(software_versions(), sort_keys=True),
        },
    )


def _fits(dim, value, data_vars) -> bool:
    if isinstance(value, tuple):  # a non-index coordinate (dim, values)
        return True
    for dims, arr in data_vars.values():
        if dim in dims and arr.shape[dims.index(dim)] != len(value):
            return False
    return True


def load(path: str | os.PathLike):
    """Open a sweep's ``results.nc`` (or its directory) as an ``xarray.Dataset`` (loaded into memory).

    Raises:
        FileNotFoundError: no such file, or a sweep folder whose sweep has not finished (said so).
        ValueError: the file is truncated or not a results file (one line naming it).
    """
    import xarray as xr

    path = pathlib.Path(path)
    if path.is_dir():
        if not (path / "results.nc").exists() and (path / "chunks").is_dir():
            raise FileNotFoundError(
                f"{path} holds no results.nc yet: its sweep has not finished. Rerun the sweep's command to finish it "
                "(its finished chunks are kept)."
            )
        sweeps = sorted(p.parent.name for p in path.glob("sweeps/*/results.nc"))
        if not (path / "results.nc").exists() and sweeps:  # a study's or a reproduction's folder
            raise FileNotFoundError(
                f"{path} holds no results.nc of its own: it is a study's or a reproduction's folder, whose sweeps "
                f"are its subfolders {path / 'sweeps'}/<name> ({', '.join(sweeps)}): load one of them."
            )
        path = path / "results.nc"
    try:
        with xr.open_dataset(path, engine="scipy") as ds:
            ds = ds.load()
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except Exception as e:  # a truncated or foreign file: NumPy's and SciPy's messages name neither it nor the fix
        raise ValueError(
            f"{path} is not a readable results file ({type(e).__name__}: {e}); rerun the sweep's command to write it "
            "again from its chunks."
        ) from None
    # NetCDF-3 stores text as characters, which xarray reads back as Python strings (dtype object): as NumPy
    # strings again, the dtype of the dataset the sweep returned (weight "theta1", stat "q0.1", a string point).
    text = {name: np.asarray(c.values, dtype=str) for name, c in ds.coords.items() if _is_text(c.values)}
    return ds.assign_coords({name: (ds[name].dims, values) for name, values in text.items()})


def _is_text(values: np.ndarray) -> bool:
    return values.dtype == object and values.size > 0 and all(isinstance(v, str) for v in values.flat)
