"""What the gradient rules of the structured ops share (the rules themselves are in their
entries, codegen/ops/structured/), after the seeds (Caffe2's recurrent_net and its If/While
gradients). Each rule gets the forward op and the cotangents of its outputs, and returns
the cotangents of its inputs and of the outer values its blocks capture.

- for:   the backward is a `for` running the other way whose body is the gradient of
         the forward body. It reads the forward sequences again, the cotangents of the
         yields, and tapes: per-step values that the forward body now also yields (with
         `recompute`, only the state; the rest is re-run in the backward body). Captured
         float values (parameters above all) get an accumulator in the loop state,
         summed over the steps. (Lengths and checkpoints were lowered to plain loops.)
- while: the forward body pushes what the backward needs onto tapes, one entry per
         trip; the backward is a reversed `for` over the tapes, as many steps as trips.
- if:    each branch also outputs what its own backward needs (zeros for the other
         branch's); the backward is an `if` on the same condition whose branches are
         the gradients of the forward ones, giving zeros for values that a branch does
         not read.
"""
from __future__ import annotations

from ...ir.graph import Block, IRError, Op, Value, free_values, outer_reads
from ...ir.shapes import Dim, ragged_rows, stack_type, step_type
from ..builder import Builder
from .regions import BlockGrad


def captured_floats(blocks, active: set[int]) -> list[Value]:
    """The float outer values the blocks read that need a cotangent, each once."""
    out, seen = [], set()
    for block in blocks:
        for v in free_values(block):
            if v.type.is_float and v.id in active and v.id not in seen:
                seen.add(v.id)
                out.append(v)
    return out


def result_seeds(body: Block, first: int, n_state: int, cts: list) -> list[bool]:
    """Which results of a loop's body (its `n_state` states, then its yields) its backward
    is given a cotangent for, the loop's outputs' being `cts`: a yield where it has one; a
    state where it carries one from step to step: where its final value has one, or where
    the state's value at a step's start (`body.args[first + i]`) reaches, through float
    values (autodiff's `active` relation: an op's float outputs depend on all it reads),
    a result given one, until nothing changes. The other states' cotangents are zero at
    every step (a while's convergence measure, read only by its condition), so their
    backward is not emitted."""
    reads = [(op, {v.id for v in outer_reads(op)}) for op in body.ops]

    def reached(arg: Value) -> set[int]:
        found = {arg.id}
        for op, ids in reads:
            if not ids.isdisjoint(found):
                found.update(v.id for v in op.outputs if v.type.is_float)
        return {k for k, r in enumerate(body.results) if r.id in found}
    args = body.args[first:first + n_state]
    reach = [reached(a) if a.type.is_float else set() for a in args]
    needed = {i for i, c in enumerate(cts[:len(body.results)]) if c is not None}
    while more := {i for i in range(n_state) if i not in needed and reach[i] & needed}:
        needed |= more
    return [i in needed for i in range(n_state)] + [c is not None for c in cts[n_state:]]


def add_tapes(op: Op, block, values: list[Value], steps: Dim) -> list[Value]:
    """Make `block` yield `values` too; the op's new outputs, stacked over `steps`."""
    block.results = block.results + values
    tapes = [Value(stack_type(steps, v.type), f"tape_{v.hint}") for v in values]
    op.outputs = op.outputs + tapes
    op.attrs["n_tape"] = op.attrs.get("n_tape", 0) + len(values)
    return tapes


def loop_backward(b: Builder, op: Op, g: BlockGrad, seqs: list[Value],
                   states: list[Value], cts: list, captured: list[Value], tape,
                   reversed_: bool, lean: bool = False,
                   again: list[tuple[Value, Value]] = ()):
    """Emit the backward `for` of a loop whose body (args: one slice per sequence in
    `seqs`, then the states) has the gradient `g`; `tape(values)` makes the forward
    keep per-step values and returns them stacked; `lean`: the backward of a loop that
    recomputes, which keeps no more per step than it must (the `for`'s `lean`);
    `again`: (value of g's block, the forward's stacked yield it is a step of) pairs,
    which the backward yields too and records in `b.again`.
    Returns (cotangents of seqs and states, [(captured value, cotangent)])."""
    n_seq = len(seqs)
    seq_in, seq_args = _backward_sequences(op, g, seqs, cts[len(states):], tape)
    floats = [i for i in range(len(states)) if g.result_cts[i] is not None]
    if any(g.arg_cts[n_seq + i] is not None for i in range(len(states)) if i not in floats):
        raise IRError(f"a state of {op.prim} at {op.loc} without a carried cotangent has one "
                      f"at a step's start (gradients.result_seeds)")
    # an accumulator for each captured value the body gives a cotangent (not one read
    # only by a condition, or only where no cotangent flows)
    flowing = [(c, ct) for c, ct in zip(captured, g.captured_cts) if ct is not None]
    captured, cap_cts = [c for c, _ in flowing], [ct for _, ct in flowing]
    init = [cts[i] if cts[i] is not None else b.zeros(states[i].type, op.outputs[i])
            for i in floats] + [b.zeros_like(c) for c in captured]
    accs = [Value(c.type, f"acc_{c.hint}") for c in captured]
    body = g.block
    body.args = seq_args + [g.result_cts[i] for i in floats] + accs
    inner = Builder(body)
    state_cts = [g.arg_cts[n_seq + i] if g.arg_cts[n_seq + i] is not None
                 else inner.zeros(states[i].type) for i in floats]
    new_accs = [inner.add(a, c) for a, c in zip(accs, cap_cts)]
    grads = [i for i in range(n_seq) if g.arg_cts[i] is not None]
    body.results = state_cts + new_accs + [g.arg_cts[i] for i in grads] \
        + [v for v, _ in again]

    steps = seq_in[0].type.shape[0]
    types = [v.type for v in init] + [stack_type(steps, v.type) for v in
                                      [g.arg_cts[i] for i in grads] + [v for v, _ in again]]
    attrs = {"n_seq": len(seq_in), "n_state": len(init), "reversed": reversed_,
             "has_lengths": False, "recompute": False, "checkpoint": 0, "lean": lean,
             "skip": _skip(op, seqs, seq_in)}
    hints = [f"d_{states[i].hint}" for i in floats] + [f"d_{c.hint}" for c in captured] \
        + [f"d_{seqs[i].hint}" for i in grads] + [y.hint for _, y in again]
    outs = b.structured("for", seq_in + init, types, attrs, [body], hints)
    b.again += zip(outs[len(outs) - len(again):], [y for _, y in again])
    in_cts: list = [None] * (n_seq + len(states))
    for i, v in zip(floats, outs):
        in_cts[n_seq + i] = v
    for i, v in zip(grads, outs[len(init):]):
        in_cts[i] = v
    return in_cts, list(zip(captured, outs[len(floats):len(init)]))


def _skip(op: Op, seqs: list[Value], seq_in: list[Value]) -> int:
    """The backward's `skip` sequence: the forward's, read again. In a step the forward
    leaves alone (its states as they were, zeros yielded) no cotangent flows into the
    body, so its backward adds nothing and passes the state cotangents on as well."""
    skip = op.attrs.get("skip", -1)
    if skip < 0:
        return -1
    return next((i for i, s in enumerate(seq_in) if s is seqs[skip]), -1)


def _backward_sequences(op: Op, g: BlockGrad, seqs: list[Value], yield_cts: list, tape):
    """What the backward loop reads per step, and its body args for them: the yields'
    cotangents, the forward sequences whose slices it needs, and the new tapes."""
    n_state = len(g.result_cts) - len(yield_cts)
    slice_of = {a.id: i for i, a in enumerate(op.blocks[-1].args[:len(seqs)])}
    again = [(seqs[slice_of[v.id]], p) for v, p in zip(g.saved, g.saved_in)
             if v.id in slice_of]
    kept = [(v, p) for v, p in zip(g.saved, g.saved_in) if v.id not in slice_of]
    tapes = tape([v for v, _ in kept])
    pairs = [(c, p) for c, p in zip(yield_cts, g.result_cts[n_state:]) if p is not None]
    pairs += again + list(zip(tapes, [p for _, p in kept]))
    pairs += [(t, Value(step_type(t.type))) for t in tapes[len(kept):]]
    # the first sequence sets the length: a ragged one cannot (nothing else to read per
    # step, or only ragged tapes: the forward's first sequence still can)
    first = next((k for k, (s, _) in enumerate(pairs) if ragged_rows(s.type) is None), None)
    if first is None:
        pairs.insert(0, (seqs[0], Value(step_type(seqs[0].type))))
    else:
        pairs.insert(0, pairs.pop(first))
    return [s for s, _ in pairs], [p for _, p in pairs]
