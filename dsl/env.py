"""What names stand for while a model is elaborated.

A name is bound to a runtime tensor (an IR `Value`), a compile-time scalar (`Const`:
literals, hyper-parameters, `int` arguments), or a marker explaining why it cannot be
used here (`Unavailable`), or `Poisoned` after an error was already reported for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from codegen.ir.diagnostics import Loc
from codegen.ir.dtypes import literal
from codegen.ir.graph import Value
from codegen.ir.shapes import Dim, TensorType


@dataclass(frozen=True)
class Const:
    """A compile-time scalar; `kind` is int, float or bool. Weakly typed: it takes the
    dtype of the tensor it meets."""
    value: int | float | bool
    kind: str

    @staticmethod
    def of(value) -> Const:
        if isinstance(value, bool):
            return Const(value, "bool")
        if isinstance(value, int):
            return Const(value, "int")
        return Const(float(value), "float")

    def __str__(self) -> str:
        return literal(bool(self.value) if self.kind == "bool" else self.value)


@dataclass(frozen=True)
class Unavailable:
    """A name that exists but cannot be read here; `why` is the error to give."""
    why: str
    loc: Loc | None = None


class Poisoned:
    """A name whose definition failed; reading it stops the statement silently."""


POISONED = Poisoned()

Binding = Union[Value, Const, Unavailable, Poisoned, list]


class Cascade(Exception):
    """A statement read a poisoned name: its error was reported already."""


@dataclass
class Ctx:
    """One elaboration context: a model body or one inlined function call."""
    kind: str                                   # "model" or "function"
    env: dict[str, Binding]
    dims: dict[str, Dim] = field(default_factory=dict)
    name: str = ""                              # the model's or function's name
    body: list = field(default_factory=list)    # its statements (nodes.Stmt)
    # a function's `...` (`x : f32[..., I]`): the leading dims its first such argument
    # bound, and that argument (`argument `x` of `f``)
    leading: tuple[Dim, ...] | None = None
    leading_from: str = ""
    # the argument that bound each of a function's dims, and its type (`H`: ("argument `h`
    # of `lstm`", f32[B, 4])), which a later argument's mismatch names
    dims_from: dict[str, tuple[str, TensorType]] = field(default_factory=dict)
