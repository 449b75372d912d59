"""Which of a model's inputs each value is computed from, and the words that name integer
indices by it, for the error a call with indices out of range raises: a generated
module's kernels (backend/kernels.py) and the reference interpreter word it alike.

An index that is an input is named as the input (`tokens`); one the model computes is
named by the inputs it comes from (`index` (computed from the input `labels`)), since
those are what the caller can mend.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .graph import Block, Graph, Op, Value, outer_reads


# Between computed lengths' variable and the inputs it comes from, in the name a kernel
# is given (a character no name holds; cpp_runtime/src/faults.cpp splits there)
LENGTHS_FROM = "\x1f"


@dataclass
class Origins:
    inputs: dict[int, str] = field(default_factory=dict)  # an input's value id: its name
    reach: dict[int, frozenset[str]] = field(default_factory=dict)  # id: inputs it reads

    def of(self, v: Value) -> frozenset[str]:
        return self.reach.get(v.id, frozenset())

    def indices(self, v: Value, place=None) -> str:
        """Integer indices `v`, named for an error: the input they are, or the variable
        they are and the inputs they are computed from, with the `place` of the op that
        reads them (a Loc), where it is known: "an index is -1" (of dims alone, `xs[T -
        1]`) or "`t` is 3" named no place in a model of several."""
        if v.id in self.inputs:
            return f"`{self.inputs[v.id]}`"
        source = self.inputs_of(v)
        at = f" at {place.brief}" if place else ""
        if v.hint:
            return f"`{v.hint}`{at}" + (f" (computed from {source})" if source else "")
        named = f"the index{at}" if place else "an index"
        return f"{named} computed from {source}" if source else named

    def lengths(self, v: Value) -> str:
        """Sequence lengths `v`, named for an error: the input they are, or their variable
        and, after a LENGTHS_FROM, the inputs it is computed from (length_fault's form)."""
        if v.id in self.inputs:
            return self.inputs[v.id]
        source = self.inputs_of(v)
        name = v.hint or "lengths"
        return f"{name}{LENGTHS_FROM}{source}" if source else name

    def inputs_of(self, v: Value) -> str:
        """"the input `a`", "the inputs `a` and `b`": those `v` is computed from ("" if
        none)."""
        names = [f"`{n}`" for n in sorted(self.of(v))]
        if not names:
            return ""
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        return f"the input{'s' if len(names) > 1 else ''} {listed}"


def out_of_range(kind: str, what: str, value: int, position: int, bound: int) -> str:
    """The IndexError's message for data `what` names holding `value` at flat `position`,
    outside [0, bound): as cpp_runtime/src/faults.cpp words it for a generated module, so
    that the reference interpreter says the same."""
    if kind == "subscript":
        return f"{what} is {value}, outside [0, {bound}): the rows of the value it indexes"
    if kind == "target":
        return (f"{what} holds {value} at flat position {position}: cross_entropy's targets "
                f"lie in [0, {bound}), one per class")
    return (f"{what} holds {value} at flat position {position}, outside [0, {bound}): the "
            "rows of the table it indexes")


def length_fault(name: str, row: int, value: int, steps: int) -> str:
    """The ValueError's message for sequence lengths `name` (Origins.lengths) holding
    `value` at `row`, outside [0, steps]: as cpp_runtime/src/faults.cpp words it."""
    name, _, source = name.partition(LENGTHS_FROM)
    said = f"{name}[{row}] = {value} is outside [0, {steps}] (the sequence length)"
    return f"{said}; {name} is computed from {source}" if source else said


def input_origins(*graphs: Graph, steps: Callable[[Op], list]) -> Origins:
    """The inputs every value of `graphs` is computed from (a joint graph's backward
    included). A structured op's results and its blocks' arguments count all that the op
    reads from outside (conservative: a loop's state may carry any of it), but for the
    loop variables that `steps` pairs with their sequences (block_origins; every caller
    passes ops/entry.loop_steps, which this module, knowing no op, cannot import)."""
    out = Origins()
    for g in graphs:
        block_origins(g.inputs, g.blocks(), out, steps=steps)
    return out


def block_origins(inputs: dict[str, Value], blocks, out: Origins | None = None, *,
                  steps: Callable[[Op], list]) -> Origins:
    """The inputs every value of `blocks` (in the order they run) is computed from, added
    to `out` (a new Origins if None): a graph's, or one the front end is still building.
    `steps(op)` pairs a loop's sequences with its variables, each then computed
    from its sequence alone (a step of `xs` from `xs`, not from the loop's `lengths`)."""
    out = out if out is not None else Origins()
    for name, v in inputs.items():
        out.inputs[v.id] = name
        out.reach[v.id] = frozenset([name])
    for block in blocks:
        _block(block, out.reach, steps)
    return out


def _block(block: Block, reach: dict[int, frozenset[str]], steps) -> None:
    for op in block.ops:
        reads = outer_reads(op) if op.blocks else op.inputs
        came = frozenset().union(*(reach.get(v.id, frozenset()) for v in reads))
        stepped = {arg.id: whole for whole, arg in (steps(op) if op.blocks else ())}
        for inner in op.blocks:
            for v in inner.args:
                whole = stepped.get(v.id)
                reach[v.id] = came if whole is None else reach.get(whole.id, frozenset())
            _block(inner, reach, steps)
        for v in op.outputs:
            reach[v.id] = came
