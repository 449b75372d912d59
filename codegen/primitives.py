"""The one table of primitives. Each entry declares a primitive once: its shape/dtype rule
here; the gradient rule, NumPy reference and emission hooks of later stages attach to the
same entry by name. No other module knows about specific ops.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .shapes import Dim, TensorType, broadcast_shapes

NUMERIC = ("f32", "f64", "i32")


class ShapeError(Exception):
    """A primitive's operands do not fit its rule; the message says how."""


Rule = Callable[[list[TensorType], dict], list[TensorType]]


@dataclass
class Primitive:
    name: str
    rule: Rule
    arity: int | None            # None: variadic
    elementwise: bool = False    # fusable pointwise op with broadcasting
    extra: dict = field(default_factory=dict)

    def infer(self, types: list[TensorType], attrs: dict) -> list[TensorType]:
        if self.arity is not None and len(types) != self.arity:
            raise ShapeError(f"{self.name} takes {self.arity} operands, got {len(types)}")
        return self.rule(types, attrs)


TABLE: dict[str, Primitive] = {}


def primitive(name: str, arity: int | None, elementwise: bool = False):
    def register(rule: Rule) -> Rule:
        TABLE[name] = Primitive(name, rule, arity, elementwise)
        return rule
    return register


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ShapeError(message)


def _broadcast(types: list[TensorType], what: str) -> tuple[Dim, ...]:
    shape = types[0].shape
    for t in types[1:]:
        out = broadcast_shapes(shape, t.shape)
        _need(out is not None, f"{what} needs shapes that broadcast, got "
              + " and ".join(str(t) for t in types))
        shape = out
    return shape


def _same_dtype(types: list[TensorType], what: str, allowed: tuple[str, ...]) -> str:
    dtypes = {t.dtype for t in types}
    _need(len(dtypes) == 1, f"{what} needs operands of one dtype, got "
          + " and ".join(str(t) for t in types) + " (cast one with f32(...), i32(...))")
    dtype = dtypes.pop()
    _need(dtype in allowed, f"{what} is not defined for {dtype} (needs {' or '.join(allowed)})")
    return dtype


# ---- elementwise ---------------------------------------------------------------
def _unary(name: str, allowed: tuple[str, ...]) -> None:
    def rule(types, attrs):
        _same_dtype(types, f"`{name}`", allowed)
        return [types[0]]
    primitive(name, 1, elementwise=True)(rule)


for _name in ("exp", "log", "tanh", "sigmoid", "sqrt", "sin", "cos", "sign"):
    _unary(_name, ("f32", "f64"))
for _name in ("neg", "abs", "relu"):
    _unary(_name, NUMERIC)
_unary("not", ("bool",))

BINARY_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**",
                  "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
                  "and": "and", "or": "or", "maximum": "maximum", "minimum": "minimum"}


def _binary(name: str, allowed: tuple[str, ...], result: str | None = None) -> None:
    what = f"`{BINARY_SYMBOLS[name]}`"

    def rule(types, attrs):
        dtype = _same_dtype(types, what, allowed)
        return [TensorType(result or dtype, _broadcast(types, what))]
    primitive(name, 2, elementwise=True)(rule)


for _name in ("add", "sub", "mul", "maximum", "minimum"):
    _binary(_name, NUMERIC)
for _name in ("div", "pow"):
    _binary(_name, ("f32", "f64"))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    _binary(_name, NUMERIC + ("bool",) if _name in ("eq", "ne") else NUMERIC, "bool")
for _name in ("and", "or"):
    _binary(_name, ("bool",))


@primitive("where", 3, elementwise=True)
def _where(types, attrs):
    cond, a, b = types
    _need(cond.dtype == "bool", f"`where` needs a bool condition, got {cond}")
    dtype = _same_dtype([a, b], "`where`", NUMERIC + ("bool",))
    return [TensorType(dtype, _broadcast(types, "`where`"))]


@primitive("cast", 1, elementwise=True)
def _cast(types, attrs):
    return [types[0].with_dtype(attrs["dtype"])]


# ---- creation --------------------------------------------------------------------
@primitive("full", 0)
def _full(types, attrs):
    return [TensorType(attrs["dtype"], tuple(attrs["shape"]))]


@primitive("one_hot", 1)
def _one_hot(types, attrs):
    ids, = types
    _need(ids.dtype == "i32", f"`one_hot` needs i32 indices, got {ids}")
    return [TensorType(attrs["dtype"], ids.shape + (Dim.of(attrs["n"]),))]


# ---- linear algebra and reductions -------------------------------------------------
@primitive("matmul", 2)
def _matmul(types, attrs):
    a, b = types
    _same_dtype(types, "`@`", ("f32", "f64"))
    _need(a.rank >= 2 and b.rank == 2,
          f"`@` multiplies a matrix (or a batch of them) by a matrix, got {a} @ {b}")
    _need(a.shape[-1] == b.shape[0], f"`@` needs matching inner dims, got {a} @ {b}")
    return [a.with_shape(a.shape[:-1] + b.shape[1:])]


def _reduce(name: str, allowed: tuple[str, ...]) -> None:
    def rule(types, attrs):
        x, = types
        _same_dtype(types, f"`{name}`", allowed)
        axes = attrs["axes"]
        if attrs["keepdims"]:
            shape = tuple(Dim.of(1) if i in axes else d for i, d in enumerate(x.shape))
        else:
            shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return [x.with_shape(shape)]
    primitive(name, 1)(rule)


_reduce("sum", NUMERIC)
_reduce("max", NUMERIC)
_reduce("mean", ("f32", "f64"))
_reduce("logsumexp", ("f32", "f64"))


def _softmax_rule(name: str) -> None:
    def rule(types, attrs):
        _same_dtype(types, f"`{name}`", ("f32", "f64"))
        return [types[0]]
    primitive(name, 1)(rule)


_softmax_rule("softmax")
_softmax_rule("log_softmax")


@primitive("cross_entropy", None)
def _cross_entropy(types, attrs):
    logits, targets, *rest = types
    _need(logits.is_float, f"`cross_entropy` needs float logits, got {logits}")
    _need(targets.dtype == "i32", f"`cross_entropy` needs i32 targets, got {targets}")
    _need(logits.rank >= 1 and logits.shape[:-1] == targets.shape,
          f"`cross_entropy` needs targets shaped like the logits without their last dim, "
          f"got logits {logits} and targets {targets}")
    if rest:
        lengths, = rest
        _need(targets.rank == 2 and lengths.dtype == "i32" and lengths.shape == targets.shape[1:],
              f"`cross_entropy` with lengths needs targets i32[T, B] and lengths i32[B], "
              f"got targets {targets} and lengths {lengths}")
    return [TensorType(logits.dtype, ())]


@primitive("dropout", 1)
def _dropout(types, attrs):
    _same_dtype(types, "`dropout`", ("f32", "f64"))
    return [types[0]]


# ---- structure ---------------------------------------------------------------------
@primitive("concat", None)
def _concat(types, attrs):
    axis = attrs["axis"]
    _same_dtype(types, "`concat`", NUMERIC + ("bool",))
    first = types[0]
    for t in types[1:]:
        _need(t.rank == first.rank and all(
            a == b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis),
            f"`concat` along axis {axis} needs the other dims to agree, got "
            + ", ".join(str(t) for t in types))
    total = Dim.of(0)
    for t in types:
        total = total + t.shape[axis]
    return [first.with_shape(first.shape[:axis] + (total,) + first.shape[axis + 1:])]


@primitive("stack", None)
def _stack(types, attrs):
    _same_dtype(types, "`stack`", NUMERIC + ("bool",))
    _need(all(t.shape == types[0].shape for t in types),
          "`stack` needs operands of one shape, got " + ", ".join(str(t) for t in types))
    axis, shape = attrs["axis"], types[0].shape
    return [types[0].with_shape(shape[:axis] + (Dim.of(len(types)),) + shape[axis:])]


@primitive("split", 1)
def _split(types, attrs):
    x, = types
    axis, parts = attrs["axis"], attrs["parts"]
    try:
        piece = x.shape[axis].exact_div(parts)
    except Exception:
        raise ShapeError(f"`split` into {parts} parts needs axis {axis} of {x} "
                         f"to divide by {parts}") from None
    return [x.with_shape(x.shape[:axis] + (piece,) + x.shape[axis + 1:])] * parts


@primitive("reshape", 1)
def _reshape(types, attrs):
    x, = types
    shape = tuple(attrs["shape"])
    size_in, size_out = Dim.of(1), Dim.of(1)
    for d in x.shape:
        size_in = size_in * d
    for d in shape:
        size_out = size_out * d
    _need(size_in == size_out, f"`reshape` cannot turn {x} ({size_in} elements) into shape "
          f"[{', '.join(map(str, shape))}] ({size_out} elements)")
    return [x.with_shape(shape)]


@primitive("transpose", 1)
def _transpose(types, attrs):
    x, = types
    perm = attrs["perm"]
    _need(sorted(perm) == list(range(x.rank)),
          f"`transpose` needs a permutation of 0..{x.rank - 1}, got {list(perm)}")
    return [x.with_shape(tuple(x.shape[p] for p in perm))]


@primitive("index", 2)
def _index(types, attrs):
    x, t = types
    _need(x.rank >= 1, f"cannot index a scalar {x}")
    _need(t.dtype == "i32" and t.rank == 0, f"an index must be an i32 scalar, got {t}")
    return [x.with_shape(x.shape[1:])]


@primitive("slice", 1)
def _slice(types, attrs):
    x, = types
    shape = tuple(stop - start for start, stop in zip(attrs["starts"], attrs["stops"]))
    return [x.with_shape(shape + x.shape[len(shape):])]


@primitive("gather", 2)
def _gather(types, attrs):
    table, ids = types
    _need(table.rank >= 1, f"cannot gather rows of a scalar {table}")
    _need(ids.dtype == "i32", f"gathering rows needs i32 indices, got {ids}")
    return [table.with_shape(ids.shape + table.shape[1:])]
