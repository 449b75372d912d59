"""The one table of dtypes: every fact about a dtype that any stage needs (its NumPy
dtype, its size, its C type, whether it is a float). The native runtime numbers no
dtype: generated code hands it these facts (codegen/backend/module.py)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str       # mdl's: f32, f64, i32, bool
    numpy: str      # NumPy's name
    itemsize: int   # bytes
    ctype: str      # the C/C++ type of an element
    is_float: bool


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("f32", "float32", 4, "float", True),
    DType("f64", "float64", 8, "double", True),
    DType("i32", "int32", 4, "int32_t", False),
    DType("bool", "bool", 1, "uint8_t", False),
)}
FLOATS = tuple(n for n, d in DTYPES.items() if d.is_float)
NUMERIC = tuple(n for n in DTYPES if n != "bool")

# i32's range: what an integer literal, an integer hyper-parameter and an integer constant
# meeting an i32 tensor must fit in, and where a float cast to i32 is clamped (mdl::to_i32)
I32_MIN, I32_MAX = -2**31, 2**31 - 1


def literal(value: int | float | bool) -> str:
    """A compile-time number as mdl writes it: `true` and `false` for bools (messages,
    summaries and the IR's header showed Python's `True`)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def fits_i32(value: int) -> bool:
    return I32_MIN <= value <= I32_MAX


def finite_in(value: float, dtype: str) -> bool:
    """Whether a finite number stays finite rounded to the float dtype `dtype` (1e39 is
    inf in f32)."""
    import numpy as np
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.dtype(DTYPES[dtype].numpy).type(value)))


# No dtype holds an integer of more significant digits (i64's most is 19): one is refused
# before Python converts it, which it does for at most 4300 digits
MAX_INT_DIGITS = 19


def checked_seed(value: int) -> int:
    """`value` as a seed, as a model takes it (`Model(seed=...)`, an unsigned 64-bit
    integer, which the command line's and the export's seeds are too), or a ValueError."""
    if not 0 <= value < 2**64:
        raise ValueError(f"{value} is not a seed (0 to 2**64 - 1)")
    return value


def decimal_int(text: str) -> int:
    """The integer that `text` writes in decimal: an optional sign, then digits, leading
    zeros allowed (any number of them). ValueError where it is not such a text,
    OverflowError where it has more significant digits than any dtype holds."""
    digits = text[1:] if text[:1] in "+-" else text
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"{text!r} is not a decimal integer")
    significant = digits.lstrip("0") or "0"
    if len(significant) > MAX_INT_DIGITS:
        raise OverflowError(f"an integer of {len(significant)} digits")
    return -int(significant) if text[:1] == "-" else int(significant)
