"""Loop-invariant right operands of products, packed once before their loop.

A product inside a `for` or `while` whose right operand does not change in the loop (a
recurrent weight: `h @ U`) multiplies the same matrix at every step. A target that can
keep an operand in its BLAS's packed form (`Target.packs_operands`) packs it once before
the outermost loop it is invariant in, and every step multiplies the packed form: the
BLAS no longer re-packs the weight per call (15 to 30% of a recurrent step's product on
the CPU, docs/build.md).

`find_packs` marks the kernels; the renderer emits each pack before its loop
(`Structured.extra["packs"]`) and the kernel reads it (`Kernel.pack`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import Value
from ..ops.entry import entry
from .lower import Copy, Fused, Kernel, Layout, Structured, View


@dataclass(eq=False)
class Pack:
    index: int          # the pack buffer (State::packs) within its function
    kernel: Kernel      # the product reading it
    anchor: Value       # the operand's memory as defined before the loop (same layout)


def find_packs(instrs: list, layouts: dict[int, Layout], packs: list) -> None:
    """Give each product with a loop-invariant right operand a `Pack` (appended to `packs`,
    the function's list; `Kernel.pack`) and list it on the outermost loop it is invariant
    in (`Structured.extra["packs"]`)."""
    _walk(instrs, [], layouts, packs)


def _walk(instrs: list, loops: list[tuple[Structured, set[int]]],
          layouts: dict[int, Layout], packs: list) -> None:
    for ins in instrs:
        if isinstance(ins, Kernel) and entry(ins.op).product and loops:
            anchor = _anchor(ins.inputs[1], loops[-1], layouts)
            outermost = next((loop for loop, inside in loops if anchor.id not in inside), None)
            if outermost is not None:
                ins.pack = Pack(len(packs), ins, anchor)
                packs.append(ins.pack)
                outermost.extra.setdefault("packs", []).append(ins.pack)
        elif isinstance(ins, Structured):
            inner = loops
            if entry(ins.op).repeats:  # an `if` body runs once: nothing to share
                inner = loops + [(ins, _defined_in(ins))]
            for block in ins.blocks:
                _walk(block, inner, layouts, packs)


def _anchor(v: Value, loop: tuple[Structured, set[int]], layouts: dict[int, Layout]) -> Value:
    """`v`, or the value it re-strides without an offset (a transpose of a weight made in
    the loop body) when `v` is made inside the loop: memory the loop does not move. A
    loop's state is not followed out of it: its buffer may lie in memory defined before
    the loop (a loop in a branch, its final state placed in the if's output), but the
    loop writes it at every step."""
    structured, inside = loop
    states = {out.id for out in structured.op.outputs}
    while v.id in inside and v.id not in states and layouts[v.id].base is not None \
            and layouts[v.id].offset is None:
        v = layouts[v.id].base
    return v


def _defined_in(loop: Structured) -> set[int]:
    """Ids of the memory a loop writes: its own outputs (the state), its blocks'
    arguments and everything computed in its blocks."""
    out = {v.id for v in loop.op.outputs}
    for block in loop.op.blocks:
        out.update(v.id for v in block.args)
    for lowered in loop.blocks:
        _collect(lowered, out)
    return out


def _collect(instrs: list, out: set[int]) -> None:
    for ins in instrs:
        if isinstance(ins, Fused):
            out.update(v.id for op in ins.ops for v in op.outputs)
            out.update(v.id for v in ins.allocs)
        elif isinstance(ins, Copy):
            out.add(ins.dst.id)
        elif isinstance(ins, Kernel):
            out.update(v.id for v in ins.op.outputs)
        elif isinstance(ins, View):
            out.add(ins.value.id)
        elif isinstance(ins, Structured):
            out.update(_defined_in(ins))
