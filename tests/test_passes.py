"""Constant folding, simplification, CSE and DCE, each on a small graph, and all of them
on forward-and-backward graphs with the verifier after every pass, changing nothing the
graphs compute."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from ir_helpers import CONTROL, control_inputs, model, random_params, rnn_model

from codegen.ir.graph import Block, Graph, Value, walk_ops
from codegen.ir.shapes import Dim, TensorType
from codegen.ops.builder import Builder
from codegen.ops.verify import verify
from codegen.reference import interpreter as reference
from codegen.transforms import passes
from codegen.transforms.autodiff import grad_graph

F = TensorType.of("f64", ("B", 3))


def graph_of(build) -> Graph:
    """A graph with input x: f64[B, 3] and output y = build(builder, x)."""
    x = Value(F, "x")
    body = Block()
    y = build(Builder(body), x)
    graph = Graph("G", {}, {"x": x}, {}, body, {"y": y})
    verify(graph)
    return graph


def prims(graph: Graph) -> list[str]:
    """Every op's primitive, forward and backward."""
    return [op.prim for block in graph.blocks() for op in walk_ops(block)]


def test_fold_constants_evaluates_elementwise_ops_on_constants():
    g = graph_of(lambda b, x: b.mul(x, b.exp(b.add(b.const(2.0, "f64"), b.const(-2.0, "f64")))))
    passes.fold_constants(g)
    passes.dce(g)
    verify(g)
    assert prims(g) == ["full", "mul"] and g.body.ops[0].attrs["value"] == 1.0


def test_simplify_applies_the_tables_identities():
    def build(b, x):
        y = b.mul(b.add(x, b.const(-0.0, "f64")), b.const(1.0, "f64"))
        z = b.neg(b.neg(b.div(y, b.const(1.0, "f64"))))
        return b.cast(b.where(b.const(True, "bool"), b.reshape(z, shape=F.shape), x),
                      dtype="f64")
    g = graph_of(build)
    passes.simplify(g)
    passes.dce(g)
    verify(g)
    assert g.outputs["y"] is g.inputs["x"] and prims(g) == []


def test_a_float_plus_zero_is_itself_only_from_minus_zero():
    """x + 0.0 is 0.0 at x = -0.0, where x is -0.0 (1.0 / (x + 0.0) +inf, not -inf): it
    stays; x + -0.0 and x - 0.0 are x for every x."""
    plus = graph_of(lambda b, x: b.add(b.zeros_like(x), x))
    minus = graph_of(lambda b, x: b.sub(b.add(x, b.const(-0.0, "f64")), b.const(0.0, "f64")))
    for g in (plus, minus):
        passes.simplify(g)
        passes.dce(g)
    assert sorted(prims(plus)) == ["add", "zeros_like"]
    assert prims(minus) == [] and minus.outputs["y"] is minus.inputs["x"]


@pytest.mark.parametrize("zero,becomes", [(0.0, "sub"), (-0.0, "neg")])
def test_zero_minus_a_float_is_a_negation_only_from_minus_zero(zero, becomes):
    """0.0 - x is 0 at x = 0, where -x is -0 (a loss of 0 shown as -0.0); -0.0 - x is -x
    for every x."""
    g = graph_of(lambda b, x: b.sub(b.const(zero, "f64"), x))
    passes.optimize(g, verify)
    assert becomes in prims(g)
    got = reference.run(g, {"x": np.zeros((2, 3))}, {})["y"]
    assert np.all(np.signbit(got) == np.signbit(zero)), got


def test_simplify_sees_constants_through_broadcasts():
    g = graph_of(lambda b, x: b.mul(b.broadcast_to(b.const(1.0, "f64"), shape=F.shape), x))
    passes.optimize(g, verify)
    assert g.outputs["y"] is g.inputs["x"]


def _split_of_sum(read_twice: bool) -> Graph:
    """y = a * b with a, b = split(x * x + bias) along axis 1 (+ the sum itself again
    when `read_twice`)."""
    x, bias = Value(TensorType.of("f64", ("B", 4)), "x"), Value(TensorType.of("f64", (4,)), "bias")
    body = Block()
    b = Builder(body)
    whole = b.add(b.mul(x, x), bias)
    first, second = b.emit("split", [whole], {"axis": 1, "parts": 2})
    y = b.mul(first, second)
    if read_twice:
        y = b.add(y, b.emit("slice", [whole], {"starts": (Dim.of(0), Dim.of(0)),
                                             "stops": (Dim.of("B"), Dim.of(2))})[0])
    graph = Graph("G", {}, {"x": x, "bias": bias}, {}, body, {"y": y})
    verify(graph)
    return graph


@pytest.mark.parametrize("read_twice", [False, True])
def test_a_split_moves_into_the_elementwise_op_it_splits_when_nothing_else_reads_it(
        read_twice):
    g = _split_of_sum(read_twice)
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((3, 4)), "bias": rng.standard_normal(4)}
    want = reference.run(g, inputs, {})["y"]
    passes.optimize(g, verify)
    np.testing.assert_allclose(reference.run(g, inputs, {})["y"], want, rtol=1e-15)
    split_inputs = [op.inputs[0] for op in g.body.ops if op.prim == "split"]
    if read_twice:  # the whole sum is needed anyway: computing it in parts would repeat it
        assert [v.hint for v in split_inputs] == [""] and prims(g).count("add") == 2
    else:  # x and the bias are split; each part's sum is computed where it is multiplied
        assert sorted(v.hint for v in split_inputs) == ["bias", "x"]
        assert prims(g).count("add") == 2 and prims(g).count("mul") == 3


def test_cse_merges_equal_ops_but_not_random_ones():
    g = graph_of(lambda b, x: b.add(b.tanh(x), b.tanh(x)))
    passes.cse(g)
    verify(g)
    assert prims(g) == ["tanh", "add"]
    g = graph_of(lambda b, x: b.add(b.dropout(x, p=0.5), b.dropout(x, p=0.5)))
    passes.cse(g)
    assert prims(g) == ["dropout", "dropout", "add"]


def test_cse_reuses_a_value_of_an_enclosing_block():
    g = model("""
model M() {
  input xs : f32[T, 3]
  param w : f32[3] = ones
  a = tanh(w)
  ys = for x in xs { yield x * tanh(w) }
  output s = sum(ys) + sum(a)
}""")
    passes.cse(g)
    verify(g)
    assert prims(g).count("tanh") == 1


def test_dce_drops_unread_ops_and_unread_tapes():
    g = grad_graph(model(CONTROL["while with a data-dependent trip count inside for"]))
    taped = [op for op in walk_ops(g.body) if op.attrs.get("n_tape")]
    assert taped
    g.param_grads, g.input_grads = {}, {}
    passes.dce(g)
    verify(g)
    assert not any(op.attrs.get("n_tape") for op in walk_ops(g.body))
    assert sum(1 for p in prims(g) if p == "for") == 1


GRAPHS = {"lstm with lengths": (rnn_model("lstm(x, h, c)", "(lengths = lengths)", True,
                                          state="h, c"), None),
          "gru with checkpoint": (rnn_model("gru(x, h)", "(checkpoint = 2)", state="h"), None),
          **{name: (src, name) for name, src in CONTROL.items()}}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_optimize_changes_nothing_that_is_computed(name):
    src, control = GRAPHS[name]
    graph = model(src)
    raw = grad_graph(graph)
    verify(raw)
    rng = np.random.default_rng(0)
    inputs = control_inputs(control) if control else {
        "xs": rng.normal(size=(4, 3, 2)), "lengths": np.array([4, 1, 3], np.int32)}
    params = random_params(graph, scale=0.3)
    want = reference.run(raw, inputs, params)
    before = len(prims(raw))
    passes.optimize(raw, verify)
    got = reference.run(raw, inputs, params)
    assert len(prims(raw)) < before
    for k in want:
        assert np.allclose(got[k], want[k], rtol=1e-12, atol=1e-14), k


CONSTANTS = (0.0, 1.0, 2.0, -0.5)
UNARY = ("neg", "tanh", "sigmoid", "relu")
BINARY = ("add", "sub", "mul", "maximum")


@st.composite
def programs(draw):
    """Random expression DAGs over x, rich in constants, 0 and 1, repeats and dead code."""
    steps = draw(st.lists(st.tuples(st.sampled_from(("const", "unary", "binary", "where")),
                                    st.integers(0, 99), st.integers(0, 99),
                                    st.sampled_from(CONSTANTS)), min_size=1, max_size=12))

    def build(b, x):
        values = [x]
        for kind, i, j, c in steps:
            a, other = values[i % len(values)], values[j % len(values)]
            if kind == "const":
                values.append(b.mul(a, b.const(c, "f64")) if i % 2 else b.const(c, "f64"))
            elif kind == "unary":
                values.append(b.emit(UNARY[j % len(UNARY)], [a])[0])
            elif kind == "binary":
                values.append(b.emit(BINARY[i % len(BINARY)], [a, other])[0])
            else:
                values.append(b.where(b.gt(a, b.const(c, "f64")), a, other))
        return b.add(values[-1], b.zeros_like(x))
    return build


@settings(max_examples=60, deadline=None)
@given(programs())
def test_optimize_preserves_random_programs(build):
    g = graph_of(build)
    x = np.random.default_rng(0).normal(size=(2, 3))
    want = reference.run(g, {"x": x}, {})["y"]
    passes.optimize(g, verify)
    assert np.allclose(reference.run(g, {"x": x}, {})["y"], want, rtol=1e-14, atol=0)
