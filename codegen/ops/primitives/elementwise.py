"""Elementwise primitives: unary math, broadcasting binary ops, comparisons, `where`
and `cast`. Declared with helpers for the common kinds (as JAX's defjvp): a unary
gradient is g times a local derivative; a binary one is reduced back to each operand's
shape (broadcasting)."""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import FLOATS, I32_MAX, I32_MIN, NUMERIC
from ...ir.graph import has_dynamic
from ...ir.shapes import TensorType
from .core import TABLE, broadcast, need, onnx_node, primitive, reduce_to, same_dtype

BINARY_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//",
                  "mod": "%", "pow": "**",
                  "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
                  "and": "and", "or": "or", "maximum": "maximum", "minimum": "minimum"}


def _larger(a, b):
    """b where it is larger or NaN, else a: the targets' mdl::larger (mdl/scalar.h), so a
    tie of 0.0 and -0.0 keeps a's sign as they and PyTorch do (NumPy's vectorized
    `maximum` keeps b's, its scalar one a's)."""
    return np.where((b > a) | (b != b), b, a)


def _smaller(a, b):
    return np.where((b < a) | (b != b), b, a)


def _sign(x):
    """-1, 1, NaN for NaN, and 0.0 for either zero (PyTorch's and NumPy's), as the
    targets' lowering computes it."""
    return np.where(np.abs(x) > 0, np.sign(x), np.where(x != x, x, 0)).astype(x.dtype)


def _sigmoid(x):
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# ---- unary ------------------------------------------------------------------------
def unary(name: str, allowed: tuple[str, ...], ref, local=None, simplify=None,
          onnx=None) -> None:
    """A unary elementwise primitive; `local(b, x, y, g)` is the cotangent of x; `onnx`
    its ONNX rule, or the name of the one ONNX node it is."""
    def rule(types, attrs):  # `neg` is what the user wrote as `-x`
        same_dtype(types, "unary `-`" if name == "neg" else f"`{name}`", allowed)
        return [types[0]]

    def grad(b, op, cts):
        return [local(b, op.inputs[0], op.outputs[0], cts[0])]
    primitive(name, 1, elementwise=True, grad=grad if local else _no_grad,
              ref=lambda ctx, attrs, x: ref(x), simplify=simplify,
              onnx=onnx_node(onnx) if isinstance(onnx, str) else onnx)(rule)


def _no_grad(b, op, cts):
    """Piecewise constant or integer valued: no cotangent flows to any input."""
    return [None] * len(op.inputs)


def _relu_onnx(g, op, xs):
    """Relu of floats; max(x, 0) of integers, which not every runtime's Relu takes."""
    dtype = op.inputs[0].type.dtype
    return g.op("Relu", *xs) if dtype in FLOATS else g.op("Max", xs[0], g.const(0, dtype))


def _one(b, v):
    return b.const(1, v.type.dtype)


unary("exp", FLOATS, np.exp, lambda b, x, y, g: b.mul(g, y), onnx="Exp")
unary("log", FLOATS, np.log, lambda b, x, y, g: b.div(g, x), onnx="Log")
unary("tanh", FLOATS, np.tanh, lambda b, x, y, g: b.mul(g, b.sub(_one(b, y), b.mul(y, y))),
      onnx="Tanh")
unary("sigmoid", FLOATS, _sigmoid,
      lambda b, x, y, g: b.mul(g, b.mul(y, b.sub(_one(b, y), y))), onnx="Sigmoid")
unary("sqrt", FLOATS, np.sqrt,
      lambda b, x, y, g: b.div(g, b.mul(b.const(2, y.type.dtype), y)), onnx="Sqrt")
unary("sin", FLOATS, np.sin, lambda b, x, y, g: b.mul(g, b.cos(x)), onnx="Sin")
unary("cos", FLOATS, np.cos, lambda b, x, y, g: b.neg(b.mul(g, b.sin(x))), onnx="Cos")
unary("sign", FLOATS, _sign, onnx="Sign")
def _neg_neg(b, op, facts):
    inner = facts.producer(op.inputs[0])
    return [inner.inputs[0]] if inner is not None and inner.prim == "neg" else None


unary("neg", NUMERIC, np.negative, lambda b, x, y, g: b.neg(g), _neg_neg, onnx="Neg")


def _abs_grad(b, x, y, g):
    """g times x's sign, and 0 at a NaN as at a zero (PyTorch's: sign(NaN) times g was NaN)."""
    zero = b.const(0, x.type.dtype)
    return b.where(b.gt(x, zero), g, b.where(b.lt(x, zero), b.neg(g), b.const(0, g.type.dtype)))


unary("abs", NUMERIC, np.abs, _abs_grad, onnx="Abs")
# all of g where x is not <= 0, a NaN included (PyTorch's relu: its NaN passes g back)
unary("relu", NUMERIC, lambda x: _larger(x, np.zeros((), x.dtype)),
      lambda b, x, y, g: b.where(b.le(x, b.const(0, x.type.dtype)),
                                 b.const(0, g.type.dtype), g), onnx=_relu_onnx)
unary("not", ("bool",), np.logical_not, onnx="Not")


def _stop_gradient_ref(ctx, attrs, x):
    """x; in a run that holds stopped values (Context.held), the value held for it."""
    return x if ctx is None or ctx.held is None else ctx.held.through(x)


# the identity through which no cotangent flows: what it reads is a constant to autodiff
# (JAX's stop_gradient, PyTorch's detach)
primitive("stop_gradient", 1, elementwise=True, grad=_no_grad, ref=_stop_gradient_ref,
          onnx=onnx_node("Identity"))(lambda types, attrs: [types[0]])


# ---- binary -----------------------------------------------------------------------
def binary(name: str, allowed: tuple[str, ...], ref, local=None, result: str | None = None,
           simplify=None, onnx=None, **facts) -> None:
    """A broadcasting binary primitive; `local(b, x, y, out, g)` gives the two operand
    cotangents at the result's shape, reduced here to each operand's shape; `onnx` its
    ONNX rule, or the name of the one ONNX node it is (ONNX broadcasts as mdl does)."""
    what = f"`{BINARY_SYMBOLS[name]}`"

    def rule(types, attrs):
        dtype = same_dtype(types, what, allowed)
        return [TensorType(result or dtype, broadcast(types, what))]

    def grad(b, op, cts):
        x, y = op.inputs
        cx, cy = local(b, x, y, op.outputs[0], cts[0])
        return [reduce_to(b, cx, x.type) if cx is not None else None,
                reduce_to(b, cy, y.type) if cy is not None else None]
    primitive(name, 2, elementwise=True, grad=grad if local else _no_grad,
              ref=lambda ctx, attrs, x, y: ref(x, y), simplify=simplify,
              onnx=onnx_node(onnx) if isinstance(onnx, str) else onnx, **facts)(rule)


def _identity(c, op, negative: bool) -> bool:
    """Whether the constant `c` (None if none) is a zero that leaves the other operand of
    `op`'s sum as it is: any zero of integers; of floats the zero of sign `negative`."""
    if c is None or c != 0:
        return False
    return op.outputs[0].type.dtype not in FLOATS or bool(np.signbit(c)) == negative


def _keep(op, i: int):
    """The operand i itself, when it already has the result's type."""
    v = op.inputs[i]
    return [v] if v.type == op.outputs[0].type else None


def _zeros_for(b, op):
    out = op.outputs[0]
    like = next((v for v in op.inputs if v.type == out.type), None)
    if like is None and has_dynamic(out.type):
        return None
    return [b.zeros(out.type, like)]


def _simplify_add(b, op, facts):
    # x + 0 -> x for integers, and for floats of -0.0 only: of a float x = -0.0, x + 0.0
    # is 0.0 (IEEE, the reference, NumPy), and 1.0 / (x + 0.0) +inf, where the fold gave
    # -0.0 and -inf
    for i in (0, 1):
        if _identity(facts.const(op.inputs[i]), op, negative=True):
            return _keep(op, 1 - i)
    return None


def _simplify_sub(b, op, facts):
    if _identity(facts.const(op.inputs[1]), op, negative=False):  # x - 0.0, not x - -0.0
        return _keep(op, 0)
    # 0 - x -> -x for integers and -0.0 only: of a float x = 0, 0.0 - x is 0 and -x is -0
    # (std/ctc.mdl's `0.0 - logsumexp(...)` of a row certain to align)
    zero = facts.const(op.inputs[0])
    exact = op.outputs[0].type.dtype not in FLOATS or (zero == 0 and np.signbit(zero))
    if zero == 0 and exact and op.inputs[1].type == op.outputs[0].type:
        return [b.neg(op.inputs[1])]
    return None


def _simplify_mul(b, op, facts):
    # x * 0 -> 0 for integers only: a float x may be NaN or inf, whose product with 0 is
    # NaN, as in the reference, NumPy and PyTorch (it was folded: `LAMBDA * penalty` at
    # -D LAMBDA=0 hid a penalty gone NaN)
    exact = op.outputs[0].type.dtype not in FLOATS
    for i in (0, 1):
        c = facts.const(op.inputs[i])
        if c == 1:
            return _keep(op, 1 - i)
        if c == 0 and exact:
            return _zeros_for(b, op)
    return None


def _simplify_div(b, op, facts):
    return _keep(op, 0) if facts.const(op.inputs[1]) == 1 else None


binary("add", NUMERIC, np.add, lambda b, x, y, out, g: (g, g), simplify=_simplify_add,
       accumulates=True, onnx="Add")
binary("sub", NUMERIC, np.subtract, lambda b, x, y, out, g: (g, b.neg(g)),
       simplify=_simplify_sub, onnx="Sub")
binary("mul", NUMERIC, np.multiply, lambda b, x, y, out, g: (b.mul(g, y), b.mul(g, x)),
       simplify=_simplify_mul, onnx="Mul")
binary("div", FLOATS, np.divide,
       lambda b, x, y, out, g: (b.div(g, y), b.neg(b.div(b.mul(g, out), y))),
       simplify=_simplify_div, onnx="Div")
def _pow_local(b, x, y, out, g):
    """PyTorch's: d/dx = y * x ** (y - 1), 0 where y = 0 (at x = 0 that was 0 * inf,
    NaN); d/dy = x ** y * log(x), 0 where x = 0 and y >= 0 (0 * log(0) was NaN: one SGD
    step of `relu(x) ** p`, p a parameter, made p NaN)."""
    zero = b.const(0, g.type.dtype)
    dx = b.mul(b.mul(g, y), b.pow(x, b.sub(y, _one(b, y))))
    dy = b.mul(b.mul(g, out), b.log(x))
    at_zero = b.emit("and", [b.eq(x, zero), b.ge(y, zero)])[0]
    return b.where(b.eq(y, zero), zero, dx), b.where(at_zero, zero, dy)


def _c_pow(x, y):
    """C's pow (IEEE 754's), which every target calls: NumPy's power takes an exponent of
    0.5 given as one number for sqrt, which is NaN at -inf and -0.0 at -0.0 where pow is
    inf and 0.0, also as a 0-d array (an exponent given element by element takes pow's
    path)."""
    shape = np.broadcast_shapes(np.shape(x), np.shape(y))
    flat = [np.broadcast_to(v, shape).reshape(-1).copy() for v in (x, y)]
    return np.power(*flat).reshape(shape)[()]  # [()]: a 0-d result as NumPy's scalar


binary("pow", FLOATS, _c_pow, _pow_local, onnx="Pow")


# i32 floor division and remainder, as NumPy's (and Python's): the quotient rounds down and
# the remainder takes the divisor's sign; x // 0 and x % 0 are 0, and i32's lowest value
# // -1 wraps around to itself.
def _quietly(f):
    """NumPy's `f` without its warnings for those two cases."""
    def ref(x, y):
        with np.errstate(divide="ignore", over="ignore"):
            return f(x, y)
    return ref


def _guarded_divisor(g, xs):
    """(b == 0, b == -1, b where it is neither, else 1): ONNX runtimes divide integers as
    C does, which a 0 (or i32's lowest value / -1) ends with a signal."""
    zero, minus = (g.op("Equal", xs[1], g.const(k, "i32")) for k in (0, -1))
    special = g.op("Or", zero, minus)
    return zero, minus, g.op("Where", special, g.const(1, "i32"), xs[1])


def _floordiv_onnx(g, op, xs):
    zero, minus, b = _guarded_divisor(g, xs)
    quotient = g.op("Div", xs[0], b)  # rounds toward zero
    exact = g.op("Equal", g.op("Mul", quotient, b), xs[0])
    below = [g.op("Less", x, g.const(0, "i32")) for x in (xs[0], b)]
    signs = g.op("Xor", *below)  # of opposite signs
    down = g.op("Cast", g.op("And", g.op("Not", exact), signs), to=g.dtype("i32"))
    floor = g.op("Sub", quotient, down)
    return g.op("Where", zero, g.const(0, "i32"), g.op("Where", minus, g.op("Neg", xs[0]), floor))


def _mod_onnx(g, op, xs):
    zero, minus, b = _guarded_divisor(g, xs)
    return g.op("Where", g.op("Or", zero, minus), g.const(0, "i32"), g.op("Mod", xs[0], b))


binary("floordiv", ("i32",), _quietly(np.floor_divide), onnx=_floordiv_onnx)
binary("mod", ("i32",), _quietly(np.remainder), onnx=_mod_onnx)


def _select(test: str):
    """Cotangents of maximum/minimum: to the operand that wins, half to each at a tie
    (PyTorch's and JAX's, and the `max` reduction's ties share too; all to the first made
    `maximum(a, b)` and `maximum(b, a)` differ), all to each where one is NaN, as
    PyTorch's (neither wins, and neither is a tie: half to each was neither's)."""
    def local(b, x, y, out, g):
        zero = b.const(0, g.type.dtype)
        half = b.mul(g, b.const(0.5, g.type.dtype))
        tie = b.eq(x, y)
        first, second = b.emit(test, [x, y])[0], b.emit(test, [y, x])[0]
        return (b.where(tie, half, b.where(second, zero, g)),
                b.where(tie, half, b.where(first, zero, g)))
    return local


binary("maximum", NUMERIC, _larger, _select("gt"), onnx="Max")
binary("minimum", NUMERIC, _smaller, _select("lt"), onnx="Min")
for _name, _ref, _onnx in (
        ("lt", np.less, "Less"), ("le", np.less_equal, "LessOrEqual"),
        ("gt", np.greater, "Greater"), ("ge", np.greater_equal, "GreaterOrEqual"),
        ("eq", np.equal, "Equal"),
        ("ne", np.not_equal, lambda g, op, xs: g.op("Not", g.op("Equal", *xs)))):
    binary(_name, NUMERIC + ("bool",) if _name in ("eq", "ne") else NUMERIC, _ref,
           result="bool", onnx=_onnx)
binary("and", ("bool",), np.logical_and, onnx="And")
binary("or", ("bool",), np.logical_or, onnx="Or")
# What a true result says of the operands, where an `assert` holds (gradient checks draw
# integer inputs that keep it: reference/gradcheck.py)
for _name, _symbol in BINARY_SYMBOLS.items():
    if _name in ("lt", "le", "gt", "ge", "eq", "ne"):
        TABLE[_name].extra["relation"] = _symbol
TABLE["and"].extra["connective"] = all
TABLE["or"].extra["connective"] = any


# ---- where, cast ------------------------------------------------------------------
def _where_grad(b, op, cts):
    cond, x, y = op.inputs
    g = cts[0]
    zero = b.const(0, g.type.dtype)
    return [None, reduce_to(b, b.where(cond, g, zero), x.type),
            reduce_to(b, b.where(cond, zero, g), y.type)]


def _where_simplify(b, op, facts):
    c = facts.const(op.inputs[0])
    return None if c is None else _keep(op, 1 if c else 2)


@primitive("where", 3, elementwise=True, grad=_where_grad,
           ref=lambda ctx, attrs, c, x, y: np.where(c, x, y), simplify=_where_simplify,
           onnx=lambda g, op, xs: g.where(*xs, op.outputs[0].type.dtype == "bool"))
def _where(types, attrs):
    cond, a, b = types
    need(cond.dtype == "bool", f"`where` needs a bool condition, got {cond}")
    dtype = same_dtype([a, b], "`where`", NUMERIC + ("bool",))
    return [TensorType(dtype, broadcast(types, "`where`"))]


def _cast_grad(b, op, cts):
    x, = op.inputs
    if not (x.type.is_float and op.outputs[0].type.is_float):
        return [None]
    g = cts[0]
    return [g if g.type.dtype == x.type.dtype else b.cast(g, dtype=x.type.dtype)]


I32 = (float(I32_MIN), float(I32_MAX))  # a float past these becomes the nearer one


def _cast_ref(ctx, attrs, x):
    """bool: whether x is not 0; a float to i32: its integer part, 0 for NaN, and the
    nearer end of i32 past it (mdl::to_i32: NumPy's own conversion is undefined there)."""
    dtype, x = attrs["dtype"], np.asarray(x)
    if dtype == "bool":
        return x != 0
    if dtype == "i32" and x.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            wide = np.trunc(x.astype(np.float64))  # in f32, i32's top end rounds past it
            return np.where(np.isnan(wide), 0, np.clip(wide, *I32)).astype(np.int32)
    return x.astype(ctx.np_dtype(dtype))


def _cast_onnx(g, op, xs):
    """ONNX's Cast is undefined past the target type, so a float to i32 is made exact
    first, as mdl::to_i32: NaN to 0, then clipped to i32's ends. An f64 is clipped where
    it is; an f32 stays f32 (TensorRT has no f64, and OpenVINO 2026.4 left a cast of
    parameters through f64 to a later call's memory): clipped below 2^31 to the largest
    f32 there, with values from 2^31 up made i32's largest."""
    x, = xs
    dtype, src = op.attrs["dtype"], op.inputs[0].type.dtype
    if not (dtype == "i32" and op.inputs[0].type.is_float):
        return g.op("Cast", x, to=g.dtype(dtype))
    zeroed = g.op("Where", g.isnan(x), g.const(0.0, src), x)
    top = float(np.nextafter(np.float32(2.0 ** 31), np.float32(0))) if src == "f32" \
        else float(I32[1])
    clipped = g.op("Clip", zeroed, g.const(I32[0], src), g.const(top, src))
    out = g.op("Cast", clipped, to=g.dtype("i32"))
    if src == "f64":
        return out
    past = g.op("GreaterOrEqual", x, g.const(2.0 ** 31, src))
    return g.op("Where", past, g.const(I32[1], "i32"), out)


@primitive("cast", 1, elementwise=True, grad=_cast_grad, ref=_cast_ref,
           simplify=lambda b, op, facts: _keep(op, 0), onnx=_cast_onnx)
def _cast(types, attrs):
    return [types[0].with_dtype(attrs["dtype"])]
