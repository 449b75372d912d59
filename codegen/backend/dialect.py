"""What differs between native targets: type names, qualifiers, math functions. The
emitter asks the dialect; it never spells a target's syntax itself."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.dtypes import DTYPES


@dataclass(frozen=True)
class Dialect:
    name: str
    vectorize_hint: str = "#pragma GCC ivdep"
    math_prefix: str = "std::"

    def ctype(self, dtype: str) -> str:
        return DTYPES[dtype].ctype

    def math(self, fn: str) -> str:
        return self.math_prefix + fn

    def literal(self, value, dtype: str) -> str:
        """A C++ literal of `value` in `dtype`, exact for floats (hex floats round-trip)."""
        if dtype == "bool":
            return "1" if value else "0"
        if dtype == "i32":
            return f"int32_t({int(value)})"
        value = float(value)
        if value != value:
            return f"{self.ctype(dtype)}(NAN)"
        if value in (float("inf"), float("-inf")):
            return f"{'-' if value < 0 else ''}{self.ctype(dtype)}(INFINITY)"
        return f"{self.ctype(dtype)}({value.hex()})"


CPP = Dialect("cpp")
# CUDA C++: nvcc compiles the same scalar code for the device (std:: math included).
CUDA = Dialect("cuda", vectorize_hint="")
