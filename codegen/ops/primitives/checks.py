"""`assert`: a check of the call's data. Its operand is a bool tensor of any shape; a call
in which an element of it is false raises a ValueError saying `attrs["what"]` (worded by
the front end: the message, the condition, the inputs it is computed from; `said`, the
message and condition alone, is what a model's docstring lists) and, when the
condition has more than one element, the flat position of the first false one. Its result,
a bool scalar that is always true, is never read: the passes keep the op for `checks`."""
from __future__ import annotations

import numpy as np

from ...ir.shapes import TensorType
from .core import need, primitive
from .elementwise import _no_grad


def failed(what: str, cond: np.ndarray) -> str | None:
    """The message of a failed check, as a generated module words it; None if it holds."""
    false = np.flatnonzero(~np.asarray(cond, bool).reshape(-1))
    if not false.size:
        return None
    return what + (f" at flat position {int(false[0])}" if np.size(cond) > 1 else "")


def _assert_ref(ctx, attrs, cond):
    message = failed(attrs["what"], cond)
    if message is not None:
        raise ValueError(message)
    return np.array(True)


def _assert_onnx(g, op, xs):
    """ONNX has no check that raises: an exported model does not check (docs/onnx.md)."""
    return g.const(True, "bool")


@primitive("assert", 1, checks=True, grad=_no_grad, ref=_assert_ref, onnx=_assert_onnx)
def _assert(types, attrs):
    cond, = types
    need(cond.dtype == "bool", f"an assert's condition must be bool, got {cond}")
    need(isinstance(attrs.get("what"), str) and isinstance(attrs.get("said"), str),
         "an assert says what it checks: its error (attrs['what']) and, for the model's "
         "docstring, its message and condition (attrs['said'])")
    return [TensorType("bool", ())]
