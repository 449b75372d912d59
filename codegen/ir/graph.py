"""The IR: typed SSA values, ops drawn from the primitive table, and structured ops
(`for`, `if`, `while`) that own blocks. Blocks may read values of enclosing blocks
directly (implicit capture); `free_values` lists what a block reads from outside.

Structured op conventions (each op's entry in the table of structured ops,
codegen/ops/structured/, declares its attributes with their types and defaults, checks
these conventions for the verifier and holds the op's other rules):
- for:   inputs = sequences + initial states [+ lengths]; attrs n_seq, n_state,
         reversed, has_lengths, recompute, checkpoint, n_tape; one block whose args are
         (per-step slices..., states...) and whose results are (new states..., yields...);
         outputs = (final states..., stacked yields...). Yields are stacked in time order
         (a reversed loop fills them from the end). With lengths (i32[B]) row b runs only
         its steps t < L[b] (reversed: from L[b]-1 down to 0, like a packed bidirectional
         RNN); in the other steps the body sees zeros in that row, its state is kept and
         its yields are zeros.
- if:    inputs = [cond]; blocks = [then, else], no args, equal result types; outputs;
         attr n_tape.
- while: inputs = initial states; blocks = [cond (args: state; results: [bool]),
         body (args: state; results: new state, then n_tape tape values)];
         outputs = final states, then the n_tape tapes.

Tapes (what a forward pass keeps for its backward pass). The last `n_tape` yields of a
`for`, results of an `if` and body results of a `while` exist only for the backward
pass; n_tape (default 0) says how many, so that memory can be accounted for. A `for`
stacks them like any yield. A `while` pushes them every iteration onto a growable tape:
each tape output is [n, ...] where n, the trip count, is the dim named by attr `trips`,
known only at run time; the backward pass runs a reversed `for` over the tapes, so its
trip count is the tapes' length (a while whose backward needs no value tapes one i32 per
trip, so that the length is always there).

Dims. Symbolic dims written in the source (T, B) are names, bound by the inputs of a
call. Sizes known only at run time are typed symbols of codegen.ir.shapes (`is_dynamic`):
a while's trip count (`TripCount`, printed `trips#12`, the `trips` attr of the while),
the rows of a for's ragged yield (`Rows`, printed `rows(trips#12)`: its steps' tapes of
that while end to end) and a segment count (`CeilDiv`, printed `ceil(T/4)`, computed
from T); no op needs their value before the op that produces them has run.

Random ops (dropout masks) carry attr `salt`: each draws from its own stream, seeded
by (seed, salt), so removing or reordering other ops never changes a mask.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from .shapes import Dim, TensorType, is_runtime, signed

_ids = itertools.count()


class Value:
    """One SSA value; `hint` is a readable name (the .mdl variable it came from). `id`
    is unique among all values ever made (never reused, unlike Python's id()): every
    table of values, in every stage, is keyed by it."""

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
    loc: Any = None  # codegen.ir.diagnostics.Loc of the source construct, when there is one


@dataclass(frozen=True)
class Init:
    """A parameter initializer: `kind` is zeros, ones, constant, uniform, normal,
    xavier or orthogonal; `args` its numbers."""
    kind: str
    args: tuple[float, ...] = ()

    def __str__(self) -> str:
        return self.text()

    def text(self, digits: int | None = None) -> str:
        """As written, with every digit (`digits`: that many significant ones, for
        people: uniform(-0.176777, 0.176777))."""
        args = ", ".join(_num(a, digits) for a in self.args)
        return self.kind + (f"({args})" if self.args else "")


# The regularizers' kinds: a parameter's gradient gains strength * sign(w) (l1) or
# strength * w (l2) in every optimizer update (the runtime's ParamSpec has a strength of
# each; mdl/optimizer.h).
PENALTIES = ("l1", "l2")


@dataclass(frozen=True)
class Regularizer:
    kind: str  # one of PENALTIES
    strength: float

    def __str__(self) -> str:
        return self.text()

    def text(self, digits: int | None = None) -> str:
        return f"{self.kind}({_num(self.strength, digits)})"


def _num(x: float, digits: int | None = None) -> str:
    if float(x).is_integer() and abs(x) < 1e15:
        return repr(int(x))
    return repr(float(x)) if digits is None else f"{x:.{digits}g}"


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
    """A whole model: named inputs, parameters, a body, named outputs, the loss. Autodiff
    records where the forward pass ends: the backward pass is a block of its own, run
    after the body and reading its values (`param_grads`, `input_grads` are defined in
    either)."""
    name: str
    hparams: dict[str, Any]
    inputs: dict[str, Value]
    params: dict[str, Param]
    body: Block
    outputs: dict[str, Value]
    loss: str | None = None
    input_locs: dict[str, Any] = field(default_factory=dict)
    param_grads: dict[str, Value] = field(default_factory=dict)  # set by autodiff
    input_grads: dict[str, Value] = field(default_factory=dict)
    backward: Block = field(default_factory=Block)
    # the input whose sum counts what the loss is a mean over: `cross_entropy(...,
    # lengths = L)` minimized, L an input (a model's `loss_tokens`, which data-parallel
    # training weighs each shard by); None for any other loss
    loss_tokens: str | None = None
    # the declared dims the minimized loss is a mean over (`("B",)` for a mean of rows,
    # `("T", "B")` for an `mse` of [T, B, H]), whose sizes data-parallel training weighs
    # shards by (a model's `loss_mean_dims`); None where the loss is no such mean
    loss_mean_dims: tuple[str, ...] | None = None

    def blocks(self) -> tuple[Block, Block]:
        """The forward body and the backward block, in the order they run."""
        return self.body, self.backward


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


def signed_sizes(ops: Iterable[Op], dims) -> list[tuple[Dim, Any]]:
    """The sizes of the values `ops` make that the call's dims could make negative (`T -
    30` is for T < 30): made of the user dims `dims` alone, with a term subtracted, each
    with the place of the first op that makes a value of it (None where no op there has
    one). A call whose dims make one negative is refused before anything runs, or where
    the branch of an `if` that makes it starts (ops.entry.call_bounds and branch_bounds
    say which ops and how)."""
    sizes: dict[Dim, Any] = {}
    for op in ops:
        for v in op.outputs:
            for d in v.type.shape:
                if signed(d) and d.symbols <= set(dims) and sizes.get(d) is None:
                    sizes[d] = op.loc
    return sorted(sizes.items(), key=lambda item: str(item[0]))


def reads(op: Op) -> list[Value]:
    """What an op reads at its own level: its inputs, then the results its blocks yield
    (which may be values of enclosing blocks)."""
    return [*op.inputs, *(v for b in op.blocks for v in b.results)]


def outer_reads(op: Op) -> list[Value]:
    """What an op reads of the block it lies in: its inputs, then the values from outside
    its own blocks that they read (a parameter a loop body captures)."""
    return [*op.inputs, *(v for b in op.blocks for v in free_values(b))]


def use_counts(block: Block) -> dict[int, int]:
    """How many times each value (by id) is read in `block` and the blocks inside it: by
    ops (`reads`) and as a result of `block`."""
    count: dict[int, int] = {}
    for v in [*(v for op in walk_ops(block) for v in reads(op)), *block.results]:
        count[v.id] = count.get(v.id, 0) + 1
    return count


def free_values(block: Block) -> list[Value]:
    """Values a block (with its nested blocks) reads but does not define, in order of
    first read."""
    defined = {v.id for v in block.args}
    for op in walk_ops(block):
        defined.update(v.id for b in op.blocks for v in b.args)
        defined.update(v.id for v in op.outputs)
    free: dict[int, Value] = {}
    for v in [*(v for op in walk_ops(block) for v in reads(op)), *block.results]:
        if v.id not in defined:
            free.setdefault(v.id, v)
    return list(free.values())


class IRError(Exception):
    """An internal invariant of the IR does not hold (a bug of ours, never the user's);
    the message shows the offending node."""


def is_dynamic(dim: Dim) -> bool:
    """Whether a dim is a size known only at run time (see the module docstring)."""
    return any(is_runtime(s) for s in dim.symbols)


def has_dynamic(t: TensorType) -> bool:
    return any(is_dynamic(d) for d in t.shape)


def defined_here(block: Block) -> set[int]:
    """Ids of the values a block defines at its own level: its args and its ops' outputs."""
    ids = {v.id for v in block.args}
    for op in block.ops:
        ids.update(v.id for v in op.outputs)
    return ids


def clone_ops(ops: list[Op], mapping: dict[int, Value]) -> list[Op]:
    """Deep copies of `ops` (blocks included) with fresh values; reads of values in
    `mapping` (by id) are redirected, and `mapping` learns every value defined."""
    return [_clone_op(op, mapping) for op in ops]


def _clone_op(op: Op, mapping: dict[int, Value]) -> Op:
    inputs = [mapping.get(v.id, v) for v in op.inputs]
    blocks = [clone_block(b, mapping) for b in op.blocks]
    outputs = []
    for v in op.outputs:
        mapping[v.id] = Value(v.type, v.hint)
        outputs.append(mapping[v.id])
    return Op(op.prim, inputs, outputs, dict(op.attrs), blocks, op.loc)


def clone_block(block: Block, mapping: dict[int, Value]) -> Block:
    args = []
    for v in block.args:
        mapping[v.id] = Value(v.type, v.hint)
        args.append(mapping[v.id])
    ops = clone_ops(block.ops, mapping)
    return Block(args, ops, [mapping.get(v.id, v) for v in block.results])


def clone_graph(graph: Graph) -> Graph:
    """An independent copy of a graph (new values, same parameter records)."""
    mapping: dict[int, Value] = {}
    inputs = {}
    for name, v in graph.inputs.items():
        inputs[name] = mapping[v.id] = Value(v.type, v.hint)
    params = {}
    for name, p in graph.params.items():
        mapping[p.value.id] = Value(p.value.type, p.value.hint)
        params[name] = Param(p.name, mapping[p.value.id], p.init, p.trainable,
                             p.regularizer, p.decl, list(p.uses))
    body = clone_block(graph.body, mapping)
    backward = clone_block(graph.backward, mapping)

    def remap(values: dict[str, Value]) -> dict[str, Value]:
        return {k: mapping.get(v.id, v) for k, v in values.items()}
    return Graph(graph.name, dict(graph.hparams), inputs, params, body, remap(graph.outputs),
                 graph.loss, dict(graph.input_locs), remap(graph.param_grads),
                 remap(graph.input_grads), backward, graph.loss_tokens, graph.loss_mean_dims)


def substitute(block: Block, mapping: dict[int, Value]) -> None:
    """Redirect, in place, every read of a value in `mapping` inside `block` (nested
    blocks included)."""
    def sub(values: list[Value]) -> list[Value]:
        return [mapping.get(v.id, v) for v in values]
    block.results = sub(block.results)
    for op in walk_ops(block):
        op.inputs = sub(op.inputs)
        for b in op.blocks:
            b.results = sub(b.results)


def rename(ops: list[Op], new: list[Value], old: list[Value]) -> None:
    """Make `ops`, which produce the values `new`, produce `old` instead (and read it
    where they read `new`), so that every reader of a replaced op keeps reading the same
    values."""
    swap = {n.id: o for n, o in zip(new, old)}
    for op in ops:
        op.outputs = [swap.get(v.id, v) for v in op.outputs]
        op.inputs = [swap.get(v.id, v) for v in op.inputs]
