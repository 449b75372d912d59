"""Hyper-parameter values given from outside a model: mdlc's `-D NAME=VALUE` and Python's
`defines={...}` (load, check_file, ...), and how an error names one: as the user wrote
it, `-D H=1e3` on the command line, `defines['H'] = 1000.0` from Python."""
from __future__ import annotations

import numbers
from contextvars import ContextVar
from typing import Any

from codegen.ir.diagnostics import UsageError
from codegen.ir.dtypes import literal

# mdlc's -D texts (name -> what follows `=`), while mdlc runs a command; None for Python's
# defines=, whose values are Python objects
CLI_TEXTS: ContextVar[dict[str, str] | None] = ContextVar("mdl_define_texts", default=None)


def define_value(name: str, value: Any) -> bool | int | float:
    """A hyper-parameter's value as Python gives it (`-D`, `load(defines=...)`): a bool,
    an integer or a real number, NumPy's scalars too; anything else is a usage error."""
    if isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b":
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    # only Python gives another kind of value (mdlc's -D reads a number, true or false)
    raise UsageError(f"defines[{name!r}] = {value!r}: a hyper-parameter takes a number, "
                     "True or False")


def given(name: str, value: Any) -> str:
    """A define as the user gave it: `-D H=1e3`, or `defines['H'] = 1000.0`."""
    texts = CLI_TEXTS.get()
    if texts is None:
        return f"defines[{name!r}] = {value!r}"
    return f"-D {name}={texts.get(name, literal(value))}"


def named(name: str) -> str:
    """A define by its name alone: `-D H`, or `defines['H']`."""
    return f"defines[{name!r}]" if CLI_TEXTS.get() is None else f"-D {name}"


def defines_word() -> str:
    """What the user gave the defines as: "-D values" or "defines"."""
    return "defines" if CLI_TEXTS.get() is None else "-D values"
