"""Primitives that gradients are made of (users cannot write them): reducing to and
broadcasting to a shape, zeros, a sum of many, and the adjoints of index, slice and
gather. Each has its own gradient, so gradients of gradients work."""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import NUMERIC
from ...ir.shapes import Dim, broadcast_shapes, shape_text
from ..entry import summed
from .core import need, onnx_node, primitive, same_dtype
from .elementwise import _no_grad
from .structure import inside, slices


def _shape_attr(types, attrs):
    x, = types
    return x, tuple(attrs["shape"])


def _same_type(b, op, facts):
    x = op.inputs[0]
    return [x] if x.type == op.outputs[0].type else None


# ---- sum_to, broadcast_to -------------------------------------------------------------
def _sum_to_ref(ctx, attrs, x):
    shape = tuple(ctx.dim(d) for d in attrs["shape"])
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and x.shape[lead + i] != 1)
    return np.sum(x, axes, dtype=x.dtype, keepdims=True).reshape(shape)


def _sum_to_step_sum(op, value, producers, stack, facts):
    """sum_to(g) summed over the steps: sum_to(G) of every step's g."""
    if tuple(op.attrs["shape"]) != tuple(op.outputs[0].type.shape):
        return None
    stacked = stack(op.inputs[0])
    if stacked is None:
        return None
    return lambda b: b.sum_to(stacked, shape=op.outputs[0].type.shape)


def _sum_to_onnx(g, op, xs):
    x, shape = op.inputs[0], tuple(op.attrs["shape"])
    lead = x.type.rank - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                if d == 1 and x.type.shape[lead + i] != 1]
    summed = g.op("ReduceSum", xs[0], g.ints(axes), keepdims=1) if axes else xs[0]
    return g.op("Reshape", summed, g.dims(shape))


@primitive("sum_to", 1, simplify=_same_type, ref=_sum_to_ref, step_sum=_sum_to_step_sum,
           onnx=_sum_to_onnx,
           grad=lambda b, op, cts: [b.broadcast_to(cts[0], shape=op.inputs[0].type.shape)])
def _sum_to(types, attrs):
    x, shape = _shape_attr(types, attrs)
    need(broadcast_shapes(shape, x.shape) == x.shape,
         f"`sum_to` cannot reduce {x} to {shape_text(shape)}")
    return [x.with_shape(shape)]


@primitive("broadcast_to", 1, simplify=_same_type, selects=True,
           onnx=lambda g, op, xs: g.op("Expand", xs[0], g.dims(op.attrs["shape"])),
           ref=lambda ctx, attrs, x: np.array(np.broadcast_to(
               x, tuple(ctx.dim(d) for d in attrs["shape"]))),
           grad=lambda b, op, cts: [b.sum_to(cts[0], shape=op.inputs[0].type.shape)])
def _broadcast_to(types, attrs):
    x, shape = _shape_attr(types, attrs)
    need(broadcast_shapes(x.shape, shape) == shape,
         f"`broadcast_to` cannot broadcast {x} to {shape_text(shape)}")
    return [x.with_shape(shape)]


# ---- zeros, sums ----------------------------------------------------------------------
def _zeros_onnx(g, dtype: str, shape: str) -> str:
    return g.op("Expand", g.const(0, dtype), shape)


@primitive("zeros_like", 1, grad=_no_grad, ref=lambda ctx, attrs, x: np.zeros_like(x),
           uniform=lambda op: 0,
           onnx=lambda g, op, xs: _zeros_onnx(g, op.outputs[0].type.dtype, g.op("Shape", *xs)))
def _zeros_like(types, attrs):
    return [types[0]]


def _add_n_simplify(b, op, facts):
    live = [v for v in op.inputs if facts.const(v) != 0]
    if len(live) == len(op.inputs):
        return None
    if not live:
        return [b.zeros(op.outputs[0].type, op.inputs[0])]
    return [b.total(live)]


def _add_n_step_sum(op, value, producers, stack, facts):
    """A sum of terms summed over the steps: the sum of each term's own sum over them (a
    weight used twice a step: its two uses' gradients, one product each after the loop),
    None unless every term but zeros has one."""
    sums = [summed(v, producers, stack, facts) for v in op.inputs if facts.const(v) != 0]
    if not sums or None in sums:
        return None
    return lambda b: b.total([total(b) for total in sums])


@primitive("add_n", None, elementwise=True, simplify=_add_n_simplify,
           step_sum=_add_n_step_sum,
           grad=lambda b, op, cts: [cts[0]] * len(op.inputs),
           ref=lambda ctx, attrs, *xs: np.asarray(sum(xs[1:], xs[0])), onnx=onnx_node("Sum"))
def _add_n(types, attrs):
    need(len(types) >= 1 and all(t == types[0] for t in types),
         "`add_n` sums values of one type, got " + ", ".join(str(t) for t in types))
    same_dtype(types, "`add_n`", NUMERIC)
    return [types[0]]


# ---- adjoints of index, slice, gather ---------------------------------------------------
def _unindex_ref(ctx, attrs, g, i):
    out = np.zeros((ctx.dim(attrs["n"]),) + g.shape, g.dtype)
    out[int(i)] = g
    return out


def _unindex_onnx(g, op, xs):
    out = op.outputs[0]
    zeros = _zeros_onnx(g, out.type.dtype, g.dims(out.type.shape))
    at = g.op("Cast", g.op("Reshape", xs[1], g.ints([1, 1])), to=g.dtype("i64"))
    return g.op("ScatterND", zeros, at, g.op("Unsqueeze", xs[0], g.ints([0])))


@primitive("unindex", 2, faults=True, ref=_unindex_ref, onnx=_unindex_onnx,
           grad=lambda b, op, cts: [b.index(cts[0], op.inputs[1]), None])
def _unindex(types, attrs):
    """Zeros of [n, ...] with g at row i (the adjoint of index)."""
    g, i = types
    need(i.dtype == "i32" and i.rank == 0, f"an index must be an i32 scalar, got {i}")
    return [g.with_shape((Dim.of(attrs["n"]),) + g.shape)]


def _unslice_ref(ctx, attrs, g):
    out = np.zeros(tuple(ctx.dim(d) for d in attrs["shape"]), g.dtype)
    stops = [a + s for a, s in zip(attrs["starts"], _dims(g.shape))]
    out[slices(ctx, attrs["starts"], stops)] = g
    return out


def _dims(shape) -> list[Dim]:
    return [Dim.of(int(d)) for d in shape]


def _unslice_grad(b, op, cts):
    g = op.inputs[0]
    starts = op.attrs["starts"]
    stops = tuple(a + d for a, d in zip(starts, g.type.shape))
    return [b.slice(cts[0], starts=starts, stops=stops)]


def _unslice_onnx(g, op, xs):
    """g padded with zeros: `starts` before it, the rest of `shape` after it."""
    shape, starts = op.attrs["shape"], op.attrs["starts"]
    rank = len(shape)
    before = g.dims(tuple(starts) + (0,) * (rank - len(starts)))
    after = g.op("Sub", g.op("Sub", g.dims(shape), before), g.op("Shape", xs[0]))
    pads = g.op("Concat", before, after, axis=0)
    return g.op("Pad", xs[0], pads, g.const(0, op.outputs[0].type.dtype))


def _unslice_bounds(op):
    g, starts = op.inputs[0].type, op.attrs["starts"]
    whole = g.with_shape(tuple(op.attrs["shape"]))
    return inside(whole, starts, [a + n for a, n in zip(starts, g.shape)])


@primitive("unslice", 1, ref=_unslice_ref, grad=_unslice_grad, bounds=_unslice_bounds,
           onnx=_unslice_onnx)
def _unslice(types, attrs):
    """Zeros of `shape` with g placed at `starts` (the adjoint of slice)."""
    g, = types
    shape, starts = tuple(attrs["shape"]), attrs["starts"]
    need(len(shape) == g.rank and shape[len(starts):] == g.shape[len(starts):],
         f"`unslice` cannot place {g} into {shape_text(shape)}")
    return [g.with_shape(shape)]


def _scatter_add_ref(ctx, attrs, g, ids):
    out = np.zeros((ctx.dim(attrs["n"]),) + g.shape[ids.ndim:], g.dtype)
    np.add.at(out, ids, g)
    return out


def _scatter_add_onnx(g, op, xs):
    out = op.outputs[0]
    zeros = _zeros_onnx(g, out.type.dtype, g.dims(out.type.shape))
    at = g.op("Cast", g.op("Unsqueeze", xs[1], g.ints([-1])), to=g.dtype("i64"))
    return g.op("ScatterND", zeros, at, xs[0], reduction="add")


@primitive("scatter_add", 2, faults=True, ref=_scatter_add_ref, onnx=_scatter_add_onnx,
           grad=lambda b, op, cts: [b.gather(cts[0], op.inputs[1]), None])
def _scatter_add(types, attrs):
    """Zeros of [n, ...] with each row g[j] added at row ids[j] (the adjoint of gather)."""
    g, ids = types
    need(ids.dtype == "i32" and g.shape[:ids.rank] == ids.shape,
         f"`scatter_add` needs i32 ids shaped like the leading dims of {g}, got {ids}")
    return [g.with_shape((Dim.of(attrs["n"]),) + g.shape[ids.rank:])]
