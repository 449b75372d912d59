"""Loop fission: a branch (an `if`, a `while`, a nested `for`) in a `for` body that does
not depend on the loop's state (a step's input decides it) runs as a loop of its own
before the loop, over the same sequences, and the loop reads what it made as sequences.
Done where a product of the loop then reads one of those (`v_t @ W`, with W loop-
invariant), which for_hoist.py moves out as one product over all steps: GRU with `if`
(`if s > 0 { v = tanh(x @ P) } else { v = 0.5 * x }; h = gru(v, h)`), whose steps read
P, W and U at every step, then read only U, and W once.

The `for` entry's rewrite (for_op.py) applies it to a plain loop (lengths lowered), and
for autodiff not to a loop that recomputes: the values moved out are kept for every step,
the memory such loops exist to save. Random ops never move (a mask is drawn per step
where the op lies).
"""
from __future__ import annotations

from ...ir.graph import Block, Op, Value, clone_ops, outer_reads, substitute, walk_ops
from ..builder import Builder
from ..entry import entry


def fissionable(loop: Op, autodiff: bool) -> bool:
    """Whether `loop` (plain, without lengths) has a branch to move out before it."""
    if autodiff and loop.attrs.get("recompute"):
        return False
    return _plan(loop) is not None


def fission(b: Builder, loop: Op) -> None:
    """Emit the moved ops as a loop of their own into `b`, then `loop`, which reads what
    they make as sequences."""
    first_ops, gone, crossing = _plan(loop)
    body, n_seq = loop.blocks[0], loop.attrs["n_seq"]
    read = {v.id for op in first_ops for v in outer_reads(op)}
    # a loop's sequences give its trip count: a first loop whose ops read none of them
    # (a nested loop over a whole sequence) still iterates over one
    slices = [k for k in range(n_seq) if body.args[k].id in read] or [0]
    mapping: dict[int, Value] = {}
    args = []
    for k in slices:
        mapping[body.args[k].id] = arg = Value(body.args[k].type, body.args[k].hint)
        args.append(arg)
    ops = clone_ops(first_ops, mapping)
    first = Block(args, ops, [mapping[v.id] for v in crossing])
    steps = loop.inputs[0].type.shape[0]
    stacked = b.structured("for", [loop.inputs[k] for k in slices],
                           [v.type.with_shape((steps,) + v.type.shape) for v in crossing],
                           {**loop.attrs, "n_seq": len(slices), "n_state": 0, "n_tape": 0,
                            "recompute": False, "checkpoint": 0, "lean": False, "skip": -1},
                           [first], [v.hint for v in crossing])
    body.ops = [op for op in body.ops if id(op) not in gone]
    into = {v.id: Value(v.type, v.hint) for v in crossing}
    substitute(body, into)
    body.args = body.args[:n_seq] + [into[v.id] for v in crossing] + body.args[n_seq:]
    loop.inputs = loop.inputs[:n_seq] + stacked + loop.inputs[n_seq:]
    loop.attrs["n_seq"] = n_seq + len(crossing)
    b.block.ops.append(loop)


def _plan(loop: Op) -> tuple[list[Op], set[int], list[Value]] | None:
    """(the body ops the first loop runs, in order; the ids of those that leave the
    loop, the rest being loop-invariant ops both run; the values the loop then reads
    from the first), or None where nothing is worth moving."""
    body, n_seq = loop.blocks[0], loop.attrs["n_seq"]
    if loop.attrs["n_state"] == 0:
        return None  # nothing carried from step to step: nothing to split from
    varying = {v.id for v in body.args[n_seq:]}  # the state, and what depends on it
    steps = {v.id for v in body.args[:n_seq]}    # what differs from step to step
    free, invariant = [], set()
    for op in body.ops:
        reads = outer_reads(op)
        if any(v.id in varying for v in reads):
            varying.update(v.id for v in op.outputs)
            continue
        free.append(op)
        if any(v.id in steps for v in reads) or op.blocks or entry(op).random:
            steps.update(v.id for v in op.outputs)
        else:
            invariant.add(id(op))  # the same at every step (a constant): both loops run it
    producer = {v.id: op for op in free for v in op.outputs}
    first: set[int] = set()
    stack = [op for op in free if op.blocks]
    while stack:  # the branches, and the state-free ops they read
        op = stack.pop()
        if id(op) in first:
            continue
        first.add(id(op))
        stack.extend(producer[v.id] for v in outer_reads(op) if v.id in producer)
    ops = [op for op in body.ops if id(op) in first]
    if not ops or any(entry(o).random for op in ops
                      for o in [op, *(x for b in op.blocks for x in walk_ops(b))]):
        return None
    gone = {id(op) for op in ops if id(op) not in invariant}
    made = {v.id for op in ops if id(op) in gone for v in op.outputs}
    rest = [op for op in body.ops if id(op) not in gone]
    crossing = {v.id: v for op in rest for v in outer_reads(op) if v.id in made}
    crossing.update((v.id, v) for v in body.results if v.id in made)
    inside = {v.id for v in body.args} | {v.id for op in body.ops for v in op.outputs}
    batched = [op for op in rest if entry(op).product and op.inputs[0].id in crossing
               and op.inputs[1].id not in inside and op.inputs[0].type.rank == 2]
    return (ops, gone, list(crossing.values())) if batched else None
