"""Forward rewrites that put a graph in the form autodiff handles, each preserving what
the graph computes:

- a primitive with a decomposition (dropout -> x * dropout_mask) is expanded, so that
  the random mask becomes a value the backward pass can keep;
- a `for` with lengths becomes a plain `for` over the sequences in step order
  (seq_order), with a mask sequence: in masked steps `where` keeps the state and yields
  zeros. Masked steps then need no rule of their own: the gradient of `where` passes
  the state's cotangent through them unchanged, and their yields get none;
- a `for` with `checkpoint = k` becomes a `for` over ceil(T/k) segments whose body
  runs a `for` over the k steps of one segment (padding steps masked), both marked
  `recompute`: the backward keeps the state at each segment start only, and re-runs one
  segment at a time (memory O(T/k + k)).
"""
from __future__ import annotations

from .builder import Builder
from .ir import Block, Op, Value, for_layout, walk_ops
from .primitives import TABLE
from .shapes import Dim, TensorType

BOOL = TensorType("bool", ())


def prepare(block: Block) -> None:
    """Rewrite `block` (and the blocks inside it) in place; idempotent."""
    number_random_ops(block)
    _rewrite(block)


def number_random_ops(block: Block) -> None:
    """Give each random op without one the salt the interpreter would give it (its rank
    among random ops in program order), so that a graph and its gradient graph draw the
    same masks."""
    rank = 0
    for op in walk_ops(block):
        if op.prim in TABLE and TABLE[op.prim].random:
            op.attrs.setdefault("salt", rank)
            rank += 1


def _rewrite(block: Block) -> None:
    block.ops = _lowered(block.ops)


def _lowered(ops: list[Op]) -> list[Op]:
    """The ops with every rewrite applied, to what the rewrites make too (a loop with
    lengths and a checkpoint is lowered twice)."""
    out: list[Op] = []
    for op in ops:
        for sub in op.blocks:
            _rewrite(sub)
        prim = TABLE.get(op.prim)
        if prim is not None and prim.expand is not None:
            rule = _expand
        elif op.prim == "for" and op.attrs.get("has_lengths"):
            rule = _lower_lengths
        elif op.prim == "for" and op.attrs.get("checkpoint"):
            rule = _nest_checkpoint
        else:
            out.append(op)
            continue
        made = Block()
        rule(Builder(made, op.loc), op)
        out += _lowered(made.ops)
    return out


def _expand(b: Builder, op: Op) -> None:
    results = TABLE[op.prim].expand(b, op)
    _rename(b.block.ops, results, op.outputs)


def _rename(ops: list[Op], new: list[Value], old: list[Value]) -> None:
    """Make the ops that produce `new` produce the original values `old` instead, so that
    every reader of the replaced op keeps reading the same values."""
    swap = {id(n): o for n, o in zip(new, old)}
    for op in ops:
        op.outputs = [swap.get(id(v), v) for v in op.outputs]
        op.inputs = [swap.get(id(v), v) for v in op.inputs]


def _masked_results(block: Block, n_state: int, keep: Value, states: list[Value]) -> None:
    """End `block` with: new state where `keep`, else the old; yields where `keep`, else
    zeros. `keep` is bool[B] (one flag per row) or a bool scalar."""
    b = Builder(block)
    flags: dict[int, Value] = {}

    def row_flags(rank: int) -> Value:
        if keep.type.rank == 0 or rank <= 1:
            return keep
        if rank not in flags:
            shape = keep.type.shape + (Dim.of(1),) * (rank - 1)
            flags[rank] = b.reshape(keep, shape=shape)
        return flags[rank]
    results = []
    for i, r in enumerate(block.results):
        other = states[i] if i < n_state else b.const(0, r.type.dtype)
        results.append(b.where(row_flags(r.type.rank), r, other))
    block.results = results


def _lower_lengths(b: Builder, op: Op) -> None:
    seqs, states, lengths = for_layout(op)
    n_seq, n_state = len(seqs), len(states)
    body = op.blocks[0]
    rev = op.attrs["reversed"]
    ordered = [b.seq_order(x, lengths, reversed=rev) for x in seqs]
    mask = b.seq_mask(seqs[0], lengths)
    keep = Value(mask.type.with_shape(mask.type.shape[1:]), "keep")
    state_args = body.args[n_seq:]
    body.args = body.args[:n_seq] + [keep] + state_args
    _masked_results(body, n_state, keep, state_args)
    yields = op.outputs[n_state:]
    # reversed: yields come out in step order and go back to time order
    stepped = [Value(y.type, y.hint) for y in yields] if rev else yields
    attrs = {**op.attrs, "n_seq": n_seq + 1, "has_lengths": False, "reversed": False}
    b.block.ops.append(Op("for", ordered + [mask] + states, op.outputs[:n_state] + stepped,
                          attrs, [body], op.loc))
    if rev:
        start = len(b.block.ops)
        timed = [b.seq_order(y, lengths, reversed=True) for y in stepped]
        _rename(b.block.ops[start:], timed, yields)


def _nest_checkpoint(b: Builder, op: Op) -> None:
    seqs, states, _ = for_layout(op)
    n_seq, n_state = len(seqs), len(states)
    k = op.attrs["checkpoint"]
    body = op.blocks[0]
    segments = [b.segment(x, k=k) for x in seqs + [b.seq_mask(seqs[0])]]
    real = Value(BOOL, "real")  # false in the padding steps of the last segment
    state_args = body.args[n_seq:]
    body.args = body.args[:n_seq] + [real] + state_args
    _masked_results(body, n_state, real, state_args)
    attrs = {**op.attrs, "n_seq": n_seq + 1, "checkpoint": 0, "recompute": True}

    outer = Block([Value(s.type.with_shape(s.type.shape[1:]), "segment") for s in segments]
                  + [Value(s.type, s.hint) for s in states])
    yields = body.results[n_state:]
    inner_out = [Value(s.type, s.hint) for s in states] + [
        Value(y.type.with_shape((Dim.of(k),) + y.type.shape), y.hint) for y in yields]
    outer.ops.append(Op("for", outer.args, inner_out, dict(attrs), [body], op.loc))
    outer.results = inner_out

    stacked = [Value(y.type.with_shape((segments[0].type.shape[0],) + y.type.shape), y.hint)
               for y in inner_out[n_state:]]
    b.block.ops.append(Op("for", segments + states, op.outputs[:n_state] + stacked, attrs,
                          [outer], op.loc))
    start = len(b.block.ops)
    whole = [b.unsegment(s, seqs[0]) for s in stacked]
    _rename(b.block.ops[start:], whole, op.outputs[n_state:])
