"""Rendering one function of a model as C++ text: pointer definitions for views, loop
nests for fused elementwise runs, kernel calls, native for/if/while. The emitter asks the
primitive table's `cpp` hooks how each op is written and the dialect how the target
spells things; it never knows a specific op itself."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Block, Value
from ..shapes import Dim
from .cexpr import DimNames, contiguous_strides
from .dialect import Dialect
from .lower import Copy, Fused, Kernel, Layout, Lowering, Structured, View, hook
from .plan import Plan, plan


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
    arena: str                             # the Model member holding this function's arena
    training: bool = True
    prologue: list[str] = field(default_factory=list)   # first lines (dims)
    # filled by rendering: the value published for each result, and its layout
    result_of: dict[int, Value] = field(default_factory=dict)
    saved_layouts: dict[int, Layout] = field(default_factory=dict)


class Renderer:
    def __init__(self, dialect: Dialect, dims: DimNames, spec: FunctionSpec,
                 tapes: list[int]):
        self.d = dialect
        self.dims = dims
        self.spec = spec
        self.lines: list[str] = []
        self.depth = 1
        self.low = Lowering(self, {vid: a.layout for vid, a in spec.external.items()},
                            {v.id for v, _ in spec.results})
        self.plan: Plan | None = None
        self.counter = 0
        self.tapes: list[int] = tapes

    # ---- helpers the hooks use ----
    def dim(self, d: Dim) -> str:
        return self.dims.expr(d)

    def ctype(self, v: Value) -> str:
        return self.d.ctype(v.type.dtype)

    def ptr(self, v: Value) -> str:
        return f"v{v.id}"

    def layout(self, v: Value) -> Layout:
        return self.low.layouts[v.id]

    def scalar(self, v: Value) -> str:
        """A C++ expression reading a rank-0 value."""
        lay = self.low.layouts[v.id]
        return self.literal(lay.const, v.type.dtype) if lay.is_const else f"{self.ptr(v)}[0]"

    def literal(self, value, dtype: str) -> str:
        """A constant as C++: a number, or a dim known at run time (a count of tokens)."""
        if isinstance(value, Dim):
            return f"{self.d.ctype(dtype)}({self.dim(value)})"
        return self.d.literal(value, dtype)

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
    def render(self) -> str:
        spec = self.spec
        instrs = self.low.block(spec.block)
        results = [v for v, _ in spec.results]
        owned = {vid for vid, lay in self.low.layouts.items()
                 if lay.base is None and not lay.is_const and vid not in spec.external
                 and vid not in self.low.unplanned}
        self._materialize_results(instrs, results, owned)
        self.plan = plan(instrs, self.low.layouts, results, self.dims, owned)
        body_start = len(self.lines)
        for vid, access in spec.external.items():
            self.emit(f"auto* v{vid} = {access.pointer};")
        self.instructions(instrs)
        for v, target in spec.results:
            v = spec.result_of[v.id]
            self.emit(f"{target} = {self.ptr(v)};")
            spec.saved_layouts[v.id] = self.low.layouts[v.id]
        body = self.lines[body_start:]
        head = [f"static void {spec.name}(Model& m, Call& c) {{", "  (void)m; (void)c;"]
        head += ["  " + line for line in spec.prologue]
        head += [f"  std::size_t off[{max(1, len(self.plan.slots))}];", "  std::size_t total = 0;"]
        for i, size in enumerate(self.plan.slots):
            head.append(f"  off[{i}] = total; total += mdl::align_up({size});")
        head.append(f"  m.{spec.arena}.reserve(total);")
        head.append(f"  char* arena = m.{spec.arena}.data(); (void)arena; (void)off;")
        return "\n".join(head + body + ["}"])

    def _materialize_results(self, instrs: list, results: list[Value], owned: set[int]) -> None:
        """Results handed to Python or to another function own contiguous memory that
        outlives the call."""
        for v in results:
            lay = self.low.layouts[v.id]
            access = self.spec.external.get(v.id)
            if access is not None and access.persistent:
                self.spec.result_of[v.id] = v
                continue
            if lay.is_const or lay.base is not None or access is not None \
                    or not self.low.is_contiguous(v):
                copy = Value(v.type, v.hint)
                self.low.own(copy)
                owned.add(copy.id)
                instrs.append(Copy(copy, v))
                self.spec.result_of[v.id] = copy
            else:
                self.spec.result_of[v.id] = v
        results[:] = [self.spec.result_of[v.id] for v in results]

    # ---- instructions ----
    def instructions(self, instrs: list) -> None:
        for ins in instrs:
            if isinstance(ins, Fused):
                self.fused(ins)
            elif isinstance(ins, Copy):
                self.copy(ins.dst, ins.src)
            elif isinstance(ins, View):
                self.view(ins.value)
            elif isinstance(ins, Kernel):
                self.kernel(ins)
            elif isinstance(ins, Structured):
                from .structured import render_structured
                render_structured(self, ins)

    def define_owned(self, v: Value) -> None:
        slot = self.plan.slot_of[v.id]
        self.emit(f"auto* {self.ptr(v)} = reinterpret_cast<{self.ctype(v)}*>(arena + "
                  f"off[{slot}]);")

    def region(self, base: Value, offset: str, type_, strides=None) -> Value:
        """A view of part of `base`'s memory (a destination for `assign`)."""
        v = Value(type_)
        self.low.layouts[v.id] = Layout(base, offset, tuple(strides) if strides is not None
                                        else contiguous_strides(type_.shape))
        self.view(v)
        return v

    def tape_index(self, v: Value) -> int:
        self.tapes.append(v.id)
        return len(self.tapes) - 1

    def view(self, v: Value) -> None:
        lay = self.layout(v)
        self.emit(f"auto* {self.ptr(v)} = {self.ptr(lay.base)} + ({lay.offset});")

    def kernel(self, ins: Kernel) -> None:
        for v in ins.op.outputs:
            self.define_owned(v)
        ins_names = [self.ptr(x) for x in ins.inputs]
        outs = [self.ptr(v) for v in ins.op.outputs]
        for line in hook(ins.op)[1](self, ins.op, ins.inputs, ins_names, outs):
            self.emit(line)

    # ---- loop nests ----
    def operand_index(self, v: Value, strides: tuple[Dim, ...], idx: list[str],
                      out_rank: int) -> str:
        terms = []
        for i, s in enumerate(strides):
            if s == Dim.of(0):
                continue
            var = idx[out_rank - len(strides) + i]
            terms.append(var if s == Dim.of(1) else f"{var} * {self.dim(s)}")
        return " + ".join(terms) or "0"

    def aligned_strides(self, v: Value, shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
        """`v`'s strides against an output `shape` (broadcast dims get stride 0)."""
        lay = self.layout(v)
        strides = list(lay.strides)
        for i, d in enumerate(v.type.shape):
            if d == Dim.of(1):
                strides[i] = Dim.of(0)
        pad = len(shape) - len(strides)
        return (Dim.of(0),) * pad + tuple(strides)

    def loop_nest(self, shape: tuple[Dim, ...], operands: list[Value], body) -> None:
        """Nested loops over `shape`, dims merged where every operand allows; `body(idx)`
        gets the index expression of each operand."""
        strides = {v.id: self.aligned_strides(v, shape) for v in operands
                   if not self.layout(v).is_const}
        dims = list(shape)
        groups = [[i] for i in range(len(dims))]
        merged_dims, merged_strides = [], {k: [] for k in strides}
        for g in groups:
            i = g[0]
            if merged_dims and all(
                    merged_strides[k][-1] == s[i] * dims[i] for k, s in strides.items()):
                merged_dims[-1] = merged_dims[-1] * dims[i]
                for k, s in strides.items():
                    merged_strides[k][-1] = s[i]
                continue
            merged_dims.append(dims[i])
            for k, s in strides.items():
                merged_strides[k].append(s[i])
        idx = [self.fresh("i") for _ in merged_dims]
        for n, (var, d) in enumerate(zip(idx, merged_dims)):
            if n == len(merged_dims) - 1:
                self.emit(self.d.vectorize_hint)
            self.open(f"for (int64_t {var} = 0; {var} < {self.dim(d)}; ++{var})")
        if not merged_dims:
            self.open("")
        index = {k: self.operand_index(None, tuple(s), idx, len(idx))
                 for k, s in merged_strides.items()}
        body(index)
        for _ in range(max(1, len(merged_dims))):
            self.close()

    def fused(self, ins: Fused) -> None:
        for v in ins.stores:
            self.define_owned(v)
        produced = {v.id for op in ins.ops for v in op.outputs}
        operands = [x for op in ins.ops for x in op.inputs if x.id not in produced]
        operands = list({x.id: x for x in operands}.values()) + ins.stores

        def body(index):
            names: dict[int, str] = {}

            def read(x: Value) -> str:
                if x.id in names:
                    return names[x.id]
                lay = self.layout(x)
                if lay.is_const:
                    return self.literal(lay.const, x.type.dtype)
                return f"{self.ptr(x)}[{index[x.id]}]"
            for op in ins.ops:
                expr = hook(op)[1]([read(x) for x in op.inputs], op, self)
                for v in op.outputs:
                    names[v.id] = self.fresh("s")
                    self.emit(f"const {self.ctype(v)} {names[v.id]} = {expr};")
            for v in ins.stores:
                self.emit(f"{self.ptr(v)}[{index[v.id]}] = {names[v.id]};")
        self.loop_nest(ins.shape, operands, body)

    def copy(self, dst: Value, src: Value, declare: bool = True) -> None:
        """dst (owned, contiguous) = src (any layout, or a constant)."""
        if declare:
            self.define_owned(dst)
        self.assign(dst, src)

    def assign(self, dst: Value, src: Value) -> None:
        operands = [dst, src]

        def body(index):
            lay = self.layout(src)
            value = (self.literal(lay.const, src.type.dtype) if lay.is_const
                     else f"{self.ptr(src)}[{index[src.id]}]")
            self.emit(f"{self.ptr(dst)}[{index[dst.id]}] = {value};")
        self.loop_nest(dst.type.shape, operands, body)


def render_function(dialect: Dialect, dims: DimNames, spec: FunctionSpec,
                    tapes: list[int]) -> str:
    """The C++ text of one function; `tapes` collects the model's while tapes."""
    return Renderer(dialect, dims, spec, tapes).render()
