"""The reference interpreter implements the language's semantics exactly: lengths masks,
reversed loops, dropout, cross-entropy, input checks, initializers; and the lowered
loops autodiff works on compute what the loops written by the user compute."""
from __future__ import annotations

import numpy as np
import pytest
from ir_helpers import model, random_params

from codegen.ir.graph import clone_graph
from codegen.ops.verify import verify
from codegen.reference import interpreter as reference
from codegen.transforms.prepare import prepare

RUNNING_SUM = """
model M() {{
  input xs : f32[T, B, 1]
  input lengths : i32[B]
  s = zeros[B, 1]
  ys = for x in {seq} {options} {{
    s = s + x
    yield s
  }}
  output ys
  output s
}}"""


def running_sum(reversed_: bool, lengths: bool):
    return model(RUNNING_SUM.format(seq="reversed(xs)" if reversed_ else "xs",
                                    options="(lengths = lengths)" if lengths else ""))


def test_lengths_keep_each_rows_state_and_yield_zeros_after_its_end():
    xs = np.arange(1.0, 5.0)[:, None, None] * np.ones((4, 3, 1))   # x[t] = t + 1
    out = reference.run(running_sum(False, True), {"xs": xs, "lengths": [4, 2, 0]}, {})
    assert out["ys"][:, :, 0].T.tolist() == [[1, 3, 6, 10], [1, 3, 0, 0], [0, 0, 0, 0]]
    assert out["s"][:, 0].tolist() == [10, 3, 0]


def test_reversed_lengths_run_each_row_backwards_from_its_last_real_step():
    xs = np.arange(1.0, 5.0)[:, None, None] * np.ones((4, 3, 1))
    out = reference.run(running_sum(True, True), {"xs": xs, "lengths": [4, 2, 0]}, {})
    # row 1 runs t = 1 then t = 0; yields stay at their time positions
    assert out["ys"][:, :, 0].T.tolist() == [[10, 9, 7, 4], [3, 2, 0, 0], [0, 0, 0, 0]]
    assert out["s"][:, 0].tolist() == [10, 3, 0]


def test_a_reversed_loop_stores_its_yields_in_time_order():
    xs = np.arange(1.0, 4.0)[:, None, None] * np.ones((3, 2, 1))
    out = reference.run(running_sum(True, False), {"xs": xs, "lengths": [3, 3]}, {})
    assert out["ys"][:, 0, 0].tolist() == [6, 5, 3]


ANY_ROWS = """
model M(H = 3) {{
  input xs : f32[T, B, H]
  input lengths : i32[B]
  param W : f32[H, H] = normal(0, 0.5)
  h = ones[B, H]
  ys = for x in {seq} {options} {{
    h = tanh(x @ W + mean(h, axis = 0) + 0.5 * h)    # rows see each other
    yield h * 2.0
  }}
  output ys
  output h
}}"""
LOOP_OPTIONS = ["(lengths = lengths)", "(checkpoint = 2)", "(lengths = lengths, checkpoint = 3)",
                "(recompute)"]


@pytest.mark.parametrize("options", LOOP_OPTIONS)
@pytest.mark.parametrize("reversed_", [False, True], ids=["forward", "reversed"])
def test_lowered_loops_compute_what_the_written_ones_do(options, reversed_):
    graph = model(ANY_ROWS.format(seq="reversed(xs)" if reversed_ else "xs", options=options))
    lowered = clone_graph(graph)
    prepare(lowered.body)
    verify(lowered)
    assert any(op.prim in ("seq_order", "seq_mask", "segment")
               for op in lowered.body.ops) or options == "(recompute)"
    rng = np.random.default_rng(0)
    inputs = {"xs": rng.normal(size=(5, 3, 3)), "lengths": np.array([5, 2, 0], np.int32)}
    params = random_params(graph)
    want, got = reference.run(graph, inputs, params), reference.run(lowered, inputs, params)
    for k in want:
        assert np.allclose(got[k], want[k], rtol=1e-13, atol=1e-15), k


DROPOUT = """
model M() {
  input x : f32[B, 100]
  output y = dropout(x, 0.25)
  output z = dropout(x, 0.25)
}"""


def test_dropout_is_the_identity_outside_training():
    x = np.random.default_rng(0).normal(size=(4, 100))
    out = reference.run(model(DROPOUT), {"x": x}, {})
    assert np.array_equal(out["y"], x) and np.array_equal(out["z"], x)


def test_dropout_in_training_is_seeded_scaled_and_independent_per_op():
    graph, x = model(DROPOUT), np.ones((4, 100))
    first = reference.run(graph, {"x": x}, {}, training=True, seed=1)
    again = reference.run(graph, {"x": x}, {}, training=True, seed=1)
    other = reference.run(graph, {"x": x}, {}, training=True, seed=2)
    assert np.array_equal(first["y"], again["y"]) and not np.array_equal(first["y"], other["y"])
    assert not np.array_equal(first["y"], first["z"])
    assert set(np.unique(first["y"])) == {0.0, 1 / 0.75}
    assert 0.15 < np.mean(first["y"] == 0) < 0.35


def test_gradients_see_the_masks_the_forward_pass_drew():
    graph, x = model(DROPOUT.replace("}", "  output s = sum(y * y)\n  minimize s\n}")), \
        np.ones((2, 100))
    forward = reference.run(graph, {"x": x}, {}, training=True, seed=3)
    grads = reference.gradients(graph, {"x": x}, {}, training=True, seed=3)
    assert np.allclose(grads.inputs["x"], 2 * forward["y"] / 0.75)


CROSS_ENTROPY = """
model M() {{
  input logits : f32[T, B, 4]
  input targets : i32[T, B]
  input lengths : i32[B]
  output loss = cross_entropy(logits, targets{lengths})
}}"""
MASKED = CROSS_ENTROPY.format(lengths=", lengths = lengths")
PLAIN = CROSS_ENTROPY.format(lengths="")


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_cross_entropy_is_the_mean_over_real_tokens():
    rng = np.random.default_rng(1)
    logits, targets = rng.normal(size=(3, 2, 4)), rng.integers(0, 4, size=(3, 2))
    lengths = np.array([3, 1])
    log_probs = np.take_along_axis(_log_softmax(logits), targets[..., None], -1)[..., 0]
    inputs = {"logits": logits, "targets": targets, "lengths": lengths}
    assert np.isclose(reference.run(model(PLAIN), inputs, {})["loss"], -np.mean(log_probs))
    real = [log_probs[t, b] for b in range(2) for t in range(lengths[b])]
    targets[1:, 1] = 99    # padding beyond a sequence's end is never read
    assert np.isclose(reference.run(model(MASKED), inputs, {})["loss"], -np.mean(real))
    inputs["lengths"] = np.array([0, 0])
    assert reference.run(model(MASKED), inputs, {})["loss"] == 0.0


@pytest.mark.parametrize("inputs, message", [
    ({"xs": np.zeros((3, 2, 1))}, "missing input `lengths`"),
    ({"xs": np.zeros((3, 2, 1)), "lengths": np.zeros(4)}, "dim B is 4 here but 2"),
    ({"xs": np.zeros((3, 2)), "lengths": np.zeros(2)}, "input `xs` is f64[T, B, 1]"),
    ({"xs": np.zeros((3, 2, 5)), "lengths": np.zeros(2)}, "expected f64[T, B, 1]"),
])
def test_bad_inputs_are_refused_with_a_message(inputs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        reference.run(running_sum(False, True), inputs, {})


def test_initializers():
    graph = model("""
model M() {
  param a : f32[3, 4] = orthogonal
  param b : f32[5, 2] = xavier
  param c : f32[3] = constant(2.5)
  param d : f32[2, 2] = uniform(-0.1, 0.1)
  param e : f32[4]
  input x : f32[3]
  output y = sum(a) + sum(b) + sum(c) + sum(d) + sum(e) + sum(x)
}""")
    p = reference.init_params(graph, seed=3)
    assert np.allclose(p["a"] @ p["a"].T, np.eye(3))
    assert np.all(np.abs(p["b"]) <= np.sqrt(6 / 7)) and np.all(p["c"] == 2.5)
    assert np.all(np.abs(p["d"]) <= 0.1) and np.all(p["e"] == 0)


def test_swapaxes_is_numpys_and_its_gradient_swaps_back():
    graph = model("""
model M() {
  input x : f32[2, 3, 4]
  param w : f32[4, 3, 2] = ones
  output y = swapaxes(x, 0, -1)
  output loss = sum(swapaxes(x, -1, -3) * w * w)
  minimize loss
}""")
    x = np.arange(24.0).reshape(2, 3, 4)
    w = np.arange(24.0).reshape(4, 3, 2) / 10
    assert np.array_equal(reference.run(graph, {"x": x}, {"w": w})["y"], np.swapaxes(x, 0, -1))
    grads = reference.gradients(graph, {"x": x}, {"w": w})
    np.testing.assert_allclose(grads.params["w"], 2 * w * np.swapaxes(x, -1, -3))
