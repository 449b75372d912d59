"""Passes over forward and backward graphs: constant folding, algebraic simplification,
common-subexpression elimination and dead-code elimination. Each one rewrites a graph in
place and knows no op by name: folding evaluates the table's NumPy references,
simplification applies the table's identities, CSE merges ops that are equal by
primitive, operands and attrs (random ops never), DCE drops unused ops and unused
outputs of structured ops (the tapes nobody reads), but not the checks of a call's data
(an `assert`: its result is never read) nor the loops and branches they stand in.

    optimize(graph, check=None)     all of them until nothing changes; `check(graph)`
                                    (the verifier, in tests) runs after every pass
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..ir.graph import Block, Graph, Op, Value, free_values, has_dynamic, use_counts
from ..ir.shapes import Dim
from ..ops.builder import Builder
from ..ops.context import Context
from ..ops.entry import entry

MAX_ROUNDS = 8


def optimize(graph: Graph, check: Callable[[Graph], None] | None = None) -> None:
    """Run every pass until the graph stops shrinking."""
    for _ in range(MAX_ROUNDS):
        before = sum(_count(block) for block in graph.blocks())
        for run in (fold_constants, simplify, cse, dce):
            run(graph)
            if check is not None:
                check(graph)
        if sum(_count(block) for block in graph.blocks()) == before:
            return


def _count(block: Block) -> int:
    return sum(1 + sum(_count(b) for b in op.blocks) for op in block.ops)


# ---- the rewriting walk shared by folding, simplification and CSE ------------------------
class Facts:
    """What a rewrite may know about a value: the op producing it, its constant, how
    many times the graph reads it (counted when the pass starts)."""

    def __init__(self, graph: Graph | None = None):
        self.producers: dict[int, Op] = {}
        self.uses: dict[int, int] = _reads(graph) if graph is not None else {}

    def producer(self, v: Value) -> Op | None:
        return self.producers.get(v.id)

    def const(self, v: Value):
        """The number every element of v holds when that is known, else None."""
        op = self.producers.get(v.id)
        if op is None:
            return None
        prim = entry(op)
        if prim.uniform is not None:
            value = prim.uniform(op)
            if isinstance(value, Dim):
                return value.value if value.is_const else None
            return value
        return self.const(op.inputs[0]) if prim.selects else None


Rewrite = Callable[[Builder, Op, Facts], list[Value] | None]


def _rewrite_graph(graph: Graph, rewrite: Rewrite) -> None:
    """Offer every op to `rewrite`; where it returns values, they replace the op's
    outputs (new ops it emitted are kept in place of the op)."""
    replace: dict[int, Value] = {}
    facts = Facts(graph)  # the backward sees what the forward made
    for block in graph.blocks():
        _rewrite_block(block, rewrite, facts, replace)
    _remap_results(graph, replace)


def _reads(graph: Graph) -> dict[int, int]:
    """How many times each value is read: in the graph's blocks (`use_counts`) and as a
    named result of the graph."""
    count: dict[int, int] = {}
    for top in graph.blocks():
        for k, n in use_counts(top).items():
            count[k] = count.get(k, 0) + n
    for named in (graph.outputs, graph.param_grads, graph.input_grads):
        for v in named.values():
            count[v.id] = count.get(v.id, 0) + 1
    return count


def _remap_results(graph: Graph, replace: dict[int, Value]) -> None:
    """Point the graph's named results at the values that replaced them."""
    for named in (graph.outputs, graph.param_grads, graph.input_grads):
        for k, v in named.items():
            named[k] = replace.get(v.id, v)


def _rewrite_block(block: Block, rewrite: Rewrite, facts: Facts,
                   replace: dict[int, Value]) -> None:
    ops, block.ops = block.ops, []
    b = Builder(block)
    for op in ops:
        op.inputs = [replace.get(v.id, v) for v in op.inputs]
        for sub in op.blocks:
            _rewrite_block(sub, rewrite, facts, replace)
        b.loc = op.loc
        start = len(block.ops)
        new = rewrite(b, op, facts)
        if new is None:
            del block.ops[start:]
            block.ops.append(op)
            for v in op.outputs:
                facts.producers[v.id] = op
            continue
        for emitted in block.ops[start:]:
            for v in emitted.outputs:
                facts.producers[v.id] = emitted
        for old, value in zip(op.outputs, new):
            replace[old.id] = replace.get(value.id, value)
    block.results = [replace.get(v.id, v) for v in block.results]


# ---- folding, simplification -------------------------------------------------------------
def fold_constants(graph: Graph) -> None:
    """An elementwise op on uniform constants becomes one `full`."""
    _rewrite_graph(graph, _fold)


def _fold(b: Builder, op: Op, facts: Facts):
    if op.blocks:
        return None
    prim = entry(op)
    out = op.outputs[0]
    if not prim.elementwise or prim.random or not op.inputs or has_dynamic(out.type):
        return None
    consts = [facts.const(v) for v in op.inputs]
    if any(c is None for c in consts):
        return None
    ctx = Context({}, np.float64, False, 0)
    arrays = [np.asarray(c, ctx.np_dtype(v.type.dtype)) for c, v in zip(consts, op.inputs)]
    with np.errstate(all="ignore"):
        value = np.asarray(prim.ref(ctx, op.attrs, *arrays)).item()
    return [b.emit("full", [], {"shape": out.type.shape, "value": value,
                                "dtype": out.type.dtype}, out.hint)[0]]


def simplify(graph: Graph) -> None:
    """Apply the algebraic identities of the table (x + 0, x * 1, neg(neg(x)), ...) and
    the structured ops' own rewrites (a loop's sums over time moved after it)."""
    _rewrite_graph(graph, _simplify)


def _simplify(b: Builder, op: Op, facts: Facts):
    rules = entry(op)
    return rules.simplify(b, op, facts) if rules.simplify else None


# ---- common subexpressions ---------------------------------------------------------------
def cse(graph: Graph) -> None:
    """Reuse the first of several ops with equal primitive, operands and attrs; an op in a
    block may reuse one of an enclosing block."""
    replace: dict[int, Value] = {}
    seen: dict = {}  # the backward may reuse what the forward computed
    for block in graph.blocks():
        _cse_block(block, seen, replace)
    _remap_results(graph, replace)


def _cse_block(block: Block, seen: dict, replace: dict[int, Value]) -> None:
    """CSE in `block`, which learns into `seen` (a nested block gets a copy: its values
    are not visible after it)."""
    kept = []
    for op in block.ops:
        op.inputs = [replace.get(v.id, v) for v in op.inputs]
        for sub in op.blocks:
            _cse_block(sub, dict(seen), replace)
        if op.blocks or entry(op).random:
            kept.append(op)
            continue
        key = (op.prim, tuple(v.id for v in op.inputs), _attrs_key(op.attrs))
        if key in seen:
            for old, new in zip(op.outputs, seen[key].outputs):
                replace[old.id] = new
            continue
        seen[key] = op
        kept.append(op)
    block.ops = kept
    block.results = [replace.get(v.id, v) for v in block.results]


def _attrs_key(attrs: dict) -> str:
    # dtype of the value matters: full(0) of f32 and of i32 differ only there
    return repr(sorted((k, v, type(v).__name__) for k, v in attrs.items()))


# ---- dead code ---------------------------------------------------------------------------
def dce(graph: Graph) -> None:
    """Drop ops whose outputs nobody reads, and the unread outputs of structured ops."""
    live = {v.id for named in (graph.outputs, graph.param_grads, graph.input_grads)
            for v in named.values()}
    _dce_block(graph.backward, live)
    _dce_block(graph.body, live | {v.id for v in free_values(graph.backward)})


def holds_checks(op: Op) -> bool:
    """Whether `op` checks the call's data (an assert), or is a loop or branch with such a
    check in its body: kept with every output unread."""
    return entry(op).checks or any(holds_checks(o) for sub in op.blocks for o in sub.ops)


def _dce_block(block: Block, live: set[int]) -> None:
    live = live | {v.id for v in block.results}
    kept = []
    for op in reversed(block.ops):
        if not any(v.id in live for v in op.outputs) and not holds_checks(op):
            continue
        entry(op).trim(op, live)
        if op.blocks:
            for sub in op.blocks:
                _dce_block(sub, set())
            live.update(v.id for sub in op.blocks for v in free_values(sub))
        live.update(v.id for v in op.inputs)
        kept.append(op)
    block.ops = kept[::-1]
