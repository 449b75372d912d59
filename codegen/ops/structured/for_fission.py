"""Loop fission: ops of a `for` body that do not depend on some of the loop's state run
as a loop of their own before the loop, over the same sequences, and the loop reads what
they made as sequences. Done where a product of the second loop then reads one of those
(`v_t @ W`, with W loop-invariant), which for_hoist.py moves out as one product over all
steps. Two cases:

- a branch (an `if`, a `while`, a nested `for`) that reads no state (a step's input
  decides it), with the state-free ops it reads: GRU with `if` (`if s > 0 { v = tanh(x @
  P) } else { v = 0.5 * x }; h = gru(v, h)`), whose steps read P, W and U at every step,
  then read only U, and W once;
- layers: states whose new values read only each other (a stacked RNN's first layer,
  `h1, c1`) run, with what they read, as a loop that carries them; the rest of the body,
  which reads their new values (`h1 @ W2`), is the second loop, which may split again
  (a third layer). Each layer's input product is then one product over all steps.

The `for` entry's rewrite (for_op.py) applies it to a plain loop (lengths lowered), and
for autodiff not to a loop that recomputes: the values moved out are kept for every step,
the memory such loops exist to save. A branch's random ops never move. A layer's do (a
dropout between two layers): a random op draws from its own stream (its salt), each draw
where the last ended, so it draws the same masks in whichever loop it runs once a step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.graph import Block, Op, Value, clone_ops, outer_reads, substitute, walk_ops
from ...ir.shapes import ragged_rows, stack_type
from ..builder import Builder
from ..entry import entry


@dataclass
class _Plan:
    ops: list[Op]          # the body ops the first loop runs, in order
    gone: set[int]         # the ids of those that leave the loop (the rest: invariant)
    crossing: list[Value]  # the values the second loop reads from the first, stacked
    carried: list[int] = field(default_factory=list)  # the states the first loop carries


def fissionable(loop: Op, autodiff: bool) -> bool:
    """Whether `loop` (plain, without lengths) has ops to move out before it."""
    if autodiff and loop.attrs.get("recompute"):
        return False
    return _plan(loop) is not None


def fission(b: Builder, loop: Op) -> None:
    """Emit the moved ops as a loop of their own into `b`, then `loop`, which reads what
    they make as sequences and no longer carries the states they carry."""
    plan = _plan(loop)
    assert plan is not None
    body, n_seq, n_state = loop.blocks[0], loop.attrs["n_seq"], loop.attrs["n_state"]
    states = body.args[n_seq:]
    carried_results = [body.results[i] for i in plan.carried]
    read = {v.id for op in plan.ops for v in outer_reads(op)} | {v.id for v in carried_results}
    # a loop's first sequence gives its trip count: a first loop whose ops read none of
    # them (a nested loop over a whole sequence), or whose first is ragged (its steps'
    # sizes differ: shapes.step_type), still iterates over the loop's first
    slices = [k for k in range(n_seq) if body.args[k].id in read]
    if not slices or ragged_rows(loop.inputs[slices[0]].type):
        slices = [0] + slices
    mapping: dict[int, Value] = {}
    args = []
    for v in [body.args[k] for k in slices] + [states[i] for i in plan.carried]:
        mapping[v.id] = arg = Value(v.type, v.hint)
        args.append(arg)
    ops = clone_ops(plan.ops, mapping)
    first = Block(args, ops, [mapping.get(v.id, v) for v in carried_results + plan.crossing])
    steps = loop.inputs[0].type.shape[0]
    stacked = b.structured(
        "for", [loop.inputs[k] for k in slices] + [loop.inputs[n_seq + i] for i in plan.carried],
        [loop.outputs[i].type for i in plan.carried]
        + [stack_type(steps, v.type) for v in plan.crossing],
        {**loop.attrs, "n_seq": len(slices), "n_state": len(plan.carried), "n_tape": 0,
         "recompute": False, "checkpoint": 0, "lean": False, "skip": -1},
        [first], [loop.outputs[i].hint for i in plan.carried] + [v.hint for v in plan.crossing])
    # the carried states' final values are the first loop's: the loop's own outputs
    b.block.ops[-1].outputs[:len(plan.carried)] = [loop.outputs[i] for i in plan.carried]
    stacked = stacked[len(plan.carried):]
    kept = [i for i in range(n_state) if i not in plan.carried]
    body.ops = [op for op in body.ops if id(op) not in plan.gone]
    into = {v.id: Value(v.type, v.hint) for v in plan.crossing}
    substitute(body, into)
    body.args = body.args[:n_seq] + [into[v.id] for v in plan.crossing] + [states[i] for i in kept]
    body.results = [body.results[i] for i in kept] + body.results[n_state:]
    loop.inputs = loop.inputs[:n_seq] + stacked + [loop.inputs[n_seq + i] for i in kept]
    loop.outputs = [loop.outputs[i] for i in kept] + loop.outputs[n_state:]
    loop.attrs["n_seq"] = n_seq + len(plan.crossing)
    loop.attrs["n_state"] = len(kept)
    b.block.ops.append(loop)


def _plan(loop: Op) -> _Plan | None:
    """What moves out of `loop`, or None where nothing is worth moving."""
    if loop.attrs["n_state"] == 0:
        return None  # nothing carried from step to step: nothing to split from
    return _branch_plan(loop) or _layer_plan(loop)


def _branch_plan(loop: Op) -> _Plan | None:
    """The branches that read no state, and the state-free ops they read."""
    body, n_seq = loop.blocks[0], loop.attrs["n_seq"]
    varying = {v.id for v in body.args[n_seq:]}  # the state, and what depends on it
    free = []
    for op in body.ops:
        if any(v.id in varying for v in outer_reads(op)):
            varying.update(v.id for v in op.outputs)
        else:
            free.append(op)
    ops = _needed(body, free, [v for op in free if op.blocks for v in op.outputs])
    if not ops or any(entry(o).random for op in ops
                      for o in [op, *(x for b in op.blocks for x in walk_ops(b))]):
        return None
    return _batched(loop, ops, [])


def _layer_plan(loop: Op) -> _Plan | None:
    """The smallest set of states whose new values read no other state and whose values
    make the left operand of another product, with the ops their new values read and
    those that make those operands from them alone; None where every state reads every
    other (one layer)."""
    body, n_seq, n_state = loop.blocks[0], loop.attrs["n_seq"], loop.attrs["n_state"]
    if n_state < 2 or loop.attrs.get("skip", -1) >= 0 or loop.attrs.get("lean"):
        return None
    states = body.args[n_seq:]
    deps: dict[int, frozenset[int]] = {v.id: frozenset([i]) for i, v in enumerate(states)}
    op_deps = {}
    for op in body.ops:  # the states each value reads, through the ops before it
        op_deps[id(op)] = frozenset().union(*(deps.get(v.id, frozenset())
                                              for v in outer_reads(op)))
        deps.update((v.id, op_deps[id(op)]) for v in op.outputs)
    reads = [deps.get(v.id, frozenset()) for v in body.results[:n_state]]
    closures = [_closure(i, reads) for i in range(n_state)]
    # the sets of states closed under what their new values read: each state's closure
    # (one layer), and what does not read a state i (every layer below i's, side by side)
    below = [frozenset(j for j in range(n_state) if i not in closures[j])
             for i in range(n_state)]
    candidates = {*closures, *below} - {frozenset(), frozenset(range(n_state))}
    for carried in sorted(candidates, key=lambda c: (len(c), sorted(c))):
        free = [op for op in body.ops if op_deps[id(op)] <= carried]
        results = [body.results[i] for i in sorted(carried)]
        needed = {id(op) for op in _needed(body, free, results)}
        made = {v.id for op in free for v in op.outputs}
        inside = {v.id for v in body.args} | set(deps)
        left = [op.inputs[0] for op in body.ops if id(op) not in needed
                and entry(op).product and op.inputs[0].id in made and deps[op.inputs[0].id]
                and op.inputs[1].id not in inside]
        if not left:
            continue
        plan = _batched(loop, _needed(body, free, results + left), sorted(carried))
        if plan is not None:
            return plan
    return None


def _closure(i: int, reads: list[frozenset[int]]) -> frozenset[int]:
    """State i and every state its new value reads, through the others' new values."""
    seen, stack = {i}, [i]
    while stack:
        for k in reads[stack.pop()] - seen:
            seen.add(k)
            stack.append(k)
    return frozenset(seen)


def _needed(body: Block, free: list[Op], wanted: list[Value]) -> list[Op]:
    """The ops of `free` that `wanted` is made by, and those they read, in body order."""
    producer = {v.id: op for op in free for v in op.outputs}
    first: set[int] = set()
    stack = [producer[v.id] for v in wanted if v.id in producer]
    while stack:
        op = stack.pop()
        if id(op) in first:
            continue
        first.add(id(op))
        stack.extend(producer[v.id] for v in outer_reads(op) if v.id in producer)
    return [op for op in body.ops if id(op) in first]


def _batched(loop: Op, ops: list[Op], carried: list[int]) -> _Plan | None:
    """The plan moving `ops` into a first loop that carries the states `carried`, where
    a product of the rest then reads what it makes with a loop-invariant matrix."""
    body = loop.blocks[0]
    if not ops:
        return None
    steps = {v.id for v in body.args}  # what differs from step to step
    gone = set()
    for op in ops:
        if any(v.id in steps for v in outer_reads(op)) or op.blocks or entry(op).random:
            steps.update(v.id for v in op.outputs)
            gone.add(id(op))  # else the same at every step (a constant): both loops run it
    made = {v.id for op in ops if id(op) in gone for v in op.outputs}
    rest = [op for op in body.ops if id(op) not in gone]
    kept = [v for i, v in enumerate(body.results) if i not in carried]
    read = [v for op in rest for v in outer_reads(op)] + kept
    carried_states = {body.args[len(body.args) - loop.attrs["n_state"] + i].id for i in carried}
    if any(v.id in carried_states for v in read):
        return None  # the rest reads a carried state as the step found it: only one loop has it
    crossing = {v.id: v for v in read if v.id in made}
    inside = {v.id for v in body.args} | {v.id for op in body.ops for v in op.outputs}
    batched = [op for op in rest if entry(op).product and op.inputs[0].id in crossing
               and op.inputs[1].id not in inside and op.inputs[0].type.rank == 2]
    return _Plan(ops, gone, list(crossing.values()), carried) if batched else None
