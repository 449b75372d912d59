"""Sums over time, after the loop: a `for` state that only accumulates, step by step,
`acc + transpose(a_t) @ g_t` or `acc + sum_to(g_t)` (what autodiff makes of a weight
used at every step: the weight's gradient) becomes, when a_t and g_t are already kept for
every step (a sequence of the loop, or one of its yields), one product over all steps
after the loop: `acc + transpose(A) @ G` with A, G of [T*B, ...] rows, one GEMM instead of
T rank-B updates. The state leaves the loop, and DCE drops the per-step work that fed
it. An operand not yet kept for every step becomes a new yield, except in a `lean` loop
(the backward of a `recompute` loop, which keeps only states) where only a value of a
shape the loop already keeps per step may (so its memory grows by a constant factor at
most and keeps no gate-sized value); otherwise the sum stays in the loop.

What each op's sum over the steps is, the op's entry says (`step_sum`: matmul's,
sum_to's, add_n's and transpose's in ops/primitives/, if's in if_op.py). The `for`
entry's `simplify` hook (codegen/transforms/passes.py runs it with the table's
identities).
"""
from __future__ import annotations

from ...ir.graph import Block, Op, Value, has_dynamic, use_counts, walk_ops
from ...ir.shapes import ragged_trips, stack_type
from ..builder import Builder
from ..entry import entry, summed


def sink_sums(b: Builder, loop: Op, facts) -> list[Value] | None:
    """Emit `loop` with its sums moved after it; the values replacing its outputs, or
    None (nothing emitted) when no state is such a sum."""
    body = loop.blocks[0]
    n_seq, n_state = loop.attrs["n_seq"], loop.attrs["n_state"]
    producers = {v.id: op for op in body.ops for v in op.outputs}
    stacked = {body.args[k].id: loop.inputs[k] for k in range(n_seq)}
    for k, y in enumerate(body.results[n_state:]):
        stacked.setdefault(y.id, loop.outputs[n_state + k])
    kept_shapes = {v.type.shape for v in body.args[:n_seq] + body.results[n_state:]}
    steps = loop.inputs[0].type.shape[0]
    new_yields: list[tuple[Value, Value]] = []  # (body value, its stacked output)

    def stack(v: Value) -> Value | None:
        """v for every step: a sequence, a yield, or a new yield where allowed."""
        if v.id in stacked:
            return stacked[v.id]
        made = producers.get(v.id)
        rows = entry(made).step_rows(made) if made is not None and entry(made).step_rows \
            else None
        if rows is not None:  # rows of a nested while's trips: those of every step's
            return stack(rows)
        if v.id not in producers or (has_dynamic(v.type) and ragged_trips(v.type) is None) \
                or (loop.attrs.get("lean") and v.type.shape not in kept_shapes):
            return None  # (a size a nested while sets may differ from step to step)
        stacked[v.id] = out = Value(stack_type(steps, v.type), v.hint)
        new_yields.append((v, out))
        return out
    sums = []  # (state index, emit(b) -> the sum over the steps, the term's source)
    for i, state, _, _, term in accumulations(body, n_seq, n_state, use_counts(body)):
        total = summed(term, producers, stack, facts) if term.type == state.type else None
        if total is not None:
            sums.append((i, total, producers[term.id].loc))
    tapes = loop.attrs.get("n_tape", 0)
    yields = body.results[n_state:len(body.results) - tapes]
    twice = [k for k, y in enumerate(yields) if any(y is z for z in yields[:k])]
    uses = use_counts(body)
    after = {}  # yield index -> emit(b) -> the product over all steps
    for k, y in enumerate(yields):
        total = _product_after(producers.get(y.id), body, uses, stack) \
            if k not in twice and not any(y is z for z in yields[k + 1:]) else None
        if total is not None:
            after[k] = total
    if not sums and not twice and not after:
        return None
    # a new op (the caller maps the old op's outputs to `outputs`)
    outputs, inputs, kept = list(loop.outputs), list(loop.inputs), list(loop.outputs)
    for k in sorted(twice + list(after), reverse=True):
        del body.results[n_state + k], kept[n_state + k]
        if k in twice:  # a value yielded twice is stacked once
            earlier = next(j for j in range(k) if yields[j] is yields[k])
            outputs[n_state + k] = loop.outputs[n_state + earlier]
    for value, out in new_yields:  # before the trailing tapes
        body.results.insert(len(body.results) - tapes, value)
        kept.insert(len(kept) - tapes, out)
    starts = {}
    for i, _, _ in reversed(sums):  # the state leaves the loop (its add goes with it)
        body.ops.remove(producers[body.results[i].id])
        del body.args[n_seq + i], body.results[i], kept[i]
        starts[i] = inputs.pop(n_seq + i)
    attrs = {**loop.attrs, "n_state": n_state - len(sums)}
    b.block.ops.append(Op(loop.prim, inputs, kept, attrs, loop.blocks, loop.loc))
    for i, total, where in sums:
        with b.at(where):  # a zero start (autodiff's, of a gradient) adds nothing but the
            # sign of a sum of zeros: the sum itself (the general fold keeps x + 0.0, which
            # is 0.0 where x is -0.0)
            start = facts.const(starts[i]) if facts is not None else None
            outputs[i] = total(b) if start is not None and start == 0 \
                else b.add(starts[i], total(b))
    for k, total in after.items():
        outputs[n_state + k] = total(b)
    return outputs


def _product_after(op: Op | None, body: Block, uses: dict[int, int], stack):
    """A yield `a_t @ M` (M the same at every step), read nowhere else, as one product
    after the loop, `A @ M` with A = a_t stacked (`stack`): emit(b) -> it, or None."""
    if op is None or not entry(op).product or uses.get(op.outputs[0].id) != 1:
        return None
    a, m = op.inputs
    producers = {v.id: o for o in walk_ops(body) for v in o.outputs}
    inside = {v.id for v in body.args} | {v.id for o in walk_ops(body) for v in o.outputs}
    chain = _invariant(m, producers, inside)
    if a.type.rank != 2 or chain is None:
        return None
    stacked = stack(a)
    if stacked is None:
        return None

    def emit(b: Builder) -> Value:
        outside: dict[int, Value] = {}
        with b.at(op.loc):
            for o in chain:  # M's ops, again after the loop (a transpose of a weight)
                made = b.emit(o.prim, [outside.get(v.id, v) for v in o.inputs], o.attrs,
                              o.outputs[0].hint)
                outside.update((v.id, w) for v, w in zip(o.outputs, made))
            return b.emit(op.prim, [stacked, outside.get(m.id, m)], op.attrs,
                          op.outputs[0].hint)[0]
    return emit


def _invariant(v: Value, producers: dict, inside: set[int]) -> list[Op] | None:
    """The body ops computing `v` from values of outside the loop alone, in order ([] for
    a value of outside), or None where v varies from step to step."""
    if v.id not in inside:
        return []
    op = producers.get(v.id)
    if op is None or op.blocks or entry(op).random:
        return None
    chain: list[Op] = []
    for u in op.inputs:
        before = _invariant(u, producers, inside)
        if before is None:
            return None
        chain += [o for o in before if o not in chain]
    return chain + [op]


def accumulations(body: Block, n_seq: int, n_state: int, uses: dict[int, int]) -> list:
    """The states of a loop body updated as `s + p` by an op that accumulates, where the
    state s and its update are read nowhere else (`uses`: read counts by value id):
    (state index, s, the new state, the op, p) for each. What autodiff makes of a weight
    used at every step (its gradient) has this form."""
    producers = {v.id: op for op in body.ops for v in op.outputs}
    found = []
    for i in range(n_state):
        s, new = body.args[n_seq + i], body.results[i]
        op = producers.get(new.id)
        if op is None or not entry(op).accumulates or s not in op.inputs \
                or uses.get(s.id) != 1 or uses.get(new.id) != 1:
            continue
        found.append((i, s, new, op, op.inputs[1] if op.inputs[0] is s else op.inputs[0]))
    return found
