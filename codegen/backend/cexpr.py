"""Dims and names as C++ expressions. User names never reach the C++ text as code: values
are `v<id>`, dims `d<index>`, parameters and inputs are addressed by position; the words
of an error message (an input's name, an assert's) are string literals made by
`c_string`, and numbers are written by `c_float`."""
from __future__ import annotations

from ..ir.shapes import CeilDiv, Dim, Symbol, TripCount


_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", ord("?"): "\\?", ord("\n"): "\\n",
            ord("\t"): "\\t"}  # `?`: no trigraph


def c_string(text: str) -> str:
    """`text` as a C++ string literal that means exactly it, whatever the user wrote (an
    assert's message, a name): printable ASCII as it is, `"`, `\\`, `?`, a newline and a
    tab escaped by name, every other byte of its UTF-8 as a three-digit octal escape."""
    out = []
    for byte in text.encode("utf-8", "surrogatepass"):
        named = _ESCAPES.get(byte)
        out.append(named or (chr(byte) if 32 <= byte < 127 else f"\\{byte:03o}"))
    return '"' + "".join(out) + '"'


def c_float(value: float, ctype: str = "double") -> str:
    """`value` as a C++ expression of type `ctype` that means exactly it: a hex float
    (which round-trips), or NAN or INFINITY, which have no literal. Every number the
    generated code holds goes through here: an expression's constant, a table's."""
    value = float(value)
    if value != value:
        return f"{ctype}(NAN)"
    if value in (float("inf"), float("-inf")):
        return f"{'-' if value < 0 else ''}{ctype}(INFINITY)"
    return f"{ctype}({value.hex()})"


class DimNames:
    """C++ names for the symbolic dims of one model: user dims (T, B) are locals `d<i>`
    bound from the call (`c.dims[i]`); sizes known only at run time (a while's trip
    count) live in the model, `m.dyn[k]`, written by the op that produces them."""

    def __init__(self, user_dims: list[str]):
        self.user = list(user_dims)
        self.dynamic: list[TripCount] = []

    def name(self, symbol: Symbol) -> str:
        if symbol in self.user:
            return f"d{self.user.index(symbol)}"
        if symbol not in self.dynamic:
            self.dynamic.append(symbol)
        return f"m.dyn[{self.dynamic.index(symbol)}]"

    def symbol_expr(self, symbol: Symbol) -> str:
        """The C++ value of one symbol; a ceil-division is computed from its operand."""
        if isinstance(symbol, CeilDiv):
            return f"(({self.expr(symbol.dim)} + {symbol.k - 1}) / {symbol.k})"
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
