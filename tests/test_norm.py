"""`norm` at a zero vector: its value 0, its gradient 0 (PyTorch's), not NaN. Written as
sqrt(sum(x * x)), a zero row's gradient was sqrt's infinite slope times 0, NaN, and one
optimizer step with it made every weight NaN (a bag of embeddings with an all-padding
row). On the reference, natively on both targets; NaN and infinity still pass through."""
from __future__ import annotations

import numpy as np
import pytest
from source_files import built_for, source_file

from codegen.reference import interpreter as reference
from dsl import check_file

SOURCE = """
model Norms() {
  param w : f64[3] = ones
  input x : f64[B, 3]
  output rows = norm(x * w, axis = 1)
  output kept = norm(x, axis = 1, keepdims = true)
  output whole = norm(x * w)
  output loss = sum(rows) + whole
  minimize loss
}
"""
# a zero row, a row of one tiny value (whose square is 0 in f64: the rule is on the sum)
X = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0], [0.0, -3.0, 4.0], [1e-200, 0.0, 0.0]])


def want(x: np.ndarray, w: np.ndarray) -> dict:
    """Values and gradients as PyTorch's norm has them: x / |x| where |x| > 0, else 0."""
    y = x * w
    rows = np.sqrt(np.sum(y * y, axis=1))
    whole = np.sqrt(np.sum(y * y))
    with np.errstate(invalid="ignore", divide="ignore"):
        dy = np.where(rows[:, None] > 0, y / rows[:, None], 0.0) + y / whole
    return {"rows": rows, "whole": whole, "kept": np.sqrt(np.sum(x * x, 1, keepdims=True)),
            "w": np.sum(dy * x, axis=0), "x": dy * w}


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "norms.mdl", SOURCE)


def test_the_reference_gives_a_zero_row_a_zero_gradient(path):
    graph = check_file(str(path)).graph
    w = np.array([0.5, 2.0, -1.0])
    got = reference.gradients(graph, {"x": X}, {"w": w})
    expected = want(X, w)
    np.testing.assert_allclose(got.params["w"], expected["w"], rtol=1e-14)
    assert np.all(np.isfinite(got.params["w"]))
    values = reference.run(graph, {"x": X}, {"w": w})
    np.testing.assert_allclose(values["rows"], expected["rows"], rtol=1e-15)
    assert values["rows"][0] == 0.0 and values["rows"][3] == 0.0


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_builds_give_a_zero_row_a_zero_gradient(path, target):
    m = built_for(path, target, dtype="f64").Norms(seed=0)
    w = np.array([0.5, 2.0, -1.0])
    m.set_params({"w": w})
    out = m.forward(x=X, training=True)
    grads = m.backward()
    expected = want(X, w)
    for name in ("rows", "kept", "whole"):
        np.testing.assert_allclose(out[name], expected[name], rtol=1e-15, err_msg=name)
    np.testing.assert_allclose(grads["w"], expected["w"], rtol=1e-14)
    np.testing.assert_allclose(grads["input:x"], expected["x"], rtol=1e-14, atol=1e-300)
    assert np.all(grads["input:x"][0] == 0.0)
    m.set_optimizer("sgd", lr=0.1)  # the step that once made every weight NaN
    m.train_step(x=X)
    assert np.all(np.isfinite(m.params["w"]))
    odd = m.forward(x=np.array([[np.nan, 0.0, 0.0], [np.inf, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    assert np.isnan(odd["rows"][0]) and odd["rows"][1] == np.inf and odd["rows"][2] == 0.0


def test_gradients_are_pytorchs(path):
    torch = pytest.importorskip("torch")
    w = np.array([0.5, 2.0, -1.0])
    tw = torch.tensor(w, requires_grad=True)
    tx = torch.tensor(X, requires_grad=True)
    loss = (tx * tw).norm(dim=1).sum() + (tx * tw).norm()
    loss.backward()
    got = reference.gradients(check_file(str(path)).graph, {"x": X}, {"w": w})
    np.testing.assert_allclose(got.params["w"], tw.grad.numpy(), rtol=1e-14)
