"""How the native backend lowers each primitive, the same for every target; attached as
`extra["lower"]`:
- ("elementwise", expr(args, op, r)): a scalar expression of the operands' scalars as the
  target spells them (`r.target.math`), fused into a loop nest or a GPU kernel by the target;
- ("const", value(op)): a uniform constant, which needs no memory;
- ("view", layout(r, op, i, strides), needs_contiguous): output i re-addresses the
  input's memory (offset: C++ text, None at its start; strides: dims);
- ("kernel", accepts): a call into the target's runtime, its statements attached as
  `extra["statements"]` (backend/kernels.py); `accepts` (bool, or a predicate on
  an input's layout) says which inputs may be strided views.
A primitive that only gathers its inputs into its output (concat, stack) also declares
`extra["gathers"](r, op) -> [(offset, strides)]`: where each input lies in the output, so
that their producers can write there directly. A plain sum (sum, sum_to) declares
`extra["sums"](op) -> axes`: the input axes it adds up, so that the elementwise loop
computing its input can accumulate it instead of storing it.
`r` is the backend's renderer: `r.dim(d)`, `r.ctype(v)`, `r.scalar(v)`, `r.layout(v)`.
"""
from __future__ import annotations

import functools

from ..ir.shapes import Dim, contiguous_strides, numel
from .cexpr import c_string
from ..ops.entry import call_bounds_of
from ..ops.primitives.core import TABLE


def attach_lowering(name: str, *hook) -> None:
    TABLE[name].extra["lower"] = hook


def indices_named(r, op, v) -> str:
    """A C++ string literal naming integer indices `v`, which `op` reads, for the
    IndexError of a call whose indices are out of range (codegen/ir/origins.py words it)."""
    return c_string(r.origins.indices(v, op.loc))


def ctype_of(op, r, i=None):
    """The C++ type of output 0 (or of input i)."""
    v = op.outputs[0] if i is None else op.inputs[i]
    return r.ctype(v)


# ---- elementwise ------------------------------------------------------------------------
def _call(fn):
    return lambda a, op, r: f"{r.target.math(fn)}({a[0]})"


def _i32(op) -> bool:
    return op.outputs[0].type.dtype == "i32"


# i32 `+ - *`, unary `-` and `abs` wrap around, as NumPy's (and the reference's): C++
# leaves a signed overflow undefined, and GCC folded `(a + 1) > a` to true at INT32_MAX.
# mdl::wrap_add and the others (kernels.h) compute in uint32_t.
def _arith(symbol: str, wrap: str):
    return lambda a, op, r: (f"mdl::{wrap}({a[0]}, {a[1]})" if _i32(op)
                             else f"({a[0]} {symbol} {a[1]})")


def _read(r, a: str) -> str:
    """An argument of log or pow as the target's arithmetic reads it: libm takes it apart
    by its bits, so where the code flushes denormals, a denormal is made 0 first
    (mdl::flushed, denormals.h)."""
    return f"mdl::flushed({a})" if r.target.flushes_denormals else a


for _fn in ("exp", "sqrt", "sin", "cos", "erf", "erfc"):
    attach_lowering(_fn, "elementwise", _call(_fn))
# Clang 14 vectorizes no call of these (its -fveclib=libmvec maps exp and log, not them;
# softplus calls log1p): the cpu target calls mdl/vector_math.h's simd_ versions, built
# from exp and log there
for _fn in ("tanh", "expm1", "log1p", "softplus"):
    attach_lowering(_fn, "elementwise",
                    lambda a, op, r, fn=_fn: f"{r.target.simd_math(fn)}({a[0]})")
attach_lowering("log", "elementwise", lambda a, op, r: f"{r.target.math('log')}({_read(r, a[0])})")
attach_lowering("abs", "elementwise",
                lambda a, op, r: f"mdl::wrap_abs({a[0]})" if _i32(op) else _call("abs")(a, op, r))
attach_lowering("sigmoid", "elementwise",
           lambda a, op, r: f"({ctype_of(op, r)}(1) / ({ctype_of(op, r)}(1) + {r.target.math('exp')}(-{a[0]})))")
# sign keeps a NaN, as np.sign: abs's gradient at a NaN is NaN, not 0; and either zero is
# 0.0, as in NumPy and PyTorch (`+ 0` makes -0.0 0.0 and keeps a NaN). One comparison and
# one select: `x > 0 ? 1 : x < 0 ? -1 : x` made GCC leave the loop scalar without AVX-512's
# masks (its second comparison, which may raise on a NaN, only runs where the first is
# false, so it cannot be computed for every lane).
attach_lowering("sign", "elementwise",
           lambda a, op, r: f"({r.target.math('fabs')}({a[0]}) > {ctype_of(op, r)}(0) ? "
                            f"{r.target.math('copysign')}({ctype_of(op, r)}(1), {a[0]}) : "
                            f"({a[0]} + {ctype_of(op, r)}(0)))")
attach_lowering("neg", "elementwise",
                lambda a, op, r: f"mdl::wrap_neg({a[0]})" if _i32(op) else f"(-{a[0]})")
# relu, maximum and minimum keep a NaN, as NumPy and PyTorch do (`x > 0 ? x : 0` made a
# NaN 0, and `maximum(NaN, 0)` 0 but `maximum(0, NaN)` NaN): the runtime's mdl::larger and
# mdl::smaller (kernels.h), which its own maxima use too
attach_lowering("relu", "elementwise",
           lambda a, op, r: f"mdl::larger<{ctype_of(op, r)}>({a[0]}, {ctype_of(op, r)}(0))")
attach_lowering("not", "elementwise", lambda a, op, r: f"{ctype_of(op, r)}(!{a[0]})")
attach_lowering("stop_gradient", "elementwise", lambda a, op, r: a[0])  # autodiff's alone
for _name, _sym, _wrap in (("add", "+", "wrap_add"), ("sub", "-", "wrap_sub"),
                           ("mul", "*", "wrap_mul")):
    attach_lowering(_name, "elementwise", _arith(_sym, _wrap))
attach_lowering("div", "elementwise", lambda a, op, r: f"({a[0]} / {a[1]})")  # floats only
# i32 only, NumPy's rounding, a 0 divisor and i32's lowest value // -1 defined (kernels.h)
attach_lowering("floordiv", "elementwise", lambda a, op, r: f"mdl::floor_div({a[0]}, {a[1]})")
attach_lowering("mod", "elementwise", lambda a, op, r: f"mdl::floor_mod({a[0]}, {a[1]})")
for _name, _sym in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="), ("eq", "=="),
                    ("ne", "!="), ("and", "&&"), ("or", "||")):
    attach_lowering(_name, "elementwise",
                    lambda a, op, r, s=_sym: f"{ctype_of(op, r)}({a[0]} {s} {a[1]})")
# C's pow also at an exponent of 0.5, which GCC's vectorizer made a square root (scalar.h)
attach_lowering("pow", "elementwise", lambda a, op, r:
                f"mdl::power<{ctype_of(op, r)}>({_read(r, a[0])}, {_read(r, a[1])})")
attach_lowering("maximum", "elementwise",
           lambda a, op, r: f"mdl::larger<{ctype_of(op, r)}>({a[0]}, {a[1]})")
attach_lowering("minimum", "elementwise",
           lambda a, op, r: f"mdl::smaller<{ctype_of(op, r)}>({a[0]}, {a[1]})")
# both arms read, as bits masked by the condition (mdl/scalar.h says why)
attach_lowering("where", "elementwise",
                lambda a, op, r: f"mdl::select<{ctype_of(op, r)}>({a[0]} != 0, {a[1]}, {a[2]})")
def _cast(a, op, r) -> str:
    """A value converted to the output's type; to bool, whether it is not 0 (NaN is true,
    as in NumPy): bool is stored as uint8_t, and static_cast<uint8_t>(0.5f) was 0 and
    static_cast<uint8_t>(256) 0, while static_cast<uint8_t>(2.0f) made a bool holding 2;
    a float to i32, mdl::to_i32 (NaN 0, saturating)."""
    if op.outputs[0].type.dtype == "bool":
        return f"{ctype_of(op, r)}({a[0]} != 0)"
    if op.outputs[0].type.dtype == "i32" and op.inputs[0].type.is_float:
        return f"mdl::to_i32({a[0]})"  # NaN and values past i32 defined (kernels.h)
    return f"static_cast<{ctype_of(op, r)}>({a[0]})"


attach_lowering("cast", "elementwise", _cast)
def _add_n(a, op, r) -> str:
    if _i32(op):
        return functools.reduce(lambda total, x: f"mdl::wrap_add({total}, {x})", a)
    return "(" + " + ".join(a) + ")"


attach_lowering("add_n", "elementwise", _add_n)

# ---- constants --------------------------------------------------------------------------
for _name, _prim in TABLE.items():
    if _prim.uniform is not None:
        attach_lowering(_name, "const", _prim.uniform)


# ---- views ------------------------------------------------------------------------------
def offset_expr(r, starts, strides) -> str | None:
    """The element offset of `starts` (None: the start itself)."""
    terms = [f"{r.dim(s)} * {r.dim(st)}" for s, st in zip(starts, strides) if s != Dim.of(0)]
    return " + ".join(terms) or None


attach_lowering("reshape", "view",
           lambda r, op, i, st: (None, contiguous_strides(op.outputs[0].type.shape)), True)
attach_lowering("unsegment", "view",
           lambda r, op, i, st: (None, contiguous_strides(op.outputs[0].type.shape)), True)
# A sequence's segments are a view of it where every reader takes them a step at a time
# (a checkpointed loop's): the last segment runs past the data, and a loop's step of it
# is a zero-padded copy there (backend/lower.py, Layout.valid). Else its kernel copies.
attach_lowering("segment", "view",
           lambda r, op, i, st: (None, contiguous_strides(op.outputs[0].type.shape)), True)
TABLE["segment"].extra["ragged"] = lambda r, op: r.dim(numel(op.inputs[0].type.shape))
attach_lowering("index", "view", lambda r, op, i, st: (
    f"mdl::checked_index({r.scalar(op.inputs[1])}, {r.dim(op.inputs[0].type.shape[0])}, "
    f"{indices_named(r, op, op.inputs[1])}) * {r.dim(st[0])}", st[1:]), False)
def _slice_view(r, op, i, st):
    """A slice's offset; where the call's dims may put it outside its axis (`x[:, 5]` of
    an axis of length B), `mdl::dims_fit` of each bound first, which refuses such dims
    where the slice runs: one in a branch or a loop's body, which the check before the
    call leaves out (ops/entry.py, call_bounds), once read and wrote outside its operand."""
    offset = offset_expr(r, op.attrs["starts"], st)
    fits = [r.dims_fit(text, d) for text, d in call_bounds_of(op, r.dims.user)]
    return " + ".join(fits + [offset]) if fits and offset else (
        " + ".join(fits) or offset), st


attach_lowering("slice", "view", _slice_view, False)
attach_lowering("transpose", "view",
           lambda r, op, i, st: (None, tuple(st[p] for p in op.attrs["perm"])), False)


def _split_view(r, op, i, st):
    axis = op.attrs["axis"]
    piece = op.outputs[0].type.shape[axis]
    return f"{i} * {r.dim(piece)} * {r.dim(st[axis])}", st


attach_lowering("split", "view", _split_view, False)


def _broadcast_view(r, op, i, st):
    x, shape = op.inputs[0], op.outputs[0].type.shape
    strides = [Dim.of(0) if d == Dim.of(1) else s for d, s in zip(x.type.shape, st)]
    return None, (Dim.of(0),) * (len(shape) - x.type.rank) + tuple(strides)


attach_lowering("broadcast_to", "view", _broadcast_view, False)


# ---- kernels (their statements come from each target's hooks) ----------------------------
def matrix_order(v, layout):
    """How GEMM reads a rank-2 view: ("rows" or "cols" contiguous) or None. A dim of
    size 1 has no meaningful stride, so it never decides."""
    (rows, cols), (s0, s1) = v.type.shape, layout.strides
    one = Dim.of(1)
    if cols == one or s1 == one:
        return "rows"
    if rows == one or s0 == one:
        return "cols"
    return None


def _matmul_ok(r, op, i, layout) -> bool:
    """GEMM reads a row-major or transposed matrix in place; `a` may also be a
    contiguous batch of rows."""
    v = op.inputs[i]
    if layout.is_const or any(s == Dim.of(0) and d != Dim.of(1)
                              for s, d in zip(layout.strides, v.type.shape)):
        return False  # a broadcast repeats rows or columns: GEMM needs them in memory
    if v.type.rank == 2 and matrix_order(v, layout) is not None:
        return True
    return r.low.is_contiguous(v)


attach_lowering("matmul", "kernel", _matmul_ok)


def _gathered(stack: bool):
    def regions(r, op):
        """(offset, strides) of each input inside the output."""
        out, axis = op.outputs[0], op.attrs["axis"]
        strides = contiguous_strides(out.type.shape)
        at, where = Dim.of(0), []
        for x in op.inputs:
            offset = f"{r.dim(at)} * {r.dim(strides[axis])}"
            if stack:
                where.append((offset, strides[:axis] + strides[axis + 1:]))
                at = at + 1
            else:
                where.append((offset, strides))
                at = at + x.type.shape[axis]
        return where
    return regions


def _sum_to_axes(op) -> tuple[int, ...]:
    """The axes of sum_to's input that its target shape drops or keeps as 1."""
    x, shape = op.inputs[0], tuple(op.attrs["shape"])
    lead = x.type.rank - len(shape)
    return tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == Dim.of(1) and x.type.shape[lead + i] != Dim.of(1))


TABLE["sum"].extra["sums"] = lambda op: tuple(op.attrs["axes"])
TABLE["sum_to"].extra["sums"] = _sum_to_axes
TABLE["concat"].extra["gathers"] = _gathered(False)
TABLE["stack"].extra["gathers"] = _gathered(True)
for _name in ("unslice", "concat", "stack"):  # they write through views themselves
    attach_lowering(_name, "kernel", True)
for _name in ("sum", "max", "mean", "logsumexp", "sum_to", "softmax", "log_softmax",
              "argmax", "topk", "cross_entropy", "gather", "scatter_add", "one_hot", "unindex",
              "seq_order", "seq_mask", "dropout", "dropout_mask", "rng_position",
              "dropout_replay", "rng_skip", "range", "assert", "cumsum", "bmm"):
    attach_lowering(_name, "kernel", False)
