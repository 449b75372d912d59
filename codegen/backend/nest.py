"""How an elementwise computation over a shape is indexed, the same on every target: the
shape's neighbouring dims merged wherever every operand's strides allow (fewer, longer
loops on a CPU; cheaper index arithmetic in a GPU kernel), and each operand's element
index at the merged loop variables."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.shapes import Dim, contiguous_strides


@dataclass
class Nest:
    dims: list[Dim]                    # the merged dims, outermost first
    strides: dict[int, list[Dim]]      # value id -> its stride along each merged dim
    values: dict                       # value id -> the value


def merge(r, shape: tuple[Dim, ...], operands: list, sums: dict | None = None) -> Nest:
    """The merged nest of `shape` for `operands` (constants take no part). `sums` (value
    id -> strides, 0 on summed axes) are operands the computation adds into."""
    sums = sums or {}
    strides = {v.id: sums.get(v.id) or _aligned_strides(r, v, shape) for v in operands
               if not r.layout(v).is_const}
    dims: list[Dim] = []
    merged: dict[int, list[Dim]] = {k: [] for k in strides}
    for i, d in enumerate(shape):
        if dims and all(merged[k][-1] == s[i] * d for k, s in strides.items()):
            dims[-1] = dims[-1] * d
            for k, s in strides.items():
                merged[k][-1] = s[i]
            continue
        dims.append(d)
        for k, s in strides.items():
            merged[k].append(s[i])
    return Nest(dims, merged, {v.id: v for v in operands})


def sum_strides(x, axes: tuple[int, ...]) -> tuple[Dim, ...]:
    """Where each element of `x` lands in its sum over `axes` (kept axes contiguous)."""
    kept = [d for i, d in enumerate(x.type.shape) if i not in axes]
    strides = iter(contiguous_strides(tuple(kept)))
    return tuple(Dim.of(0) if i in axes else next(strides) for i in range(x.type.rank))


def index(r, strides: list[Dim], idx: list[str]) -> str:
    """The element index of an operand with these strides at loop variables `idx`."""
    terms = [var if s == Dim.of(1) else f"{var} * {r.dim(s)}"
             for var, s in zip(idx, strides) if s != Dim.of(0)]
    return " + ".join(terms) or "0"


def _aligned_strides(r, v, shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """`v`'s strides against an output `shape` (broadcast dims get stride 0)."""
    strides = list(r.layout(v).strides)
    for i, d in enumerate(v.type.shape):
        if d == Dim.of(1):
            strides[i] = Dim.of(0)
    return (Dim.of(0),) * (len(shape) - len(strides)) + tuple(strides)
