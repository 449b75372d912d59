"""The IR as text (what `mdlc emit --ir` shows):

    %h28: f32[B, 4], %hs27: f32[T, B, 4] = for(%xs0, %h2) {n_seq=1, ...}
      body(%x4: f32[B, 3], %h5: f32[B, 4]):
        %v10: f32[B, 16] = matmul(%x4, %W7)
        ...
        yield %h26, %h26
"""
from __future__ import annotations

from ..ir.dtypes import literal
from ..ir.graph import Block, Graph, Op, Value
from ..ir.shapes import Dim
from .entry import entry

INDENT = "  "


def name(v: Value) -> str:
    return f"%{v.hint or 'v'}{v.id}"


def typed(v: Value) -> str:
    return f"{name(v)}: {v.type}"


def _attr(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_attr(x) for x in value) + "]"
    if isinstance(value, Dim):
        return str(value)
    return str(value)


def format_op(op: Op, depth: int = 0) -> list[str]:
    """The lines of one op (and of the blocks it owns)."""
    pad = INDENT * depth
    attrs = ", ".join(f"{k}={_attr(v)}" for k, v in op.attrs.items())
    head = ", ".join(typed(v) for v in op.outputs)
    text = f"{op.prim}({', '.join(name(v) for v in op.inputs)})" + (f" {{{attrs}}}" if attrs
                                                                    else "")
    lines = [pad + (f"{head} = {text}" if head else text)]
    labels = entry(op).blocks
    for i, block in enumerate(op.blocks):
        label = labels[i] if i < len(labels) else f"block{i}"
        lines += format_block(block, label, depth + 1)
    return lines


def format_block(block: Block, label: str, depth: int) -> list[str]:
    pad = INDENT * depth
    lines = [f"{pad}{label}({', '.join(typed(v) for v in block.args)}):"]
    for op in block.ops:
        lines += format_op(op, depth + 1)
    lines.append(f"{pad}{INDENT}yield {', '.join(name(v) for v in block.results)}")
    return lines


def format_graph(graph: Graph) -> str:
    """A whole model: header, inputs, parameters, body, outputs, loss and gradients."""
    hp = ", ".join(f"{k}={literal(v)}" for k, v in graph.hparams.items())
    lines = [f"model {graph.name}({hp})"]
    lines += [f"{INDENT}input {k} = {typed(v)}" for k, v in graph.inputs.items()]
    lines += [f"{INDENT}param {k} = {typed(p.value)}" for k, p in graph.params.items()]
    for op in graph.body.ops:
        lines += format_op(op, 1)
    if graph.backward.ops:  # a vjp graph's backward takes the outputs' cotangents
        args = ", ".join(typed(v) for v in graph.backward.args)
        lines.append(f"{INDENT}backward({args}):" if args else f"{INDENT}backward:")
        for op in graph.backward.ops:
            lines += format_op(op, 2)
    lines += [f"{INDENT}output {k} = {name(v)}" for k, v in graph.outputs.items()]
    if graph.loss:
        lines.append(f"{INDENT}minimize {graph.loss}")
    lines += [f"{INDENT}grad param {k} = {name(v)}" for k, v in graph.param_grads.items()]
    lines += [f"{INDENT}grad input {k} = {name(v)}" for k, v in graph.input_grads.items()]
    return "\n".join(lines)
