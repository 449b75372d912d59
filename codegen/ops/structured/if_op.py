"""`if`: runs one of two blocks on a bool scalar; both yield the if's output types. An
output whose leading dim is a trip count (a tape of a while in one branch, which the
`for` around the if keeps as a ragged yield, or the if in no loop keeps itself) or the
rows of a for's ragged yield (a tape of a while in a for in one branch) is yielded by a
branch that does not run that while or for as no rows, [0, ...]: that branch sets the
count to 0. Likewise, in an if in no loop, a tape of a size the call's dims may make
negative (`xs[1:]`'s [T - 1, ...]), which only the branch that made it reads in the
backward, is yielded by the other branch with those sizes 0: a call whose dims make it
negative runs where that branch does not run (its sizes are checked where it starts,
ops/entry.py, branch_bounds)."""
from __future__ import annotations

import numpy as np

from ...ir.graph import Op, Value, has_dynamic, substitute
from ...ir.shapes import Dim, TensorType, ragged_rows, ragged_trips, signed
from ..builder import Builder
from ..entry import constant, entry, summed
from . import replay
from .gradients import captured_floats
from .regions import STORE, differentiate_block
from .table import BOOL, StructuredOp, need, register, trim_outputs


def _verify(op: Op) -> None:
    need(len(op.inputs) == 1 and op.inputs[0].type == BOOL, "an if tests a bool")
    need(len(op.blocks) == 2 and not op.blocks[0].args and not op.blocks[1].args,
         "an if has two blocks without args")
    outs = [v.type for v in op.outputs]
    for block in op.blocks:
        need(len(block.results) == len(outs) and all(
            r.type == t or r.type == no_rows(t) for r, t in zip(block.results, outs)),
             "if branches yield the if's output types (or no rows of a trip count's)")
    need(0 <= op.attrs.get("n_tape", 0) <= len(op.outputs), "n_tape counts outputs")


def ragged_count(t: TensorType):
    """The run-time count an if's output of type t leads with, which a branch without
    its while or for yields as no rows: a while's trip count ([trips, ...]) or the rows
    of a for's ragged yield ([rows(trips), ...]); else None."""
    return ragged_trips(t) or ragged_rows(t)


def no_rows(t: TensorType) -> TensorType | None:
    """What a branch that does not run a while (or a for with one) yields for an output
    of type t sized by its count (ragged_count): [0, ...]; or one that does not make a
    value of a size the call's dims may make negative (`xs[1:]`'s [T - 1, ...], which
    they need not keep >= 0 where the branch that makes it does not run, shapes.signed):
    t with those sizes 0. None for another type."""
    if ragged_count(t):
        return t.with_shape((Dim.of(0),) + t.shape[1:])
    if any(signed(d) for d in t.shape):
        return t.with_shape(tuple(Dim.of(0) if signed(d) else d for d in t.shape))
    return None


def _sets_dims(op: Op) -> set:
    """The counts of the if's outputs sized by one (ragged_count): a branch's while or
    for sets it, the other branch 0."""
    return {n for v in op.outputs if (n := ragged_count(v.type)) is not None}


def _reference(interp, op: Op, args: list[np.ndarray]) -> list[np.ndarray]:
    """The branch's results, its sizes checked where it starts (interp.branch); an
    output that is a for's ragged yield takes its steps' rows from the for
    (`interp.ragged`), where the branch ran it."""
    branch = op.blocks[0 if bool(args[0]) else 1]
    results = interp.branch(branch)
    for out, res in zip(op.outputs, branch.results):
        if ragged_rows(out.type) is not None and res.id in interp.ragged:
            interp.ragged[out.id] = interp.ragged[res.id]
    return results


def _grad(b: Builder, op: Op, cts: list, active: set[int], backprop):
    """Save the condition (the if itself) and what each branch's backward needs (tapes:
    the other branch yields zeros for them); the backward is an if on the same
    condition. In a `for` that keeps its whiles' tapes as ragged yields (`b.ragged`), and
    in no loop (not `b.in_block`: the backward reads any forward value), a branch's
    while's tapes are kept too, as outputs of the if that the other branch yields as no
    rows (no_rows), so the backward does not run the while again. In no loop (the
    builder's `rows` in a branch of ifs in none) a for in a branch keeps its whiles'
    tapes as ragged yields, and the if outputs them alike."""
    captured = captured_floats(op.blocks, active)
    with_ct = [c is not None for c in cts]
    grads = [differentiate_block(branch, with_ct, captured, STORE, backprop,
                                 ragged=b.ragged or not b.in_block,
                                 rows=b.rows or not b.in_block)
             for branch in op.blocks]
    residuals = [v for g in grads for v in g.saved]
    for k, branch in enumerate(op.blocks):
        fill = Builder(branch)
        own = {v.id for v in grads[k].saved}
        branch.results = branch.results + [
            v if v.id in own else fill.zeros(_unmade(v.type, b)) for v in residuals]
    tapes = [Value(v.type, f"tape_{v.hint}") for v in residuals]
    op.outputs = op.outputs + tapes
    op.attrs["n_tape"] = op.attrs.get("n_tape", 0) + len(tapes)
    # the captured values a branch gives a cotangent (not one read only by conditions)
    flowing = [k for k in range(len(captured))
               if any(g.captured_cts[k] is not None for g in grads)]
    captured = [captured[k] for k in flowing]
    if not captured:
        return [None], []
    tape_of = iter(tapes)
    for g in grads:
        mapping = {p.id: next(tape_of) for p in g.saved_in}
        mapping.update({p.id: c for p, c in zip(g.result_cts, cts) if p is not None})
        fill = Builder(g.block)
        g.block.results = [g.captured_cts[k] if g.captured_cts[k] is not None
                           else fill.zeros_like(c) for k, c in zip(flowing, captured)]
        substitute(g.block, mapping)
    outs = b.structured("if", op.inputs, [c.type for c in captured], {},
                        [g.block for g in grads], [f"d_{c.hint}" for c in captured])
    return [None], list(zip(captured, outs))


def _unmade(t: TensorType, b: Builder) -> TensorType:
    """The type of the zeros a branch yields for the other branch's residual of type t:
    no rows where they count a while's trips or a for's rows; where the if is in no loop
    (its tapes read by the backward's same branch alone, not stacked by a loop's steps),
    no rows of a size the dims may make negative too (no_rows), which the branch then
    does not make; else t."""
    empty = no_rows(t)
    return empty if empty is not None and (ragged_count(t) or b.rows or not b.in_block) \
        else t


def _output(op: Op, yields, already, v: Value, producers: dict) -> Value:
    """The if's output whose branches yield what `already(j)` accepts of output j's, or
    a new one before its tapes, the branches yielding `yields()` (v's type, named for
    v): its id recorded in `producers` (the loop body's), where the loop stacks it."""
    tapes_at = len(op.outputs) - op.attrs.get("n_tape", 0)
    for j, out in enumerate(op.outputs[:tapes_at]):
        if already(j):
            return out
    out = Value(v.type, f"{v.hint or 'term'}_if")
    op.outputs.insert(tapes_at, out)
    for block, result in zip(op.blocks, yields()):
        block.results.insert(tapes_at, result)
    producers[out.id] = op
    return out


def _through(op: Op, live, dead, stack, facts, producers: dict):
    """stack(v) for a value v of the branch `live`, through the if: v of every step where
    `live` ran, zeros where `dead` did (an output of the if), stacked by the loop. None
    where v's size may differ from step to step."""
    def zero(v: Value) -> bool:
        """Whether `dead` yields zeros as v: known to the pass, or a `full` of 0 that
        `through` put there."""
        filled = next((o for o in dead.ops if v in o.outputs), None)
        return facts.const(v) == 0 or (filled is not None and constant(filled)
                                        and filled.attrs.get("value") == 0)

    def through(v: Value) -> Value | None:
        if has_dynamic(v.type):
            return None

        def yields():
            zeros = Builder(dead).zeros(v.type)
            return (v, zeros) if live is op.blocks[0] else (zeros, v)
        return stack(_output(op, yields,
                             lambda j: live.results[j] is v and zero(dead.results[j]),
                             v, producers))
    return through


def _step_sum(op: Op, value: Value, producers: dict, stack, facts):
    """`value` summed over a loop's steps (in a backward, the gradient of a weight the
    branches use). Where both branches compute it alike (the weight used the same way in
    each), the sum the then branch's op's own rule makes (`transpose(A) @ G` for a
    product) from operands taken through the if, each step's from the branch it ran: one
    sum over all steps (_Alike). Otherwise, for each branch that does not yield zeros,
    that branch's rule on its operands, each step of the other branch giving zeros in
    their place, so that those steps add nothing; the sum of those. None where a
    branch's op has no rule."""
    k = op.outputs.index(value)
    inner = [{v.id: o for o in block.ops for v in o.outputs} for block in op.blocks]
    made = [inner[i].get(block.results[k].id) for i, block in enumerate(op.blocks)]
    rule = entry(made[0]).step_sum if None not in made else None
    if rule is not None:
        alike = _Alike(inner, facts)
        if alike.ops(made[0], made[1]) and made[0].outputs.index(op.blocks[0].results[k]) \
                == made[1].outputs.index(op.blocks[1].results[k]):
            both = rule(made[0], op.blocks[0].results[k], alike,
                        _through_both(op, alike.pairs, stack, producers), facts)
            if both is not None and not alike.broken:
                return both
    sums = []
    for taken, live in enumerate(op.blocks):
        if facts.const(live.results[k]) == 0:
            continue
        through = _through(op, live, op.blocks[1 - taken], stack, facts, producers)
        total = summed(live.results[k], inner[taken], through, facts)
        if total is None:
            return None
        sums.append(total)
    return (lambda b: b.total([total(b) for total in sums])) if sums else None


class _Alike(dict):
    """The then branch's producers (by value id), as a step_sum rule reads them (`get`),
    each lookup mirrored in the else branch: where the value paired with the one looked
    up is made by an op alike (the same primitive, attributes and operand and result
    types, and no blocks), the op's operands are paired with the other's too (`pairs`:
    then-branch value id -> else-branch value); otherwise the lookup finds nothing and
    the rule's sum is not used (`broken`). So a rule that succeeds has read the same
    structure in both branches, and stacks (through the if) only paired values."""

    def __init__(self, inner: list[dict], facts):
        super().__init__(inner[0])
        self.other, self.facts = inner[1], facts
        self.pairs: dict[int, Value] = {}
        self.broken = False

    def get(self, key, default=None):
        op, paired = super().get(key), self.pairs.get(key)
        other = self.other.get(paired.id) if paired is not None else None
        if op is None and other is None:
            return default
        if op is None or other is None or not self.ops(op, other):
            self.broken = True
            return default
        return op

    def __getitem__(self, key):
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def ops(self, a: Op, b: Op) -> bool:
        """Whether a and b are alike, pairing their operands (each with one value only,
        and known constants equal)."""
        if a.prim != b.prim or a.blocks or b.blocks or a.attrs != b.attrs \
                or [v.type for v in a.outputs] != [v.type for v in b.outputs] \
                or [v.type for v in a.inputs] != [v.type for v in b.inputs]:
            return False
        for u, w in zip(a.inputs, b.inputs):
            cu, cw = self.facts.const(u), self.facts.const(w)
            if (cu is None) != (cw is None) or (cu is not None and cu != cw) \
                    or self.pairs.setdefault(u.id, w) is not w:
                return False
        return True


def _through_both(op: Op, pairs: dict, stack, producers: dict):
    """stack(v) for a value v of the then branch that `pairs` pairs with one of the else
    branch, through the if: v of every step where the then branch ran, its pair where the
    else branch did (an output of the if), stacked by the loop; or v itself, stacked,
    where both are v (from outside the if). None for another value."""
    then, orelse = op.blocks

    def through(v: Value) -> Value | None:
        w = pairs.get(v.id)
        if w is None or has_dynamic(v.type):
            return None
        if w is v:
            return stack(v)
        return stack(_output(op, lambda: (v, w),
                             lambda j: then.results[j] is v and orelse.results[j] is w,
                             v, producers))
    return through


def _onnx(g, op: Op, xs: list[str]) -> list[str]:
    """`If` on the condition, each block a branch graph."""
    branches = {}
    for key, block in zip(("then_branch", "else_branch"), op.blocks):
        sub, _ = g.subgraph(key.split("_")[0], [])
        results = sub.block(block, [])
        branches[key] = sub.graph(results, [v.type for v in block.results])
    return g.ops("If", xs, len(op.outputs), **branches)


def _redraw(op: Op, positions: dict, same: dict) -> list[Op]:
    """Draw again at `positions`, output before the tapes (replay.py)."""
    replay.branches(op, positions, same)
    return [op]


IF = register(StructuredOp(
    "if", attrs={"n_tape": (int, 0)}, blocks=("then", "else"), verify=_verify,
    reference=_reference, grad=_grad, branches=True, step_sum=_step_sum, sets_dims=_sets_dims,
    trim=lambda op, live: trim_outputs(op, 0, live, op.blocks), redraw=_redraw,
    extra={"onnx": _onnx}))
