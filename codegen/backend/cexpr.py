"""Dims and names as C++ expressions. User names never reach the C++ text: values are
`v<id>`, dims `d<index>`, parameters and inputs are addressed by position."""
from __future__ import annotations

import re

from ..shapes import Dim

_CEIL = re.compile(r"^ceil\((.+)/(\d+)\)$")


class DimNames:
    """C++ names for the symbolic dims of one model: user dims (T, B) are locals `d<i>`
    bound from the call (`c.dims[i]`); sizes known only at run time (a while's trip
    count) live in the model, `m.dyn[k]`, written by the op that produces them."""

    def __init__(self, user_dims: list[str]):
        self.user = list(user_dims)
        self.dynamic: list[str] = []

    def name(self, symbol: str) -> str:
        if symbol in self.user:
            return f"d{self.user.index(symbol)}"
        if symbol not in self.dynamic:
            self.dynamic.append(symbol)
        return f"m.dyn[{self.dynamic.index(symbol)}]"

    def symbol_expr(self, symbol: str) -> str:
        """The C++ value of one symbol; `ceil(T/4)` is computed from T."""
        m = _CEIL.match(symbol)
        if m:
            inner = self.expr(Dim.of(m.group(1)) if m.group(1).isidentifier() else
                              _parse_product(m.group(1)))
            k = int(m.group(2))
            return f"(({inner} + {k - 1}) / {k})"
        return self.name(symbol)

    def expr(self, dim: Dim) -> str:
        """An int64_t C++ expression for a dim."""
        if dim.is_const:
            return f"int64_t({dim.value})"
        terms = []
        for monomial, coeff in dim.terms:
            factors = ([] if coeff == 1 and monomial else [f"int64_t({coeff})"]) + [
                self.symbol_expr(s) for s in monomial]
            terms.append("*".join(factors))
        return "(" + " + ".join(terms) + ")"


def _parse_product(text: str) -> Dim:
    out = Dim.of(1)
    for part in text.split("*"):
        out = out * (Dim.of(int(part)) if part.isdigit() else Dim.of(part))
    return out


def numel(shape) -> Dim:
    total = Dim.of(1)
    for d in shape:
        total = total * d
    return total


def contiguous_strides(shape) -> tuple[Dim, ...]:
    strides, acc = [], Dim.of(1)
    for d in reversed(shape):
        strides.append(acc)
        acc = acc * d
    return tuple(reversed(strides))
