"""`if`: runs one of two blocks on a bool scalar; both yield the if's output types."""
from __future__ import annotations

import numpy as np

from ...ir.graph import Op, Value, has_dynamic, substitute
from ..builder import Builder
from ..entry import constant, entry
from .gradients import captured_floats
from .regions import STORE, differentiate_block
from .table import BOOL, StructuredOp, need, register, trim_outputs


def _verify(op: Op) -> None:
    need(len(op.inputs) == 1 and op.inputs[0].type == BOOL, "an if tests a bool")
    need(len(op.blocks) == 2 and not op.blocks[0].args and not op.blocks[1].args,
         "an if has two blocks without args")
    then, orelse = op.blocks
    types = [[v.type for v in values] for values in (then.results, orelse.results, op.outputs)]
    need(types[0] == types[1] == types[2], "if branches yield the if's output types")
    need(0 <= op.attrs.get("n_tape", 0) <= len(op.outputs), "n_tape counts outputs")


def _reference(interp, op: Op, args: list[np.ndarray]) -> list[np.ndarray]:
    return interp.block(op.blocks[0 if bool(args[0]) else 1], [])


def _grad(b: Builder, op: Op, cts: list, active: set[int], backprop):
    """Save the condition (the if itself) and what each branch's backward needs (tapes:
    the other branch yields zeros for them); the backward is an if on the same
    condition."""
    captured = captured_floats(op.blocks, active)
    with_ct = [c is not None for c in cts]
    grads = [differentiate_block(branch, with_ct, captured, STORE, backprop)
             for branch in op.blocks]
    residuals = [v for g in grads for v in g.saved]
    for k, branch in enumerate(op.blocks):
        fill = Builder(branch)
        own = {v.id for v in grads[k].saved}
        branch.results = branch.results + [v if v.id in own else fill.zeros(v.type)
                                           for v in residuals]
    tapes = [Value(v.type, f"tape_{v.hint}") for v in residuals]
    op.outputs = op.outputs + tapes
    op.attrs["n_tape"] = op.attrs.get("n_tape", 0) + len(tapes)
    if not captured:
        return [None], []
    tape_of = iter(tapes)
    for g in grads:
        mapping = {p.id: next(tape_of) for p in g.saved_in}
        mapping.update({p.id: c for p, c in zip(g.result_cts, cts) if p is not None})
        fill = Builder(g.block)
        g.block.results = [ct if ct is not None else fill.zeros_like(c)
                           for c, ct in zip(captured, g.captured_cts)]
        substitute(g.block, mapping)
    outs = b.structured("if", op.inputs, [c.type for c in captured], {},
                        [g.block for g in grads], [f"d_{c.hint}" for c in captured])
    return [None], list(zip(captured, outs))


def _step_sum(op: Op, value: Value, producers: dict, stack, facts):
    """`value` summed over a loop's steps where one branch computes it and the other
    yields zeros (in a backward, the gradient of a weight only one branch uses): the sum
    the computing op's own rule makes (`transpose(A) @ G` for a product), from its
    operands taken through the if, each step of the other branch giving zeros in their
    place, so that those steps add nothing. None where no rule applies."""
    k = op.outputs.index(value)
    zeros = [facts.const(block.results[k]) == 0 for block in op.blocks]
    if zeros.count(True) != 1:
        return None
    live, dead = op.blocks[zeros.index(False)], op.blocks[zeros.index(True)]
    inner = {v.id: o for o in live.ops for v in o.outputs}
    made = inner.get(live.results[k].id)
    rule = entry(made).step_sum if made is not None else None
    if rule is None:
        return None

    def zero(v: Value) -> bool:
        """Whether the other branch yields zeros as v: known to the pass, or a `full` of
        0 that `through` put there."""
        filled = next((o for o in dead.ops if v in o.outputs), None)
        return facts.const(v) == 0 or (filled is not None and constant(filled)
                                        and filled.attrs.get("value") == 0)

    def through(v: Value) -> Value | None:
        """v of every step, zeros where the other branch ran: an output of the if (a new
        one before its tapes unless it has one already), stacked by the loop."""
        if has_dynamic(v.type):
            return None
        tapes_at = len(op.outputs) - op.attrs.get("n_tape", 0)
        for j, out in enumerate(op.outputs[:tapes_at]):
            if live.results[j] is v and zero(dead.results[j]):
                return stack(out)
        out = Value(v.type, f"{v.hint or 'term'}_if")
        op.outputs.insert(tapes_at, out)
        live.results.insert(tapes_at, v)
        dead.results.insert(tapes_at, Builder(dead).zeros(v.type))
        producers[out.id] = op
        return stack(out)
    return rule(made, live.results[k], inner, through, facts)


def _onnx(g, op: Op, xs: list[str]) -> list[str]:
    """`If` on the condition, each block a branch graph."""
    branches = {}
    for key, block in zip(("then_branch", "else_branch"), op.blocks):
        sub, _ = g.subgraph(key.split("_")[0], [])
        results = sub.block(block, [])
        branches[key] = sub.graph(results, [v.type for v in block.results])
    return g.ops("If", xs, len(op.outputs), **branches)


IF = register(StructuredOp(
    "if", attrs={"n_tape": (int, 0)}, blocks=("then", "else"), verify=_verify,
    reference=_reference, grad=_grad, branches=True, step_sum=_step_sum,
    trim=lambda op, live: trim_outputs(op, 0, live, op.blocks), extra={"onnx": _onnx}))
