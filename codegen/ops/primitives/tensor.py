"""Creation, matrix product, reductions, running sums and softmax."""
from __future__ import annotations

import warnings

import numpy as np

from ...ir.dtypes import FLOATS, NUMERIC, fits_i32
from ...ir.shapes import Dim, TensorType, numel
from .core import need, onnx_node, primitive, same_dtype
from .elementwise import _no_grad


# ---- creation --------------------------------------------------------------------
def _full_ref(ctx, attrs):
    value = attrs["value"]
    value = ctx.dim(value) if isinstance(value, Dim) else value
    shape = tuple(ctx.dim(d) for d in attrs["shape"])
    return np.full(shape, value, ctx.np_dtype(attrs["dtype"]))


def _full_onnx(g, op, xs):
    dtype, value, shape = op.attrs["dtype"], op.attrs["value"], op.attrs["shape"]
    if isinstance(value, Dim):
        one = g.op("Cast", g.scalar(value), to=g.dtype(dtype))
        return g.op("Expand", one, g.dims(shape)) if shape else one
    if not shape:
        return g.const(value, dtype)
    return g.op("Expand", g.const(value, dtype), g.dims(shape))


# `value` may be a Dim: a size (as T*B) that the run binds
@primitive("full", 0, grad=_no_grad, ref=_full_ref, uniform=lambda op: op.attrs["value"],
           onnx=_full_onnx)
def _full(types, attrs):
    value = attrs["value"]  # an int made by constant arithmetic (N * N) may not fit
    need(attrs["dtype"] != "i32" or isinstance(value, Dim) or fits_i32(value),
         f"the integer {value} does not fit in i32")
    return [TensorType(attrs["dtype"], tuple(attrs["shape"]))]


def _one_hot_ref(ctx, attrs, ids):
    return (ids[..., None] == np.arange(ctx.dim(attrs["n"]))).astype(ctx.np_dtype(attrs["dtype"]))


def _one_hot_onnx(g, op, xs):
    """ids == range(n), as the reference: an id outside [0, n) gives a row of zeros
    (ONNX's OneHot would count a negative one from the end)."""
    n = g.op("Cast", g.scalar(Dim.of(op.attrs["n"])), to=g.dtype("i32"))
    classes = g.op("Range", g.const(0, "i32"), n, g.const(1, "i32"))
    hits = g.op("Equal", g.op("Unsqueeze", xs[0], g.ints([-1])), classes)
    return g.op("Cast", hits, to=g.dtype(op.attrs["dtype"]))


@primitive("one_hot", 1, grad=_no_grad, ref=_one_hot_ref,
           integer_bounds=lambda op, size: [(op.inputs[0], 0, size(op.attrs["n"]))],
           onnx=_one_hot_onnx)
def _one_hot(types, attrs):
    ids, = types
    need(ids.dtype == "i32", f"`one_hot` needs i32 indices, got {ids}")
    return [TensorType(attrs["dtype"], ids.shape + (Dim.of(attrs["n"]),))]


def _range_ref(ctx, attrs):
    n = ctx.dim(attrs["n"])
    return (attrs["start"] + attrs["step"] * np.arange(n, dtype=np.int64)).astype(np.int32)


def _range_onnx(g, op, xs):
    """Range(start, start + n * step, step): n values (n may be a dim bound at run time)."""
    start, step, n = op.attrs["start"], op.attrs["step"], Dim.of(op.attrs["n"])
    if n.is_const:
        return g.const(start + step * np.arange(n.value, dtype=np.int64), "i32")
    n = g.op("Cast", g.scalar(n), to=g.dtype("i32"))
    end = g.op("Add", g.const(start, "i32"), g.op("Mul", n, g.const(step, "i32")))
    return g.op("Range", g.const(start, "i32"), end, g.const(step, "i32"))


# i32[n]: start, start + step, ..., start + (n - 1) * step (the language's `range`)
@primitive("range", 0, grad=_no_grad, ref=_range_ref, onnx=_range_onnx)
def _range(types, attrs):
    n, start, step = Dim.of(attrs["n"]), attrs["start"], attrs["step"]
    need(step != 0, "`range` needs a step other than 0")
    if n.is_const:
        need(n.value >= 0, f"`range` of {n.value} values")
        need(n.value == 0 or (fits_i32(start) and fits_i32(start + (n.value - 1) * step)),
             f"`range` from {start} by {step} for {n.value} values leaves i32")
    else:
        need(step == 1 and fits_i32(start), "a `range` of run-time length counts by 1 "
             "from an i32")
    return [TensorType("i32", (n,))]


# ---- matrix product ----------------------------------------------------------------
def _weight_grad(b, x, g):
    """transpose(x) @ g, every leading dim of x and g a row of one big product: the
    gradient of x @ w with respect to w."""
    if x.type.rank > 2:
        rows = numel(x.type.shape[:-1])
        x = b.reshape(x, shape=(rows, x.type.shape[-1]))
        g = b.reshape(g, shape=(rows, g.type.shape[-1]))
    return b.matmul(b.transpose(x, perm=(1, 0)), g)


def _matmul_grad(b, op, cts):
    x, w = op.inputs
    g = cts[0]
    return [b.matmul(g, b.transpose(w, perm=(1, 0))), _weight_grad(b, x, g)]


def _matmul_step_sum(op, value, producers, stack, facts):
    """transpose(a) @ g summed over the steps: transpose(A) @ G, with A and G every
    step's a and g as rows (one GEMM instead of one rank-B update a step)."""
    left, g = op.inputs
    transpose = producers.get(left.id)
    if transpose is None or transpose.prim != "transpose" \
            or tuple(transpose.attrs["perm"]) != (1, 0):
        return None
    a = transpose.inputs[0]
    if a.type.rank != 2 or g.type.rank != 2:
        return None
    stacked = [stack(a), stack(g)]
    if None in stacked:
        return None

    return lambda b: _weight_grad(b, *stacked)  # rows of every step


@primitive("matmul", 2, grad=_matmul_grad, ref=lambda ctx, attrs, x, w: np.matmul(x, w),
           product=True, step_sum=_matmul_step_sum, onnx=onnx_node("MatMul"))
def _matmul(types, attrs):
    a, b = types
    same_dtype(types, "`@`", FLOATS)
    need(a.rank >= 2 and b.rank == 2,
         f"`@` multiplies a matrix (or a batch of them) by a matrix, or a batch of matrices "
         f"by as many, got {a} @ {b}")
    need(a.shape[-1] == b.shape[0], f"`@` needs matching inner dims, got {a} @ {b}")
    return [a.with_shape(a.shape[:-1] + b.shape[1:])]


def _swapped(b, v):
    """A batch of matrices each transposed."""
    rank = v.type.rank
    return b.transpose(v, perm=tuple(range(rank - 2)) + (rank - 1, rank - 2))


def _bmm_grad(b, op, cts):
    x, w = op.inputs
    g = cts[0]
    return [b.bmm(g, _swapped(b, w)), b.bmm(_swapped(b, x), g)]


# `@` of two batches of matrices, [..., M, K] @ [..., K, N] with the same batch dims (the
# scores of dot-product attention, q @ transpose(k)); `matmul` takes a matrix on the right
@primitive("bmm", 2, grad=_bmm_grad, ref=lambda ctx, attrs, x, w: np.matmul(x, w),
           onnx=onnx_node("MatMul"))
def _bmm(types, attrs):
    a, b = types
    same_dtype(types, "`@`", FLOATS)
    need(a.rank >= 3 and b.rank == a.rank and a.shape[:-2] == b.shape[:-2],
         f"`@` of two batches of matrices needs the same batch dims, got {a} @ {b}")
    need(a.shape[-1] == b.shape[-2], f"`@` needs matching inner dims, got {a} @ {b}")
    return [a.with_shape(a.shape[:-1] + b.shape[-1:])]


# ---- reductions --------------------------------------------------------------------
def kept(b, v, attrs: dict, x):
    """A reduction's result (or its cotangent) with the reduced axes kept as 1s."""
    if attrs["keepdims"]:
        return v
    shape = tuple(Dim.of(1) if i in attrs["axes"] else d for i, d in enumerate(x.type.shape))
    return b.reshape(v, shape=shape)


def _spread(b, op, g):
    x = op.inputs[0]
    return b.broadcast_to(kept(b, g, op.attrs, x), shape=x.type.shape)


def _sum_grad(b, op, cts):
    return [_spread(b, op, cts[0])]


def _mean_grad(b, op, cts):
    x = op.inputs[0]
    count = numel(x.type.shape[i] for i in op.attrs["axes"])
    n = b.emit("full", [], {"shape": (), "value": count, "dtype": x.type.dtype})[0]
    return [b.div(_spread(b, op, cts[0]), n)]


def _max_grad(b, op, cts):
    """To the elements equal to the max (or min), ties sharing; where it is NaN, to the
    NaNs, which made it (PyTorch's: no element equals a NaN, and 0 / 0 made every
    element's NaN)."""
    x, y = op.inputs[0], op.outputs[0]
    at_max = b.eq(x, kept(b, y, op.attrs, x))
    if x.type.dtype in FLOATS:
        at_max = b.emit("or", [at_max, b.ne(x, x)])[0]
    hits = b.cast(at_max, dtype=x.type.dtype)
    ties = b.sum(hits, axes=op.attrs["axes"], keepdims=True)  # ties share the cotangent
    return [b.mul(kept(b, cts[0], op.attrs, x), b.div(hits, ties))]


def _logsumexp_grad(b, op, cts):
    """The softmax over the reduced axes: exp(x - y) normalized by its own sum, which
    removes the rounding of y (exp(x - y) alone was 1 everywhere for x = [-1e9, -1e9]
    in f32, where y = -1e9 + log(2) rounds to -1e9)."""
    x, y = op.inputs[0], op.outputs[0]
    e = b.exp(b.sub(x, kept(b, y, op.attrs, x)))
    total = b.sum(e, axes=op.attrs["axes"], keepdims=True)
    return [b.mul(kept(b, cts[0], op.attrs, x), b.div(e, total))]


def _logsumexp_onnx(g, op, xs):
    """As the reference: log(sum(exp(x - m))) + m, m the max where it is finite, else 0."""
    x, = xs
    axes = g.ints(op.attrs["axes"])
    m = g.op("ReduceMax", x, axes, keepdims=1)
    finite = g.op("Less", g.op("Abs", m), g.const(np.inf, op.inputs[0].type.dtype))  # not NaN
    m = g.op("Where", finite, m, g.const(0, op.inputs[0].type.dtype))
    total = g.op("ReduceSum", g.op("Exp", g.op("Sub", x, m)), axes, keepdims=1)
    out = g.op("Add", g.op("Log", total), m)
    return out if op.attrs["keepdims"] else g.op("Squeeze", out, axes)


def _reduce_onnx(op_type: str):
    def rule(g, op, xs):
        if not op.attrs["axes"]:  # ONNX would reduce every axis
            return g.op("Identity", *xs)
        return g.op(op_type, *xs, g.ints(op.attrs["axes"]), keepdims=int(op.attrs["keepdims"]))
    return rule


def _mean_onnx(g, op, xs):
    """ReduceMean; over dims a call binds, which may be 0, or fixed at 0, the sum over
    their count: the mean of nothing is NaN, as the language's is, where onnxruntime's
    and OpenVINO's ReduceMean of nothing is 0. Of f32 values in f64, as the sum."""
    dtype = op.inputs[0].type.dtype
    if not op.attrs["axes"]:
        return g.op("Identity", *xs)
    wide = "f64" if dtype == "f32" else dtype
    x = g.op("Cast", xs[0], to=g.dtype(wide)) if wide != dtype else xs[0]
    count = numel(op.inputs[0].type.shape[a] for a in op.attrs["axes"])
    if count.is_const and count.value:  # a count of 0 fixed at export: the sum over it
        out = _reduce_onnx("ReduceMean")(g, op, [x])
    else:
        out = g.op("Div", _reduce_onnx("ReduceSum")(g, op, [x]),
                   g.op("Cast", g.scalar(count), to=g.dtype(wide)))
    return g.op("Cast", out, to=g.dtype(dtype)) if wide != dtype else out


def _sum_onnx(g, op, xs):
    """ReduceSum; of i32 values summed in i64 and cast back, which wraps around as the
    language's i32 sum does (onnxruntime's i32 ReduceSum stopped at i32's ends); of f32
    values in f64, as the targets add them (onnxruntime's f32 sum of 100,000 times 0.1
    was 9998.735)."""
    reduce = _reduce_onnx("ReduceSum")
    wide = {"i32": "i64", "f32": "f64"}.get(op.inputs[0].type.dtype)
    if wide is None or not op.attrs["axes"]:
        return reduce(g, op, xs)
    return g.op("Cast", reduce(g, op, [g.op("Cast", xs[0], to=g.dtype(wide))]),
                to=g.dtype(op.inputs[0].type.dtype))


def _max_onnx(g, op, xs):
    """ReduceMax; of floats NaN where the reduced values hold one, as the reference and
    the targets (onnxruntime's passes over a NaN anywhere but first: max([1, nan, 2, 3])
    was 2)."""
    out = _reduce_onnx("ReduceMax")(g, op, xs)
    dtype = op.inputs[0].type.dtype
    if dtype not in FLOATS or not op.attrs["axes"]:
        return out
    nan = g.op("Cast", g.isnan(xs[0]), to=g.dtype(dtype))
    any_nan = g.op("Greater", _reduce_onnx("ReduceMax")(g, op, [nan]), g.const(0, dtype))
    return g.op("Where", any_nan, g.const(np.nan, dtype), out)


def _wide_sum(x: np.ndarray, axis, keepdims: bool) -> np.ndarray:
    """The language's sum: f32 added in double and rounded once, as the targets add it
    (NumPy's f32 sum adds in f32); i32 wrapping around."""
    if x.dtype == np.float32:
        return np.sum(x, axis, keepdims=keepdims, dtype=np.float64).astype(np.float32)
    return np.sum(x, axis, keepdims=keepdims, dtype=x.dtype)


def _max_ref(x, axis, keepdims):
    """max over `axis`; over no elements, max's identity as the targets give it (-inf, or
    i32's lowest value: mdl::max_identity), where NumPy would raise."""
    start = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    return np.max(x, axis, keepdims=keepdims, initial=start)


def _mean_ref(x, axis, keepdims):
    """mean over `axis`; over no elements NaN (0 / 0, as the targets give it), without
    NumPy's warning about it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        wide = np.float64 if x.dtype == np.float32 else None  # added in double, as _wide_sum
        return np.mean(x, axis, keepdims=keepdims, dtype=wide).astype(x.dtype)


def _logsumexp_ref(x, axis, keepdims):
    m = _max_ref(x, axis, True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis)


REDUCERS = {
    "sum": (NUMERIC, _sum_grad, _wide_sum, _sum_onnx),
    "max": (NUMERIC, _max_grad, _max_ref, _max_onnx),
    "mean": (FLOATS, _mean_grad, _mean_ref, _mean_onnx),
    "logsumexp": (FLOATS, _logsumexp_grad, _logsumexp_ref, _logsumexp_onnx),
}


def _reduction(name: str) -> None:
    allowed, grad, ref, onnx = REDUCERS[name]

    def rule(types, attrs):
        x, = types
        same_dtype(types, f"`{name}`", allowed)
        axes = attrs["axes"]
        if attrs["keepdims"]:
            shape = tuple(Dim.of(1) if i in axes else d for i, d in enumerate(x.shape))
        else:
            shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return [x.with_shape(shape)]

    def reference(ctx, attrs, x):
        return np.asarray(ref(np.asarray(x), tuple(attrs["axes"]), attrs["keepdims"]))
    primitive(name, 1, grad=grad, ref=reference, onnx=onnx, reduces=True)(rule)


for _name in REDUCERS:
    _reduction(_name)


# ---- argmax ------------------------------------------------------------------------
def _argmax_ref(ctx, attrs, x):
    """The first index of the largest value along `axis`, a NaN counting as the largest
    (as NumPy); -1 along an axis of no elements, where NumPy raises."""
    x, axis = np.asarray(x), attrs["axis"]
    if x.shape[axis] == 0:
        return np.full(x.shape[:axis] + x.shape[axis + 1:], -1, np.int32)
    return np.argmax(x, axis=axis).astype(np.int32)


def _argmax_onnx(g, op, xs):
    """ArgMax, cast to i32. onnxruntime's passes over a NaN, so for floats a row holding
    one takes the ArgMax of `isnan` instead: its first NaN, as NumPy and the targets."""
    x, = xs
    axis = op.attrs["axis"]
    largest = g.op("ArgMax", x, axis=axis, keepdims=0)
    if op.inputs[0].type.is_float:
        nan = g.op("Cast", g.isnan(x), to=g.dtype("i32"))
        any_nan = g.op("Cast", g.op("ReduceMax", nan, g.ints([axis]), keepdims=0),
                       to=g.dtype("bool"))
        largest = g.op("Where", any_nan, g.op("ArgMax", nan, axis=axis, keepdims=0), largest)
    return g.op("Cast", largest, to=g.dtype("i32"))


@primitive("argmax", 1, grad=_no_grad, ref=_argmax_ref, onnx=_argmax_onnx)
def _argmax(types, attrs):
    x, = types
    same_dtype(types, "`argmax`", NUMERIC)
    need(x.rank >= 1, f"`argmax` needs a tensor of rank 1 or more, got {x}")
    axis = attrs["axis"]
    return [TensorType("i32", x.shape[:axis] + x.shape[axis + 1:])]


# ---- cumsum ------------------------------------------------------------------------
def _cumsum_ref(ctx, attrs, x):
    """Running sums along `axis`, from its end with `reverse`, in order (NumPy's
    accumulate; an i32 wraps around as the targets' do). A float sum starts from 0.0, as
    the targets' and PyTorch's do: a run of -0.0s sums to 0.0 (NumPy's keeps -0.0)."""
    x, axis = np.asarray(x), attrs["axis"]
    wide = np.float64 if x.dtype == np.float32 else x.dtype  # f32 added in double
    if attrs["reverse"]:
        sums = np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=wide), axis)
    else:
        sums = np.cumsum(x, axis=axis, dtype=wide)
    return (sums + 0 if x.dtype.kind == "f" else sums).astype(x.dtype)


def _cumsum_grad(b, op, cts):
    """Each element adds into every later sum: the cotangent's sums from the other end."""
    return [b.cumsum(cts[0], axis=op.attrs["axis"], reverse=not op.attrs["reverse"])]


def _cumsum_onnx(g, op, xs):
    """CumSum; of f32 in f64, as the targets add (the last of onnxruntime's f32 running
    sums of 1e8, 4096 ones and -1e8 was 0)."""
    dtype = op.inputs[0].type.dtype
    x = g.op("Cast", xs[0], to=g.dtype("f64")) if dtype == "f32" else xs[0]
    out = g.op("CumSum", x, g.const(op.attrs["axis"], "i32"), reverse=int(op.attrs["reverse"]))
    return g.op("Cast", out, to=g.dtype(dtype)) if dtype == "f32" else out


@primitive("cumsum", 1, grad=_cumsum_grad, ref=_cumsum_ref, onnx=_cumsum_onnx)
def _cumsum(types, attrs):
    x, = types
    same_dtype(types, "`cumsum`", NUMERIC)
    need(x.rank >= 1, f"`cumsum` needs a tensor of rank 1 or more, got {x}")
    need(0 <= attrs["axis"] < x.rank and isinstance(attrs["reverse"], bool),
         "cumsum takes an axis of its operand and `reverse`")
    return [x]


# ---- topk --------------------------------------------------------------------------
def _topk_ref(ctx, attrs, x):
    """The k largest values along `axis`, largest first, and their indices: a NaN counts
    as the largest (as in argmax), equal values keep their order (the lower index first)."""
    x, axis, k = np.asarray(x), attrs["axis"], attrs["k"]
    moved = np.moveaxis(x, axis, -1)
    nan = np.isnan(moved) if x.dtype.kind == "f" else np.zeros(moved.shape, bool)
    key = np.where(nan, 0, moved).astype(np.float64)  # i32 exactly; -(-2**31) fits
    order = np.lexsort((-key, ~nan), axis=-1)[..., :k]  # stable: ties by index
    values = np.take_along_axis(moved, order, -1)
    return [np.moveaxis(values, -1, axis), np.moveaxis(order.astype(np.int32), -1, axis)]


def _topk_grad(b, op, cts):
    """Each value's cotangent back at the index it came from: sum over the k picks of
    one_hot(index, n) * cotangent, its class axis moved to `axis`."""
    x, (_, indices), g = op.inputs[0], op.outputs, cts[0]
    axis, rank = op.attrs["axis"], op.inputs[0].type.rank
    hot = b.one_hot(indices, n=x.type.shape[axis], dtype=x.type.dtype)
    picked = b.mul(hot, b.reshape(g, shape=g.type.shape + (Dim.of(1),)))
    summed = b.sum(picked, axes=(axis,), keepdims=False)  # [..., n] with n last
    if axis == rank - 1:
        return [summed]
    perm = tuple(range(axis)) + (rank - 1,) + tuple(range(axis, rank - 1))
    return [b.transpose(summed, perm=perm)]


def _topk_onnx(g, op, xs):
    """TopK (largest first; equal keys lower index first) of keys that order as the
    reference does, the indices cast to i32. A float's key is its value in f64 with +inf
    made f64's largest number and a NaN +inf, so that every NaN comes first, then +inf.
    An f32's values are its keys mapped back (exact: no f32 is f64's largest number);
    an f64's are gathered from the input, since its largest number may be a value (and a
    row holding both it and +inf may order the two by index). OpenVINO 2026.4 left a
    GatherElements of parameters to a later call's memory."""
    x, = xs
    axis, k = op.attrs["axis"], op.attrs["k"]
    dtype = op.inputs[0].type.dtype
    keys = x
    if op.inputs[0].type.is_float:
        largest, inf = g.const(np.finfo(np.float64).max, "f64"), g.const(np.inf, "f64")
        wide = g.op("Cast", x, to=g.dtype("f64"))
        finite = g.op("Where", g.op("Equal", x, g.const(np.inf, dtype)), largest, wide)
        keys = g.op("Where", g.isnan(x), inf, finite)
    top, indices = g.ops("TopK", [keys, g.ints([k])], 2, axis=axis, largest=1, sorted=1)
    if dtype == "f32":
        back = g.op("Where", g.op("Equal", top, largest), inf, top)
        back = g.op("Where", g.op("Equal", top, inf), g.const(np.nan, "f64"), back)
        values = g.op("Cast", back, to=g.dtype("f32"))
    else:
        values = g.op("GatherElements", x, indices, axis=axis)
    return [values, g.op("Cast", indices, to=g.dtype("i32"))]


@primitive("topk", 1, grad=_topk_grad, ref=_topk_ref, onnx=_topk_onnx)
def _topk(types, attrs):
    x, = types
    same_dtype(types, "`topk`", NUMERIC)
    axis, k = attrs["axis"], attrs["k"]
    need(x.rank >= 1, f"`topk` needs a tensor of rank 1 or more, got {x}")
    n = x.shape[axis]
    need(n.is_const, f"`topk` needs the size of its axis known when compiling (a number or "
         f"a hyper-parameter), got {n}")
    need(1 <= k <= n.value, f"`topk` takes 1 to {n} values along an axis of {n}, got k = {k}")
    shape = x.shape[:axis] + (Dim.of(k),) + x.shape[axis + 1:]
    return [x.with_shape(shape), TensorType("i32", shape)]


# ---- softmax -----------------------------------------------------------------------
def _softmax_ref(ctx, attrs, x):
    e = np.exp(x - _max_ref(x, attrs["axis"], True))
    return e / np.sum(e, attrs["axis"], keepdims=True)


def _log_softmax_ref(ctx, attrs, x):
    """(x - m) - log(sum(exp(x - m))), m the max where it is finite, else 0: shifted
    first, as the targets, since x - logsumexp(x) rounds log(sum) away when x is large."""
    m = _max_ref(x, attrs["axis"], True)
    shifted = x - np.where(np.isfinite(m), m, 0)
    return shifted - np.log(np.sum(np.exp(shifted), attrs["axis"], keepdims=True))


def _softmax_grad(b, op, cts):
    y, g = op.outputs[0], cts[0]
    inner = b.sum(b.mul(g, y), axes=(op.attrs["axis"],), keepdims=True)
    return [b.mul(y, b.sub(g, inner))]


def _log_softmax_grad(b, op, cts):
    y, g = op.outputs[0], cts[0]
    total = b.sum(g, axes=(op.attrs["axis"],), keepdims=True)
    return [b.sub(g, b.mul(b.exp(y), total))]


def log_softmax_onnx(g, x: str, axis: int, dtype: str) -> str:
    """As the reference: (x - m) - log(sum(exp(x - m))), m the max where it is finite,
    else 0. Not onnxruntime's LogSoftmax, whose f64 kernel gave a row holding a NaN
    finite values, and whose f32 one a row holding +inf NaN everywhere (-inf but there)."""
    axes = g.ints([axis])
    m = g.op("ReduceMax", x, axes, keepdims=1)
    finite = g.op("Less", g.op("Abs", m), g.const(np.inf, dtype))  # not NaN
    shifted = g.op("Sub", x, g.op("Where", finite, m, g.const(0, dtype)))
    total = g.op("ReduceSum", g.op("Exp", shifted), axes, keepdims=1)
    return g.op("Sub", shifted, g.op("Log", total))


def _softmax_rule(name: str, grad, ref, onnx) -> None:
    def rule(types, attrs):
        same_dtype(types, f"`{name}`", FLOATS)
        return [types[0]]
    primitive(name, 1, grad=grad, ref=ref, onnx=onnx)(rule)


_softmax_rule("softmax", _softmax_grad, _softmax_ref,
              lambda g, op, xs: g.op("Softmax", *xs, axis=op.attrs["axis"]))
_softmax_rule("log_softmax", _log_softmax_grad, _log_softmax_ref,
              lambda g, op, xs: log_softmax_onnx(g, xs[0], op.attrs["axis"],
                                                 op.inputs[0].type.dtype))
