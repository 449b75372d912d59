"""Lowering a block of IR to instructions: views instead of copies where an op only
re-addresses memory (reshape, index, slice, split, transpose, broadcast), runs of
elementwise ops fused into one loop nest, kernel calls for the rest, materializing
copies only where a kernel needs contiguous memory.

Every value gets a `Layout`: where its elements live (its own buffer, another value's
buffer at an offset, or nowhere for a uniform constant) and its element strides.

A consumer may choose where a value is computed before its producer is lowered
(`Lowering.placed`): a loop stores a yielded value straight into its step of the stacked
output, and a run of elementwise ops whose results are all concatenated writes them
into the concatenation, so neither is copied afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.graph import Block, IRError, Op, Value, outer_reads, use_counts
from ..ir.shapes import Dim, contiguous_strides
from ..ops.entry import entry
from . import op_lowering as _hooks  # noqa: F401  (attaches extra["lower"])


@dataclass(eq=False)
class Layout:
    base: Value | None = None          # the value whose buffer holds this one (None: own)
    offset: str | None = None          # C++ element offset from the base; None: at its start
    strides: tuple[Dim, ...] = ()      # element strides, 0 on broadcast dims
    const: object = None               # a uniform constant: no memory at all
    # A ragged view (a `segment` of a sequence, its last segment past the data): `valid`
    # is the C++ count of elements from its start that hold data. A loop step's view of
    # one is whole: where `data` (the C++ count of its elements that hold data) is short,
    # it is rendered as a zero-padded copy.
    valid: str | None = None
    data: str | None = None
    # A ragged view's zero-padded copy (its kernel's, where it cannot be a view), and a
    # loop step of one: the C++ count of its elements from its start that hold data,
    # zeros past them in memory (a padding step's flags: control_flow._skip_padding).
    padded: str | None = None

    @property
    def is_const(self) -> bool:
        return self.const is not None


def root(v: Value, layouts: dict[int, Layout]) -> Value:
    """The value whose memory `v` lies in (itself, or what it is a view of)."""
    while layouts[v.id].base is not None:
        v = layouts[v.id].base
    return v


@dataclass(eq=False)
class Fused:
    """One loop nest computing `ops` (elementwise, one output shape); stores `stores`.
    `allocs`: memory it defines first (a concatenation its stores are views of, a sum it
    accumulates); `sums`: (value, sum, axes) for each value it adds up over `axes` into
    `sum` instead of storing it; `also`: (destination, value) for each value it stores a
    second time, or an input it stores (a loop's state updated in place: states.py)."""
    ops: list[Op]
    stores: list[Value]
    shape: tuple[Dim, ...]
    allocs: list[Value] = field(default_factory=list)
    sums: list[tuple[Value, Value, tuple[int, ...]]] = field(default_factory=list)
    also: list[tuple[Value, Value]] = field(default_factory=list)

    @property
    def written(self) -> list[Value]:
        """Every destination it stores into: its stores, then the `also` ones."""
        return self.stores + [dst for dst, _ in self.also]

    @property
    def produced(self) -> set[int]:
        """Ids of the values its ops compute (read inside it, not from memory)."""
        return {v.id for op in self.ops for v in op.outputs}


@dataclass(eq=False)
class Copy:
    """Materialize `src` into `dst` (own, contiguous)."""
    dst: Value
    src: Value


@dataclass(eq=False)
class Kernel:
    op: Op
    inputs: list[Value]                # possibly contiguous copies of op.inputs
    pack: object = None                # a pack.Pack: its right operand packed before a loop
    accumulate: bool = False           # a product added into what its memory holds (beta 1)


@dataclass(eq=False)
class View:
    value: Value                       # a pointer into another value's buffer
    op: Op | None = None               # the op it is the output of (`index` checks its row)


@dataclass(eq=False)
class Structured:
    """A for/if/while. `extra` holds what lowering decided for rendering: "results"
    (per block, the results in memory the op copies from), "step" (the C++ name of a
    loop's time index), "in_place" (result id -> the output it was placed in),
    "overwritten" (ids of outputs the op writes while its blocks still read them: its
    state), "early" (indexes of results copied before any output is written),
    "constants" (the op writes constant results itself) and "packs" (backend/pack.py)."""
    op: Op
    blocks: list[list]                 # instruction lists, one per block of the op
    extra: dict = field(default_factory=dict)


@dataclass(eq=False)
class Concurrent:
    """Loops that share no memory, run at once where the target can (backend/concurrent.py
    groups them): each arm a loop, in program order."""
    arms: list[Structured]
    # where the values the arms touch die, for the memory plan (a key of its own)
    end: object = field(default_factory=object)


def lowering_hook(op: Op) -> tuple:
    """How the op lowers, the same on every target: (kind, ...) attached to its entry
    (a primitive's in backend/op_lowering.py, a structured op's in control_flow.py)."""
    return entry(op).extra["lower"]


def _reads(op: Op, ops: list[Op]) -> bool:
    """Whether `op` reads an output of one of `ops`."""
    made = {v.id for o in ops for v in o.outputs}
    return any(x.id in made for x in op.inputs)


def lowering_kind(op: Op) -> str:
    """elementwise, const, view, kernel (backend/op_lowering.py) or structured."""
    return lowering_hook(op)[0]


def _sunk(ops: list[Op]) -> list[Op]:
    """`ops` in an order the fused loops profit from: an elementwise op whose operands are
    all broadcast from fewer elements (a [B, H] value times a [T, B, 1] one), whose first
    reader is an elementwise op of its shape, goes just before that reader. It then joins
    the reader's fused loop, which recomputes it from the small operands, instead of the
    loop before it, which would store it for the reader to load (an attention backward's
    terms of d enc, computed beside a reduction and added after another)."""
    producers = {v.id: op for op in ops for v in op.outputs}
    first: dict[int, Op] = {}
    for op in ops:  # a loop's body reads values of the block directly: outer_reads
        for v in outer_reads(op):
            first.setdefault(v.id, op)

    def source(v: Value) -> Value:  # through the views a broadcast reads (reshape, ...)
        op = producers.get(v.id)
        while op is not None and lowering_kind(op) == "view" and entry(op).selects \
                and len(op.inputs) == 1:
            v, op = op.inputs[0], producers.get(op.inputs[0].id)
        return v

    def cheap(op: Op) -> bool:
        if lowering_kind(op) != "elementwise" or entry(op).random or len(op.outputs) != 1:
            return False
        shape = op.outputs[0].type.shape
        reader = first.get(op.outputs[0].id)
        return (reader is not None and lowering_kind(reader) == "elementwise"
                and reader.outputs[0].type.shape == shape
                and all(_fewer(source(v).type.shape, shape) for v in op.inputs))
    moved = {id(op): first[op.outputs[0].id] for op in ops if cheap(op)}
    if not moved:
        return ops
    before: dict[int, list[Op]] = {}
    for op in ops:
        if id(op) in moved:
            before.setdefault(id(moved[id(op)]), []).append(op)
    out: list[Op] = []

    def place(op: Op) -> None:
        for early in before.get(id(op), ()):
            place(early)
        out.append(op)
    for op in ops:
        if id(op) not in moved:
            place(op)
    return out


def _fewer(small: tuple, shape: tuple) -> bool:
    """Whether every value of shape `small` has fewer elements than one of `shape`,
    whatever the dims: its dims other than 1 are some of `shape`'s, not all."""
    rest = [d for d in shape if d != Dim.of(1)]
    for d in small:
        if d == Dim.of(1):
            continue
        if d not in rest:
            return False
        rest.remove(d)
    return bool(rest)


class Lowering:
    """Lowers blocks; `layouts` is shared by every block of one function."""

    def __init__(self, cx, external: dict[int, Layout], escaping: set[int],
                 stepped: set[int] = frozenset()):
        self.cx = cx                     # the renderer: dims and scalars as C++ text
        self.escaping = escaping         # values read after the function: always stored
        self.stepped = stepped           # values only ever read a step at a time (sequences)
        self.layouts: dict[int, Layout] = dict(external)
        self.values: dict[int, Value] = {}    # every value given memory, by id
        self.placed: dict[int, Layout] = {}   # where a value not yet lowered will live
        self.accumulating: set[int] = set()   # ids of products that add into their memory
        self.folded: dict[int, Value] = {}    # id of an add that such a product did -> it
        self.uses: dict[int, int] = {}
        self.unplanned: set[int] = set()  # own memory outside the arena (tapes)

    # ---- layouts ----
    def own(self, v: Value) -> Layout:
        """`v`'s memory: where a consumer placed it, else a buffer of its own."""
        layout = self.placed.pop(v.id, None) or Layout(None, None,
                                                       contiguous_strides(v.type.shape))
        self.layouts[v.id] = layout
        self.values[v.id] = v
        return layout

    def layout(self, v: Value) -> Layout:
        return self.layouts[v.id]

    def is_contiguous(self, v: Value) -> bool:
        lay = self.layouts[v.id]
        if lay.is_const:
            return False
        return all(s == c for s, d, c in zip(lay.strides, v.type.shape,
                                             contiguous_strides(v.type.shape)) if d != Dim.of(1))

    def contiguous(self, v: Value, out: list) -> Value:
        """`v` itself when it is contiguous in memory, else a materialized copy."""
        return v if self.is_contiguous(v) else self.copy_of(v, out)

    def copy_of(self, v: Value, out: list) -> Value:
        """A new value in memory of its own, contiguous, that `out` fills from `v`."""
        if self.layouts[v.id].valid is not None:
            raise IRError(f"a ragged view cannot be copied whole: {v}")
        copy = Value(v.type, v.hint)
        self.own(copy)
        out.append(Copy(copy, v))
        return copy

    # ---- blocks ----
    def block(self, block: Block) -> list:
        if not self.uses:  # once per function: counts cover every nested block
            self.uses = use_counts(block)
        out: list = []
        run: list[Op] = []
        totals: list[Op] = []  # sums the run accumulates (their ops need no instruction)
        for op in _sunk(block.ops):
            kind = lowering_kind(op)
            if kind == "const":  # needs no memory and no flush of the run
                self.layouts[op.outputs[0].id] = Layout(const=lowering_hook(op)[1](op))
                continue
            if id(op) in self.folded:  # its product added into the memory: the sum is there
                self.layouts[op.outputs[0].id] = self.layouts[self.folded[id(op)].id]
                continue
            if kind == "elementwise" and (not run or run[0].outputs[0].type.shape ==
                                          op.outputs[0].type.shape) \
                    and not _reads(op, totals):
                run.append(op)
                continue
            if self._fills(run, op, block):  # the run writes the op's output: no op left
                self._flush(run, out, block, totals, into=op)
                run, totals = [], []
                continue
            if self._sums(run, op, block):  # the run adds up the op's input: no op left
                totals.append(op)
                continue
            if kind in ("view", "kernel") and not _reads(op, run + totals):
                # reads nothing the run computes: it goes first, and the run stays open
                # for the elementwise ops after it (a GRU's two products, then its gates)
                self._lower_op(op, kind, out)
                continue
            self._flush(run, out, block, totals)
            run, totals = [], []
            if kind == "elementwise":
                run.append(op)
            else:
                self._lower_op(op, kind, out)
        self._flush(run, out, block, totals)
        return out

    def _fills(self, run: list[Op], op: Op, block: Block) -> bool:
        """Whether `op` only gathers values the run computes and nothing else reads (a
        concatenation of gate gradients), so the run can write them in place."""
        gather = entry(op).extra.get("gathers")
        if gather is None or not run or len({x.id for x in op.inputs}) != len(op.inputs):
            return False
        return all(self._only_for(run, x, block) for x in op.inputs)

    def _sums(self, run: list[Op], op: Op, block: Block) -> bool:
        """Whether `op` adds up a value the run computes and nothing else reads (a loss
        sum(hs * w), a bias gradient), so the run can accumulate it. Float sums only: an
        i32 one wraps around (mdl::plus), as the runtime's reduce adds."""
        sums = entry(op).extra.get("sums")
        return (sums is not None and bool(run) and op.inputs[0].type.rank > 0
                and op.outputs[0].type.is_float
                and op.inputs[0].type.shape == run[0].outputs[0].type.shape
                and self._only_for(run, op.inputs[0], block))

    def _only_for(self, run: list[Op], x: Value, block: Block) -> bool:
        """Whether the run computes `x` and only one op after the run reads it."""
        if x.id not in {v.id for o in run for v in o.outputs}:
            return False
        inside = sum(1 for o in run for v in o.inputs if v.id == x.id)
        return (self.uses.get(x.id, 0) - inside == 1 and x not in block.results
                and x.id not in self.escaping and x.id not in self.placed)

    def _flush(self, run: list[Op], out: list, block: Block, totals: list[Op],
               into: Op | None = None) -> None:
        """The run as one Fused group; `totals`: sums it accumulates, `into`: a gather
        it writes."""
        if not run:
            return
        allocs, sums = [], []
        for total in totals:
            self.own(total.outputs[0])
            allocs.append(total.outputs[0])
            sums.append((total.inputs[0], total.outputs[0], entry(total).extra["sums"](total)))
        if into is not None:
            whole = into.outputs[0]
            self.own(whole)
            allocs.append(whole)
            for x, (offset, strides) in zip(into.inputs, entry(into).extra["gathers"](
                    self.cx, into)):
                self.placed[x.id] = Layout(whole, offset, strides)
        produced = {v.id for op in run for v in op.outputs}
        inside: dict[int, int] = {}
        for op in run + totals:
            for v in outer_reads(op):
                if v.id in produced:
                    inside[v.id] = inside.get(v.id, 0) + 1
        stores = []
        for op in run:
            for v in op.outputs:
                if (self.uses.get(v.id, 0) > inside.get(v.id, 0) or v in block.results
                        or v.id in self.escaping):
                    stores.append(v)
                    self.own(v)
                else:
                    self.layouts[v.id] = Layout(None, None, contiguous_strides(v.type.shape))
        out.append(Fused(list(run), stores, run[0].outputs[0].type.shape, allocs, sums))

    def _lower_op(self, op: Op, kind: str, out: list) -> None:
        if kind == "structured":
            self._structured(op, out)
        elif kind == "view" and entry(op).extra.get("ragged") and not self._ragged(op):
            self._kernel(op, False, out)  # its kernel: a padded copy
            self.layouts[op.outputs[0].id].padded = entry(op).extra["ragged"](self.cx, op)
        elif kind == "view":
            src = op.inputs[0]
            if self.layouts[src.id].is_const:  # a view needs memory to address (rare)
                src = self.copy_of(src, out)
            if lowering_hook(op)[2] and not self.is_contiguous(src):  # needs contiguous input
                src = self.contiguous(src, out)
            base_lay = self.layout(src)
            ragged = entry(op).extra.get("ragged")
            for i, v in enumerate(op.outputs):
                offset, strides = lowering_hook(op)[1](self.cx, op, i, base_lay.strides)
                valid = ragged(self.cx, op) if ragged else None
                self.layouts[v.id] = Layout(src, offset, strides, None, valid)
                out.append(View(v, op))
        else:
            self._kernel(op, lowering_hook(op)[1], out)

    def _kernel(self, op: Op, accepts, out: list) -> None:
        """A kernel call; `accepts`: whether it takes an input as it lies (else a contiguous
        copy), a bool or a function of (renderer, op, index, layout)."""
        inputs = [x if (accepts(self.cx, op, i, self.layouts[x.id]) if callable(accepts)
                        else accepts) else self.contiguous(x, out)
                  for i, x in enumerate(op.inputs)]
        for v in op.outputs:
            self.own(v)
        out.append(Kernel(op, inputs, accumulate=id(op) in self.accumulating))

    def _ragged(self, op: Op) -> bool:
        """Whether a view that runs past its input's data (extra["ragged"]: a sequence's
        segments, the last one shorter) can be one: every reader reads it a step at a
        time, a loop's step of it then being a padded copy where it is short, and its
        input's memory is contiguous."""
        return op.outputs[0].id in self.stepped and self.is_contiguous(op.inputs[0]) \
            and not self.layouts[op.inputs[0].id].is_const

    def _structured(self, op: Op, out: list) -> None:
        """A for/if/while: its entry's native hook lays out its memory (and may place
        results: `extra["in_place"]`), then each block is lowered and its results
        settled."""
        ins = Structured(op, [], {"results": [], "step": self.cx.fresh("t"), "in_place": {},
                                  "overwritten": {v.id for v in op.outputs}, "early": set()})
        lowering_hook(op)[1](self, op, ins, out)
        for block in op.blocks:
            lowered = self.block(block)
            ins.extra["results"].append([self._settled(r, lowered, ins, k in ins.extra["early"])
                                         for k, r in enumerate(block.results)])
            ins.blocks.append(lowered)
        out.append(ins)

    def _settled(self, v: Value, lowered: list, ins: Structured, early: bool) -> Value:
        """A block result in memory the op can copy from row by row: contiguous, and
        unless it is copied before the op writes its outputs (`early`), not a view of a
        buffer the op overwrites while results are read (its state); or already where
        the op wants it (placed)."""
        if self.layouts[v.id].is_const and ins.extra.get("constants"):
            return v  # the op writes the constant itself
        target = ins.extra["in_place"].get(v.id)
        if target is not None:
            self.placed.pop(v.id, None)  # unused when v became a view of something else
            if self.layouts[v.id].base is target:
                return v
        root = v
        while self.layouts[root.id].base is not None:
            root = self.layouts[root.id].base
        if not self.layouts[v.id].is_const and self.is_contiguous(v) and \
                (early or root.id not in ins.extra["overwritten"]):
            return v
        return self.copy_of(v, lowered)
