"""A `Loop` whose body is one LSTM or GRU step, rewritten into ONNX's own `LSTM` or `GRU`
node: the runtimes run those as fused kernels, where a `Loop` runs its body's nodes one
by one every trip (docs/onnx.md, "LSTM and GRU loops").

A pass over the model's graph as the ops' rules wrote it (a `for` is a `Loop`,
for_op.py): each `Loop` body is read node by node against the step of std/rnn.mdl's
`lstm` and `gru` (gate orders i, f, g, o and r, z, n; the GRU's hidden bias inside
r * (...), ONNX's `linear_before_reset`), after the export's rewrites, which move the
input product out of the loop (`xs @ W` and its bias over all steps) where the step's
input is not random. `Add`s and `Mul`s may come in either order, the biases be any
number of vectors, and `Identity`s (dropout's, in an inference graph) stand anywhere. Anything else in the
recurrence, a yield other than the new h, or an f64 model leaves the `Loop`: a match is
exact or none.

A loop with lengths reaches the export rewritten (codegen/transforms/prepare.py): it runs
forward over each row's real steps first (`seq_order`), and a state keeps its value
where the mask `t < L[b]` says a step is padding; its yields are zeros there. Such a body
maps to a node without `sequence_lens` (onnx's reference evaluator ignores them): the
steps of a row up to its length are those of the unmasked recurrence, so the yields are
the node's `Y` masked, and the final h is `Y` at step L-1 of each row (its initial value
where L is 0). The final c is not in `Y`: a loop with lengths whose final c is read
stays a `Loop`."""
from __future__ import annotations

import numpy as np

from .onnx_graph import OnnxGraph, helper, numpy_helper, reads


class _NoMatch(Exception):
    pass


def fuse_rnn_loops(top: OnnxGraph, outputs: set[str]) -> None:
    """Rewrite each `Loop` of the model's graph `top` whose body is one LSTM or GRU step
    into that node, in place; `outputs`: the names the model's outputs are."""
    fused = False
    for node in list(top.nodes):
        if node.op_type != "Loop":
            continue
        try:
            loop = _Loop(top, node, outputs)
            loop.emit(_LSTM(loop) if loop.n_state == 2 else _GRU(loop))
        except _NoMatch:
            try:  # the states as (c, h): a step that assigns c before h
                loop = _Loop(top, node, outputs, swap=True)
                loop.emit(_LSTM(loop))
            except _NoMatch:
                continue
        top.nodes = [n for n in top.nodes if n is not node]
        fused = True
    if fused:
        top.nodes = _ordered(top.nodes)


def _need(ok: bool) -> None:
    if not ok:
        raise _NoMatch


class _Loop:
    """A `Loop` node read as a recurrence: its steps' slices of sequences around it, its
    states, their new values with the lengths' mask taken off, and its yields. The states
    are in the Loop's order (that of the step's first assignments), or with `swap` of two
    the other way round: an LSTM's h comes first."""

    def __init__(self, top: OnnxGraph, node, outputs: set[str], swap: bool = False):
        self.top, self.node = top, node
        self.types = top.root.types
        self.outer = {o: n for n in top.nodes for o in n.output}
        body = next(a.g for a in node.attribute if a.name == "body")
        # the body's nodes, read through its `Identity`s (dropout's, a repeated yield's)
        self.alias = {n.output[0]: n.input[0] for n in body.node if n.op_type == "Identity"}
        self.made = {}
        for n in body.node:
            through = type(n)()
            through.CopyFrom(n)
            through.input[:] = [self.source(x) for x in n.input]
            self.made.update((o, through) for o in n.output)
        trips, go, *self.initial = node.input
        self.trips, self.step = trips, body.input[0].name
        self.states = [v.name for v in body.input[2:]]
        self.n_state = len(self.states)
        results = [self.source(v.name) for v in body.output]
        _need(trips != "" and self.holds(go, True) and results[0] == body.input[1].name)
        _need(self.n_state in (1, 2) and len(self.initial) == self.n_state)
        self.finals = list(node.output[:self.n_state])  # the states' values after it
        if swap:
            _need(self.n_state == 2)
            for listed in (self.states, self.initial, self.finals):
                listed.reverse()
            results[1:3] = results[2:0:-1]
        self.reverse: bool | None = None
        self.mask = self.keep = self.lengths = None
        self.new = [self._unmask(r, s) for r, s in zip(results[1:], self.states)]
        self.yields = results[1 + self.n_state:]
        types = [self.types.get(s) for s in self.initial]
        _need(all(t is not None and t.dtype == "f32" and t.rank == 2 for t in types))
        _need(len({t.shape for t in types}) == 1 and types[0].shape[1].is_const)
        self.hidden = types[0].shape[1].value
        self.outputs = outputs
        self.read = reads([n for n in top.nodes if n is not node]) | outputs

    # ---- reading the graph -------------------------------------------------------------
    def by(self, name: str, op_type: str, n: int | None = None):
        """The body node `op_type` that makes `name` (with n inputs)."""
        node = self.made.get(name)
        _need(node is not None and node.op_type == op_type
              and (n is None or len(node.input) == n))
        return node

    def kind(self, name: str) -> str | None:
        node = self.made.get(name)
        return None if node is None else node.op_type

    def unary(self, name: str, op_type: str) -> str:
        return self.by(name, op_type, 1).input[0]

    def pair(self, name: str, op_type: str) -> tuple[str, str]:
        a, b = self.by(name, op_type, 2).input
        return a, b

    def maybe(self, name: str, op_type: str) -> tuple[str, str] | None:
        """The two inputs of the body node `op_type` that makes `name`, or None."""
        node = self.made.get(name)
        if node is None or node.op_type != op_type or len(node.input) != 2:
            return None
        return node.input[0], node.input[1]

    def source(self, name: str) -> str:
        """`name` without the body's `Identity`s."""
        while name in self.alias:
            name = self.alias[name]
        return name

    def value(self, name: str) -> np.ndarray | None:
        """The value of a `Constant` (of the body or the graph around it), else None."""
        node = self.made.get(name) or self.outer.get(name)
        if node is None or node.op_type != "Constant":
            return None
        return numpy_helper.to_array(node.attribute[0].t)

    def holds(self, name: str, *numbers) -> bool:
        """`name` is a constant holding just `numbers`."""
        array = self.value(name)
        return array is not None and array.size == len(numbers) and bool(
            np.all(array.ravel() == np.array(numbers)))

    def around(self, name: str) -> bool:
        """`name` is the same in every step: not made in the body, nor a state."""
        return name not in self.made and name not in self.states and name != self.step

    def outer_node(self, name: str, op_type: str, n: int | None = None):
        node = self.outer.get(name)
        _need(node is not None and node.op_type == op_type
              and (n is None or len(node.input) == n))
        return node

    def sequence(self, name: str) -> str:
        """The sequence around the loop that `name` is the step of (step i, or T-1-i in
        every slice of a reversed loop)."""
        node = self.by(name, "Gather", 2)
        _need(_attribute(node, "axis", 0) == 0 and self.around(node.input[0]))
        seq, t = node.input
        reverse = t != self.step
        if reverse:  # Sub(Sub(trips, 1), i)
            last, step = self.pair(t, "Sub")
            back = self.made.get(last) or self.outer.get(last)
            _need(step == self.step and back is not None and back.op_type == "Sub"
                  and back.input[0] == self.trips and self.holds(back.input[1], 1))
        _need(self.reverse in (None, reverse))
        self.reverse = reverse
        return seq

    def split_part(self, name: str, parts: int):
        """The `Split` of the gates' columns into `parts` that `name` is a part of, and
        which part."""
        node = self.made.get(name)
        _need(node is not None and node.op_type == "Split" and len(node.input) == 1
              and len(node.output) == parts and _attribute(node, "axis", 0) in (1, -1))
        return node, list(node.output).index(name)

    def terms(self, name: str, made: dict) -> list[str]:
        """The summands of an `Add` tree (of the body, or of the graph around it)."""
        node = made.get(name)
        if node is not None and node.op_type == "Add" and len(node.input) == 2:
            return self.terms(node.input[0], made) + self.terms(node.input[1], made)
        return [name]

    def vector(self, name: str, width: int) -> bool:
        t = self.types.get(name)
        return t is not None and t.dtype == "f32" and _sizes(t) == (width,)

    def matrix(self, name: str, rows: int | None, width: int) -> bool:
        t = self.types.get(name)
        return t is not None and t.dtype == "f32" and t.rank == 2 and _sizes(t)[1] == width \
            and (rows is None or _sizes(t)[0] == rows)

    def gates(self, name: str, width: int, with_x: bool = True, with_h: bool = True):
        """`name`, the pre-activations of `width` gate columns, as ((the input sequence,
        W) or None, U or None, biases): a sum of one input product (`input_product`) when
        `with_x`, one `h @ U` when `with_h`, and vectors."""
        x, u, biases = None, None, []
        for t in self.terms(name, self.made):
            hu = self.maybe(t, "MatMul")
            if with_h and u is None and hu and hu[0] == self.states[0] \
                    and self.around(hu[1]) and self.matrix(hu[1], self.hidden, width):
                u = hu[1]
            elif self.around(t) and self.vector(t, width):
                biases.append(t)
            elif with_x and x is None:
                x, more = self.input_product(t, width)
                biases += more
            else:
                raise _NoMatch
        _need((x is not None) == with_x and (u is not None) == with_h)
        return x, u, biases

    def input_product(self, t: str, width: int):
        """A step's input product, ((the sequence xs, W), biases): `x @ W` of the step x
        of xs, or the step of a sequence computed before the loop as `xs @ W` plus
        vectors (the export moves such products out of a loop, but not of a random op's
        step: `dropout(x, p)`, an `Identity` here)."""
        xw = self.maybe(t, "MatMul")
        if xw is not None and self.around(xw[1]):
            return self.weighed(self.sequence(xw[0]), xw[1], width), []
        return self.product(self.sequence(t), width)

    def weighed(self, xs: str, w: str, width: int) -> tuple[str, str]:
        t = self.types.get(xs)
        _need(t is not None and t.rank == 3 and t.dtype == "f32"
              and self.matrix(w, None, width))
        return xs, w

    def product(self, seq: str, width: int):
        """A sequence computed before the loop as `xs @ W` plus vectors: ((xs, W),
        biases)."""
        x, biases = None, []
        for t in self.terms(seq, self.outer):
            node = self.outer.get(t)
            if x is None and node is not None and node.op_type == "MatMul":
                x = self.weighed(*node.input, width)
            elif self.vector(t, width):
                biases.append(t)
            else:
                raise _NoMatch
        _need(x is not None)
        return x, biases

    def _unmask(self, result: str, state: str) -> str:
        """A new state without the lengths' `Where(keep, new, state)`, `keep` a step of the
        mask `t < L[b]` (`seq_mask`); every state masked by the same, or none."""
        node = self.made.get(result)
        if node is None or node.op_type != "Where" or node.input[2] != state:
            _need(self.mask in (None, False))
            self.mask = False
            return result
        keep = node.input[0]
        t = self.types.get(keep)
        _need(t is not None and t.rank == 2 and _sizes(t)[1] == 1)
        mask = self.sequence(self.by(keep, "Reshape", 2).input[0])
        _need(self.mask in (None, mask) and self.keep in (None, keep))
        steps, rows = self.outer_node(mask, "Less", 2).input
        t_axis, row_axis = (self.outer_node(n, "Unsqueeze", 2) for n in (steps, rows))
        start, _, stride = self.outer_node(t_axis.input[0], "Range", 3).input
        _need(self.holds(start, 0) and self.holds(stride, 1)
              and self.holds(t_axis.input[1], 1) and self.holds(row_axis.input[1], 0))
        self.mask, self.keep, self.lengths = mask, keep, row_axis.input[0]
        return node.input[1]

    def yielded(self, h: str) -> None:
        """Every yield is the new h (zeros in padding steps where masked)."""
        for y in self.yields:
            if not self.mask:
                _need(y == h)
            else:
                keep, new, zero = self.by(y, "Where", 3).input
                _need(keep == self.keep and new == h and self.holds(zero, 0))

    # ---- the node ----------------------------------------------------------------------
    def emit(self, cell) -> None:
        """The node of `cell` (`_LSTM`, `_GRU`) and what the Loop's outputs read of it,
        appended to the model's graph under the Loop's output names."""
        g, n_state, loop = self.top, self.n_state, self.node
        if self.mask and n_state == 2:
            _need(self.finals[1] not in self.read)  # the final c of a masked loop: not in Y
        # a reversed Loop's stacked yields are in trip order, turned by a Slice after it
        turns = [self._turned(y) if self.reverse else None for y in loop.output[n_state:]]
        g.hint = cell.node.lower()  # the new values' names: lstm, lstm_2, ...
        initial = [g.op("Unsqueeze", s, g.ints([0])) for s in self.initial]
        w = _onnx_weight(g, cell.w, cell.order)
        r = _onnx_weight(g, cell.u, cell.order)
        b = g.op("Unsqueeze", g.op("Concat", _bias(g, cell.bx, cell.order, self.hidden),
                                   _bias(g, cell.bh, cell.order, self.hidden), axis=0),
                 g.ints([0]))
        # no steps or no rows: onnxruntime's LSTM left its final states unset at T = 0
        # (other values each call), and both nodes ended the process at T = 0 or B = 0
        # ("terminate called without an active exception"); the node runs one step (row)
        # of zeros there, and what it made of them is dropped
        steps, rows = g.size(cell.xs, 0), g.size(cell.xs, 1)
        no_steps = g.op("Equal", steps, g.ints([0]))
        added = [g.op("Cast", g.op("Equal", n, g.ints([0])), to=g.dtype("i64"))
                 for n in (steps, rows)]
        zero = g.ints([0])
        xs = g.op("Pad", cell.xs, g.op("Concat", zero, zero, zero, *added, zero, axis=0))
        initial = [g.op("Pad", i, g.op("Concat", zero, zero, zero, zero, added[1], zero,
                                       axis=0)) for i in initial]
        outs = g.ops(cell.node, [xs, w, r, b, "", *initial], 1 + n_state,
                     hidden_size=self.hidden,
                     direction="reverse" if self.reverse else "forward", **cell.attrs)
        every = g.op("Slice", g.op("Squeeze", outs[0], g.ints([1])), g.ints([0, 0]),
                     g.op("Concat", steps, rows, axis=0), g.ints([0, 1]))   # [T, B, H]
        last = [g.op("Where", no_steps, s,
                     g.op("Slice", g.op("Squeeze", o, g.ints([0])), zero, rows, zero))
                for s, o in zip(self.initial, outs[1:])]
        if self.mask:
            last[0] = _at_length(g, every, self.lengths, self.initial[0])
            every = g.op("Where", g.op("Unsqueeze", self.mask, g.ints([2])), every,
                         g.const(0, "f32"))
        made = dict(zip(self.finals, last))
        if self.mask and n_state == 2:
            del made[self.finals[1]]  # nothing reads it
        for stacked, turn in zip(loop.output[n_state:], turns):
            if turn is None:
                made[stacked] = every
            else:  # Y is in time order already
                g.nodes = [n for n in g.nodes if n is not turn]
                made[turn.output[0]] = every
        for name, value in made.items():
            g.nodes.append(helper.make_node("Identity", [value], [name],
                                            name=g.root.names.fresh(f"{name}/Identity")))

    def _turned(self, stacked: str):
        """The `Slice` that turns a reversed Loop's stacked yields (in trip order) back into
        time order: the one node reading them."""
        readers = [n for n in self.top.nodes if stacked in reads([n])]
        _need(stacked not in self.outputs and len(readers) == 1)
        node = readers[0]
        _need(node.op_type == "Slice" and len(node.input) == 5 and node.input[0] == stacked
              and self.holds(node.input[1], -1) and self.holds(node.input[2], -2**63)
              and self.holds(node.input[3], 0) and self.holds(node.input[4], -1))
        return node


class _LSTM:
    """std/rnn.mdl's `lstm`: c2 = sig(f)*c + sig(i)*tanh(g), h2 = sig(o)*tanh(c2), the
    gates i, f, g, o of one sum of products. ONNX orders them i, o, f, c."""
    node, order, attrs = "LSTM", (0, 3, 1, 2), {}

    def __init__(self, s: _Loop):
        h, c = s.new
        gate = {}
        for sig, th in _orders(s.pair(h, "Mul")):
            if s.kind(th) == "Tanh" and s.unary(th, "Tanh") == c:
                gate["o"] = s.unary(sig, "Sigmoid")
                break
        for term in s.pair(c, "Add"):
            for p, q in _orders(s.pair(term, "Mul")):
                if q == s.states[1] and s.kind(p) == "Sigmoid":
                    gate["f"] = s.unary(p, "Sigmoid")
                    break
                if s.kind(p) == "Sigmoid" and s.kind(q) == "Tanh":
                    gate["i"], gate["g"] = s.unary(p, "Sigmoid"), s.unary(q, "Tanh")
                    break
        _need(set(gate) == set("ifgo"))
        split, _ = s.split_part(gate["i"], 4)
        _need([s.split_part(gate[k], 4) for k in "ifgo"] == [(split, k) for k in range(4)])
        width = 4 * s.hidden
        (self.xs, self.w), self.u, self.bx = s.gates(split.input[0], width)
        self.bh: list[str] = []
        s.yielded(h)


class _GRU:
    """std/rnn.mdl's `gru`: r = sig(xr + hr), z = sig(xz + hz), n = tanh(xn + r*hn),
    h2 = (1 - z)*n + z*h, with x.. and h.. the parts of `x @ W + bW` and `h @ U + bU`.
    ONNX orders the gates z, r, h and computes n so with `linear_before_reset`."""
    node, order, attrs = "GRU", (1, 0, 2), {"linear_before_reset": 1}

    def __init__(self, s: _Loop):
        (h,) = s.new
        h0 = s.states[0]
        for p, q in _orders(s.pair(h, "Add")):
            zh, rest = s.maybe(q, "Mul"), s.maybe(p, "Mul")
            if zh and rest and h0 in zh:
                z = zh[1] if zh[0] == h0 else zh[0]
                break
        else:
            raise _NoMatch
        for u, n in _orders(rest):
            d = s.maybe(u, "Sub")
            if d and d[1] == z and s.holds(d[0], 1):
                break
        else:
            raise _NoMatch
        for xn, m in _orders(s.pair(s.unary(n, "Tanh"), "Add")):
            rhn = s.maybe(m, "Mul")
            if rhn and s.kind(xn) == "Split":
                break
        else:
            raise _NoMatch
        r, hn = rhn if s.kind(rhn[0]) == "Sigmoid" else rhn[::-1]
        sx, i = s.split_part(xn, 3)
        sh, j = s.split_part(hn, 3)
        _need(i == 2 and j == 2 and sx is not sh)
        for gate, k in ((r, 0), (z, 1)):
            p, q = s.pair(s.unary(gate, "Sigmoid"), "Add")
            parts = [s.split_part(p, 3), s.split_part(q, 3)]
            _need(parts in ([(sx, k), (sh, k)], [(sh, k), (sx, k)]))
        width = 3 * s.hidden
        (self.xs, self.w), _, self.bx = s.gates(sx.input[0], width, with_h=False)
        _, self.u, self.bh = s.gates(sh.input[0], width, with_x=False)
        s.yielded(h)


def _orders(pair):
    a, b = pair
    return ((a, b), (b, a))


def _attribute(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _sizes(t) -> tuple:
    """A TensorType's shape as numbers (None for a symbolic dim)."""
    return tuple(d.value if d.is_const else None for d in t.shape)


def _reorder(g, x: str, order, axis: int) -> str:
    parts = g.ops("Split", [x], len(order), axis=axis, num_outputs=len(order))
    return g.op("Concat", *[parts[k] for k in order], axis=axis)


def _onnx_weight(g, w: str, order) -> str:
    """mdl's [I, gates*H] (gates in mdl's order) as ONNX's [1, gates*H, I]."""
    return g.op("Unsqueeze", g.op("Transpose", _reorder(g, w, order, 1), perm=[1, 0]),
                g.ints([0]))


def _bias(g, biases: list[str], order, hidden: int) -> str:
    if not biases:
        return g.const(np.zeros(len(order) * hidden, np.float32), "f32")
    total = biases[0]
    for b in biases[1:]:
        total = g.op("Add", total, b)
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


def _ordered(nodes: list) -> list:
    """`nodes` in an order in which each comes after the nodes making what it reads (its
    subgraphs' reads included), otherwise as given."""
    makes = {o: k for k, n in enumerate(nodes) for o in n.output}
    done: set[int] = set()
    out: list = []

    def place(k: int) -> None:
        stack = [(k, False)]
        while stack:
            j, expanded = stack.pop()
            if j in done:
                continue
            if expanded:
                done.add(j)
                out.append(nodes[j])
                continue
            stack.append((j, True))
            for name in sorted(reads([nodes[j]]), reverse=True):
                m = makes.get(name)
                if m is not None and m not in done and m != j:
                    stack.append((m, False))

    for k in range(len(nodes)):
        place(k)
    return out
