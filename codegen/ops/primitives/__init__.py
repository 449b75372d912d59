"""The one table of primitives. Each entry declares a primitive once: its shape/dtype
rule, its gradient rule (as IR), its NumPy reference, optional algebraic identities and
decomposition, and (for later stages) emission hooks. No other module knows about
specific ops; the entries live, grouped by kind, in this package's modules."""
from ...ir.dtypes import FLOATS, NUMERIC
from . import checks, elementwise, gradient_ops, nn, replay, special  # noqa: F401 (fill TABLE)
from . import structure, tensor  # noqa: F401
from .core import TABLE, Primitive, ShapeError, primitive
from .elementwise import BINARY_SYMBOLS

__all__ = ["BINARY_SYMBOLS", "FLOATS", "NUMERIC", "TABLE", "Primitive", "ShapeError",
           "primitive"]
