"""Symbolic dims and tensor types.

A `Dim` is a polynomial with integer coefficients over symbols: enough for `T*B` from a
reshape, `2*T` from a concat, and exact division by constants. A symbol is a dim name
from the source (a `str`: T, B, ...), bound by the inputs of a call, or a size the
compiler makes that is known only at run time: a ceil-division `CeilDiv` (checkpoint
segments; computed from its operand), a while loop's `TripCount` (known once the loop
has run) or the `Rows` of a for's ragged yield (its steps' values, each of a trip count
of its own, end to end). All are typed values, never names parsed back.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Mapping, Union

from .dtypes import DTYPES, FLOATS

_trip_ids = itertools.count()


@dataclass(frozen=True)
class CeilDiv:
    """ceil(dim / k): not a polynomial, so it stands in a Dim as a symbol of its own."""
    dim: Dim
    k: int

    def __str__(self) -> str:
        return f"ceil({self.dim}/{self.k})"

    def substitute(self, env: Mapping) -> Dim:
        return ceil_div(self.dim.substitute(env), self.k)


@dataclass(frozen=True)
class TripCount:
    """How many times one while loop ran. A fresh one per loop differentiated, from a
    counter: distinct loops must not share a size, and nothing structural names a loop
    (two inlined copies of one function share their source location and their position
    moves with every pass; a value's identity, ir.Value.id, is a counter too). The
    copies of a loop that a backward re-runs (regions.py) keep it, rightly: they run
    the same trips."""
    id: int

    @staticmethod
    def fresh() -> TripCount:
        return TripCount(next(_trip_ids))

    def __str__(self) -> str:
        return f"trips#{self.id}"

    def substitute(self, env: Mapping) -> Dim:
        return Dim.of(env.get(self, self))


@dataclass(frozen=True)
class Rows:
    """The rows of a `for`'s ragged yield: a step yields a value [trips, ...] whose
    leading dim is the trip count of a while it ran, which differs from step to step, so
    the loop lays its steps' values end to end (`stack_type`): this many rows in all,
    known once the loop has run."""
    trips: TripCount

    def __str__(self) -> str:
        return f"rows({self.trips})"

    def substitute(self, env: Mapping) -> Dim:
        return Dim.of(env.get(self, self))


Symbol = Union[str, CeilDiv, TripCount, Rows]
Monomial = tuple[Symbol, ...]  # sorted by _order; () is the constant term


def _order(symbol: Symbol) -> tuple:
    """A total order on symbols of every kind (source names first)."""
    return (0, symbol) if isinstance(symbol, str) else (1, type(symbol).__name__, str(symbol))


def _monomial_order(term: tuple[Monomial, int]) -> tuple:
    return tuple(_order(s) for s in term[0]), term[1]


def is_runtime(symbol: Symbol) -> bool:
    """Whether a symbol is a size known only at run time (not a dim of the source)."""
    return not isinstance(symbol, str)


def known_at_call(t: TensorType) -> bool:
    """Whether every dim of t is known once a call's inputs are: of the source's dims and
    ceil-divisions of them (checkpoint segments), no loop's trip count or rows."""
    def known(d: Dim) -> bool:
        return all(isinstance(s, str) or (isinstance(s, CeilDiv) and known(s.dim))
                   for s in d.symbols)
    return all(known(d) for d in t.shape)


def signed(d: Dim) -> bool:
    """Whether some sizes of the source's dims make d negative: made of those dims alone,
    with a term subtracted (`T - 1`, `B*T - B`)."""
    return any(c < 0 for _, c in d.terms) and all(isinstance(s, str) for s in d.symbols)


class DimError(Exception):
    """An arithmetic on dims that has no integer answer (inexact division, ...)."""


@dataclass(frozen=True)
class Dim:
    terms: tuple[tuple[Monomial, int], ...]  # sorted, no zero coefficients

    @staticmethod
    def of(value: int | Symbol | Dim) -> Dim:
        if isinstance(value, Dim):
            return value
        if isinstance(value, Symbol):
            return Dim((((value,), 1),))
        return Dim((((), int(value)),) if value else ())

    @staticmethod
    def _make(coeffs: Mapping[Monomial, int]) -> Dim:
        return Dim(tuple(sorted(((m, c) for m, c in coeffs.items() if c), key=_monomial_order)))

    @property
    def is_const(self) -> bool:
        return all(m == () for m, _ in self.terms)

    @property
    def value(self) -> int:
        if not self.is_const:
            raise DimError(f"{self} is not a constant")
        return self.terms[0][1] if self.terms else 0

    @property
    def symbols(self) -> set[Symbol]:
        return {s for m, _ in self.terms for s in m}

    def __add__(self, other) -> Dim:
        coeffs = dict(self.terms)
        for m, c in Dim.of(other).terms:
            coeffs[m] = coeffs.get(m, 0) + c
        return Dim._make(coeffs)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return Dim(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other) -> Dim:
        return self + (-Dim.of(other))

    def __rsub__(self, other) -> Dim:
        return Dim.of(other) - self

    def __mul__(self, other) -> Dim:
        coeffs: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in Dim.of(other).terms:
                m = tuple(sorted(m1 + m2, key=_order))
                coeffs[m] = coeffs.get(m, 0) + c1 * c2
        return Dim._make(coeffs)

    __rmul__ = __mul__

    def exact_div(self, other) -> Dim:
        """self / other when every term divides exactly, else DimError."""
        other = Dim.of(other)
        if len(other.terms) != 1:
            raise DimError(f"cannot divide {self} by {other}")
        (dm, dc), = other.terms
        out: dict[Monomial, int] = {}
        for m, c in self.terms:
            rest = list(m)
            for s in dm:
                if s not in rest:
                    raise DimError(f"{self} is not divisible by {other}")
                rest.remove(s)
            if c % dc:
                raise DimError(f"{self} is not divisible by {other}")
            out[tuple(rest)] = c // dc
        return Dim._make(out)

    def substitute(self, env: Mapping[Symbol, int | Dim]) -> Dim:
        """The dim with symbols replaced from `env` (a ceil-division of a replaced dim is
        computed)."""
        total = Dim.of(0)
        for m, c in self.terms:
            term = Dim.of(c)
            for s in m:
                term = term * (Dim.of(env.get(s, s)) if isinstance(s, str)
                               else s.substitute(env))
            total = total + term
        return total

    def evaluate(self, env: Mapping[Symbol, int]) -> int:
        return self.substitute(env).value

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        out = ""
        for m, c in reversed(self.terms):  # highest-degree terms first
            term = "*".join(([str(abs(c))] if abs(c) != 1 or not m else []) + [str(s) for s in m])
            sign = ("-" if c < 0 else "") if not out else (" - " if c < 0 else " + ")
            out += sign + term
        return out

    def __repr__(self) -> str:
        return f"Dim({self})"

    def json(self) -> int | str:
        return self.value if self.is_const else str(self)


def ceil_div(d: Dim, k: int) -> Dim:
    """ceil(d / k) as a dim: a constant, the quotient when every term divides (`8*B / 4`
    is `2*B`), else a CeilDiv symbol."""
    if d.is_const:
        return Dim.of(-(-d.value // k))
    try:
        return d.exact_div(k)
    except DimError:
        return Dim.of(CeilDiv(d, k))


def ragged_trips(t: TensorType) -> TripCount | None:
    """The trip count a `for`'s yield of type t varies by from step to step, its leading
    dim (the tape of a while in the loop's body), where its other dims are fixed; else
    None."""
    if not t.rank or any(is_runtime(s) for d in t.shape[1:] for s in d.symbols):
        return None
    return _lone(t.shape[0], TripCount)


def stack_type(steps: Dim, t: TensorType) -> TensorType:
    """The type of a `for`'s yield of type t over `steps` steps: [steps, ...], or, where
    its leading dim is a trip count (ragged_trips), its steps' values end to end,
    [rows(trips), ...]: the loop's ragged yield."""
    trips = ragged_trips(t)
    if trips is not None:
        return t.with_shape((Dim.of(Rows(trips)),) + t.shape[1:])
    return t.with_shape((steps,) + t.shape)


def step_type(t: TensorType) -> TensorType:
    """The type of one step of a `for`'s sequence of type t: t without its leading dim,
    or, for a ragged yield's [rows(trips), ...], [trips, ...]."""
    rows = ragged_rows(t)
    if rows is not None:
        return t.with_shape((Dim.of(rows.trips),) + t.shape[1:])
    return t.with_shape(t.shape[1:])


def ragged_rows(t: TensorType) -> Rows | None:
    """The Rows a ragged yield's type [rows(trips), ...] leads with; else None."""
    return _lone(t.shape[0], Rows) if t.rank else None


def _lone(d: Dim, kind: type):
    """The symbol of the kind `kind` that the dim d is, alone; else None."""
    if len(d.terms) != 1:
        return None
    (monomial, coeff), = d.terms
    return monomial[0] if coeff == 1 and len(monomial) == 1 and isinstance(
        monomial[0], kind) else None


def numel(shape: Iterable[Dim]) -> Dim:
    """The product of a shape's dims (1 for a scalar)."""
    total = Dim.of(1)
    for d in shape:
        total = total * d
    return total


def contiguous_strides(shape: Iterable[Dim]) -> tuple[Dim, ...]:
    """Row-major element strides of a shape."""
    strides, acc = [], Dim.of(1)
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc = acc * d
    return tuple(reversed(strides))


# The most bytes one value may take (an exbibyte): a type whose size is larger is an error
# at check time (TensorType.too_large); calls whose dims make one larger raise (the
# generated code's memory check, mdl/arena.h).
MAX_BYTES = 1 << 60

# The most dims a value of the program may have: the kernels' index arrays hold that many
# (kMaxRank, mdl/kernels.h), and a reduction or a broadcast's gradient of rank 9 wrote past
# them (a segfault, or wrong sums). Inputs, parameters and every value the source makes,
# a `for`'s stacked yields too, are refused above it (TensorType.too_many_dims).
MAX_RANK = 8

# A message writes a shape of more than twice this many dims as its first ones and their
# count: a `reshape` to a list of 100000 dims (refused) wrote every one, 300 kB of text.
SHOWN_DIMS = 8


def shape_text(shape: tuple) -> str:
    """`[T, B, 4]`, as a message writes a shape; past 16 dims, the first 8 and how many:
    `[2, 1, 1, 1, 1, 1, 1, 1, ... (100000 dims)]`."""
    if len(shape) <= 2 * SHOWN_DIMS:
        return f"[{', '.join(map(str, shape))}]"
    return f"[{', '.join(map(str, shape[:SHOWN_DIMS]))}, ... ({len(shape)} dims)]"


@dataclass(frozen=True)
class TensorType:
    dtype: str
    shape: tuple[Dim, ...]

    @staticmethod
    def of(dtype: str, shape: Iterable[int | Symbol | Dim] = ()) -> TensorType:
        return TensorType(dtype, tuple(Dim.of(d) for d in shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOATS

    def with_shape(self, shape: Iterable[Dim]) -> TensorType:
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: str) -> TensorType:
        return TensorType(dtype, self.shape)

    def too_large(self) -> str | None:
        """Why no value of this type can exist, or None: one that takes more than MAX_BYTES
        (for sizes of its symbolic dims that are not 0: each term of its size's polynomial
        is counted), which no machine has, and which the generated code's int64_t byte
        counts and constants could not hold."""
        size, itemsize = numel(self.shape), DTYPES[self.dtype].itemsize
        worst = max((abs(c) for _, c in size.terms), default=0) * itemsize
        if worst <= MAX_BYTES:
            return None
        if size.is_const:
            return (f"{self} would take {worst:.3g} bytes, more than 2**60: no machine has "
                    "that memory")
        ones = sum(c for _, c in size.terms) * itemsize
        names = " = ".join(sorted(str(x) for x in size.symbols))
        at_one = f" ({ones:.3g} with {names} = 1)" if ones > MAX_BYTES else ""
        return f"{self} would take more than 2**60 bytes{at_one}: no machine has that memory"

    def too_many_dims(self) -> str | None:
        """Why a program may not make a value of this type (more dims than MAX_RANK), or
        None."""
        if self.rank <= MAX_RANK:
            return None
        return f"{self} has {self.rank} dims; a value has at most {MAX_RANK}"

    def __str__(self) -> str:
        if not self.shape:
            return self.dtype
        return f"{self.dtype}{shape_text(self.shape)}"

    def json(self) -> dict:
        return {"dtype": self.dtype, "shape": [d.json() for d in self.shape]}


def broadcast_shapes(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """NumPy broadcasting of two shapes; None when they do not broadcast."""
    one = Dim.of(1)
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else one
        db = b[-i] if i <= len(b) else one
        if da == db or db == one:
            out.append(da)
        elif da == one:
            out.append(db)
        else:
            return None
    return tuple(reversed(out))
