"""`stop_gradient`: the value goes on, its gradient does not. The reference's gradient is
the derivative with the stopped values held (central differences through Held) and not
the plain one; the builds on both targets give the reference's; `mdlc gradcheck` checks
such a model against the held differences; ONNX runs it (an Identity) as the reference."""
from __future__ import annotations

import numpy as np
import pytest
from ir_helpers import EPS, rel_error
from source_files import source_file

from codegen.cli import main as mdlc
from codegen.export import export_onnx
from codegen.ops.context import Held
from codegen.pipeline import load
from codegen.reference import interpreter as reference
from dsl import check_file

SOURCE = """
model Stopped(H = 3, K = 2) {
  input xs : f32[T, B, H]
  param U : f32[H, H] = uniform(-0.8, 0.8)
  param W : f32[H, H] = uniform(-0.8, 0.8)
  h = zeros[B, H]
  hs = for x in xs, t in range(T) (checkpoint = 2) {
    if t % K == 0 { h = stop_gradient(h) }       # truncated every K steps
    h = tanh(h @ U + x @ W)
    yield h
  }
  g = hs[0]
  k = 0
  while k < 2 { g = tanh(stop_gradient(g) @ U + g); k = k + 1 }
  quarters = h + stop_gradient(f32(i32(h * 4.0)) / 4.0 - h)   # straight through
  output loss = sum(hs * hs) + sum(quarters * W[0]) + sum(g)
  minimize loss
}
"""


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "stopped.mdl", SOURCE)


def case():
    rng = np.random.default_rng(3)
    return {"xs": rng.normal(size=(5, 2, 3))}


def differences(graph, inputs, params, held: Held | None) -> dict[str, np.ndarray]:
    """Central differences of the loss in every weight, stopped values held or not."""
    out = {}
    for name, value in params.items():
        numeric = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            def at(step):
                moved = {k: v.copy() for k, v in params.items()}
                moved[name][idx] += step
                return float(reference.run(graph, inputs, moved, held=held and held.replay())
                             ["loss"])
            numeric[idx] = (at(EPS) - at(-EPS)) / (2 * EPS)
        out[name] = numeric
    return out


def test_the_gradient_is_the_derivative_with_the_stopped_values_held(path):
    graph = check_file(str(path), dtype="f64").graph
    inputs = case()
    params = {k: np.array(v) for k, v in
              load(path, dtype="f64").Stopped(seed=0).params.items()}
    got = reference.gradients(graph, inputs, params).params
    held = Held()
    reference.run(graph, inputs, params, held=held)
    assert len(held.values) == 5 // 2 + 1 + 2 + 1  # steps 0, 2, 4; two trips; quarters
    for name, numeric in differences(graph, inputs, params, held).items():
        assert rel_error(got[name], numeric) < 1e-6, name
    plain = differences(graph, inputs, params, None)
    assert all(rel_error(got[k], plain[k]) > 1e-2 for k in params)  # the stops stopped


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_builds_give_the_references_gradient(path, target):
    how = dict(target="cuda", emulate=True) if target == "emulated" else {}
    m = load(path, dtype="f64", **how).Stopped(seed=0)
    graph = check_file(str(path), dtype="f64").graph
    inputs = case()
    params = {k: np.array(v) for k, v in m.params.items()}
    want = reference.gradients(graph, inputs, params)
    out = m.forward(**inputs, training=True)
    grads = m.backward()
    assert abs(out["loss"] - want.outputs["loss"]) < 1e-10 * abs(want.outputs["loss"])
    for name in params:
        assert rel_error(grads[name], want.params[name]) < 1e-10, name
    assert rel_error(grads["input:xs"], want.inputs["xs"]) < 1e-10


def test_gradcheck_holds_the_stopped_values(path, capsys):
    assert mdlc(["gradcheck", str(path)]) == 0
    assert "FAILED" not in capsys.readouterr().out


def test_onnx_runs_it_as_the_reference_does(path, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    out = export_onnx(path, tmp_path / "stopped.onnx")
    graph = check_file(str(path)).graph
    xs = case()["xs"].astype(np.float32)
    params = {k: np.array(v) for k, v in load(path).Stopped(seed=0).params.items()}
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = session.run(["loss"], {"xs": xs})[0]
    want = reference.run(graph, {"xs": xs}, params, dtype=np.float32)["loss"]
    assert rel_error(got, want) < 1e-4
