"""The memory plan of one function: every value that owns memory gets a slot of the
function's arena, sized once per call shape; a slot is reused by later values of the same
size once its last reader has run (liveness over the lowered instructions, with values
read inside a loop, and the loop's outputs, which it writes at every step, kept alive
until the loop ends). Nothing is allocated inside loops. The same liveness says, for a
sanitized build, where each slot's value is born and where it dies (`Lifetimes`): the
generated code marks dead slots so that a read of one is reported."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.dtypes import DTYPES
from ..ir.graph import Value
from ..ir.shapes import numel, signed
from .cexpr import DimNames
from .lower import Concurrent, Copy, Fused, Kernel, Layout, Structured, View, root
from .products import Products


@dataclass
class Lifetimes:
    """Where the slots' values live, by instruction (keys are `id(ins)`), for marking dead
    slots as the function runs (Renderer.mark; AddressSanitizer's poisoning in a sanitized
    build): a slot is marked live just before the instruction that defines its value, and
    dead once its value's last reader has run. A structured op's block that ends kills the
    values defined in it that its results were the last readers of (at every step of a
    loop); what it read from outside dies once the op has ended. A slot whose value is
    defined where no instruction is (an owned block argument) is never marked."""
    born: dict[int, list[int]] = field(default_factory=dict)   # before the instruction
    dead: dict[int, list[int]] = field(default_factory=dict)   # after it (an op: all of it)
    block_dead: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (op, block)
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # (slot, born, dies)
    position: dict[int, int] = field(default_factory=dict)   # id(ins) -> its position
    unmarked: set[int] = field(default_factory=set)  # slots never marked

    def dead_at_entry(self, instrs: list) -> list[int]:
        """The slots a function whose instructions are `instrs` starts with dead: all but
        those holding a value that an earlier function of a shared plan left for it."""
        if not instrs:
            return []
        start = self.position[id(instrs[0])]
        live = {slot for slot, born, dies in self.spans if born < start <= dies}
        return sorted({slot for slot, _, _ in self.spans} - live - self.unmarked)


@dataclass
class Plan:
    slots: list[str] = field(default_factory=list)        # byte size of each slot (C++)
    slot_of: dict[int, int] = field(default_factory=dict)  # value id -> slot index
    lifetimes: Lifetimes = field(default_factory=Lifetimes)


def size_bytes(v: Value, dims: DimNames) -> str:
    """v's byte count: none where the dims make its size negative (mdl::nonnegative): v is
    then in a branch that does not run (its sizes are checked where it starts)."""
    count = numel(v.type.shape)
    expr = f"mdl::nonnegative({dims.expr(count)})" if signed(count) else dims.expr(count)
    return f"{DTYPES[v.type.dtype].itemsize} * {expr}"


def reads(ins, layouts: dict[int, Layout]) -> list[Value]:
    """The values one instruction other than a for/if/while reads from memory: a fused
    loop's inputs (and the inputs it stores again), a copy's source, a kernel's inputs
    (and the memory a product adds into), a view's base."""
    if isinstance(ins, Fused):
        produced = ins.produced
        return [x for op in ins.ops for x in op.inputs if x.id not in produced] + \
            [v for _, v in ins.also if v.id not in produced]
    if isinstance(ins, Copy):
        return [ins.src]
    if isinstance(ins, Kernel):
        return [*ins.inputs, *(ins.op.outputs if ins.accumulate else ())]
    if isinstance(ins, Products):
        return [x for k in ins.kernels for x in reads(k, layouts)]
    if isinstance(ins, View):
        return [layouts[ins.value.id].base]
    raise TypeError(f"not a plain instruction: {ins}")


@dataclass
class _Loop:
    inside: set[int] = field(default_factory=set)       # values defined in the loop
    outer_reads: set[int] = field(default_factory=set)  # values from outside read in it


class _Liveness:
    def __init__(self, layouts: dict[int, Layout]):
        self.layouts = layouts
        self.pos = 0
        self.defs: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.values: dict[int, Value] = {}
        self.loops: list[_Loop] = []
        # for Lifetimes: each instruction's position; each structured op's blocks' ends;
        # the structured op each value is defined in (its innermost; None: none)
        self.at: dict[int, int] = {}
        self.block_ends: dict[int, list[int]] = {}
        self.home: dict[int, int | None] = {}
        self.ops: list[int] = []
        self.redefined: set[int] = set()
        self.touched: list[set[int]] = []  # per group of loops run at once being walked

    def root(self, v: Value) -> Value:
        return root(v, self.layouts)

    def define(self, v: Value) -> None:
        self.values[v.id] = v
        if self.defs.setdefault(v.id, self.pos) != self.pos:
            self.redefined.add(v.id)
        self.home.setdefault(v.id, self.ops[-1] if self.ops else None)
        for loop in self.loops:
            loop.inside.add(v.id)
        for touched in self.touched:
            touched.add(v.id)

    def use(self, v: Value) -> None:
        r = self.root(v)
        self.values[r.id] = r
        self.last[r.id] = max(self.last.get(r.id, -1), self.pos)
        for loop in self.loops:  # read again by every later iteration of the loop
            if r.id not in loop.inside:
                loop.outer_reads.add(r.id)
        for touched in self.touched:
            touched.add(r.id)

    def walk(self, instrs: list) -> None:
        for ins in instrs:
            self.pos += 1
            self.at[id(ins)] = self.pos
            if isinstance(ins, Structured):
                self._structured(ins)
                continue
            if isinstance(ins, Concurrent):
                self._concurrent(ins)
                continue
            for x in reads(ins, self.layouts):  # a group of products: read until it ends
                self.use(x)
            if isinstance(ins, Fused):
                for v in ins.allocs + ins.stores:
                    self.define(v)
                for dst, _ in ins.also:  # a view of memory defined before (a state)
                    self.use(dst)
            elif isinstance(ins, Copy):
                self.define(ins.dst)
            elif isinstance(ins, Kernel):
                for v in ins.op.outputs:
                    self.define(v)
            elif isinstance(ins, Products):
                for k in ins.kernels:
                    for v in k.op.outputs:
                        self.define(v)

    def _structured(self, ins: Structured) -> None:
        for x in ins.op.inputs:
            self.use(x)
        for v in ins.op.outputs:
            self.define(v)
        loop = _Loop()
        self.loops.append(loop)
        self.ops.append(id(ins))
        ends = self.block_ends[id(ins)] = []
        for block, lowered, results in zip(ins.op.blocks, ins.blocks, ins.extra["results"]):
            for arg in block.args:
                if self.layouts[arg.id].base is None:
                    self.define(arg)
            self.walk(lowered)
            self.pos += 1
            ends.append(self.pos)
            for r in results:
                self.use(r)
        self.ops.pop()
        self.loops.pop()
        end = self.pos
        for vid in loop.outer_reads:
            self.last[vid] = max(self.last[vid], end)
        for v in ins.op.outputs:  # written at every step (state) and at the end
            self.use(v)

    def _concurrent(self, ins: Concurrent) -> None:
        """Loops run at once: what any of them reads or defines lives until the last
        one ends (its own key in `at`), so that none takes memory another still uses."""
        touched: set[int] = set()
        self.touched.append(touched)
        self.walk(ins.arms)
        self.touched.pop()
        self.pos += 1
        self.at[id(ins.end)] = self.pos
        for vid in touched:
            self.last[vid] = max(self.last.get(vid, -1), self.pos)


def plan(instrs: list, layouts: dict[int, Layout], keep: list[Value], dims: DimNames,
         owned: set[int]) -> Plan:
    """Assign slots to the values in `owned` (values with their own arena memory);
    values in `keep` (results, saved for another function) live to the end."""
    live = _Liveness(layouts)
    live.walk(instrs)
    end = live.pos + 1
    for v in keep:
        r = live.root(v)
        live.values[r.id] = r
        live.last[r.id] = end
    events: dict[int, list[tuple[str, int]]] = {}
    for vid, at in live.defs.items():
        if vid in owned:
            events.setdefault(at, []).append(("def", vid))
            events.setdefault(max(live.last.get(vid, at), at), []).append(("free", vid))
    result = Plan()
    free: dict[str, list[int]] = {}
    for at in sorted(events):
        for kind, vid in sorted(events[at], key=lambda e: e[0] == "free"):
            size = size_bytes(live.values[vid], dims)
            if kind == "def":
                pool = free.get(size)
                if pool:
                    result.slot_of[vid] = pool.pop()
                else:
                    result.slots.append(size)
                    result.slot_of[vid] = len(result.slots) - 1
            else:
                free.setdefault(size, []).append(result.slot_of[vid])
    result.lifetimes = _lifetimes(live, result.slot_of, end)
    return result


def _lifetimes(live: _Liveness, slot_of: dict[int, int], end: int) -> Lifetimes:
    """Where each slot is marked live and dead (see Lifetimes), from the liveness walk."""
    out = Lifetimes(position=live.at)
    instruction = {pos: key for key, pos in live.at.items()}
    block_end = {pos: (op, b) for op, ends in live.block_ends.items()
                 for b, pos in enumerate(ends)}
    spans = {}  # value id -> (slot, born, dies)
    for vid, slot in slot_of.items():
        born = live.defs[vid]
        spans[vid] = (slot, born, max(live.last.get(vid, born), born))
    out.spans = list(spans.values())
    out.unmarked = {slot for vid, (slot, born, _) in spans.items()
                    if born not in instruction or vid in live.redefined}
    for vid, (slot, born, dies) in spans.items():
        if slot in out.unmarked:
            continue
        out.born.setdefault(instruction[born], []).append(slot)
        if dies >= end:  # kept: a result, or saved for another function
            continue
        if dies in instruction:
            out.dead.setdefault(instruction[dies], []).append(slot)
        else:  # read last by a block's results
            op, b = block_end[dies]
            if live.home.get(vid) == op:  # defined in the block: dead at each end of it
                out.block_dead.setdefault((op, b), []).append(slot)
            else:  # read from outside: dead once the op has ended
                out.dead.setdefault(op, []).append(slot)
    return out


def left_dead(memory: Plan, first: set[int], kept: set[int], untouched: set[int]) -> list[int]:
    """The slots of a plan shared by two functions that the first leaves dead: slots of
    values of the first (`first`), none of them kept for later (`kept`: its results and
    saved values), which the second reaches only as memory it does not touch (`untouched`:
    results it hands over in memory of their own)."""
    ours, busy = set(), set()
    for vid, slot in memory.slot_of.items():
        if vid in first and vid not in kept:
            ours.add(slot)
        elif vid not in untouched:
            busy.add(slot)
    return sorted(ours - busy)
