"""`assert`: a check of the call's data. Its operand is a bool tensor of any shape; a call
in which an element of it is false raises a ValueError saying `attrs["what"]` (worded by
the front end: the message, the condition, where it stands, the inputs it is computed
from; `said`, the message, condition and place alone, is what a model's docstring lists)
and, when the condition has more than one element, the flat position of the first false
one. In a loop's body a second operand, i32, is the step or trip the body runs (a scalar,
or one a row of the condition's leading dim: a `for` with lengths), written between
`what` and `attrs["after"]`. Its result, a bool scalar that is always true, is never read:
the passes keep the op for `checks`."""
from __future__ import annotations

import numpy as np

from ...ir.shapes import TensorType
from .core import need, primitive
from .elementwise import _no_grad


def failed(attrs: dict, cond: np.ndarray, counter: np.ndarray | None = None) -> str | None:
    """The message of a failed check, as a generated module words it; None if it holds."""
    false = np.flatnonzero(~np.asarray(cond, bool).reshape(-1))
    if not false.size:
        return None
    first = int(false[0])
    what = attrs["what"]
    if counter is not None:  # the first false element's row's step
        steps = np.asarray(counter).reshape(-1)
        what += f"{int(steps[first // (np.size(cond) // steps.size)])}{attrs['after']}"
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
        step = types[1]
        need(step.dtype == "i32" and (step.rank == 0 or (
            step.rank == 1 and cond.rank >= 1 and step.shape[0] == cond.shape[0])),
             f"an assert's step is an i32 scalar or one a row of its condition {cond}, "
             f"got {step}")
        need(isinstance(attrs.get("after"), str), "an assert with a step says what follows "
             "it (attrs['after'])")
    return [TensorType("bool", ())]
