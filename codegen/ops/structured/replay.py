"""A loop that draws random numbers, run again in a backward pass, drawing the forward's
numbers again (primitives/replay.py has the primitives and why).

Where a block's backward runs again a forward op whose values it cannot keep (a loop of
run-time length nested in another loop: regions.py) and that op draws (a dropout in it,
at any depth), `ask` puts an `rng_position` per stream the op draws from just before it
in the forward block: positions the backward keeps like any residual (i32[4] a step).
`replay` rewrites the backward's copy of the op through the entries' `redraw` rules:
a `dropout_mask` becomes a `dropout_replay` at its stream's position and an `rng_skip`
past it (nn.py); a loop carries the position as a new state (`carry`: for_op.py,
while_op.py); an `if` outputs it, the branch without the dropout yielding it unchanged
(if_op.py); an `rng_position` in the copy (asked for a loop deeper in) is the carried
position itself (primitives/replay.py). So the copy draws what the forward drew, step by
step, in the order the forward did.
"""
from __future__ import annotations

from ...ir.graph import Block, IRError, Op, Value, substitute, walk_ops
from ..entry import entry
from ..primitives.replay import POSITION


def draws(op: Op) -> list[Op]:
    """The ops that draw random numbers in `op`, itself included, at any depth."""
    return [o for o in [op, *(x for b in op.blocks for x in walk_ops(b))] if entry(o).random]


def salts(op: Op) -> list[int]:
    """The streams `op` draws from (its random ops' salts), in order."""
    return sorted({o.attrs["salt"] for o in draws(op)})


def can_draw_again(op: Op) -> bool:
    """Whether every op in `op` that draws can draw again (has a `redraw` rule)."""
    return all(entry(o).redraw is not None for o in draws(op))


def ask(block: Block, op: Op) -> dict[int, Value]:
    """Positions of the streams `op` draws from, asked for just before it in `block`
    (whose ops include it): {salt: position}."""
    at = next(i for i, o in enumerate(block.ops) if o is op)
    asked, ops = {}, []
    for salt in salts(op):
        position = Value(POSITION, f"rng{salt}")
        ops.append(Op("rng_position", [], [position], {"salt": salt}, [], op.loc))
        asked[salt] = position
    block.ops[at:at] = ops
    return asked


def replay(bwd: Block, op: Op, positions: dict[int, Value]) -> None:
    """Make `op`, a copy in `bwd` of a forward op, draw from `positions` ({salt: the
    position before it}) what the forward's op drew."""
    same: dict[int, Value] = {}
    at = next(i for i, o in enumerate(bwd.ops) if o is op)
    bwd.ops[at:at + 1] = again(op, dict(positions), same)
    substitute(bwd, same)


def again(op: Op, positions: dict[int, Value], same: dict[int, Value]) -> list[Op]:
    """The ops that run in place of `op` so that it draws at `positions` ({salt:
    position}, updated to where its draws end); `same` learns the values they make
    redundant (old id -> the value to read instead)."""
    if not any(s in positions for s in salts(op)):
        return [op]
    rule = entry(op).redraw
    if rule is None:
        raise IRError(f"a `{op.prim}` that draws cannot draw again (it has no redraw rule)")
    return rule(op, positions, same)


def again_in(block: Block, positions: dict[int, Value], same: dict[int, Value]) -> None:
    """`again` for each op of `block`, in order."""
    block.ops = [new for op in block.ops for new in again(op, positions, same)]


def carry(op: Op, positions: dict[int, Value], same: dict[int, Value], first_input: int,
          n_state: int) -> int:
    """The redraw of a loop `op` whose states are its inputs from `first_input` on, its
    `n_state` first outputs and results, and its blocks' args after the step slices (a
    for's body) or all of them (a while's cond and body): a position per stream it draws
    from as a new last state. How many states it added."""
    mine = [s for s in salts(op) if s in positions]
    body = op.blocks[-1]
    slices = len(body.args) - n_state
    inner = {}
    for k, salt in enumerate(mine):
        op.inputs.insert(first_input + n_state + k, positions[salt])
        for block in op.blocks:
            arg = Value(POSITION, f"rng{salt}")
            block.args.insert((slices if block is body else 0) + n_state + k, arg)
        inner[salt] = body.args[slices + n_state + k]
    again_in(body, inner, same)
    for k, salt in enumerate(mine):
        body.results.insert(n_state + k, inner[salt])
        positions[salt] = Value(POSITION, f"rng{salt}")
        op.outputs.insert(n_state + k, positions[salt])
    return len(mine)


def branches(op: Op, positions: dict[int, Value], same: dict[int, Value]) -> None:
    """The redraw of an `if`: a position per stream it draws from as a new output
    before its tapes; the branch that draws yields where its draws end, the other the
    position it got."""
    mine = [s for s in salts(op) if s in positions]
    at = len(op.outputs) - op.attrs.get("n_tape", 0)
    ends = []
    for branch in op.blocks:
        inner = {s: positions[s] for s in mine}
        again_in(branch, inner, same)
        ends.append(inner)
    for k, salt in enumerate(mine):
        for branch, inner in zip(op.blocks, ends):
            branch.results.insert(at + k, inner[salt])
        positions[salt] = Value(POSITION, f"rng{salt}")
        op.outputs.insert(at + k, positions[salt])
