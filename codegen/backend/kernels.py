"""The statements of each kernel primitive, attached as `extra["statements"]` (the rest of a
primitive's lowering is shared too: backend/op_lowering.py): lines(r, op, inputs, in_ptrs,
out_ptrs) -> C++ statements calling the target's runtime, whose functions have the same
names and arguments on every target (cpp_runtime/mdl/kernels.h and mdl/blas.h on the CPU,
mdl/cuda/primitives.h on the GPU); `r.target.call` spells the call. `inputs` are the values
the kernel reads, possibly contiguous copies of `op.inputs`. A target may replace a
kernel's statements (`Target.kernel`: the CPU's products of a packed operand).
"""
from __future__ import annotations

from ..ir.shapes import Dim, contiguous_strides, numel
from ..ops.primitives.core import TABLE
from .cexpr import c_float, c_string
from .op_lowering import ctype_of, indices_named, matrix_order, offset_expr


def statements(name: str, lines) -> None:
    """Attach `lines(r, op, inputs, in_ptrs, out_ptrs)` as primitive `name`'s statements."""
    TABLE[name].extra["statements"] = lines


def _shape(r, shape) -> str:
    return "{" + ", ".join(r.dim(d) for d in shape) + "}" if shape else "{int64_t(1)}"


def _reduce(kind: str):
    def lines(r, op, inputs, ins, outs):
        x = inputs[0]
        mask = sum(1 << a for a in op.attrs["axes"])
        rank = max(1, x.type.rank)
        return [f"{{ const int64_t sh[] = {_shape(r, x.type.shape)}; "
                f"{r.target.call('reduce')}mdl::Reduction::{kind}, {ins[0]}, sh, {rank}, {mask}u, "
                f"{outs[0]}); }}"]
    return lines


for _name, _kind in (("sum", "Sum"), ("max", "Max"), ("mean", "Mean"), ("logsumexp", "LogSumExp")):
    statements(_name, _reduce(_kind))


def _sum_to(r, op, inputs, ins, outs):
    x = inputs[0]
    mask = sum(1 << a for a in TABLE["sum_to"].extra["sums"](op))
    return [f"{{ const int64_t sh[] = {_shape(r, x.type.shape)}; "
            f"{r.target.call('reduce')}mdl::Reduction::Sum, {ins[0]}, sh, {max(1, x.type.rank)}, {mask}u, "
            f"{outs[0]}); }}"]


statements("sum_to", _sum_to)


def _rows(r, op, inputs) -> str:
    """outer, n, inner: the [outer, n, inner] layout of the operand along op's `axis`, as
    the runtime's row kernels (softmax, argmax, topk) take it."""
    shape, axis = inputs[0].type.shape, op.attrs["axis"]
    return (f"{r.dim(numel(shape[:axis]))}, {r.dim(shape[axis])}, "
            f"{r.dim(numel(shape[axis + 1:]))}")


def _softmax(log: bool):
    def lines(r, op, inputs, ins, outs):
        return [f"{r.target.call('softmax')}{'true' if log else 'false'}, {ins[0]}, "
                f"{_rows(r, op, inputs)}, {outs[0]});"]
    return lines


statements("softmax", _softmax(False))
statements("log_softmax", _softmax(True))
statements("cumsum", lambda r, op, inputs, ins, outs: [
    f"{r.target.call('cumsum')}{'true' if op.attrs['reverse'] else 'false'}, {ins[0]}, "
    f"{_rows(r, op, inputs)}, {outs[0]});"])
statements("argmax", lambda r, op, inputs, ins, outs: [
    f"{r.target.call('argmax')}{ins[0]}, {_rows(r, op, inputs)}, {outs[0]});"])
statements("topk", lambda r, op, inputs, ins, outs: [
    f"{r.target.call('topk')}{ins[0]}, {_rows(r, op, inputs)}, {op.attrs['k']}, "
    f"{outs[0]}, {outs[1]});"])


def _cross_entropy(r, op, inputs, ins, outs):
    """The mean loss into outs[0]: logits, targets, lengths (or nullptr), rows, classes,
    batch, the targets' name, the lengths' (checked in [0, T] as a loop's)."""
    logits, targets = inputs[0], inputs[1]
    lengths = ins[2] if len(ins) > 2 else "nullptr"
    batch = r.dim(targets.type.shape[1]) if len(ins) > 2 else "1"
    named = c_string(op.attrs.get("lengths_name") or "lengths")
    return [f"{r.target.call('cross_entropy')}{ins[0]}, {ins[1]}, {lengths}, "
            f"{r.dim(numel(targets.type.shape))}, {r.dim(logits.type.shape[-1])}, {batch}, "
            f"{indices_named(r, op, op.inputs[1])}, {named}, {outs[0]});"]


statements("cross_entropy", _cross_entropy)


def gemm_operand(r, v) -> tuple[str, str]:
    """(transposed, leading dimension) of a product's operand; BLAS wants ld >= the
    stored row length."""
    if v.type.rank != 2:
        return "false", r.dim(v.type.shape[-1])
    (rows, cols), (s0, s1) = v.type.shape, r.layout(v).strides
    if matrix_order(v, r.layout(v)) == "rows":
        return "false", f"std::max<int64_t>({r.dim(s0)}, {r.dim(cols)})"
    return "true", f"std::max<int64_t>({r.dim(s1)}, {r.dim(rows)})"


def gemm_sizes(r, a, b) -> tuple[str, str, str]:
    """m, n, k of a @ b (a's leading dims are rows)."""
    k, n = b.type.shape
    return r.dim(numel(a.type.shape[:-1])), r.dim(n), r.dim(k)


def gemm_arguments(r, op, inputs, ins, outs, accumulate=False) -> list[str]:
    """A row-major GEMM's arguments but alpha (1): ta, tb, m, n, k, a, lda, b, ldb, beta,
    c, ldc; `accumulate`: beta 1, the product added into what the output's memory holds
    (lower.Kernel)."""
    a, b = inputs
    m, n, k = gemm_sizes(r, a, b)
    ta, lda = gemm_operand(r, a)
    tb, ldb = gemm_operand(r, b)
    beta = f"{ctype_of(op, r)}({1 if accumulate else 0})"
    return [ta, tb, m, n, k, ins[0], lda, ins[1], ldb, beta, outs[0], n]


def _matmul(r, op, inputs, ins, outs, accumulate=False):
    args = gemm_arguments(r, op, inputs, ins, outs, accumulate)
    args.insert(5, f"{ctype_of(op, r)}(1)")  # alpha
    return [f"{r.target.call('gemm')}{', '.join(args)});"]


statements("matmul", _matmul)


def _bmm(r, op, inputs, ins, outs):
    """batch, m, n, k, a, b, c of `@` of two batches of matrices (each contiguous)."""
    a, b = inputs
    m, k = a.type.shape[-2:]
    return [f"{r.target.call('batched_gemm')}{r.dim(numel(a.type.shape[:-2]))}, {r.dim(m)}, "
            f"{r.dim(b.type.shape[-1])}, {r.dim(k)}, {ins[0]}, {ins[1]}, {outs[0]});"]


statements("bmm", _bmm)


def _gather(r, op, inputs, ins, outs):
    table, ids = inputs
    return [f"{r.target.call('gather')}{ins[0]}, {r.dim(table.type.shape[0])}, "
            f"{r.dim(numel(table.type.shape[1:]))}, {ins[1]}, {r.dim(numel(ids.type.shape))}, "
            f"{outs[0]}, {indices_named(r, op, op.inputs[1])});"]


statements("gather", _gather)


def _scatter_add(r, op, inputs, ins, outs):
    g, ids = inputs
    out = op.outputs[0]
    return [f"{r.target.call('scatter_add')}{ins[0]}, {r.dim(numel(out.type.shape[1:]))}, {ins[1]}, "
            f"{r.dim(numel(ids.type.shape))}, {r.dim(out.type.shape[0])}, {outs[0]}, "
            f"{indices_named(r, op, op.inputs[1])});"]


statements("scatter_add", _scatter_add)
# a check of the call's data (ops/primitives/checks.py): raises, or sets its result true
def _assert(r, op, inputs, ins, outs):
    n = r.dim(numel(inputs[0].type.shape))
    if len(inputs) == 1:
        return [f"{r.target.call('check_all')}{ins[0]}, {n}, {c_string(op.attrs['what'])}, "
                f"{outs[0]});"]
    # in a loop's body: each step before its part of `after`, a NUL before each part
    # (mdl/faults.h); k steps a row, on a last axis of k where k > 1
    text = c_string(op.attrs["what"] + "\0" + op.attrs["after"])
    k = op.attrs["after"].count("\0") + 1
    shape = inputs[1].type.shape
    rows = r.dim(numel(shape if k == 1 else shape[:-1]))
    return [f"{r.target.call('check_all_at')}{ins[0]}, {n}, {text}, {outs[0]}, {ins[1]}, "
            f"{rows}{f', {k}' if k > 1 else ''});"]


statements("assert", _assert)
statements("one_hot", lambda r, op, inputs, ins, outs: [
    f"{r.target.call('one_hot')}{ins[0]}, {r.dim(numel(inputs[0].type.shape))}, "
    f"{r.dim(Dim.of(op.attrs['n']))}, {outs[0]});"])  # n may be symbolic (a dim S)


statements("range", lambda r, op, inputs, ins, outs: [
    f"{r.target.call('range')}{r.dim(Dim.of(op.attrs['n']))}, {op.attrs['start']}, "
    f"{op.attrs['step']}, {outs[0]});"])


def _unindex(r, op, inputs, ins, outs):
    g, i = inputs
    out = op.outputs[0]
    size = r.dim(numel(g.type.shape))
    return [r.target.fill(outs[0], r.dim(numel(out.type.shape)), f"{ctype_of(op, r)}(0)"),
            r.target.copy(f"{outs[0]} + mdl::checked_index({r.scalar(i)}, "
                          f"{r.dim(out.type.shape[0])}, {indices_named(r, op, op.inputs[1])}) * "
                          f"{size}", ins[0], size)]


statements("unindex", _unindex)


def _unslice(r, op, inputs, ins, outs):
    """Zeros of the output's shape with the input written at `starts`."""
    out, g = op.outputs[0], inputs[0]
    r.emit(r.target.fill(outs[0], r.dim(numel(out.type.shape)), f"{ctype_of(op, r)}(0)"))
    strides = contiguous_strides(out.type.shape)
    r.assign(r.region(out, offset_expr(r, op.attrs["starts"], strides), g.type, strides), g)
    return []


statements("unslice", _unslice)


def _gather_into(r, op, inputs, ins, outs):
    """Each input into its region of the output (backend/op_lowering.py's `gathers`)."""
    for x, (offset, strides) in zip(inputs, TABLE[op.prim].extra["gathers"](r, op)):
        r.assign(r.region(op.outputs[0], offset, x.type, strides), x)
    return []


statements("concat", _gather_into)
statements("stack", _gather_into)


def _seq_order(r, op, inputs, ins, outs):
    x = inputs[0]
    name = c_string(r.origins.lengths(op.inputs[1]))
    return [f"{r.target.call('seq_order')}{'true' if op.attrs['reversed'] else 'false'}, {ins[0]}, "
            f"{ins[1]}, {r.dim(x.type.shape[0])}, {r.dim(x.type.shape[1])}, "
            f"{r.dim(numel(x.type.shape[2:]))}, {outs[0]}, {name});"]


statements("seq_order", _seq_order)


def _seq_mask(r, op, inputs, ins, outs):
    x = inputs[0]
    if len(ins) == 1:
        return [r.target.fill(outs[0], r.dim(x.type.shape[0]), f"{ctype_of(op, r)}(1)")]
    return [f"{r.target.call('seq_mask')}{ins[1]}, {r.dim(x.type.shape[0])}, {r.dim(x.type.shape[1])}, "
            f"{outs[0]});"]


statements("seq_mask", _seq_mask)


def _segment(r, op, inputs, ins, outs):
    x, out = inputs[0], op.outputs[0]
    size = r.dim(numel(x.type.shape))
    return [r.target.fill(outs[0], r.dim(numel(out.type.shape)), f"{ctype_of(op, r)}(0)"),
            r.target.copy(outs[0], ins[0], size)]


statements("segment", _segment)


DRAW = "m.draw"  # a call's random numbers, counted on the host (mdl/model.h's State::draw)


def _dropout_like(mask_only: bool):
    def lines(r, op, inputs, ins, outs):
        n = r.dim(numel(inputs[0].type.shape))
        if not r.spec.training:
            return [r.target.fill(outs[0], n, f"{ctype_of(op, r)}(1)") if mask_only else
                    r.target.copy(outs[0], ins[0], n)]
        salt = f"uint64_t({op.attrs['salt']})"
        drawn = n if r.drawing is None else f"({r.drawing} ? {n} : 0)"
        return [f"{r.target.call('dropout')}{'true' if mask_only else 'false'}, {ins[0]}, {n}, "
                f"{c_float(op.attrs['p'])}, mdl::derive(m.dropout_key, {salt}), "
                f"{DRAW}({salt}, {drawn}), {outs[0]});"]
    return lines


def open_streams(salts: set[int]) -> list[str]:
    """Statements making the random streams `salts` (ops' `salt`) exist before loops run
    at once draw from them, each loop from streams of its own: State::draw then only
    finds them, which threads may do at once."""
    return [f"{DRAW}(uint64_t({salt}), 0);" for salt in sorted(salts)]


statements("dropout", _dropout_like(False))
statements("dropout_mask", _dropout_like(True))


def _rng_position(r, op, inputs, ins, outs):
    salt = f"uint64_t({op.attrs['salt']})"
    return [f"{r.target.call('rng_position')}{DRAW}({salt}, 0), "
            f"mdl::derive(m.dropout_key, {salt}), {outs[0]});"]


def _dropout_replay(r, op, inputs, ins, outs):
    n = r.dim(numel(inputs[0].type.shape))
    if not r.spec.training:
        return [r.target.fill(outs[0], n, f"{ctype_of(op, r)}(1)")]
    return [f"{r.target.call('dropout_replay')}{ins[1]}, {n}, {c_float(op.attrs['p'])}, "
            f"{outs[0]});"]


def _rng_skip(r, op, inputs, ins, outs):
    n = r.dim(numel(inputs[1].type.shape))
    drawn = n if r.drawing is None else f"({r.drawing} ? {n} : 0)"  # as the draw counted
    return [f"{r.target.call('rng_skip')}{ins[0]}, {drawn}, {outs[0]});"]


statements("rng_position", _rng_position)
statements("dropout_replay", _dropout_replay)
statements("rng_skip", _rng_skip)
