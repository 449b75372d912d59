"""Rendering one function of a model as text: pointer definitions for views, fused
elementwise groups, kernel calls, native for/if/while. The renderer walks the lowered
instructions; the primitive table's hooks say how each op is written, and the `Target`
(target.py) writes every piece that differs between machines; it never knows a specific
op or machine itself."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from ..ir.graph import Block, IRError, Value, walk_ops
from ..ir.origins import Origins
from ..ir.shapes import Dim, contiguous_strides, numel
from ..ops.entry import entry
from .cexpr import DimNames, c_string
from .control_flow import early_conditions, render_structured, streams
from .concurrent import run_concurrently
from .kernels import open_streams
from .lower import (Concurrent, Copy, Fused, Kernel, Layout, Lowering, Structured, View,
                    root)
from .pack import find_packs
from .plan import Plan, plan, size_bytes
from .products import Products, group_products
from .profile import Site, describe, timed
from .states import update_in_place
from .target import Target


@dataclass
class Access:
    """How a function reaches a value it does not compute: a C++ pointer expression,
    its layout, and whether the memory outlives the call (parameters do, inputs not)."""
    pointer: str
    layout: Layout
    persistent: bool = True


@dataclass
class FunctionSpec:
    name: str
    block: Block
    external: dict[int, Access]            # value id -> how to reach it
    results: list[tuple[Value, str]]       # (value, C++ lvalue receiving its pointer)
    arena: int                             # the model's arena it plans (module.ARENAS)
    training: bool = True
    role: str = "forward"   # what a profile calls it: forward, training forward, backward
    prologue: list[str] = field(default_factory=list)   # first lines (dims)
    # filled by rendering: the value published for each result, and its layout
    result_of: dict[int, Value] = field(default_factory=dict)
    saved_layouts: dict[int, Layout] = field(default_factory=dict)
    # values every reader of the whole graph reads a step at a time (module.stepped_only)
    stepped: frozenset = frozenset()
    # how many of `results`, the first, the caller hands to Python (None: all); the rest
    # another function reads (a training forward's saved values)
    handed: int | None = None


class Renderer:
    def __init__(self, target: Target, dims: DimNames, spec: FunctionSpec,
                 tapes: list[int], packs: list, sites: list[Site] | None = None,
                 tape_aliases: dict[int, int] | None = None, origins: Origins | None = None,
                 value_names: dict[int, str] | None = None, branch_words: dict | None = None):
        self.target = target
        self.dims = dims
        self.spec = spec
        self.lines: list[str] = []
        self.depth = 1
        self.low = Lowering(self, {vid: a.layout for vid, a in spec.external.items()},
                            {v.id for v, _ in spec.results}, spec.stepped)
        self.plan: Plan | None = None
        self.counter = 0
        self.tapes: list[int] = tapes
        self.packs: list = packs  # this function's pack.Pack list
        # a profiled build's sites, the model's functions' all (profile.py); those open
        self.sites = sites if target.profiled else None
        self.open_sites: list[int] = []
        self.scratch: dict[int, int] = {}  # value id -> scratch buffer (sized when defined)
        self.definitions: list[str] = []  # text before the function (a GPU target's kernels'
        #                                   declarations)
        self.kernels: list[str] = []  # a GPU target's kernels, for its device source
        self.dim_hook = None  # while set: how dims are spelled (inside a GPU kernel)
        self.handed_over: set[int] = set()  # roots of results handed over uncopied
        self.instrs: list = []                # lowered (lower)
        self.results: list[Value] = []        # the values published as results
        self.owned: set[int] = set()          # ids of the values the memory plan places
        self.given_back: list[int] = []       # slots given back at the end (plan.left_dead)
        self.sized: list[str] = []            # byte counts of scratch buffers (C++)
        # while set: whether this step's random draws count (a C++ bool; a padding step
        # that runs draws nothing: control_flow._skip_padding)
        self.drawing: str | None = None
        self.loops_open = 0  # for and while loops around what is rendered (control_flow)
        self.predefined: set[int] = set()  # values whose pointers are defined already
        self.on_host: dict[int, str] = {}  # value id -> its host copy (a step's condition)
        # a while's tape (value id) that a loop around it yields ragged, and nothing else
        # reads: the loop's tape, which the while pushes onto (control_flow._render_for)
        self.pushed_onto: dict[int, int] = {}
        # an if's output that is a for's ragged yield in the branch that ran it (value id
        # -> the for's output's): read through the for's tape (control_flow._render_if);
        # the module's, as `tapes` is: a train function's if, its backward's reads
        self.tape_aliases: dict[int, int] = {} if tape_aliases is None else tape_aliases
        # what the checked graph's branches refuse where they start, worded as the
        # reference words it (module.branch_words; control_flow._render_if)
        self.branch_words: dict = branch_words or {}
        self.origins = origins or Origins()  # what indices are computed from, for faults
        # C++ names of values (ptr): the model's functions' all, numbered as first named
        self.value_names: dict[int, str] = {} if value_names is None else value_names
        # condition sequences the function computes from its inputs alone
        # (control_flow.early_conditions), and those of them whose kernel the target
        # launches before a CUDA graph's dry run reads them
        self.early: set[int] = set()
        self.launched_early: set[int] = set()

    # ---- helpers the hooks use ----
    def scratch_bytes(self, v: Value) -> str:
        """The byte count of a scratch buffer for `v`, kept for the function's memory check
        (target.memory_check)."""
        self.sized.append(size_bytes(v, self.dims))
        return self.sized[-1]

    def dims_fit(self, text: str, d: Dim) -> str:
        """A C++ expression refusing the call, in the words `text` (ops/entry.py,
        refused), where its dims make `d` negative; 0 otherwise (mdl::dims_fit)."""
        user = self.dims.user
        names = ", ".join(c_string(n) for n in user)
        values = ", ".join(self.dim(Dim.of(n)) for n in user)
        return f"mdl::dims_fit({self.dim(d)}, {c_string(text)}, {{{names}}}, {{{values}}})"

    def dim(self, d: Dim) -> str:
        return self.dim_hook(d) if self.dim_hook else self.dims.expr(d)

    @contextlib.contextmanager
    def elsewhere(self, depth: int, dim_hook=None):
        """Statements emitted inside go to a list of their own (a GPU kernel's body, which
        the target places before the function), at `depth`; `dim_hook(d)` spells dims
        there. Yields that list."""
        saved = self.lines, self.depth, self.dim_hook
        self.lines, self.depth, self.dim_hook = [], depth, dim_hook
        try:
            yield self.lines
        finally:
            self.lines, self.depth, self.dim_hook = saved

    def ctype(self, v: Value) -> str:
        return self.target.ctype(v.type.dtype)

    def ptr(self, v: Value) -> str:
        """The C++ name of a value's pointer: numbered in the order the model's functions
        first name them, not by Value.id, which counts every value the process ever made:
        the same model generated after another would read differently, and miss the build
        cache (a fuzz module built four times in one test run, tests/test_build.py)."""
        return self.name(v.id)

    def name(self, vid: int) -> str:
        """ptr's name of the value of id `vid`."""
        name = self.value_names.get(vid)
        if name is None:
            name = self.value_names[vid] = f"v{len(self.value_names)}"
        return name

    def layout(self, v: Value) -> Layout:
        return self.low.layouts[v.id]

    def scalar(self, v: Value) -> str:
        """An expression reading a rank-0 value on the host."""
        if v.id in self.on_host:
            return self.on_host[v.id]
        lay = self.low.layouts[v.id]
        return (self.literal(lay.const, v.type.dtype) if lay.is_const
                else self.target.scalar(self.ptr(v)))

    def literal(self, value, dtype: str) -> str:
        """A constant as C++: a number, or a dim known at run time (a count of tokens)."""
        if isinstance(value, Dim):
            return f"{self.target.ctype(dtype)}({self.dim(value)})"
        return self.target.literal(value, dtype)

    @contextlib.contextmanager
    def timing(self, what: str, where: str):
        """What is emitted inside is one site of a profiled build, timed (profile.py);
        elsewhere nothing changes."""
        if self.sites is None:
            yield
            return
        site = len(self.sites)
        self.sites.append(Site(self.spec.role,
                               self.open_sites[-1] if self.open_sites else -1, where, what))
        start = self.fresh("t")
        for line in self.target.time_start(start):
            self.emit(line)
        self.open_sites.append(site)
        yield
        self.open_sites.pop()
        for line in self.target.time_stop(site, start):
            self.emit(line)

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def open(self, line: str) -> None:
        self.emit(line + " {")
        self.depth += 1

    def close(self, tail: str = "") -> None:
        self.depth -= 1
        self.emit("}" + tail)

    # ---- the function ----
    def lower(self) -> None:
        """Lowers the function (`instrs`), its results in memory that outlives the call
        (`results`, and `spec.saved_layouts` for another function that reads them); `owned`:
        the values the memory plan places."""
        spec = self.spec
        self.instrs = self.low.block(spec.block)
        update_in_place(self.instrs, self.low.layouts, self.dim)
        self.results = [v for v, _ in spec.results]
        self.owned = {vid for vid, lay in self.low.layouts.items()
                      if lay.base is None and not lay.is_const and vid not in spec.external
                      and vid not in self.low.unplanned}
        self._materialize_results(self.instrs, self.results, self.owned)
        self._late_values(spec.block, self.owned)
        if self.target.packs_operands:
            find_packs(self.instrs, self.low.layouts, self.packs)
        if self.target.groups_products:
            self.instrs = group_products(self.instrs, self.low.layouts)
        if self.target.runs_loops_concurrently:
            self.instrs = run_concurrently(self.instrs, self.low.layouts)
        for v in self.results:
            # the pointer is the value's own: another function reads it as memory of its own
            lay = self.low.layouts[v.id]
            spec.saved_layouts[v.id] = Layout(None, None, lay.strides, valid=lay.valid,
                                              padded=lay.padded)

    def alone(self) -> Plan:
        """A memory plan of this function's values only (after `lower`)."""
        return plan(self.instrs, self.low.layouts, self.results, self.dims, self.owned)

    def settle(self, memory: Plan) -> None:
        """The memory plan the function's values take their slots from (`alone`, or one it
        shares with another function: module.py's training pair)."""
        self.plan = memory
        self.handed_over = self._handed_over(self.results)

    def text(self) -> str:
        spec = self.spec
        for vid, access in spec.external.items():
            self.emit(f"auto* {self.name(vid)} = {access.pointer};")
        self.mark(self.plan.lifetimes.dead_at_entry(self.instrs), live=False)
        self.early = early_conditions(spec.block, set(spec.external))
        with self.timing("the whole function", ""):
            self.instructions(self.instrs)
        for slot in self.given_back:
            for line in self.target.give_back(f"arena + off[{slot}]", self.plan.slots[slot]):
                self.emit(line)
        for v, target in spec.results:
            self.emit(f"{target} = {self.ptr(spec.result_of[v.id])};")
        return self.target.function(self, self.lines)

    def _materialize_results(self, instrs: list, results: list[Value], owned: set[int]) -> None:
        """Results handed to Python or to another function lie in contiguous memory that
        outlives the call: their own, or a contiguous view of such memory (the arena, a
        parameter, a kept input; the plan keeps a result's root to the end)."""
        for v in results:
            lay = self.low.layouts[v.id]
            root = self.root(v)
            access = self.spec.external.get(root.id)
            if access is not None and access.persistent and self.low.is_contiguous(v):
                self.spec.result_of[v.id] = v
                continue
            if lay.is_const or access is not None or not self.low.is_contiguous(v):
                copy = self.low.copy_of(v, instrs)
                owned.add(copy.id)
                self.spec.result_of[v.id] = copy
            else:
                self.spec.result_of[v.id] = v
        results[:] = [self.spec.result_of[v.id] for v in results]

    def _handed_over(self, results: list[Value]) -> set[int]:
        """The memory (root value ids) of results the caller may hand to Python as it lies
        (Call::result_memory): results' own arena memory that no result another function
        reads lies in."""
        if not self.target.hands_over_results:
            return set()
        handed = self.spec.handed if self.spec.handed is not None else len(results)
        roots = [self.root(v) for v in results]
        kept = {r.id for r in roots[handed:]}
        return {r.id for r in roots[:handed] if r.id in self.plan.slot_of and r.id not in kept}

    def root(self, v: Value) -> Value:
        """The value whose memory `v` lies in (itself, or what it is a view of)."""
        return root(v, self.low.layouts)

    # ---- instructions ----
    def mark(self, slots: list[int] | None, live: bool) -> None:
        """`slots` of the memory plan marked live or dead (plan.Lifetimes), where the
        target marks them (a sanitized build's)."""
        for line in self.target.mark_slots(sorted(slots), len(self.plan.slots), live) \
                if slots else ():
            self.emit(line)

    def block_ended(self, ins: Structured, block: int) -> None:
        """A run of a structured op's block has ended (a loop's step, a branch): the values
        defined in it that nothing reads any more are dead."""
        self.mark(self.plan.lifetimes.block_dead.get((id(ins), block)), live=False)

    def instructions(self, instrs: list) -> None:
        lifetimes = self.plan.lifetimes
        for ins in instrs:
            self.mark(lifetimes.born.get(id(ins)), live=True)
            if self.sites is not None and timed(ins):
                with self.timing(*describe(ins)):
                    self.instruction(ins)
            else:
                self.instruction(ins)
            self.mark(lifetimes.dead.get(id(ins)), live=False)

    def instruction(self, ins) -> None:
        if isinstance(ins, Fused):
            self.target.fused(self, ins)
        elif isinstance(ins, Copy):
            self.define_owned(ins.dst)
            self.copy(ins.dst, ins.src)
        elif isinstance(ins, View):
            self.view(ins.value)
        elif isinstance(ins, Kernel):
            self.kernel(ins)
        elif isinstance(ins, Products):
            self.products(ins)
        elif isinstance(ins, Structured):
            self.packs_of(ins)
            render_structured(self, ins)
        elif isinstance(ins, Concurrent):
            self.concurrent(ins)

    def packs_of(self, ins: Structured) -> None:
        """The operands a loop's products read packed, packed before it (pack.py)."""
        for pack in ins.extra.get("packs", []):
            for line in self.target.pack(self, pack):
                self.emit(line)

    def concurrent(self, ins: Concurrent) -> None:
        """Loops run at once (concurrent.py): their packs and outputs are made first, where
        later code sees them (each arm's code is a scope of its own, on a thread of its
        own); the values they touched are dead once the last has ended."""
        lifetimes = self.plan.lifetimes
        if self.spec.training:  # (inference draws nothing: dropout is the identity there)
            for line in open_streams(set().union(*(streams(a.op) for a in ins.arms))):
                self.emit(line)
        for arm in ins.arms:
            self.packs_of(arm)
            for v in arm.op.outputs:
                self.define_owned(v)
                self.predefined.add(v.id)

        def run(arm: Structured) -> None:
            self.mark(lifetimes.born.get(id(arm)), live=True)
            with self.timing(*describe(arm)):
                render_structured(self, arm)
            self.mark(lifetimes.dead.get(id(arm)), live=False)
        self.target.concurrent(self, ins, run)
        self.mark(lifetimes.dead.get(id(ins.end)), live=False)

    def _late_values(self, block: Block, owned: set[int]) -> None:
        """Values sized by a dim this function learns only as it runs (the trip count of a
        while it runs, re-run at every step of a loop's backward) cannot have an arena
        slot sized when the function starts: each gets a scratch buffer of the model,
        made large enough where the value is defined."""
        late = set()
        for op in walk_ops(block):
            late |= entry(op).sets_dims(op)
        if not late:
            return
        for vid in sorted(owned):
            v = self.low.values.get(vid)  # (values of a fused loop that it never stores: none)
            if v is not None and any(d.symbols & late for d in v.type.shape):
                owned.discard(vid)
                self.scratch[vid] = len(self.scratch)

    def define_owned(self, v: Value) -> None:
        """The pointer to memory `v` was given: its arena slot, a scratch buffer, or where
        it was placed."""
        if v.id in self.predefined:
            return
        if self.low.layouts[v.id].base is not None:
            self.view(v)
            return
        if v.id in self.scratch:
            self.emit(f"auto* {self.ptr(v)} = reinterpret_cast<{self.ctype(v)}*>("
                      f"{self.target.scratch(self.scratch[v.id], self.scratch_bytes(v))});")
            return
        memory = f"arena + off[{self.plan.slot_of[v.id]}]"
        if v.id in self.handed_over:  # memory of its own where the caller asks
            memory = f"c.result_memory({memory}, {size_bytes(v, self.dims)})"
        self.emit(f"auto* {self.ptr(v)} = reinterpret_cast<{self.ctype(v)}*>({memory});")

    def region(self, base: Value, offset: str | None, type_, strides=None) -> Value:
        """A view of part of `base`'s memory (a destination for `assign`)."""
        v = Value(type_)
        self.low.layouts[v.id] = Layout(base, offset, tuple(strides) if strides is not None
                                        else contiguous_strides(type_.shape))
        self.view(v)
        return v

    def tape_index(self, v: Value) -> int:
        self.tapes.append(v.id)
        return len(self.tapes) - 1

    def tape_of(self, v: Value) -> int:
        """The tape a loop already rendered fills with `v` (its latest: every
        specialization's functions have tapes of their own, the train function's
        rendered before its backward's); an if's output, the tape of the for behind it."""
        vid = v.id
        while vid in self.tape_aliases:
            vid = self.tape_aliases[vid]
        for k in range(len(self.tapes) - 1, -1, -1):
            if self.tapes[k] == vid:
                return k
        raise IRError(f"{v!r} is read as a tape before a loop fills one")

    def view(self, v: Value) -> None:
        lay = self.layout(v)
        self.emit(f"auto* {self.ptr(v)} = {self.ptr(lay.base)} + ({lay.offset or '0'});")
        if lay.data is not None:  # a step of a ragged view: past the data, a padded copy
            size, ctype = self.dim(numel(v.type.shape)), self.ctype(v)
            k = self.scratch.setdefault(v.id, len(self.scratch))
            self.open(f"if ({lay.data} < {size})")
            tail = self.fresh("tail")
            self.emit(f"auto* {tail} = reinterpret_cast<{ctype}*>("
                      f"{self.target.scratch(k, self.scratch_bytes(v))});")
            self.emit(self.target.fill(tail, size, f"{ctype}(0)"))
            self.emit(self.target.copy(tail, self.ptr(v), f"({lay.data})"))
            self.emit(f"{self.ptr(v)} = {tail};")
            self.close()

    def kernel(self, ins: Kernel) -> None:
        for v in ins.op.outputs:
            self.define_owned(v)
        ins_names = [self.ptr(x) for x in ins.inputs]
        outs = [self.ptr(v) for v in ins.op.outputs]
        for line in self.target.kernel(ins)(self, ins.op, ins.inputs, ins_names, outs):
            self.emit(line)

    def products(self, ins: Products) -> None:
        for k in ins.kernels:
            for v in k.op.outputs:
                self.define_owned(v)
        for line in self.target.products(self, ins.kernels):
            self.emit(line)

    def copy(self, dst: Value, src: Value) -> None:
        """dst = src: one contiguous block copied as such (the runtime's `copy`), else
        element by element."""
        low = self.low
        if (low.is_contiguous(dst) and low.is_contiguous(src) and dst.type.shape == src.type.shape
                and low.layouts[src.id].data is None):
            self.emit(self.target.copy(self.ptr(dst), self.ptr(src),
                                       self.dim(numel(src.type.shape))))
        else:
            self.target.assign(self, dst, src)

    def assign(self, dst: Value, src: Value) -> None:
        """dst (a view, possibly strided) = src (any layout, or a constant)."""
        self.target.assign(self, dst, src)
