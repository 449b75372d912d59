"""The entry type of the one table of primitives, the registry, and the helpers every
group of entries shares (shape checks, broadcasting, reducing gradients to a shape).

An entry declares a primitive once:
- `rule(types, attrs) -> types`: the shape/dtype rule (raises ShapeError),
- `grad(b, op, cts) -> [ct or None per input]`: the gradient rule, written as IR through
  the builder `b` (so gradients of gradients work); `cts` has one cotangent per output,
- `ref(ctx, attrs, *arrays)`: the NumPy reference (one array, or a list for several
  outputs); `ctx` evaluates dims (`ctx.dim`), knows the float dtype and the RNG,
- `simplify(b, op, facts) -> [values] | None`: algebraic identities, the values that
  replace the op's outputs (`facts.const(v)` is the one number a value is known to hold
  everywhere, or None; new ops go through the builder `b`),
- `expand(b, op) -> [Value]`: a decomposition into other primitives, applied before
  autodiff; a primitive with `grad=None` and an `expand` is differentiated through it,
- `random`: draws from the RNG (never recomputed, merged or folded),
- `redraw`: how it draws the same numbers again from a stream position
  (ops/structured/replay.py),
- `selects`: every element of the result is an element of the first operand (reshape,
  slicing, gathering, broadcasting): a first operand holding one number everywhere gives
  a result holding that same number, which simplification can see through, and integer
  bounds carry over from the operand (gradient checks),
- `uniform(op)`: the one number every element of the result holds, known from the op
  alone (a constant; a Dim for a size bound at run time): no memory needed, and
  simplification sees it,
- `integer_bounds(op, size) -> [(input, lo, hi)]`: the half-open ranges integer inputs
  must lie in (indices within their table); `size(dim)` evaluates a dim. Gradient checks
  draw valid inputs from them,
- `product`, `accumulates`, `checks`: declared facts (codegen/ops/entry.py says what they
  mean),
- `step_sum(op, value, producers, stack, facts) -> emit(b) -> Value | None`: the sum
  over a loop's steps of `value`, one of the op's results, computed after the loop from
  operands kept for every step (`stack(v)`: v's value for every step, or None;
  `producers`: the ops by output id of the block holding `op`; `facts`: what the
  simplification pass knows, codegen/transforms/passes.py), for
  ops/structured/for_sink.py; None where it cannot,
- `step_rows(op) -> Value | None`: the operand whose rows the op's result is, merged
  the way a weight's gradient merges them (`reshape` of [trips, B, H], a nested while's
  tape, into [trips * B, H]): for_sink.py's `stack` then reads that operand's steps, a
  loop's ragged yield, whose rows merged alike are every step's (a product over them is
  the sum over the steps: both operands' rows merged the same way stay aligned); None
  for another use of the op,
- `extra`: hooks of later stages (the backend's `lower`, `statements`, `sums`,
  `gathers`: codegen/backend/op_lowering.py), and the one a primitive declares itself:
  `onnx(g, op, inputs) -> name or names`, its ONNX form in an inference graph (`training`
  off), written through the emitter `g` of codegen/export/onnx_graph.py (`inputs` are the
  operands' ONNX names); `onnx_node(type)` is the rule of a primitive that is one ONNX
  node of the same operands. A comparison's `relation` (its symbol, `<`) and `and`'s and
  `or`'s `connective` (all, any) say what a true result says of the operands (gradient
  checks draw integer inputs that keep an `assert`: reference/gradcheck.py).
Every entry answers what codegen/ops/entry.py lists; `entry(op)` finds it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...ir.dtypes import DTYPES
from ...ir.graph import IRError, Op, rename
from ...ir.shapes import Dim, TensorType, broadcast_shapes
from ..entry import OPS, Broken, OpEntry


class ShapeError(Exception):
    """A primitive's operands do not fit its rule; the message says how."""


Rule = Callable[[list[TensorType], dict], list[TensorType]]


@dataclass(eq=False)
class Primitive(OpEntry):
    name: str
    rule: Rule
    arity: int | None            # None: variadic
    elementwise: bool = False    # fusable pointwise op with broadcasting
    extra: dict = field(default_factory=dict)
    grad: Callable | None = None
    ref: Callable | None = None
    simplify: Callable | None = None
    expand: Callable | None = None
    random: bool = False
    selects: bool = False
    uniform: Callable | None = None
    integer_bounds: Callable | None = None
    bounds: Callable | None = None   # dims the call must keep >= 0 (ops/entry.py)
    product: bool = False
    accumulates: bool = False
    reduces: bool = False        # reduces its one operand along attrs["axes"] (keepdims)
    checks: bool = False         # checks the call's data (an assert): never dropped
    faults: bool = False         # may raise on the call's data (ops/entry.py)
    step_sum: Callable | None = None
    step_rows: Callable | None = None
    redraw: Callable | None = None
    blocks = ()  # a primitive owns none

    def trim(self, op: Op, live: set[int]) -> None:
        """A primitive keeps all its outputs while one is read."""

    def infer(self, types: list[TensorType], attrs: dict) -> list[TensorType]:
        if self.arity is not None and len(types) != self.arity:
            raise ShapeError(f"{self.name} takes {self.arity} operands, got {len(types)}")
        return self.rule(types, attrs)

    def check(self, op: Op) -> None:
        if op.blocks:
            raise Broken(f"primitive `{op.prim}` owns blocks")
        try:
            types = self.infer([v.type for v in op.inputs], op.attrs)
        except ShapeError as exc:
            raise Broken(str(exc)) from None
        if [v.type for v in op.outputs] != types:
            raise Broken(f"outputs should be {', '.join(map(str, types))}")

    def evaluate(self, interp, op: Op, args: list) -> list:
        attrs = op.attrs
        if self.random and "salt" not in attrs:
            attrs = {**attrs, "salt": interp.salts[id(op)]}
        outs = self.ref(interp.ctx, attrs, *args)
        return list(outs) if len(op.outputs) > 1 else [outs]

    def gradient(self, b, op: Op, cts: list, active: set[int], backprop) -> tuple:
        if self.grad is None:
            raise IRError(f"`{op.prim}` has no gradient rule; it is differentiated "
                          "through its expansion (codegen.transforms.prepare.prepare)")
        filled = [ct if ct is not None else b.zeros(v.type, v)
                  for v, ct in zip(op.outputs, cts)]
        return self.grad(b, op, filled), []

    def rewrite(self, op: Op, autodiff: bool):
        """Its expansion, before autodiff (a random mask becomes a value to keep)."""
        if not (autodiff and self.expand):
            return None
        return lambda b, op: rename(b.block.ops, self.expand(b, op), op.outputs)


TABLE: dict[str, Primitive] = {}


def primitive(name: str, arity: int | None, elementwise: bool = False,
              onnx: Callable | None = None, **hooks):
    """Decorator registering a shape rule under `name` with the given hooks (`onnx`, the
    ONNX rule, goes into `extra`)."""
    def register(rule: Rule) -> Rule:
        TABLE[name] = OPS[name] = Primitive(name, rule, arity, elementwise, **hooks)
        if onnx is not None:
            TABLE[name].extra["onnx"] = onnx
        return rule
    return register


def need(cond: bool, message: str) -> None:
    if not cond:
        raise ShapeError(message)


def onnx_node(op_type: str, **attrs) -> Callable:
    """The ONNX rule of a primitive that is the ONNX node `op_type` of its operands."""
    return lambda g, op, xs: g.op(op_type, *xs, **attrs)


def broadcast(types: list[TensorType], what: str) -> tuple[Dim, ...]:
    shape = types[0].shape
    for t in types[1:]:
        out = broadcast_shapes(shape, t.shape)
        need(out is not None, f"{what} needs shapes that broadcast, got "
             + " and ".join(str(t) for t in types))
        shape = out
    return shape


def cast_hint(dtypes) -> str:
    """How to make operands of these dtypes one: a cast to each (`f32(...)`, `bool(...)`:
    the casts of the language, each named as the type it makes)."""
    return "cast one with " + " or ".join(f"{d}(...)" for d in DTYPES if d in set(dtypes))


def same_dtype(types: list[TensorType], what: str, allowed: tuple[str, ...]) -> str:
    dtypes = {t.dtype for t in types}
    need(len(dtypes) == 1, f"{what} needs operands of one dtype, got "
         + " and ".join(str(t) for t in types) + f" ({cast_hint(dtypes)})")
    dtype = dtypes.pop()
    need(dtype in allowed, f"{what} is not defined for {dtype} (needs {' or '.join(allowed)})")
    return dtype



def reduce_to(b, ct, t: TensorType):
    """The cotangent `ct` of a broadcast result, summed back to the operand type `t`."""
    return ct if ct.type.shape == t.shape else b.sum_to(ct, shape=t.shape)

