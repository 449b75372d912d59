"""Sums over time, after the loop: a `for` state that only accumulates, step by step,
`acc + transpose(a_t) @ g_t` or `acc + sum_to(g_t)` (what autodiff makes of a weight
used at every step: the weight's gradient) becomes, when a_t and g_t are already kept for
every step (a sequence of the loop, or one of its yields), one product over all steps
after the loop: `acc + transpose(A) @ G` with A, G of [T*B, ...] rows, one GEMM instead of
T rank-B updates. The state leaves the loop, and DCE drops the per-step work that fed
it. Nothing new is kept per step: where a_t or g_t is not already stacked,
the sum stays in the loop.

The `for` entry's `simplify` hook (codegen/passes.py runs it with the table's identities).
"""
from __future__ import annotations

from ..builder import Builder
from ..ir import Op, Value, walk_ops
from ..shapes import numel


def sink_sums(b: Builder, loop: Op, facts) -> list[Value] | None:
    """Emit `loop` with its sums moved after it; the values replacing its outputs, or
    None (nothing emitted) when no state is such a sum."""
    body = loop.blocks[0]
    n_seq, n_state = loop.attrs["n_seq"], loop.attrs["n_state"]
    producers = {id(v): op for op in body.ops for v in op.outputs}
    stacked = {id(body.args[k]): loop.inputs[k] for k in range(n_seq)}
    stacked.update((id(y), loop.outputs[n_state + k])
                   for k, y in enumerate(body.results[n_state:]))
    reads: dict[int, int] = {}
    for op in walk_ops(body):
        for v in list(op.inputs) + [r for sub in op.blocks for r in sub.results]:
            reads[id(v)] = reads.get(id(v), 0) + 1
    for v in body.results:
        reads[id(v)] = reads.get(id(v), 0) + 1

    sums = []  # (state index, kind, stacked operands)
    for i in range(n_state):
        state, new = body.args[n_seq + i], body.results[i]
        add = producers.get(id(new))
        if add is None or add.prim != "add" or reads.get(id(state)) != 1 \
                or reads.get(id(new)) != 1 or state not in add.inputs:
            continue
        term = add.inputs[1] if add.inputs[0] is state else add.inputs[0]
        if term.type != state.type:
            continue
        found = _summand(term, producers, stacked)
        if found is not None:
            sums.append((i, *found))
    if not sums:
        return None
    # a new op without those states (the caller maps the old op's outputs)
    outputs, inputs, kept = list(loop.outputs), list(loop.inputs), list(loop.outputs)
    starts = {}
    for i, _, _ in reversed(sums):  # the state leaves the loop (its add goes with it)
        body.ops.remove(producers[id(body.results[i])])
        del body.args[n_seq + i], body.results[i], kept[i]
        starts[i] = inputs.pop(n_seq + i)
    attrs = {**loop.attrs, "n_state": n_state - len(sums)}
    b.block.ops.append(Op(loop.prim, inputs, kept, attrs, loop.blocks, loop.loc))
    for i, kind, operands in sums:
        if kind == "matmul":
            a, g = (b.reshape(x, shape=(numel(x.type.shape[:-1]), x.type.shape[-1]))
                    for x in operands)
            total = b.matmul(b.transpose(a, perm=(1, 0)), g)
        else:
            total = b.sum_to(operands[0], shape=outputs[i].type.shape)
        outputs[i] = b.add(starts[i], total)
    return outputs


def _summand(term: Value, producers: dict[int, Op], stacked: dict[int, Value]):
    """("matmul", (A, G)) for transpose(a) @ g, ("sum_to", (G,)) for sum_to(g), with a and g
    stacked over the steps; else None."""
    op = producers.get(id(term))
    if op is None:
        return None
    if op.prim == "sum_to":
        g = op.inputs[0]
        if id(g) in stacked and tuple(op.attrs["shape"]) == tuple(term.type.shape):
            return "sum_to", (stacked[id(g)],)
        return None
    if op.prim != "matmul":
        return None
    left, g = op.inputs
    transpose = producers.get(id(left))
    if transpose is None or transpose.prim != "transpose" \
            or tuple(transpose.attrs["perm"]) != (1, 0):
        return None
    a = transpose.inputs[0]
    if a.type.rank != 2 or g.type.rank != 2 or id(a) not in stacked or id(g) not in stacked:
        return None
    return "matmul", (stacked[id(a)], stacked[id(g)])
