"""`while`: runs its body while its cond block yields true, carrying states. For its
backward it pushes tape values every trip (outputs [trips, ...], `trips` a TripCount
known only at run time); the backward is a reversed `for` over the tapes. A tape value
whose own leading dim is a trip count (a tape of a while in the body, kept there by a
while in no loop) differs in size from trip to trip: the trips' values are laid end to
end, [rows(inner trips), ...], as a `for`'s ragged yield is (shapes.stack_type)."""
from __future__ import annotations

import numpy as np

from ...ir.graph import Op, Value
from ...ir.shapes import Dim, TripCount, ragged_rows, ragged_trips, stack_type
from ..builder import Builder
from . import replay
from .gradients import add_tapes, captured_floats, loop_backward, result_seeds
from .regions import STORE, differentiate_block
from .table import BOOL, StructuredOp, need, register, trim_outputs, types_of

MAX_TRIPS = 10_000_000  # a while that runs longer is taken for an endless loop


def _verify(op: Op) -> None:
    need(len(op.blocks) == 2, "a while has a cond and a body block")
    cond, body = op.blocks
    states = types_of(op.inputs)
    n_tape = op.attrs.get("n_tape", 0)
    need(types_of(cond.args) == states and types_of(cond.results) == [BOOL],
         "a while cond takes the state and yields one bool")
    need(types_of(body.args) == states and types_of(body.results[:len(states)]) == states
         and len(body.results) == len(states) + n_tape,
         "a while body takes the state and yields the new state, then its tapes")
    need(not n_tape or "trips" in op.attrs, "a while with tapes names its trip count")
    tapes = body.results[len(states):]
    trips = Dim.of(op.attrs["trips"]) if n_tape else None
    expected = states + [stack_type(trips, t.type) for t in tapes]
    need(types_of(op.outputs) == expected,
         "while outputs are the final states, then the tapes [trips, ...] (or ragged)")


def _reference(interp, op: Op, args: list[np.ndarray]) -> list[np.ndarray]:
    cond, body = op.blocks
    states = args
    n_state = len(states)
    tapes: list[list[np.ndarray]] = [[] for _ in body.results[n_state:]]
    trips = 0
    while bool(interp.block(cond, states)[0]):
        trips += 1
        if trips > MAX_TRIPS:
            raise RuntimeError(f"a while loop ran more than {MAX_TRIPS} times")
        out = interp.block(body, states)
        states = out[:n_state]
        for tape, value in zip(tapes, out[n_state:]):
            tape.append(value)
    return states + [_stacked(interp, tape, v, out) for tape, v, out
                     in zip(tapes, body.results[n_state:], op.outputs[n_state:])]


def _stacked(interp, tape: list[np.ndarray], v: Value, out: Value) -> np.ndarray:
    """A tape's trips' values stacked, or for a ragged tape laid end to end, where each
    trip's rows begin recorded for the loops that read it (`interp.ragged`)."""
    if ragged_rows(out.type) is None:
        return np.stack(tape) if tape else interp.empty_stack(0, v.type)
    count = np.array([value.shape[0] for value in tape], np.int64)
    first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    interp.ragged[out.id] = (first, count)
    rest = tuple(interp.ctx.dim(d) for d in out.type.shape[1:])
    return np.concatenate(tape + [np.zeros((0,) + rest, interp.ctx.np_dtype(out.type.dtype))])


def _grad(b: Builder, op: Op, cts: list, active: set[int], backprop):
    states = op.inputs
    body = op.blocks[1]
    captured = captured_floats(op.blocks[1:], active)
    with_ct = result_seeds(body, 0, len(states), cts)
    # a while in no loop (in ifs there or not) keeps the tapes of a while in its body,
    # each trip's laid end to end
    g = differentiate_block(body, with_ct, captured, STORE, backprop,
                            ragged=not b.in_block or b.rows)
    trips = Dim.of(op.attrs.setdefault("trips", TripCount.fresh()))

    def tape(values: list[Value]) -> list[Value]:
        if all(ragged_trips(v.type) for v in values) and \
                not any(c is not None for c in cts[len(states):]):
            # the backward loop learns its trip count from a tape's length (not from a
            # ragged one's, whose rows are all the trips' inner trips)
            values = values + [Builder(body).const(0, "i32")]
        return add_tapes(op, body, values, trips)
    return loop_backward(b, op, g, [], states, cts, captured, tape, True)


def _trim(op: Op, live: set[int]) -> None:
    trim_outputs(op, len(op.inputs), live, op.blocks[1:])
    if op.attrs.get("n_tape") == 0:
        op.attrs.pop("trips", None)


def _onnx(g, op: Op, xs: list[str]) -> list[str]:
    """A `Loop` without a trip count: the condition on the initial state is computed
    before it, and on the new state at the end of every trip."""
    if op.attrs.get("n_tape"):
        g.fail("a `while` that keeps tapes is part of a gradient program")
    cond, body = op.blocks
    first, = g.block(cond, xs)
    sub, (trip, _, *states) = g.subgraph("while", [("i", "i64", 0), ("cond", "bool", 0)] + [
        (v.hint or "state", v.type.dtype, v.type.rank) for v in body.args])
    new = sub.block(body, states)
    again, = sub.block(cond, new)
    new = sub.carry(trip, states, new)
    body_graph = sub.graph([again, *new], [BOOL] + [v.type for v in op.inputs])
    return g.ops("Loop", ["", first, *xs], len(op.outputs), body=body_graph)


def _redraw(op: Op, positions: dict, same: dict) -> list[Op]:
    """Draw again at `positions`, carried as new last states (replay.py)."""
    replay.carry(op, positions, same, 0, len(op.inputs))
    return [op]


WHILE = register(StructuredOp(
    "while", attrs={"n_tape": (int, 0), "trips": (TripCount, None)},
    blocks=("cond", "body"), verify=_verify, reference=_reference, grad=_grad, trim=_trim,
    sets_dims=lambda op: {op.attrs["trips"]} | {
        r for r in (ragged_rows(v.type) for v in op.outputs) if r is not None}
    if op.attrs.get("n_tape") else set(),
    repeats=True, redraw=_redraw, extra={"onnx": _onnx}))
