"""The IR verifier, run after every pass in tests: each value is defined once and before
it is read (a block reads its own values and those of the blocks around it); every
primitive's output types are what the table infers; structured ops follow the
conventions of codegen.ir. A failure raises IRError showing the op."""
from __future__ import annotations

from .ir import Block, Graph, IRError, Op, Value
from .primitives import TABLE, ShapeError
from .printer import format_op, name
from .shapes import Dim, TensorType

BOOL = TensorType("bool", ())


def verify(graph: Graph) -> None:
    """Check a whole graph; raise IRError on the first broken invariant."""
    roots = list(graph.inputs.values()) + [p.value for p in graph.params.values()]
    checker = _Checker()
    for v in roots:
        checker.define(v, None)
    checker.block(graph.body, [set(id(v) for v in roots)])
    visible = {id(v) for v in roots} | {id(v) for op in graph.body.ops for v in op.outputs}
    named = list(graph.outputs.items()) + list(graph.param_grads.items()) \
        + list(graph.input_grads.items())
    for key, v in named:
        if id(v) not in visible:
            raise IRError(f"graph result `{key}` is {name(v)}, which the body does not define")


class _Checker:
    def __init__(self):
        self.defined: set[int] = set()

    def define(self, v: Value, op: Op | None) -> None:
        if id(v) in self.defined:
            where = f" by\n{_show(op)}" if op else ""
            raise IRError(f"{name(v)} is defined twice{where}")
        self.defined.add(id(v))

    def block(self, block: Block, scopes: list[set[int]]) -> None:
        here: set[int] = set()
        for v in block.args:
            self.define(v, None)
            here.add(id(v))
        scopes = scopes + [here]
        for op in block.ops:
            for v in op.inputs:
                _visible(v, scopes, op)
            for sub in op.blocks:
                self.block(sub, scopes)
            self.op(op)
            for v in op.outputs:
                self.define(v, op)
                here.add(id(v))
        for v in block.results:
            if not any(id(v) in s for s in scopes):
                raise IRError(f"a block yields {name(v)}, which is not visible there")

    def op(self, op: Op) -> None:
        check = STRUCTURED.get(op.prim)
        if check is not None:
            check(op)
            return
        if op.prim not in TABLE:
            raise IRError(f"unknown primitive `{op.prim}` in\n{_show(op)}")
        if op.blocks:
            raise IRError(f"primitive `{op.prim}` owns blocks in\n{_show(op)}")
        try:
            types = TABLE[op.prim].infer([v.type for v in op.inputs], op.attrs)
        except ShapeError as exc:
            raise IRError(f"{exc} in\n{_show(op)}") from None
        _expect(op, [v.type for v in op.outputs] == types, f"outputs should be "
                f"{', '.join(map(str, types))}")


def _visible(v: Value, scopes: list[set[int]], op: Op) -> None:
    if not any(id(v) in s for s in scopes):
        raise IRError(f"{name(v)} is read before it is defined, or outside its block, in\n"
                      f"{_show(op)}")


def _show(op: Op) -> str:
    return "\n".join(format_op(op, 1))


def _expect(op: Op, cond: bool, message: str) -> None:
    if not cond:
        raise IRError(f"{message} in\n{_show(op)}")


def _types(values: list[Value]) -> list[TensorType]:
    return [v.type for v in values]


def _for(op: Op) -> None:
    a = op.attrs
    n_seq, n_state = a["n_seq"], a["n_state"]
    _expect(op, len(op.blocks) == 1 and n_seq >= 1, "a for has one block and a sequence")
    _expect(op, len(op.inputs) == n_seq + n_state + bool(a["has_lengths"]),
            "for inputs are sequences, states [and lengths]")
    seqs, states = op.inputs[:n_seq], op.inputs[n_seq:n_seq + n_state]
    steps = seqs[0].type.shape[0] if seqs[0].type.rank else None
    _expect(op, all(s.type.rank >= 1 and s.type.shape[0] == steps for s in seqs),
            "for sequences share their leading dim")
    if a["has_lengths"]:
        lengths = op.inputs[-1].type
        _expect(op, seqs[0].type.rank >= 2 and lengths == TensorType(
            "i32", seqs[0].type.shape[1:2]), "for lengths are i32[B]")
    body = op.blocks[0]
    slices = [s.type.with_shape(s.type.shape[1:]) for s in seqs]
    _expect(op, _types(body.args) == slices + _types(states),
            "for body args are the step slices, then the states")
    _expect(op, _types(body.results[:n_state]) == _types(states),
            "for body results start with the new states")
    yields = body.results[n_state:]
    stacked = [y.type.with_shape((steps,) + y.type.shape) for y in yields]
    _expect(op, _types(op.outputs) == _types(states) + stacked,
            "for outputs are the final states, then the stacked yields")
    _expect(op, 0 <= a.get("n_tape", 0) <= len(yields), "n_tape counts trailing yields")


def _if(op: Op) -> None:
    _expect(op, len(op.inputs) == 1 and op.inputs[0].type == BOOL, "an if tests a bool")
    _expect(op, len(op.blocks) == 2 and not op.blocks[0].args and not op.blocks[1].args,
            "an if has two blocks without args")
    then, orelse = op.blocks
    _expect(op, _types(then.results) == _types(orelse.results) == _types(op.outputs),
            "if branches yield the if's output types")
    _expect(op, 0 <= op.attrs.get("n_tape", 0) <= len(op.outputs), "n_tape counts outputs")


def _while(op: Op) -> None:
    _expect(op, len(op.blocks) == 2, "a while has a cond and a body block")
    cond, body = op.blocks
    states = _types(op.inputs)
    n_tape = op.attrs.get("n_tape", 0)
    _expect(op, _types(cond.args) == states and _types(cond.results) == [BOOL],
            "a while cond takes the state and yields one bool")
    _expect(op, _types(body.args) == states and _types(body.results[:len(states)]) == states
            and len(body.results) == len(states) + n_tape,
            "a while body takes the state and yields the new state, then its tapes")
    tapes = body.results[len(states):]
    trips = Dim.of(op.attrs["trips"]) if n_tape else None
    expected = states + [t.type.with_shape((trips,) + t.type.shape) for t in tapes]
    _expect(op, _types(op.outputs) == expected, "while outputs are the final states, then "
            "the tapes [trips, ...]")


STRUCTURED = {"for": _for, "if": _if, "while": _while}
