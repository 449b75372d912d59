"""Forward rewrites that put a graph in the form autodiff (or a backend) handles, each
preserving what the graph computes:

- for autodiff, a primitive with a decomposition (dropout -> x * dropout_mask) is
  expanded, so that the random mask becomes a value the backward pass can keep;
- a structured op rewrites itself where its entry says so (a `for` with lengths, and for
  autodiff one with a checkpoint, becomes plain loops: codegen/ops/structured/for_op.py).
"""
from __future__ import annotations

from ..ir.graph import Block, Op, walk_ops
from ..ops.builder import Builder
from ..ops.entry import entry


def prepare(block: Block, autodiff: bool = True) -> None:
    """Rewrite `block` (and the blocks inside it) in place for autodiff, or (`autodiff`
    false) only as far as every backend needs; idempotent."""
    number_random_ops(block)
    _rewrite(block, autodiff)


def number_random_ops(block: Block) -> None:
    """Give each random op without one the salt the interpreter would give it (its rank
    among random ops in program order), so that a graph and its gradient graph draw the
    same masks."""
    rank = 0
    for op in walk_ops(block):
        if entry(op).random:
            op.attrs.setdefault("salt", rank)
            rank += 1


def _rewrite(block: Block, autodiff: bool) -> None:
    block.ops = _lowered(block.ops, autodiff)


def _lowered(ops: list[Op], autodiff: bool) -> list[Op]:
    """The ops with every rewrite applied, to what the rewrites make too (a loop with
    lengths and a checkpoint is lowered twice)."""
    out: list[Op] = []
    for op in ops:
        for sub in op.blocks:
            _rewrite(sub, autodiff)
        rule = entry(op).rewrite(op, autodiff)
        if rule is None:
            out.append(op)
            continue
        made = Block()
        rule(Builder(made, op.loc), op)
        out += _lowered(made.ops, autodiff)
    return out

