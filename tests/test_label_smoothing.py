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


PADDED = """
model Padded(C = 4) {
  input logits : f32[T, B, C]
  input targets : i32[T, B]
  input lengths : i32[B]
  output plain = cross_entropy(logits, targets, lengths = lengths)
  output smoothed = cross_entropy(logits, targets, lengths = lengths, label_smoothing = 0.1)
}
"""


def test_padded_tokens_count_for_nothing_whatever_their_logits_hold(tmp_path_factory):
    """A padded token's logits may hold NaN or inf (padding that was never written): it is
    left out of the mean, as PyTorch's ignore_index leaves it out. The targets skipped it,
    but the reference weighed its log-probability by 0 (NaN * 0: the loss NaN), and so did
    the smoothed loss on every target and onnxruntime."""
    path = source_file(tmp_path_factory, "padded_nan.mdl", PADDED)
    inputs = {"logits": np.arange(24.0).reshape(3, 2, 4) / 7,
              "targets": np.array([[0, 1], [2, 3], [1, 2]], np.int32),
              "lengths": np.array([3, 1], np.int32)}
    inputs["logits"][1, 1] = [np.inf, 1.0, 2.0, 3.0]
    inputs["logits"][2, 1] = [np.nan, np.inf, -np.inf, 1.0]
    want = reference.run(check_file(str(path), dtype="f64").graph, inputs, {})
    got = {"reference": want}
    for target in ("cpu", "emulated"):
        how = dict(target="cuda", emulate=True) if target == "emulated" else {}
        got[target] = load(path, dtype="f64", **how).Padded(seed=0).forward(**inputs)
    try:
        import onnxruntime as ort
    except ImportError:
        pass
    else:
        out = export_onnx(path, tmp_path_factory.mktemp("onnx") / "padded.onnx", dtype="f64")
        session = ort.InferenceSession(str(out))
        names = [o.name for o in session.get_outputs()]
        got["onnxruntime"] = dict(zip(names, session.run(None, inputs)))
    try:
        import torch
    except ImportError:
        expected = {}
    else:
        F = torch.nn.functional
        logits = torch.tensor(inputs["logits"]).reshape(-1, 4)
        real = np.arange(3)[:, None] < inputs["lengths"][None, :]
        ignored = torch.tensor(np.where(real, inputs["targets"], -100).reshape(-1)).long()
        expected = {"plain": F.cross_entropy(logits, ignored).item(),
                    "smoothed": F.cross_entropy(logits, ignored, label_smoothing=0.1).item()}
    for who, out in got.items():
        for name in ("plain", "smoothed"):
            assert np.isfinite(float(out[name])), (who, name)
            assert abs(float(out[name]) - float(want[name])) < 1e-12, (who, name)
            if expected:
                assert abs(float(out[name]) - expected[name]) < 1e-12, (who, name)
