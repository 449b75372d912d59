"""The table of the language's built-in functions and the helpers that bind and check
their arguments; dsl/builtins.py and dsl/formulas.py fill the table."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from codegen.ir.diagnostics import Loc, MdlTypeError
from codegen.ir.dtypes import FLOATS, literal
from codegen.ir.graph import Value
from codegen.ir.shapes import TensorType

from .env import Const
from .signature import Signature


@dataclass
class Builtin:
    sig: Signature
    run: Callable  # (elaborator, args: {name: (value, loc)}, call) -> Value | tuple


BUILTINS: dict[str, Builtin] = {}


def builtin(name: str, *names: str, raw: tuple[str, ...] = (), **defaults):
    def register(fn):
        BUILTINS[name] = Builtin(Signature(list(names), defaults, frozenset(raw)), fn)
        return fn
    return register


# ---- argument helpers ----
def tensor(el, arg, like=None) -> Value:
    value, loc = arg
    if isinstance(value, list):
        raise MdlTypeError("expected a tensor here, got a list", loc)
    if isinstance(value, tuple):
        raise MdlTypeError("expected one tensor here, got several values", loc)
    return el.to_tensor(value, loc, like)


def const(arg, kind: str, what: str):
    value, loc = arg
    if not (isinstance(value, Const) and (value.kind == kind or
                                          kind == "float" and value.kind == "int")):
        got = f", got the {value.kind} {literal(value.value)}" if isinstance(value, Const) else ""
        raise MdlTypeError(f"{what} must be a compile-time {kind}{got}", loc)
    return value.value


def axis(arg, rank: int) -> int:
    if isinstance(arg[0], list):  # softmax, argmax, concat, ...: reductions take lists
        raise MdlTypeError("this `axis` is one axis, not a list", arg[1])
    a = const(arg, "int", "axis")
    if not -rank <= a < rank:  # a rank-0 value has none: `softmax(s, axis = 0)` of a
        # scalar passed here, and then failed in the backend
        valid = f" (axes {-rank} to {rank - 1})" if rank else " (a rank-0 value has no axes)"
        raise MdlTypeError(f"axis {a} is out of range for rank {rank}{valid}", arg[1])
    return a % rank


def axes(arg, rank: int) -> tuple[int, ...]:
    value, loc = arg
    if value is None:
        return tuple(range(rank))
    items = value if isinstance(value, list) else [value]
    out = tuple(sorted({axis((v, loc), rank) for v in items}))
    if len(out) != len(items):
        raise MdlTypeError("an axis is listed twice", loc)
    return out


def tensor_list(el, arg) -> list[Value]:
    value, loc = arg
    if not isinstance(value, list) or not value:
        raise MdlTypeError("expected a non-empty list of tensors: [a, b, ...]", loc)
    first = next((v for v in value if isinstance(v, Value)), None)
    return [el.to_tensor(v, loc, first.type if first else None) for v in value]


def of_dtype(el, arg, name: str, allowed: tuple[str, ...]) -> Value:
    """The tensor argument of built-in `name`, checked here so that an error names it
    (and not a primitive of its formula). A number is one of the model's float type for a
    function of floats (`silu(2)`, as `sigmoid(2)`)."""
    value, loc = arg
    if allowed == FLOATS and isinstance(value, Const) and value.kind in ("int", "float"):
        return el.to_tensor(Const.of(float(value.value)), loc, TensorType(el.float_dtype, ()))
    x = tensor(el, arg)
    if x.type.dtype not in allowed:
        raise MdlTypeError(f"`{name}` is not defined for {x.type.dtype} "
                           f"(needs {' or '.join(allowed)})", arg[1])
    return x


def number(el, value: float, like: Value, loc: Loc) -> Value:
    """A constant of `like`'s dtype, for a formula's coefficients."""
    return el.to_tensor(Const.of(value), loc, like.type)
