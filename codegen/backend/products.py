"""Products that run together: a run of products one after another in the lowered
instructions, none reading or writing the memory another writes, becomes one `Products`
instruction. A target that groups them (`Target.groups_products`) runs them in one call
that may split them over the cores together (the CPU's mdl::gemm_together: a generation
step's x @ W and h @ U at B = 1 fork and join the threads once, and each core streams
its part of both weights).

Grouping is done after packing (a packed product stays alone: it has a kernel of its
own) and before the memory plan, which sees a group as one instruction: every input is
read until the group ends, so no output of the group takes an input's slot.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ops.entry import entry
from .lower import Kernel, Layout, Structured, root


@dataclass(eq=False)
class Products:
    kernels: list[Kernel]   # two or more, in program order


# The runtime splits float products only (mdl::gemm_together); others are not grouped.
DTYPE = "f32"


def group_products(instrs: list, layouts: dict[int, Layout]) -> list:
    """`instrs` with each run of two or more independent unpacked float products as one
    `Products`; the blocks of structured ops are grouped in place."""
    out: list = []
    run: list[Kernel] = []

    def flush():
        if len(run) > 1:
            out.append(Products(list(run)))
        else:
            out.extend(run)
        run.clear()

    for ins in instrs:
        if isinstance(ins, Structured):
            ins.blocks[:] = [group_products(b, layouts) for b in ins.blocks]
        if not _groupable(ins):
            flush()
            out.append(ins)
            continue
        if run and not _independent(run + [ins], layouts):
            flush()
        run.append(ins)
    flush()
    return out


def _groupable(ins) -> bool:
    return (isinstance(ins, Kernel) and entry(ins.op).product and ins.pack is None
            and ins.op.outputs[0].type.dtype == DTYPE
            and all(x.type.rank == 2 for x in ins.inputs[1:]))


def _independent(kernels: list[Kernel], layouts: dict[int, Layout]) -> bool:
    """Whether no kernel writes memory that another one reads or writes (an accumulating
    product reads its output too)."""
    writes = [{root(v, layouts).id for v in k.op.outputs} for k in kernels]
    reads = [{root(x, layouts).id for x in k.inputs} for k in kernels]
    for i, w in enumerate(writes):
        for j in range(len(kernels)):
            if j != i and (w & reads[j] or w & writes[j]):
                return False
    return True
