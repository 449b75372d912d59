"""Lowering a block of IR to instructions: views instead of copies where an op only
re-addresses memory (reshape, index, slice, split, transpose, broadcast), runs of
elementwise ops fused into one loop nest, kernel calls for the rest, materializing
copies only where a kernel needs contiguous memory.

Every value gets a `Layout`: where its elements live (its own buffer, another value's
buffer at an offset, or nowhere for a uniform constant) and its element strides.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Block, Op, Value, walk_ops
from ..primitives import TABLE
from ..primitives import lowering as _hooks  # noqa: F401  (attaches extra["lower"])
from ..structured import STRUCTURED
from ..shapes import Dim, contiguous_strides


@dataclass(eq=False)
class Layout:
    base: Value | None = None          # the value whose buffer holds this one (None: own)
    offset: str = "0"                  # C++ element offset from the base pointer
    strides: tuple[Dim, ...] = ()      # element strides, 0 on broadcast dims
    const: object = None               # a uniform constant: no memory at all

    @property
    def is_const(self) -> bool:
        return self.const is not None


@dataclass(eq=False)
class Fused:
    """One loop nest computing `ops` (elementwise, one output shape); stores `stores`."""
    ops: list[Op]
    stores: list[Value]
    shape: tuple[Dim, ...]


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


@dataclass(eq=False)
class View:
    value: Value                       # a pointer into another value's buffer


@dataclass(eq=False)
class Structured:
    """A for/if/while. `extra` holds what lowering decided for rendering: "results"
    (per block, the results in memory the op copies from), "step" (the C++ name of a
    loop's time index), "lengths" and "seqs" (contiguous copies a `for` reads)."""
    op: Op
    blocks: list[list]                 # instruction lists, one per block of the op
    extra: dict = field(default_factory=dict)


def lowering_hook(op: Op) -> tuple:
    """How the op lowers, the same on every target: (kind, ...) from the primitive
    table (primitives/lowering.py)."""
    return TABLE[op.prim].extra["lower"]


class Lowering:
    """Lowers blocks; `layouts` is shared by every block of one function."""

    def __init__(self, cx, external: dict[int, Layout], escaping: set[int]):
        self.cx = cx                     # the renderer: dims and scalars as C++ text
        self.escaping = escaping         # values read after the function: always stored
        self.layouts: dict[int, Layout] = dict(external)
        self.uses: dict[int, int] = {}
        self.unplanned: set[int] = set()  # own memory outside the arena (tapes)

    # ---- layouts ----
    def own(self, v: Value) -> Layout:
        layout = Layout(None, "0", contiguous_strides(v.type.shape))
        self.layouts[v.id] = layout
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
        copy = Value(v.type, v.hint)
        self.own(copy)
        out.append(Copy(copy, v))
        return copy

    # ---- blocks ----
    def block(self, block: Block) -> list:
        if not self.uses:  # once per function: counts cover every nested block
            self._count_uses(block)
        out: list = []
        run: list[Op] = []
        for op in block.ops:
            kind = lowering_hook(op)[0] if op.prim in TABLE else "structured"
            if kind == "const":  # needs no memory and no flush of the run
                self.layouts[op.outputs[0].id] = Layout(const=lowering_hook(op)[1](op))
                continue
            if kind == "elementwise" and (not run or run[0].outputs[0].type.shape ==
                                          op.outputs[0].type.shape):
                run.append(op)
                continue
            self._flush(run, out, block)
            run = []
            if kind == "elementwise":
                run.append(op)
            else:
                self._lower_op(op, kind, out)
        self._flush(run, out, block)
        return out

    def _count_uses(self, block: Block) -> None:
        for op in walk_ops(block):
            for v in op.inputs:
                self.uses[v.id] = self.uses.get(v.id, 0) + 1
            for b in op.blocks:
                for v in b.results:
                    self.uses[v.id] = self.uses.get(v.id, 0) + 1
        for v in block.results:
            self.uses[v.id] = self.uses.get(v.id, 0) + 1

    def _flush(self, run: list[Op], out: list, block: Block) -> None:
        if not run:
            return
        produced = {v.id for op in run for v in op.outputs}
        inside: dict[int, int] = {}
        for op in run:
            for v in op.inputs:
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
                    self.layouts[v.id] = Layout(None, "0", contiguous_strides(v.type.shape))
        out.append(Fused(list(run), stores, run[0].outputs[0].type.shape))

    def _lower_op(self, op: Op, kind: str, out: list) -> None:
        if kind == "structured":
            self._structured(op, out)
        elif kind == "view":
            src = op.inputs[0]
            if lowering_hook(op)[2] and not self.is_contiguous(src):  # needs contiguous input
                src = self.contiguous(src, out)
            base_lay = self.layout(src)
            for i, v in enumerate(op.outputs):
                offset, strides = lowering_hook(op)[1](self.cx, op, i, base_lay.strides)
                self.layouts[v.id] = Layout(src, offset, strides, None)
                out.append(View(v))
        else:  # kernel
            accepts = lowering_hook(op)[1]
            inputs = [x if (accepts(self.cx, op, i, self.layouts[x.id]) if callable(accepts)
                            else accepts) else self.contiguous(x, out)
                      for i, x in enumerate(op.inputs)]
            for v in op.outputs:
                self.own(v)
            out.append(Kernel(op, inputs))

    def _structured(self, op: Op, out: list) -> None:
        """A for/if/while: its entry's native hook lays out its memory, then each block
        is lowered and its results settled."""
        ins = Structured(op, [], {"results": [], "step": self.cx.fresh("t")})
        STRUCTURED[op.prim].extra["native"][0](self, op, ins, out)
        for block in op.blocks:
            lowered = self.block(block)
            ins.extra["results"].append([self._settled(r, lowered, ins) for r in block.results])
            ins.blocks.append(lowered)
        out.append(ins)

    def _settled(self, v: Value, lowered: list, ins: Structured) -> Value:
        """A block result in memory the op can copy from row by row: owned and contiguous,
        and not a view of a state buffer (the state is overwritten while results are
        read)."""
        root = v
        while self.layouts[root.id].base is not None:
            root = self.layouts[root.id].base
        if not self.layouts[v.id].is_const and self.is_contiguous(v) and \
                root.id not in {s.id for s in ins.op.outputs}:
            return v
        return self.copy_of(v, lowered)
