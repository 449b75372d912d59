"""Losses, dropout, and the sequence primitives that loops with lengths and checkpoints
are lowered to for autodiff (seq_order, seq_mask, segment, unsegment)."""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import FLOATS
from ...ir.shapes import Dim, TensorType, ceil_div, numel
from .core import need, primitive, same_dtype
from .elementwise import _no_grad


# ---- cross entropy --------------------------------------------------------------------
def _token_mask(targets, lengths):
    """Which tokens are real: all of them, or those t < L[b] of targets [T, B]."""
    if lengths is None:
        return np.ones(np.shape(targets), bool)
    return np.arange(targets.shape[0])[:, None] < np.asarray(lengths)[None, :]


def _cross_entropy_ref(ctx, attrs, logits, targets, lengths=None):
    mask = _token_mask(targets, lengths)
    shifted = logits - np.max(logits, -1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), -1, keepdims=True))
    picked = np.take_along_axis(log_probs, np.where(mask, targets, 0)[..., None], -1)[..., 0]
    # a batch without real tokens has loss 0, not 0/0
    return np.asarray(-np.sum(picked * mask) / max(int(np.sum(mask)), 1), logits.dtype)


def _cross_entropy_grad(b, op, cts):
    logits, targets, *rest = op.inputs
    dtype, g = logits.type.dtype, cts[0]
    diff = b.sub(b.softmax(logits, axis=logits.type.rank - 1),
                 b.one_hot(targets, n=logits.type.shape[-1], dtype=dtype))
    if rest:
        real = b.cast(b.seq_mask(targets, rest[0]), dtype=dtype)
        count = b.maximum(b.sum(real, axes=(0, 1), keepdims=False), b.const(1, dtype))
        weight = b.reshape(b.div(real, count), shape=targets.type.shape + (Dim.of(1),))
    else:
        count = numel(targets.type.shape)
        weight = b.div(b.const(1, dtype),
                       b.emit("full", [], {"shape": (), "value": count, "dtype": dtype})[0])
    return [b.mul(diff, b.mul(weight, g)), None] + [None] * len(rest)


def _cross_entropy_bounds(op, size) -> list:
    """Targets index the classes; lengths lie in [1, T]."""
    logits, targets, *lengths = op.inputs
    return [(targets, 0, size(logits.type.shape[-1]))] + [
        (n, 1, size(targets.type.shape[0]) + 1) for n in lengths]


@primitive("cross_entropy", None, grad=_cross_entropy_grad, ref=_cross_entropy_ref,
           integer_bounds=_cross_entropy_bounds)
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


# dropout's gradient needs its mask: autodiff differentiates its expansion x * mask
primitive("dropout", 1, random=True, expand=_dropout_expand,
          ref=lambda ctx, attrs, x: x * _mask(ctx, attrs, np.shape(x), x.dtype)
          )(_float_unary("dropout"))
primitive("dropout_mask", 1, random=True, grad=_no_grad,
          ref=lambda ctx, attrs, x: _mask(ctx, attrs, np.shape(x), x.dtype)
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


@primitive("seq_order", 2, ref=_seq_order_ref,
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


@primitive("seq_mask", None, grad=_no_grad, ref=_seq_mask_ref)
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


@primitive("segment", 1, ref=_segment_ref,
           grad=lambda b, op, cts: [b.unsegment(cts[0], op.inputs[0])])
def _segment(types, attrs):
    """x [T, ...] as [ceil(T/k), k, ...] segments, zero-padded at the end."""
    x, = types
    need(x.rank >= 1, f"`segment` needs a sequence, got {x}")
    k = attrs["k"]
    return [x.with_shape((ceil_div(x.shape[0], k), Dim.of(k)) + x.shape[1:])]


def _unsegment_ref(ctx, attrs, y, like):
    return y.reshape((-1,) + y.shape[2:])[:np.shape(like)[0]]


@primitive("unsegment", 2, ref=_unsegment_ref, selects=True,
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
