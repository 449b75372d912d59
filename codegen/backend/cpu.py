"""The CPU target: C++ functions over one host arena, fused groups as loop nests (dims
merged where every operand allows, the innermost loop marked for vectorization), memory
and tapes through the runtime's helpers (cpp_runtime/mdl/), kernels from
primitives/cpu.py."""
from __future__ import annotations

import functools

from ..primitives import cpu as _kernels  # attaches extra["cpu"]
from ..shapes import Dim
from .dialect import CPP
from .lower import Fused, lowering_hook
from .target import Target


class CpuTarget(Target):
    name = "cpu"
    dialect = CPP
    packs_operands = True   # MKL keeps a loop's weights packed (cpp_runtime/mdl/blas.h)

    def kernel(self, ins):
        if ins.pack is not None:
            return functools.partial(super().kernel(ins), pack=ins.pack)
        return super().kernel(ins)

    def pack(self, r, pack) -> list[str]:
        return _kernels.matmul_pack(r, pack)

    def parameter(self, index: int) -> str:
        return f"m.param[{index}]"

    def input(self, k: int, ctype: str) -> str:
        return f"static_cast<{ctype}*>(c.inputs[{k}])"

    def output(self, k: int) -> str:
        return f"c.outputs[{k}]"

    def saved(self, k: int) -> str:
        return f"m.saved[{k}]"

    def function(self, r, body: list[str]) -> str:
        spec, slots = r.spec, r.plan.slots
        head = [f"static void {spec.name}(Model& m, Call& c) {{", "  (void)m; (void)c;"]
        head += ["  " + line for line in spec.prologue]
        head += [f"  std::size_t off[{max(1, len(slots))}];", "  std::size_t total = 0;"]
        head += [f"  off[{i}] = total; total += mdl::align_up({size});"
                 for i, size in enumerate(slots)]
        head.append(f"  m.{spec.arena}.reserve(total);")
        head.append(f"  char* arena = m.{spec.arena}.data(); (void)arena; (void)off;")
        return "\n".join(head + body + ["}"])

    def fused(self, r, ins: Fused) -> None:
        for v in ins.allocs + ins.stores:
            r.define_owned(v)
        produced = {v.id for op in ins.ops for v in op.outputs}
        operands = [x for op in ins.ops for x in op.inputs if x.id not in produced]
        operands = list({x.id: x for x in operands}.values()) + ins.stores

        def body(index):
            names: dict[int, str] = {}

            def read(x) -> str:
                if x.id in names:
                    return names[x.id]
                lay = r.layout(x)
                if lay.is_const:
                    return r.literal(lay.const, x.type.dtype)
                return f"{r.ptr(x)}[{index[x.id]}]"
            for op in ins.ops:
                expr = lowering_hook(op)[1]([read(x) for x in op.inputs], op, r)
                for v in op.outputs:
                    names[v.id] = r.fresh("s")
                    r.emit(f"const {r.ctype(v)} {names[v.id]} = {expr};")
            for v in ins.stores:
                r.emit(f"{r.ptr(v)}[{index[v.id]}] = {names[v.id]};")
        self._loop_nest(r, ins.shape, operands, body)

    def assign(self, r, dst, src) -> None:
        def body(index):
            lay = r.layout(src)
            value = (r.literal(lay.const, src.type.dtype) if lay.is_const
                     else f"{r.ptr(src)}[{index[src.id]}]")
            r.emit(f"{r.ptr(dst)}[{index[dst.id]}] = {value};")
        self._loop_nest(r, dst.type.shape, [dst, src], body)

    def scalar(self, pointer: str) -> str:
        return f"{pointer}[0]"

    def copy(self, dst: str, src: str, count: str) -> str:
        return f"mdl::copy({dst}, {src}, {count});"

    def fill(self, dst: str, count: str, value: str) -> str:
        return f"mdl::fill({dst}, {count}, {value});"

    def tape_clear(self, k: int) -> str:
        return f"m.tapes[{k}].clear();"

    def tape_push(self, k: int, pointer: str, nbytes: str) -> str:
        return f"std::memcpy(m.tapes[{k}].push({nbytes}), {pointer}, {nbytes});"

    def tape_data(self, k: int, ctype: str) -> str:
        return f"reinterpret_cast<{ctype}*>(m.tapes[{k}].data())"

    # ---- loop nests ----
    def _loop_nest(self, r, shape: tuple[Dim, ...], operands: list, body) -> None:
        """Nested loops over `shape`, neighbouring dims merged where every operand's
        strides allow; `body(index)` gets each operand's index expression by value id."""
        strides = {v.id: _aligned_strides(r, v, shape) for v in operands
                   if not r.layout(v).is_const}
        dims: list[Dim] = []
        merged: dict[int, list[Dim]] = {k: [] for k in strides}
        for i, d in enumerate(shape):
            if dims and all(merged[k][-1] == s[i] * d for k, s in strides.items()):
                dims[-1] = dims[-1] * d
                for k, s in strides.items():
                    merged[k][-1] = s[i]
                continue
            dims.append(d)
            for k, s in strides.items():
                merged[k].append(s[i])
        idx = [r.fresh("i") for _ in dims]
        for n, (var, d) in enumerate(zip(idx, dims)):
            if n == len(dims) - 1:
                r.emit(self.dialect.vectorize_hint)
            r.open(f"for (int64_t {var} = 0; {var} < {r.dim(d)}; ++{var})")
        if not dims:
            r.open("")
        body({k: _index(r, s, idx) for k, s in merged.items()})
        for _ in range(max(1, len(dims))):
            r.close()


def _aligned_strides(r, v, shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """`v`'s strides against an output `shape` (broadcast dims get stride 0)."""
    strides = list(r.layout(v).strides)
    for i, d in enumerate(v.type.shape):
        if d == Dim.of(1):
            strides[i] = Dim.of(0)
    return (Dim.of(0),) * (len(shape) - len(strides)) + tuple(strides)


def _index(r, strides: list[Dim], idx: list[str]) -> str:
    """The element index of an operand with these strides at loop variables `idx`."""
    terms = [var if s == Dim.of(1) else f"{var} * {r.dim(s)}"
             for var, s in zip(idx, strides) if s != Dim.of(0)]
    return " + ".join(terms) or "0"


CPU = CpuTarget()
