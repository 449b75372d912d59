"""The text on the picture's nodes: what an op or a group of ops computes, the values it
makes, a parameter's full name and shape, a loop's options. Lines are joined with
Graphviz's `\\n` escape."""
from __future__ import annotations

from ..ir.graph import Op, Param, Value
from ..ops.structured.table import REQUIRED, StructuredOp

PRIMS_PER_LINE = 4


def lines(*texts: str) -> str:
    return "\\n".join(t for t in texts if t)


def values(outputs: list[Value]) -> str:
    """`h : f32[B, 4]` (the name it has in the source, when it has one), a line per
    value, or `i, f : 2 × f32[B, 4]` for several values of one type."""
    names = ", ".join(v.hint for v in outputs) if all(v.hint for v in outputs) else ""
    types = {str(v.type) for v in outputs}
    if len(outputs) > 1 and len(types) == 1:
        return f"{names + ' : ' if names else ''}{len(outputs)} × {types.pop()}"
    return lines(*(f"{v.hint} : {v.type}" if v.hint else str(v.type) for v in outputs))


def ops(members: list[Op], constants: list[object]) -> str:
    """A node drawing `members` (in order; one op, or a fused group): their primitives,
    the scalar constants they read, what the last one makes."""
    prims = [op.prim for op in members]
    rows = [" · ".join(prims[i:i + PRIMS_PER_LINE]) for i in range(0, len(prims),
                                                                     PRIMS_PER_LINE)]
    if constants:
        rows[-1] += " (" + ", ".join(_number(c) for c in constants) + ")"
    return lines(*rows, values(members[-1].outputs))


def is_shared(p: Param) -> bool:
    """Whether a parameter is used from several places of the source."""
    return len(p.uses) > 1


def param(p: Param) -> str:
    shared = f"shared: {len(p.uses)} uses" if is_shared(p) else ""
    frozen = "" if p.trainable else "not trainable"
    return lines(p.name, str(p.value.type), shared, frozen)


def structured(op: Op, entry: StructuredOp) -> str:
    """A for / if / while's options: the required ones and those set away from their
    default (flags by name)."""
    shown = []
    for key, value in op.attrs.items():
        default = entry.attrs[key][1]
        if isinstance(value, bool):
            if value != (default is True):  # a required flag shows when set
                shown.append(key if value else f"{key}=false")
        elif default is REQUIRED or value != default:
            shown.append(f"{key}={value}")
    return lines(op.prim, ", ".join(shown))


def _number(x: object) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)
