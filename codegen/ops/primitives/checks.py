"""`assert`: a check of the call's data. Its operand is a bool tensor of any shape; a call
in which an element of it is false raises a ValueError saying `attrs["what"]` (worded by
the front end: the message, the condition, where it stands, the inputs it is computed
from; `said`, the message, condition and place alone, is what a model's docstring lists)
and, when the condition has more than one element, the flat position of the first false
one. In a loop's body a second operand, i32, holds the steps or trips of the loops around
it that the error numbers, innermost first: the one, a scalar; or k of them (up to
MAX_STEPS), on a last axis of k. Its leading dims are a prefix of the condition's (one a
row of its leading dim: a `for` with lengths; more where a pass stacked the assert over a
loop's steps). The error is `what`, then each number followed by its part of
`attrs["after"]` (k parts, NUL between them). Its result, a bool scalar that is always
true, is never read: the passes keep the op for `checks`."""
from __future__ import annotations

import numpy as np

from ...ir.shapes import Dim, TensorType
from .core import need, primitive
from .elementwise import _no_grad


MAX_STEPS = 4  # the loops an error numbers at most: mdl/faults.h's kAssertSteps


def failed(attrs: dict, cond: np.ndarray, counter: np.ndarray | None = None) -> str | None:
    """The message of a failed check, as a generated module words it; None if it holds."""
    false = np.flatnonzero(~np.asarray(cond, bool).reshape(-1))
    if not false.size:
        return None
    first = int(false[0])
    what = attrs["what"]
    if counter is not None:  # the first false element's row's steps
        parts = attrs["after"].split("\0")
        steps = np.asarray(counter).reshape(-1, len(parts))
        row = steps[first // (np.size(cond) // len(steps))]
        what += "".join(f"{int(step)}{part}" for step, part in zip(row, parts))
    return what + (f" at flat position {first}" if np.size(cond) > 1 else "")


def _assert_ref(ctx, attrs, cond, counter=None):
    message = failed(attrs, cond, counter)
    if message is not None:
        raise ValueError(message)
    return np.array(True)


def _assert_onnx(g, op, xs):
    """ONNX has no check that raises: an exported model does not check (docs/onnx.md)."""
    return g.const(True, "bool")


@primitive("assert", None, checks=True, faults=True, grad=_no_grad, ref=_assert_ref, onnx=_assert_onnx)
def _assert(types, attrs):
    need(len(types) in (1, 2), f"an assert takes a condition and a step, got {len(types)} "
         "operands")
    cond = types[0]
    need(cond.dtype == "bool", f"an assert's condition must be bool, got {cond}")
    need(isinstance(attrs.get("what"), str) and isinstance(attrs.get("said"), str),
         "an assert says what it checks: its error (attrs['what']) and, for the model's "
         "docstring, its message and condition (attrs['said'])")
    if len(types) == 2:
        need(isinstance(attrs.get("after"), str), "an assert with steps says what follows "
             "each (attrs['after'])")
        step, k = types[1], attrs["after"].count("\0") + 1
        rows = step.shape if k == 1 else step.shape[:-1]
        need(step.dtype == "i32" and k <= MAX_STEPS and (k == 1 or (
            step.rank and step.shape[-1] == Dim.of(k))) and cond.shape[:len(rows)] == rows,
             f"an assert's steps are i32, {k} of them (at most {MAX_STEPS}) for each of "
             f"leading dims of its condition {cond}, got {step}")
    return [TensorType("bool", ())]
