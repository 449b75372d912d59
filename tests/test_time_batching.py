"""Products over time leave the loop (structured/for_hoist.py) and sums over time follow
them after it (structured/for_sink.py): the shapes of the graphs they make, what they
leave alone, and that the graphs still compute what the reference does (the native and
gradient tests check every example; here a reversed loop with lengths, in f64)."""
from __future__ import annotations

import numpy as np
import pytest
from ir_helpers import check_model_grads, model, random_params, rnn_model
from test_native_loops import SOURCE as LOOPS

from codegen.ir.graph import walk_ops
from codegen.ops.entry import entry
from codegen.ops.verify import verify
from codegen.pipeline import differentiate, for_backends
from codegen.reference import interpreter as reference
from dsl import check_source


def loops(block):
    return [op for op in walk_ops(block) if op.prim == "for"]


def body_prims(loop) -> list[str]:
    return [op.prim for op in loop.blocks[0].ops]


def test_the_input_product_leaves_the_forward_loop():
    graph = for_backends(model(rnn_model("lstm(x, h, c)")))
    verify(graph)
    (loop,) = loops(graph.body)
    assert body_prims(loop).count("matmul") == 1  # h @ U stays, x @ W left
    before = graph.body.ops[:graph.body.ops.index(loop)]
    product = [op for op in before if op.prim == "matmul"]
    assert len(product) == 1 and product[0].outputs[0].type.rank == 3  # [T, B, 4H]
    assert product[0].outputs[0] in loop.inputs[:loop.attrs["n_seq"]]


def test_the_weight_gradients_are_one_product_after_the_backward_loop():
    joint = differentiate(model(rnn_model("lstm(x, h, c)")))
    verify(joint)
    (back,) = loops(joint.backward)
    # the backward loop carries only the state cotangents (dh, dc): no accumulators
    assert back.attrs["n_state"] == 2
    assert body_prims(back).count("matmul") == 1  # dg @ U^T, for dh
    after = joint.backward.ops[joint.backward.ops.index(back) + 1:]
    assert sum(op.prim == "matmul" for op in after) >= 3  # dW, dU, and dxs
    for name in ("lstm/W", "lstm/U", "lstm/b"):
        assert joint.param_grads[name] not in back.outputs


def test_a_recomputing_loop_keeps_its_products():
    """Moved out, x @ W over all steps would be stored in full: the memory `recompute`
    exists to save."""
    joint = differentiate(model(rnn_model("lstm(x, h, c)", "(recompute)")))
    verify(joint)
    (loop,) = [op for op in loops(joint.body) if op.attrs.get("recompute")]
    assert body_prims(loop).count("matmul") == 2
    assert "matmul" not in [op.prim for op in joint.body.ops]


def test_a_checkpoint_moves_products_out_of_one_segment_only():
    """The segment loop (stored, re-run one segment at a time) gets its product over the
    segment's k steps, inside the recomputed loop over segments: nothing over all T."""
    joint = differentiate(model(rnn_model("lstm(x, h, c)", "(checkpoint = 2)")))
    verify(joint)
    (outer,) = [op for op in joint.body.ops if op.prim == "for"]
    assert outer.attrs["recompute"]
    (product,) = [op for op in outer.blocks[0].ops if op.prim == "matmul"]
    assert str(product.outputs[0].type.shape[0]) == "2"
    assert "matmul" not in [op.prim for op in joint.body.ops]


@pytest.mark.parametrize("cell, state", [("lstm(x, h, c)", "h, c"), ("gru(x, h)", "h"),
                                         ("milstm(x, h, c)", "h, c")])
def test_moved_products_keep_the_gradients(cell, state):
    """Reversed, with lengths: autodiff's graph (products moved) against central
    differences. tests/test_passes.py checks the sums moved by optimize the same way."""
    graph = model(rnn_model(cell, "(lengths = lengths)", reversed_=True, state=state))
    assert loops(for_backends(graph).body)[0].attrs["n_seq"] > 2  # something moved
    rng = np.random.default_rng(1)
    inputs = {"xs": rng.normal(size=(4, 3, 2)), "lengths": np.array([4, 1, 0], np.int32)}
    assert check_model_grads(graph, inputs, random_params(graph, scale=0.3)) < 1e-6


def test_a_sum_gets_a_new_yield_only_of_a_shape_the_loop_already_keeps():
    """MILSTM's dU needs d(h @ U) for every step: a new yield, as the backward loop already
    keeps h @ U's tape of that shape. Under `recompute` it keeps only states: dU stays."""
    stored = differentiate(model(rnn_model("milstm(x, h, c)")))
    (back,) = loops(stored.backward)
    assert back.attrs["n_state"] == 2 and "matmul" in body_prims(back)
    assert stored.param_grads["milstm/U"] not in back.outputs
    lean = differentiate(model(rnn_model("milstm(x, h, c)", "(recompute)")))
    back = [op for op in loops(lean.backward) if op.attrs["n_state"] > 2]
    assert back, "dU accumulates in the loop of a recompute backward"


BRANCHED = '''
import "std/rnn.mdl"
model M(H = 3) {
  input xs : f32[T, B, H]; input signs : f32[T]
  param P : f32[H, H] = uniform(-0.5, 0.5)
  h = zeros[B, H]
  hs = for x in xs, s in signs {options} {
    if s > 0.0 { v = tanh(x @ P) } else { v = 0.5 * x }
    h = gru(v, h)
    yield h
  }
  output loss = sum(hs * hs)
  minimize loss
}'''


def test_a_branch_on_the_step_s_input_runs_as_a_loop_of_its_own():
    """Loop fission (structured/for_fission.py): the `if` reads no state, so it runs for
    every step in a loop before the recurrence, which reads v as a sequence; its product
    with the GRU's W then leaves the loop as one product over all steps."""
    graph = for_backends(model(BRANCHED.replace("{options}", "")))
    verify(graph)
    first, loop = loops(graph.body)[0], [op for op in graph.body.ops if op.prim == "for"][1]
    assert first.attrs["n_state"] == 0 and body_prims(first).count("if") == 1
    assert "if" not in body_prims(loop) and body_prims(loop).count("matmul") == 1  # h @ U
    between = graph.body.ops[graph.body.ops.index(first) + 1:graph.body.ops.index(loop)]
    assert [op.prim for op in between].count("matmul") == 1  # v @ W over all steps


def test_a_recomputing_loop_keeps_its_branch():
    joint = differentiate(model(BRANCHED.replace("{options}", "(recompute)")))
    verify(joint)
    assert [op.prim for op in joint.body.ops].count("for") == 1


@pytest.mark.parametrize("options", ["", "(checkpoint = 2)"])
def test_gradients_through_a_loop_split_in_two(options):
    graph = model(BRANCHED.replace("{options}", options))
    verify(differentiate(graph))
    rng = np.random.default_rng(4)
    inputs = {"xs": rng.normal(size=(5, 2, 3)), "signs": np.array([1., -1., 2., -0.5, 1.])}
    assert check_model_grads(graph, inputs, random_params(graph)) < 1e-6


def test_a_weight_one_branch_uses_gets_its_gradient_after_the_loop():
    """The gradient of a weight only one branch of an `if` uses is summed after the
    backward loop: the if yields the product's operands, zeros where the other branch
    ran (the if's step_sum, structured/if_op.py), and the loop stacks them; through
    nested ifs, for a product (P, Q) and a broadcast's sum (b) alike. The branches read
    the state, so they stay in the recurrence (test_native_loops.py's BranchWeights,
    which the native tests run)."""
    graph = check_source(LOOPS, "<test>", model="BranchWeights", dtype="f64").graph
    joint = differentiate(graph)
    verify(joint)
    (back,) = loops(joint.backward)
    assert back.attrs["n_state"] == 1  # d h alone: no weight's gradient accumulates
    for name in ("P", "Q", "b"):
        assert joint.param_grads[name] not in back.outputs
    after = [op.prim for op in joint.backward.ops[joint.backward.ops.index(back) + 1:]]
    assert after.count("matmul") == 2 and after.count("sum_to") == 1
    rng = np.random.default_rng(0)  # steps take each of the three branches
    inputs = {"xs": rng.normal(size=(9, 2, 5)), "w": rng.normal(size=(9, 2, 5))}
    totals = inputs["xs"].sum(axis=(1, 2))
    assert (totals > 2).any() and ((totals > 0) & (totals <= 2)).any() and (totals <= 0).any()
    params = random_params(graph)
    want = reference.gradients(graph, inputs, params).params
    got = reference.run(joint, inputs, params)
    for name in ("P", "Q", "b"):
        assert np.allclose(got[f"grad:param:{name}"], want[name], rtol=1e-12, atol=1e-14)
    assert check_model_grads(graph, inputs, params) < 1e-6


def test_a_weight_used_twice_a_step_gets_its_gradients_after_the_loop():
    """A weight used at several places of a step, in the recurrence: twice in a row, and
    in both branches of an `if` (test_native_loops.py's TwiceAStep). Its gradient is a
    sum of the uses' (add_n), each summed over the steps by its own rule after the
    backward loop: no accumulator is left in the loop. The branches use the weight
    alike, so theirs is one product over all steps, each step's operands from the branch
    it ran."""
    graph = check_source(LOOPS, "<test>", model="TwiceAStep", dtype="f64").graph
    joint = differentiate(graph)
    verify(joint)
    (back,) = loops(joint.backward)
    assert back.attrs["n_state"] == 1  # d h alone
    for name in ("P", "b"):
        assert joint.param_grads[name] not in back.outputs
    after = [op.prim for op in joint.backward.ops[joint.backward.ops.index(back) + 1:]]
    assert after.count("matmul") == 3 and after.count("sum_to") == 1
    rng = np.random.default_rng(0)
    inputs = {"xs": rng.normal(size=(9, 2, 5)), "w": rng.normal(size=(9, 2, 5))}
    totals = inputs["xs"].sum(axis=(1, 2))
    assert (totals > 0).any() and (totals <= 0).any()  # steps take each branch
    params = random_params(graph)
    want = reference.gradients(graph, inputs, params).params
    got = reference.run(joint, inputs, params)
    for name in ("P", "b"):
        assert np.allclose(got[f"grad:param:{name}"], want[name], rtol=1e-12, atol=1e-14)
    assert check_model_grads(graph, inputs, params) < 1e-6


BRANCH_USES = '''
model M(H = 3) {
  input xs : f32[T, B, H]; input w : f32[T, B, H]
  param P : f32[H, H] = uniform(-0.5, 0.5)
  h = zeros[B, H] + 0.1
  hs = for x in xs {
    if sum(x) > 0.0 { h = {then} } else { h = {else} }
    yield h
  }
  output loss = sum(hs * w)
  minimize loss
}'''


@pytest.mark.parametrize("then, orelse, after", [
    ("tanh(h @ P + x)", "sigmoid(h @ P) * x", 1),           # alike: one product for both
    ("tanh(h @ P + x)", "tanh(x @ P + h)", 1),              # alike, other operands paired
    ("tanh(h @ P + x)", "tanh((2.0 * h) @ P)", 1),          # 2 * h kept by the forward
    ("tanh(h @ P + x)", "tanh(h @ transpose(P))", 2),       # P^T: transposed, not alike
    ("tanh(h @ P + x)", "tanh(h @ P) / (x * x + 1.0)", 1),  # the same product, other math
    ("tanh(h @ P @ P + x)", "tanh(h @ P) + x", 3),          # twice in one, once in the other
    ("tanh(h @ P + x) @ P", "sigmoid(h @ P + x) @ P", 2),   # twice in both, alike
])
def test_the_branches_uses_of_a_weight_summed_over_the_steps(then, orelse, after):
    """The products after the backward loop that sum P's gradient, as the branches use P
    (the if's step_sum: one product for both branches where they use it alike, one for
    each otherwise; a transpose's sum is the transpose of its operand's), and the
    gradients those graphs give, against the reference's and central differences."""
    graph = model(BRANCH_USES.replace("{then}", then).replace("{else}", orelse))
    joint = differentiate(graph)
    verify(joint)
    (back,) = loops(joint.backward)
    tail = joint.backward.ops[joint.backward.ops.index(back) + 1:]
    assert sum(op.prim == "matmul" for op in tail) == after
    assert joint.param_grads["P"] not in back.outputs
    rng = np.random.default_rng(0)
    inputs = {"xs": rng.normal(size=(7, 2, 3)), "w": rng.normal(size=(7, 2, 3))}
    totals = inputs["xs"].sum(axis=(1, 2))
    assert (totals > 0).any() and (totals <= 0).any()
    params = random_params(graph)
    want = reference.gradients(graph, inputs, params).params["P"]
    assert np.allclose(reference.run(joint, inputs, params)["grad:param:P"], want,
                       rtol=1e-12, atol=1e-14)
    assert check_model_grads(graph, inputs, params) < 1e-6


BRANCHES = ["tanh(h @ P + x)", "sigmoid(h @ P) * x", "tanh(x @ P + h)", "tanh((2.0 * h) @ P)",
            "tanh(h @ transpose(P))", "tanh(h @ P @ P + x)", "tanh(h @ P + x) @ P",
            "0.5 * h + x"]


@pytest.mark.parametrize("then", BRANCHES)
def test_every_pair_of_branch_uses_keeps_the_gradients(then):
    """Every pair of the ways a branch may use P, or not, in both orders: the optimized
    graph's gradients equal the reference's, and P's leaves the loop wherever a branch
    uses it (each use has a rule: a product's, a transpose's, a sum's of them)."""
    rng = np.random.default_rng(0)
    inputs = {"xs": rng.normal(size=(7, 2, 3)), "w": rng.normal(size=(7, 2, 3))}
    for orelse in BRANCHES:
        graph = model(BRANCH_USES.replace("{then}", then).replace("{else}", orelse))
        joint = differentiate(graph)
        verify(joint)
        (back,) = loops(joint.backward)
        assert joint.param_grads["P"] not in back.outputs, orelse
        params = random_params(graph)
        want = reference.gradients(graph, inputs, params)
        got = reference.run(joint, inputs, params)
        assert np.allclose(got["grad:param:P"], want.params["P"], rtol=1e-12, atol=1e-14)
        assert np.allclose(got["grad:input:xs"], want.inputs["xs"], rtol=1e-12, atol=1e-14)


STACKED = '''
import "std/rnn.mdl"
model M(H = 3, E = 2, P = 0.0) {
  input xs : f32[T, B, E]; input lengths : i32[B]
  h1 = zeros[B, H]; c1 = zeros[B, H]; h2 = zeros[B, H]; c2 = zeros[B, H]; h3 = zeros[B, H]
  hs = for x in {seq} {options} {
    h1, c1 = lstm(x, h1, c1) as layer1
    h2, c2 = lstm(dropout(h1, P), h2, c2) as layer2
    h3 = gru(h2, h3) as layer3
    yield h3 + h1
  }
  output loss = sum(hs * hs) + sum(c1 * h2) + sum(h3)
  minimize loss
}'''


def stacked(options: str = "", seq: str = "xs", **defines):
    return model(STACKED.replace("{options}", options).replace("{seq}", seq), **defines)


def test_stacked_layers_run_as_loops_of_their_own():
    """Loop fission by states (structured/for_fission.py): each layer's states read only
    their own and the layers' below, so each layer is a loop of its own, in order, and
    its input product (x @ W, h1 @ W2, h2 @ W3) one product over all steps before it."""
    graph = for_backends(stacked())
    verify(graph)
    layers = [op for op in graph.body.ops if op.prim == "for"]
    assert [op.attrs["n_state"] for op in layers] == [2, 2, 1]
    assert all(body_prims(op).count("matmul") == 1 for op in layers)  # h @ U alone
    at = [k for k, op in enumerate(graph.body.ops) if op.prim == "matmul"]
    assert all(graph.body.ops[k].outputs[0].type.rank == 3 for k in at)
    loop_at = [graph.body.ops.index(op) for op in layers]
    assert at[0] < loop_at[0] < at[1] < loop_at[1] < at[2] < loop_at[2]  # one a layer
    joint = differentiate(stacked())
    verify(joint)
    assert [op.attrs["n_state"] for op in loops(joint.backward)] == [1, 2, 2]


def test_a_layer_reading_the_state_before_its_step_stays_in_the_loop():
    """Layer 2 reads h1 as it was before the step (h1 @ W2 of the old h1): the second loop
    would need the first's state of the step before, so the loop is not split."""
    graph = for_backends(model('''
model M(H = 3) {
  input xs : f32[T, B, H]
  param W1 : f32[H, H] = normal(0, 0.5); param W2 : f32[H, H] = normal(0, 0.5)
  h1 = zeros[B, H]; h2 = zeros[B, H]
  hs = for x in xs {
    h2 = tanh(h1 @ W2 + h2)
    h1 = tanh(x @ W1 + h1)
    yield h2
  }
  output loss = sum(hs * hs)
  minimize loss
}'''))
    (loop,) = loops(graph.body)
    assert loop.attrs["n_state"] == 2


def test_a_recomputing_loop_keeps_its_layers():
    joint = differentiate(stacked("(recompute)"))
    assert [op.attrs["n_state"] for op in joint.body.ops if op.prim == "for"] == [5]


@pytest.mark.parametrize("options, seq", [("(lengths = lengths)", "reversed(xs)"),
                                          ("(checkpoint = 2)", "xs")])
def test_gradients_through_layers_split_in_loops(options, seq):
    graph = stacked(options, seq)
    verify(differentiate(graph))
    rng = np.random.default_rng(5)
    inputs = {"xs": rng.normal(size=(4, 3, 2)), "lengths": np.array([4, 1, 0], np.int32)}
    assert check_model_grads(graph, inputs, random_params(graph, scale=0.5)) < 1e-6


def test_a_dropout_between_layers_draws_the_same_masks_in_its_own_loop():
    """The dropout moves into layer 1's loop, so that h1's dropped values are a sequence
    whose product leaves layer 2's loop. Its stream is its own (its salt), so the joint
    graph (split) draws what the graph as checked (one loop, the reference) draws."""
    graph = stacked(P=0.5)
    joint = differentiate(graph)
    (first, _, _) = [op for op in joint.body.ops if op.prim == "for"]
    assert any(entry(op).random for op in walk_ops(first.blocks[0]))
    rng = np.random.default_rng(6)
    inputs = {"xs": rng.normal(size=(5, 3, 2)), "lengths": np.array([5, 5, 5], np.int32)}
    params = random_params(graph, scale=0.5)
    for seed in (0, 3):
        want = reference.run(graph, inputs, params, training=True, seed=seed)["loss"]
        got = reference.run(joint, inputs, params, training=True, seed=seed)["loss"]
        assert got == pytest.approx(want, rel=1e-12)
    unmasked = reference.run(graph, inputs, params, training=False)["loss"]
    assert unmasked != pytest.approx(want, rel=1e-3)


SIDE_BY_SIDE = '''
import "std/rnn.mdl"
model M(H = 3) {
  input xs : f32[T, B, H]; input ys : f32[T, B, H]
  a = zeros[B, H]; ac = zeros[B, H]; b = zeros[B, H]; bc = zeros[B, H]; h = zeros[B, H]
  hs = for x in xs, y in ys {
    a, ac = lstm(x, a, ac) as left
    b, bc = lstm(y, b, bc) as right
    h = gru(concat([a, b], axis = 1), h) as top
    yield h
  }
  output loss = sum(hs * hs) + sum(a * bc)
  minimize loss
}'''


def test_two_layers_side_by_side_run_as_one_loop_below_the_top():
    """The top layer reads both lower layers at once (concat([a, b]) @ W): neither lower
    layer alone makes its operand, both together do, so the states below the top (what
    does not read h) are the first loop."""
    graph = for_backends(model(SIDE_BY_SIDE))
    verify(graph)
    assert [op.attrs["n_state"] for op in loops(graph.body)] == [4, 1]
    top = loops(graph.body)[1]
    assert body_prims(top).count("matmul") == 1  # h @ U
    rng = np.random.default_rng(7)
    inputs = {"xs": rng.normal(size=(4, 2, 3)), "ys": rng.normal(size=(4, 2, 3))}
    graph = model(SIDE_BY_SIDE)
    assert check_model_grads(graph, inputs, random_params(graph, scale=0.5)) < 1e-6
