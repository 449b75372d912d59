"""Gradient checks (reference interpreter, float64, central differences) of recurrent
cells in loops with every loop option, of control flow inside loops, nested loops and
shared parameters; and the gradients of recompute and checkpoint against storing all."""
from __future__ import annotations

import numpy as np
import pytest
from ir_helpers import (CONTROL, EPS, TOLERANCE, check_coordinates, check_model_grads,
                        control_inputs, joint, model, random_params, rel_error, rnn_model)

from codegen.ir.graph import Value, clone_graph, walk_ops
from codegen.ir.shapes import Dim, Rows, ragged_rows
from codegen.ops.builder import Builder
from codegen.ops.verify import verify
from codegen.reference import interpreter as reference
from codegen.transforms.autodiff import vjp

CELLS = {"lstm": ("lstm(x, h, c)", "h, c"), "gru": ("gru(x, h)", "h"),
         "milstm": ("milstm(x, h, c)", "h, c"), "ln_lstm": ("ln_lstm(x, h, c)", "h, c")}
OPTIONS = ["", "(lengths = lengths)", "(recompute)", "(checkpoint = 2)",
           "(lengths = lengths, recompute)", "(lengths = lengths, checkpoint = 2)"]
T, B, E = 5, 3, 2


def seq_inputs(seed: int = 0, steps: int = T, lengths=(5, 2, 0)) -> dict:
    rng = np.random.default_rng(seed)
    return {"xs": rng.normal(size=(steps, B, E)), "lengths": np.array(lengths, np.int32)}


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("reversed_", [False, True], ids=["forward", "reversed"])
def test_cell_in_loop(cell, options, reversed_):
    call, state = CELLS[cell]
    graph = model(rnn_model(call, options, reversed_, state=state))
    joint(graph)
    assert check_model_grads(graph, seq_inputs(), random_params(graph)) < TOLERANCE


def test_every_coordinate_of_a_reversed_lstm_with_lengths():
    graph = model(rnn_model("lstm(x, h, c)", "(lengths = lengths)", True, H=2, state="h, c"))
    assert check_coordinates(graph, seq_inputs(steps=3, lengths=(3, 1, 2)),
                             random_params(graph)) < TOLERANCE


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("lengths", ["", "lengths = lengths, "])
@pytest.mark.parametrize("reversed_", [False, True], ids=["forward", "reversed"])
def test_recompute_and_checkpoint_give_the_gradients_of_storing(cell, lengths, reversed_):
    call, state = CELLS[cell]
    stored = model(rnn_model(call, f"({lengths.rstrip(', ')})" if lengths else "", reversed_,
                             state=state))
    params, inputs = random_params(stored), seq_inputs(1)
    want = reference.gradients(stored, inputs, params)
    for option in ("recompute", "checkpoint = 2", "checkpoint = 3", "checkpoint = 7"):
        graph = model(rnn_model(call, f"({lengths}{option})", reversed_, state=state))
        got = reference.gradients(graph, inputs, params)
        for k in params:
            assert np.allclose(got.params[k], want.params[k], rtol=1e-12, atol=1e-14), (option, k)
        assert np.allclose(got.inputs["xs"], want.inputs["xs"], rtol=1e-12, atol=1e-14)
        assert np.allclose(got.outputs["loss"], want.outputs["loss"], rtol=1e-13)


@pytest.mark.parametrize("name", sorted(CONTROL))
def test_control_flow(name):
    graph = model(CONTROL[name])
    joint(graph)
    assert check_coordinates(graph, control_inputs(name), random_params(graph, scale=0.3)) \
        < TOLERANCE


def test_the_shared_parameter_is_one_parameter_whose_gradient_sums_its_uses():
    graph = model(CONTROL["a parameter shared by three call sites"])
    assert sorted(graph.params) == ["enc/proj/W", "enc/proj/b"]
    g = joint(graph)
    # one sum of the three contributions, not a chain of adds
    sums = [op for op in g.backward.ops if op.prim == "add_n"
            and any(v is g.param_grads["enc/proj/W"] for v in op.outputs)]
    assert len(sums) == 1 and len(sums[0].inputs) == 3


def test_the_control_flow_cases_take_every_path():
    name = "while with a data-dependent trip count inside for"
    graph = model(CONTROL[name])
    trips = reference.run(graph, control_inputs(name), random_params(graph, scale=0.3))["trips"]
    assert list(trips) == [0, 3, 3, 2]
    name = "if inside for"
    graph = model(CONTROL[name])
    taken = reference.run(graph, control_inputs(name), random_params(graph, scale=0.3))["taken"]
    assert set(taken) == {0.0, 1.0}


def test_a_while_keeps_a_tape_whose_length_is_its_trip_count():
    g = joint(model(CONTROL["while with a data-dependent trip count inside for"]))
    taped = [op for block in g.blocks() for op in walk_ops(block)
             if op.prim == "while" and op.attrs.get("n_tape")]
    assert taped
    for op in taped:
        tapes = op.outputs[len(op.inputs):]
        assert all(t.type.shape[0] == Dim.of(op.attrs["trips"]) for t in tapes)


def test_while_that_never_runs_passes_the_gradient_through():
    graph = model("""
model M() {
  input x : f32[3]
  y = x
  while sum(y) > 100.0 { y = y * y }
  output loss = sum(y * y)
  minimize loss
}""")
    x = np.array([1.0, -2.0, 0.5])
    assert np.allclose(reference.gradients(graph, {"x": x}, {}).inputs["x"], 2 * x)


def numeric_training_grad(graph, inputs: dict, params: dict, name: str, seed: int):
    """Central differences of the training loss (its dropout masks drawn from `seed`, the
    same at every point) in each element of parameter `name`."""
    def loss(w):
        return float(reference.run(graph, inputs, {**params, name: w}, training=True,
                                   seed=seed)["loss"])
    numeric = np.zeros(params[name].shape)
    for idx in np.ndindex(*numeric.shape):
        step = np.zeros(numeric.shape)
        step[idx] = EPS
        numeric[idx] = (loss(params[name] + step) - loss(params[name] - step)) / (2 * EPS)
    return numeric


NESTED_DROPOUTS = {  # a loop of run-time length with a dropout, which a backward runs again
    "while in a recompute for": """
  for x in xs (recompute) {
    y = tanh(x @ W)
    while norm(y) > 0.5 { y = dropout(y, 0.1) * 0.5 }
    h = h + y
  }""",
    "while in an if in a while in a for": """
  for x in xs { while norm(h) < 1.0 { if c > 0.0 {
    y = tanh(h @ W) + c
    while norm(y) > 0.5 { y = dropout(y, 0.1) * 0.5 }
    h = h + y
  } else { h = h + 0.5 } } }""",
    "checkpointed for in an if in a for": """
  for y in xs { if c > 0.0 {
    for x in xs (checkpoint = 2) { h = tanh(dropout(x @ W, 0.5) + h + y) }
  } }""",
    "while in a for in a for": """
  for y in xs { for x in xs {
    z = tanh(x @ W + y)
    while norm(z) > 0.4 { z = dropout(z, 0.3) * 0.6 }
    h = h + z
  } }""",
    "while and dropout in a checkpointed for": """
  for x in xs (checkpoint = 2) {
    z = dropout(tanh(x @ W + h), 0.2)
    while norm(z) > 0.4 { z = dropout(z, 0.3) * 0.6 }
    h = 0.5 * h + z
  }""",
}


@pytest.mark.parametrize("nested", sorted(NESTED_DROPOUTS))
def test_a_loop_run_again_in_the_backward_draws_the_forward_masks(nested):
    """A loop of run-time length whose values the backward cannot keep (in a loop inside
    another loop, a recompute or checkpoint loop's body) runs again there, and its
    dropouts draw again at the positions their streams had in the forward
    (rng_position, kept a step; dropout_replay): the training gradient (the masks of one
    seed) against central differences, and the joint graph's. Until 2026-11-29 such a
    dropout was refused."""
    graph = model(f"""
model M(H = 3) {{
  input xs : f32[T, B, H]; input c : f32
  param W : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]{NESTED_DROPOUTS[nested]}
  output loss = sum(h * h)
  minimize loss
}}""")
    g = joint(graph)
    assert any(op.prim == "dropout_replay" for op in walk_ops(g.backward))
    inputs = {"xs": np.random.default_rng(1).normal(size=(3, 2, 3)), "c": np.array(1.0)}
    params = random_params(graph)
    losses = {float(reference.run(graph, inputs, params, training=True, seed=s)["loss"])
              for s in (3, 4)}
    assert len(losses) == 2  # the masks matter
    grads = reference.gradients(graph, inputs, params, training=True, seed=3)
    assert rel_error(grads.params["W"], numeric_training_grad(graph, inputs, params, "W", 3)) \
        < TOLERANCE
    built = reference.run(g, inputs, params, training=True, seed=3)
    assert np.allclose(built["grad:param:W"], grads.params["W"], rtol=1e-12)


@pytest.mark.parametrize("order", ["xs", "reversed(xs)"])
def test_a_while_in_a_for_keeps_its_tapes_in_the_for_masks_too(order):
    """A for that stores lays the tapes of a while in its body end to end (a ragged
    yield, its steps' trip counts differing): the backward does not run the while again,
    so a dropout in it keeps its masks and is differentiated. The weight's gradient over
    the second while's trips is one product after the backward loop, over the forward's
    tape and the backward's ragged yield laid out alike (whichever way each loop ran)."""
    graph = two_whiles(order, """
    while norm(y) > 0.4 { y = dropout(y, 0.2) * 0.6 @ W }
    z = h + x
    while mean(z * z) > 0.3 { z = 0.7 * tanh(z @ V) }
    h = h + y + z""")
    g = joint(graph)
    assert [op for op in g.backward.ops if op.prim == "matmul"
            and any(isinstance(s, Rows) for d in op.inputs[0].type.shape for s in d.symbols)]
    check_whiles_kept(graph, g, {"xs": np.random.default_rng(5).normal(size=(4, 2, 3))})


def two_whiles(order: str, step: str):
    """The graph of a model whose for over `order` runs `step` (two whiles, using W and V)
    after y = tanh(x @ W + h), and yields h."""
    return model(f"""
model M(H = 3) {{
  input xs : f32[T, B, H]
  param W : f32[H, H] = normal(0, 0.5)
  param V : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  hs = for x in {order} {{
    y = tanh(x @ W + h){step}
    yield h
  }}
  output loss = sum(hs * hs)
  minimize loss
}}""")


def check_whiles_kept(graph, g, inputs: dict, params: dict | None = None, count: int = 2):
    """`graph`'s `count` whiles are not run again in the backward of `g`, its joint
    graph, and its training gradients of W and V (a dropout's masks drawn from one seed)
    at `inputs` and `params` (random ones by default) match central differences; the
    graph a build compiles (g: sums moved after the loop) computes them too."""
    whiles = [op for block in g.blocks() for op in walk_ops(block) if op.prim == "while"]
    assert len(whiles) == count
    params = random_params(graph) if params is None else params
    grads = reference.gradients(graph, inputs, params, training=True, seed=3)
    for name in ("W", "V"):
        numeric = numeric_training_grad(graph, inputs, params, name, seed=3)
        assert rel_error(grads.params[name], numeric) < TOLERANCE, name
    built = reference.run(g, inputs, params, training=True, seed=3)
    for name in ("W", "V"):
        assert np.allclose(built[f"grad:param:{name}"], grads.params[name], rtol=1e-12)


@pytest.mark.parametrize("order", ["xs", "reversed(xs)"])
def test_a_while_in_an_if_in_a_for_keeps_its_tapes_in_the_for_masks_too(order):
    """An if in a for that stores keeps its branches' whiles' tapes as outputs (the
    branch that does not run the while yields no rows, [0, B, H], and sets its trip count
    to 0), which the for lays end to end: the backward runs neither while again, and a
    dropout in one is differentiated with the masks the forward drew."""
    graph = two_whiles(order, """
    if mean(x) > 0.0 {
      while norm(y) > 0.4 { y = dropout(y, 0.2) * 0.6 @ W }
    } else {
      z = h + x
      while mean(z * z) > 0.3 { z = 0.7 * tanh(z @ V) }
      y = y + z
    }
    h = h + y""")
    g = joint(graph)
    ifs = [op for op in walk_ops(g.body) if op.prim == "if"]
    assert [sum(Dim.of(0) == r.type.shape[0] for r in block.results if r.type.rank)
            for block in ifs[0].blocks] == [2, 4]  # each branch: the other's tapes
    xs = np.random.default_rng(5).normal(size=(6, 2, 3))
    assert len({bool(x.mean() > 0) for x in xs}) == 2  # both branches run
    check_whiles_kept(graph, g, {"xs": xs})


def test_a_while_in_an_if_at_the_top_level_keeps_its_tapes_masks_too():
    """An if in no loop outputs its branches' whiles' tapes as the one in a for does (the
    backward reads them as it reads any forward value): neither while runs again, and
    the dropout in one is differentiated with the forward's masks, in both branches and
    in an if nested in the other."""
    graph = model("""
model M(H = 3) {
  input x : f32[B, H]
  param W : f32[H, H] = normal(0, 0.5)
  param V : f32[H, H] = normal(0, 0.5)
  y = tanh(x @ W)
  if mean(x) > 0.0 {
    while norm(y) > 0.4 { y = dropout(y, 0.2) * 0.6 @ W }
  } else {
    if sum(y) < 0.0 {
      z = y + x
      while mean(z * z) > 0.3 { z = 0.7 * tanh(dropout(z, 0.1) @ V) }
      y = y + z
    }
  }
  output loss = sum(y * y)
  minimize loss
}""")
    g = joint(graph)
    rng = np.random.default_rng(5)
    ran = set()
    for x in (np.abs(rng.normal(size=(2, 3))), -np.abs(rng.normal(size=(2, 3)))):
        params = random_params(graph)
        params["W"] = np.abs(params["W"])  # y > 0 for x > 0, y < 0 for x < 0
        ran.add((x.mean() > 0, np.tanh(x @ params["W"]).sum() < 0))
        check_whiles_kept(graph, g, {"x": x}, params)
    assert ran == {(True, False), (False, True)}  # each while ran


@pytest.mark.parametrize("order", ["xs", "reversed(xs)"])
def test_a_while_in_a_for_in_an_if_keeps_its_tapes_masks_too(order):
    """A for in an if in no loop keeps its whiles' tapes as it would in no if: the if
    outputs the for's ragged yields ([rows(trips), B, H]), the other branch no rows, and
    the backward if's for reads them (until 2026-11-29 it ran both whiles again and
    refused the dropout). Gradients against central differences in both branches, the
    for inside an if nested in the then branch."""
    graph = model(f"""
model M(H = 3) {{
  input xs : f32[T, B, H]; input c : f32
  param W : f32[H, H] = normal(0, 0.5)
  param V : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  if c > 0.0 {{
    if c < 5.0 {{
      hs = for x in {order} {{
        y = tanh(x @ W + h)
        while norm(y) > 0.4 {{ y = dropout(y, 0.2) * 0.6 @ W }}
        z = h + x
        while mean(z * z) > 0.3 {{ z = 0.7 * tanh(z @ V) }}
        h = h + y + z
        yield h
      }}
      h = h + hs[0]
    }}
  }} else {{
    h = h + tanh(xs[0] @ V)
  }}
  output loss = sum(h * h)
  minimize loss
}}""")
    g = joint(graph)
    ifs = [op for op in walk_ops(g.body) if op.prim == "if"]
    rows = [r for r in ifs[0].outputs if ragged_rows(r.type)]
    assert len(rows) >= 2  # the whiles' tapes, laid end to end by the for
    assert [sum(Dim.of(0) == r.type.shape[0] for r in block.results if r.type.rank)
            for block in ifs[0].blocks] == [0, len(rows)]  # the else branch: no rows
    xs = np.random.default_rng(5).normal(size=(4, 2, 3))
    for c in (1.0, -1.0):
        check_whiles_kept(graph, g, {"xs": xs, "c": np.array(c)})


def test_whiles_in_a_while_keep_their_tapes_masks_too():
    """A while in no loop keeps the tapes of the whiles in its body (one in an if), each
    trip's laid end to end ([rows(trips), B, H]: their trips differ from trip to trip),
    as a for keeps them: none of the three runs again in the backward, whose for over
    the outer while's trips reads each trip's rows, and the dropout keeps its masks
    (until 2026-11-29 the backward ran the inner whiles again and refused it)."""
    graph = in_a_while("n < 3 and norm(h) > 0.2", """
    y = tanh(h @ W + x)
    while norm(y) > 0.4 { y = dropout(y, 0.2) * 0.6 @ W }
    z = h + x
    if mean(z) > 0.0 {
      while mean(z * z) > 0.3 { z = 0.7 * tanh(z @ V) }
    }
    h = 0.5 * (y + z)""")
    g = joint(graph)
    outer = next(op for op in walk_ops(g.body) if op.prim == "while")
    assert len([v for v in outer.outputs if ragged_rows(v.type)]) >= 2
    params = random_params(graph)
    trips = set()
    for seed in range(3):
        x = np.random.default_rng(seed).normal(size=(2, 3))
        check_whiles_kept(graph, g, {"x": x}, params, count=3)
        trips.add(int(reference.run(graph, {"x": x}, params)["trips"]))
    assert max(trips) >= 2  # the inner whiles' tapes of several trips end to end


def test_a_while_whose_only_tapes_are_a_while_s_counts_its_trips_on_one_more():
    """An outer while whose body keeps nothing but an inner while's tapes (ragged: their
    rows are every trip's inner trips) pushes an i32 a trip too, from which its backward
    learns how many trips to run (the fuzzer's Small768_0: an IndexError building it)."""
    graph = in_a_while("n < 2", """
    k = 0
    while k < 2 { h = tanh(dropout(h, 0.1) @ W + x @ V); k = k + 1 }""")
    check_whiles_kept(graph, joint(graph), {"x": np.random.default_rng(1).normal(size=(2, 3))})


def in_a_while(condition: str, body: str):
    """The graph of a model whose while on `condition` (n its trip count, output as
    `trips`) runs `body` on h = tanh(x @ W), with W and V to use."""
    return model(f"""
model M(H = 3) {{
  input x : f32[B, H]
  param W : f32[H, H] = normal(0, 0.5)
  param V : f32[H, H] = normal(0, 0.5)
  h = tanh(x @ W)
  n = 0
  while {condition} {{{body}
    n = n + 1
  }}
  output loss = sum(h * h)
  output trips = n
  minimize loss
}}""")


@pytest.mark.parametrize("dropout", [False, True])
def test_a_checkpointed_for_in_an_if_keeps_what_it_keeps_at_the_top_level(dropout):
    """A `checkpoint` loop in an if in no loop keeps its segments' start states and its
    masks ([ceil(T/k), ...]: known once the call's dims are) as the if's outputs, the
    other branch yielding zeros: its backward runs as many loops as at the top level
    (until 2026-11-29 it ran the whole forward loop again, and refused a dropout). Both
    branches against central differences."""
    def source(top: bool) -> str:
        x = "dropout(x, 0.5)" if dropout else "x"
        loop = f"for x in xs (checkpoint = 2) {{ h = tanh({x} @ W + h) }}"
        body = loop if top else f"if c > 0.0 {{ {loop} }} else {{ h = h + c }}"
        return f"""
model M(H = 3) {{
  input xs : f32[T, B, H]; input c : f32
  param W : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  {body}
  output loss = sum(h * h) + 0.0 * c
  minimize loss
}}"""
    def fors(graph) -> int:
        return sum(op.prim == "for" for b in joint(graph).blocks() for op in walk_ops(b))
    graph = model(source(top=False))
    assert fors(graph) == fors(model(source(top=True)))
    xs = np.random.default_rng(5).normal(size=(5, 2, 3))
    params = random_params(graph)
    for c in (1.0, -1.0):
        inputs = {"xs": xs, "c": np.array(c)}
        grads = reference.gradients(graph, inputs, params, training=True, seed=3)
        numeric = numeric_training_grad(graph, inputs, params, "W", seed=3)
        assert rel_error(grads.params["W"], numeric) < TOLERANCE


def test_a_state_read_only_by_conditions_carries_no_cotangent():
    """A while's convergence measure d (and a for's flag f) reaches the loss only through
    conditions: its cotangent is zero at every step, so the backward neither carries it
    nor differentiates what computes it (mean(abs(g - h)): no sign in the backward; until
    2026-11-29 it did, with zeros: the ponder benchmark's training step at B=32 took
    1.09-1.14x the time). A parameter P read only by conditions (one in a branch) gets
    no cotangent from the if nor an accumulator in the backward loops either. The
    gradients still match central differences."""
    graph = model("""
model M(H = 3) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = normal(0, 0.5)
  param V : f32[H, H] = normal(0, 0.5)
  param P : f32[H] = normal(0, 0.5)
  h = zeros[B, H]
  f = 0.0
  for x in xs {
    h = tanh(x @ W + h)
    d = 1.0
    n = 0
    while n < 4 and d > 0.02 * (1.0 + mean(abs(P))) {
      g = tanh(x + h @ V)
      d = mean(abs(g - h))
      h = g
      n = n + 1
    }
    if f > 0.5 { if mean(P) > 0.0 { h = h * 0.5 } }
    f = max(abs(x))
  }
  output loss = sum(h * h)
  minimize loss
}""")
    g = joint(graph)
    backward = [op.prim for op in walk_ops(g.backward)]
    assert "sign" not in backward and "abs" not in backward
    loops = [op for op in walk_ops(g.backward) if op.prim == "for"]
    # the for's backward carries d h, the while's d g and x's sum (d f and d d: [2, 3])
    assert [op.attrs["n_state"] for op in loops] == [1, 2]
    xs = np.random.default_rng(7).normal(size=(4, 2, 3))
    check_coordinates(graph, {"xs": xs}, random_params(graph))


def test_dropout_in_a_recomputed_loop_keeps_its_masks():
    graph = model("""
model M(H = 3) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  hs = for x in xs (recompute) {
    h = tanh(dropout(x, 0.5) @ W + h)
    yield h
  }
  output loss = sum(hs * hs)
  minimize loss
}""")
    xs, params = np.random.default_rng(4).normal(size=(4, 2, 3)), random_params(graph)
    grads = reference.gradients(graph, {"xs": xs}, params, training=True, seed=11)
    numeric = numeric_training_grad(graph, {"xs": xs}, params, "W", seed=11)
    assert rel_error(grads.params["W"], numeric) < TOLERANCE
    evaluation = reference.gradients(graph, {"xs": xs}, params)
    assert not np.allclose(evaluation.params["W"], grads.params["W"])


def test_a_while_in_a_for_nested_in_a_recomputing_loop_is_run_again():
    """A for in a block differentiated apart (here the loop of a checkpoint's segment,
    which loop fission splits, its while and the dropout reading no state in a loop of
    their own) keeps no ragged yields: its tapes would have to be recomputed by the
    segment's backward, the dropout with them (fuzzer seed 672, Large672_6). Its while
    runs again in its own backward, as before ragged yields."""
    graph = model("""
model M(H = 3) {
  input xs : f32[T, B, H]
  param p : f32 = normal(0, 0.5)
  param W : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  for x in xs (checkpoint = 2) {
    y = x
    while norm(y) > 0.5 { y = 0.5 * y }
    h = tanh(h @ W + y * dropout(p, 0.5))
  }
  output loss = sum(h * h)
  minimize loss
}""")
    g = joint(graph)
    assert not any(isinstance(s, Rows) for block in g.blocks() for op in walk_ops(block)
                   for v in op.outputs for d in v.type.shape for s in d.symbols)
    xs, params = np.random.default_rng(6).normal(size=(5, 2, 3)), random_params(graph)
    grads = reference.gradients(graph, {"xs": xs}, params, training=True, seed=4)
    numeric = numeric_training_grad(graph, {"xs": xs}, params, "W", seed=4)
    assert rel_error(grads.params["W"], numeric) < TOLERANCE


SECOND_ORDER = {
    "gru, reversed, lengths, checkpoint": rnn_model("gru(x, h)", "(lengths = lengths, "
                                                    "checkpoint = 2)", True, H=2, state="h"),
    "while in while": CONTROL["while in while"],
    "if inside for": CONTROL["if inside for"],
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_gradient_of_gradient_through_loops(name):
    """d/dW sum(V * dloss/dW): the backward loops differentiated again."""
    graph = clone_graph(model(SECOND_ORDER[name]))
    b = Builder(graph.body)
    param = sorted(graph.params)[0]
    w = graph.params[param].value
    loss = graph.outputs["loss"]
    grad, = vjp(graph.body, [loss], [b.const(1.0, "f64")], [w])
    graph.inputs["V"] = Value(w.type, "V")
    inner = b.sum(b.mul(grad, graph.inputs["V"]), axes=tuple(range(w.type.rank)),
                  keepdims=False)
    second, = vjp(graph.body, [inner], [b.const(1.0, "f64")], [w])
    graph.outputs.update(inner=inner, second=second)
    verify(graph)
    inputs = control_inputs(name) if name in CONTROL else seq_inputs(2)
    inputs["V"] = np.random.default_rng(8).normal(size=tuple(d.value for d in w.type.shape))
    params = random_params(graph, scale=0.3)
    numeric = np.zeros(np.shape(params[param]))
    for idx in np.ndindex(numeric.shape):
        def at(step):
            moved = dict(params)
            moved[param] = params[param].copy()
            moved[param][idx] += step
            return float(reference.run(graph, inputs, moved)["inner"])
        numeric[idx] = (at(EPS) - at(-EPS)) / (2 * EPS)
    assert rel_error(reference.run(graph, inputs, params)["second"], numeric) < TOLERANCE
