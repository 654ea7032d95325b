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

**Inter-kernel traffic** (per execution of a kernel; summed and scaled like the kernels):

* **written**: the bytes of the kernel's output (element count × element size, a tuple's elements
  summed), except an in-place update, which writes only the slice it updates: a ``dynamic-update-slice``
  counts its update operand, a ``scatter`` its updates operand(s), and a fusion whose root is one of
  them (through ``bitcast``; each element of a tuple root on its own) likewise.
* **read**: the bytes of each distinct operand that is not a constant (every other array is some
  kernel's output: of this iteration, of the previous one through the loop carry, or of the caller),
  except where the kernel provably touches only part of it: the buffer an in-place update writes into
  (operand 0 of a ``dynamic-update-slice``, the first operand(s) of a ``scatter``) is not read, and an
  operand used only as the source of ``gather``, ``dynamic-slice`` or ``slice`` is read as the slices
  taken (their output bytes). Inside a fusion the rule applies to each fused parameter by its uses
  there (through ``bitcast``); one use of any other kind reads the whole operand.

This is the traffic between kernels that XLA's "bytes accessed" hides by counting every gather and
in-place update as its whole array. It is a lower bound on what the kernels move (a kernel's own
temporaries are not counted) and an upper bound on what must reach memory (an array written and read
back at once may never leave the cache).

**Dots**: every ``dot`` and ``convolution`` executed, top-level or inside a fusion (a ``kind=kCustom``
YNNPACK fusion included: its fused computation holds the dot), keyed by :class:`Dot` (operand shapes,
dimension numbers, result type) or :class:`Convolution` (operand and result shapes, window, dimension
labels, group counts) and counted like the kernels (× trip counts, the costliest branch of a
conditional). :mod:`benchmarks.roofline` times each distinct one alone.

The **step loop** of a program that runs ``steps`` steps per call is the
outermost ``while`` whose trip count divides ``steps`` (XLA may unroll a loop
by a factor, dividing its trip count); per-step counts are that loop's
per-iteration counts times ``trip / steps``.
"""

from __future__ import annotations

import dataclasses
import math
import re

# Instructions that launch nothing (see the module docstring).
FREE_OPCODES = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "opt-barrier", "after-all",
    "add-dependency", "partition-id", "replica-id", "domain",
})

_HEADER = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*\(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")
_TRIP = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"')
_ARRAY = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]")
# Bits per element of HLO's primitive types (f8e4m3fn etc. are 8 bits: matched by their prefix).
_BITS = {"pred": 8, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "f16": 16, "bf16": 16,
         "s32": 32, "u32": 32, "f32": 32, "s64": 64, "u64": 64, "f64": 64, "c64": 64, "c128": 128}
# Ops that read only the slices they take from operand 0; ops that write in place into their first operand(s).
_SLICING = frozenset({"gather", "dynamic-slice", "slice"})
_IN_PLACE = frozenset({"dynamic-update-slice", "scatter"})


def shape_bytes(shape: str) -> float:
    """Bytes of an HLO shape such as ``f32[10000,2]{1,0}`` or a tuple of them (summed); tokens are 0 bytes."""
    total = 0.0
    for dtype, dims in _ARRAY.findall(shape):
        bits = _BITS.get(dtype, 8 if dtype.startswith("f8") else None)
        if bits is None:
            continue  # token[] and the like: no data
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * bits / 8
    return total


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    opcode: str
    attributes: str  # the text after the operand list (called computations, backend_config, ...)
    shape: str = ""  # the result's shape text, e.g. ``f32[4]{0}`` or a tuple ``(s32[], f32[4]{0})``
    operands: tuple[str, ...] = ()  # operand names, in order (constants' literal values give no name)

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
    name, text = match.groups()
    rest = _skip_shape(text).lstrip()
    shape = text[:len(text) - len(rest)].strip()
    opcode = re.match(r"[\w\-]+", rest)
    if not opcode:
        return None
    # Attributes follow the operand list: skip the balanced parentheses after the opcode.
    tail, operands = rest[opcode.end():], ""
    depth = 0
    for i, ch in enumerate(tail):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and ch == ")":
            tail, operands = tail[i + 1:], tail[tail.index("(") + 1:i]
            break
    # Each operand is ``%name`` (or ``shape %name``): its last token; a constant's literal is no name.
    names = tuple(token.split()[-1].lstrip("%") for token in _split_top(operands) if token.strip())
    return Instruction(name, opcode.group(0), tail, shape, names)


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside any brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


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
class Dot:
    """One ``dot`` as XLA runs it: operand shapes without layout (``f32[100,50,4]``), dimension numbers
    ``((lhs contracting, rhs contracting), (lhs batch, rhs batch))`` as ``lax.dot_general`` takes them,
    and the result's element type (``f32``)."""

    lhs: str
    rhs: str
    dimension_numbers: tuple[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]]
    dtype: str

    @staticmethod
    def dims(shape: str) -> tuple[str, tuple[int, ...]]:
        """``(element type, dimensions)`` of an array shape such as ``f32[100,4]{1,0}``."""
        dtype, dims = _ARRAY.findall(shape)[0]
        return dtype, tuple(int(d) for d in filter(None, dims.split(",")))

    @property
    def flops(self) -> float:
        """2 × batch × lhs free × rhs free × contracted elements: a multiply and an add per product."""
        (lc, rc), (lb, rb) = self.dimension_numbers
        lhs, rhs = self.dims(self.lhs)[1], self.dims(self.rhs)[1]
        free = lambda dims, *used: math.prod(d for i, d in enumerate(dims) if i not in used[0] + used[1])  # noqa: E731
        return 2.0 * math.prod(lhs[i] for i in lb) * math.prod(lhs[i] for i in lc) * free(lhs, lc, lb) * \
            free(rhs, rc, rb)


@dataclasses.dataclass(frozen=True)
class Convolution:
    """One ``convolution`` as XLA runs it: operand and result shapes without layout, the window and the
    dimension labels as HLO prints them (``size=3x3 stride=2x2 pad=0_1x0_1``, ``b01f_01io->b01f``), and the
    feature and batch group counts. Counted with the dots (a dot is a convolution without a window)."""

    lhs: str
    rhs: str
    result: str
    window: str
    dim_labels: str
    feature_groups: int = 1
    batch_groups: int = 1

    @property
    def dtype(self) -> str:
        return Dot.dims(self.result)[0]

    @property
    def flops(self) -> float:
        """2 × result elements × (kernel window × kernel input features): a multiply and an add per product."""
        kernel = self.dim_labels.split("->")[0].split("_")[1]
        rhs = Dot.dims(self.rhs)[1]
        per_output = math.prod(d for label, d in zip(kernel, rhs) if label != "o")  # window and input features
        return 2.0 * math.prod(Dot.dims(self.result)[1]) * per_output

    def window_list(self, key: str, default: tuple) -> tuple:
        """The window's ``key`` per spatial dimension (``pad`` as ``(low, high)`` pairs); ``default`` if absent."""
        match = re.search(rf"\b{key}=([\d_x-]+)", self.window)
        if not match:
            return default
        parts = match.group(1).split("x")
        return tuple(tuple(int(v) for v in p.split("_")) if key == "pad" else int(p) for p in parts)


# Each distinct dot or convolution with how many times it runs.
Products = tuple[tuple[Dot | Convolution, float], ...]


def _dimension_list(attributes: str, key: str) -> tuple[int, ...]:
    match = re.search(rf"\b{key}=\{{([\d,]*)\}}", attributes)
    return tuple(int(d) for d in filter(None, match.group(1).split(","))) if match else ()


def _merge(a: Products, b: Products) -> Products:
    """Two ``(dot, count)`` lists as one, counts of the same dot added (first-seen order)."""
    merged: dict[Dot | Convolution, float] = dict(a)
    for dot, count in b:
        merged[dot] = merged.get(dot, 0.0) + count
    return tuple(merged.items())


@dataclasses.dataclass(frozen=True)
class Counts:
    """What executing a computation once launches (see the module docstring)."""

    kernels: float = 0.0
    host_syncs: float = 0.0  # loop iterations and conditionals executed
    while_loops: int = 0  # while instructions (static, nested ones included)
    unknown_trips: int = 0  # loops counted once for want of a known trip count
    written: float = 0.0  # bytes the kernels write (inter-kernel traffic, module docstring)
    read: float = 0.0  # bytes the kernels read from arrays other than constants
    # Each distinct dot (or convolution) executed and how many times.
    dots: Products = ()

    @property
    def dot_count(self) -> float:
        """Dots (convolutions included) executed: the counts of :attr:`dots` summed."""
        return sum(count for _, count in self.dots)

    @property
    def traffic(self) -> float:
        """Inter-kernel traffic in bytes: written + read."""
        return self.written + self.read

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(self.kernels + other.kernels, self.host_syncs + other.host_syncs,
                      self.while_loops + other.while_loops, self.unknown_trips + other.unknown_trips,
                      self.written + other.written, self.read + other.read, _merge(self.dots, other.dots))

    def scaled(self, factor: float) -> "Counts":
        """Dynamic counts times ``factor`` (static loop counts kept)."""
        return Counts(self.kernels * factor, self.host_syncs * factor, self.while_loops, self.unknown_trips,
                      self.written * factor, self.read * factor,
                      tuple((dot, count * factor) for dot, count in self.dots))


class Program:
    """A parsed HLO module: per-execution counts of its computations."""

    def __init__(self, text: str):
        self.computations, self.entry = parse(text)
        self._memo: dict[str, Counts] = {}
        self._by_name = {c: {i.name: i for i in insts} for c, insts in self.computations.items()}
        self._users: dict[str, dict[str, list[tuple[Instruction, int]]]] = {}

    def counts(self, name: str | None = None) -> Counts:
        """What one execution of computation ``name`` (default: the entry) launches."""
        name = self.entry if name is None else name
        if name not in self._memo:
            total = Counts()
            for inst in self.computations[name]:
                total = total + self._instruction(inst, name)
            self._memo[name] = total
        return self._memo[name]

    def _instruction(self, inst: Instruction, computation: str) -> Counts:
        if inst.opcode in FREE_OPCODES or inst.opcode.endswith("-done"):
            return Counts()
        if inst.opcode == "while":
            return self.loop_iteration(inst).scaled(inst.trip_count or 1) + Counts(
                while_loops=1, unknown_trips=int(inst.trip_count is None))
        if inst.opcode == "conditional":
            branches = [self.counts(b) for b in inst.branches()]
            worst = max(branches, key=lambda c: c.kernels, default=Counts())
            # Each measure of its costliest branch: an upper bound when the branches differ.
            return Counts(worst.kernels, 1 + worst.host_syncs, sum(b.while_loops for b in branches),
                          sum(b.unknown_trips for b in branches), max((b.written for b in branches), default=0.0),
                          max((b.read for b in branches), default=0.0), worst.dots)
        if inst.opcode == "call" and inst.called("to_apply") in self.computations:
            return self.counts(inst.called("to_apply"))
        return Counts(kernels=1, written=self.written(inst, computation), read=self.read(inst, computation),
                      dots=self.dots_in(inst, computation))

    def dots_in(self, kernel: Instruction, computation: str) -> Products:
        """The dots one execution of ``kernel`` runs: itself if a ``dot`` or ``convolution``, those of a
        fusion's computation."""
        strip = lambda shape: re.sub(r"\{.*", "", shape)  # noqa: E731  (the layout does not key a dot)
        if kernel.opcode == "convolution" and len(kernel.operands) == 2:
            lhs, rhs = (self._by_name[computation].get(name) for name in kernel.operands)
            if lhs is None or rhs is None:
                return ()
            window = re.search(r"window=\{([^}]*)\}", kernel.attributes)
            labels = re.search(r"dim_labels=(\S+?)(?:,|$)", kernel.attributes)
            groups = [re.search(rf"{key}_group_count=(\d+)", kernel.attributes) for key in ("feature", "batch")]
            return ((Convolution(strip(lhs.shape), strip(rhs.shape), strip(kernel.shape),
                                 window.group(1) if window else "", labels.group(1) if labels else "",
                                 *(int(g.group(1)) if g else 1 for g in groups)), 1.0),)
        if kernel.opcode == "dot" and len(kernel.operands) == 2:
            lhs, rhs = (self._by_name[computation].get(name) for name in kernel.operands)
            if lhs is None or rhs is None:
                return ()
            dims = tuple(_dimension_list(kernel.attributes, f"{side}_{kind}_dims")
                         for kind in ("contracting", "batch") for side in ("lhs", "rhs"))
            return ((Dot(strip(lhs.shape), strip(rhs.shape), ((dims[0], dims[1]), (dims[2], dims[3])),
                         Dot.dims(kernel.shape)[0]), 1.0),)
        callee = kernel.called("calls") if kernel.opcode == "fusion" else None
        found: Products = ()
        if callee is None:
            return found
        for inst in self.computations.get(callee, []):
            found = _merge(found, self.dots_in(inst, callee))
        return found

    # Inter-kernel traffic of one kernel (module docstring)

    def _root(self, fusion: Instruction) -> tuple[str, Instruction] | None:
        """``(fused computation, its root)`` of a fusion; None when the callee is not in the module."""
        callee = fusion.called("calls")
        if callee not in self.computations or not self.computations[callee]:
            return None
        return callee, self.computations[callee][-1]  # the printer ends a computation with its ROOT

    def _operand(self, computation: str, inst: Instruction, i: int) -> Instruction | None:
        return self._by_name[computation].get(inst.operands[i]) if i < len(inst.operands) else None

    def _written_by(self, computation: str, inst: Instruction) -> float:
        """Bytes ``inst`` (a fusion's root, or a kernel itself) writes: in-place updates as their slice."""
        if inst.opcode == "tuple":
            return sum(self._written_by(computation, op) for op in self._operands(computation, inst))
        if inst.opcode == "bitcast" and (source := self._operand(computation, inst, 0)) is not None:
            return self._written_by(computation, source)
        if inst.opcode == "dynamic-update-slice" and (update := self._operand(computation, inst, 1)) is not None:
            return shape_bytes(update.shape)
        if inst.opcode == "scatter":
            buffers = max(1, len(_ARRAY.findall(inst.shape)))  # a variadic scatter: n buffers, indices, n updates
            return sum(shape_bytes(op.shape) for op in self._operands(computation, inst)[-buffers:])
        return shape_bytes(inst.shape)

    def _operands(self, computation: str, inst: Instruction) -> list[Instruction]:
        table = self._by_name[computation]
        return [table[name] for name in inst.operands if name in table]

    def written(self, kernel: Instruction, computation: str) -> float:
        """Bytes ``kernel`` (a top-level instruction of ``computation``) writes per execution (module docstring)."""
        root = self._root(kernel) if kernel.opcode == "fusion" else None
        if root is not None and (root[1].opcode in _IN_PLACE or root[1].opcode in ("tuple", "bitcast")):
            return self._written_by(*root)
        return self._written_by(computation, kernel)

    def read(self, kernel: Instruction, computation: str) -> float:
        """Bytes ``kernel`` (a top-level instruction of ``computation``) reads per execution (module docstring)."""
        fused = self._root(kernel) if kernel.opcode == "fusion" else None
        params = {}
        if fused is not None:
            params = {int(p.operands[0]): p for p in self.computations[fused[0]]
                      if p.opcode == "parameter" and p.operands and p.operands[0].isdigit()}
        total, seen = 0.0, set()
        for i, name in enumerate(kernel.operands):
            operand = self._by_name[computation].get(name)
            if operand is None or name in seen or self._is_constant(computation, operand):
                continue
            seen.add(name)
            full = shape_bytes(operand.shape)
            if fused is None:
                total += self._read_by_use(computation, kernel, i, full)
            elif i in params:
                total += self._read_through(fused[0], params[i], full)
            else:
                total += full
        return total

    def _is_constant(self, computation: str, inst: Instruction) -> bool:
        while inst.opcode == "bitcast" and (source := self._operand(computation, inst, 0)) is not None:
            inst = source
        return inst.opcode == "constant"

    def _read_by_use(self, computation: str, user: Instruction, position: int, full: float) -> float:
        """Bytes of a ``full``-byte operand that ``user`` reads as its operand ``position``."""
        if user.opcode in _SLICING and position == 0:
            return min(shape_bytes(user.shape), full)
        if user.opcode == "dynamic-update-slice" and position == 0:
            return 0.0  # the buffer updated in place
        if user.opcode == "scatter" and position < max(1, len(_ARRAY.findall(user.shape))):
            return 0.0
        if user.opcode == "bitcast":
            return self._read_through(computation, user, full)
        return full

    def _read_through(self, computation: str, inst: Instruction, full: float) -> float:
        """Bytes of a fused parameter (or a bitcast of one) that its uses in ``computation`` read."""
        if computation not in self._users:
            users: dict[str, list[tuple[Instruction, int]]] = {}
            for user in self.computations[computation]:
                for position, name in enumerate(user.operands):
                    users.setdefault(name, []).append((user, position))
            self._users[computation] = users
        if inst is self.computations[computation][-1]:
            return full  # the root itself: passed on whole
        total = sum(self._read_by_use(computation, user, position, full)
                    for user, position in self._users[computation].get(inst.name, []))
        return min(total, full)


    def loop_iteration(self, loop: Instruction) -> Counts:
        """One iteration of ``loop``: its body, its condition and one host sync (static loop counts of the body)."""
        body = self.counts(loop.called("body"))
        cond = self.counts(loop.called("condition"))
        return body + cond + Counts(host_syncs=1)

    def _callees(self, inst: Instruction) -> list[str]:
        """The computations of this module a control instruction runs: a ``while``'s body and condition, a
        ``conditional``'s branches, a ``call``'s callee; none for any other instruction (a fusion's computation
        is its kernel, not kernels of its own)."""
        if inst.opcode == "while":
            called = [inst.called("body"), inst.called("condition")]
        elif inst.opcode == "conditional":
            called = list(inst.branches())
        elif inst.opcode == "call":
            called = [inst.called("to_apply")]
        else:
            return []
        return [c for c in called if c in self.computations]

    def loops(self, name: str | None = None) -> list[Instruction]:
        """The outermost ``while`` instructions reachable from ``name`` (default: the entry): those outside any
        loop, found through the branches and calls around them."""
        found = []
        for inst in self.computations[self.entry if name is None else name]:
            if inst.opcode == "while":
                found.append(inst)
            else:
                for callee in self._callees(inst):
                    found += self.loops(callee)
        return found

    def kernels(self, name: str | None = None) -> dict[str, str]:
        """``{instruction: opcode}`` of every kernel computation ``name`` (default: the entry) can execute: its
        top-level instructions that launch (module docstring) and those of the loops, branches and calls in it,
        not the ``while``, ``conditional`` or ``call`` themselves (their time is their kernels')."""
        found: dict[str, str] = {}
        for inst in self.computations[self.entry if name is None else name]:
            callees = self._callees(inst)
            for callee in callees:
                found.update(self.kernels(callee))
            launches = inst.opcode not in FREE_OPCODES and not inst.opcode.endswith("-done")
            if not callees and launches and inst.opcode not in ("while", "conditional"):
                found[inst.name] = inst.opcode
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
