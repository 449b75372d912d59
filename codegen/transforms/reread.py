"""Forward values the backward pass reads again from where it computes them anew.

The backward of a loop that recomputes (`recompute`, and the loop over segments that
`checkpoint = k` becomes) re-runs the loop's steps, so it can yield again what the forward
loop yielded (the `for` rule asks for that: codegen/ops/structured/for_op.py, and records
the pairs in the builder's `again`). Where the backward reads a forward yield, or a
selection of it (`unsegment`, a reshape, a slice: ops whose entry `selects`, whose other
operands are inputs or parameters), only after that loop, it reads the recomputed one
instead: the forward no longer keeps the yield for the backward, and a gradient equal to
it (d loss / d weights of `sum(hs * weights)` is hs) is computed into memory of its own
rather than copied out of the forward's.

    reread(graph, again)    rewrite the joint graph's backward block in place

Reads that the loop itself depends on (a second loop reading hs as its sequence, whose
backward gives the first its cotangents) stay on the forward value. Pairs nobody uses
leave yields that dead-code elimination drops.
"""
from __future__ import annotations

from ..ir.graph import Block, Graph, IRError, Op, Value, clone_ops, outer_reads, substitute
from ..ops.entry import entry


def reread(graph: Graph, again: list[tuple[Value, Value]]) -> None:
    """For each (backward value, equal forward value) pair, move the backward's reads of
    the forward value (and of selections of it) to the backward value."""
    for anew, old in again:
        if anew.type != old.type:
            raise IRError(f"{anew!r} cannot stand for {old!r}")
        _reread(graph, anew, old)


def _reread(graph: Graph, anew: Value, old: Value) -> None:
    ops = graph.backward.ops
    where = next((i for i, op in enumerate(ops) if any(v is anew for v in op.outputs)), None)
    if where is None:
        return  # made inside a nested block: its pairs are not this block's
    chains = _selections(graph, old)
    readers = [i for i, op in enumerate(ops) if any(v.id in chains for v in outer_reads(op))]
    if not readers and not any(v.id in chains for _, v in _gradients(graph)):
        return
    moved = _dependents(ops, readers)
    if moved & _ancestors(ops, where):
        return  # the loop needs what reads the forward value: it stays
    read = {v.id for i in moved for v in outer_reads(ops[i]) if v.id in chains}
    read |= {v.id for _, v in _gradients(graph) if v.id in chains}
    mapping = {old.id: anew}
    made = clone_ops(_chain(graph, old, read), mapping)
    swap = {i: mapping[i] for i in read}
    substitute(Block(ops=[ops[i] for i in moved]), swap)
    for grads in (graph.param_grads, graph.input_grads):
        for key, v in grads.items():
            grads[key] = swap.get(v.id, v)
    # the moved reads that came before the loop now follow it; later ops keep their order
    graph.backward.ops = ([op for i, op in enumerate(ops[:where + 1]) if i not in moved]
                          + made + [ops[i] for i in sorted(moved) if i < where]
                          + ops[where + 1:])


def _selections(graph: Graph, old: Value) -> dict[int, Value]:
    """The forward values that select from `old` (it included), by id: each made by an op
    whose entry `selects` from its first operand, every other operand an input or a
    parameter (alive all through the backward)."""
    lasting = {v.id for v in graph.inputs.values()} | {p.value.id for p in graph.params.values()}
    chains = {old.id: old}
    for op in graph.body.ops:
        if (op.inputs and op.inputs[0].id in chains and entry(op).selects and not op.blocks
                and all(v.id in lasting for v in op.inputs[1:])):
            chains.update((v.id, v) for v in op.outputs)
    return chains


def _chain(graph: Graph, old: Value, read: set[int]) -> list[Op]:
    """The forward selection ops on the way from `old` to the values `read`, in order."""
    producer = {v.id: op for op in graph.body.ops for v in op.outputs}
    need: set[int] = set()
    stack = [i for i in read if i != old.id]
    while stack:
        op = producer[stack.pop()]
        if id(op) not in need:
            need.add(id(op))
            if op.inputs[0].id != old.id:
                stack.append(op.inputs[0].id)
    return [op for op in graph.body.ops if id(op) in need]


def _gradients(graph: Graph) -> list[tuple[str, Value]]:
    return list(graph.param_grads.items()) + list(graph.input_grads.items())


def _dependents(ops: list[Op], start: list[int]) -> set[int]:
    """Indices of the ops in `start` and of every later op reading what they make."""
    out = set(start)
    made = {v.id for i in start for v in ops[i].outputs}
    for i in range(min(start, default=len(ops)), len(ops)):
        if i not in out and any(v.id in made for v in outer_reads(ops[i])):
            out.add(i)
            made.update(v.id for v in ops[i].outputs)
    return out


def _ancestors(ops: list[Op], end: int) -> set[int]:
    """Indices of the ops that the op at `end` depends on, through what they make."""
    producer = {v.id: i for i, op in enumerate(ops[:end]) for v in op.outputs}
    out: set[int] = set()
    stack = [end]
    while stack:
        for v in outer_reads(ops[stack.pop()]):
            i = producer.get(v.id)
            if i is not None and i not in out:
                out.add(i)
                stack.append(i)
    return out
