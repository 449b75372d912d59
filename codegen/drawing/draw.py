"""A model as a Graphviz picture. Scopes are nested boxes; a parameter is one node in
the box of its full name, with an edge to every op that reads it (a shared parameter,
used from several places, is drawn once, in orange, with all its edges); inputs and
outputs stand outside every box; a for / if / while is a box holding a box per block,
entered through one node and left through another; chains of elementwise ops are one
node (codegen/drawing/groups.py). Scalar constants are written into the nodes that read
them rather than drawn."""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable

import graphviz

from dsl.imports import STD_ROOT

from ..ir.graph import Block, Graph, Op, Param, Value
from ..ops.entry import constant, entry
from ..ops.structured.table import StructuredOp
from . import labels
from .boxes import Box
from .groups import fuse, read_counts
from .scopes import Scope, relative

FONT = {"fontname": "Helvetica"}
INPUT = {"shape": "box", "style": "rounded,filled", "fillcolor": "#d8f0d8"}
OUTPUT = {"shape": "box", "style": "rounded,filled", "fillcolor": "#d8e4f8"}
GRADIENT = {"shape": "box", "style": "rounded,filled", "fillcolor": "#f6dcd6"}
PARAM = {"shape": "box", "style": "filled", "fillcolor": "#fff2c0"}
SHARED = {"shape": "box", "style": "filled,bold", "fillcolor": "#ffc470", "penwidth": "2"}
SHARED_EDGE = {"color": "#e08000", "penwidth": "1.6"}
OP = {"shape": "ellipse"}
ENTER = {"shape": "invtrapezium", "style": "filled", "fillcolor": "#e4e8f8"}
LEAVE = {"shape": "trapezium", "style": "filled", "fillcolor": "#e4e8f8"}
STRUCTURE = {"style": "dashed", "color": "#3050a0", "fontcolor": "#3050a0"}
BLOCK = {"style": "dotted", "color": "#3050a0", "fontcolor": "#3050a0"}
BACKWARD = {"style": "dashed", "color": "#a03030", "fontcolor": "#a03030"}


class Drawing:
    """Lays out one graph; `scope_of(op)` is the scope an op was written in (None:
    unknown, drawn where its block is)."""

    def __init__(self, graph: Graph, scope_of: Callable[[Op], Scope | None]):
        self.graph = graph
        self.scope_of = scope_of
        self.reads = read_counts(graph)
        self.root = Box("", {})
        self.source: dict[int, str] = {}        # value id -> the node that makes it
        self.constant: dict[int, object] = {}   # value id -> a scalar constant's number
        self.wires: list[tuple[str, list[Value]]] = []  # node, the values it reads
        self.shared: set[str] = set()           # nodes of shared parameters
        self.ids = itertools.count(1)

    def picture(self, title: str) -> graphviz.Digraph:
        g = self.graph
        for name, v in g.inputs.items():
            self.source[v.id] = self.root.node(f"input {name}", label=labels.lines(
                f"input {name}", str(v.type)), **INPUT)
        for p in g.params.values():
            self.param(p)
        self.block(g.body, self.root, ())
        if g.backward.ops:
            self.block(g.backward, self.root.box("backward", label="backward", **BACKWARD), ())
        for name, v in g.outputs.items():
            head = "minimize" if name == g.loss else "output"
            self.wire(self.root.node(f"output {name}", label=labels.lines(
                f"{head} {name}", str(v.type)), **OUTPUT), [v])
        for kind, grads in (("param", g.param_grads), ("input", g.input_grads)):
            for name, v in grads.items():
                self.wire(self.root.node(f"gradient {kind} {name}", label=labels.lines(
                    f"gradient of {name}", str(v.type)), **GRADIENT), [v])
        dot = graphviz.Digraph(g.name, graph_attr={
            "label": title, "labelloc": "t", "fontsize": "14", "rankdir": "TB",
            "newrank": "true", "nodesep": "0.25", "ranksep": "0.3", **FONT},
            node_attr={"fontsize": "10", "height": "0.3", "margin": "0.06,0.03", **FONT},
            edge_attr={"arrowsize": "0.6", "color": "#555555"})
        self.root.emit(dot)
        for (tail, head), attrs in self.edges().items():
            dot.edge(tail, head, **attrs)
        return dot

    def param(self, p: Param) -> None:
        """One node in the box of the parameter's full name; used from several places,
        it is drawn as shared."""
        shared = labels.is_shared(p)
        node = self.root.scope(tuple(p.name.split("/")[:-1])).node(
            f"param {p.name}", label=labels.param(p), **(SHARED if shared else PARAM),
            tooltip=f"{p.name} = {p.init}, used at " + ", ".join(str(u) for u in p.uses))
        self.source[p.value.id] = node
        if shared:
            self.shared.add(node)

    def block(self, block: Block, box: Box, base: Scope) -> None:
        """Draw the ops of `block` into `box`, whose ops were written in scope `base`."""
        def written_in(op: Op) -> Scope:
            path = self.scope_of(op)
            return base if path is None else path
        group = fuse(block, written_in, self.reads)
        members: dict[int, list[Op]] = {}
        for op in block.ops:
            into = box.scope(relative(written_in(op), base))
            if op.blocks:
                self.structured(op, entry(op), into, written_in(op))
            elif _scalar_constant(op):
                self.constant[op.outputs[0].id] = entry(op).uniform(op)
            else:
                sink = group[id(op)]
                members.setdefault(id(sink), []).append(op)
                if sink is op:
                    self.ops(members.pop(id(op)), into)

    def ops(self, members: list[Op], box: Box) -> None:
        """One node for `members`, a single op or a fused group."""
        reads = [v for op in members for v in op.inputs]
        constants = [self.constant[v.id] for v in reads if v.id in self.constant]
        last = members[-1]
        if constant(last):  # zeros[B, H]: say which number fills it
            constants.append(entry(last).uniform(last))
        node = box.node(f"op {next(self.ids)}", label=labels.ops(members, constants),
                        tooltip=_where(last), **OP)
        for op in members:
            for v in op.outputs:
                self.source[v.id] = node
        self.wire(node, reads)

    def structured(self, op: Op, entry: StructuredOp, box: Box, path: Scope) -> None:
        """A box for the op, entered through one node, left through another, holding a
        box per block."""
        key = f"{op.prim} {next(self.ids)}"
        outer = box.box(key, label=op.prim, **STRUCTURE)
        enter = outer.node(f"{key} enter", label=labels.structured(op, entry),
                           tooltip=_where(op), **ENTER)
        leave = outer.node(f"{key} leave", label=labels.values(op.outputs) if op.outputs
                           else "end", **LEAVE)
        self.wire(enter, op.inputs)
        for name, block in zip(entry.blocks, op.blocks):
            for v in block.args:
                self.source[v.id] = enter
            self.block(block, outer.box(f"{key} {name}", label=name, **BLOCK), path)
            self.wire(leave, block.results)
        for v in op.outputs:
            self.source[v.id] = leave

    def wire(self, node: str, values: list[Value]) -> None:
        self.wires.append((node, values))

    def edges(self) -> dict[tuple[str, str], dict[str, str]]:
        """One edge per (maker, reader) pair; none from a constant written into its
        reader, nor from a group to itself."""
        edges: dict[tuple[str, str], dict[str, str]] = {}
        for head, values in self.wires:
            for v in values:
                if v.id in self.constant:
                    continue
                tail = self.source[v.id]
                if tail != head:
                    edges.setdefault((tail, head), SHARED_EDGE if tail in self.shared else {})
        return edges


def _scalar_constant(op: Op) -> bool:
    return constant(op) and op.outputs[0].type.rank == 0


def _where(op: Op) -> str:
    """The op's source location for its tooltip: a standard library file as it is
    imported (`std/rnn.mdl`), another file relative to the working directory when it
    lies below it, else as it was given, as the parameters' "used at" names it (it was
    the absolute path, which a shared picture then carried)."""
    if op.loc is None:
        return op.prim
    path = Path(op.loc.source.path).resolve()
    for root in (STD_ROOT, Path.cwd()):
        if path.is_relative_to(root):
            return f"{path.relative_to(root)}:{op.loc.line}:{op.loc.col}"
    return str(op.loc)
