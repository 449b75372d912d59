"""The IR verifier, run after every pass in tests: each value is defined once and before
it is read (a block reads its own values and those of the blocks around it); every
primitive's output types are what the table infers; structured ops have the attributes
and follow the conventions their entries declare (codegen/ops/structured/). A failure raises IRError showing the op."""
from __future__ import annotations

from ..ir.graph import Block, Graph, IRError, Op, Value, defined_here
from .entry import Broken, entry
from .printer import format_op, name


def verify(graph: Graph) -> None:
    """Check a whole graph; raise IRError on the first broken invariant."""
    roots = list(graph.inputs.values()) + [p.value for p in graph.params.values()]
    checker = _Checker()
    for v in roots:
        checker.define(v, None)
    scopes = [set(v.id for v in roots)]
    for block in graph.blocks():  # the backward sees the body's values
        checker.block(block, scopes)
        scopes.append(defined_here(block))
    outputs = scopes[0] | scopes[1]
    for key, v in graph.outputs.items():
        if v.id not in outputs:
            raise IRError(f"graph result `{key}` is {name(v)}, which the body does not define")
    for key, v in list(graph.param_grads.items()) + list(graph.input_grads.items()):
        if not any(v.id in s for s in scopes):
            raise IRError(f"gradient `{key}` is {name(v)}, which the graph does not define")


class _Checker:
    def __init__(self):
        self.defined: set[int] = set()

    def define(self, v: Value, op: Op | None) -> None:
        if v.id in self.defined:
            where = f" by\n{_show(op)}" if op else ""
            raise IRError(f"{name(v)} is defined twice{where}")
        self.defined.add(v.id)

    def block(self, block: Block, scopes: list[set[int]]) -> None:
        here: set[int] = set()
        for v in block.args:
            self.define(v, None)
            here.add(v.id)
        scopes = scopes + [here]
        for op in block.ops:
            for v in op.inputs:
                _visible(v, scopes, op)
            for sub in op.blocks:
                self.block(sub, scopes)
            self.op(op)
            for v in op.outputs:
                self.define(v, op)
                here.add(v.id)
        for v in block.results:
            if not any(v.id in s for s in scopes):
                raise IRError(f"a block yields {name(v)}, which is not visible there")

    def op(self, op: Op) -> None:
        try:
            entry(op).check(op)
        except (Broken, IRError) as exc:
            raise IRError(f"{exc} in\n{_show(op)}") from None


def _visible(v: Value, scopes: list[set[int]], op: Op) -> None:
    if not any(v.id in s for s in scopes):
        raise IRError(f"{name(v)} is read before it is defined, or outside its block, in\n"
                      f"{_show(op)}")


def _show(op: Op) -> str:
    return "\n".join(format_op(op, 1))

