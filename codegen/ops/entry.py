"""One way to ask about any op: `entry(op)` is its entry, a primitive's (ops/primitives/)
or a structured op's (ops/structured/), and every entry answers the same questions, so
that no stage branches on which table holds an op or on an op's name.

The questions (each kind of entry says more in its own module):
- `check(op)`: the op keeps its entry's rules (types, attributes, blocks), else Broken;
- `evaluate(interp, op, args) -> [arrays]`: what it computes, for the NumPy reference
  interpreter;
- `gradient(b, op, cts, active, backprop) -> (input cotangents, [(captured, ct)])`: its
  gradient, as IR emitted through the builder `b`;
- `rewrite(op, autodiff) -> rule(b, op) or None`: a rewrite into simpler ops before
  autodiff or a backend (codegen/transforms/prepare.py);
- `simplify(b, op, facts) -> values or None`, `trim(op, live)`: what the passes offer it;
- `bounds(op) -> [(text, dim)]`: dims the call's dims must keep >= 0 for the op to stay
  inside its operand (a slice's start, the room its end leaves: `B - 6` for `[:, 5]` of
  an axis of length B), each with the refusal's text, `{}` where its value goes
  (`refused`, below);
- `integer_bounds(op, size)`, `steps(op)` (the block arguments that each take one step of
  an operand, paired with it: a `for`'s loop variables and its sequences),
  `sets_dims(op)`, `uniform(op)`, `blocks` (block names),
  `step_sum` (the sum of its result over a loop's steps, ops/primitives/core.py),
  `step_rows` (the operand whose rows its result is, where a loop's sum over steps may
  read that operand's steps instead, ops/primitives/core.py);
- declared facts, all False unless the entry says so:
  `elementwise`, `random` (draws from the RNG: never merged, folded or recomputed),
  `selects` (every element of the result is an element of the first operand),
  `product` (a matrix product: a GEMM, whose right operand a loop may keep packed and
  which can add itself into its output), `accumulates` (the sum of its two operands: a
  loop state updated by it accumulates), `repeats` (runs its blocks more than once: a
  loop), `branches` (runs one of its blocks, chosen by its first operand, a bool scalar:
  an `if`), `reduces` (reduces its one operand along `attrs["axes"]`, keeping them as 1s
  with `attrs["keepdims"]`: sum, mean, max, logsumexp), `checks` (checks the call's data
  and may raise: kept while nothing reads its result, never moved into a loop or a
  branch; an `assert`), `faults` (may raise on the call's data: an index outside its
  rows, a length outside the steps, an assert; of two that fail, a call raises the one
  the program runs first, so the backend keeps their order);
- `redraw(op, positions, same) -> [ops]`: for an op that draws random numbers (a
  dropout, a loop with one), the ops that draw them again from given stream positions in
  its place (ops/structured/replay.py says how);
- `extra`: the hooks later stages attach (the backend's `lower`, a target's statements).
"""
from __future__ import annotations

import abc
from pathlib import Path
from typing import Callable, Iterator

from ..ir.graph import IRError, Op, signed_sizes, walk_ops
from ..ir.shapes import Dim


class Broken(Exception):
    """An op breaks its entry's rules; the verifier shows the op."""


def need(cond: bool, message: str) -> None:
    if not cond:
        raise Broken(message)


class OpEntry(abc.ABC):
    """What every entry answers; the defaults are an op that declares nothing, and each
    kind of entry (Primitive, StructuredOp) implements the abstract rules."""

    # Every entry also has `name`, `blocks` (the names of its blocks) and `trim`; they are
    # not defaulted here, since a dataclass would take a default of this class for its
    # own fields.
    extra: dict
    elementwise = False
    random = False
    selects = False
    product = False
    accumulates = False
    repeats = False
    branches = False
    reduces = False
    checks = False
    faults = False
    simplify: Callable | None = None
    step_sum: Callable | None = None
    step_rows: Callable | None = None
    integer_bounds: Callable | None = None
    bounds: Callable | None = None
    steps: Callable | None = None
    uniform: Callable | None = None
    redraw: Callable | None = None

    @abc.abstractmethod
    def check(self, op: Op) -> None:
        """Raise Broken where `op` breaks the entry's rules."""

    @abc.abstractmethod
    def evaluate(self, interp, op: Op, args: list) -> list:
        """The op's outputs as NumPy arrays, given its operands `args`."""

    @abc.abstractmethod
    def gradient(self, b, op: Op, cts: list, active: set[int], backprop) -> tuple:
        """(input cotangents, [(captured value, cotangent)]), emitted through `b`."""

    def rewrite(self, op: Op, autodiff: bool) -> Callable | None:
        return None

    def sets_dims(self, op: Op) -> set:
        """The dims (symbols) known only once the op has run (a while's trip count)."""
        return set()


OPS: dict[str, OpEntry] = {}  # every op's entry; ops/primitives and ops/structured fill it


def entry(op: Op | str) -> OpEntry:
    """The entry of an op (or of an op name)."""
    name = op if isinstance(op, str) else op.prim
    try:
        return OPS[name]
    except KeyError:
        raise IRError(f"unknown op `{name}`") from None


def summed(v, producers: dict, stack, facts):
    """`v` summed over a loop's steps by the `step_sum` rule of the op that makes it
    (`producers`: ops by output id): emit(b) -> the sum, or None where no rule applies."""
    made = producers.get(v.id)
    rule = entry(made).step_sum if made is not None else None
    return rule(made, v, producers, stack, facts) if rule is not None else None


def loop_steps(op: Op) -> list:
    """(sequence, loop variable) pairs of a loop that steps through sequences (a `for`'s):
    each variable is a step of its sequence and computed from it alone; [] for any other
    op. What `origins.block_origins` takes as `steps`."""
    rule = entry(op).steps
    return rule(op) if rule is not None else []


def constant(op: Op) -> bool:
    """Whether `op` fills its one output with a number known from the op alone (`full`,
    `zeros[B, H]`, a literal)."""
    return entry(op).uniform is not None and not op.inputs and len(op.outputs) == 1


def call_bounds(graphs: list, dims) -> list[tuple[str, Dim]]:
    """What a call's dims must keep >= 0, with the refusal's text (`{}`: the value): the
    sizes of the graphs' values that they could make negative (`T - 30`), but those in a
    branch of an `if` in no loop, which it checks where it starts (branch_bounds), and
    the `bounds` made of them alone of the ops that every call runs, those outside any
    branch or loop (a slice of an axis of length B at [:, 5] needs B >= 6; in a branch
    the dims may keep it from running: `if T > 2 { y = xs[0:2] }`, so one there is
    checked where it runs: call_bounds_of). A call whose dims break one is refused before
    anything runs, by the reference and a generated module (ModelSpec::size_value) alike:
    the slice read and its gradient wrote outside its operand."""
    found = dict(_sizes((op for g in graphs for block in g.blocks() for op in _checked(block)),
                        dims))
    for g in graphs:
        for block in g.blocks():
            for op in block.ops:
                for text, d in call_bounds_of(op, dims):
                    found.setdefault(text, d)
    return sorted(found.items())


def guarded_ifs(block) -> Iterator[Op]:
    """The ifs in `block` in no loop, in ifs or not: each branch of theirs checks its
    sizes where it starts (branch_bounds), not the call before anything runs. (An if in a
    loop's body has its sizes checked with the loop's other values: the loop stacks the
    tapes its steps keep for the backward, of the branch each step took, at one size.)"""
    for op in block.ops:
        if entry(op).branches:
            yield op
            for branch in op.blocks:
                yield from guarded_ifs(branch)


def branch_bounds(branch, dims) -> list[tuple[str, Dim]]:
    """What the dims must keep >= 0 where `branch`, of an if in guarded_ifs, starts,
    worded as call_bounds words it: the sizes of the values made in it (in its loops'
    bodies too) that they could make negative, but those in the branches of its own ifs,
    which check theirs. So `if T > 1 { d = sum(xs[1:]) }` runs at T = 0, where the branch
    does not; the reference and generated code (mdl::dims_fit) refuse the call where it
    does."""
    return _sizes(_checked(branch), dims)


def _checked(block) -> Iterator[Op]:
    """The ops of `block` whose sizes are checked with its own: its ops and, at any
    depth, those of its loops' bodies, but not its ifs (which hold their branches'
    results) nor what their branches make (guarded_ifs)."""
    for op in block.ops:
        if entry(op).branches:
            continue
        yield op
        for body in op.blocks:
            yield from walk_ops(body)


def _sizes(ops, dims) -> list[tuple[str, Dim]]:
    return [(f"{d}, the size of a value {_made_at(loc)}, {{}}: a size cannot be negative", d)
            for d, loc in signed_sizes(ops, dims)]


def _made_at(loc) -> str:
    """Where a value is made, as a call's refusal names it: `at m.mdl:3:16` (the file's
    name alone, so that a module's text is the same wherever its source lies)."""
    if loc is None:
        return "of this model"
    return f"at {Path(loc.source.shown).name}:{loc.line}:{loc.col}"


def call_bounds_of(op, dims) -> list[tuple[str, Dim]]:
    """`op`'s `bounds` made of the call's dims alone that some dims could break: what
    call_bounds checks before a call of the ops every call runs, and what the reference
    and generated code (mdl::dims_fit) check of one in a branch or a loop's body where
    it runs."""
    rule = entry(op).bounds
    return [(text, d) for text, d in (rule(op) if rule is not None else ())
            if any(c < 0 for _, c in d.terms) and d.symbols <= set(dims)]


def refused(bounds: list[tuple[str, Dim]], dims: dict) -> str | None:
    """What refuses a call whose bound `dims` break one of `bounds`; None if none."""
    for text, d in bounds:
        value = d.evaluate(dims)
        if value < 0:
            bound = ", ".join(f"{k} = {v}" for k, v in dims.items())
            return f"the inputs' dims ({bound}) make " + text.replace("{}", str(value))
    return None
