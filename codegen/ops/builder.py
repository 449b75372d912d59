"""A small API for emitting IR into a block: `b.mul(x, y)`, `b.sum(x, axes=(0,),
keepdims=False)`, `b.emit("and", [p, q])`. Every op's types come from the primitive
table, so a gradient rule that builds an ill-typed op fails at once, showing the op."""
from __future__ import annotations

import contextlib
from typing import Any

from ..ir.graph import Block, IRError, Op, Value
from ..ir.shapes import TensorType, known_at_call
from .primitives import TABLE, ShapeError


class Builder:
    """Appends ops to `block`; `loc` (a source location) is given to every op emitted.
    `again` collects (value emitted, forward value equal to it): what a gradient rule
    computed anew that the forward pass holds too, which autodiff may read instead of
    keeping the forward's (codegen/transforms/reread.py). `in_block`: it emits the
    backward of a loop body or a branch (regions.differentiate_block), whose forward
    values of a size that changes from step to step cannot be kept for it. `ragged`: but
    those whose leading dim is a trip count (a while's tapes) can, as the `for` (or a
    `while` in no loop) whose body the block is (or a branch in it) lays its steps'
    values end to end, so an `if` there keeps its branches' whiles' tapes too
    (if_op.py), as one in no block does.
    `rows`: the block is a branch of `if`s in no loop, which can output a `for`'s ragged
    yields too (their leading dim the `Rows` of a for's steps' trips), so a `for` there
    keeps its whiles' tapes as one in no block does (for_op.py)."""

    def __init__(self, block: Block, loc: Any = None):
        self.block = block
        self.loc = loc
        self.again: list[tuple[Value, Value]] = []
        self.in_block = False
        self.ragged = False
        self.rows = False

    @contextlib.contextmanager
    def at(self, loc: Any):
        """Ops emitted inside get `loc` where it is known: a rewrite moving an op out of
        a loop keeps where the source wrote it, not the loop's place."""
        saved, self.loc = self.loc, loc or self.loc
        try:
            yield
        finally:
            self.loc = saved

    def emit(self, prim: str, inputs: list[Value], attrs: dict | None = None,
             hint: str = "") -> list[Value]:
        """Append one primitive op; its outputs. An ill-typed op is a bug of ours here
        (IRError); the front end, where it is the user's, calls `typed` itself."""
        attrs = dict(attrs or {})
        try:
            return self.typed(prim, inputs, attrs, hint)
        except ShapeError as exc:
            args = ", ".join(repr(v) for v in inputs)
            raise IRError(f"ill-typed {prim}({args}) {attrs}: {exc}") from None

    def typed(self, prim: str, inputs: list[Value], attrs: dict, hint: str = "",
              source: bool = False) -> list[Value]:
        """Append one primitive op with the types its rule gives (ShapeError if none, or
        if one is too large for any machine: TensorType.too_large; with `source`, the
        front end's op, also if one has more dims than a program's value may)."""
        types = TABLE[prim].infer([v.type for v in inputs], attrs)
        for t in types:
            if (why := t.too_large() or (t.too_many_dims() if source else None)) is not None:
                raise ShapeError(why)
        outputs = [Value(t, hint) for t in types]
        self.block.ops.append(Op(prim, list(inputs), outputs, attrs, [], self.loc))
        return outputs

    def structured(self, prim: str, inputs: list[Value], types: list[TensorType],
                   attrs: dict, blocks: list[Block], hints: list[str] | None = None
                   ) -> list[Value]:
        """Append a for/if/while op whose output types are given; its outputs."""
        outputs = [Value(t, h) for t, h in zip(types, hints or [""] * len(types))]
        self.block.ops.append(Op(prim, list(inputs), outputs, dict(attrs), blocks, self.loc))
        return outputs

    def __getattr__(self, prim: str):
        if prim not in TABLE:
            raise AttributeError(prim)

        def call(*inputs: Value, hint: str = "", **attrs):
            out = self.emit(prim, list(inputs), attrs, hint)
            return out[0] if len(out) == 1 else out
        return call

    def const(self, value, dtype: str) -> Value:
        """A scalar constant."""
        return self.emit("full", [], {"shape": (), "value": value, "dtype": dtype})[0]

    def zeros(self, t: TensorType, like: Value | None = None) -> Value:
        """Zeros of type `t`: a `full` when its dims are known once a call's inputs are
        (shapes.known_at_call), else zeros_like(like)."""
        if not known_at_call(t):
            if like is None:
                raise IRError(f"zeros of {t} need a value of that type to copy the shape of")
            return self.zeros_like(like)
        return self.emit("full", [], {"shape": t.shape, "value": 0, "dtype": t.dtype})[0]

    def total(self, values: list[Value]) -> Value:
        """The sum of one or more values of one type, as one op."""
        return values[0] if len(values) == 1 else self.add_n(*values)
