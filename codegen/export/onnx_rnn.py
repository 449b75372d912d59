"""A `for` whose body is one LSTM or GRU step, as ONNX's own `LSTM` or `GRU` node instead
of a `Loop`: the runtimes run those as fused kernels, where a `Loop` runs its body's
nodes one by one every trip (docs/onnx.md, "What maps to what").

The body is matched op by op against the step of std/rnn.mdl's `lstm` and `gru` (gate
orders i, f, g, o and r, z, n; the GRU's hidden bias inside r * (...), ONNX's
`linear_before_reset`), after the export's rewrites, which move the input product out of
the loop (`xs @ W` and its bias over all steps); `add`s and `mul`s are taken in either
order, and biases may be any number of vectors. Anything else
in the state's recurrence, a yield other than the new h, or an f64 model leaves the
`Loop`: a match is exact or none.

A loop with lengths reaches the export rewritten (codegen/transforms/prepare.py): it runs
forward over `seq_order(xs, lengths)`, each row's real steps first, and a state keeps
its value where `seq_mask` says a step is padding; its yields are zeros there. Such a
body maps to a node without `sequence_lens` (onnx's reference evaluator ignores them):
the steps of a row up to its length are those of the unmasked recurrence, so the yields
are the node's `Y` masked, and the final h is `Y` at step L-1 of each row (its initial
value where L is 0). The final c is not in `Y`: a loop with lengths whose final c is
read stays a `Loop`."""
from __future__ import annotations

import numpy as np

from ..ir.graph import Op, Value


class _NoMatch(Exception):
    pass


def rnn_node(g, op: Op, xs: list[str]) -> list[str] | None:
    """The outputs of `op` (a `for`) computed by an ONNX LSTM or GRU node, or None when its
    body is not one step of either (the caller writes a `Loop`)."""
    root = g.root
    if not root.rnn_ops or op.attrs["has_lengths"]:
        return None
    if any(v.type.dtype != "f32" for v in [*op.inputs, *op.outputs]
           if v.type.dtype not in ("bool", "i32")):
        return None  # onnxruntime's LSTM and GRU kernels are f32 only
    try:
        cell = _Step(op, root.producers)
        made = _LSTM(cell) if op.attrs["n_state"] == 2 else _GRU(cell)
        return cell.emit(g, xs, made, root.read)
    except _NoMatch:
        return None


def _fail():
    raise _NoMatch


def _need(ok: bool) -> None:
    if not ok:
        raise _NoMatch


class _Step:
    """The body of a `for`, read as a recurrence: its sequences' slices, states, new
    states with the lengths' mask taken off, and yields."""

    def __init__(self, op: Op, producers: dict[int, Op]):
        body = op.blocks[0]
        n_seq, n_state = op.attrs["n_seq"], op.attrs["n_state"]
        self.loop, self.outer = op, producers
        self.made = {v.id: o for o in body.ops for v in o.outputs}
        self.slices = {v.id: s for v, s in zip(body.args[:n_seq], op.inputs[:n_seq])}
        self.states = body.args[n_seq:n_seq + n_state]
        self.mask: Value | None = None       # the seq_mask's output, when lengths masked
        self.lengths: Value | None = None
        _need(1 <= n_state <= 2)
        masked = [self._unmask(r, s) for r, s in zip(body.results, self.states)]
        self.new = [new for new, _ in masked]
        keeps = {id(m) for _, m in masked}
        _need(len(keeps) == 1)
        self.yields = body.results[n_state:]
        h = self.states[0]
        _need(all(len(v.type.shape) == 2 for v in self.states))
        self.hidden = h.type.shape[1]
        _need(self.hidden.is_const)

    # ---- reading the body ------------------------------------------------------------
    def by(self, v: Value, prim: str, n: int | None = None) -> Op:
        """The body op `prim` that makes `v` (with n inputs)."""
        o = self.made.get(v.id)
        _need(o is not None and o.prim == prim and (n is None or len(o.inputs) == n))
        return o

    def unary(self, v: Value, prim: str) -> Value:
        return self.by(v, prim, 1).inputs[0]

    def pair(self, v: Value, prim: str) -> tuple[Value, Value]:
        a, b = self.by(v, prim, 2).inputs
        return a, b

    def maybe(self, v: Value, prim: str) -> tuple[Value, Value] | None:
        """The two inputs of the body op `prim` that makes `v`, or None."""
        o = self.made.get(v.id)
        return (o.inputs[0], o.inputs[1]) if o is not None and o.prim == prim and len(
            o.inputs) == 2 else None

    def prim(self, v: Value) -> str | None:
        o = self.made.get(v.id)
        return None if o is None else o.prim

    def invariant(self, v: Value) -> bool:
        """`v` is the same in every step: made outside the body."""
        return v.id not in self.made and v.id not in self.slices and all(
            v is not s for s in self.states)

    def split_part(self, v: Value, parts: int) -> tuple[Op, int]:
        """The split of the gates' columns into `parts` that `v` is a part of, and which."""
        o = self.made.get(v.id)
        _need(o is not None and o.prim == "split" and o.attrs.get("parts") == parts
              and o.attrs.get("axis") in (1, -1) and len(o.inputs[0].type.shape) == 2)
        return o, next(i for i, out in enumerate(o.outputs) if out is v)

    def is_scalar(self, v: Value, value: float) -> bool:
        o = self.made.get(v.id) or self.outer.get(v.id)
        return (o is not None and o.prim == "full" and tuple(o.attrs["shape"]) == ()
                and float(o.attrs["value"]) == value)

    def terms(self, v: Value, made: dict[int, Op]) -> list[Value]:
        """The summands of an `add` tree (of the body, or of the graph around it)."""
        o = made.get(v.id)
        if o is not None and o.prim == "add" and len(o.inputs) == 2 and all(
                x.type.shape == v.type.shape or len(x.type.shape) < len(v.type.shape)
                for x in o.inputs):
            return self.terms(o.inputs[0], made) + self.terms(o.inputs[1], made)
        return [v]

    def gates(self, v: Value, with_h: bool, width: int):
        """`v`, the pre-activations of `width` gate columns, as (the input product's
        sequence and weight, the recurrent weight or None, the biases): a sum of one
        `x @ W` (the step of a sequence computed as `xs @ W + b` before the loop), one
        `h @ U` when `with_h`, and vectors of the loop's."""
        xw, u, biases = None, None, []
        for t in self.terms(v, self.made):
            if with_h and u is None and (o := self.made.get(t.id)) is not None \
                    and o.prim == "matmul" and o.inputs[0] is self.states[0] \
                    and self.invariant(o.inputs[1]):
                u = o.inputs[1]
            elif self.invariant(t) and _vector(t, width):
                biases.append(t)
            elif xw is None:
                xw, more = self._input(t, width)
                biases += more
            else:
                _fail()
        _need(xw is not None and (u is not None or not with_h))
        _need(u is None or _sizes(u) == (self.hidden.value, width))
        return xw, u, biases

    def _input(self, t: Value, width: int):
        """A step's input product, ((the sequence xs, W), biases): the step of a sequence
        computed before the loop (the export hoists every `x @ W` of a step's slice,
        for_hoist.py)."""
        _need(t.id in self.slices)
        whole = self.slices[t.id]
        xw, biases = None, []
        for s in self.terms(whole, self.outer):
            m = self.outer.get(s.id)
            if xw is None and m is not None and m.prim == "matmul":
                xw = self._weighed(*m.inputs, width)
            elif _vector(s, width):
                biases.append(s)
            else:
                _fail()
        _need(xw is not None)
        return xw, biases

    def _weighed(self, xs: Value, w: Value, width: int) -> tuple[Value, Value]:
        _need(xs.type.rank == 3 and w.type.rank == 2 and w.type.shape[1].is_const
              and w.type.shape[1].value == width)
        return xs, w

    def _unmask(self, result: Value, state: Value) -> tuple[Value, Value | None]:
        """A new state without the lengths' `where(keep, new, state)`, and the mask's
        sequence (None where unmasked)."""
        o = self.made.get(result.id)
        if o is None or o.prim != "where" or o.inputs[2] is not state:
            return result, None
        keep = self.unary(o.inputs[0], "reshape")
        _need(keep.id in self.slices and o.inputs[0].type.rank == 2)
        mask = self.slices[keep.id]
        made = self.outer.get(mask.id)
        _need(made is not None and made.prim == "seq_mask" and len(made.inputs) == 2)
        self.mask, self.lengths = mask, made.inputs[1]
        self.keep = o.inputs[0]
        return o.inputs[1], mask

    def yielded(self, h: Value) -> None:
        """Every yield is the new h (zeros in padding steps where masked)."""
        for y in self.yields:
            if self.mask is None:
                _need(y is h)
            else:
                o = self.by(y, "where", 3)
                _need(o.inputs[0] is self.keep and o.inputs[1] is h
                      and self.is_scalar(o.inputs[2], 0.0))

    # ---- the node ----------------------------------------------------------------------
    def emit(self, g, xs: list[str], cell, read: set[int]) -> list[str]:
        loop = self.loop
        n_seq, n_state = loop.attrs["n_seq"], loop.attrs["n_state"]
        finals = loop.outputs[:n_state]
        if self.mask is not None and n_state == 2:
            _need(finals[1].id not in read)  # the final c of a masked loop: not in Y
        hidden = self.hidden.value
        x = g.name_of(cell.xs)
        initial = [g.op("Unsqueeze", s, g.ints([0])) for s in xs[n_seq:n_seq + n_state]]
        direction = "reverse" if loop.attrs["reversed"] else "forward"
        w = _onnx_weight(g, g.name_of(cell.w), cell.order)
        r = _onnx_weight(g, g.name_of(cell.u), cell.order)
        b = g.op("Unsqueeze", g.op("Concat", _bias(g, cell.bx, cell.order, hidden),
                                   _bias(g, cell.bh, cell.order, hidden), axis=0),
                 g.ints([0]))
        outs = g.ops(cell.node, [x, w, r, b, "", *initial], 1 + n_state,
                     hidden_size=hidden, direction=direction, **cell.attrs)
        every = g.op("Squeeze", outs[0], g.ints([1]))              # [T, B, H]
        last = [g.op("Squeeze", o, g.ints([0])) for o in outs[1:]]
        if self.mask is not None:
            mask = g.op("Unsqueeze", g.name_of(self.mask), g.ints([2]))
            zero = g.const(0, "f32")
            last[0] = _at_length(g, every, g.name_of(self.lengths), xs[n_seq])
            every = g.op("Where", mask, every, zero)
        return last + [every] * len(self.yields)


class _LSTM:
    """std/rnn.mdl's `lstm`: c2 = sig(f)*c + sig(i)*tanh(g), h2 = sig(o)*tanh(c2), the
    gates i, f, g, o of one sum of products. ONNX orders them i, o, f, c."""
    node, order, attrs = "LSTM", (0, 3, 1, 2), {}

    def __init__(self, s: _Step):
        h, c = s.new
        _need(s.states[1].type.shape == s.states[0].type.shape)
        gate = {}
        for sig, th in _orders(s.pair(h, "mul")):
            if s.prim(th) == "tanh" and s.unary(th, "tanh") is c:
                gate["o"] = s.unary(sig, "sigmoid")
                break
        for term in s.pair(c, "add"):
            for p, q in _orders(s.pair(term, "mul")):
                if q is s.states[1] and s.prim(p) == "sigmoid":
                    gate["f"] = s.unary(p, "sigmoid")
                    break
                if s.prim(p) == "sigmoid" and s.prim(q) == "tanh":
                    gate["i"], gate["g"] = s.unary(p, "sigmoid"), s.unary(q, "tanh")
                    break
        _need(set(gate) == set("ifgo"))
        split, _ = s.split_part(gate["i"], 4)
        _need([s.split_part(gate[k], 4) for k in "ifgo"] == [(split, k) for k in range(4)])
        width = 4 * s.hidden.value
        (self.xs, self.w), self.u, self.bx = s.gates(split.inputs[0], True, width)
        self.bh: list[Value] = []
        s.yielded(h)


class _GRU:
    """std/rnn.mdl's `gru`: r = sig(xr + hr), z = sig(xz + hz), n = tanh(xn + r*hn),
    h2 = (1 - z)*n + z*h, with x.. and h.. the parts of `x @ W + bW` and `h @ U + bU`.
    ONNX orders the gates z, r, h and computes n so with `linear_before_reset`."""
    node, order, attrs = "GRU", (1, 0, 2), {"linear_before_reset": 1}

    def __init__(self, s: _Step):
        (h,) = s.new
        h0 = s.states[0]
        for p, q in _orders(s.pair(h, "add")):
            zh, rest = s.maybe(q, "mul"), s.maybe(p, "mul")
            if zh and rest and h0 in zh:
                z = zh[1] if zh[0] is h0 else zh[0]
                break
        else:
            _fail()
        for u, n in _orders(rest):
            d = s.maybe(u, "sub")
            if d and d[1] is z and s.is_scalar(d[0], 1.0):
                break
        else:
            _fail()
        for xn, m in _orders(s.pair(s.unary(n, "tanh"), "add")):
            rhn = s.maybe(m, "mul")
            if rhn and s.prim(xn) == "split":
                break
        else:
            _fail()
        r, hn = rhn if s.prim(rhn[0]) == "sigmoid" else rhn[::-1]
        sx, i = s.split_part(xn, 3)
        sh, j = s.split_part(hn, 3)
        _need(i == 2 and j == 2 and sx is not sh)
        for gate, k in ((r, 0), (z, 1)):
            p, q = s.pair(s.unary(gate, "sigmoid"), "add")
            _need({s.split_part(p, 3), s.split_part(q, 3)} == {(sx, k), (sh, k)})
        width = 3 * s.hidden.value
        (self.xs, self.w), _, self.bx = s.gates(sx.inputs[0], False, width)
        self.u, self.bh = _h_side(s, sh.inputs[0], width)
        s.yielded(h)


def _orders(pair):
    a, b = pair
    return ((a, b), (b, a))


def _h_side(s: _Step, v: Value, width: int):
    """`h @ U` plus vectors: (U, biases)."""
    u, biases = None, []
    for t in s.terms(v, s.made):
        o = s.made.get(t.id)
        if u is None and o is not None and o.prim == "matmul" and o.inputs[0] is s.states[0] \
                and s.invariant(o.inputs[1]) and o.inputs[1].type.rank == 2:
            u = o.inputs[1]
        elif s.invariant(t) and _vector(t, width):
            biases.append(t)
        else:
            _fail()
    _need(u is not None and _sizes(u) == (s.hidden.value, width))
    return u, biases


def _vector(v: Value, width: int) -> bool:
    return _sizes(v) == (width,)


def _sizes(v: Value) -> tuple:
    """A value's shape as numbers (None for a symbolic dim)."""
    return tuple(d.value if d.is_const else None for d in v.type.shape)


def _reorder(g, x: str, order, axis: int) -> str:
    parts = g.ops("Split", [x], len(order), axis=axis, num_outputs=len(order))
    return g.op("Concat", *[parts[k] for k in order], axis=axis)


def _onnx_weight(g, w: str, order) -> str:
    """mdl's [I, gates*H] (gates in mdl's order) as ONNX's [1, gates*H, I]."""
    return g.op("Unsqueeze", g.op("Transpose", _reorder(g, w, order, 1), perm=[1, 0]),
                g.ints([0]))


def _bias(g, biases: list[Value], order, hidden: int) -> str:
    if not biases:
        return g.const(np.zeros(len(order) * hidden, np.float32), "f32")
    total = g.name_of(biases[0])
    for v in biases[1:]:
        total = g.op("Add", total, g.name_of(v))
    return _reorder(g, total, order, 0)


def _at_length(g, every: str, lengths: str, initial: str) -> str:
    """Each row's value at its last real step: `every[min(L, T) - 1, b]` ([T, B, H]), or
    `initial` where L <= 0; by a mask and a sum, not a gather (an exact sum of one value
    and zeros)."""
    steps = g.size(every, 0)
    length = g.op("Min", g.op("Cast", lengths, to=g.dtype("i64")), steps)
    t = g.op("Range", g.const(0, "i64"), g.op("Squeeze", steps, g.ints([0])),
             g.const(1, "i64"))
    hit = g.op("Equal", g.op("Unsqueeze", t, g.ints([1])),
               g.op("Unsqueeze", g.op("Sub", length, g.ints([1])), g.ints([0])))
    picked = g.op("ReduceSum", g.op("Where", g.op("Unsqueeze", hit, g.ints([2])), every,
                                    g.const(0, "f32")), g.ints([0]), keepdims=0)
    real = g.op("Unsqueeze", g.op("Greater", length, g.ints([0])), g.ints([1]))
    return g.op("Where", real, picked, initial)
