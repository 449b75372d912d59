"""Structural primitives: concat, stack, split, reshape, transpose, index, slice,
gather. All are linear; each gradient is the adjoint structural op."""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import NUMERIC
from ...ir.shapes import Dim, numel, ragged_trips, shape_text
from ..context import OutOfRange
from ..entry import summed
from .core import TABLE, ShapeError, need, onnx_node, primitive, same_dtype


def _same_shape(b, op, facts):
    x = op.inputs[0]
    return [x] if x.type == op.outputs[0].type else None


# ---- concat, stack, split -----------------------------------------------------------
def _concat_grad(b, op, cts):
    axis, g = op.attrs["axis"], cts[0]
    out, offset = [], Dim.of(0)
    for x in op.inputs:
        size = x.type.shape[axis]
        starts = (Dim.of(0),) * axis + (offset,)
        stops = g.type.shape[:axis] + (offset + size,)
        out.append(b.slice(g, starts=starts, stops=stops))
        offset = offset + size
    return out


@primitive("concat", None, grad=_concat_grad,
           ref=lambda ctx, attrs, *xs: np.concatenate(xs, attrs["axis"]),
           onnx=lambda g, op, xs: g.op("Concat", *xs, axis=op.attrs["axis"]))
def _concat(types, attrs):
    axis = attrs["axis"]
    same_dtype(types, "`concat`", NUMERIC + ("bool",))
    first = types[0]
    for t in types[1:]:  # the message made only when it is said (once a concat of n
        # pieces took O(n^2): 11 s for 3000)
        if not (t.rank == first.rank and all(
                a == b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis)):
            need(False, f"`concat` along axis {axis} needs the other dims to agree, got "
                 + ", ".join(str(t) for t in types))
    total = Dim.of(0)
    for t in types:
        total = total + t.shape[axis]
    return [first.with_shape(first.shape[:axis] + (total,) + first.shape[axis + 1:])]


def _stack_grad(b, op, cts):
    parts = b.emit("split", [cts[0]], {"axis": op.attrs["axis"], "parts": len(op.inputs)})
    return [b.reshape(p, shape=x.type.shape) for p, x in zip(parts, op.inputs)]


def _stack_onnx(g, op, xs):
    axis = g.ints([op.attrs["axis"]])
    return g.op("Concat", *[g.op("Unsqueeze", x, axis) for x in xs], axis=op.attrs["axis"])


@primitive("stack", None, grad=_stack_grad,
           ref=lambda ctx, attrs, *xs: np.stack(xs, attrs["axis"]), onnx=_stack_onnx)
def _stack(types, attrs):
    same_dtype(types, "`stack`", NUMERIC + ("bool",))
    need(all(t.shape == types[0].shape for t in types),
         "`stack` needs operands of one shape, got " + ", ".join(str(t) for t in types))
    axis, shape = attrs["axis"], types[0].shape
    return [types[0].with_shape(shape[:axis] + (Dim.of(len(types)),) + shape[axis:])]


def _split_simplify(b, op, facts):
    """split(f(x, y, ...)), f elementwise and read only here, is f(split(x), split(y),
    ...) part by part: each part is computed once, where it is used, and the whole is
    never stored (an LSTM's x @ W + h @ U + b is added inside its gate loop). Operands
    broadcast along the split axis stay whole."""
    x = op.inputs[0]
    producer = facts.producer(x)
    if producer is None or producer.blocks or facts.uses.get(x.id, 0) != 1:
        return None
    prim = TABLE[producer.prim]
    if not prim.elementwise or prim.random:
        return None
    axis, parts = op.attrs["axis"], op.attrs["parts"]
    pieces = []
    for v in producer.inputs:
        at = axis - (x.type.rank - v.type.rank)  # the same axis, broadcasting aligned
        if at < 0 or v.type.shape[at] != x.type.shape[axis]:
            pieces.append([v] * parts)
        else:
            pieces.append(b.emit("split", [v], {"axis": at, "parts": parts}))
    return [b.emit(producer.prim, [p[i] for p in pieces], producer.attrs, x.hint)[0]
            for i in range(parts)]


@primitive("split", 1, grad=lambda b, op, cts: [b.concat(*cts, axis=op.attrs["axis"])],
           # one part is one output, the array itself (not a list of one)
           ref=lambda ctx, attrs, x: (lambda parts: parts if len(parts) > 1 else parts[0])(
               np.split(x, attrs["parts"], attrs["axis"])),
           simplify=_split_simplify, selects=True,
           onnx=lambda g, op, xs: g.ops("Split", xs, op.attrs["parts"], axis=op.attrs["axis"],
                                        num_outputs=op.attrs["parts"]))
def _split(types, attrs):
    x, = types
    axis, parts = attrs["axis"], attrs["parts"]
    try:
        piece = x.shape[axis].exact_div(parts)
    except Exception:
        raise ShapeError(f"`split` into {parts} parts needs axis {axis} of {x} "
                         f"to divide by {parts}") from None
    return [x.with_shape(x.shape[:axis] + (piece,) + x.shape[axis + 1:])] * parts


# ---- reshape, transpose -------------------------------------------------------------
def _reshape_ref(ctx, attrs, x):
    return np.reshape(x, tuple(ctx.dim(d, default=-1) for d in attrs["shape"]))


def _reshape_step_rows(op):
    """A reshape of a value whose leading dim is a trip count (a nested while's tape,
    [trips, B, H]) into rows, [trips * B, H]: that value (core.py, `step_rows`)."""
    x, out = op.inputs[0], op.outputs[0]
    if ragged_trips(x.type) is None or x.type.rank < 2 or out.type.shape != (
            numel(x.type.shape[:-1]), x.type.shape[-1]):
        return None
    return x


@primitive("reshape", 1, grad=lambda b, op, cts: [b.reshape(cts[0],
                                                             shape=op.inputs[0].type.shape)],
           ref=_reshape_ref, simplify=_same_shape, selects=True, step_rows=_reshape_step_rows,
           onnx=lambda g, op, xs: g.op("Reshape", xs[0], g.dims(op.attrs["shape"])))
def _reshape(types, attrs):
    x, = types
    shape = tuple(attrs["shape"])
    size_in, size_out = numel(x.shape), numel(shape)
    need(size_in == size_out, f"`reshape` cannot turn {x} ({size_in} elements) into shape "
         f"{shape_text(shape)} ({size_out} elements)")
    return [x.with_shape(shape)]


def _transpose_grad(b, op, cts):
    perm = op.attrs["perm"]
    return [b.transpose(cts[0], perm=tuple(perm.index(i) for i in range(len(perm))))]


def _transpose_simplify(b, op, facts):
    return [op.inputs[0]] if list(op.attrs["perm"]) == sorted(op.attrs["perm"]) else None


def _transpose_step_sum(op, value, producers, stack, facts):
    """transpose(t) summed over the steps: the transpose of t's sum (the gradient of a
    weight a step uses transposed, `h @ transpose(P)`)."""
    total = summed(op.inputs[0], producers, stack, facts)
    return None if total is None else lambda b: b.transpose(total(b), perm=op.attrs["perm"])


@primitive("transpose", 1, grad=_transpose_grad, simplify=_transpose_simplify,
           step_sum=_transpose_step_sum, selects=True,
           # a number's (perm ()) is itself: ONNX's Transpose takes no empty perm
           onnx=lambda g, op, xs: g.op("Transpose", *xs, perm=op.attrs["perm"])
           if op.attrs["perm"] else g.op("Identity", *xs),
           ref=lambda ctx, attrs, x: np.transpose(x, attrs["perm"]))
def _transpose(types, attrs):
    x, = types
    perm = attrs["perm"]
    need(sorted(perm) == list(range(x.rank)),
         f"`transpose` needs a permutation of 0..{x.rank - 1}, got {list(perm)}")
    return [x.with_shape(tuple(x.shape[p] for p in perm))]


# ---- index, slice, gather -----------------------------------------------------------
def _index_grad(b, op, cts):
    x, i = op.inputs
    return [b.unindex(cts[0], i, n=x.type.shape[0]), None]


def _indexes_rows(op, size) -> list:
    """The index input picks rows of the first input."""
    return [(op.inputs[1], 0, size(op.inputs[0].type.shape[0]))]


def _index_ref(ctx, attrs, x, i):
    """Row i of x; an i outside x's rows is an IndexError, as in a generated module
    (NumPy would read a negative i from the end)."""
    if not 0 <= int(i) < x.shape[0]:
        raise OutOfRange("subscript", 1, int(i), 0, x.shape[0])
    return x[int(i)]


@primitive("index", 2, faults=True, grad=_index_grad, selects=True, integer_bounds=_indexes_rows,
           ref=_index_ref, onnx=onnx_node("Gather", axis=0))
def _index(types, attrs):
    x, t = types
    need(x.rank >= 1, f"cannot index a scalar {x}")
    need(t.dtype == "i32" and t.rank == 0, f"an index must be an i32 scalar, got {t}")
    return [x.with_shape(x.shape[1:])]


def slices(ctx, starts, stops) -> tuple[slice, ...]:
    """The NumPy index of a slice given by dims."""
    return tuple(slice(ctx.dim(a), ctx.dim(z)) for a, z in zip(starts, stops))


def _slice_grad(b, op, cts):
    return [b.unslice(cts[0], starts=op.attrs["starts"], shape=op.inputs[0].type.shape)]


def _slice_onnx(g, op, xs):
    starts, stops = op.attrs["starts"], op.attrs["stops"]
    return g.op("Slice", xs[0], g.dims(starts), g.dims(stops), g.ints(range(len(starts))))


def inside(x, starts, stops) -> list[tuple[str, Dim]]:
    """What keeps the box `starts`:`stops` of `x`'s leading axes inside it: each start,
    and what each stop leaves of its axis (a slice's, and its gradient's `unslice`)."""
    out = []
    for axis, (start, stop) in enumerate(zip(starts, stops)):
        size = x.shape[axis]
        out.append((f"the start {start} of the slice {start}:{stop} of axis {axis} of {x}, "
                    "{}: a slice starts at 0 or after", start))
        out.append((f"{size - stop}, what the slice {start}:{stop} leaves of axis {axis} of "
                    f"{x} after its end, {{}}: a slice ends inside its axis", size - stop))
    return out


@primitive("slice", 1, grad=_slice_grad, simplify=_same_shape, selects=True,
           ref=lambda ctx, attrs, x: x[slices(ctx, attrs["starts"], attrs["stops"])],
           bounds=lambda op: inside(op.inputs[0].type, op.attrs["starts"], op.attrs["stops"]),
           onnx=_slice_onnx)
def _slice(types, attrs):
    x, = types
    shape = tuple(stop - start for start, stop in zip(attrs["starts"], attrs["stops"]))
    return [x.with_shape(shape + x.shape[len(shape):])]


def _gather_grad(b, op, cts):
    table, ids = op.inputs
    return [b.scatter_add(cts[0], ids, n=table.type.shape[0]), None]


def _gather_ref(ctx, attrs, table, ids):
    """Rows ids of table; an id outside them is an IndexError, as in a generated module
    (np.take would read a negative id from the end)."""
    bad = np.flatnonzero((ids < 0) | (ids >= table.shape[0]))
    if bad.size:
        raise OutOfRange("gather", 1, ids.flat[bad[0]], bad[0], table.shape[0])
    return np.take(table, ids, axis=0)


@primitive("gather", 2, faults=True, grad=_gather_grad, selects=True, integer_bounds=_indexes_rows,
           ref=_gather_ref,
           onnx=onnx_node("Gather", axis=0))
def _gather(types, attrs):
    table, ids = types
    need(table.rank >= 1, f"cannot gather rows of a scalar {table}")
    need(ids.dtype == "i32", f"gathering rows needs i32 indices, got {ids}")
    return [table.with_shape(ids.shape + table.shape[1:])]
