"""Special functions: `log1p`, `expm1`, `softplus`, `erf` and `erfc`, unary elementwise
primitives of floats (declared with elementwise.unary), and their ONNX forms: ONNX has
no Log1p, Expm1 or Erfc, and onnxruntime's Erf takes f32 only, so these are written in
its nodes to keep their digits (near 0, far right of 0, in f64)."""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import FLOATS
from .elementwise import _one, unary


def _log1p_onnx(g, op, xs):
    return _log1p(g, xs[0], op.inputs[0].type.dtype)


def _log1p(g, x: str, dtype: str) -> str:
    """ONNX has no Log1p. Goldberg's: u = 1 + x; x where u is 1, else log(u) * (x / (u - 1)),
    whose rounding of u cancels (log(1 + x) alone gives 0 for x = 1e-8 in f32); u
    infinite gives itself."""
    one, inf = g.const(1, dtype), g.const(np.inf, dtype)
    u = g.op("Add", x, one)
    exact = g.op("Equal", u, one)  # (divided by 1 there: no 0 / 0 where it is not used)
    ratio = g.op("Mul", g.op("Log", u),
                 g.op("Div", x, g.op("Where", exact, one, g.op("Sub", u, one))))
    return g.op("Where", exact, x, g.op("Where", g.op("Equal", u, inf), u, ratio))


def _expm1_onnx(g, op, xs):
    """ONNX has no Expm1. Kahan's: u = exp(x); x where u is 1, -1 where u - 1 is, u where
    it is infinite, else (u - 1) * (x / log(u)), whose rounding of u cancels."""
    x, dtype = xs[0], op.inputs[0].type.dtype
    one, inf = g.const(1, dtype), g.const(np.inf, dtype)
    u = g.op("Exp", x)
    exact = g.op("Equal", u, one)
    less = g.op("Sub", u, one)
    ratio = g.op("Mul", less, g.op("Div", x, g.op("Where", exact, one, g.op("Log", u))))
    out = g.op("Where", g.op("Equal", u, inf), u, ratio)
    out = g.op("Where", g.op("Equal", less, g.const(-1, dtype)), g.const(-1, dtype), out)
    return g.op("Where", exact, x, out)


unary("log1p", FLOATS, np.log1p, lambda b, x, y, g: b.div(g, b.add(_one(b, x), x)),
      onnx=_log1p_onnx)
# expm1's derivative is exp(x), not expm1(x) + 1 (PyTorch's), which cancels to 0 far left
# of 0: elu's slope (alpha * expm1) was 0 below x = -37 in f64 and -17 in f32, where
# PyTorch's ELU gives exp(x) (4.2e-18 at -40), and kept 8 digits at -20
unary("expm1", FLOATS, np.expm1, lambda b, x, y, g: b.mul(g, b.exp(x)), onnx=_expm1_onnx)
# log(1 + exp(x)) as np.logaddexp(0, x) computes it, never overflowing; its derivative is
# sigmoid(x)
def _softplus_onnx(g, op, xs):
    """Softplus of f32; of f64 written out as max(x, 0) + log1p(exp(-|x|)), which never
    overflows: onnxruntime's f64 Softplus gave inf from x = 710 on, and it has none at
    opset 22 or later."""
    x, dtype = xs[0], op.inputs[0].type.dtype
    if dtype == "f32":
        return g.op("Softplus", x)
    return g.op("Add", g.op("Relu", x),
                _log1p(g, g.op("Exp", g.op("Neg", g.op("Abs", x))), dtype))


unary("softplus", FLOATS, lambda x: np.logaddexp(np.zeros_like(x), x),
      lambda b, x, y, g: b.mul(g, b.sigmoid(x)), onnx=_softplus_onnx)
# NumPy has no erf nor erfc; math's are within an ulp or so
_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _erf_onnx(g, op, xs):
    """Erf; of f64 written out, since onnxruntime has an Erf of f32 only: erf(x) =
    2 / sqrt(pi) * x * exp(-x^2) * sum over n of (2x^2)^n / (1 * 3 * ... * (2n + 1)), a
    series of positive terms (no cancellation), 100 of them in Horner's form, of x clipped
    to [-6, 6] (erf(6) is 1 in f64): within 2e-15 of math.erf."""
    dtype = op.inputs[0].type.dtype
    if dtype != "f64":
        return g.op("Erf", *xs)
    x = g.op("Clip", xs[0], g.const(-6, dtype), g.const(6, dtype))
    z = g.op("Mul", x, x)
    total = g.const(1, dtype)
    for k in range(100, 0, -1):
        total = g.op("Add", g.const(1, dtype),
                     g.op("Mul", g.op("Mul", z, total), g.const(2 / (2 * k + 1), dtype)))
    scale = g.op("Mul", x, g.op("Exp", g.op("Neg", z)))
    return g.op("Mul", g.op("Mul", scale, total), g.const(2 / math.sqrt(math.pi), dtype))


def _erf_slope(sign: float):
    """d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2); erfc's the negative."""
    return lambda b, x, y, g: b.mul(g, b.mul(b.const(sign * 2 / math.sqrt(math.pi),
                                                     x.type.dtype), b.exp(b.neg(b.mul(x, x)))))


def _erfc_onnx(g, op, xs):
    """ONNX has no Erfc. Left of a point (2 in f64, 1 in f32) 1 - erf(x), which loses
    little there (erfc(2) is 0.005); right of it the continued fraction exp(-x^2) /
    sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))), 40 (f64) or 50 (f32)
    deep: within 1.1e-13 of math.erfc in f64 (4e-6 in f32, whose exp(-x^2) is that far
    at x = 8) everywhere, where 1 - erf alone would cancel to nothing or below 0."""
    x, dtype = xs[0], op.inputs[0].type.dtype
    split, depth = (2, 40) if dtype == "f64" else (1, 50)
    left = g.op("Less", x, g.const(split, dtype))
    y = g.op("Where", left, g.const(split, dtype), x)  # the fraction of x, or of the split
    t = y
    for k in range(depth, 0, -1):
        t = g.op("Add", y, g.op("Div", g.const(k / 2, dtype), t))
    tail = g.op("Div", g.op("Mul", g.op("Exp", g.op("Neg", g.op("Mul", y, y))),
                            g.const(1 / math.sqrt(math.pi), dtype)), t)
    return g.op("Where", left, g.op("Sub", g.const(1, dtype), _erf_onnx(g, op, xs)), tail)


unary("erf", FLOATS, lambda x: _erf(x).astype(np.asarray(x).dtype), _erf_slope(1),
      onnx=_erf_onnx)
# erfc(x) = 1 - erf(x), computed without the difference: precise where erf(x) is near 1
unary("erfc", FLOATS, lambda x: _erfc(x).astype(np.asarray(x).dtype), _erf_slope(-1),
      onnx=_erfc_onnx)
