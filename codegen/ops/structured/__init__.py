"""The table of structured ops, `for`, `if` and `while`: each declared once, with its
typed attributes, verification, reference semantics, gradient rule, trimming, rewrites
before autodiff and printing (codegen/ops/structured/table.py says what an entry holds).
No other module branches on a structured op's name."""
from ..entry import Broken
from . import for_op, if_op, while_op  # noqa: F401  (they fill STRUCTURED)
from .table import REQUIRED, STRUCTURED, StructuredOp

__all__ = ["REQUIRED", "STRUCTURED", "Broken", "StructuredOp"]
