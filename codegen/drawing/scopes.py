"""Where each op of a model was written: the scope path (`scope` blocks and the child
scopes calls open) that stood around it when the front end emitted it.

The IR keeps no scopes on its ops, so the picture watches elaboration instead: the model
is checked as usual (its errors, warnings and choice of model), then elaborated once
more by an Elaborator that notes the scope of every op it appends. The path noted is
the one the code stands in, before `share` remaps it: an op in scope `b` that reads
`a/w` through `share (b = a)` is drawn in `b`, with an edge from `a/w`, which makes the
sharing visible.

Gradient ops carry the source location of the op they differentiate; `by_location`
gives them the scope the forward ops at that location share.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

from dsl import check_file
from dsl.elaborate import Elaborator
from dsl.program import load_program, read_source

from ..ir.diagnostics import Diagnostic
from ..ir.graph import Graph, Op, walk_ops

Scope = tuple[str, ...]
DEEP_CALLS = 20000  # the recursion limit dsl.elaborate sets for deeply nested calls


class _ScopeRecorder(Elaborator):
    """The front end's Elaborator, noting the scope path of every op it appends."""

    def __init__(self, *args):
        super().__init__(*args)
        self.scope_of: dict[int, Scope] = {}

    def emit(self, prim, inputs, attrs, loc, hint=""):
        outputs = super().emit(prim, inputs, attrs, loc, hint)
        self.scope_of[id(self.block.ops[-1])] = self.scopes.frame.path
        return outputs

    def run_block(self, stmts):
        # for / if / while are appended by the statement that makes them, in the scope
        # the statement stands in, which is still the current one when it returns
        block, start = self.block, len(self.block.ops)
        super().run_block(stmts)
        for op in block.ops[start:]:
            self.scope_of.setdefault(id(op), self.scopes.frame.path)


@dataclass
class ScopedModel:
    """A checked model, the scope path of each of its ops (by id), and its warnings."""
    graph: Graph
    scope_of: dict[int, Scope]
    warnings: list[Diagnostic]

    def forward_scopes(self) -> Callable[[Op], Scope | None]:
        """The scope of an op of `graph` itself."""
        return lambda op: self.scope_of.get(id(op))

    def by_location(self) -> Callable[[Op], Scope | None]:
        """The scope of an op of a graph derived from `graph` (its gradient program): the
        longest path shared by the forward ops written at the op's source location (a
        function called in several scopes has its ops in all of them); None for ops no
        source location tells."""
        paths: dict[Any, list[Scope]] = {}
        for op in walk_ops(self.graph.body):
            if op.loc is not None and id(op) in self.scope_of:
                paths.setdefault(op.loc, []).append(self.scope_of[id(op)])
        common = {loc: _common_prefix(ps) for loc, ps in paths.items()}
        return lambda op: common.get(op.loc)


def scoped_model(path: str, defines: dict[str, Any] | None = None, model: str | None = None,
                 dtype: str = "f32") -> ScopedModel:
    """Check `model` of the file at `path` (MdlError, UsageError as `dsl.check_file`) and
    find the scope of each of its ops."""
    checked = check_file(path, defines=defines, model=model, dtype=dtype)
    program = load_program(read_source(path), path)
    recorder = _ScopeRecorder(program, dtype)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, DEEP_CALLS))
    try:
        graph = recorder.model(program.models[checked.graph.name], defines or {})
    finally:
        sys.setrecursionlimit(limit)
    return ScopedModel(graph, recorder.scope_of, checked.warnings)


def _common_prefix(paths: list[Scope]) -> Scope:
    first = paths[0]
    for i, part in enumerate(first):
        if any(len(p) <= i or p[i] != part for p in paths[1:]):
            return first[:i]
    return first


def relative(path: Scope, base: Scope) -> Scope:
    """`path` seen from inside `base`: what remains after the part they share."""
    shared = _common_prefix([path, base])
    return path[len(shared):]
