"""The project's benchmarks: ``python -m benchmarks [--quick|--full] [--only NAME] [--out FILE.md]``.

Each benchmark is a module of this package listed in :data:`BENCHMARKS`. It
exposes ``TITLE`` (a heading) and ``run(mode, progress) -> str``: ``mode`` is
``"quick"`` (minutes on a laptop-class CPU) or ``"full"``; ``progress`` takes
one-line progress messages (printed to stderr); the return value is the
benchmark's markdown section. A module may also fill a list ``HEADLINES`` of
``(quantity, measured, target)`` string triples during ``run``; they are
gathered into the one summary table of ratios at the top of the report, and a
list ``README`` of markdown blocks that ``--readme`` adds under that summary
(the roofline table). :mod:`benchmarks.__main__` runs the selected
ones and writes one markdown document headed by the machine description
(:func:`benchmarks._timing.machine_markdown`). Shared timing rules live in
:mod:`benchmarks._timing`.

Performance is measured here, never in ``tests/``.
"""

# name -> module (imported lazily, so one benchmark's optional dependencies
# do not stop another from running).
BENCHMARKS: dict[str, str] = {
    "buffer": "benchmarks.buffer",
    "priority_structure": "benchmarks.priority_structure",
    "sweep": "benchmarks.sweep",
    "dqn": "benchmarks.dqn",
    "dqn_nstep_ratio": "benchmarks.dqn_nstep_ratio",
    "minatar": "benchmarks.minatar",
    "roofline": "benchmarks.roofline",
    "theory": "benchmarks.theory",
    "xla_flags": "benchmarks.xla_flags",
    "cpu_batch_flags": "benchmarks.cpu_batch_flags",
    "cpu_devices": "benchmarks.cpu_devices",
}
