"""Dropout masks drawn again: the primitives that let a backward pass run a loop again
that draws random numbers and get the forward's masks (ops/structured/replay.py puts
them in).

A dropout draws from its own stream (its salt), each draw where the last one ended, so a
loop run again in the backward would draw other numbers. Before such a loop the forward
asks where its streams stand, `rng_position` (a *position*: i32[4], the stream's counter
and key, each as two 32-bit halves; the key too, since a backward may run in a later
call than its forward, `vjp` builds); the backward's copy of the loop carries that
position as a state, and each of its dropouts draws at it, `dropout_replay`, and moves
it past what it drew, `rng_skip`. Both are pure functions of their operands: passes may
move, merge or recompute them like any other op.
"""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import FLOATS
from ...ir.graph import Op, Value
from ...ir.shapes import Dim, TensorType
from ..rng import MASK, uniform01
from .core import need, primitive, same_dtype
from .elementwise import _no_grad

POSITION = TensorType("i32", (Dim.of(4),))  # counter low, high; key low, high (bit patterns)


def pack(counter: int, key: int) -> np.ndarray:
    """A position's four i32s."""
    words = [counter & 0xFFFFFFFF, counter >> 32 & 0xFFFFFFFF, key & 0xFFFFFFFF,
             key >> 32 & 0xFFFFFFFF]
    return np.array(words, np.uint32).view(np.int32)


def unpack(position) -> tuple[int, int]:
    """(counter, key) of a position."""
    lo, hi, klo, khi = (int(w) for w in np.asarray(position, np.int32).view(np.uint32))
    return lo | hi << 32, klo | khi << 32


def _position_rule(types, attrs):
    need(not types and isinstance(attrs.get("salt"), int),
         "rng_position takes no operands and a salt")
    return [POSITION]


def _position_ref(ctx, attrs):
    stream = ctx.rng(attrs["salt"])
    return pack(stream.counter, stream.key)


def _replay_rule(types, attrs):
    x, position = types
    same_dtype([x], "`dropout_replay`", FLOATS)
    need(position == POSITION, f"dropout_replay's position is {POSITION}, got {position}")
    return [x]


def _replay_ref(ctx, attrs, x, position):
    """The mask dropout_mask drew at `position`: the same numbers, bit for bit."""
    p = attrs["p"]
    if not ctx.training or p == 0:
        return np.ones(np.shape(x), x.dtype)
    counter, key = unpack(position)
    n = int(np.size(x))
    counters = (np.arange(n, dtype=np.uint64) + np.uint64(counter)) & np.uint64(MASK)
    keep = uniform01(key, counters).reshape(np.shape(x)) >= p
    return (keep / (1 - p)).astype(x.dtype)


def _skip_rule(types, attrs):
    position, x = types
    need(position == POSITION, f"rng_skip's position is {POSITION}, got {position}")
    return [POSITION]


def _skip_ref(ctx, attrs, position, x):
    """The position past x's numbers. (The op's `salt` names the stream it moves, so that
    a padding step, whose draws do not count, does not move it: control_flow.streams.)"""
    counter, key = unpack(position)
    return pack((counter + int(np.size(x))) & MASK, key)


def redraw_mask(op: Op, positions: dict, same: dict) -> list[Op]:
    """dropout_mask's redraw (ops/structured/replay.py): the mask at its stream's
    position, then the position past it."""
    salt, (x,), position = op.attrs["salt"], op.inputs, positions[op.attrs["salt"]]
    positions[salt] = Value(POSITION, f"rng{salt}")
    return [Op("dropout_replay", [x, position], list(op.outputs), {"p": op.attrs["p"]}, [],
               op.loc),
            Op("rng_skip", [position, x], [positions[salt]], {"salt": salt}, [], op.loc)]


def _redraw_position(op: Op, positions: dict, same: dict) -> list[Op]:
    """In a copy that draws again, a position asked for is the one carried there."""
    same[op.outputs[0].id] = positions[op.attrs["salt"]]
    return []


def _onnx(g, op: Op, xs: list[str]):
    """None: autodiff alone makes these, and an ONNX graph is an inference program."""
    g.fail(f"`{op.prim}` is part of a gradient program")


# `random`: it reads the host's count of a stream, so it is never moved, merged or
# recomputed; it keeps its place before the loop it is asked for.
primitive("rng_position", 0, random=True, grad=_no_grad, ref=_position_ref, onnx=_onnx,
          redraw=_redraw_position)(_position_rule)
primitive("dropout_replay", 2, grad=_no_grad, ref=_replay_ref, onnx=_onnx)(_replay_rule)
primitive("rng_skip", 2, grad=_no_grad, ref=_skip_ref, onnx=_onnx)(_skip_rule)
