"""What a caller asks of a .mdl file (a model, -D values, a float dtype), checked the same
way for `load`, `dsl.check_file` and mdlc: a UsageError naming the argument, not a
KeyError or TypeError deep in the checker."""
from __future__ import annotations

from typing import Any

from .diagnostics import UsageError

FLOAT_DTYPES = ("f32", "f64")


def check_request(model: Any, defines: Any, dtype: Any) -> None:
    if model is not None and not isinstance(model, str):
        raise UsageError(f"model takes a model's name (a str), got {model!r}")
    if not isinstance(dtype, str) or dtype not in FLOAT_DTYPES:
        raise UsageError(f"dtype {dtype!r}: expected one of {', '.join(FLOAT_DTYPES)}")
    if not isinstance(defines, dict) or not all(isinstance(k, str) for k in defines):
        raise UsageError(f"defines takes a {{name: value}} dict, e.g. {{'H': 128}}, got "
                         f"{defines!r}")
