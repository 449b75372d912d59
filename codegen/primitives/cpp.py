"""The native emission hooks of the table, one per primitive, attached as `extra["cpp"]`:
- ("elementwise", expr(args, op, r)): a scalar C++ expression of the operands' scalars,
  fused into loop nests by the backend;
- ("const", value(op)): a uniform constant, which needs no memory;
- ("view", layout(r, op, i, strides), needs_contiguous): output i re-addresses the
  input's memory (offset, strides);
- ("kernel", lines(r, op, inputs, in_ptrs, out_ptrs), accepts): statements; `accepts`
  (bool, or a predicate on an input's layout) says which inputs may be strided views.
`r` is the backend's renderer: `r.dim(d)`, `r.ctype(v)`, `r.scalar(v)`, `r.layout(v)`.
"""
from __future__ import annotations

from ..shapes import Dim
from .core import TABLE


def attach_cpp(name: str, *hook) -> None:
    TABLE[name].extra["cpp"] = hook


def _t(op, r, i=None):
    """The C++ type of output 0 (or of input i)."""
    v = op.outputs[0] if i is None else op.inputs[i]
    return r.ctype(v)


# ---- elementwise ------------------------------------------------------------------------
def _call(fn):
    return lambda a, op, r: f"{r.d.math(fn)}({a[0]})"


for _fn in ("exp", "log", "tanh", "sqrt", "sin", "cos", "abs"):
    attach_cpp(_fn, "elementwise", _call(_fn))
attach_cpp("sigmoid", "elementwise",
           lambda a, op, r: f"({_t(op, r)}(1) / ({_t(op, r)}(1) + {r.d.math('exp')}(-{a[0]})))")
attach_cpp("sign", "elementwise",
           lambda a, op, r: f"{_t(op, r)}(({a[0]} > {_t(op, r)}(0)) - ({a[0]} < {_t(op, r)}(0)))")
attach_cpp("neg", "elementwise", lambda a, op, r: f"(-{a[0]})")
attach_cpp("relu", "elementwise",
           lambda a, op, r: f"({a[0]} > {_t(op, r)}(0) ? {a[0]} : {_t(op, r)}(0))")
attach_cpp("not", "elementwise", lambda a, op, r: f"uint8_t(!{a[0]})")
for _name, _sym in (("add", "+"), ("sub", "-"), ("mul", "*"), ("div", "/")):
    attach_cpp(_name, "elementwise", lambda a, op, r, s=_sym: f"({a[0]} {s} {a[1]})")
for _name, _sym in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="), ("eq", "=="),
                    ("ne", "!="), ("and", "&&"), ("or", "||")):
    attach_cpp(_name, "elementwise", lambda a, op, r, s=_sym: f"uint8_t({a[0]} {s} {a[1]})")
attach_cpp("pow", "elementwise", lambda a, op, r: f"{r.d.math('pow')}({a[0]}, {a[1]})")
attach_cpp("maximum", "elementwise",
           lambda a, op, r: f"({a[0]} > {a[1]} ? {a[0]} : {a[1]})")
attach_cpp("minimum", "elementwise",
           lambda a, op, r: f"({a[0]} < {a[1]} ? {a[0]} : {a[1]})")
attach_cpp("where", "elementwise", lambda a, op, r: f"({a[0]} ? {a[1]} : {a[2]})")
attach_cpp("cast", "elementwise", lambda a, op, r: f"static_cast<{_t(op, r)}>({a[0]})")
attach_cpp("add_n", "elementwise", lambda a, op, r: "(" + " + ".join(a) + ")")

# ---- constants --------------------------------------------------------------------------
attach_cpp("full", "const", lambda op: op.attrs["value"])
attach_cpp("zeros_like", "const", lambda op: 0)


# ---- views ------------------------------------------------------------------------------
def _offset(r, starts, strides) -> str:
    terms = [f"{r.dim(s)} * {r.dim(st)}" for s, st in zip(starts, strides) if s != Dim.of(0)]
    return " + ".join(terms) or "0"


def _contiguous(shape) -> tuple:
    out, acc = [], Dim.of(1)
    for d in reversed(shape):
        out.append(acc)
        acc = acc * d
    return tuple(reversed(out))


attach_cpp("reshape", "view",
           lambda r, op, i, st: ("0", _contiguous(op.outputs[0].type.shape)), True)
attach_cpp("unsegment", "view",
           lambda r, op, i, st: ("0", _contiguous(op.outputs[0].type.shape)), True)
attach_cpp("index", "view", lambda r, op, i, st: (
    f"mdl::checked_index({r.scalar(op.inputs[1])}, {r.dim(op.inputs[0].type.shape[0])}) * "
    f"{r.dim(st[0])}", st[1:]), False)
attach_cpp("slice", "view",
           lambda r, op, i, st: (_offset(r, op.attrs["starts"], st), st), False)
attach_cpp("transpose", "view",
           lambda r, op, i, st: ("0", tuple(st[p] for p in op.attrs["perm"])), False)


def _split_view(r, op, i, st):
    axis = op.attrs["axis"]
    piece = op.outputs[0].type.shape[axis]
    return f"{i} * {r.dim(piece)} * {r.dim(st[axis])}", st


attach_cpp("split", "view", _split_view, False)


def _broadcast_view(r, op, i, st):
    x, shape = op.inputs[0], op.outputs[0].type.shape
    strides = [Dim.of(0) if d == Dim.of(1) else s for d, s in zip(x.type.shape, st)]
    return "0", (Dim.of(0),) * (len(shape) - x.type.rank) + tuple(strides)


attach_cpp("broadcast_to", "view", _broadcast_view, False)


# ---- kernels ----------------------------------------------------------------------------
def _shape(r, shape) -> str:
    return "{" + ", ".join(r.dim(d) for d in shape) + "}" if shape else "{int64_t(1)}"


def _numel(r, shape) -> str:
    total = Dim.of(1)
    for d in shape:
        total = total * d
    return r.dim(total)


def _reduce(kind: int):
    def lines(r, op, inputs, ins, outs):
        x = inputs[0]
        mask = sum(1 << a for a in op.attrs["axes"])
        rank = max(1, x.type.rank)
        return [f"{{ const int64_t sh[] = {_shape(r, x.type.shape)}; "
                f"mdl::reduce({kind}, {ins[0]}, sh, {rank}, {mask}u, {outs[0]}); }}"]
    return lines


for _k, _name in enumerate(("sum", "max", "mean", "logsumexp")):
    attach_cpp(_name, "kernel", _reduce(_k), False)


def _sum_to(r, op, inputs, ins, outs):
    x, shape = inputs[0], tuple(op.attrs["shape"])
    lead = x.type.rank - len(shape)
    mask = sum(1 << a for a in range(lead)) + sum(
        1 << (lead + i) for i, d in enumerate(shape)
        if d == Dim.of(1) and x.type.shape[lead + i] != Dim.of(1))
    return [f"{{ const int64_t sh[] = {_shape(r, x.type.shape)}; "
            f"mdl::reduce(0, {ins[0]}, sh, {max(1, x.type.rank)}, {mask}u, {outs[0]}); }}"]


attach_cpp("sum_to", "kernel", _sum_to, False)


def _softmax(log: bool):
    def lines(r, op, inputs, ins, outs):
        shape, axis = inputs[0].type.shape, op.attrs["axis"]
        return [f"mdl::softmax({'true' if log else 'false'}, {ins[0]}, "
                f"{_numel(r, shape[:axis])}, {r.dim(shape[axis])}, "
                f"{_numel(r, shape[axis + 1:])}, {outs[0]});"]
    return lines


attach_cpp("softmax", "kernel", _softmax(False), False)
attach_cpp("log_softmax", "kernel", _softmax(True), False)


def _cross_entropy(r, op, inputs, ins, outs):
    logits, targets = inputs[0], inputs[1]
    lengths = ins[2] if len(ins) > 2 else "nullptr"
    batch = r.dim(targets.type.shape[1]) if len(ins) > 2 else "1"
    return [f"{outs[0]}[0] = mdl::cross_entropy({ins[0]}, {ins[1]}, {lengths}, "
            f"{_numel(r, targets.type.shape)}, {r.dim(logits.type.shape[-1])}, {batch});"]


attach_cpp("cross_entropy", "kernel", _cross_entropy, False)


def _matrix(v, layout):
    """How GEMM reads a rank-2 view: ("rows" or "cols" contiguous) or None. A dim of
    size 1 has no meaningful stride, so it never decides."""
    (rows, cols), (s0, s1) = v.type.shape, layout.strides
    one = Dim.of(1)
    if cols == one or s1 == one:
        return "rows"
    if rows == one or s0 == one:
        return "cols"
    return None


def _matmul_ok(r, op, i, layout) -> bool:
    """GEMM reads a row-major or transposed matrix in place; `a` may also be a
    contiguous batch of rows."""
    v = op.inputs[i]
    if layout.is_const:
        return False
    if v.type.rank == 2 and _matrix(v, layout) is not None:
        return True
    return r.low.is_contiguous(v)


def _matmul(r, op, inputs, ins, outs):
    a, b = inputs
    k, n = b.type.shape
    m = _numel(r, a.type.shape[:-1])

    def operand(v):
        """(transposed, leading dimension); BLAS wants ld >= the stored row length."""
        if v.type.rank != 2:
            return "false", r.dim(v.type.shape[-1])
        (rows, cols), (s0, s1) = v.type.shape, r.layout(v).strides
        if _matrix(v, r.layout(v)) == "rows":
            return "false", f"std::max<int64_t>({r.dim(s0)}, {r.dim(cols)})"
        return "true", f"std::max<int64_t>({r.dim(s1)}, {r.dim(rows)})"
    ta, lda = operand(a)
    tb, ldb = operand(b)
    one, zero = f"{_t(op, r)}(1)", f"{_t(op, r)}(0)"
    return [f"mdl::gemm({ta}, {tb}, {m}, {r.dim(n)}, {r.dim(k)}, {one}, {ins[0]}, {lda}, "
            f"{ins[1]}, {ldb}, {zero}, {outs[0]}, {r.dim(n)});"]


attach_cpp("matmul", "kernel", _matmul, _matmul_ok)


def _gather(r, op, inputs, ins, outs):
    table, ids = inputs
    return [f"mdl::gather({ins[0]}, {r.dim(table.type.shape[0])}, "
            f"{_numel(r, table.type.shape[1:])}, {ins[1]}, {_numel(r, ids.type.shape)}, "
            f"{outs[0]});"]


attach_cpp("gather", "kernel", _gather, False)


def _scatter_add(r, op, inputs, ins, outs):
    g, ids = inputs
    out = op.outputs[0]
    return [f"mdl::scatter_add({ins[0]}, {_numel(r, out.type.shape[1:])}, {ins[1]}, "
            f"{_numel(r, ids.type.shape)}, {r.dim(out.type.shape[0])}, {outs[0]});"]


attach_cpp("scatter_add", "kernel", _scatter_add, False)
attach_cpp("one_hot", "kernel", lambda r, op, inputs, ins, outs: [
    f"mdl::one_hot({ins[0]}, {_numel(r, inputs[0].type.shape)}, {op.attrs['n']}, {outs[0]});"],
    False)


def _unindex(r, op, inputs, ins, outs):
    g, i = inputs
    out = op.outputs[0]
    size = _numel(r, g.type.shape)
    return [f"mdl::fill({outs[0]}, {_numel(r, out.type.shape)}, {_t(op, r)}(0));",
            f"mdl::copy({outs[0]} + mdl::checked_index({r.scalar(i)}, "
            f"{r.dim(out.type.shape[0])}) * {size}, {ins[0]}, {size});"]


attach_cpp("unindex", "kernel", _unindex, False)


def _unslice(r, op, inputs, ins, outs):
    """Zeros of the output's shape with the input written at `starts`."""
    out, g = op.outputs[0], inputs[0]
    r.emit(f"mdl::fill({outs[0]}, {_numel(r, out.type.shape)}, {_t(op, r)}(0));")
    strides = _contiguous(out.type.shape)
    r.assign(r.region(out, _offset(r, op.attrs["starts"], strides), g.type, strides), g)
    return []


attach_cpp("unslice", "kernel", _unslice, True)


def _concat_like(stack: bool):
    def lines(r, op, inputs, ins, outs):
        out, axis = op.outputs[0], op.attrs["axis"]
        strides = _contiguous(out.type.shape)
        at = Dim.of(0)
        for x in inputs:
            if stack:
                view_type = x.type
                region = r.region(out, f"{r.dim(at)} * {r.dim(strides[axis])}", view_type,
                                  strides[:axis] + strides[axis + 1:])
                at = at + 1
            else:
                region = r.region(out, f"{r.dim(at)} * {r.dim(strides[axis])}", x.type, strides)
                at = at + x.type.shape[axis]
            r.assign(region, x)
        return []
    return lines


attach_cpp("concat", "kernel", _concat_like(False), True)
attach_cpp("stack", "kernel", _concat_like(True), True)


def _seq_order(r, op, inputs, ins, outs):
    x = inputs[0]
    return [f"mdl::seq_order({'true' if op.attrs['reversed'] else 'false'}, {ins[0]}, "
            f"{ins[1]}, {r.dim(x.type.shape[0])}, {r.dim(x.type.shape[1])}, "
            f"{_numel(r, x.type.shape[2:])}, {outs[0]});"]


attach_cpp("seq_order", "kernel", _seq_order, False)


def _seq_mask(r, op, inputs, ins, outs):
    x = inputs[0]
    if len(ins) == 1:
        return [f"mdl::fill({outs[0]}, {r.dim(x.type.shape[0])}, uint8_t(1));"]
    return [f"mdl::seq_mask({ins[1]}, {r.dim(x.type.shape[0])}, {r.dim(x.type.shape[1])}, "
            f"{outs[0]});"]


attach_cpp("seq_mask", "kernel", _seq_mask, False)


def _segment(r, op, inputs, ins, outs):
    x, out = inputs[0], op.outputs[0]
    size = _numel(r, x.type.shape)
    return [f"mdl::fill({outs[0]}, {_numel(r, out.type.shape)}, {_t(op, r)}(0));",
            f"mdl::copy({outs[0]}, {ins[0]}, {size});"]


attach_cpp("segment", "kernel", _segment, False)


def _dropout_like(mask_only: bool):
    def lines(r, op, inputs, ins, outs):
        n = _numel(r, inputs[0].type.shape)
        if not r.spec.training:
            return [f"mdl::fill({outs[0]}, {n}, {_t(op, r)}(1));" if mask_only else
                    f"mdl::copy({outs[0]}, {ins[0]}, {n});"]
        salt = f"uint64_t({op.attrs['salt']})"
        return [f"mdl::dropout({'true' if mask_only else 'false'}, {ins[0]}, {n}, "
                f"{float(op.attrs['p'])!r}, mdl::derive(m.dropout_key, {salt}), "
                f"m.draw({salt}, {n}), {outs[0]});"]
    return lines


attach_cpp("dropout", "kernel", _dropout_like(False), False)
attach_cpp("dropout_mask", "kernel", _dropout_like(True), False)
