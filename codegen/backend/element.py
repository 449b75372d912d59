"""The statements computing one element of a fused group (lower.Fused) or of a strided
copy, the same on every target: each operand loaded into a named constant at its first
read, each op's scalar expression (backend/op_lowering.py) into another. The target
wraps them in a loop nest or a GPU kernel and writes the stores and sums."""
from __future__ import annotations

from .lower import Fused, lowering_hook


def compute(r, ins: Fused, index: dict[int, str], names: dict[int, str]) -> dict[int, str]:
    """Emit the ops of `ins` for the element at `index` (value id -> its index expression);
    `names` holds operands already read (value id -> name). Returns every value's name."""
    names = dict(names)

    def read(x) -> str:
        if x.id in names:
            return names[x.id]
        lay = r.layout(x)
        if lay.is_const:
            return r.literal(lay.const, x.type.dtype)
        # loaded unconditionally, before any use: a load only one arm of a `where` reads
        # would be control flow (a CPU compiler would then not vectorize the loop)
        names[x.id] = r.fresh("s")
        r.emit(f"const {r.ctype(x)} {names[x.id]} = {r.ptr(x)}[{index[x.id]}];")
        return names[x.id]
    for op in ins.ops:
        expr = lowering_hook(op)[1]([read(x) for x in op.inputs], op, r)
        for v in op.outputs:
            names[v.id] = r.fresh("s")
            r.emit(f"const {r.ctype(v)} {names[v.id]} = {expr};")
    return names


def store(r, ins: Fused, index: dict[int, str], names: dict[int, str]) -> None:
    """Emit the stores of `ins` for the element at `index`: each stored value, then each
    `also` destination (`names`: what `compute` returned)."""
    for v in ins.stores:
        r.emit(f"{r.ptr(v)}[{index[v.id]}] = {names[v.id]};")
    for dst, v in ins.also:
        r.emit(f"{r.ptr(dst)}[{index[dst.id]}] = {names[v.id]};")


def assign(r, dst, src, index: dict[int, str]) -> None:
    """Emit dst = src for the element at `index` (src may be a constant)."""
    lay = r.layout(src)
    value = (r.literal(lay.const, src.type.dtype) if lay.is_const
             else f"{r.ptr(src)}[{index[src.id]}]")
    r.emit(f"{r.ptr(dst)}[{index[dst.id]}] = {value};")
