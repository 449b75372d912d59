"""`for`: a loop over the leading dim of its sequences, carrying states; yields are
stacked in time order. With lengths (i32[B]) row b runs only its steps t < L[b]
(reversed: from L[b]-1 down to 0, like a packed bidirectional RNN); in other steps the
body sees zeros in that row, its state is kept and its yields are zeros. Lengths are
rewritten away for every consumer but the reference (autodiff and every backend see
plain loops), checkpoints before autodiff (see `_rewrite`)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...ir.dtypes import FLOATS
from ...ir.graph import Block, Op, Value, rename, substitute, use_counts, walk_ops
from ...ir.origins import length_fault
from ...ir.shapes import Dim, TensorType, ragged_rows, stack_type, step_type
from ..builder import Builder
from ..entry import entry
from . import replay
from .for_fission import fission, fissionable
from .for_hoist import hoist, movable
from .for_sink import accumulations, sink_sums
from .gradients import add_tapes, captured_floats, loop_backward, result_seeds
from .regions import RECOMPUTE, STORE, differentiate_block
from .table import BOOL, REQUIRED, StructuredOp, need, register, trim_outputs, types_of

# The steps of a block of the backward of a `recompute` loop (in_blocks): the weights'
# gradients are one product of 16 * B rows a block, and the last block's padding
# wastes at most 15 steps.
BLOCK = 16


def for_layout(op: Op) -> tuple[list[Value], list[Value], Value | None]:
    """The (sequences, initial states, lengths or None) of a `for` op."""
    n_seq, n_state = op.attrs["n_seq"], op.attrs["n_state"]
    lengths = op.inputs[n_seq + n_state] if op.attrs.get("has_lengths") else None
    return op.inputs[:n_seq], op.inputs[n_seq:n_seq + n_state], lengths


def _verify(op: Op) -> None:
    a = op.attrs
    n_seq, n_state = a["n_seq"], a["n_state"]
    need(len(op.blocks) == 1 and n_seq >= 1, "a for has one block and a sequence")
    need(len(op.inputs) == n_seq + n_state + a["has_lengths"],
         "for inputs are sequences, states [and lengths]")
    seqs, states, lengths = for_layout(op)
    steps = seqs[0].type.shape[0] if seqs[0].type.rank else None
    need(ragged_rows(seqs[0].type) is None, "a for's first sequence is not ragged")
    need(all(s.type.rank >= 1 and (s.type.shape[0] == steps or ragged_rows(s.type))
             for s in seqs), "for sequences share their leading dim (but ragged ones)")
    if lengths is not None:
        need(seqs[0].type.rank >= 2 and lengths.type == TensorType(
            "i32", seqs[0].type.shape[1:2]), "for lengths are i32[B]")
    body = op.blocks[0]
    slices = [step_type(s.type) for s in seqs]
    need(types_of(body.args) == slices + types_of(states),
         "for body args are the step slices, then the states")
    need(types_of(body.results[:n_state]) == types_of(states),
         "for body results start with the new states")
    yields = body.results[n_state:]
    stacked = [stack_type(steps, y.type) for y in yields]
    need(types_of(op.outputs) == types_of(states) + stacked,
         "for outputs are the final states, then the stacked (or ragged) yields")
    need(lengths is None or not any(ragged_rows(t) for t in stacked + types_of(seqs)),
         "a for with lengths has no ragged yields or sequences (autodiff sees none)")
    need(0 <= a.get("n_tape", 0) <= len(yields), "n_tape counts trailing yields")
    skip = a.get("skip", -1)
    need(skip < n_seq and (skip < 0 or seqs[skip].type == TensorType("bool", (steps,))),
         "for skip names a sequence of one bool a step")


# ---- reference semantics -----------------------------------------------------------------
def _reference(interp, op: Op, args: list[np.ndarray]) -> list[np.ndarray]:
    a = op.attrs
    n_seq, n_state = a["n_seq"], a["n_state"]
    seqs, states = args[:n_seq], args[n_seq:n_seq + n_state]
    lengths = args[-1] if a["has_lengths"] else None
    body = op.blocks[0]
    steps = seqs[0].shape[0]
    ragged = [k for k, v in enumerate(op.outputs[n_state:]) if ragged_rows(v.type)]
    stacks = [None if k in ragged else interp.empty_stack(steps, y.type)
              for k, y in enumerate(body.results[n_state:])]
    seqs = [_RaggedSteps(s, interp.ragged[v.id]) if ragged_rows(v.type) else s
            for s, v in zip(seqs, op.inputs)]
    ran = []  # the steps in the order they ran: a ragged yield's rows lie so
    batch = np.arange(seqs[0].shape[1]) if lengths is not None else None
    # `skip`: a step whose flag is false does not run; its states stay, its yields are the
    # stacks' zeros (a body singular at its masked inputs, log(0), would give NaN)
    flags = seqs[a["skip"]] if a.get("skip", -1) >= 0 else None
    if lengths is not None:
        check_lengths(lengths, steps, lambda: interp.named_origins().lengths(op.inputs[-1]))
    for i in range(steps):
        if lengths is None:
            t = steps - 1 - i if a["reversed"] else i
            if flags is not None and not flags[t]:
                continue
            out = interp.block(body, [s[t] for s in seqs] + states)
            states = out[:n_state]
            ran.append((t, out[n_state:]))
            for k, (stack, y) in enumerate(zip(stacks, out[n_state:])):
                if k not in ragged:
                    stack[t] = y
            continue
        # rows run their own steps: row b is at t = L[b]-1-i (reversed) or i while i < L[b]
        valid = i < lengths
        t = np.where(valid, lengths - 1 - i if a["reversed"] else i, 0)
        if flags is not None:  # a row whose step is skipped is as a row past its length
            valid &= flags[t]
        slices = [np.where(_rows(valid, s.ndim - 1), s[t, batch], 0) for s in seqs]
        out = interp.block(body, slices + states)
        states = [np.where(_rows(valid, new.ndim), new, old)
                  for new, old in zip(out[:n_state], states)]
        for stack, y in zip(stacks, out[n_state:]):
            stack[t[valid], batch[valid]] = y[valid]
    for k in ragged:
        stacks[k] = _end_to_end(interp, op, op.outputs[n_state + k], steps, ran, k)
    return states + stacks


def laid_like(op: Op, out) -> int | None:
    """The ragged sequence of the `for` op whose steps have the rows of its ragged yield
    `out` (the same trip count: a backward reading a forward's tape): the yield is laid
    out as that sequence is, each step's rows where the sequence's are, so that the two
    line up row by row (a weight's gradient over them both, for_sink.py), whichever way
    each loop ran; None where there is none (the rows lie in the order the steps ran)."""
    rows = ragged_rows(out.type)
    for i, seq in enumerate(op.inputs[:op.attrs["n_seq"]]):
        if rows is not None and ragged_rows(seq.type) == rows:
            return i
    return None


class _RaggedSteps:
    """A ragged sequence read a step at a time: step t is its rows of that step."""

    def __init__(self, rows: np.ndarray, where: tuple[np.ndarray, np.ndarray]):
        self.rows, (self.first, self.count) = rows, where

    def __getitem__(self, t: int) -> np.ndarray:
        return self.rows[self.first[t]:self.first[t] + self.count[t]]


def _end_to_end(interp, op: Op, out: Value, steps: int, ran: list, k: int) -> np.ndarray:
    """A ragged yield: its steps' values in the order the steps ran, or where the rows of
    the sequence it is laid out like are (laid_like), and where each step's rows begin,
    by step, recorded for the loops that read it (`interp.ragged`). A step that did not
    run (`skip`) has none."""
    rest = tuple(interp.ctx.dim(d) for d in out.type.shape[1:])
    dtype = interp.ctx.np_dtype(out.type.dtype)
    like = laid_like(op, out)
    if like is not None:
        first, count = interp.ragged[op.inputs[like].id]
        whole = np.zeros((int(count.sum()),) + rest, dtype)
        for t, ys in ran:
            assert ys[k].shape[0] == count[t], "a ragged yield's step has its sequence's rows"
            whole[first[t]:first[t] + count[t]] = ys[k]
        interp.ragged[out.id] = (first, count)
        return whole
    first, count = np.zeros(steps, np.int64), np.zeros(steps, np.int64)
    total = 0
    for t, ys in ran:
        first[t], count[t] = total, ys[k].shape[0]
        total += ys[k].shape[0]
    interp.ragged[out.id] = (first, count)
    return np.concatenate([ys[k] for _, ys in ran] + [np.zeros((0,) + rest, dtype)])


def _rows(mask: np.ndarray, ndim: int) -> np.ndarray:
    """A per-row mask [B] shaped to broadcast against a [B, ...] array."""
    return mask.reshape(mask.shape + (1,) * (ndim - 1))


def check_lengths(lengths: np.ndarray, steps: int, name: Callable[[], str] | str) -> None:
    """Sequence lengths must lie in [0, T]: a ValueError naming the first one that does
    not (native code raises the same); `name` as Origins.lengths words it (or what makes
    it, asked only then)."""
    bad = np.flatnonzero((lengths < 0) | (lengths > steps))
    if bad.size:
        b = int(bad[0])
        named = name() if callable(name) else name
        raise ValueError(length_fault(named or "lengths", b, int(lengths[b]), steps))


# ---- gradient ----------------------------------------------------------------------------
def _grad(b: Builder, op: Op, cts: list, active: set[int], backprop):
    seqs, states, _ = for_layout(op)
    body = op.blocks[0]
    captured = captured_floats(op.blocks, active)
    with_ct = result_seeds(body, len(seqs), len(states), cts)
    policy = RECOMPUTE if op.attrs.get("recompute") else STORE
    # A loop that recomputes yields again what its backward can recompute of its yields
    # (codegen/transforms/reread.py reads those instead of the forward's).
    n_state, n_tape = len(states), op.attrs.get("n_tape", 0)
    yields = body.results[n_state:len(body.results) - n_tape] if policy == RECOMPUTE else []
    # a for in no loop (in ifs there or not) keeps its whiles' tapes as ragged yields
    g = differentiate_block(body, with_ct, captured, policy, backprop, also=yields,
                            ragged=not b.in_block or b.rows)
    again = [(v, y) for v, y in zip(g.again, op.outputs[n_state:]) if v is not None]
    steps = seqs[0].type.shape[0]
    in_cts, cap_cts = loop_backward(b, op, g, seqs, states, cts, captured,
                                    lambda values: add_tapes(op, body, values, steps),
                                    not op.attrs["reversed"], lean=policy == RECOMPUTE,
                                    again=again)
    if policy == RECOMPUTE and not any(entry(o).repeats for o in body.ops):
        in_blocks(b, b.block.ops[-1])  # (a checkpoint's segments are its blocks already)
    return in_cts + [None] * (len(op.inputs) - len(in_cts)), cap_cts


# ---- rewrites ------------------------------------------------------------------------------
def _rewrite(op: Op, autodiff: bool):
    """- with lengths: a plain `for` over the sequences in step order (seq_order), with
      a mask sequence: in masked steps `where` keeps the state and yields zeros. Masked
      steps then need no rule of their own: the gradient of `where` passes the state's
      cotangent through them unchanged, and their yields get none; a backend needs no
      row-by-row code of its own (one implementation of lengths besides the reference);
    - with `checkpoint = k`, for autodiff: a `for` over ceil(T/k) segments whose body
      runs a `for` over the k steps of one segment (padding steps masked), the outer one
      marked `recompute` (`_nest_checkpoint`): the backward keeps the state at each segment start only, and re-runs
      one segment at a time, keeping its activations for the segment's backward
      (memory O(T/k + k)). Inference needs no checkpoint;
    - a plain loop with a branch that reads no state, whose result a product reads: the
      branch runs as a loop of its own before it (for_fission.py), and then
    - a plain loop whose body multiplies its sequence slices by loop-invariant matrices:
      those products move out as one product over all steps (for_hoist.py)."""
    if op.attrs["has_lengths"]:
        return _lower_lengths
    if op.attrs.get("checkpoint") and autodiff:
        return _nest_checkpoint
    if fissionable(op, autodiff):
        return fission
    if movable(op, autodiff):
        return hoist
    return None


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
        rename(b.block.ops[start:], timed, yields)


def _nest_checkpoint(b: Builder, op: Op) -> None:
    seqs, states, _ = for_layout(op)
    n_seq, n_state = len(seqs), len(states)
    body = op.blocks[0]
    real = Value(BOOL, "real")  # false in the padding steps of the last segment
    state_args = body.args[n_seq:]
    body.args = body.args[:n_seq] + [real] + state_args
    _masked_results(body, n_state, real, state_args)
    # Only the loop over segments recomputes: its backward re-runs one segment's steps,
    # keeping their activations, and the segment's own backward then reads them (a
    # recomputing inner loop would run every step a third time).
    attrs = {**op.attrs, "n_seq": n_seq + 1, "checkpoint": 0, "recompute": True}
    inner = {**attrs, "recompute": op.attrs.get("recompute", False)}
    _nest(b, op, op.attrs["checkpoint"], attrs, inner)


def _nest(b: Builder, op: Op, k: int, outer_attrs: dict, inner_attrs: dict) -> Op:
    """Emit `op` as a `for` over its sequences' segments of k steps (the last padded),
    whose body runs a `for` over one segment's steps; its body (`op`'s, already taking a
    `real` flag after the sequence slices: false in padding steps) reads one more
    sequence, those flags. The stacked yields, [ceil(T/k), k, ...], are made [T, ...]
    again under the names of `op`'s. Returns the loop over segments."""
    seqs, states, _ = for_layout(op)
    n_state = len(states)
    body = op.blocks[0]
    segments = [b.segment(x, k=k) for x in seqs + [b.seq_mask(seqs[0])]]
    outer = Block([Value(s.type.with_shape(s.type.shape[1:]), "segment") for s in segments]
                  + [Value(s.type, s.hint) for s in states])
    yields = body.results[n_state:]
    inner_out = [Value(s.type, s.hint) for s in states] + [
        Value(y.type.with_shape((Dim.of(k),) + y.type.shape), y.hint) for y in yields]
    # a padding step leaves the states as they are and yields zeros (or what nobody
    # reads): a backend may skip it (`skip`, the flags' sequence)
    inner_attrs = {**inner_attrs, "skip": len(segments) - 1}
    outer.ops.append(Op("for", list(outer.args), inner_out, inner_attrs, [body], op.loc))
    outer.results = inner_out

    stacked = [Value(y.type.with_shape((segments[0].type.shape[0],) + y.type.shape), y.hint)
               for y in inner_out[n_state:]]
    loop = Op("for", segments + states, op.outputs[:n_state] + stacked,
              {**outer_attrs, "skip": -1}, [outer], op.loc)
    b.block.ops.append(loop)
    start = len(b.block.ops)
    whole = [b.unsegment(s, seqs[0]) for s in stacked]
    rename(b.block.ops[start:], whole, op.outputs[n_state:])
    return loop


def in_blocks(b: Builder, loop: Op, k: int = BLOCK) -> None:
    """Emit `loop`, the backward of a `recompute` loop (`lean`: it keeps nothing per step),
    as a lean loop over blocks of k steps whose body runs a plain loop over one block:
    there the sums over the steps (the weights' gradients) become one product per block
    (for_sink.py) instead of a rank-B update at every step, and the products of the
    re-run forward that read only a block's sequences (x_t @ W, and h_{t-1} @ U from the
    saved states) one product per block (for_hoist.py), unless the body decides from
    floats (`_decides`). Steps past the end (the last
    block's padding) read zeros: the body reads its states (the cotangents) masked to
    zeros there, so that every gradient it adds up is zero, and passes them on unchanged;
    their yields are dropped."""
    seqs, states, _ = for_layout(loop)
    n_seq, n_state = len(seqs), len(states)
    body = loop.blocks[0]
    sums = {i for i, *_ in accumulations(body, n_seq, n_state, use_counts(body))}
    real = Value(BOOL, "real")
    state_args = body.args[n_seq:]
    top, masked = Builder(Block(), loop.loc), {}
    for i, s in enumerate(state_args):
        if i not in sums:
            masked[s.id] = top.where(real, s, top.const(0, s.type.dtype))
    substitute(body, masked)
    end = Builder(Block(), loop.loc)
    body.results = [end.where(real, r, state_args[i]) if i < n_state and i not in sums
                    else r for i, r in enumerate(body.results)]
    body.ops = top.block.ops + body.ops + end.block.ops
    body.args = body.args[:n_seq] + [real] + state_args
    attrs = {**loop.attrs, "n_seq": n_seq + 1}
    b.block.ops.remove(loop)
    outer = _nest(b, loop, k, attrs, {**attrs, "lean": False}).blocks[0]
    block_loop = outer.ops.pop()
    if movable(block_loop, autodiff=False) and not _decides(block_loop.blocks[0]):
        hoist(Builder(outer, loop.loc), block_loop)
    else:
        outer.ops.append(block_loop)


def _decides(body: Block) -> bool:
    """Whether the re-run forward makes a decision from floats (a comparison, a cast to
    i32, an argmax: a float in, something else out), which must see the forward's own
    bits: a block's products hoisted into one (16 steps' rows) round unlike the forward's
    step by step (f32's own kernels), and an `if`, a `where` or a `while` near its
    threshold took the other branch in the backward, which then differentiated a forward
    that never ran. Such a body's products stay in its steps, as the forward's."""
    return any(any(v.type.dtype in FLOATS for v in op.inputs)
               and any(v.type.dtype not in FLOATS for v in op.outputs)
               for op in walk_ops(body))


def _integer_bounds(op: Op, size) -> list:
    """Lengths lie in [1, T] (a zero length is valid, but tells a gradient check
    nothing)."""
    if not op.attrs["has_lengths"]:
        return []
    return [(op.inputs[-1], 1, size(op.inputs[0].type.shape[0]) + 1)]


def _sets_dims(op: Op) -> set:
    """The sizes a loop learns as it runs: the rows of its ragged yields once it has run,
    and at every step the trip count of each ragged sequence's step."""
    n_seq = op.attrs["n_seq"]
    rows = [ragged_rows(v.type) for v in op.inputs[:n_seq]]
    return {r.trips for r in rows if r is not None} | {
        r for r in map(ragged_rows, (v.type for v in op.outputs)) if r is not None}


def _steps(op: Op) -> list[tuple[Value, Value]]:
    """Each sequence and the loop variable that takes its steps."""
    return list(zip(op.inputs[:op.attrs["n_seq"]], op.blocks[0].args))


# ---- ONNX ----------------------------------------------------------------------------------
def _onnx(g, op: Op, xs: list[str]) -> list[str]:
    """A `Loop` of T trips (T the sequences' leading dim): trip i reads step t of every
    sequence (t = i, or T-1-i reversed) from the graph around it, carries the states and
    stacks the yields, which a reversed loop turns back into time order. Lengths were
    rewritten away before (seq_order and a mask: `_lower_lengths`).

    A Loop, not a Scan: onnxruntime runs the two about as fast (the char LM's forward on
    an AMD EPYC, 2 threads: 1.6-1.7 ms against 1.5-1.6 at B=1, 11.1-11.6 ms against
    8.7-11.0 at B=32), but OpenVINO cannot convert a Scan whose body reads a value of the
    graph around it that is not a constant (a size taken from an input's shape), which
    every loop with lengths does; it converts the Loop (docs/onnx.md). The export
    rewrites a Loop whose body is one LSTM or GRU step into ONNX's `LSTM` or `GRU` node
    (codegen/export/onnx_rnn.py)."""
    if op.attrs["has_lengths"]:
        g.fail("a `for` with lengths reaches ONNX only rewritten (prepare)")
    n_seq, n_state = op.attrs["n_seq"], op.attrs["n_state"]
    body = op.blocks[0]
    seqs, states = xs[:n_seq], xs[n_seq:n_seq + n_state]
    trips = g.op("Squeeze", g.size(seqs[0], 0), g.ints([0]))
    sub, (i, cond, *state_args) = g.subgraph("for", [("i", "i64", 0), ("cond", "bool", 0)] + [
        (v.hint or "state", v.type.dtype, v.type.rank) for v in body.args[n_seq:]])
    t = sub.op("Sub", sub.op("Sub", trips, g.const(1, "i64")), i) \
        if op.attrs["reversed"] else i
    slices = [sub.op("Gather", s, t, axis=0) for s in seqs]
    results = sub.block(body, slices + state_args)
    results[:n_state] = sub.carry(i, state_args, results[:n_state])
    outs = g.ops("Loop", [trips, g.const(True, "bool"), *states], len(op.outputs),
                 body=sub.graph([cond, *results], [BOOL] + [v.type for v in body.results]))
    if op.attrs["reversed"]:
        outs[n_state:] = [g.op("Slice", y, g.ints([-1]), g.ints([-2**63]), g.ints([0]),
                               g.ints([-1])) for y in outs[n_state:]]
    # a Loop of no trips knows no step's shape: its stacked yields came out [0, 0, ...]
    # (onnxruntime, OpenVINO) where [0, B, ...] is due; they are reshaped to their type
    for k, v in enumerate(op.outputs[n_state:], n_state):
        if all(s in g.root.bindings or s in g.root.fixed
               for d in v.type.shape for s in d.symbols):
            outs[k] = g.op("Reshape", outs[k], g.dims(v.type.shape))
    return outs


def _redraw(op: Op, positions: dict, same: dict) -> list[Op]:
    """Draw again at `positions`, carried as new last states (replay.py)."""
    op.attrs["n_state"] += replay.carry(op, positions, same, op.attrs["n_seq"],
                                        op.attrs["n_state"])
    return [op]


FOR = register(StructuredOp(
    "for",
    attrs={"n_seq": (int, REQUIRED), "n_state": (int, REQUIRED), "reversed": (bool, REQUIRED),
           "has_lengths": (bool, REQUIRED), "recompute": (bool, False),
           "checkpoint": (int, 0), "n_tape": (int, 0), "lean": (bool, False),
           "skip": (int, -1)},
    blocks=("body",), verify=_verify, reference=_reference, grad=_grad,
    trim=lambda op, live: trim_outputs(op, op.attrs["n_state"], live, op.blocks),
    rewrite=_rewrite, simplify=sink_sums, integer_bounds=_integer_bounds, steps=_steps,
    repeats=True, sets_dims=_sets_dims, redraw=_redraw,
    extra={"onnx": _onnx}))
