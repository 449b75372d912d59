"""The IR: typed SSA values, ops drawn from the primitive table, and structured ops
(`for`, `if`, `while`) that own blocks. Blocks may read values of enclosing blocks
directly (implicit capture); `free_values` lists what a block reads from outside.

Structured op conventions
- for:   inputs = sequences + initial states [+ lengths]; attrs n_seq, n_state,
         reversed, has_lengths, recompute, checkpoint; one block whose args are
         (per-step slices..., states...) and whose results are (new states..., yields...);
         outputs = (final states..., stacked yields...).
- if:    inputs = [cond]; blocks = [then, else], no args, equal result types; outputs.
- while: inputs = initial states; blocks = [cond (args: state; results: [bool]),
         body (args: state; results: new state)]; outputs = final states.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator

from .shapes import TensorType

_ids = itertools.count()


class Value:
    """One SSA value; `hint` is a readable name (the .mdl variable it came from)."""

    __slots__ = ("type", "hint", "id")

    def __init__(self, type_: TensorType, hint: str = ""):
        self.type = type_
        self.hint = hint
        self.id = next(_ids)

    def __repr__(self) -> str:
        return f"%{self.hint or 'v'}{self.id}: {self.type}"


@dataclass(eq=False)
class Block:
    args: list[Value] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    results: list[Value] = field(default_factory=list)


@dataclass(eq=False)
class Op:
    prim: str
    inputs: list[Value]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)
    loc: Any = None  # dsl.diagnostics.Loc of the source construct, when there is one


@dataclass(frozen=True)
class Init:
    """A parameter initializer: `kind` is zeros, ones, constant, uniform, normal,
    xavier or orthogonal; `args` its numbers."""
    kind: str
    args: tuple[float, ...] = ()

    def __str__(self) -> str:
        return self.kind + (f"({', '.join(_num(a) for a in self.args)})" if self.args else "")


@dataclass(frozen=True)
class Regularizer:
    kind: str  # l1 or l2
    strength: float

    def __str__(self) -> str:
        return f"{self.kind}({_num(self.strength)})"


def _num(x: float) -> str:
    return repr(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


@dataclass(eq=False)
class Param:
    name: str                      # full name, e.g. encoder/lstm/W
    value: Value
    init: Init
    trainable: bool = True
    regularizer: Regularizer | None = None
    decl: Any = None               # Loc of the first declaration
    uses: list = field(default_factory=list)  # Locs, in first-use order


@dataclass(eq=False)
class Graph:
    """A whole model: named inputs, parameters, a body, named outputs, the loss."""
    name: str
    hparams: dict[str, Any]
    inputs: dict[str, Value]
    params: dict[str, Param]
    body: Block
    outputs: dict[str, Value]
    loss: str | None = None
    input_locs: dict[str, Any] = field(default_factory=dict)


def walk_ops(block: Block) -> Iterator[Op]:
    """Every op in a block and, depth first, in the blocks its ops own."""
    stack = [iter(block.ops)]
    while stack:
        op = next(stack[-1], None)
        if op is None:
            stack.pop()
            continue
        yield op
        stack.extend(iter(b.ops) for b in reversed(op.blocks))


def free_values(block: Block) -> list[Value]:
    """Values a block (with its nested blocks) reads but does not define."""
    defined = set(id(v) for v in block.args)
    seen: set[int] = set()
    free: list[Value] = []
    for op in walk_ops(block):
        for b in op.blocks:
            defined.update(id(v) for v in b.args)
        defined.update(id(v) for v in op.outputs)
    for op in walk_ops(block):
        reads = list(op.inputs) + [r for b in op.blocks for r in b.results]
        for v in reads:
            if id(v) not in defined and id(v) not in seen:
                seen.add(id(v))
                free.append(v)
    for v in block.results:
        if id(v) not in defined and id(v) not in seen:
            seen.add(id(v))
            free.append(v)
    return free
