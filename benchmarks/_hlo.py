"""Counting what one step of a compiled loop launches, from XLA's optimized HLO text.

Used by :mod:`benchmarks.roofline`. The input is ``compiled.as_text()`` of a
``jax.jit(f).lower(...).compile()``: the program after XLA's optimizations
(fusion, copy insertion, loop simplification), i.e. what the runtime executes.

Counting rules (per execution of a computation):

* Every top-level instruction of a computation is one **kernel** (on a GPU one
  launch: a fusion, a custom call such as a cuBLAS GEMM or a sort, a copy, a
  scatter; on the CPU one thunk), except bookkeeping that runs no code:
  ``parameter``, ``constant``, ``get-tuple-element``, ``tuple``, ``bitcast``,
  ``opt-barrier``, ``after-all``, ``add-dependency``, ``partition-id``,
  ``replica-id`` and the ``*-done`` half of an asynchronous pair. Instructions
  *inside* a fusion are not counted: the fusion is the kernel.
* A ``while`` costs, per iteration, its body and its condition, plus one
  **host sync** (on a GPU the runtime copies the loop predicate to the host and
  waits for it each iteration); its ``known_trip_count`` multiplies them. A
  loop with no known trip count is counted once and flagged.
* A ``conditional`` costs one host sync (the branch index is read on the host)
  plus its most expensive branch (an upper bound when branches differ).
* ``call`` (e.g. a GPU command buffer) costs its callee.

The **step loop** of a program that runs ``steps`` steps per call is the
outermost ``while`` whose trip count divides ``steps`` (XLA may unroll a loop
by a factor, dividing its trip count); per-step counts are that loop's
per-iteration counts times ``trip / steps``.
"""

from __future__ import annotations

import dataclasses
import re

# Instructions that launch nothing (see the module docstring).
FREE_OPCODES = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "opt-barrier", "after-all",
    "add-dependency", "partition-id", "replica-id", "domain",
})

_HEADER = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*\(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")
_TRIP = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"')


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    opcode: str
    attributes: str  # the text after the operand list (called computations, backend_config, ...)

    def called(self, key: str) -> str | None:
        match = re.search(rf"\b{key}=%?([^\s,}}]+)", self.attributes)
        return match.group(1) if match else None

    def branches(self) -> list[str]:
        match = re.search(r"branch_computations=\{([^}]*)\}", self.attributes)
        if match:
            return [b.strip().lstrip("%") for b in match.group(1).split(",") if b.strip()]
        return [b for b in (self.called("true_computation"), self.called("false_computation")) if b]

    @property
    def trip_count(self) -> int | None:
        match = _TRIP.search(self.attributes)
        return int(match.group(1)) if match else None


def _skip_shape(text: str) -> str:
    """``text`` after its leading shape: a tuple ``(...)`` (nested, with comments) or one token."""
    text = text.lstrip()
    if text.startswith("("):
        depth = 0
        for i, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return text[i + 1:]
        return ""
    return text.split(" ", 1)[1] if " " in text else ""


def _parse_instruction(line: str) -> Instruction | None:
    match = _INSTRUCTION.match(line)
    if not match:
        return None
    name, rest = match.groups()
    rest = _skip_shape(rest).lstrip()
    opcode = re.match(r"[\w\-]+", rest)
    if not opcode:
        return None
    # Attributes follow the operand list: skip the balanced parentheses after the opcode.
    tail = rest[opcode.end():]
    depth = 0
    for i, ch in enumerate(tail):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and ch == ")":
            tail = tail[i + 1:]
            break
    return Instruction(name, opcode.group(0), tail)


def parse(text: str) -> tuple[dict[str, list[Instruction]], str]:
    """``(computations, entry)``: each computation's instructions by name, and the entry's name."""
    computations: dict[str, list[Instruction]] = {}
    entry, current = "", None
    for line in text.splitlines():
        if current is None:
            match = _HEADER.match(line)
            if match:
                current = match.group(2)
                computations[current] = []
                if match.group(1):
                    entry = current
            continue
        if line.startswith("}"):
            current = None
            continue
        instruction = _parse_instruction(line)
        if instruction is not None:
            computations[current].append(instruction)
    return computations, entry


@dataclasses.dataclass(frozen=True)
class Counts:
    """What executing a computation once launches (see the module docstring)."""

    kernels: float = 0.0
    host_syncs: float = 0.0  # loop iterations and conditionals executed
    while_loops: int = 0  # while instructions (static, nested ones included)
    unknown_trips: int = 0  # loops counted once for want of a known trip count

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(self.kernels + other.kernels, self.host_syncs + other.host_syncs,
                      self.while_loops + other.while_loops, self.unknown_trips + other.unknown_trips)

    def scaled(self, factor: float) -> "Counts":
        """Dynamic counts times ``factor`` (static loop counts kept)."""
        return Counts(self.kernels * factor, self.host_syncs * factor, self.while_loops, self.unknown_trips)


class Program:
    """A parsed HLO module: per-execution counts of its computations."""

    def __init__(self, text: str):
        self.computations, self.entry = parse(text)
        self._memo: dict[str, Counts] = {}

    def counts(self, name: str | None = None) -> Counts:
        """What one execution of computation ``name`` (default: the entry) launches."""
        name = self.entry if name is None else name
        if name not in self._memo:
            total = Counts()
            for inst in self.computations[name]:
                total = total + self._instruction(inst)
            self._memo[name] = total
        return self._memo[name]

    def _instruction(self, inst: Instruction) -> Counts:
        if inst.opcode in FREE_OPCODES or inst.opcode.endswith("-done"):
            return Counts()
        if inst.opcode == "while":
            return self.loop_iteration(inst).scaled(inst.trip_count or 1) + Counts(
                while_loops=1, unknown_trips=int(inst.trip_count is None))
        if inst.opcode == "conditional":
            branches = [self.counts(b) for b in inst.branches()]
            worst = max(branches, key=lambda c: c.kernels, default=Counts())
            return Counts(worst.kernels, 1 + worst.host_syncs, sum(b.while_loops for b in branches),
                          sum(b.unknown_trips for b in branches))
        if inst.opcode == "call":
            callee = inst.called("to_apply")
            return self.counts(callee) if callee in self.computations else Counts(kernels=1)
        return Counts(kernels=1)

    def loop_iteration(self, loop: Instruction) -> Counts:
        """One iteration of ``loop``: its body, its condition and one host sync (static loop counts of the body)."""
        body = self.counts(loop.called("body"))
        cond = self.counts(loop.called("condition"))
        return Counts(body.kernels + cond.kernels, 1 + body.host_syncs + cond.host_syncs,
                      body.while_loops + cond.while_loops, body.unknown_trips + cond.unknown_trips)

    def loops(self, name: str | None = None, outermost_only: bool = True) -> list[Instruction]:
        """The ``while`` instructions reachable from ``name`` (default: the entry) outside any loop."""
        found = []
        for inst in self.computations[self.entry if name is None else name]:
            if inst.opcode == "while":
                found.append(inst)
                if not outermost_only:
                    found += self.loops(inst.called("body"), outermost_only)
            elif inst.opcode == "call" and inst.called("to_apply") in self.computations:
                found += self.loops(inst.called("to_apply"), outermost_only)
            elif inst.opcode == "conditional":
                for b in inst.branches():
                    found += self.loops(b, outermost_only)
        return found

    def step_counts(self, steps: int) -> Counts:
        """Per-step counts of the step loop of a program running ``steps`` steps per call (module docstring)."""
        loops = self.loops()
        candidates = [w for w in loops if w.trip_count and steps % w.trip_count == 0]
        if candidates:
            loop = max(candidates, key=lambda w: w.trip_count)
            return self.loop_iteration(loop).scaled(loop.trip_count / steps)
        unknown = [w for w in loops if w.trip_count is None]
        if unknown:
            # No stated trip count: take the costliest such loop, one iteration per step, and flag it.
            loop = max(unknown, key=lambda w: self.loop_iteration(w).kernels)
            return self.loop_iteration(loop) + Counts(unknown_trips=1)
        raise ValueError(f"no outermost while loop with a trip count dividing {steps} steps")


def step_counts(hlo_text: str, steps: int) -> Counts:
    """Per-step :class:`Counts` of the step loop in optimized HLO ``hlo_text`` (``steps`` steps per call)."""
    return Program(hlo_text).step_counts(steps)
