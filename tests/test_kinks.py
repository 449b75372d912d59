"""Gradients where PyTorch (and JAX) define them by convention: `x ** y` at x = 0 (d/dy was
0 * log(0), NaN: one SGD step of `relu(x) ** p` made p NaN), `maximum`/`minimum` at a tie
(half each; it all went to the first operand, so `maximum(a, b)` and `maximum(b, a)`
differed), `clip` at its bounds (all to x, as `clamp`). Against torch.autograd on the
reference, and every build against the reference."""
from __future__ import annotations

import numpy as np
import pytest
from source_files import built_for, source_file

from codegen.reference import interpreter as reference
from dsl import check_file

SOURCE = """
model Kinks() {
  param p : f64[5] = ones
  param a : f64[5] = zeros
  param b : f64[5] = zeros
  input x : f64[5]
  input q : f64[5]
  input w : f64[5]
  output loss = sum(relu(x) ** p) + sum(w * x ** q) + sum(w * maximum(a, b))
                + sum(w * w * minimum(b, a)) + sum(w * clip(a, b - 1.0, b))
  minimize loss
}
"""
INPUTS = {"x": np.array([0.0, 0.0, 2.0, -1.0, 0.5]),
          "q": np.array([0.0, 2.0, 0.0, 3.0, 0.5]),
          "w": np.array([1.0, -2.0, 3.0, 0.5, 1.5])}
PARAMS = {"p": np.array([1.5, 2.0, 0.5, 1.0, 3.0]),
          "a": np.array([1.0, 2.0, -1.0, 0.0, 4.0]),   # ties with b at 0, 3 (and b - 1 at 1)
          "b": np.array([1.0, 3.0, -2.0, 0.0, 5.0])}


def torch_gradients() -> dict:
    torch = pytest.importorskip("torch")
    t = {k: torch.tensor(v, requires_grad=True) for k, v in PARAMS.items()}
    x, q, w = (torch.tensor(INPUTS[k]) for k in ("x", "q", "w"))
    loss = (torch.relu(x) ** t["p"]).sum() + (w * x ** q).sum() \
        + (w * torch.maximum(t["a"], t["b"])).sum() + (w * w * torch.minimum(t["b"], t["a"])).sum() \
        + (w * torch.clamp(t["a"], t["b"] - 1.0, t["b"])).sum()
    loss.backward()
    return {k: v.grad.numpy() for k, v in t.items()}


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "kinks.mdl", SOURCE)


def test_the_reference_differentiates_as_pytorch(path):
    got = reference.gradients(check_file(str(path)).graph, INPUTS, PARAMS).params
    for name, want in torch_gradients().items():
        np.testing.assert_allclose(got[name], want, rtol=1e-14, atol=1e-15, err_msg=name)


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_builds_differentiate_as_the_reference(path, target):
    m = built_for(path, target, dtype="f64").Kinks(seed=0)
    m.set_params(PARAMS)
    m.forward(**INPUTS, training=True)
    got = m.backward()
    want = reference.gradients(check_file(str(path)).graph, INPUTS, PARAMS).params
    for name in PARAMS:
        assert np.all(np.isfinite(got[name])), name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-14, atol=1e-15, err_msg=name)
    # the ties share: half of w to a and half to b where they are equal
    assert got["a"][0] == want["a"][0] and want["b"][3] == pytest.approx(0.5 * 0.5 + 0.25 * 0.5)
