"""Reverse-mode autodiff: one generic walk over the ops of a block, driven by the
primitive table's gradient rules and, for for/if/while, the structured ops' table's.

Cotangents are IR values. A value read by several ops collects one contribution per
read and sums them once, with one `add_n`, when its cotangent is first needed (all its
readers come later in the block, so they have all been visited by then). Only ops that
depend on a value we differentiate with respect to are visited.

    vjp(block, outputs, cotangents, wrt) -> [cotangent or None per wrt]
    grad_graph(graph) -> Graph    forward and backward of the minimized output
    vjp_graph(graph) -> Graph     forward and vector-Jacobian product: the backward
                                  block takes a cotangent per float output (its args)
"""
from __future__ import annotations

from ..ir.graph import Block, Graph, IRError, Op, Value, clone_graph, outer_reads
from ..ops.builder import Builder
from ..ops.entry import entry
from ..ops.structured.regions import GradientError
from .prepare import prepare
from .reread import reread

__all__ = ["GradientError", "backprop", "cotangent_names", "grad_graph", "vjp", "vjp_graph"]


def vjp(block: Block, outputs: list[Value], cotangents: list[Value], wrt: list[Value]
        ) -> list[Value | None]:
    """Append to `block` the ops computing the cotangents of `wrt` given `cotangents`
    of `outputs` (None where no path leads). The forward ops are first put in the form
    autodiff handles (loops with lengths and checkpoints lowered, dropout expanded), and
    structured ops on the path gain tape outputs. Gradient rules are IR, so the ops
    appended can be differentiated again."""
    prepare(block)
    return backprop(Builder(block), list(block.ops), list(zip(outputs, cotangents)), wrt)


def backprop(b: Builder, ops: list[Op], seeds: list[tuple[Value, Value]], wrt: list[Value]
             ) -> list[Value | None]:
    """The generic walk: emit with `b` the cotangents of `wrt` through `ops`."""
    active = _active(ops, wrt)
    acc = _Cotangents(b)
    for v, ct in seeds:
        acc.add(v, ct)
    for op in reversed(ops):
        if not any(acc.has(v) and v.id in active for v in op.outputs):
            continue
        b.loc = op.loc
        out_cts = [acc.total(v) for v in op.outputs]
        in_cts, captured = entry(op).gradient(b, op, out_cts, active, backprop)
        for v, ct in list(zip(op.inputs, in_cts)) + list(captured):
            if ct is not None and v.id in active:
                acc.add(v, ct)
    return [acc.total(v) for v in wrt]


def _active(ops: list[Op], wrt: list[Value]) -> set[int]:
    """Ids of the float values that depend on `wrt` (through inputs or captures)."""
    active = {v.id for v in wrt}
    for op in ops:
        if any(v.id in active for v in outer_reads(op)):
            active.update(v.id for v in op.outputs if v.type.is_float)
    return active


class _Cotangents:
    """Contributions per value, summed once on first use."""

    def __init__(self, b: Builder):
        self.b = b
        self.parts: dict[int, list[Value]] = {}

    def add(self, v: Value, ct: Value) -> None:
        if ct.type != v.type:
            raise IRError(f"a cotangent of {v!r} has type {ct.type}")
        self.parts.setdefault(v.id, []).append(ct)

    def has(self, v: Value) -> bool:
        return v.id in self.parts

    def total(self, v: Value) -> Value | None:
        parts = self.parts.get(v.id)
        if not parts:
            return None
        if len(parts) > 1:
            self.parts[v.id] = parts = [self.b.total(parts)]
        return parts[0]


def grad_graph(graph: Graph) -> Graph:
    """A copy of `graph` that also computes the gradient of its minimized output w.r.t.
    every trainable parameter (`param_grads`) and float input (`input_grads`). Not
    simplified: codegen.pipeline.differentiate runs the passes after it."""
    if graph.loss is None:
        raise GradientError(f"model `{graph.name}` minimizes no output, so it has no "
                            "gradients (add `minimize NAME`)")

    def seeds(g: Graph, b: Builder) -> list[tuple[Value, Value]]:
        loss = g.outputs[g.loss]
        return [(loss, b.const(1, loss.type.dtype))]
    return _joint(graph, seeds)


def vjp_graph(graph: Graph) -> Graph:
    """A copy of `graph` whose backward block takes a cotangent for each float output
    (its args, in the order of `cotangent_names`) and computes the vector-Jacobian
    product: the gradient of sum(cotangent * output) over those outputs w.r.t. every
    trainable parameter and float input. What a model needs to sit inside another
    framework's autodiff (codegen.pytorch); `minimize` plays no part. Not simplified."""
    names = cotangent_names(graph)
    if not names:
        raise GradientError(f"model `{graph.name}` has no float output, so there is "
                            "nothing to differentiate")

    def seeds(g: Graph, b: Builder) -> list[tuple[Value, Value]]:
        outputs = [g.outputs[k] for k in names]
        g.backward.args = [Value(v.type, f"d_{k}") for k, v in zip(names, outputs)]
        return list(zip(outputs, g.backward.args))
    return _joint(graph, seeds)


def cotangent_names(graph: Graph) -> list[str]:
    """The outputs a vjp graph's backward takes cotangents of: every float output, in
    declaration order."""
    return [k for k, v in graph.outputs.items() if v.type.is_float]


def _joint(graph: Graph, seeds) -> Graph:
    """A prepared copy of `graph` whose backward block holds the cotangents of every
    trainable parameter and float input, given `seeds(copy, builder)`: (output value,
    its cotangent) pairs emitted into the backward block."""
    g = clone_graph(graph)
    params = {k: p.value for k, p in g.params.items() if p.trainable}
    inputs = {k: v for k, v in g.inputs.items() if v.type.is_float}
    prepare(g.body)
    b = Builder(g.backward)  # the forward ends here: the backward is a block of its own
    wrt = list(params.values()) + list(inputs.values())
    cts = backprop(b, list(g.body.ops), seeds(g, b), wrt)
    cts = [ct if ct is not None else b.zeros(v.type) for v, ct in zip(wrt, cts)]
    g.param_grads = dict(zip(params, cts[:len(params)]))
    g.input_grads = dict(zip(inputs, cts[len(params):]))
    reread(g, b.again)
    return g
