"""The CPU target: C++ functions over one host arena, fused groups as loop nests (dims
merged where every operand allows, the innermost loop marked for vectorization), memory
and tapes through the runtime's helpers (cpp_runtime/mdl/), kernels from
primitives/cpu.py."""
from __future__ import annotations

import functools

from ..primitives import cpu as _kernels  # attaches extra["cpu"]
from ..shapes import Dim, contiguous_strides, numel
from .dialect import CPP
from .lower import Fused, lowering_hook
from .target import Target


class CpuTarget(Target):
    name = "cpu"
    dialect = CPP
    packs_operands = True   # MKL keeps a loop's weights packed (cpp_runtime/mdl/blas.h)

    def kernel(self, ins):
        if ins.pack is not None or ins.accumulate:  # only products are packed or accumulate
            return functools.partial(super().kernel(ins), pack=ins.pack,
                                     accumulate=ins.accumulate)
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
        head = [f"static void {spec.name}(Model& m, Call& c) {{", "  (void)m; (void)c;",
                "  mdl::ProductThreads product_threads;  // MKL's threads: blas.h"]
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
        for _, total, _ in ins.sums:
            r.emit(self.fill(r.ptr(total), r.dim(numel(total.type.shape)),
                             r.literal(0, total.type.dtype)))
        produced = {v.id for op in ins.ops for v in op.outputs}
        inputs = {x.id: x for op in ins.ops for x in op.inputs if x.id not in produced}
        operands = list(inputs.values()) + ins.stores
        sums = {total.id: _sum_strides(x, axes) for x, total, axes in ins.sums}
        # one-element operands (a step's mask bit, a scalar) are read once, before the
        # loop: a load through a uint8_t pointer may alias the loop's stores, and GCC
        # would then read it at every element and not vectorize the loop
        hoisted: dict[int, str] = {}
        for x in inputs.values():
            if numel(x.type.shape) == Dim.of(1) and not r.layout(x).is_const:
                hoisted[x.id] = r.fresh("s")
                r.emit(f"const {r.ctype(x)} {hoisted[x.id]} = {r.ptr(x)}[0];")

        def body(index, accumulators):
            names: dict[int, str] = dict(hoisted)

            def read(x) -> str:
                if x.id in names:
                    return names[x.id]
                lay = r.layout(x)
                if lay.is_const:
                    return r.literal(lay.const, x.type.dtype)
                # loaded unconditionally, before any use: a load only one arm of a
                # `where` reads would be control flow, and GCC would not vectorize
                names[x.id] = r.fresh("s")
                r.emit(f"const {r.ctype(x)} {names[x.id]} = {r.ptr(x)}[{index[x.id]}];")
                return names[x.id]
            for op in ins.ops:
                expr = lowering_hook(op)[1]([read(x) for x in op.inputs], op, r)
                for v in op.outputs:
                    names[v.id] = r.fresh("s")
                    r.emit(f"const {r.ctype(v)} {names[v.id]} = {expr};")
            for v in ins.stores:
                r.emit(f"{r.ptr(v)}[{index[v.id]}] = {names[v.id]};")
            for x, total, _ in ins.sums:
                target = accumulators.get(total.id) or f"{r.ptr(total)}[{index[total.id]}]"
                r.emit(f"{target} += {names[x.id]};")
        self._loop_nest(r, ins.shape, operands + [t for _, t, _ in ins.sums], body, sums)

    def assign(self, r, dst, src) -> None:
        def body(index, _):
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

    def scratch(self, k: int, nbytes: str) -> str:
        return f"m.scratch[{k}].hold({nbytes})"

    def tape_clear(self, k: int) -> str:
        return f"m.tapes[{k}].clear();"

    def tape_push(self, k: int, pointer: str, nbytes: str) -> str:
        return f"std::memcpy(m.tapes[{k}].push({nbytes}), {pointer}, {nbytes});"

    def tape_data(self, k: int, ctype: str) -> str:
        return f"reinterpret_cast<{ctype}*>(m.tapes[{k}].data())"

    # ---- loop nests ----
    def _loop_nest(self, r, shape: tuple[Dim, ...], operands: list, body,
                   sums: dict | None = None) -> None:
        """Nested loops over `shape`, neighbouring dims merged where every operand's
        strides allow; `body(index, accumulators)` gets each operand's index expression
        by value id. `sums` (value id -> strides, 0 on summed axes) are operands the body
        adds into: one summed along the innermost loop gets a local accumulator there
        (`accumulators`: value id -> its name), so that loop still vectorizes."""
        sums = sums or {}
        strides = {v.id: sums.get(v.id) or _aligned_strides(r, v, shape) for v in operands
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
        inner = {k: r.fresh("acc") for k in sums if dims and merged[k][-1] == Dim.of(0)}
        values = {v.id: v for v in operands}
        for n, (var, d) in enumerate(zip(idx, dims)):
            if n == len(dims) - 1:
                for k, acc in inner.items():
                    r.emit(f"{r.ctype(values[k])} {acc} = 0;")
                r.emit(f"#pragma omp simd reduction(+ : {', '.join(inner.values())})"
                       if inner else self.dialect.vectorize_hint)
            r.open(f"for (int64_t {var} = 0; {var} < {r.dim(d)}; ++{var})")
        if not dims:
            r.open("")
        body({k: _index(r, s, idx) for k, s in merged.items()}, inner)
        for n in range(max(1, len(dims))):
            r.close()
            if n == 0:  # the innermost loop closed: its accumulators are added in
                for k, acc in inner.items():
                    r.emit(f"{r.ptr(values[k])}[{_index(r, merged[k][:-1], idx[:-1])}] "
                           f"+= {acc};")


def _sum_strides(x, axes: tuple[int, ...]) -> tuple[Dim, ...]:
    """Where each element of `x` lands in its sum over `axes` (kept axes contiguous)."""
    kept = [d for i, d in enumerate(x.type.shape) if i not in axes]
    strides = iter(contiguous_strides(tuple(kept)))
    return tuple(Dim.of(0) if i in axes else next(strides) for i in range(x.type.rank))


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
