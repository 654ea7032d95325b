"""Experiments runnable by the sweep engine (:mod:`jaxreplay.engine.sweep`).

An experiment is an :class:`Experiment`: a small record of pure functions over
*one run*. The engine vmaps them over the run axis, shards that axis over
devices, and knows nothing else about the experiment. A run is split into
``num_segments(setup)`` segments so that long runs (DQN) are a host loop over
one compiled segment, with progress and memory that does not grow with the
run's length:

.. code-block:: text

    state = init(key, hparams, setup)                 # one run's full state
    for _ in range(num_segments(setup)):
        state, record = advance(state, hparams, setup)   # record: dict of arrays [L, ...]
    summary = summarize(state, hparams, setup)        # dict of arrays; "diverged": bool[]

The engine concatenates each record leaf over segments along its first axis
(named by ``record_dims``), so a run's curves have length ``L × num_segments``.

Contract:

* ``setup`` is a frozen (hashable) dataclass of static settings (shapes, code
  paths); ``hparams`` a NamedTuple of scalar hyperparameters, each traced:
  a sweep varies them without recompiling.
* ``check(hparams, setup)`` raises ``ValueError`` naming any *concrete*
  hyperparameter outside its range (it is called on the sweep's values, as
  NumPy arrays, before anything is compiled).
* All randomness of a run derives from its ``key``; nothing may depend on the
  run's position in a batch (results must be identical whatever the chunking).
* ``summarize`` returns ``"diverged"`` (``bool[]``): the run became non-finite (LineSearch: or its error
  outgrew ``linesearch.DIVERGED_GROWTH`` times its start, still finite).
"""

from __future__ import annotations

from jaxreplay import _extras  # noqa: E402

_extras.require("jaxreplay.experiments", "rl")


from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxreplay._typing import PyTree
from jaxreplay._validation import FieldError, check_scalar

_ABSENT = object()

COMPILER_OPTIONS_CPU = MappingProxyType({"xla_cpu_experimental_ynn_fusion_type": ""})
"""XLA options both experiments' programs are compiled with on the CPU (the engine does; so should a caller
that jits a ``run_batch`` itself and wants its bits): YNNPACK fusions off. From some batch size on XLA:CPU
hands a chunk's reductions to YNNPACK, which rounds them differently from XLA's own loops, so a run's result
depended on the batch it was computed in. LineSearch: from about 16 runs (aER's and pER's sums over the
memory) or 4,000 runs (ER's TD update, a dot of length 2 under ``vmap``). DQN: from 64 runs a chunk, its
mean TD loss and aER's ``adaptive_change_sum`` (measured here on a 2-core CPU: 80-run chunks against 8-run
ones; the weights, returns and capacities agreed). Without YNNPACK every batch size computes what a batch of
one does (measured: ``benchmarks/README.md``); a 10⁴-run LineSearch ER kernel is also faster (about 1.2×)."""


COMPILER_OPTIONS_GPU = MappingProxyType({"xla_gpu_autotune_level": 0})
"""XLA options both experiments' programs are compiled with on a GPU: no autotuning. XLA:GPU picks some
kernels (matrix products, fusions) by timing the candidates when it compiles, so two processes can compile
one program into kernels that round differently, and a DQN run's chaotic training turns the last bit into
another trajectory. Measured on one H200 (jax 0.11.2, 2026-11-28): Acrobot's fixed memory of 200,000 in two
stages of one DQN study, the same compiled program (fingerprint, chunk of 800, device) run in two processes,
differed in all 100 seeds, where MountainCar's pair, run in one process, agreed in all 100. Without
autotuning XLA takes its heuristics' kernels, a function of the program and the device, so a sweep resumed in
another process computes what an uninterrupted one does: ``python -m benchmarks.determinism`` checks that on a
GPU, and what it costs (on one H200, 2026-11-30: two processes agreed in all 128 runs of an Acrobot sweep;
``docs/design.md`` §4 has the cost)."""

COMPILER_OPTIONS = MappingProxyType({"cpu": COMPILER_OPTIONS_CPU, "gpu": COMPILER_OPTIONS_GPU})
"""Both experiments' :attr:`Experiment.compiler_options`: :data:`COMPILER_OPTIONS_CPU`, :data:`COMPILER_OPTIONS_GPU`."""


class Experiment(NamedTuple):
    """One experiment's functions, as the sweep engine uses them (see the module docstring).

    Attributes:
        name: registry name (``"linesearch"``, ``"dqn"``).
        setup_type: the frozen dataclass of static settings.
        hyperparameters_type: the NamedTuple of traced scalar hyperparameters
            (its defaults are the experiment's defaults).
        check: ``check(hparams, setup) -> None``; ValueError naming the field.
        init: ``init(key, hparams, setup) -> state`` for one run.
        advance: ``advance(state, hparams, setup) -> (state, record)``, one segment.
        summarize: ``summarize(state, hparams, setup) -> dict`` with ``"diverged"``.
        num_segments: ``num_segments(setup) -> int``.
        record_dims: ``record_dims(setup) -> {name: dims}``: names of each record
            leaf's axes (the first is concatenated over segments).
        summary_dims: ``summary_dims(setup) -> {name: dims}`` (``()`` for scalars).
        coords: ``coords(setup) -> {dim: values}``: coordinates of record/summary
            dims (e.g. the step number of each recorded point).
        added_defaults: ``{field: default}`` of ``Setup`` fields and
            hyperparameters added after sweeps were stored: a sweep's
            canonical config (and so its fingerprint and folder name) leaves
            such a field out while it holds this value, so a stored sweep of
            an older version keeps its fingerprint (the default computes what
            that version did).
        setup_groups: ``setup_groups(hparams, setup) -> (group, setups)`` or
            None: for concrete hyperparameters of shape ``[C]`` (one per
            configuration), the index ``group`` (``int[C]``) in ``setups`` of
            the static setup each configuration can be compiled with, and
            those setups. The engine then compiles one program per group, so
            a run does not pay for a static bound only others need (DQN: the
            update slots of the largest replay ratio). Each group's setup
            must give its runs the results ``setup`` gives them, with records
            and summaries of the same shapes. None: every run is compiled
            with ``setup``.
        compiler_options: ``{platform: {option: value}}``, XLA options the
            engine compiles the experiment's programs with on that platform
            (``jax.stages.Lowered.compile(compiler_options=...)``), recorded
            in each chunk's ``Batch``. For options a run's bits need, not for
            speed alone (:data:`COMPILER_OPTIONS`): XLA:CPU's YNNPACK fusions
            off, because from some batch size on XLA hands a chunk's reductions
            to YNNPACK, which rounds them differently, and a run's result would
            then depend on the chunk it was computed in; XLA:GPU's autotuning
            off, because it can pick other kernels in another process.
    """

    name: str
    setup_type: type
    hyperparameters_type: type
    # Callable[..., ]: each experiment takes its own Setup and Hyperparameters types; a state is a pytree.
    check: Callable[..., None]
    init: Callable[..., PyTree]
    advance: Callable[..., tuple[PyTree, dict]]
    summarize: Callable[..., dict]
    num_segments: Callable[..., int]
    record_dims: Callable[..., dict]
    summary_dims: Callable[..., dict]
    coords: Callable[..., dict]
    added_defaults: Mapping[str, Any] = MappingProxyType({})
    setup_groups: Callable[..., tuple[Any, tuple]] | None = None
    compiler_options: Mapping[str, Mapping[str, Any]] = MappingProxyType({})

    def compiler_options_on(self, platform: str) -> dict[str, Any]:
        """The XLA options (a new dict; empty where none) to compile the experiment's programs with on
        ``platform`` (``"cpu"``, ``"gpu"``, ...): what the engine passes to ``compile`` and records."""
        return dict(self.compiler_options.get(platform, {}))

    def without_added_defaults(self, table: Mapping[str, Any]) -> dict:
        """``table`` (``{field: value}`` of a setup or of hyperparameters) without the fields of
        :attr:`added_defaults` that hold their default (a NumPy scalar compares as its Python value, a
        bool only with a bool): what a stored config or result of an older version holds."""

        def added_default(name: str, value: Any) -> bool:
            value = value.item() if hasattr(value, "item") and getattr(value, "ndim", None) == 0 else value
            default = self.added_defaults.get(name, _ABSENT)
            return type(value) is type(default) and value == default

        return {k: v for k, v in table.items() if not added_default(k, v)}

    @property
    def hyperparameter_names(self) -> tuple[str, ...]:
        """The names of the traced hyperparameters, in order (the NamedTuple's fields)."""
        names: tuple[str, ...] = getattr(self.hyperparameters_type, "_fields")
        return names


def run_count(keys: Any, hparams: Any) -> int:
    """The number of runs ``R`` of a ``run_batch`` call, checked: ``keys`` must be ``[R]`` keys (typed keys of
    shape ``[R]``, or raw ``uint32[R, 2]`` ones) and every field of ``hparams`` a scalar (shared by the runs)
    or ``[R]``; else a :class:`~jaxreplay._validation.FieldError` naming ``keys`` or the field, before
    anything is traced (it was JAX's broadcasting error, naming neither, or an ``IndexError``)."""
    shape = np.shape(keys)
    typed = jax.dtypes.issubdtype(getattr(keys, "dtype", np.float32), jax.dtypes.prng_key)
    if len(shape) != (1 if typed else 2):
        expected = "[R]" if typed else "[R, 2] (raw uint32 keys)"
        raise FieldError(
            "keys", f"must hold one key per run, {expected} from jax.random.split(key, R), got shape {shape}."
        )
    for name, value in zip(type(hparams)._fields, hparams):
        if np.shape(value) not in ((), (shape[0],)):
            raise FieldError(
                name,
                f"must be a scalar (shared by the runs) or one value per run ([{shape[0]}], as keys), "
                f"got shape {np.shape(value)}.",
            )
    return int(shape[0])


def check_scalars(hparams: Any) -> None:
    """Refuse (:class:`~jaxreplay._validation.FieldError`, naming the field) a field of ``hparams`` that is not
    one number: a ``run`` is one run (a shape ``[2]`` memory size was refused as the buffer's ``capacity``)."""
    for name, value in zip(type(hparams)._fields, hparams):
        check_scalar(name, value)


def get(name: str) -> Experiment:
    """The registered :class:`Experiment` called ``name`` (ValueError listing the known ones)."""
    if name == "linesearch":
        from jaxreplay.experiments import linesearch

        return linesearch.EXPERIMENT
    if name == "dqn":
        from jaxreplay.experiments import dqn

        return dqn.EXPERIMENT
    raise ValueError(f"experiment must be one of {NAMES}, got {name!r}.")


NAMES = ("linesearch", "dqn")
"""The registered experiments, by the name a sweep's ``experiment`` key gives (see :func:`get`)."""
