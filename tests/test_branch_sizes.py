"""A size made by subtracting (`xs[1:]`'s `T - 1` rows, `zeros[T - 2]`, `range(T - 2)`)
in a branch of an `if` in no loop is checked where that branch starts, not before the
call: `if T > 1 { ... xs[1:] ... }` runs at T = 0 and 1, taking the other branch, on
the reference, the cpu target (f32, f64) and the emulated device, forward and backward
(the branch's tapes of such a size are no rows where it does not run: if_op.no_rows).
Until 2026-12-06 every such size was checked before the call, and these models were
refused at T = 0 (and the second at T = 1). A size outside any if, or in a loop's body,
is still refused before anything runs, and one in a branch the call takes where that
branch starts, in the same words on every target."""
from __future__ import annotations

import re

import numpy as np
import pytest

from codegen.ops.verify import verify
from codegen.pipeline import differentiate
from codegen.reference import interpreter as reference
from dsl import check_file
from ir_helpers import check_model_grads
from source_files import built_for

from test_native import TOLERANCE, assert_training_matches, rel_error

GUARDED = """
model Diff() {
  input xs : f32[T, B, 3]
  d = zeros[B, 3]
  if T > 1 { d = sum(xs[1:] - xs[:-1], axis = 0) }
  output loss = sum(d * d)
  minimize loss
}

model Shorter() {
  input xs : f32[T, B, 3]
  param w : f32[3] = uniform(0.5, 1.5)
  if T > 2 {
    z = tanh(zeros[T - 2, B, 3] + xs[2:] * w)
    d = sum(z * xs[:-2], axis = 0)
    for t in range(T - 2) { d = d + tanh(xs[t + 1] * w) }
  } else {
    d = sum(xs * w, axis = 0)
  }
  output loss = sum(d * d)
  minimize loss
}

model Nested() {
  input xs : f32[T, B, 3]
  param w : f32[3] = uniform(0.5, 1.5)
  d = zeros[B, 3]
  if sum(xs * xs) < 1000000.0 {
    if T > 1 { d = sum(tanh(xs[1:] * w), axis = 0) } else { d = d + w }
  }
  output loss = sum(d * d)
  minimize loss
}
"""
MODELS = ("Diff", "Shorter", "Nested")
STEPS = (0, 1, 2, 3, 5)  # the else branch at T = 0 and 1 (and 2 for Shorter)

REFUSED = """
model Outside() {
  input xs : f32[T, B, 3]
  d = sum(xs[1:] - xs[:-1], axis = 0)
  output loss = sum(d * d)
  minimize loss
}

model Taken() {
  input xs : f32[T, B, 3]
  d = zeros[B, 3]
  if sum(xs) >= 0.0 { d = sum(xs[2:], axis = 0) }
  output loss = sum(d * d)
  minimize loss
}

model InLoop() {
  input xs : f32[T, B, 3]
  input ys : f32[U, B]
  d = zeros[B, 3]
  for y in ys { if T > 1 { d = d + sum(xs[1:], axis = 0) } }
  output loss = sum(d * d)
  minimize loss
}
"""


def case(T: int, seed: int = 0) -> dict:
    return {"xs": np.random.default_rng(seed + T).normal(size=(T, 2, 3))}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    path = tmp_path_factory.mktemp("guarded") / "guarded.mdl"
    path.write_text(GUARDED)
    return path


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    path = tmp_path_factory.mktemp("refused") / "sizes.mdl"
    path.write_text(REFUSED)
    return path


@pytest.mark.parametrize("model", MODELS)
def test_the_reference_runs_either_branch_and_its_gradients_are_right(guarded, model):
    """Each T runs, and the gradients autodiff makes (the branch's tapes no rows where it
    does not run) agree with finite differences, and with the verified graph the passes
    make of them."""
    graph = check_file(str(guarded), model=model, dtype="f64").graph
    made = differentiate(graph)
    verify(made)
    params = reference.init_params(graph, seed=0)
    for T in STEPS:
        inputs = case(T)
        assert check_model_grads(graph, inputs, params) < 1e-7, T
        want = reference.gradients(graph, inputs, params)
        got = reference.run(made, inputs, params)
        assert got["loss"] == pytest.approx(want.outputs["loss"], rel=1e-12, abs=1e-12)
        for name, g in want.params.items():
            np.testing.assert_allclose(got[f"grad:param:{name}"], g, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got["grad:input:xs"], want.inputs["xs"], rtol=1e-10,
                                   atol=1e-12)


@pytest.mark.parametrize("target, dtype", [("cpu", "f32"), ("cpu", "f64"),
                                           ("emulated", "f32"), ("emulated", "f64")])
def test_every_target_runs_and_trains_as_the_reference_does(guarded, target, dtype):
    module = built_for(guarded, target, dtype=dtype, name=f"guarded_{target}_{dtype}")
    floats = np.float32 if dtype == "f32" else np.float64
    for model in MODELS:
        graph = check_file(str(guarded), model=model, dtype=dtype).graph
        m = getattr(module, model)(seed=0)
        params = {k: np.array(v) for k, v in m.params.items()}
        for T in STEPS:
            inputs = {k: v.astype(floats) for k, v in case(T, seed=1).items()}
            want = reference.run(graph, inputs, params)["loss"]
            assert rel_error(m.forward(**inputs)["loss"], want) < TOLERANCE[dtype], (model, T)
            assert_training_matches(m, graph, inputs, TOLERANCE[dtype])


def at(text: str) -> str:
    """Where `text` first stands in REFUSED, as a refusal names it: `sizes.mdl:line:col`
    (a slice is made at its `[`)."""
    before = REFUSED[:REFUSED.index(text)]
    return f"sizes.mdl:{before.count(chr(10)) + 1}:{len(before) - before.rfind(chr(10))}"


def calls(path, model: str, target: str) -> list:
    """The calls of `model` on `target`, each giving its outputs: the reference's run and
    gradients, or a module's inference and training forward."""
    if target == "reference":
        graph = check_file(str(path), model=model).graph
        return [lambda **inputs: reference.run(graph, inputs, {}),
                lambda **inputs: reference.gradients(graph, inputs, {}).outputs]
    m = getattr(built_for(path, target, name=f"sizes_{target}"), model)()
    return [m.forward, lambda **inputs: m.forward(**inputs, training=True)]


def messages(path, model: str, target: str, inputs: dict) -> list[str]:
    """What refuses each call of `model` on `target` at `inputs`."""
    found = []
    for call in calls(path, model, target):
        with pytest.raises(ValueError) as refusal:
            call(**inputs)
        found.append(str(refusal.value))
    return found


@pytest.mark.parametrize("target", ["reference", "cpu", "emulated"])
def test_a_size_outside_a_guarding_if_is_refused_as_before(refused, target):
    """Outside any if the size is refused before the call runs; in a branch the call
    takes, where the branch starts (an else branch at the same dims runs); in a loop's
    body, if there or not, before the call, as the loop's other values are. The same
    words everywhere."""
    xs = np.ones((0, 2, 3), np.float32)
    outside = (f"the inputs' dims (T = 0, B = 2) make T - 1, the size of a value at "
               f"{at('[1:]')}, -1: a size cannot be negative")
    assert messages(refused, "Outside", target, {"xs": xs}) == [outside] * 2
    taken = (f"the inputs' dims (T = 1, B = 2) make T - 2, the size of a value at "
             f"{at('[2:]')}, -1: a size cannot be negative")
    assert messages(refused, "Taken", target, {"xs": np.ones((1, 2, 3), np.float32)}) \
        == [taken] * 2
    for call in calls(refused, "Taken", target):  # the else branch: nothing to refuse
        assert call(xs=-np.ones((1, 2, 3), np.float32))["loss"] == 0
    in_loop = (r"the inputs' dims \(T = 0, B = 2, U = 3\) make T - 1, the size of a value "
               r"at sizes.mdl:\d+:\d+, -1: a size cannot be negative")
    for found in messages(refused, "InLoop", target,
                          {"xs": xs, "ys": np.ones((3, 2), np.float32)}):
        assert re.fullmatch(in_loop, found), found
