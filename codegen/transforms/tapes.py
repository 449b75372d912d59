"""What a graph keeps for its backward pass: the tapes of its structured ops (the
trailing `n_tape` outputs of for/if/while, see codegen.ir.graph), in bytes for given dims.

    saved_bytes(graph, dims) -> int

Tapes made in a block live until the block ends; a nested block (a loop body, a branch)
runs one iteration at a time, so only its largest peak adds to its parent's. For a
`for` that stores everything this is T times what one step needs; with `recompute`, T
states; with `checkpoint = k`, ceil(T/k) states plus the k states one segment re-saves
during the backward pass (memory O(T/k + k)).
"""
from __future__ import annotations

from typing import Mapping

from ..ir.dtypes import DTYPES
from ..ir.graph import Block, Graph
from ..ir.shapes import Symbol, TensorType, numel


def saved_bytes(graph: Graph | Block, dims: Mapping[Symbol, int]) -> int:
    """Peak bytes of tapes alive at once when the graph runs with these dims (a while's
    trip counts, known only at run time, may be given too, keyed by their TripCount, and
    the rows of a for's ragged yield, all its steps' trips, by their Rows; ceil-divisions
    are computed)."""
    if isinstance(graph, Graph):  # the forward's tapes live on through the backward
        graph = Block(ops=graph.body.ops + graph.backward.ops)
    return _peak(graph, dims)


def _peak(block: Block, dims: Mapping[Symbol, int]) -> int:
    held, nested = 0, 0
    for op in block.ops:
        n_tape = op.attrs.get("n_tape", 0) if op.blocks else 0
        held += sum(nbytes(v.type, dims) for v in op.outputs[len(op.outputs) - n_tape:])
        for sub in op.blocks:
            nested = max(nested, _peak(sub, dims))
    return held + nested


def nbytes(t: TensorType, dims: Mapping[Symbol, int]) -> int:
    """The size of one tensor of type t: none where the dims make its size negative (a
    tape of a branch that does not run at them, ops/structured/if_op.py)."""
    return DTYPES[t.dtype].itemsize * max(0, numel(t.shape).evaluate(dims))
