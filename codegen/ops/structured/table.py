"""The entry type of the table of structured ops and the registry. A structured op owns
blocks (codegen/ir/graph.py has the conventions); its entry declares, once:

- `attrs`: its attributes, name -> (type, default; REQUIRED for none), checked by the
  verifier (an unknown or ill-typed attribute is an IRError);
- `blocks`: the names of its blocks, for printing;
- `verify(op)`: its conventions, through `need(cond, message)`;
- `reference(interp, op, args) -> [arrays]`: what it computes, for the NumPy reference
  interpreter (`interp.block(block, args)` runs a block);
- `grad(b, op, cts, active, backprop) -> (input cotangents, [(captured, cotangent)])`:
  its gradient rule, as IR, given the generic walk `backprop` for its blocks;
- `trim(op, live)`: drop outputs nobody reads (and what only they needed);
- `rewrite(op, autodiff) -> rule or None`: a rewrite into simpler ops
  (codegen/transforms/prepare.py), as `rule(b, op)` emitting the replacement with the builder `b`;
  `autodiff` says whether the graph is prepared for differentiation or only for a
  backend;
- `simplify(b, op, facts) -> values or None`: a rewrite the simplification pass offers
  it (codegen/transforms/passes.py), as the table's primitives offer their identities: it emits the
  replacement (the op itself included, if it stays) and returns the values replacing
  its outputs;
- `step_sum(op, value, producers, stack, facts)`: `value`, one of its outputs, summed
  over the steps of a loop around it, as a primitive's rule (ops/primitives/core.py);
- `integer_bounds(op, size) -> [(input, lo, hi)]`: the ranges its integer inputs must lie
  in (gradcheck draws valid inputs from them);
- `repeats`: whether it runs its blocks more than once (a loop: for, while); `branches`:
  whether it runs one of its blocks, chosen by its first operand (an if);
- `extra`: hooks of later stages (the native backend's lowering and rendering).
Every entry answers what codegen/ops/entry.py lists; `entry(op)` finds it.

Adding a structured op: one module in this package declaring its entry, imported by
`__init__.py`, plus its backend hooks (codegen/backend/control_flow.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...ir.graph import Op, Value
from ...ir.shapes import TensorType
from ..entry import OPS, OpEntry, need

REQUIRED = object()
BOOL = TensorType("bool", ())  # an if's condition, a while's cond result


def types_of(values: list[Value]) -> list[TensorType]:
    return [v.type for v in values]


@dataclass(eq=False)
class StructuredOp(OpEntry):
    name: str
    attrs: dict[str, tuple[type, object]]
    blocks: tuple[str, ...]
    verify: Callable[[Op], None]
    reference: Callable
    grad: Callable
    trim: Callable[[Op, set[int]], None]
    rewrite: Callable[[Op, bool], Callable | None] = lambda op, autodiff: None
    simplify: Callable | None = None
    step_sum: Callable | None = None
    integer_bounds: Callable | None = None
    steps: Callable | None = None
    redraw: Callable | None = None  # how its blocks draw again (replay.py)
    # the dims (symbols) known only once the op has run: a while's trip count
    sets_dims: Callable[[Op], set] = lambda op: set()
    repeats: bool = False   # runs its blocks more than once (a loop)
    branches: bool = False  # runs one of its blocks, chosen by its first operand (an if)
    extra: dict = field(default_factory=dict)

    def check(self, op: Op) -> None:
        self.check_attrs(op)
        self.verify(op)

    def evaluate(self, interp, op: Op, args: list) -> list:
        return self.reference(interp, op, args)

    def gradient(self, b, op: Op, cts: list, active: set[int], backprop) -> tuple:
        return self.grad(b, op, cts, active, backprop)

    def check_attrs(self, op: Op) -> None:
        """Every attribute declared, of its type; the required ones present."""
        for key, value in op.attrs.items():
            need(key in self.attrs, f"`{self.name}` has no attribute `{key}`")
            kind = self.attrs[key][0]
            need(isinstance(value, kind) and (kind is bool or not isinstance(value, bool)),
                 f"`{self.name}` attribute `{key}` should be {kind.__name__}, got {value!r}")
        for key, (_, default) in self.attrs.items():
            need(default is not REQUIRED or key in op.attrs,
                 f"`{self.name}` needs attribute `{key}`")


STRUCTURED: dict[str, StructuredOp] = {}


def register(entry: StructuredOp) -> StructuredOp:
    STRUCTURED[entry.name] = OPS[entry.name] = entry
    return entry


def trim_outputs(op: Op, first: int, live: set[int], blocks) -> None:
    """Drop the outputs from index `first` on that nobody reads, with the block results
    that make them (block results line up with the outputs); keep n_tape counting the
    trailing tapes."""
    n_out = len(op.outputs)
    tape_from = n_out - op.attrs.get("n_tape", 0)
    dead = [i for i in range(first, n_out) if op.outputs[i].id not in live]
    if not dead:
        return
    for block in blocks:
        block.results = [r for j, r in enumerate(block.results) if j not in dead]
    op.outputs = [v for i, v in enumerate(op.outputs) if i not in dead]
    if "n_tape" in op.attrs:
        op.attrs["n_tape"] -= sum(1 for i in dead if i >= tape_from)
