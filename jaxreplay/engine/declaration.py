"""A sweep's declaration: what it runs, read from TOML and checked before anything runs.

A :class:`Sweep` declares an experiment (:mod:`jaxreplay.experiments`), its
static ``setup``, hyperparameters ``fixed`` for the whole sweep, and either a
``grid`` (cartesian product of axes, in the order given) or an explicit list of
``points``, times ``seeds`` seeds. Configurations × seeds are one run axis
(run r: configuration r // seeds, seed r % seeds). Constructing it validates
and normalises every field (ValueError naming the key, e.g. ``grid.memory_size``),
and runs the experiment's own range checks on every configuration, so a sweep
that exists can be run. Its canonical config (:meth:`Sweep.to_dict`) and that
config's :meth:`~Sweep.fingerprint` say exactly which results it gives.

:meth:`Sweep.from_toml` reads a TOML file (``examples/``); its optional
``[run]`` table holds execution options only (:func:`run_options`).
Running it is :func:`jaxreplay.engine.runner.run`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxreplay import _files, _validation, experiments
from jaxreplay._validation import FieldError
from jaxreplay.engine.plan import check_run_options
from jaxreplay.engine.records import Record

__all__ = ["Sweep", "run_options"]

_CHECK_BLOCK = 1 << 20  # configurations checked at once when a Sweep is made (about 100 MB of arrays)
MAX_CONFIGS = _validation.INT32_MAX
"""The most configurations a sweep may have (``points``' ``config`` coordinate is int32). A grid of 6 axes of 40
values (4.1e9 configurations) spent hours checking each one before the plan refused it for memory (a probe). A
sweep of many seeds is refused by the plan, which knows the host's memory, before anything of its size is made."""
_TOP_LEVEL_KEYS = ("experiment", "seeds", "seed", "setup", "fixed", "grid", "points", "record", "run")
_RUN_OPTIONS = ("chunk_size", "memory_fraction", "memory_budget", "group_by_setup")


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
        record: what is kept of each run's records (:class:`Record`, or its
            table ``{keep, stride, reduce}``; default: everything, per run).
            Summaries are always kept.
    """

    experiment: str
    seeds: int = 1
    seed: int = 0
    setup: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    grid: Mapping[str, Sequence[Any]] = dataclasses.field(default_factory=dict)
    points: Sequence[Mapping[str, Any]] | None = None
    # Given as a Record, its table or None; always a Record once constructed (the annotation is the
    # normalised type, which every reader relies on).
    record: Record = Record()

    def __post_init__(self):
        # Normalise, then freeze: every field is replaced once by its canonical value, computed by a
        # pure function of the fields as given (see _normalised). Sweep(...) call sites and
        # dataclasses.replace keep working, and no Sweep is ever seen in a non-canonical form.
        for name, value in _normalised(self).items():
            object.__setattr__(self, name, value)
        # The experiment's own range checks, on every configuration, before compiling (one run per
        # configuration: the seeds share their hyperparameters), a block of configurations at a time:
        # arrays of a whole huge grid could themselves exhaust the host's memory.
        if self.num_configs > MAX_CONFIGS:  # (before the checks below, which take about 3 s per 10^6 of them)
            raise ValueError(
                f"the sweep has {self.num_configs} configurations, more than a sweep may have ({MAX_CONFIGS}, "
                "which the engine numbers as int32): use a smaller grid, or split the sweep."
            )
        exp, setup_obj = self.exp, self.make_setup()
        for start in range(0, self.num_configs, _CHECK_BLOCK):
            configs = range(start, min(start + _CHECK_BLOCK, self.num_configs))
            try:
                exp.check(
                    self.hyperparameters(np.arange(configs.start, configs.stop, dtype=np.int64) * self.seeds), setup_obj
                )
            except ValueError as error:
                raise ValueError(self._locate(error, setup_obj, configs)) from None

    def _locate(self, error: ValueError, setup_obj, configs: range) -> str:
        """``error`` (from the experiment's check of the configurations ``configs``) said of the one
        configuration it is about, prefixed with where its value came from: ``grid.k = v``,
        ``points[i].k = v``, ``fixed.k = v`` or the default."""
        exp = self.exp
        for config in configs:
            one_config = type(hp := self.hyperparameters(np.array([config * self.seeds])))(*(x[0] for x in hp))
            try:
                exp.check(one_config, setup_obj)
            except ValueError as one:
                message = str(one)
                # (a rule over several fields, e.g. DQN's adaptive_interval against a Setup value, still
                # raises a plain ValueError that begins with the field it refuses)
                field = one.field if isinstance(one, FieldError) else message.split(" ", 1)[0]
                if field not in exp.hyperparameter_names:
                    return message
                ran = getattr(one_config, field)
                value = _validation.number_text(ran)
                if self.points is not None and field in self.points[config]:
                    where = f"points[{config}].{field} = {_as_declared(value, ran, [self.points[config][field]])}"
                elif field in self.grid:
                    where = f"grid.{field} = {_as_declared(value, ran, self.grid[field])}"
                elif field in self.fixed:
                    where = f"fixed.{field} = {_as_declared(value, ran, [self.fixed[field]])}"
                else:
                    where = f"{field} = {value} (its default; set it in [fixed] or [grid])"
                return f"{where}: {message}"
        return str(error)

    # -- construction from files ------------------------------------------------

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "Sweep":
        """A sweep from a TOML-shaped dict (unknown top-level keys are an error; ``run`` is ignored)."""
        unknown = sorted(set(config) - set(_TOP_LEVEL_KEYS))
        if unknown:
            raise ValueError(
                f"unknown key {unknown[0]!r} in the sweep config; known keys: {', '.join(_TOP_LEVEL_KEYS)}."
            )
        if "experiment" not in config:
            raise ValueError("experiment: missing; name one of " + ", ".join(experiments.NAMES) + ".")
        kwargs = {k: v for k, v in config.items() if k != "run"}
        return cls(**kwargs)

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> "Sweep":
        """Read a sweep from a TOML file (see ``examples/`` and :func:`run_options`)."""
        return cls.from_dict(parse_toml(_files.read_text(path, "the sweep config"), f"the sweep config {path}"))

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
        for name in exp.hyperparameter_names:
            dtype = np.int32 if _is_int_field(defaults, name) else np.float32
            if name in varied:
                fields[name] = varied[name].astype(dtype)
            else:
                fields[name] = np.full(runs.shape, self.fixed.get(name, getattr(defaults, name)), dtype=dtype)
        return exp.hyperparameters_type(**fields)

    def unset_hyperparameters(self) -> dict[str, Any]:
        """``{name: value}``, sorted by name: the hyperparameters the sweep does not set (neither ``fixed`` nor an
        axis), at the experiment's defaults, which every run of this jaxreplay takes. Not in the fingerprint (a
        sweep's config is what it sets); the engine records them with a folder's runs, so that a jaxreplay whose
        defaults changed does not finish the folder with other values."""
        defaults = self.exp.hyperparameters_type()
        unset = set(self.exp.hyperparameter_names) - set(self.fixed) - set(self.axes)
        return {name: _plain(np.asarray(getattr(defaults, name)).item()) for name in sorted(unset)}

    def to_dict(self) -> dict:
        """The canonical config (what determines the results), JSON-serialisable."""
        out = {
            "experiment": self.experiment,
            "seeds": int(self.seeds),
            "seed": int(self.seed),
            "setup": {k: _plain(v) for k, v in self.exp.without_added_defaults(self.setup).items()},
            "fixed": {k: _plain(v) for k, v in self.exp.without_added_defaults(self.fixed).items()},
        }
        if self.points is not None:
            out["points"] = [{k: _plain(v) for k, v in p.items()} for p in self.points]
        else:
            out["grid"] = {k: [_plain(x) for x in v] for k, v in self.grid.items()}
        if not self.record.is_default:  # (left out by default: a sweep's config and fingerprint as before)
            out["record"] = self.record.to_table()
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
        for table in ("setup", "fixed", "grid", "record"):
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
        (their order changes nothing). A non-default :class:`Record` is part of
        it: the chunks hold only what it keeps (strided, or reduced over
        seeds), so a sweep resumed with another record spec could not reuse
        them; the default is left out, so sweeps that keep everything have the
        fingerprint they always had.
        """
        return self.fingerprint_of(self.to_dict())

    @staticmethod
    def fingerprint_of(config: Mapping[str, Any]) -> str:
        """The fingerprint of a canonical config (:meth:`to_dict`'s, or that dict read back from JSON).

        Pure, so a stored config (``sweep.json``) can be checked against its
        stored fingerprint without constructing a sweep.
        """
        payload = dict(config)
        if isinstance(payload.get("grid"), Mapping):  # a list of [axis, values] pairs: sort_keys cannot reorder it
            payload["grid"] = [[k, v] for k, v in payload["grid"].items()]
        payload["run_layout"] = "run r: configuration r // seeds (C order over the grid axes), seed r % seeds"
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _normalised(given: Sweep) -> dict[str, Any]:
    """The canonical value of each field of ``given`` (as constructed), or ValueError naming the key.

    Pure: reads ``given``'s fields, returns new values. ``setup`` becomes the
    table of every field of the experiment's ``Setup`` (a table and an
    instance with the same settings are then one sweep, one fingerprint, and a
    later change of a default cannot change what a stored sweep's config
    means); ``fixed`` and ``grid`` values are checked numbers (grid values a
    tuple); ``points`` a tuple of tables in ``points[0]``'s key order.
    """
    try:
        exp = experiments.get(given.experiment)
    except ValueError as e:
        raise ValueError(f"experiment: {e}") from None
    for name, low, high in (("seeds", 1, _validation.INT32_MAX), ("seed", 0, 2**32 - 1)):  # seed: a uint32 key
        value = getattr(given, name)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
            raise _validation.FieldError(name, f"must be an integer in [{low}, {high}], got {value!r}.")
    setup = _fields_of(given.setup) if isinstance(given.setup, exp.setup_type) else given.setup
    for name, value in (("setup", setup), ("fixed", given.fixed), ("grid", given.grid)):
        if not isinstance(value, Mapping):
            raise ValueError(f"{name} must be a table (mapping), got {type(value).__name__}.")
    setup = {k: _check_setup_value(exp, k, v) for k, v in setup.items()}
    fixed = {k: _check_hparam(exp, f"fixed.{k}", k, v) for k, v in given.fixed.items()}
    grid = {}
    for k, values in given.grid.items():
        if isinstance(values, np.ndarray) and values.ndim == 1:  # (the usual grid in Python: np.linspace, ...)
            values = list(values)
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise ValueError(f"grid.{k} must be a list of values, got {values!r}.")
        if len(values) == 0:
            raise ValueError(f"grid.{k} is empty: give at least one value.")
        checked = tuple(_check_hparam(exp, f"grid.{k}", k, v) for v in values)
        if len(set(checked)) != len(checked):
            raise ValueError(f"grid.{k} has repeated values {list(values)}: each grid value must be distinct.")
        twins = _float32_twins([(v,) for v in checked])
        if twins:
            (a,), (b,) = twins
            raise ValueError(
                f"grid.{k} has values {a!r} and {b!r}, which are one float32: both would run as "
                f"{float(np.float32(a))!r}, one configuration under two labels; {_DISTINCT_FLOAT32}"
            )
        if k in fixed:
            raise ValueError(f"grid.{k}: {k!r} is also in fixed; a hyperparameter is either fixed or a grid axis.")
        grid[k] = checked
    points = given.points
    if points is not None:
        if grid:
            raise ValueError("points: give either grid or points, not both.")
        if isinstance(points, (str, bytes, Mapping)) or not isinstance(points, Sequence) or not points:
            raise ValueError("points must be a non-empty list of tables {hyperparameter: value}.")
        keys = None
        checked_points = []
        for i, point in enumerate(points):
            if not isinstance(point, Mapping):
                raise ValueError(f"points[{i}] must be a table, got {point!r}.")
            if keys is None:
                keys = tuple(point)
            if set(point) != set(keys):  # the same keys in another order are the same point
                missing, extra = sorted(set(keys) - set(point)), sorted(set(point) - set(keys))
                raise ValueError(
                    f"points[{i}] sets {sorted(point)}, points[0] sets {sorted(keys)} ("
                    + "; ".join(([f"missing {missing}"] if missing else []) + ([f"extra {extra}"] if extra else []))
                    + "): every point must set the same hyperparameters."
                )
            for k in point:
                if k in fixed:
                    raise ValueError(f"points[{i}].{k}: {k!r} is also in fixed.")
            # In points[0]'s key order (the order of the dataset's coordinates).
            checked_points.append({k: _check_hparam(exp, f"points[{i}].{k}", k, point[k]) for k in keys})
        _check_distinct_points(checked_points)
        points = tuple(checked_points)
    try:
        setup_obj = exp.setup_type(**setup)
    except (ValueError, TypeError) as e:
        message = str(e)  # already named "setup.<key>..." (e.g. setup.env_params.gravity): not twice
        raise ValueError(message if message.startswith("setup.") else f"setup: {message}") from None
    record = given.record
    if record is None:
        record = Record()
    elif isinstance(record, Mapping):
        record = Record.from_table(record)
    elif not isinstance(record, Record):
        raise ValueError(f"record must be a Record or a table (keep, stride, reduce), got {record!r}.")
    records, summaries = tuple(exp.record_dims(setup_obj)), tuple(exp.summary_dims(setup_obj))
    record.check_names(records, summaries, exp.name)
    record = _keep_in_order(record, records + summaries)
    return {"setup": _fields_of(setup_obj), "fixed": fixed, "grid": grid, "points": points, "record": record}


def _keep_in_order(record: Record, names: tuple[str, ...]) -> Record:
    """``record`` with ``keep`` in the order of ``names`` (the experiment's records, then its summaries), the
    order they are kept in: the order a user types them in does not make another sweep. (A folder written
    before, 2026-11-28, with another order keeps its fingerprint: ``engine.store`` finishes it.)"""
    if record.keep is None:
        return record
    return dataclasses.replace(record, keep=tuple(sorted(record.keep, key=names.index)))


_DISTINCT_FLOAT32 = "keep one, or make them differ by more than float32's precision (about 7 significant digits)."


def _check_distinct_points(points: Sequence[dict]) -> None:
    """ValueError naming two ``[[points]]`` that are one configuration: equal as given (1 and 1.0 too), or once
    their floats are float32 (either would run as a second configuration under a label of the first)."""
    seen: dict[tuple, int] = {}
    for j, p in enumerate(points):
        i = seen.setdefault(tuple(p.values()), j)
        if i != j:
            raise ValueError(
                f"points[{i}] and points[{j}] are the same configuration {p}: each point must be distinct "
                "(a repeat would run as a second configuration under the same label)."
            )
    twins = _float32_twins([tuple(p.values()) for p in points])
    if twins:
        i, j = (next(n for n, p in enumerate(points) if tuple(p.values()) == t) for t in twins)
        raise ValueError(
            f"points[{i}] {points[i]} and points[{j}] {points[j]} are one configuration in "
            f"float32: they would run as one under two labels; {_DISTINCT_FLOAT32}"
        )


def _float32_twins(configs: Sequence[tuple]) -> tuple[tuple, tuple] | None:
    """The first two configurations (tuples of checked values) that differ as given but are equal once their
    floats are cast to float32, the dtype they run in (None if there are none)."""
    first_of: dict[tuple, tuple] = {}
    for config in configs:
        cast = tuple(float(np.float32(v)) if isinstance(v, float) else v for v in config)
        if first_of.setdefault(cast, config) != config:
            return first_of[cast], config
    return None


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


def parse_toml(text: str, name: str) -> dict:
    """``text`` read as TOML; a ``ValueError`` naming ``name`` (``"CONFIG path"``) where it is not TOML, or
    naming the key where it holds an integer beyond TOML's 64 bits (tomllib reads any size: 10**400 then
    failed as an OverflowError deep in a check)."""
    # A byte-order mark (as some Windows editors save UTF-8) is no content: TOML's grammar has no place for it,
    # and tomllib's "Invalid statement (at line 1, column 1)" did not say what was there (a probe).
    text = text.removeprefix("\ufeff")
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{name} is not valid TOML: {e}") from None

    def check(value, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                check(item, f"{where}.{key}" if where else key)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                check(item, f"{where}[{i}]")
        elif isinstance(value, int) and not -(2**63) <= value < 2**63:
            digits = str(abs(value))
            raise ValueError(
                f"{where} = {'-' * (value < 0)}{digits[:6]}... ({len(digits)} digits) is beyond TOML's 64-bit "
                f"integers, and beyond anything jaxreplay can run ({name})."
            )

    check(config, "")
    return config


def _is_int_field(defaults, name) -> bool:
    value = getattr(defaults, name)
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_hparam(exp, where: str, name: str, value):
    fields = exp.hyperparameter_names
    if name not in fields:
        raise ValueError(f"{where}: unknown hyperparameter of {exp.name!r}; known: {', '.join(fields)}.")
    if isinstance(value, np.ndarray) and value.ndim == 0:  # (a 0-d array is one number, as NumPy scalars are)
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise FieldError(where, f"must be a number, got {value!r} ({type(value).__name__}).")
    whole = isinstance(value, (int, np.integer))  # (a Python int may be beyond float64: not converted)
    if _is_int_field(exp.hyperparameters_type(), name):
        if not whole and (not math.isfinite(value) or value != int(value)):
            raise FieldError(where, f"must be an integer, got {value!r}.")
        if not -_validation.INT32_MAX - 1 <= int(value) <= _validation.INT32_MAX:  # traced as int32
            raise FieldError(where, f"does not fit an int32 (at most {_validation.INT32_MAX}).", int(value))
        return int(value)
    if not whole and not math.isfinite(value):
        raise FieldError(where, f"must be finite, got {value!r}.")
    problem = _validation.float32_problem(value)  # traced as float32: inf, or 0 under another label
    if problem:
        raise FieldError(where, f"{problem}.", value)
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
        raise ValueError(
            f"setup.{name} must be of type {type(default).__name__} (like its default {default!r}), "
            f"got {value!r} ({type(value).__name__})."
        )
    if isinstance(default, int) and not isinstance(default, bool) and abs(int(value)) > _validation.INT32_MAX:
        raise ValueError(
            f"setup.{name} = {int(value)} does not fit an int32 (at most {_validation.INT32_MAX}): it sets an "
            "array shape or an index."
        )
    # A table of named parameters (e.g. DQN's env_params): traced numbers, so each value must be one.
    pairs = (
        value.items()
        if isinstance(value, dict)
        else (
            value
            if isinstance(value, tuple)
            and value
            and all(isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) for p in value)
            else ()
        )
    )
    for key, item in pairs:
        if isinstance(item, str) or not isinstance(item, (bool, int, float, np.integer, np.floating)):
            raise ValueError(f"setup.{name}.{key} must be a number, got {item!r} ({type(item).__name__}).")
    if isinstance(default, float):
        problem = _validation.float32_problem(value)  # a float32 constant in the compiled program (10**400 too)
        if problem:
            raise FieldError(f"setup.{name}", f"{problem}.", value)
        return float(value)
    return value


def run_options(config: Mapping[str, Any]) -> dict:
    """The optional ``[run]`` table of a TOML config (execution only: results do not depend on it).

    Checked here, naming the key: ``chunk_size`` a positive integer,
    ``memory_fraction`` a number in (0, 1], ``memory_budget`` a positive
    finite number of bytes, ``group_by_setup`` true (default: one program per
    group of runs needing the same static setup, e.g. DQN's update slots per
    replay ratio) or false (one program for all).
    """
    run = config.get("run", {})
    if not isinstance(run, Mapping):
        raise ValueError(f"run must be a table of run options ({', '.join(_RUN_OPTIONS)}), got {run!r}.")
    options = dict(run)
    unknown = sorted(set(options) - set(_RUN_OPTIONS))
    if unknown:
        raise ValueError(f"run.{unknown[0]}: unknown run option; known: {', '.join(_RUN_OPTIONS)}.")
    check_run_options("run.", **options)
    return options


def _as_declared(text: str, ran: np.ndarray, declared: Sequence[Any]) -> str:
    """``text`` (the value a run used, as :func:`~jaxreplay._validation.number_text` writes it), or the declared
    value it came from where the cast to float32 changed it: ``0.99999999 (runs as 1.0, a float32)``."""
    for given in declared:
        if isinstance(given, float) and np.float32(given) == ran and repr(given) != text:
            return f"{given!r} (runs as {text}, a float32)"
    return text
