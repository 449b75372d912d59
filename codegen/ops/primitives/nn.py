"""Losses, dropout, and the sequence primitives that loops with lengths and checkpoints
are lowered to for autodiff (seq_order, seq_mask, segment, unsegment)."""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import FLOATS
from ...ir.shapes import Dim, TensorType, ceil_div, numel
from ..context import OutOfRange
from .core import need, onnx_node, primitive, same_dtype
from .elementwise import _no_grad
from .replay import redraw_mask
from .tensor import log_softmax_onnx


# ---- cross entropy --------------------------------------------------------------------
def _token_mask(targets, lengths):
    """Which tokens are real: all of them, or those t < L[b] of targets [T, B]."""
    if lengths is None:
        return np.ones(np.shape(targets), bool)
    return np.arange(targets.shape[0])[:, None] < np.asarray(lengths)[None, :]


def _cross_entropy_ref(ctx, attrs, logits, targets, lengths=None):
    if lengths is not None:  # as a loop's: they were clamped, and the mean weighed by them
        from ..structured.for_op import check_lengths  # (for_op imports this module)
        check_lengths(np.asarray(lengths), targets.shape[0], attrs.get("lengths_name"))
    mask = _token_mask(targets, lengths)
    classes = logits.shape[-1]
    bad = np.flatnonzero(mask & ((targets < 0) | (targets >= classes)))  # NumPy would wrap
    if bad.size:
        raise OutOfRange("target", 1, np.ravel(targets)[bad[0]], bad[0], classes)
    shifted = logits - np.max(logits, -1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), -1, keepdims=True))
    picked = np.take_along_axis(log_probs, np.where(mask, targets, 0)[..., None], -1)[..., 0]
    # padded tokens count for nothing, whatever their logits hold (NaN times a 0 weight
    # was NaN: the targets skip them, as PyTorch's ignore_index does); a batch without
    # real tokens has loss 0, not 0/0
    return np.asarray(-np.sum(np.where(mask, picked, 0)) / max(int(np.sum(mask)), 1),
                      logits.dtype)


def token_weights(b, targets, lengths, dtype: str):
    """Each token's weight in cross_entropy's mean over the real tokens, emitted through
    the builder `b`: with lengths, [T, B] of 1 / count at real tokens (count at least 1:
    no real token gives 0, not 0/0) and 0 at padding; without, the scalar 1 / numel.
    cross_entropy's gradient and its label smoothing (dsl/builtins.py) weigh by it."""
    if lengths is None:
        count = numel(targets.type.shape)
        return b.div(b.const(1, dtype),
                     b.emit("full", [], {"shape": (), "value": count, "dtype": dtype})[0])
    real = b.cast(b.seq_mask(targets, lengths), dtype=dtype)
    count = b.maximum(b.sum(real, axes=(0, 1), keepdims=False), b.const(1, dtype))
    return b.div(real, count)


def _cross_entropy_grad(b, op, cts):
    logits, targets, *rest = op.inputs
    dtype, g = logits.type.dtype, cts[0]
    diff = b.sub(b.softmax(logits, axis=logits.type.rank - 1),
                 b.one_hot(targets, n=logits.type.shape[-1], dtype=dtype))
    weight = token_weights(b, targets, rest[0] if rest else None, dtype)
    if rest:
        weight = b.reshape(weight, shape=targets.type.shape + (Dim.of(1),))
    return [b.mul(diff, b.mul(weight, g)), None] + [None] * len(rest)


def _cross_entropy_bounds(op, size) -> list:
    """Targets index the classes; lengths lie in [1, T]."""
    logits, targets, *lengths = op.inputs
    return [(targets, 0, size(logits.type.shape[-1]))] + [
        (n, 1, size(targets.type.shape[0]) + 1) for n in lengths]


def _steps_real_onnx(g, x: str, lengths: str) -> str:
    """bool[T, B]: t < lengths[b], T the leading dim of x."""
    steps = g.op("Cast", g.op("Squeeze", g.size(x, 0), g.ints([0])), to=g.dtype("i32"))
    t = g.op("Range", g.const(0, "i32"), steps, g.const(1, "i32"))
    return g.op("Less", g.op("Unsqueeze", t, g.ints([1])),
                g.op("Unsqueeze", lengths, g.ints([0])))


def _cross_entropy_onnx(g, op, xs):
    """As the reference: minus the mean log-probability of the targets over the real
    tokens (0 where there are none)."""
    logits, targets, *lengths = xs
    dtype = op.inputs[0].type.dtype
    if lengths:
        real = _steps_real_onnx(g, targets, lengths[0])
        targets = g.op("Where", real, targets, g.const(0, "i32"))
    log_probs = log_softmax_onnx(g, logits, op.inputs[0].type.rank - 1, dtype)
    # picked from rows of C (onnx's reference evaluator gathers from more than 64 classes
    # only so, and mistakes a negative axis)
    rank = op.inputs[0].type.rank
    rows = g.op("Reshape", log_probs, g.op("Concat", g.ints([-1]),
                                           g.op("Shape", logits, start=rank - 1), axis=0))
    picked = g.op("GatherElements", rows, g.op("Reshape", targets, g.ints([-1, 1])), axis=1)
    picked = g.op("Reshape", picked, g.op("Shape", targets))
    if lengths:  # a padded token's log-probability is left out, not weighed by 0: NaN
        weight = g.op("Cast", real, to=g.dtype(dtype))  # or inf there would be NaN
        total = g.op("ReduceSum", g.op("Where", real, picked, g.const(0, dtype)), keepdims=0)
        count = g.op("ReduceSum", weight, keepdims=0)
    else:
        total = g.op("ReduceSum", picked, keepdims=0)
        count = g.op("Cast", g.op("Size", targets), to=g.dtype(dtype))
    return g.op("Neg", g.op("Div", total, g.op("Max", count, g.const(1, dtype))))


@primitive("cross_entropy", None, faults=True, grad=_cross_entropy_grad, ref=_cross_entropy_ref,
           integer_bounds=_cross_entropy_bounds, onnx=_cross_entropy_onnx)
def _cross_entropy(types, attrs):
    logits, targets, *rest = types
    need(logits.is_float, f"`cross_entropy` needs float logits, got {logits}")
    need(targets.dtype == "i32", f"`cross_entropy` needs i32 targets, got {targets}")
    need(logits.rank >= 1 and logits.shape[:-1] == targets.shape,
         f"`cross_entropy` needs targets shaped like the logits without their last dim, "
         f"got logits {logits} and targets {targets}")
    if rest:
        lengths, = rest
        need(targets.rank == 2 and lengths.dtype == "i32" and lengths.shape == targets.shape[1:],
             f"`cross_entropy` with lengths needs targets i32[T, B] and lengths i32[B], "
             f"got targets {targets} and lengths {lengths}")
    return [TensorType(logits.dtype, ())]


# ---- dropout --------------------------------------------------------------------------
def _mask(ctx, attrs, shape, dtype):
    """Kept elements scaled by 1/(1-p) in training calls; ones otherwise."""
    p = attrs["p"]
    if not ctx.training or p == 0:
        return np.ones(shape, dtype)
    keep = ctx.rng(attrs["salt"]).random(shape) >= p
    return (keep / (1 - p)).astype(dtype)


def _dropout_expand(b, op):
    x, = op.inputs
    mask = b.dropout_mask(x, p=op.attrs["p"], salt=op.attrs["salt"])
    return [b.mul(x, mask)]


def _float_unary(name: str):
    def rule(types, attrs):
        same_dtype(types, f"`{name}`", FLOATS)
        return [types[0]]
    return rule


def _ones_like_onnx(g, op, xs):
    return g.op("Expand", g.const(1, op.outputs[0].type.dtype), g.op("Shape", xs[0]))


# dropout's gradient needs its mask: autodiff differentiates its expansion x * mask.
# An ONNX graph is the inference program: no dropout (its mask is ones).
primitive("dropout", 1, random=True, expand=_dropout_expand, onnx=onnx_node("Identity"),
          ref=lambda ctx, attrs, x: x * _mask(ctx, attrs, np.shape(x), x.dtype)
          )(_float_unary("dropout"))
primitive("dropout_mask", 1, random=True, grad=_no_grad, onnx=_ones_like_onnx,
          redraw=redraw_mask, ref=lambda ctx, attrs, x: _mask(ctx, attrs, np.shape(x), x.dtype)
          )(_float_unary("dropout_mask"))


# ---- sequences --------------------------------------------------------------------------
def _seq_order_ref(ctx, attrs, x, lengths):
    steps, batch = x.shape[:2]
    i, lens = np.arange(steps)[:, None], np.asarray(lengths)[None, :]
    valid = i < lens
    t = np.where(valid, lens - 1 - i if attrs["reversed"] else i, 0)
    out = x[t, np.arange(batch)[None, :]]
    return np.where(valid.reshape(valid.shape + (1,) * (x.ndim - 2)), out, 0).astype(x.dtype)


def _check_lengths(x: TensorType, lengths: TensorType, what: str) -> None:
    need(x.rank >= 2 and lengths.dtype == "i32" and lengths.shape == x.shape[1:2],
         f"`{what}` needs x [T, B, ...] and lengths i32[B], got {x} and {lengths}")


def _seq_order_onnx(g, op, xs):
    """Row b of step i gathered from x[t, b] (t as the reference computes it), zeros
    where i >= L[b]."""
    x, lengths = xs
    real = _steps_real_onnx(g, x, lengths)
    steps = g.op("Cast", g.op("Squeeze", g.size(x, 0), g.ints([0])), to=g.dtype("i32"))
    i = g.op("Unsqueeze", g.op("Range", g.const(0, "i32"), steps, g.const(1, "i32")),
             g.ints([1]))
    if op.attrs["reversed"]:  # from min(L, T) - 1: a length above T runs all T steps
        # (the module refuses it; the graph checks no lengths), not a GatherND past x
        last = g.op("Sub", g.op("Unsqueeze", g.op("Min", lengths, steps), g.ints([0])),
                    g.const(1, "i32"))
        i = g.op("Sub", last, i)
    t = g.op("Where", real, i, g.const(0, "i32"))
    batch = g.op("Cast", g.op("Squeeze", g.size(x, 1), g.ints([0])), to=g.dtype("i32"))
    rows = g.op("Expand", g.op("Range", g.const(0, "i32"), batch, g.const(1, "i32")),
                g.op("Shape", t))
    where = g.op("Concat", g.op("Unsqueeze", t, g.ints([-1])),
                 g.op("Unsqueeze", rows, g.ints([-1])), axis=-1)
    picked = g.op("GatherND", x, g.op("Cast", where, to=g.dtype("i64")))
    rank = op.inputs[0].type.rank
    keep = g.op("Unsqueeze", real, g.ints(range(2, rank))) if rank > 2 else real
    dtype = op.inputs[0].type.dtype  # a bool yield's: onnxruntime has no Where of bools
    return g.where(keep, picked, g.const(0, dtype), dtype == "bool")


@primitive("seq_order", 2, faults=True, ref=_seq_order_ref, onnx=_seq_order_onnx,
           grad=lambda b, op, cts: [b.seq_order(cts[0], op.inputs[1], **op.attrs), None])
def _seq_order(types, attrs):
    """x [T, B, ...] in the step order of a loop with lengths: row b of step i holds
    x[t, b] with t = L[b]-1-i (reversed) or t = i, for i < L[b], and zeros after.
    Its own adjoint (a symmetric permutation of the real steps)."""
    x, lengths = types
    _check_lengths(x, lengths, "seq_order")
    return [x]


def _seq_mask_ref(ctx, attrs, x, lengths=None):
    if lengths is None:
        return np.ones(np.shape(x)[:1], bool)
    return _token_mask(np.zeros(np.shape(x)[:2]), lengths)


def _seq_mask_onnx(g, op, xs):
    if len(xs) == 2:
        return _steps_real_onnx(g, *xs)
    return g.op("Expand", g.const(True, "bool"), g.size(xs[0], 0))


@primitive("seq_mask", None, grad=_no_grad, ref=_seq_mask_ref, onnx=_seq_mask_onnx)
def _seq_mask(types, attrs):
    """bool[T, B]: step t of row b is real (t < L[b]); without lengths bool[T], all true."""
    x, *rest = types
    need(x.rank >= 1 and len(rest) <= 1, f"`seq_mask` needs a sequence, got {x}")
    if not rest:
        return [TensorType("bool", x.shape[:1])]
    _check_lengths(x, rest[0], "seq_mask")
    return [TensorType("bool", x.shape[:2])]


def _segment_ref(ctx, attrs, x):
    k = attrs["k"]
    segments = -(-x.shape[0] // k)
    padded = np.zeros((segments * k,) + x.shape[1:], x.dtype)
    padded[:x.shape[0]] = x
    return padded.reshape((segments, k) + x.shape[1:])


def _segment_onnx(g, op, xs):
    """x padded with zeros to S*k steps, S = ceil(T/k), as [S, k, ...]."""
    x, = xs
    k = g.ints([op.attrs["k"]])
    steps = g.size(x, 0)
    segments = g.op("Div", g.op("Add", steps, g.ints([op.attrs["k"] - 1])), k)
    rank = op.inputs[0].type.rank
    pad = g.op("Sub", g.op("Mul", segments, k), steps)
    pads = g.op("Concat", g.ints([0] * rank), pad, g.ints([0] * (rank - 1)), axis=0)
    padded = g.op("Pad", x, pads, g.const(0, op.inputs[0].type.dtype))
    shape = g.op("Concat", segments, k, g.op("Shape", x, start=1), axis=0)
    return g.op("Reshape", padded, shape)


@primitive("segment", 1, ref=_segment_ref, onnx=_segment_onnx,
           grad=lambda b, op, cts: [b.unsegment(cts[0], op.inputs[0])])
def _segment(types, attrs):
    """x [T, ...] as [ceil(T/k), k, ...] segments, zero-padded at the end."""
    x, = types
    need(x.rank >= 1, f"`segment` needs a sequence, got {x}")
    k = attrs["k"]
    return [x.with_shape((ceil_div(x.shape[0], k), Dim.of(k)) + x.shape[1:])]


def _unsegment_ref(ctx, attrs, y, like):
    # the steps counted, not -1: NumPy cannot infer a -1 beside a 0 (a batch of none)
    return y.reshape((y.shape[0] * y.shape[1],) + y.shape[2:])[:np.shape(like)[0]]


def _unsegment_onnx(g, op, xs):
    y, like = xs
    whole = g.op("Reshape", y, g.op("Concat", g.ints([-1]), g.op("Shape", y, start=2),
                                    axis=0))
    return g.op("Slice", whole, g.ints([0]), g.size(like, 0), g.ints([0]))


@primitive("unsegment", 2, ref=_unsegment_ref, selects=True, onnx=_unsegment_onnx,
           grad=lambda b, op, cts: [b.segment(cts[0], k=op.inputs[0].type.shape[1].value),
                                    None])
def _unsegment(types, attrs):
    """Segments y [S, k, ...] back to [T, ...], T the length of `like` (padding dropped)."""
    y, like = types
    need(y.rank >= 2 and like.rank >= 1 and y.shape[1].is_const
         and y.shape[0] == ceil_div(like.shape[0], y.shape[1].value),
         f"`unsegment` needs segments [ceil(T/k), k, ...] of a [T, ...] sequence, got {y} "
         f"and {like}")
    return [y.with_shape(like.shape[:1] + y.shape[2:])]
