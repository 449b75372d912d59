"""Binding call arguments to a signature, for built-ins and user functions alike."""
from __future__ import annotations

from dataclasses import dataclass, field

from codegen.ir.diagnostics import Loc, MdlTypeError, count

from . import nodes as n

REQUIRED = object()


@dataclass
class Signature:
    """Parameter names in order; `defaults` maps optional ones to their default."""
    names: list[str]
    defaults: dict[str, object] = field(default_factory=dict)
    raw: frozenset[str] = frozenset()  # parameters that receive the unevaluated AST node

    def bind(self, what: str, call: n.Call, evaluate) -> dict[str, tuple[object, Loc]]:
        """{name: (value, loc)} for every parameter; `evaluate` turns an arg into a value.
        Missing arguments take their default (with the call's loc)."""
        if len(call.args) > len(self.names):
            raise MdlTypeError(f"{what} takes at most {count(len(self.names), 'argument')} "
                               f"({', '.join(self.names)}), got {len(call.args)}",
                               call.args[len(self.names)].loc)
        bound: dict[str, tuple[object, Loc]] = {}
        for name, arg in zip(self.names, call.args):
            bound[name] = (arg if name in self.raw else evaluate(arg), arg.loc)
        for kw in call.kwargs:
            if kw.name not in self.names:
                raise MdlTypeError(f"{what} has no argument `{kw.name}` "
                                   f"(it takes {', '.join(self.names) or 'none'})", kw.loc)
            if kw.name in bound:
                raise MdlTypeError(f"argument `{kw.name}` of {what} is given twice", kw.loc)
            value = kw.value if kw.name in self.raw else evaluate(kw.value)
            bound[kw.name] = (value, kw.value.loc)
        for name in self.names:
            if name not in bound:
                if name not in self.defaults:
                    raise MdlTypeError(f"{what} is missing its argument `{name}`", call.loc)
                bound[name] = (self.defaults[name], call.loc)
        return bound
