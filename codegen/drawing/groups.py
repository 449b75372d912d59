"""Which ops share a node: a chain (or tree) of elementwise ops in one block and one
scope, each read only by the next, is drawn as one node, the way the backend fuses it
into one loop; everything else is a node of its own."""
from __future__ import annotations

from collections import Counter
from typing import Callable

from ..ir.graph import Block, Graph, Op, walk_ops
from ..ops.entry import entry


def read_counts(graph: Graph) -> Counter:
    """How many times each value (by id) is read: by ops, as a block's result, as an
    output or a gradient of the model."""
    reads: Counter = Counter()
    for block in graph.blocks():
        reads.update(v.id for v in block.results)
        for op in walk_ops(block):
            reads.update(v.id for v in op.inputs)
            reads.update(v.id for b in op.blocks for v in b.results)
    for values in (graph.outputs, graph.param_grads, graph.input_grads):
        reads.update(v.id for v in values.values())
    return reads


def fuse(block: Block, scope_of: Callable[[Op], object], reads: Counter) -> dict[int, Op]:
    """For each op directly in `block` (by id), the op whose node draws it: the last op
    of its group."""
    reader: dict[int, Op] = {}
    for op in block.ops:
        for v in op.inputs:
            reader[v.id] = op
    group: dict[int, Op] = {}
    for op in reversed(block.ops):
        sink = op
        if _elementwise(op) and len(op.outputs) == 1 and reads[op.outputs[0].id] == 1:
            nxt = reader.get(op.outputs[0].id)
            if nxt is not None and _elementwise(nxt) and scope_of(nxt) == scope_of(op):
                sink = group[id(nxt)]
        group[id(op)] = sink
    return group


def _elementwise(op: Op) -> bool:
    return entry(op).elementwise and bool(op.inputs)
