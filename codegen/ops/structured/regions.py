"""The gradient of a block that runs apart from its backward (a loop body, a branch):
the backward block, and the forward values it needs (residuals), each either saved by
the forward pass (the structured op's rule puts it on a tape) or recomputed from saved
ones at the top of the backward block (the seeds' recompute_blobs_on_backward).

What is recomputed follows a policy: STORE saves every residual it can, RECOMPUTE saves
only the block's args (the per-step state) and re-runs everything else. Whatever the
policy, block args cannot be recomputed, constants are always re-created, random values
(dropout masks) are saved under STORE and under RECOMPUTE drawn again (at the positions
their streams had in the forward, which are saved: replay.py), and values whose size is
known only at run time are recomputed, since they cannot be stacked (an op recomputed
that draws, a loop with a dropout, draws again alike): but a
`for` that stores lays a nested while's tapes ([trips, ...], a size that changes from
step to step) end to end, a ragged yield, so those are saved there, as are those of a
while in an `if` in its body, which the if outputs (if_op.py); a `while` in no loop
does the same for a while in its body (while_op.py), each trip's tapes end to end; and
an `if` in no loop outputs a `for`'s ragged yields ([rows(trips), ...]), so a for in
its branches keeps its whiles' tapes too, and any value whose dims are known once a
call's inputs are (a checkpoint loop's [ceil(T/k), ...]: shapes.known_at_call).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.diagnostics import MdlGradientError
from ...ir.graph import (Block, Op, Value, clone_ops, defined_here, free_values,
                         has_dynamic, outer_reads, substitute)
from ...ir.shapes import known_at_call, ragged_rows, ragged_trips
from ..builder import Builder
from ..entry import entry
from . import replay

STORE = "store"
RECOMPUTE = "recompute"


class GradientError(MdlGradientError):
    """A gradient that cannot be built (no minimized output, an impossible tape); it
    renders like every error of the front end, at the construct's source location."""


@dataclass
class BlockGrad:
    """The backward of a block. `block` holds its ops (its args and results are for the
    caller to set): it reads `result_cts` (a placeholder per forward result that has a
    cotangent, else None) and `saved_in` (a placeholder per saved forward value in
    `saved`), and computes `arg_cts` (per forward block arg) and `captured_cts` (per
    value of `captured`), each None where no gradient flows; `again` holds, per value of
    the forward block asked for (`also`), the backward block's value equal to it, or
    None where computing it would take more saved values."""
    block: Block
    result_cts: list[Value | None]
    saved: list[Value]
    saved_in: list[Value]
    arg_cts: list[Value | None]
    captured_cts: list[Value | None]
    again: list[Value | None]


def differentiate_block(block: Block, with_ct: list[bool], captured: list[Value],
                        policy: str, backprop, also: list[Value] = (),
                        ragged: bool = False, rows: bool = False) -> BlockGrad:
    """The backward of `block` given cotangents for the results flagged in `with_ct`,
    w.r.t. its args and the outer values `captured`; `backprop` is autodiff's generic
    walk (passed in: the walk calls the structured ops' rules, which call this). The
    backward also recomputes those of the forward values `also` that it can from what
    it saves anyway, for a caller that can use them (BlockGrad.again). `ragged`: the
    caller can save a value whose leading dim is a trip count (a `for` or `while` in no
    loop, laying its steps' or trips' values end to end: shapes.stack_type; or an if in
    such a loop's body, or in no loop, outputting them, if_op.py), so a
    nested while's tapes are saved under STORE rather than the while run again, and an
    if in the block does the same for its branches (the builder's `ragged`). `rows`:
    the caller can save a for's ragged yield too ([rows(trips), ...]: an `if` in no
    loop, outputting it), so a `for` in the block keeps its whiles' tapes (the builder's
    `rows`), and a value of dims known at the call (a checkpoint's kept states). (In a
    for in a loop's body the for's ragged yields would have to be recomputed there, the
    whole loop again, drawing its dropouts again: replay.py.)"""
    bwd = Block()
    result_cts = [Value(r.type, f"d_{r.hint}") if flag else None
                  for r, flag in zip(block.results, with_ct)]
    seeds = [(r, c) for r, c in zip(block.results, result_cts) if c is not None]
    inner = Builder(bwd)
    inner.in_block = True
    inner.ragged = ragged and policy == STORE
    inner.rows = rows and policy == STORE
    cts = backprop(inner, list(block.ops), seeds, block.args + captured)
    saved, recomputed, computed = _plan(block, bwd, policy, also, inner.ragged, inner.rows)
    # an op run again that draws (a dropout in a loop of run-time length) draws again
    # at the positions its streams had in the forward (replay.py), which are kept
    asked = {id(op): replay.ask(block, op) for op in recomputed if replay.salts(op)}
    saved = saved + [v for positions in asked.values() for v in positions.values()]
    mapping: dict[int, Value] = {}
    saved_in = []
    for v in saved:
        mapping[v.id] = Value(v.type, v.hint)
        saved_in.append(mapping[v.id])
    clones = clone_ops(recomputed, mapping)  # they read the placeholders and each other
    substitute(bwd, mapping)
    bwd.ops = clones + bwd.ops
    for op, clone in zip(recomputed, clones):
        if id(op) in asked:
            replay.replay(bwd, clone, {s: mapping[v.id] for s, v in asked[id(op)].items()})
    n = len(block.args)
    again = [mapping.get(v.id, v) if ok else None for v, ok in zip(also, computed)]
    return BlockGrad(bwd, result_cts, saved, saved_in, cts[:n], cts[n:], again)


def _plan(block: Block, bwd: Block, policy: str, also: list[Value], ragged: bool,
          rows: bool) -> tuple[list[Value], list[Op], list[bool]]:
    """(values to save, ops to re-run in program order, per value of `also` whether the
    backward computes it) so that the backward can read every forward value it refers
    to. A value of `also` is computed only from what the backward saves anyway: one that
    would need more saved is left out (a caller that ends up not reading it must not
    leave a tape behind)."""
    defined = defined_here(block)  # after the walk: structured ops may have gained tapes
    producer = {v.id: op for op in block.ops for v in op.outputs}
    args = {v.id for v in block.args}
    saved: list[Value] = []
    seen: set[int] = set()
    rerun: set[int] = set()

    def visit(roots: list[Value], seen: set[int], saved: list[Value], rerun: set[int]):
        stack = [v for v in roots if v.id in defined]
        while stack:
            v = stack.pop()
            if v.id in seen:
                continue
            seen.add(v.id)
            op = producer.get(v.id)
            if v.id in args or _must_save(v, op, policy, ragged, rows):
                saved.append(v)
                continue
            if id(op) in rerun:
                continue
            rerun.add(id(op))
            stack.extend(u for u in outer_reads(op) if u.id in defined)

    visit(free_values(bwd), seen, saved, rerun)
    computed = []
    for v in also:
        more: list[Value] = []
        trial_seen, trial_rerun = set(seen), set(rerun)
        visit([v], trial_seen, more, trial_rerun)
        fits = all(any(u is w for w in saved) for u in more)
        if fits:
            seen, rerun = trial_seen, trial_rerun
        computed.append(fits)
    return saved, [op for op in block.ops if id(op) in rerun], computed


def _must_save(v: Value, op: Op, policy: str, ragged: bool, rows: bool) -> bool:
    if not op.inputs and not op.blocks and not entry(op).random:
        return False  # a constant: re-creating it costs nothing
    random = bool(replay.draws(op))
    if ragged and ragged_trips(v.type) is not None:
        return True
    if rows and ragged_rows(v.type) is not None:
        return True
    if has_dynamic(v.type) and not (rows and known_at_call(v.type)):
        return False  # recomputed; if it draws, at the forward's positions (replay.py)
    # under RECOMPUTE a dropout's mask is drawn again too, from a position kept a step
    return policy == STORE or (random and not replay.can_draw_again(op))
