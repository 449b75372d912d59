"""`cross_entropy(..., label_smoothing = e)`: PyTorch's F.cross_entropy with
label_smoothing (padding as its ignore_index), value and gradient; a batch of no real
tokens gives 0; both targets and onnxruntime give the reference's."""
from __future__ import annotations

import numpy as np
import pytest
from source_files import source_file

from codegen.cli import main as mdlc
from codegen.export import export_onnx
from codegen.pipeline import load
from codegen.reference import interpreter as reference
from dsl import check_file

SOURCE = """
model Smoothed(C = 6) {
  input xs : f32[T, B, C]
  input targets : i32[T, B]
  input lengths : i32[B]
  param W : f32[C, C] = uniform(-1, 1)
  logits = xs @ W
  output padded = cross_entropy(logits, targets, lengths = lengths, label_smoothing = 0.1)
  output flat = cross_entropy(reshape(logits, [T * B, C]), reshape(targets, [T * B]),
                              label_smoothing = 0.3)
  output loss = padded + flat
  minimize loss
}
"""


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "smoothed.mdl", SOURCE)


def case(lengths=(5, 2, 4), T=5, C=6, seed=0):
    rng = np.random.default_rng(seed)
    B = len(lengths)
    return {"xs": rng.normal(size=(T, B, C)) * 2,
            "targets": rng.integers(0, C, (T, B)).astype(np.int32),
            "lengths": np.array(lengths, np.int32)}


def test_it_is_pytorchs(path):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    graph = check_file(str(path), dtype="f64").graph
    inputs = case()
    W = np.random.default_rng(1).uniform(-1, 1, (6, 6))
    out = reference.run(graph, inputs, {"W": W})
    grad = reference.gradients(graph, inputs, {"W": W}).params["W"]
    w = torch.tensor(W, requires_grad=True)
    logits = torch.tensor(inputs["xs"]) @ w
    targets = torch.tensor(inputs["targets"]).long()
    real = torch.arange(5)[:, None] < torch.tensor(inputs["lengths"])[None, :]
    padded = F.cross_entropy(logits.reshape(-1, 6), torch.where(real, targets, -100).reshape(-1),
                             label_smoothing=0.1)
    flat = F.cross_entropy(logits.reshape(-1, 6), targets.reshape(-1), label_smoothing=0.3)
    (padded + flat).backward()
    assert abs(float(out["padded"]) - padded.item()) < 1e-13
    assert abs(float(out["flat"]) - flat.item()) < 1e-13
    np.testing.assert_allclose(grad, w.grad.numpy(), rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_builds_give_the_references_loss_and_gradient(path, target):
    how = dict(target="cuda", emulate=True) if target == "emulated" else {}
    m = load(path, dtype="f64", **how).Smoothed(seed=0)
    graph = check_file(str(path), dtype="f64").graph
    params = {k: np.array(v) for k, v in m.params.items()}
    for lengths in ((5, 2, 4), (0, 0, 0), (1,)):
        inputs = case(lengths)
        out = m.forward(**inputs, training=True)
        grads = m.backward()
        want = reference.run(graph, inputs, params)
        for name in ("padded", "flat", "loss"):
            assert abs(float(out[name]) - float(want[name])) < 1e-12, (name, lengths)
        ref_grad = reference.gradients(graph, inputs, params).params["W"]
        np.testing.assert_allclose(grads["W"], ref_grad, rtol=1e-10, atol=1e-13)
        if sum(lengths) == 0:
            assert float(out["padded"]) == 0.0   # no real token: 0, as without smoothing


def test_gradcheck_and_onnx(path, tmp_path):
    assert mdlc(["gradcheck", str(path), "--dims", "T=3,B=2"]) == 0
    ort = pytest.importorskip("onnxruntime")
    out = export_onnx(path, tmp_path / "smoothed.onnx", dtype="f64")
    m = load(path, dtype="f64").Smoothed(seed=0)
    graph = check_file(str(path), dtype="f64").graph
    inputs = case()
    session = ort.InferenceSession(str(out))
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, inputs)))
    want = reference.run(graph, inputs, {k: np.array(v) for k, v in m.params.items()})
    for name in ("padded", "flat", "loss"):
        assert abs(float(got[name]) - float(want[name])) < 1e-12, name


def test_a_smoothing_outside_0_1_is_an_error(tmp_path):
    from dsl import MdlError, check_source
    with pytest.raises(MdlError, match=r"`label_smoothing` must be in \[0, 1\], got 1.5"):
        check_source("model M() { input x : f32[B, 3]; input y : i32[B]\n"
                     "  output l = cross_entropy(x, y, label_smoothing = 1.5) }", "t.mdl")
