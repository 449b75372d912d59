"""The built-ins written as formulas of primitives (their ops fuse with the code around
them, differentiate and export as those do): the activation functions and the minima.
dsl/builtins.py registers the rest and imports this module."""
from __future__ import annotations

import math

from codegen.ir.diagnostics import Loc, MdlTypeError
from codegen.ir.dtypes import FLOATS, NUMERIC
from codegen.ir.graph import Value

from .registry import axes, axis, builtin, const, number, of_dtype
from .env import Const

# The activation functions here: float in, float out, defined for every finite x (the
# fuzzer draws them with the unary primitives)
ACTIVATIONS = ("silu", "gelu", "elu", "leaky_relu")


# silu(x) = x * sigmoid(x) (torch.nn.SiLU, also called swish)
@builtin("silu", "x")
def _silu(el, a, call):
    x = of_dtype(el, a["x"], "silu", FLOATS)
    return el.emit("mul", [x, el.emit("sigmoid", [x], {}, call.loc)[0]], {}, call.loc)[0]


# gelu(x) = x / 2 * (1 + erf(x / sqrt(2))) (torch.nn.GELU, its exact form), computed as
# x / 2 * erfc(-x / sqrt(2)): the same, without 1 + erf cancelling for x < -3 (where
# PyTorch's f32 gelu and a direct formula lose most of the value's digits). With
# `approximate = true`, GELU(approximate = "tanh"): x / 2 * (1 + tanh(u)), u =
# sqrt(2 / pi) * (x + 0.044715 x^3), computed as x * sigmoid(2u), the same without the
# cancellation.
@builtin("gelu", "x", "approximate", approximate=Const(False, "bool"))
def _gelu(el, a, call):
    x = of_dtype(el, a["x"], "gelu", FLOATS)
    loc = call.loc
    if const(a["approximate"], "bool", "gelu's `approximate`"):
        cube = el.emit("mul", [el.emit("mul", [x, x], {}, loc)[0], x], {}, loc)[0]
        inner = el.emit("add", [x, el.emit("mul", [cube, number(el, 0.044715, x, loc)], {},
                                           loc)[0]], {}, loc)[0]
        u2 = el.emit("mul", [inner, number(el, 2 * math.sqrt(2 / math.pi), x, loc)], {}, loc)[0]
        return el.emit("mul", [x, el.emit("sigmoid", [u2], {}, loc)[0]], {}, loc)[0]
    scaled = el.emit("mul", [x, number(el, -math.sqrt(0.5), x, loc)], {}, loc)[0]
    half = el.emit("mul", [x, number(el, 0.5, x, loc)], {}, loc)[0]
    return el.emit("mul", [half, el.emit("erfc", [scaled], {}, loc)[0]], {}, loc)[0]


def _positive(el, x: Value, loc: Loc) -> Value:
    return el.emit("gt", [x, number(el, 0, x, loc)], {}, loc)[0]


# elu(x, alpha) = alpha * (exp(x) - 1) where x <= 0, else x (torch.nn.ELU; a NaN takes
# the x branch, so its gradient is 1, PyTorch's). The exp reads 0 where x > 0, so that a
# large x (whose branch `where` drops) gives no infinity whose cotangent, 0 times it,
# would be NaN.
@builtin("elu", "x", "alpha", alpha=Const(1.0, "float"))
def _elu(el, a, call):
    x = of_dtype(el, a["x"], "elu", FLOATS)
    alpha = const(a["alpha"], "float", "elu's `alpha`")
    loc = call.loc
    below_zero = el.emit("le", [x, number(el, 0, x, loc)], {}, loc)[0]
    clipped = el.emit("where", [below_zero, x, number(el, 0.0, x, loc)], {}, loc)[0]
    below = el.emit("mul", [number(el, alpha, x, loc),
                            el.emit("expm1", [clipped], {}, loc)[0]], {}, loc)[0]
    return el.emit("where", [below_zero, below, x], {}, loc)[0]


# leaky_relu(x, slope) = x where x > 0, else slope * x (torch.nn.LeakyReLU)
@builtin("leaky_relu", "x", "slope", slope=Const(0.01, "float"))
def _leaky_relu(el, a, call):
    x = of_dtype(el, a["x"], "leaky_relu", FLOATS)
    slope = const(a["slope"], "float", "leaky_relu's `slope`")
    loc = call.loc
    below = el.emit("mul", [x, number(el, slope, x, loc)], {}, loc)[0]
    return el.emit("where", [_positive(el, x, loc), x, below], {}, loc)[0]


def _order_reversed(el, x: Value, loc: Loc) -> Value:
    """x with its order turned around, exactly: -x of floats (a NaN stays one), and
    -1 - x of i32, which maps i32's lowest value to its highest (-x would wrap it to
    itself)."""
    if x.type.dtype == "i32":
        return el.emit("sub", [number(el, -1, x, loc), x], {}, loc)[0]
    return el.emit("neg", [x], {}, loc)[0]


# min and argmin: max and argmax of the values in reversed order (their gradient, ties,
# NaN and empty axes follow: the min of nothing is +inf, or i32's highest value)
@builtin("min", "x", "axis", "keepdims", axis=None, keepdims=Const(False, "bool"))
def _min(el, a, call):
    x = of_dtype(el, a["x"], "min", NUMERIC)
    attrs = {"axes": axes(a["axis"], x.type.rank),
             "keepdims": const(a["keepdims"], "bool", "keepdims")}
    top = el.emit("max", [_order_reversed(el, x, call.loc)], attrs, call.loc)[0]
    return _order_reversed(el, top, call.loc)


@builtin("argmin", "x", "axis", axis=Const(-1, "int"))
def _argmin(el, a, call):
    x = of_dtype(el, a["x"], "argmin", NUMERIC)
    if x.type.rank == 0:
        raise MdlTypeError(f"`argmin` needs a tensor of rank 1 or more, got {x.type}",
                           a["x"][1])
    return el.emit("argmax", [_order_reversed(el, x, call.loc)],
                   {"axis": axis(a["axis"], x.type.rank)}, call.loc)[0]
