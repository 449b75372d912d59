"""Products over time: a `for` body's matrix products of a step's sequence slice by a
loop-invariant matrix (`x_t @ W`), and the pointwise ops that follow them using only
such products, slices and loop-invariant values, move out of the loop as one product
over every step (`xs @ W`, [T, B, I] @ [I, N]) that the loop reads as one more sequence.
Caffe2's MILSTM does this by hand (seed 002's "initial bulk fully-connected"): one big
GEMM instead of T small ones; differentiated, the weight's gradient becomes one GEMM over
all steps instead of a rank-B update per step.

A branch's condition computed from slices alone, pointwise or by reductions of a step
(`if s > 0.0`, s a step of `signs`; `if mean(x) > 0.0`), moves out too, over every step
(`signs > 0.0`; `mean(xs)` over each step's axes `> 0.0`): the loop then takes its
conditions as one more sequence, which a target whose memory is a device's reads to the
host once a loop instead of once a step (control_flow.py), and the backward reads them as
they are instead of from a tape.

The `for` entry's rewrite (for_op.py) applies it to a plain loop (lengths already
lowered: padding steps compute products nobody reads) after the loops nested in it. For
autodiff, a loop that recomputes its body (`recompute`, the segments of a `checkpoint`)
keeps its products inside: hoisted out, a product over all steps would be stored in full,
the memory such loops exist to save.
"""
from __future__ import annotations

from ...ir.graph import Block, Op, Value, substitute, use_counts, walk_ops
from ...ir.shapes import ragged_rows
from ..builder import Builder
from ..entry import constant, entry
from ..primitives import ShapeError


def movable(loop: Op, autodiff: bool) -> bool:
    """Whether `loop` (plain, without lengths) has a product to move out."""
    if autodiff and loop.attrs.get("recompute"):
        return False
    return bool(_plan(loop, Builder(Block([], [], [])))[0])


def hoist(b: Builder, loop: Op) -> None:
    """Emit the moved products into `b`, then `loop`, which reads them as sequences."""
    moved, stay = _plan(loop, b)
    body, n_seq = loop.blocks[0], loop.attrs["n_seq"]
    body.ops = stay
    read = use_counts(body)
    mapping: dict[int, Value] = {}
    for value, steps in moved:
        if value.id in read:  # else only other moved ops read it
            mapping[value.id] = arg = Value(value.type, value.hint)
            body.args = body.args[:n_seq] + [arg] + body.args[n_seq:]
            loop.inputs = loop.inputs[:n_seq] + [steps] + loop.inputs[n_seq:]
            n_seq += 1
    loop.attrs["n_seq"] = n_seq
    substitute(body, mapping)
    b.block.ops.append(loop)


def _plan(loop: Op, b: Builder) -> tuple[list[tuple[Value, Value]], list[Op]]:
    """What moves ((body value, its value for every step) pairs; the ops computing the
    latter are appended to `b`) and the body ops that stay."""
    body, n_seq = loop.blocks[0], loop.attrs["n_seq"]
    inside = {v.id for v in body.args}
    for op in walk_ops(body):
        inside.update(v.id for v in op.outputs)
        inside.update(v.id for sub in op.blocks for v in sub.args)
    steps = {body.args[k].id: loop.inputs[k] for k in range(n_seq)
             if ragged_rows(loop.inputs[k].type) is None}  # (a ragged one's steps differ)
    # the body's constants (`0.0` in `s > 0.0`): a moved op reads a copy made outside
    constants = {op.outputs[0].id: op for op in body.ops if constant(op)}
    products: set[int] = set()  # values that come from a moved product
    conditions = _conditions(body)
    moved, stay = [], []
    for op in body.ops:
        for v in op.inputs:
            if v.id in constants and v.id in inside and _reads_steps(op, steps, inside):
                inside.discard(v.id)
                c = constants[v.id]
                steps[v.id] = b.emit(c.prim, [], c.attrs, v.hint)[0]
        out = _over_steps(op, steps, products, conditions, inside, b)
        if out is None:
            stay.append(op)
            continue
        steps[op.outputs[0].id] = out
        products.add(op.outputs[0].id)
        moved.append((op.outputs[0], out))
    return moved, stay


def _reads_steps(op: Op, steps: dict[int, Value], inside: set[int]) -> bool:
    """Whether `op` reads values of the body that are known for every step."""
    return any(v.id in inside and v.id in steps for v in op.inputs)


def _conditions(body: Block) -> set[int]:
    """The body's values read only to decide its branches: an `if`'s condition, and the
    values of pointwise ops and reductions that only such values read."""
    uses = use_counts(body)
    deciding: dict[int, int] = {}  # value id -> its reads by branches' conditions
    for op in body.ops:
        if entry(op).branches:
            deciding[op.inputs[0].id] = deciding.get(op.inputs[0].id, 0) + 1
    only: set[int] = set()
    for op in reversed(body.ops):  # a value's readers come after it
        if len(op.outputs) != 1 or not (entry(op).elementwise or entry(op).reduces):
            continue
        out = op.outputs[0]
        if deciding.get(out.id, 0) == uses.get(out.id, 0) > 0:
            only.add(out.id)
            for v in op.inputs:
                deciding[v.id] = deciding.get(v.id, 0) + 1
    return only


def _over_steps(op: Op, steps: dict[int, Value], products: set[int], conditions: set[int],
                inside: set[int], b: Builder) -> Value | None:
    """`op` computed for every step at once (appended to `b`), or None where it stays."""
    prim, attrs = entry(op), op.attrs
    if prim.random or op.blocks or len(op.outputs) != 1:
        return None
    varying = [v for v in op.inputs if v.id in inside]
    if not varying or any(v.id not in steps for v in varying):
        return None  # reads a state, or a value computed from one
    out = op.outputs[0]
    if prim.product:  # rows of every step at once, when the matrix stays the same
        x, w = op.inputs
        if w.id in inside or x.type.rank != 2:
            return None
    elif prim.elementwise:
        if not any(v.id in products for v in varying) and out.id not in conditions:
            return None  # pointwise work on slices alone gains nothing from batching
        if any(v.type.rank != out.type.rank for v in varying) or any(
                v.type.rank > out.type.rank for v in op.inputs if v.id not in inside):
            return None  # broadcasting against the leading step dim would misalign
    elif prim.reduces and out.id in conditions:  # `mean(x) > 0.0`: over each step's axes
        attrs = {**attrs, "axes": tuple(a + 1 for a in attrs["axes"])}
    else:
        return None
    inputs = [steps.get(v.id, v) for v in op.inputs]
    count = steps[varying[0].id].type.shape[0]
    try:
        types = prim.infer([v.type for v in inputs], attrs)
    except ShapeError:
        return None
    if types != [out.type.with_shape((count,) + out.type.shape)]:
        return None
    with b.at(op.loc):
        return b.emit(op.prim, inputs, attrs, out.hint)[0]
