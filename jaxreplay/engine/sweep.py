"""The sweep engine: a grid of hyperparameters × seeds as one compiled program.

A :class:`Sweep` declares an experiment (:mod:`jaxreplay.experiments`), its
static ``setup``, hyperparameters ``fixed`` for the whole sweep, and either a
``grid`` (cartesian product of axes, in the order given) or an explicit list of
``points``, times ``seeds`` seeds. :func:`run` then goes in a straight line:

.. code-block:: text

    validate (ValueError naming the key, before anything is compiled)
    → flatten configurations × seeds into one run axis (run r: configuration r // seeds, seed r % seeds)
    → estimate bytes per run, choose a chunk size that fits the memory budget;
      refuse (MemoryError with the numbers) results that cannot fit the host's
      memory, or chunks + results.nc that cannot fit the disk
    → per chunk: jit(vmap(run one segment)) sharded over the local devices,
      one compilation shared by every chunk (the last chunk is padded)
    → each finished chunk persisted atomically (write, then rename)
    → labeled results (an xarray Dataset), assembled one chunk at a time into
      preallocated arrays, saved as NetCDF (streamed) with config and versions

Why xarray. A sweep's results are dense N-d arrays: one axis per grid axis,
one for seeds, and the experiment's own axes (a learning curve per run). An
``xarray.Dataset`` keeps exactly that shape with labeled coordinates, so
``ds.final_metric.mean("seed").sel(batch_size=10)`` or
``ds.dtheta.mean("seed").idxmin("memory_size")`` need no bookkeeping; a long
pandas table would repeat every label once per recorded time step. It is saved
as NetCDF (an open, self-describing format; written with SciPy's NetCDF-3
writer so no HDF5 library is needed) and converts to pandas with
``ds.to_dataframe()`` when a table is wanted.

Reproducibility. Run r's key is ``fold_in(key(sweep.seed), r % seeds)``: it
depends only on the seed index, never on the chunk or device a run lands on, and
runs with the same seed index share their random numbers across the grid
(common random numbers: differences between settings are not seed noise).
Results are bit-identical whatever the chunk size, the number of devices, or
how often the sweep was interrupted and resumed (tested).

Devices and hosts. The run axis of each chunk is sharded over all local
devices with a one-axis :class:`jax.sharding.Mesh` (``"runs"``) and
:class:`~jax.sharding.NamedSharding`. Started on several processes under
:func:`jax.distributed.initialize`, process p runs chunks p, p + P, p + 2P, … of
the missing runs (all processes see the same list: they meet at a barrier
before listing), and after a final barrier every process assembles the results
from the shared output directory; process 0 writes ``results.nc``. Launch one
process per host with the same command, e.g. under SLURM::

    srun --ntasks-per-node=1 python -c "import jax; jax.distributed.initialize(); \\
        from jaxreplay.engine import sweep; sweep.run(sweep.Sweep.from_toml('s.toml'), 'out/')"

(``jax.distributed.initialize()`` reads SLURM's and Cloud TPU's environment by
itself; elsewhere pass ``coordinator_address``, ``num_processes`` and
``process_id``). ``out/`` must be on a file system all hosts share.

Compilation cache. The compiled programs depend only on the experiment, its
``setup`` and the devices; the process keeps them (the last
:data:`PROGRAM_CACHE_SIZE` setups), so running a sweep again, or another grid
or seed count over the same setup -- a notebook cell edited and rerun --
compiles nothing new unless the chunk shape changes
(:func:`clear_program_cache` frees them).

The output directory holds ``sweep.json`` (the config, its fingerprint and the
software versions), ``chunks/*.npz`` (finished runs; each also carries its
sweep's fingerprint, run count and run range), ``results.nc`` and
``summary.json`` (timings). Rerunning the same sweep into it computes only the
missing runs; a different sweep is refused, by ``sweep.json`` or, if that was
deleted, by the chunks themselves (a chunk is only ever used by the sweep that
wrote it).
"""

from __future__ import annotations

from jaxreplay import _extras  # noqa: E402

_extras.require('jaxreplay.engine.sweep', 'sweep')


import dataclasses
import hashlib
import json
import math
import os
import pathlib
import sys
import time
import tomllib
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxreplay import experiments

__all__ = ["Sweep", "SweepStats", "SweepResult", "SweepWarning", "run", "estimate_bytes_per_run",
           "estimate_result_bytes_per_run", "default_memory_budget", "software_versions", "load",
           "clear_program_cache", "PROGRAM_CACHE_SIZE"]

RUN_AXIS = "runs"
SEED_DIM = "seed"
CONFIG_DIM = "config"
_TOP_LEVEL_KEYS = ("experiment", "seeds", "seed", "setup", "fixed", "grid", "points", "run")
_RUN_OPTIONS = ("chunk_size", "memory_fraction", "memory_budget")
_INT32_MAX = 2**31 - 1


# ----------------------------------------------------------------------------
# Declaration and validation
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A declared sweep (see the module docstring). Validated on construction.

    Attributes:
        experiment: registered experiment name (:data:`jaxreplay.experiments.NAMES`).
        seeds: seeds per configuration (>= 1).
        seed: base seed; run keys are ``fold_in(key(seed), seed_index)``.
        setup: static settings: a table of fields of the experiment's
            ``Setup``, or a ``Setup`` instance.
        fixed: hyperparameters held fixed (fields of its ``Hyperparameters``);
            the others take their defaults.
        grid: ``{hyperparameter: values}``, crossed in the order given.
        points: explicit configurations, each ``{hyperparameter: value}`` (all
            with the same keys); an alternative to ``grid`` for irregular sets.
    """

    experiment: str
    seeds: int = 1
    seed: int = 0
    setup: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    grid: Mapping[str, Sequence[Any]] = dataclasses.field(default_factory=dict)
    points: Sequence[Mapping[str, Any]] | None = None

    def __post_init__(self):
        try:
            exp = experiments.get(self.experiment)
        except ValueError as e:
            raise ValueError(f"experiment: {e}") from None
        for name, low, high in (("seeds", 1, _INT32_MAX), ("seed", 0, 2**32 - 1)):  # seed: a uint32 key
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}.")
        if isinstance(self.setup, exp.setup_type):  # a Setup instance: its fields, as a table
            object.__setattr__(self, "setup", _fields_of(self.setup))
        for name in ("setup", "fixed", "grid"):
            if not isinstance(getattr(self, name), Mapping):
                raise ValueError(f"{name} must be a table (mapping), got {type(getattr(self, name)).__name__}.")
        setup = {k: _check_setup_value(exp, k, v) for k, v in self.setup.items()}
        object.__setattr__(self, "setup", setup)
        object.__setattr__(self, "fixed", {k: _check_hparam(exp, f"fixed.{k}", k, v) for k, v in self.fixed.items()})
        grid = {}
        for k, values in self.grid.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                raise ValueError(f"grid.{k} must be a list of values, got {values!r}.")
            if len(values) == 0:
                raise ValueError(f"grid.{k} is empty: give at least one value.")
            checked = tuple(_check_hparam(exp, f"grid.{k}", k, v) for v in values)
            if len(set(checked)) != len(checked):
                raise ValueError(f"grid.{k} has repeated values {list(values)}: each grid value must be distinct.")
            if k in self.fixed:
                raise ValueError(f"grid.{k}: {k!r} is also in fixed; a hyperparameter is either fixed or a grid axis.")
            grid[k] = checked
        object.__setattr__(self, "grid", grid)
        if self.points is not None:
            if self.grid:
                raise ValueError("points: give either grid or points, not both.")
            points = self.points
            if isinstance(points, (str, bytes, Mapping)) or not isinstance(points, Sequence) or not points:
                raise ValueError("points must be a non-empty list of tables {hyperparameter: value}.")
            keys = None
            points = []
            for i, point in enumerate(self.points):
                if not isinstance(point, Mapping):
                    raise ValueError(f"points[{i}] must be a table, got {point!r}.")
                if keys is None:
                    keys = tuple(point)
                if set(point) != set(keys):  # the same keys in another order are the same point
                    missing, extra = sorted(set(keys) - set(point)), sorted(set(point) - set(keys))
                    raise ValueError(
                        f"points[{i}] sets {sorted(point)}, points[0] sets {sorted(keys)} ("
                        + "; ".join(([f"missing {missing}"] if missing else []) + ([f"extra {extra}"] if extra else []))
                        + "): every point must set the same hyperparameters.")
                for k in point:
                    if k in self.fixed:
                        raise ValueError(f"points[{i}].{k}: {k!r} is also in fixed.")
                # In points[0]'s key order (the order of the dataset's coordinates).
                points.append({k: _check_hparam(exp, f"points[{i}].{k}", k, point[k]) for k in keys})
            object.__setattr__(self, "points", tuple(points))
        try:
            setup_obj = exp.setup_type(**setup)
        except ValueError as e:
            raise ValueError(f"setup: {e}") from None
        except TypeError as e:
            raise ValueError(f"setup: {e}") from None
        # Canonical form: every field of the Setup. A table and an instance with the same
        # settings are then one sweep (one fingerprint), and a later change of a default
        # cannot change what a stored sweep's config means.
        object.__setattr__(self, "setup", _fields_of(setup_obj))
        # The experiment's own range checks, on every configuration at once, before compiling
        # (one run per configuration: the seeds share their hyperparameters, and R-long
        # arrays could themselves exhaust the host's memory for a huge seed count).
        first_runs = np.arange(self.num_configs, dtype=np.int64) * self.seeds
        try:
            exp.check(self.hyperparameters(first_runs), setup_obj)
        except ValueError as error:
            raise ValueError(self._locate(error, setup_obj)) from None

    def _locate(self, error: ValueError, setup_obj) -> str:
        """``error`` (from the experiment's check of every configuration) said of the one configuration it
        is about, prefixed with where its value came from: ``grid.k = v``, ``points[i].k = v``,
        ``fixed.k = v`` or the default."""
        exp = self.exp
        for config in range(self.num_configs):
            one_config = type(hp := self.hyperparameters(np.array([config * self.seeds])))(*(x[0] for x in hp))
            try:
                exp.check(one_config, setup_obj)
            except ValueError as one:
                message = str(one)
                field = message.split(" ", 1)[0]
                if field not in exp.hyperparameters_type._fields:
                    return message
                value = getattr(one_config, field).item()
                if self.points is not None and field in self.points[config]:
                    where = f"points[{config}].{field} = {value!r}"
                elif field in self.grid:
                    where = f"grid.{field} = {value!r}"
                elif field in self.fixed:
                    where = f"fixed.{field} = {value!r}"
                else:
                    where = f"{field} = {value!r} (its default; set it in [fixed] or [grid])"
                return f"{where}: {message}"
        return str(error)

    # -- construction from files ------------------------------------------------

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "Sweep":
        """A sweep from a TOML-shaped dict (unknown top-level keys are an error; ``run`` is ignored)."""
        unknown = sorted(set(config) - set(_TOP_LEVEL_KEYS))
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} in the sweep config; "
                             f"known keys: {', '.join(_TOP_LEVEL_KEYS)}.")
        if "experiment" not in config:
            raise ValueError("experiment: missing; name one of " + ", ".join(experiments.NAMES) + ".")
        kwargs = {k: v for k, v in config.items() if k != "run"}
        return cls(**kwargs)

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> "Sweep":
        """Read a sweep from a TOML file (see ``examples/`` and :func:`run_options`)."""
        with open(path, "rb") as f:
            try:
                config = tomllib.load(f)
            except tomllib.TOMLDecodeError as e:
                raise ValueError(f"{path}: not valid TOML: {e}") from None
        return cls.from_dict(config)

    # -- derived quantities -------------------------------------------------------

    @property
    def exp(self) -> experiments.Experiment:
        return experiments.get(self.experiment)

    def make_setup(self):
        """The experiment's ``Setup`` instance."""
        return self.exp.setup_type(**self.setup)

    @property
    def axes(self) -> tuple[str, ...]:
        """Names of the varied hyperparameters (grid axes, or the keys of ``points``)."""
        if self.points is not None:
            return tuple(self.points[0])
        return tuple(self.grid)

    @property
    def num_configs(self) -> int:
        if self.points is not None:
            return len(self.points)
        return math.prod(len(v) for v in self.grid.values())

    @property
    def num_runs(self) -> int:
        return self.num_configs * self.seeds

    def configurations(self, configs: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Each varied hyperparameter's value for the configurations ``configs`` (default: all), ``[C]``.

        Grid configurations are numbered in C order (the last axis varies
        fastest); their values come from ``np.unravel_index``, so a chunk costs
        O(chunk), not O(grid).
        """
        configs = np.arange(self.num_configs) if configs is None else np.asarray(configs)
        if self.points is not None:
            return {k: np.array([p[k] for p in self.points])[configs] for k in self.axes}
        if not self.grid:
            return {}
        index = np.unravel_index(configs, tuple(len(v) for v in self.grid.values()))
        return {k: np.array(v)[i] for (k, v), i in zip(self.grid.items(), index)}

    def hyperparameters(self, runs: np.ndarray | None = None):
        """The experiment's ``Hyperparameters`` with NumPy fields ``[R]`` for ``runs`` (default: all).

        Integer hyperparameters are int32, the others float32.
        """
        exp = self.exp
        runs = np.arange(self.num_runs) if runs is None else np.asarray(runs)
        varied = self.configurations(runs // self.seeds)
        defaults = exp.hyperparameters_type()
        fields = {}
        for name in exp.hyperparameters_type._fields:
            dtype = np.int32 if _is_int_field(defaults, name) else np.float32
            if name in varied:
                fields[name] = varied[name].astype(dtype)
            else:
                fields[name] = np.full(runs.shape, self.fixed.get(name, getattr(defaults, name)), dtype=dtype)
        return exp.hyperparameters_type(**fields)

    def to_dict(self) -> dict:
        """The canonical config (what determines the results), JSON-serialisable."""
        out = {"experiment": self.experiment, "seeds": int(self.seeds), "seed": int(self.seed),
               "setup": {k: _plain(v) for k, v in self.setup.items()},
               "fixed": {k: _plain(v) for k, v in self.fixed.items()}}
        if self.points is not None:
            out["points"] = [{k: _plain(v) for k, v in p.items()} for p in self.points]
        else:
            out["grid"] = {k: [_plain(x) for x in v] for k, v in self.grid.items()}
        return out

    def to_toml(self) -> str:
        """The sweep as TOML text; :meth:`from_toml` reads it back as the same sweep (same fingerprint).

        Settings whose value is ``None`` are left out (TOML has no null): they
        are the ``Setup``'s defaults. Raises ``ValueError`` for a ``None`` that
        is not a default.
        """
        config = self.to_dict()
        defaults = {f.name: f.default for f in dataclasses.fields(self.exp.setup_type)}
        for name, value in config["setup"].items():
            if value is None and defaults.get(name) is not None:
                raise ValueError(f"setup.{name} is None, which TOML cannot hold and is not its default.")
        config["setup"] = {k: v for k, v in config["setup"].items() if v is not None}
        lines = [f"{k} = {_toml_value(config[k])}" for k in ("experiment", "seeds", "seed")]
        for table in ("setup", "fixed", "grid"):
            if config.get(table):
                lines += ["", f"[{table}]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in config[table].items()]
        for point in config.get("points", []):
            lines += ["", "[[points]]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in point.items()]
        return "\n".join(lines) + "\n"

    def fingerprint(self) -> str:
        """SHA-256 of the canonical config: equal exactly when two sweeps give the same results.

        It covers everything that maps a run index to its configuration: the
        config's values and the *order* of the grid axes (run ``r`` is
        configuration ``r // seeds`` in C order over the axes as declared, so
        two grids with the same axes in another order number their runs
        differently and are different sweeps). Other table keys are sorted
        (their order changes nothing).
        """
        return hashlib.sha256(json.dumps(self._fingerprint_payload(), sort_keys=True).encode()).hexdigest()

    def _fingerprint_payload(self) -> dict:
        payload = self.to_dict()
        if "grid" in payload:  # a list of [axis, values] pairs: sort_keys cannot reorder it
            payload["grid"] = [[k, v] for k, v in payload["grid"].items()]
        payload["run_layout"] = "run r: configuration r // seeds (C order over the grid axes), seed r % seeds"
        return payload


def _plain(v):
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _fields_of(setup) -> dict:
    """A ``Setup`` instance as the table ``{field: value}`` of all its fields (shallow, unlike ``asdict``)."""
    return {f.name: getattr(setup, f.name) for f in dataclasses.fields(setup)}


def _toml_key(key: str) -> str:
    return key if key and all(c.isalnum() or c in "_-" for c in key) else json.dumps(key)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isfinite(value):
            return repr(value)
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"cannot write {value!r} ({type(value).__name__}) as TOML.")


def _is_int_field(defaults, name) -> bool:
    value = getattr(defaults, name)
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_hparam(exp, where: str, name: str, value):
    fields = exp.hyperparameters_type._fields
    if name not in fields:
        raise ValueError(f"{where}: unknown hyperparameter of {exp.name!r}; known: {', '.join(fields)}.")
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where} must be a number, got {value!r} ({type(value).__name__}).")
    if _is_int_field(exp.hyperparameters_type(), name):
        if not math.isfinite(float(value)) or float(value) != int(value):
            raise ValueError(f"{where} must be an integer, got {value!r}.")
        if not -_INT32_MAX - 1 <= int(value) <= _INT32_MAX:  # traced as int32
            raise ValueError(f"{where} = {int(value)} does not fit an int32 (at most {_INT32_MAX}).")
        return int(value)
    if not math.isfinite(float(value)):
        raise ValueError(f"{where} must be finite, got {value!r}.")
    if abs(float(value)) > float(np.finfo(np.float32).max):  # traced as float32: would be inf
        raise ValueError(f"{where} = {value!r} does not fit a float32 (at most {float(np.finfo(np.float32).max):.4g}).")
    return float(value)


def _check_setup_value(exp, name: str, value):
    fields = {f.name: f for f in dataclasses.fields(exp.setup_type)}
    if name not in fields:
        raise ValueError(f"setup.{name}: unknown setting of {exp.name!r}; known: {', '.join(fields)}.")
    field = fields[name]
    default = field.default if field.default is not dataclasses.MISSING else None
    if isinstance(value, list):
        value = tuple(value)
    if default is None:
        return value
    ok = {
        bool: lambda v: isinstance(v, bool),
        int: lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool),
        float: lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str),
        tuple: lambda v: isinstance(v, (tuple, dict)),  # a table where the Setup takes pairs
    }.get(type(default), lambda v: True)
    if not ok(value):
        raise ValueError(f"setup.{name} must be of type {type(default).__name__} (like its default {default!r}), "
                         f"got {value!r} ({type(value).__name__}).")
    if isinstance(default, int) and not isinstance(default, bool) and abs(int(value)) > _INT32_MAX:
        raise ValueError(f"setup.{name} = {int(value)} does not fit an int32 (at most {_INT32_MAX}): it sets an "
                         "array shape or an index.")
    # A table of named parameters (e.g. DQN's env_params): traced numbers, so each value must be one.
    pairs = value.items() if isinstance(value, dict) else (
        value if isinstance(value, tuple) and value and all(
            isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) for p in value) else ())
    for key, item in pairs:
        if isinstance(item, str) or not isinstance(item, (bool, int, float, np.integer, np.floating)):
            raise ValueError(f"setup.{name}.{key} must be a number, got {item!r} ({type(item).__name__}).")
    return float(value) if isinstance(default, float) else value


def run_options(config: Mapping[str, Any]) -> dict:
    """The optional ``[run]`` table of a TOML config (execution only: results do not depend on it).

    Checked here, naming the key: ``chunk_size`` a positive integer,
    ``memory_fraction`` a number in (0, 1], ``memory_budget`` a positive
    finite number of bytes.
    """
    run = config.get("run", {})
    if not isinstance(run, Mapping):
        raise ValueError(f"run must be a table of run options ({', '.join(_RUN_OPTIONS)}), got {run!r}.")
    options = dict(run)
    unknown = sorted(set(options) - set(_RUN_OPTIONS))
    if unknown:
        raise ValueError(f"run.{unknown[0]}: unknown run option; known: {', '.join(_RUN_OPTIONS)}.")
    _check_run_options("run.", **options)
    return options


def _check_run_options(prefix: str = "", chunk_size=None, memory_fraction=None, memory_budget=None) -> None:
    """ValueError naming ``prefix + option`` for a bad ``chunk_size``, ``memory_fraction`` or ``memory_budget``."""
    def number(v):
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)

    if chunk_size is not None and (not number(chunk_size) or not float(chunk_size).is_integer() or chunk_size < 1):
        raise ValueError(f"{prefix}chunk_size must be a positive integer, got {chunk_size!r}.")
    if memory_fraction is not None and (not number(memory_fraction) or not 0.0 < memory_fraction <= 1.0):
        raise ValueError(f"{prefix}memory_fraction must be a number in (0, 1], got {memory_fraction!r}.")
    if memory_budget is not None and (not number(memory_budget) or not math.isfinite(memory_budget)
                                      or memory_budget < 1):
        raise ValueError(f"{prefix}memory_budget must be a positive number of bytes, got {memory_budget!r}.")


# ----------------------------------------------------------------------------
# Memory
# ----------------------------------------------------------------------------


def _tree_bytes(tree) -> int:
    return int(sum(math.prod(x.shape) * _itemsize(x.dtype) for x in jax.tree.leaves(tree)))


def _itemsize(dtype) -> int:
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return 8  # a threefry key is two uint32 words
    return np.dtype(dtype).itemsize


class _Footprint(NamedTuple):
    """Shapes of one run: ``state``, ``record`` (one segment), ``summary``, ``hparams``, and ``temporary``,
    the bytes of the largest array made inside a loop body of a segment other than a state-shaped one."""

    state: Any
    record: Any
    summary: Any
    hparams: Any
    temporary: int


def _shapes(sweep: Sweep) -> _Footprint:
    """One run's :class:`_Footprint`, by tracing only (``jax.eval_shape``, ``jax.make_jaxpr``: nothing compiled)."""
    exp, setup = sweep.exp, sweep.make_setup()
    hparams = jax.tree.map(lambda x: jax.ShapeDtypeStruct((), x.dtype), sweep.hyperparameters(np.arange(1)))
    key = jax.eval_shape(lambda: jax.random.key(0))  # shapes only: nothing compiled
    state = jax.eval_shape(lambda k, h: exp.init(k, h, setup), key, hparams)
    jaxpr, (state2, record) = jax.make_jaxpr(lambda s, h: exp.advance(s, h, setup), return_shape=True)(state, hparams)
    summary = jax.eval_shape(lambda s, h: exp.summarize(s, h, setup), state2, hparams)
    state_like = {(tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(state)}
    return _Footprint(state, record, summary, hparams, _largest_loop_temporary(jaxpr.jaxpr, state_like))


def _largest_loop_temporary(jaxpr, state_like: set, in_loop: bool = False) -> int:
    """Bytes of the largest array an equation makes inside a ``scan``/``while`` body of ``jaxpr`` (nested
    jaxprs searched), leaving out arrays shaped like a leaf of the state (in-place updates of it)."""
    from jax.extend import core as jex_core

    largest = 0
    for eqn in jaxpr.eqns:
        loop = in_loop or eqn.primitive.name in ("scan", "while")
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, jex_core.ClosedJaxpr):
                    sub = sub.jaxpr
                if isinstance(sub, jex_core.Jaxpr):
                    largest = max(largest, _largest_loop_temporary(sub, state_like, loop))
        if in_loop:
            for var in eqn.outvars:
                aval = var.aval
                if hasattr(aval, "shape") and (tuple(aval.shape), str(aval.dtype)) not in state_like:
                    largest = max(largest, math.prod(aval.shape) * _itemsize(aval.dtype))
    return largest


def estimate_result_bytes_per_run(sweep: Sweep) -> int:
    """Host bytes of one run's results (its record over every segment, its summary and its index).

    ``runs × this`` is the size of the assembled results in memory, of
    ``results.nc`` and of the chunk files (up to their small headers).
    """
    footprint = _shapes(sweep)
    return _result_bytes(sweep, footprint.record, footprint.summary)


def _result_bytes(sweep: Sweep, record, summary) -> int:
    num_segments = int(sweep.exp.num_segments(sweep.make_setup()))
    return _tree_bytes(record) * num_segments + _tree_bytes(summary) + 8  # + the int64 run index


#: Temporaries of a step, as a multiple of its largest array (see :func:`estimate_bytes_per_run`).
TEMPORARY_FACTOR = 8


def estimate_bytes_per_run(sweep: Sweep) -> int:
    """Device bytes one run needs, from shapes only (nothing is allocated or compiled).

    The estimate is ``1.5 × state + record + summary + hyperparameters + 8 ×
    temporary``: the run's state (replay storage × ``max_capacity``,
    parameters, optimizer and environment state) is updated in place by the
    segment's scan (the input is donated), plus room for the temporaries of an
    update; the record is one segment's curves; ``temporary`` is the largest
    array made inside the segment's loops other than a state-shaped one (a
    minibatch of draws or of gathered transitions, a layer's activations), and
    a step keeps several alive: XLA's accounting for a LineSearch minibatch of
    10^6 is 7.5 times its largest array, so a huge ``max_batch_size`` /
    ``batch_size`` is refused (or chunked) by the memory checks instead of
    exhausting memory. Measured against XLA's own accounting of the compiled
    program (``memory_analysis``): within 0.6-2x for LineSearch ER, pER and
    aER, and for a minibatch of 10^6 (tested).
    """
    return _device_bytes(_shapes(sweep))


def _device_bytes(footprint: _Footprint) -> int:
    return (int(1.5 * _tree_bytes(footprint.state)) + _tree_bytes(footprint.record) + _tree_bytes(footprint.summary)
            + 4 * len(footprint.hparams) + TEMPORARY_FACTOR * footprint.temporary)


def default_memory_budget(fraction: float = 0.5, devices: Sequence[jax.Device] | None = None) -> int:
    """``fraction`` of the free memory of ``devices`` (default: the local ones), in bytes.

    Accelerators report their limit through ``Device.memory_stats()``; CPU
    devices share the host's RAM (``os.sysconf``), which is then split evenly.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"memory_fraction must be in (0, 1], got {fraction!r}.")
    devices = list(devices or jax.local_devices())
    total = 0
    for device in devices:
        stats = None
        try:
            stats = device.memory_stats()
        except Exception:  # some backends do not implement it
            stats = None
        if stats and "bytes_limit" in stats:
            total += stats["bytes_limit"] - stats.get("bytes_in_use", 0)
        else:
            total += _host_memory_bytes() // len(devices)
    return int(fraction * total)


def _host_memory_bytes() -> int:
    """Host memory this process can still use: ``MemAvailable`` (free plus reclaimable cache), capped by
    the cgroup's limit if one is set; ``os.sysconf``'s free pages where ``/proc`` is missing."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return 4 << 30
    try:  # cgroup v2: a container's limit can be far below the machine's memory
        limit = pathlib.Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(pathlib.Path("/sys/fs/cgroup/memory.current").read_text())
            available = min(available, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return available


def _free_disk_bytes(path: pathlib.Path) -> int:
    """Free bytes (for this user) on the file system that holds ``path`` or its nearest existing parent."""
    import shutil

    path = pathlib.Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def _check_host_memory(runs: int, result_bytes: int, chunk: int, chunk_device_bytes: int) -> int:
    """Refuse (MemoryError with the numbers) a sweep whose results cannot fit the host's memory.

    Peak host use: the assembled results (``runs × result_bytes``, what
    :func:`run` returns), two copies of one chunk's results (the segments
    collected and their concatenation), the bookkeeping of which runs are
    done (9 bytes per run), and on CPU the chunk's device memory, which is
    host memory too. Returns that peak in bytes.
    """
    assembled = runs * result_bytes
    need = assembled + 2 * chunk * result_bytes + 9 * runs + chunk_device_bytes
    available = _host_memory_bytes()
    if need > available:
        raise MemoryError(
            f"the sweep's results need about {_mib(need)} of host memory ({runs} runs × {_mib(result_bytes)} "
            f"of results each = {_mib(assembled)} assembled, plus a chunk of {chunk} runs"
            + (f" and its {_mib(chunk_device_bytes)} of CPU device memory" if chunk_device_bytes else "")
            + f"), but only {_mib(available)} is available. Run fewer seeds or grid points, or record less "
            "(e.g. a shorter setup.steps / fewer segments), or split the sweep into several."
        )
    return need


def _check_disk(out: pathlib.Path, missing_runs: int, runs: int, result_bytes: int) -> int:
    """Refuse (MemoryError with the numbers) a sweep whose chunks and ``results.nc`` cannot fit on disk."""
    chunks, results = missing_runs * result_bytes, runs * result_bytes
    need = chunks + results
    free = _free_disk_bytes(out)
    if need > free:
        raise MemoryError(
            f"the sweep needs about {_mib(need)} of disk in {out} ({_mib(chunks)} of chunk files for the "
            f"{missing_runs} runs still to compute, {_mib(results)} for results.nc), but only {_mib(free)} is "
            "free there. Free some space, choose another --out, or run fewer seeds or grid points."
        )
    return need


# On CPU a chunk's working set should stay near the caches: measured on a 2-core
# CPU (LineSearch ER, T = 1000, 10^4 runs), per-run cost is lowest for chunks of
# 256–1024 runs and 1.4× / 2.7× higher at 4096 / 10^4 runs. Accelerators are
# limited by memory only.
CPU_RUNS_PER_DEVICE = 1024


def _memory_hint(footprint: _Footprint | None) -> str:
    """What to lower when one run does not fit: whichever of state and step temporaries dominates."""
    if footprint is not None and TEMPORARY_FACTOR * footprint.temporary > 1.5 * _tree_bytes(footprint.state):
        return (f"A step's temporaries dominate (its largest array is {_mib(footprint.temporary)}): lower the "
                "minibatch size (setup.max_batch_size, setup.batch_size, --batch-size)")
    return "Lower setup.max_capacity (replay storage dominates), shorten a segment"


def _choose_chunk(bytes_per_run: int, budget: int, num_devices: int, runs: int, chunk_size: int | None,
                  cpu_chunk_cap: int | None = None, footprint: _Footprint | None = None) -> int:
    fit = budget // max(bytes_per_run, 1)
    if fit < num_devices:
        raise MemoryError(
            f"one run needs about {_mib(bytes_per_run)} of device memory and {num_devices} device(s) need at least "
            f"{num_devices} runs per chunk ({_mib(bytes_per_run * num_devices)}), but the memory budget is "
            f"{_mib(budget)}. {_memory_hint(footprint)}, or raise memory_budget / memory_fraction."
        )
    if chunk_size is None:
        chunk = min(fit, cpu_chunk_cap if cpu_chunk_cap else fit)
        chunk = min(chunk, -(-runs // num_devices) * num_devices)  # no point padding beyond the work
    else:
        # Asked for: exactly that program shape (padded if the work is smaller), so that sweeps
        # of any size run their runs at one batch size (XLA may round a run differently at another).
        chunk = min(fit, chunk_size)
    return max(num_devices, chunk // num_devices * num_devices)


def _mib(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# ----------------------------------------------------------------------------
# Execution
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class SweepStats:
    """What a call of :func:`run` did (not part of the results: it varies between machines)."""

    runs: int
    runs_computed: int
    runs_resumed: int
    chunks: int
    chunk_size: int
    devices: int
    processes: int
    compilations: int
    compile_seconds: float
    run_seconds: float
    runs_per_second: float
    diverged: int
    bytes_per_run: int
    memory_budget: int
    result_bytes_per_run: int = 0

    def describe(self) -> str:
        """One line: runs computed/resumed, chunks, devices, compilations, timings, runs/s, diverged runs."""
        return (f"{self.runs} runs ({self.runs_computed} computed, {self.runs_resumed} resumed) in {self.chunks} "
                f"chunk(s) of {self.chunk_size} on {self.devices} device(s) × {self.processes} process(es); "
                f"{self.compilations} compilation(s) in {self.compile_seconds:.1f} s; run {self.run_seconds:.1f} s "
                f"({self.runs_per_second:.1f} runs/s); {self.diverged} diverged; "
                f"~{_mib(self.bytes_per_run)} per run, budget {_mib(self.memory_budget)}")


class SweepResult(NamedTuple):
    """``dataset`` (labeled results, see :func:`to_dataset`) and ``stats`` (:class:`SweepStats`)."""

    dataset: Any
    stats: SweepStats


class _Programs:
    """The compiled programs of one sweep.

    ``rest`` runs one segment and the summary on a chunk of states. A
    one-segment experiment (LineSearch) fuses the initialisation into it as
    ``first`` (one program); a multi-segment one (DQN) runs a small ``init``
    program and then ``rest`` for every segment, the first included, so the
    segment (the costly compile) is compiled once, not twice.

    Programs are compiled ahead of time on first use, once per argument
    signature (the chunk's shapes and dtypes), and kept: :func:`_programs_for`
    keeps this object for the process, so a sweep run again (a notebook cell)
    or another grid over the same setup compiles nothing.
    """

    def __init__(self, sweep: Sweep, devices: Sequence[jax.Device]):
        from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

        exp, setup = sweep.exp, sweep.make_setup()
        # Auto axes: jax.make_mesh defaults to Explicit axes, under which vmap refuses
        # a mapped axis sharded differently from its outputs (STACK_NOTES).
        mesh = Mesh(np.array(devices), (RUN_AXIS,), axis_types=(AxisType.Auto,))
        self.batched = NamedSharding(mesh, PartitionSpec(RUN_AXIS))
        self.replicated = NamedSharding(mesh, PartitionSpec())
        self.compilations = 0
        self.compile_seconds = 0.0

        def segment(state, hparams):
            state, record = exp.advance(state, hparams, setup)
            return state, record, exp.summarize(state, hparams, setup)

        def init(base_seed, seed_index, hparams):
            def one(s, h):
                return exp.init(jax.random.fold_in(jax.random.key(base_seed), s), h, setup)

            return jax.vmap(one)(seed_index, hparams)

        def first(base_seed, seed_index, hparams):
            return jax.vmap(segment)(init(base_seed, seed_index, hparams), hparams)

        self.fused = int(exp.num_segments(setup)) == 1
        self._first = jax.jit(first if self.fused else init, in_shardings=(self.replicated, self.batched, self.batched),
                              out_shardings=self.batched)
        self._rest = jax.jit(jax.vmap(segment), in_shardings=(self.batched, self.batched),
                             out_shardings=self.batched, donate_argnums=0)
        self._compiled: dict = {}

    def _get(self, name, jitted, *args):
        leaves, treedef = jax.tree.flatten(args)
        # Shapes and dtypes only (never np.asarray on a device array: that would copy it to the host).
        signature = (name, treedef, tuple((np.shape(x), x.dtype) for x in leaves))
        compiled = self._compiled.get(signature)
        if compiled is None:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
                compiled = jitted.lower(*args).compile()
            self.compile_seconds += time.perf_counter() - t0
            self.compilations += 1
            self._compiled[signature] = compiled
        return compiled

    def run_first(self, base_seed, seed_index, hparams):
        out = self._get("first", self._first, base_seed, seed_index, hparams)(base_seed, seed_index, hparams)
        return out if self.fused else self.run_rest(out, hparams)

    def run_rest(self, state, hparams):
        compiled = self._get("rest", self._rest, state, hparams)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
            return compiled(state, hparams)


#: How many sweeps' compiled programs the process keeps (least recently used dropped first).
PROGRAM_CACHE_SIZE = 8
_PROGRAM_CACHE: OrderedDict = OrderedDict()


def _programs_for(sweep: Sweep, devices: Sequence[jax.Device]) -> _Programs:
    # What a program depends on: the experiment, its static setup and the devices.
    # Hyperparameters, seeds and grids are arguments, so they share the programs.
    key = (sweep.experiment, json.dumps(sweep.to_dict()["setup"], sort_keys=True, default=repr),
           tuple((d.platform, d.id) for d in devices))
    programs = _PROGRAM_CACHE.pop(key, None) or _Programs(sweep, devices)
    _PROGRAM_CACHE[key] = programs
    while len(_PROGRAM_CACHE) > PROGRAM_CACHE_SIZE:
        _PROGRAM_CACHE.popitem(last=False)
    return programs


def clear_program_cache() -> None:
    """Forget every compiled sweep program kept by this process (frees their device memory)."""
    _PROGRAM_CACHE.clear()


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def run(
    sweep: Sweep,
    out_dir: str | os.PathLike | None = None,
    *,
    chunk_size: int | None = None,
    memory_budget: int | None = None,
    memory_fraction: float = 0.5,
    progress: bool = True,
    devices: Sequence[jax.Device] | None = None,
) -> SweepResult:
    """Run ``sweep`` (resuming from ``out_dir`` if it holds part of it) and return its labeled results.

    Args:
        sweep: the :class:`Sweep`.
        out_dir: where chunks, ``results.nc``, ``sweep.json`` and
            ``summary.json`` go; ``None`` keeps everything in memory (no resume).
        chunk_size: runs per compiled call (rounded down to a multiple of
            the device count, at most what fits ``memory_budget``); a sweep
            with fewer runs is padded to it, so every sweep given the same
            ``chunk_size`` runs in programs of one shape. Default: as many as
            fit ``memory_budget`` (on CPU at most :data:`CPU_RUNS_PER_DEVICE`
            per device), and no more than the sweep's runs.
        memory_budget: device bytes the chunk may use in all (default:
            ``memory_fraction`` of the free device memory, see
            :func:`default_memory_budget`).
        memory_fraction: see above.
        progress: show a progress bar (runs/s, ETA) and print a summary.
        devices: local devices to shard over (default: all local devices).

    Returns:
        A :class:`SweepResult`.

    Raises:
        ValueError: ``out_dir`` holds a different sweep, or bad options.
        MemoryError: a single run (per device) does not fit the budget, the
            results do not fit the host's available memory, or the chunks and
            ``results.nc`` do not fit the free disk under ``out_dir``; raised
            with the numbers before anything is written or compiled.
    """
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer))
                                   or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}.")
    _check_run_options(memory_fraction=memory_fraction, memory_budget=memory_budget)
    devices = list(devices or jax.local_devices())
    budget = default_memory_budget(memory_fraction, devices) if memory_budget is None else int(memory_budget)
    footprint = _shapes(sweep)
    bytes_per_run = _device_bytes(footprint)
    result_bytes = _result_bytes(sweep, footprint.record, footprint.summary)
    exp, setup = sweep.exp, sweep.make_setup()
    num_segments = int(exp.num_segments(setup))
    R = sweep.num_runs
    out = pathlib.Path(out_dir) if out_dir is not None else None
    process, processes = jax.process_index(), jax.process_count()
    on_cpu = all(d.platform == "cpu" for d in devices)
    cpu_cap = CPU_RUNS_PER_DEVICE * len(devices) if on_cpu else None

    # Host memory before anything is written or compiled (the largest chunk any resume state allows).
    largest_chunk = _choose_chunk(bytes_per_run, budget, len(devices), R, chunk_size, cpu_cap, footprint)
    _check_host_memory(R, result_bytes, largest_chunk, largest_chunk * bytes_per_run if on_cpu else 0)

    writable = True
    if out is not None:
        chunk_dir = out / "chunks"
        if process == 0:
            _prepare_output_folder(out)
            writable = _writable(out)
            manifest = _check_manifest(out, sweep)
            if writable:
                chunk_dir.mkdir(exist_ok=True)
                for stale in out.rglob(".tmp-*"):  # a killed writer's partial file
                    stale.unlink(missing_ok=True)
            # Chunks are checked before a missing manifest is written: chunks of another
            # sweep (sweep.json deleted, config changed) must refuse the run, not be adopted.
            legacy = manifest is not None and manifest["legacy"]
            vouched = True if legacy else (manifest["vouched"] if manifest else set())
            unfingerprinted: list[str] = []
            done = _finished_runs(chunk_dir, sweep, quarantine=writable, vouched=vouched,
                                  unfingerprinted=unfingerprinted)
            vouched = set(unfingerprinted)
            if not writable and not done.all():
                raise ValueError(
                    f"{out} is not writable (read-only or no permission) and {int((~done).sum())} of {R} runs are "
                    "still to compute: make it writable, or choose another output folder.")
            if writable:
                _check_disk(out, int(R - done.sum()), R, result_bytes)
                if manifest is None or legacy:  # (an older jaxreplay's manifest of this sweep: upgraded)
                    _write_manifest(out, sweep, unfingerprinted)
        _barrier("jaxreplay-sweep-start")
        if process != 0:
            manifest = _check_manifest(out, sweep)
            vouched = True if manifest is not None and manifest["legacy"] else (manifest or {}).get("vouched", set())
            done = _finished_runs(chunk_dir, sweep, quarantine=False, vouched=vouched)
    else:
        chunk_dir = None
        done = np.zeros(R, bool)
    missing = np.flatnonzero(~done)

    # Sized for the whole sweep, not for the runs still missing: a resumed sweep then runs its
    # remaining runs in programs of the same batch size as the first attempt (XLA may round a
    # run differently at another batch size, docs/design.md), at the cost of padding.
    chunk = _choose_chunk(bytes_per_run, budget, len(devices), R, chunk_size, cpu_cap)
    chunks = [missing[i:i + chunk] for i in range(0, len(missing), chunk)]
    mine = chunks[process::processes]
    programs = _programs_for(sweep, devices)
    compilations_before, compile_seconds_before = programs.compilations, programs.compile_seconds
    # Results go straight into preallocated [R, ...] arrays, one chunk at a time (never a list of
    # every chunk plus a concatenated copy).
    assembler = _Assembler(R)

    bar = None
    if progress and mine:
        from tqdm.auto import tqdm

        # Counted in run-segments (integers: no float drift) and shown in runs.
        bar = tqdm(total=sum(len(c) for c in mine) * num_segments, unit="run", unit_scale=1 / num_segments,
                   desc=f"sweep {sweep.experiment}", file=sys.stderr, dynamic_ncols=True)
    t_start = time.perf_counter()
    base_seed = jax.device_put(np.uint32(sweep.seed), programs.replicated)
    # Host work on segment k's outputs (transfer, saving) overlaps the device's work on
    # segment k + 1: JAX dispatches asynchronously, so we dispatch first and drain one
    # step behind. At most two segments' records are in flight at once.
    collected: dict[int, list] = {}
    pending = None

    def drain(item):
        chunk_id, runs, record, summary = item
        valid = len(runs)
        collected.setdefault(chunk_id, []).append(jax.tree.map(lambda x: np.asarray(x)[:valid], record))
        if bar is not None:
            bar.update(valid)
        if summary is None:
            return
        records = collected.pop(chunk_id)
        result = {f"record.{k}": np.concatenate([r[k] for r in records], axis=1) for k in records[0]}
        result.update({f"summary.{k}": np.asarray(v)[:valid] for k, v in summary.items()})
        result["run_index"] = runs.astype(np.int64)
        if chunk_dir is not None:
            _save_chunk(chunk_dir, result, sweep.fingerprint(), R)
        else:
            assembler.add(result)

    for chunk_id, runs in enumerate(mine):
        valid = len(runs)
        padded = np.concatenate([runs, np.full(chunk - valid, runs[-1])])  # same shape: no recompile
        hparams = jax.device_put(sweep.hyperparameters(padded), programs.batched)
        seed_index = jax.device_put((padded % sweep.seeds).astype(np.uint32), programs.batched)
        for segment in range(num_segments):
            if segment == 0:
                state, record, summary = programs.run_first(base_seed, seed_index, hparams)
            else:
                state, record, summary = programs.run_rest(state, hparams)
            if pending is not None:
                drain(pending)
            pending = (chunk_id, runs, record, summary if segment == num_segments - 1 else None)
    if pending is not None:
        drain(pending)
    compile_seconds = programs.compile_seconds - compile_seconds_before
    run_seconds = time.perf_counter() - t_start - compile_seconds
    if bar is not None:
        bar.close()
    _barrier("jaxreplay-sweep-end")

    if chunk_dir is not None:
        for path in _chunk_paths(chunk_dir):  # one chunk file in memory at a time
            assembler.add(_read_chunk(path, sweep, quarantine=writable and process == 0, vouched=vouched))
    dataset = to_dataset(sweep, assembler.finish())
    computed = int(sum(len(c) for c in mine))
    stats = SweepStats(
        runs=R, runs_computed=computed, runs_resumed=int(done.sum()), chunks=len(mine), chunk_size=chunk,
        devices=len(devices), processes=processes, compilations=programs.compilations - compilations_before,
        compile_seconds=compile_seconds, run_seconds=max(run_seconds, 0.0),
        runs_per_second=computed / run_seconds if run_seconds > 0 and computed else 0.0,
        diverged=int(np.sum(dataset["diverged"].values)) if "diverged" in dataset else 0,
        bytes_per_run=bytes_per_run, memory_budget=budget, result_bytes_per_run=result_bytes,
    )
    if out is not None and process == 0 and writable:
        _atomic_write(out / "summary.json", json.dumps(dataclasses.asdict(stats), indent=2).encode())
        _atomic_write(out / "results.nc", lambda f: _write_netcdf(dataset, f))
    elif out is not None and process == 0 and not (out / "results.nc").exists():
        warnings.warn(f"{out} is not writable: results.nc was not written (the results are returned; save them "
                      "elsewhere with dataset.to_netcdf).", SweepWarning, stacklevel=2)
    if progress and process == 0:
        print(stats.describe(), file=sys.stderr)
    return SweepResult(dataset, stats)


# ----------------------------------------------------------------------------
# Persistence
# ----------------------------------------------------------------------------


def software_versions() -> dict[str, str]:
    """Versions of Python and the packages that determine results."""
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for name in ("jaxreplay", "jax", "jaxlib", "flax", "optax", "gymnax", "diffrax", "numpy", "xarray"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _atomic_write(path: pathlib.Path, data) -> None:
    """Write ``data`` to ``path`` so a reader sees the whole file or none of it (temp file, fsync, rename).

    ``data`` is bytes, or a function that writes the file's contents to the
    open binary file it is given (so large files are streamed, never held in
    memory whole). Temp files are named ``.tmp-*``; :func:`run` deletes any a
    killed writer left.
    """
    tmp = path.parent / f".tmp-{uuid.uuid4().hex}-{path.name}"
    try:
        with open(tmp, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class SweepWarning(UserWarning):
    """Something in an output folder was repaired or skipped (a damaged chunk set aside to be recomputed,
    results not written to a read-only folder); the message names the file."""


def _prepare_output_folder(out: pathlib.Path) -> None:
    """Create ``out`` if needed; ValueError (one line naming the path) if it is a file, lies under one, or
    cannot be created."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"the output folder {out} is a file, not a folder: choose a folder (new, or one holding "
                         "this sweep).")
    parent = out
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"the output folder {out} cannot be created: {parent} is a file. Choose another folder.")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"the output folder {out} cannot be created ({e.strerror}): choose another folder, or fix "
                         f"the permissions of {parent}.") from None


def _writable(folder: pathlib.Path) -> bool:
    """Whether a file can be created in ``folder`` (tried, so read-only mounts count, even for root)."""
    probe = folder / f".tmp-probe-{uuid.uuid4().hex}"
    try:
        probe.open("wb").close()
        probe.unlink()
        return True
    except OSError:
        return False


def _legacy_fingerprint(sweep: Sweep) -> str:
    """The fingerprint jaxreplay wrote before it covered the grid axis order (and before chunks carried one)."""
    return hashlib.sha256(json.dumps(sweep.to_dict(), sort_keys=True).encode()).hexdigest()


def _check_manifest(out: pathlib.Path, sweep: Sweep) -> dict | None:
    """``out/sweep.json`` checked against ``sweep``: None if absent, else ``{"legacy": bool, "vouched": set}``.

    ``vouched`` names chunk files without a fingerprint that are this sweep's
    (written by an older jaxreplay and adopted when the manifest was upgraded).
    ``legacy`` is a manifest of that older jaxreplay that is this sweep's: its
    old-scheme fingerprint matches and its grid axes are in the same order;
    its fingerprint-less chunks are then this sweep's too. ValueError if the
    manifest describes another sweep or is damaged.
    """
    path = out / "sweep.json"
    if not path.exists():
        return None
    try:
        stored = json.loads(path.read_text())
        if not isinstance(stored, dict):
            raise ValueError(f"a JSON {type(stored).__name__}, not an object")
    except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError is a ValueError
        raise ValueError(
            f"{path} is damaged (not a sweep manifest: {e}). Delete it and rerun: the chunks carry their "
            "sweep's fingerprint, so only this sweep's finished runs are reused.") from None
    if stored.get("fingerprint") == sweep.fingerprint():
        vouched = stored.get("unfingerprinted_chunks", [])
        return {"legacy": False, "vouched": {str(name) for name in vouched} if isinstance(vouched, list) else set()}
    old = stored.get("config", {})
    if (stored.get("fingerprint") == _legacy_fingerprint(sweep) and isinstance(old, dict)
            and list(old.get("grid") or {}) == list(sweep.grid)):  # (sweep.json keeps the order it was written in)
        return {"legacy": True, "vouched": set()}
    old, new = old if isinstance(old, dict) else {}, sweep.to_dict()
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    old_axes, new_axes = list(old.get("grid") or {}), list(new.get("grid") or {})
    if "grid" not in diff and old_axes != new_axes:
        diff.append(f"grid axis order: {old_axes} there, {new_axes} here; the order numbers the runs")
    if not diff:
        diff = ["fingerprint (sweep.json was written by another jaxreplay version, which fingerprints "
                "configs differently)"]
    raise ValueError(
        f"{out} holds a different sweep (differs in: {'; '.join(diff)}). Results of two "
        "configs are never mixed: use a new output directory, or delete this one to start over."
    )


def _write_manifest(out: pathlib.Path, sweep: Sweep, unfingerprinted: Sequence[str] = ()) -> None:
    manifest = {"fingerprint": sweep.fingerprint(), "config": sweep.to_dict(), "versions": software_versions()}
    if unfingerprinted:  # an older jaxreplay's chunks of this sweep, adopted with its verified manifest
        manifest["unfingerprinted_chunks"] = sorted(unfingerprinted)
    _atomic_write(out / "sweep.json", json.dumps(manifest, indent=2).encode())


# A chunk is self-describing: besides its arrays (record.*, summary.*) and run_index it
# carries the fingerprint of its sweep, the sweep's run count and its run range, so a
# chunk is only ever used by the sweep that wrote it, with or without sweep.json.
_META_FINGERPRINT, _META_NUM_RUNS, _META_RUN_RANGE = "meta.fingerprint", "meta.num_runs", "meta.run_range"


def _save_chunk(chunk_dir: pathlib.Path, result: dict, fingerprint: str, num_runs: int) -> None:
    runs = result["run_index"]
    meta = {_META_FINGERPRINT: np.array(fingerprint), _META_NUM_RUNS: np.array(num_runs, np.int64),
            _META_RUN_RANGE: np.array([runs.min(), runs.max() + 1], np.int64)}
    _atomic_write(chunk_dir / f"runs-{int(runs[0]):09d}-{len(runs):07d}-{uuid.uuid4().hex[:8]}.npz",
                  lambda f: np.savez(f, **result, **meta))


def _chunk_paths(chunk_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted(chunk_dir.glob("runs-*.npz"))


class _DamagedChunk(Exception):
    """A chunk file that cannot be read, or whose contents contradict themselves."""


def _chunk_runs(path: pathlib.Path, sweep: Sweep, vouched: set | bool = frozenset()) -> np.ndarray:
    """The run indices held by the chunk file ``path``.

    ``vouched``: names of fingerprint-less chunks known to be this sweep's (or
    True: all of them), see :func:`_check_manifest`.

    Raises:
        ValueError: it is not a chunk of ``sweep`` (another fingerprint, or none).
        _DamagedChunk: it cannot be read (truncated, not an npz, ...) or its run range is inconsistent.
    """
    fingerprint, num_runs = sweep.fingerprint(), sweep.num_runs
    legacy = vouched is True or path.name in vouched
    try:
        with np.load(path, allow_pickle=False) as data:
            stored = str(data[_META_FINGERPRINT]) if _META_FINGERPRINT in data.files else None
            if stored == fingerprint:
                runs = np.asarray(data["run_index"])
                lo, hi = (int(x) for x in data[_META_RUN_RANGE])
                stored_runs = int(data[_META_NUM_RUNS])
            elif stored is None and legacy:
                runs = np.asarray(data["run_index"])
                stored, stored_runs = fingerprint, num_runs
                lo, hi = (int(runs.min()), int(runs.max()) + 1) if runs.size and runs.ndim == 1 else (0, 0)
    except Exception as e:  # BadZipFile, EOFError, "pickled data", zlib / CRC errors, a missing key, ...
        if "pickled" in str(e):  # NumPy took it for a pickle (and suggests loading it unsafely: never)
            raise _DamagedChunk("not an npz archive") from None
        raise _DamagedChunk(f"{type(e).__name__}: {e}") from None
    if stored is None:
        reason = "carries no fingerprint (written by an older jaxreplay, or not a chunk)"
    elif stored != fingerprint:
        reason = f"belongs to another sweep (fingerprint {stored[:12]}..., this sweep's is {fingerprint[:12]}...)"
    elif stored_runs != num_runs:
        reason = f"holds runs of a sweep of {stored_runs} runs, this one has {num_runs}"
    else:
        if (runs.ndim != 1 or runs.size == 0 or runs.dtype.kind not in "iu" or lo != runs.min()
                or hi != runs.max() + 1 or lo < 0 or hi > num_runs):
            raise _DamagedChunk(f"its run range [{lo}, {hi}) does not match its run indices")
        return runs
    raise ValueError(
        f"{path} {reason}. Results of two configs are never mixed: run into a new output directory, or "
        f"delete {path.parent.parent} to start over."
    )


def _set_aside(path: pathlib.Path, reason: str, quarantine: bool, warn: bool = True) -> None:
    """Handle the damaged chunk ``path``: rename it to ``*.npz.damaged`` (its runs are then recomputed) and
    warn, or, where nothing may be renamed, ValueError saying what to do."""
    if not quarantine:
        raise ValueError(f"{path} is damaged ({reason}): delete it (its runs are then recomputed) and rerun "
                         "from a writable folder.")
    damaged = path.with_name(path.name + ".damaged")
    os.replace(path, damaged)
    if warn:
        warnings.warn(f"{path} is damaged ({reason}): renamed to {damaged.name}; its runs are computed again.",
                      SweepWarning, stacklevel=3)


def _finished_runs(chunk_dir: pathlib.Path, sweep: Sweep, quarantine: bool = True, vouched: set | bool = frozenset(),
                   unfingerprinted: list | None = None) -> np.ndarray:
    """Which of the sweep's runs are in ``chunk_dir`` (every chunk checked to be this sweep's; a damaged one
    set aside, see :func:`_set_aside`). The names of the fingerprint-less chunks accepted (``vouched``) are
    appended to ``unfingerprinted``."""
    done = np.zeros(sweep.num_runs, bool)
    if not chunk_dir.is_dir():
        return done
    for path in _chunk_paths(chunk_dir):
        try:
            done[_chunk_runs(path, sweep, vouched)] = True
        except _DamagedChunk as e:
            _set_aside(path, str(e), quarantine)
            continue
        if unfingerprinted is not None and (vouched is True or path.name in vouched):
            with np.load(path, allow_pickle=False) as data:
                if _META_FINGERPRINT not in data.files:
                    unfingerprinted.append(path.name)
    return done


def _read_chunk(path: pathlib.Path, sweep: Sweep, quarantine: bool = True,
                vouched: set | bool = frozenset()) -> dict:
    """The arrays of one chunk of ``sweep`` (its ``meta.*`` entries left out).

    A chunk found damaged only now (a bad checksum in its data) is set aside
    and the sweep stops with a ValueError saying to rerun: its runs are then
    recomputed. Never are its contents used.
    """
    try:
        runs = _chunk_runs(path, sweep, vouched)  # (a chunk of another sweep: its ValueError goes through)
        try:
            with np.load(path, allow_pickle=False) as data:
                part = {k: data[k] for k in data.files if not k.startswith("meta.")}
        except Exception as e:  # BadZipFile("Bad CRC-32"), zlib errors, ...
            raise _DamagedChunk(f"{type(e).__name__}: {e}") from None
        bad = [k for k, v in part.items() if v.ndim == 0 or v.shape[0] != runs.size]
        if bad:
            raise _DamagedChunk(f"{bad[0]} does not hold {runs.size} runs")
        return part
    except _DamagedChunk as e:
        reason = str(e)
    _set_aside(path, reason, quarantine, warn=False)
    raise ValueError(f"{path} was found damaged while assembling the results ({reason}) and renamed to "
                     f"{path.name}.damaged: rerun the same sweep to recompute its runs.")


class _Assembler:
    """Fills ``[num_runs, ...]`` arrays from chunks of runs, one chunk at a time."""

    def __init__(self, num_runs: int):
        self.num_runs = num_runs
        self.arrays: dict[str, np.ndarray] = {}
        self.filled = np.zeros(num_runs, bool)

    def add(self, part: dict) -> None:
        idx = part["run_index"]
        for k, v in part.items():
            if k == "run_index":
                continue
            if k not in self.arrays:
                self.arrays[k] = np.zeros((self.num_runs,) + v.shape[1:], v.dtype)
            self.arrays[k][idx] = v
        self.filled[idx] = True

    def finish(self) -> dict[str, np.ndarray]:
        if not self.arrays:
            raise RuntimeError("no finished chunks to assemble")
        if not self.filled.all():
            raise RuntimeError(f"{int((~self.filled).sum())} runs missing after the sweep: a process failed; "
                               "rerun to finish.")
        return self.arrays


def _write_netcdf(dataset, f) -> None:
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
                self.fp.write(np.ascontiguousarray(flat[i:i + step], dtype=var.data.dtype).tobytes())
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


# ----------------------------------------------------------------------------
# Labeled results
# ----------------------------------------------------------------------------


def to_dataset(sweep: Sweep, arrays: Mapping[str, np.ndarray]):
    """Label flat per-run arrays (``record.*``/``summary.*``, leading axis R) as an ``xarray.Dataset``.

    Dims: each grid axis (or ``config`` for ``points``), then ``seed``, then
    the experiment's own dims (``record_dims``/``summary_dims``). Attributes:
    ``config`` (JSON of :meth:`Sweep.to_dict`), ``fingerprint``, ``versions``.
    """
    import xarray as xr

    exp, setup = sweep.exp, sweep.make_setup()
    if sweep.points is not None:
        lead_dims, lead_shape = (CONFIG_DIM,), (sweep.num_configs,)
        coords = {CONFIG_DIM: np.arange(sweep.num_configs, dtype=np.int32)}
        coords.update({k: (CONFIG_DIM, v) for k, v in sweep.configurations().items()})
    else:
        lead_dims, lead_shape = tuple(sweep.grid), tuple(len(v) for v in sweep.grid.values())
        coords = {k: np.array(v) for k, v in sweep.grid.items()}
    coords[SEED_DIM] = np.arange(sweep.seeds, dtype=np.int32)
    coords.update(exp.coords(setup))
    dims = {**{f"record.{k}": d for k, d in exp.record_dims(setup).items()},
            **{f"summary.{k}": d for k, d in exp.summary_dims(setup).items()}}
    data_vars = {}
    for key, value in arrays.items():
        name = key.split(".", 1)[1]
        if name in coords or name in sweep.exp.hyperparameters_type._fields:
            raise ValueError(f"{exp.name}: result {name!r} clashes with a coordinate or hyperparameter name.")
        own = tuple(dims[key])
        value = value.reshape(lead_shape + (sweep.seeds,) + value.shape[1:])
        data_vars[name] = (lead_dims + (SEED_DIM,) + own, value)
    # The first axis of a record is concatenated over segments; give coords only where lengths match.
    coords = {k: v for k, v in coords.items() if _fits(k, v, data_vars)}
    return xr.Dataset(
        data_vars, coords=coords,
        attrs={"experiment": sweep.experiment, "config": json.dumps(sweep.to_dict(), sort_keys=True),
               "fingerprint": sweep.fingerprint(), "versions": json.dumps(software_versions(), sort_keys=True)},
    )


def _fits(dim, value, data_vars) -> bool:
    if isinstance(value, tuple):  # a non-index coordinate (dim, values)
        return True
    for dims, arr in data_vars.values():
        if dim in dims and arr.shape[dims.index(dim)] != len(value):
            return False
    return True


def load(path: str | os.PathLike):
    """Open a sweep's ``results.nc`` (or its directory) as an ``xarray.Dataset`` (loaded into memory)."""
    import xarray as xr

    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "results.nc"
    with xr.open_dataset(path, engine="scipy") as ds:
        return ds.load()
