"""Records on demand: what a sweep keeps of each run's per-step records, decided on the device.

A :class:`Record` names the records to keep (``keep``), a ``stride`` over
their first axis (steps for LineSearch, segments for DQN: point ``i`` is kept
when ``i % stride == 0``, exactly ``record[::stride]``), and optional
reductions over the seeds of each configuration (``reduce``: ``"mean"``,
``"q<p>"`` for the ``p``-quantile, ``0 <= p <= 1``, NumPy's default linear
interpolation; ``"nanmean"`` and ``"nanq<p>"``, the same over the seeds with
a value, as ``np.nanmean`` and ``np.nanquantile`` (a quantile whose position
is whole takes its order statistic where an infinite neighbour makes NumPy's
NaN, as ``"q<p>"`` does); ``"count"``, how many seeds have one). Summaries
(final metrics, ``diverged``) are always kept, per run.

Everything happens inside the compiled chunk program: the records are
selected and sliced per run (:func:`select`), and reduced per configuration
(:func:`reduce_seeds`) over the chunk's run axis, which the plan aligns to
whole configurations (all seeds of a configuration in one chunk), so a
reduction is exact and does not depend on the chunk size. Only what is kept
is copied to the host, saved and assembled. A reduced record has the dims
``(*configuration axes, "stat", *its own dims)``, with ``stat`` labeled by
the reductions' names; NaN propagates in ``"mean"`` and ``"q<p>"`` as in
``np.mean`` / ``np.quantile``. A NaN is a diverged run's in LineSearch, but
in DQN's records it is mostly a value not measured (``train_return`` of a
segment in which no episode ended, ``td_loss`` before the first gradient
step): reduce those with ``"nanmean"`` / ``"nanq<p>"`` and ``"count"``, or
one unmeasured seed makes the configuration's mean NaN. Reductions are
computed in float32 (an int32 record beyond 2**24, such as DQN's
``env_steps`` past 16.7 million steps, is rounded).

For an experiment of several segments (DQN), the program slices each
segment's ``L`` points with the stride, and the host copies only the
segments holding a kept point; this is ``[::stride]`` of the whole record when
``stride`` divides ``L`` or ``L`` divides ``stride`` (otherwise the plan refuses
it, naming ``record.stride``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxreplay import _validation

__all__ = ["Record", "STAT_DIM", "select", "reduce_seeds", "quantile_of", "segment_kept"]

STAT_DIM = "stat"
"""The dim of a reduced record that holds its reductions (coordinates: their names)."""
_KEYS = ("keep", "stride", "reduce")


@dataclasses.dataclass(frozen=True)
class Record:
    """What a sweep keeps of each run's records (see the module docstring).

    Attributes:
        keep: names of the records to keep (``None``: all of them; ``()``:
            none, summaries only). Names of summaries are accepted (they are
            always kept).
        stride: keep every ``stride``-th point of each record's first axis (>= 1).
        reduce: reductions over the seeds of each configuration, computed on
            the device: ``"mean"`` or ``"q<p>"`` (e.g. ``"q0.1"``), NaN where a
            seed is NaN; ``"nanmean"`` or ``"nanq<p>"``, over the seeds that are
            not NaN (NaN where none is); ``"count"``, the seeds that are not
            NaN; a single name or a sequence; ``()``: none (every run's record
            is kept).
    """

    keep: tuple[str, ...] | None = None
    stride: int = 1
    reduce: tuple[str, ...] = ()

    def __post_init__(self):
        keep, reduce = self.keep, self.reduce
        if keep is not None:
            if isinstance(keep, str):
                keep = (keep,)
            if not isinstance(keep, Sequence) or not all(isinstance(k, str) for k in keep):
                raise ValueError(f"record.keep must be a list of record names, got {self.keep!r}.")
            if len(set(keep)) != len(keep):
                raise ValueError(f"record.keep names a record twice: {list(keep)}.")
        if (
            isinstance(self.stride, bool)
            or not isinstance(self.stride, (int, np.integer))
            or not 1 <= self.stride <= _validation.INT32_MAX  # (it slices arrays: beyond int32 it failed in JAX)
        ):
            raise ValueError(
                f"record.stride must be a positive integer, got {self.stride!r} (at most {_validation.INT32_MAX})."
            )
        if isinstance(reduce, str):
            reduce = (reduce,)
        if not isinstance(reduce, Sequence) or not all(isinstance(r, str) for r in reduce):
            raise ValueError(f'record.reduce must be a list of reductions ("mean", "q0.1", ...), got {reduce!r}.')
        for name in reduce:
            if _reduction(name) is None:
                raise ValueError(
                    f'record.reduce: unknown reduction {name!r}; known: "mean" and "q<p>" with '
                    '0 <= p <= 1 (e.g. "q0.1", "q0.5"), "nanmean" and "nanq<p>" (skipping NaN), "count".'
                )
        if reduce and keep is not None and not keep:
            raise ValueError(
                "record.reduce reduces the kept records, but record.keep is empty: keep some, or drop reduce."
            )
        same = [_reduction(name) for name in reduce]  # ("q0.5" is "q0.50")
        if len(set(same)) != len(same):
            raise ValueError(f"record.reduce names a reduction twice: {list(reduce)}.")
        for name, value in (
            ("keep", None if keep is None else tuple(keep)),
            ("stride", int(self.stride)),
            ("reduce", tuple(reduce)),
        ):
            object.__setattr__(self, name, value)

    @classmethod
    def from_table(cls, table: Mapping) -> Record:
        """From the TOML ``[record]`` table (unknown keys are an error naming them)."""
        if not isinstance(table, Mapping):
            raise ValueError(f"record must be a table (keep, stride, reduce), got {table!r}.")
        unknown = sorted(set(table) - set(_KEYS))
        if unknown:
            raise ValueError(f"record.{unknown[0]}: unknown key; known: {', '.join(_KEYS)}.")
        return cls(**table)

    @property
    def is_default(self) -> bool:
        """Whether this keeps everything, per run (what a sweep did before records on demand)."""
        return self == Record()

    def to_table(self) -> dict:
        """The non-default entries, as a TOML/JSON table."""
        out: dict = {}
        if self.keep is not None:
            out["keep"] = list(self.keep)
        if self.stride != 1:
            out["stride"] = self.stride
        if self.reduce:
            out["reduce"] = list(self.reduce)
        return out

    def kept(self, records: Sequence[str]) -> tuple[str, ...]:
        """The names of ``records`` (the experiment's, in its order) this keeps."""
        return tuple(records) if self.keep is None else tuple(r for r in records if r in self.keep)

    def check_names(self, records: Sequence[str], summaries: Sequence[str], experiment: str) -> None:
        """ValueError naming ``record.keep`` for a name that is neither a record nor a summary of the experiment,
        and naming ``record.reduce`` when ``keep`` names summaries only (there is nothing to reduce)."""
        for name in self.keep or ():
            if name not in records and name not in summaries:
                raise ValueError(
                    f"record.keep: unknown record {name!r} of {experiment!r}; records: "
                    f"{', '.join(records)}; summaries (always kept): {', '.join(summaries)}."
                )
        if self.reduce and self.keep is not None and not self.kept(records):
            raise ValueError(
                f"record.reduce reduces the kept records, but record.keep names summaries only ({list(self.keep)}: "
                f"kept per run, never reduced): keep a record of {experiment!r} ({', '.join(records)}), or drop "
                "reduce."
            )


def _reduction(name: str) -> tuple[str, float | None] | None:
    """``(kind, p)`` of a reduction's name (kind ``"mean"``, ``"nanmean"``, ``"count"``, ``"q"`` or ``"nanq"``;
    ``p`` for the quantiles, else None), None for a name that is not one. Two names of one pair are one
    reduction (``"q0.5"`` and ``"q0.50"``)."""
    if name in ("mean", "nanmean", "count"):
        return name, None
    kind, rest = ("nanq", name[3:]) if name.startswith("nan") else ("q", name)
    p = quantile_of(rest)
    return None if p is None else (kind, p)


def quantile_of(name: str) -> float | None:
    """``p`` of a reduction ``"q<p>"`` (``0 <= p <= 1`` written as a decimal: ``q0.1``, ``q.5``, ``q1``), else None.

    (Python's ``float`` also reads ``" 0.5"``, ``"1e-1"`` and ``"0.1_0"``: such a name became a ``stat`` label that
    ``.sel(stat="q0.5")`` could not find.)"""
    if not re.fullmatch(r"q([0-9]+(\.[0-9]*)?|\.[0-9]+)", name):  # ASCII digits (\d takes "q０.５" too)
        return None
    p = float(name[1:])
    return p if 0.0 <= p <= 1.0 else None


def select(spec: Record, record: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """One run's kept records, each sliced ``[::stride]`` along its first axis (traced, per run)."""
    return {k: record[k][:: spec.stride] for k in spec.kept(tuple(record))}


def reduce_seeds(spec: Record, record: dict[str, jax.Array], seeds: int) -> dict[str, jax.Array]:
    """A chunk's records ``[runs, ...]`` reduced over seeds: ``[runs // seeds, len(spec.reduce), ...]``.

    The chunk holds whole configurations (runs ``c × seeds ... c × seeds + seeds - 1``
    are configuration ``c``'s seeds). Each configuration is reduced on its own,
    so the result does not depend on how many configurations share the chunk.
    """

    def one(x: jax.Array) -> jax.Array:
        x = x.reshape((x.shape[0] // seeds, seeds) + x.shape[1:])
        x = x.astype(jnp.result_type(x.dtype, jnp.float32))
        return jnp.stack([_reduce(x, name) for name in spec.reduce], axis=1)

    return {k: one(v) for k, v in record.items()}


def _reduce(x: jax.Array, name: str) -> jax.Array:
    """The reduction ``name`` (checked) of ``x`` [configurations, seeds, ...] over its seed axis."""
    kind, p = _reduction(name) or ("", None)
    counted = jnp.sum(~jnp.isnan(x), axis=1)
    if kind == "mean":
        # Divided by the count, which is the number of seeds wherever the mean is not NaN anyway: XLA turns a
        # division by a constant (jnp.mean's) into a product with its rounded reciprocal, which rounded a third of
        # the means an ulp away from NumPy's and from nanmean's (a probe).
        return jnp.sum(x, axis=1) / counted.astype(x.dtype)
    if kind == "nanmean":  # (NaN where no seed has a value, as np.nanmean)
        return jnp.sum(jnp.where(jnp.isnan(x), 0, x), axis=1) / counted.astype(x.dtype)
    if kind == "count":
        return counted.astype(x.dtype)
    assert p is not None, name
    if kind == "q":
        return _linear_quantile(x, p)
    return _nan_linear_quantile(x, p, counted)


def _nan_linear_quantile(x: jax.Array, p: float, counted: jax.Array) -> jax.Array:
    """NumPy's linear ``p``-quantile (``np.nanquantile``) over the seeds of ``x`` [configurations, seeds, ...]
    that are not NaN (``counted`` of them: NaN where none). As :func:`_linear_quantile`, with the position and
    its fraction computed in float64 for every count a configuration can have, then picked by its count."""
    n = x.shape[1]
    positions = [p * (k - 1) for k in range(1, n + 1)]
    low = jnp.asarray([math.floor(q) for q in positions], jnp.int32)[jnp.maximum(counted, 1) - 1]
    frac = jnp.asarray([q - math.floor(q) for q in positions], x.dtype)[jnp.maximum(counted, 1) - 1]
    rest = jnp.asarray([1.0 - (q - math.floor(q)) for q in positions], x.dtype)[jnp.maximum(counted, 1) - 1]
    ordered = jnp.sort(x, axis=1)  # (NaN sorts last: the first `counted` are the values)
    a = jnp.take_along_axis(ordered, low[:, None], axis=1)[:, 0]
    b = jnp.take_along_axis(ordered, jnp.minimum(low + 1, jnp.maximum(counted, 1) - 1)[:, None], axis=1)[:, 0]
    value = jnp.where(frac == 0, a, jnp.where(frac < 0.5, a + (b - a) * frac, b - (b - a) * rest))
    return jnp.where(counted == 0, jnp.nan, value)


def _linear_quantile(x: jax.Array, p: float) -> jax.Array:
    """NumPy's linear ``p``-quantile of ``x`` [configurations, seeds, ...] over its seed axis.

    The position ``p (n − 1)`` and its fraction are computed in Python's float64, as NumPy does (``jnp.quantile``
    computed them in the engine's float32: at p = 0.6 over 26 seeds the position 15 came out just above it, and a
    1e-6 share of the next seed's value was added: 9.5e21 where NumPy gives 0.5 when the next seed is 1e28); then
    NumPy's interpolation between the two order statistics, and NaN where a seed is NaN. A fraction of 0 takes the
    order statistic itself (an infinite neighbour does not make it NaN)."""
    counted = jnp.full(x.shape[:1] + x.shape[2:], x.shape[1])  # (every seed: the same formula as nanq's)
    return jnp.where(jnp.any(jnp.isnan(x), axis=1), jnp.nan, _nan_linear_quantile(x, p, counted))


def segment_kept(spec: Record, segment: int, points: int) -> bool:
    """Whether segment ``segment`` (of ``points`` record points each) holds a kept point at its start."""
    return (segment * points) % spec.stride == 0


def check_stride(spec: Record, points: int, num_segments: int) -> None:
    """ValueError naming ``record.stride`` where segments of ``points`` points cannot be sliced as ``[::stride]``."""
    if num_segments > 1 and points % spec.stride and spec.stride % points:
        raise ValueError(
            f"record.stride = {spec.stride}: each of the {num_segments} segments records {points} "
            "points; the stride must divide that or be a multiple of it."
        )
