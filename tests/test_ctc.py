"""std/ctc.mdl's ctc_loss: against the sum over every path, enumerated (an independent
definition, small sizes), and torch.nn.functional.ctc_loss (values and gradients, where
PyTorch is installed); natively on both targets and in onnxruntime like the reference;
gradcheck; padding, repeats, empty targets, short rows and impossible alignments."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from source_files import source_file

from codegen.cli import main as mdlc
from codegen.export import export_onnx
from codegen.pipeline import load
from codegen.reference import interpreter as reference
from dsl import check_file

SOURCE = """
import "std/ctc.mdl"
model CTC(K = 0) {
  input logits : f32[T, B, C]
  input targets : i32[B, L]
  input input_lengths : i32[B]
  input target_lengths : i32[B]
  output nll = ctc_loss(log_softmax(logits, axis = 2), targets, input_lengths,
                        target_lengths, blank = K)
  output loss = mean(nll / f32(maximum(target_lengths, 1)))   # PyTorch's "mean"
  minimize loss
}
"""


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "ctc.mdl", SOURCE)


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def enumerated(logp, target, frames, blank=0):
    """-log of the sum over every path of `frames` classes that collapses (repeats merged,
    then blanks dropped) to `target`."""
    total = 0.0
    for path in itertools.product(range(logp.shape[1]), repeat=frames):
        merged = [c for i, c in enumerate(path) if i == 0 or c != path[i - 1]]
        if [c for c in merged if c != blank] == list(target):
            total += np.exp(sum(logp[t, c] for t, c in enumerate(path)))
    return -np.log(total) if total > 0 else np.inf


def case(seed=0, T=6, B=5, C=4, L=3):
    rng = np.random.default_rng(seed)
    targets = rng.integers(1, C, (B, L)).astype(np.int32)
    if B >= 3:
        targets[1, 1] = targets[1, 0]                 # a label repeated: a blank between
        targets[2] = 77                               # padding: never read
    return {"logits": rng.normal(size=(T, B, C)) * 1.5, "targets": targets,
            "input_lengths": np.array([T, T - 1, T, 2, 3][:B], np.int32),
            "target_lengths": np.array([3, 2, 0, 2, 1][:B], np.int32)}


@pytest.mark.parametrize("blank", [0, 2])
def test_it_sums_every_path(path, tmp_path, blank):
    (tmp_path / "blank.mdl").write_text(SOURCE.replace("CTC(K = 0)", f"CTC(K = {blank})"))
    graph = check_file(str(tmp_path / "blank.mdl"), dtype="f64").graph
    inputs = case(T=5, B=5, C=3, L=3)
    if blank:
        inputs["targets"] = np.where(inputs["targets"] == blank, 0, inputs["targets"])
    got = reference.run(graph, inputs, {})["nll"]
    logp = log_softmax(inputs["logits"])
    for b in range(5):
        n, frames = inputs["target_lengths"][b], inputs["input_lengths"][b]
        want = enumerated(logp[:, b], inputs["targets"][b, :n], frames, blank)
        if want == np.inf:                            # no path: about 1e30
            assert got[b] == pytest.approx(1e30), (b, got[b])
        else:
            assert abs(got[b] - want) < 1e-12 * max(1, abs(want)), (b, got[b], want)


@pytest.mark.parametrize("target", ["reference", "cpu", "emulated"])
def test_targets_of_no_columns(path, target):
    """L = 0 (every row's target empty, as PyTorch takes it): the blank's path alone. Its
    slices of 2L - 1 columns made a call refuse the size -1."""
    inputs = {"logits": np.random.default_rng(3).normal(size=(4, 3, 3)),
              "targets": np.zeros((3, 0), np.int32),
              "input_lengths": np.array([4, 1, 0], np.int32),
              "target_lengths": np.zeros(3, np.int32)}
    if target == "reference":
        got = reference.run(check_file(str(path), dtype="f64").graph, inputs, {})["nll"]
    else:
        how = dict(target="cuda", emulate=True) if target == "emulated" else {}
        got = np.asarray(load(path, dtype="f64", **how).CTC(seed=0).forward(**inputs)["nll"])
    logp = log_softmax(inputs["logits"])
    want = [enumerated(logp[:, b], [], n) for b, n in enumerate(inputs["input_lengths"])]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert not np.signbit(got[2]), got    # no frames, no labels: certain, and 0, not -0


def test_an_impossible_alignment_costs_1e30(path):
    graph = check_file(str(path), dtype="f64").graph
    inputs = case()
    inputs["input_lengths"] = np.array([2, 5, 6, 2, 3], np.int32)   # 3 labels in 2 frames
    nll = reference.run(graph, inputs, {})["nll"]
    assert nll[0] == pytest.approx(1e30) and np.all(nll[1:] < 100)


def test_zero_infinity_is_a_where(tmp_path):
    """PyTorch's zero_infinity = True, as language.md writes it: the impossible row out of
    the loss and the gradient, the others' gradient PyTorch's."""
    torch = pytest.importorskip("torch")
    (tmp_path / "zero.mdl").write_text(SOURCE.replace(
        "output loss = mean(nll / f32(maximum(target_lengths, 1)))",
        "output loss = mean(where(nll < 1e29, nll, 0.0))"))
    graph = check_file(str(tmp_path / "zero.mdl"), dtype="f64").graph
    inputs = case()
    inputs["input_lengths"] = np.array([2, 5, 6, 2, 3], np.int32)
    grad = reference.gradients(graph, inputs, {}).inputs["logits"]
    x = torch.tensor(inputs["logits"], requires_grad=True)
    real = np.arange(3)[None] < inputs["target_lengths"][:, None]
    nll = torch.nn.functional.ctc_loss(
        torch.log_softmax(x, 2), torch.tensor(np.where(real, inputs["targets"], 1)).long(),
        torch.tensor(inputs["input_lengths"]).long(),
        torch.tensor(inputs["target_lengths"]).long(), reduction="none", zero_infinity=True)
    nll.mean().backward()
    assert float(reference.run(graph, inputs, {})["loss"]) == pytest.approx(
        nll.mean().item(), rel=1e-12)
    np.testing.assert_allclose(grad, x.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_it_is_pytorchs(path):
    torch = pytest.importorskip("torch")
    graph = check_file(str(path), dtype="f64").graph
    for seed in range(4):
        inputs = case(seed, T=9, B=5, C=6, L=4)
        inputs["target_lengths"] = np.array([4, 2, 0, 1, 3], np.int32)
        inputs["input_lengths"] = np.array([9, 8, 9, 2, 7], np.int32)
        out = reference.run(graph, inputs, {})
        grad = reference.gradients(graph, inputs, {}).inputs["logits"]
        x = torch.tensor(inputs["logits"], requires_grad=True)
        real = np.arange(4)[None] < inputs["target_lengths"][:, None]
        targets = torch.tensor(np.where(real, inputs["targets"], 1)).long()
        args = (torch.tensor(inputs["input_lengths"]).long(),
                torch.tensor(inputs["target_lengths"]).long())
        nll = torch.nn.functional.ctc_loss(torch.log_softmax(x, 2), targets, *args,
                                           reduction="none")
        mean = torch.nn.functional.ctc_loss(torch.log_softmax(x, 2), targets, *args)
        mean.backward()
        np.testing.assert_allclose(out["nll"], nll.detach().numpy(), rtol=1e-12)
        assert abs(float(out["loss"]) - mean.item()) < 1e-12
        np.testing.assert_allclose(grad, x.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("target,dtype", [("cpu", "f64"), ("cpu", "f32"),
                                          ("emulated", "f64")])
def test_builds_give_the_references_loss_and_gradient(path, target, dtype):
    how = dict(target="cuda", emulate=True) if target == "emulated" else {}
    m = load(path, dtype=dtype, **how).CTC(seed=0)
    graph = check_file(str(path), dtype=dtype).graph
    real = np.float64 if dtype == "f64" else np.float32
    tol = 1e-12 if dtype == "f64" else 2e-5
    for inputs in (case(0), case(1, T=12, B=3, C=7, L=4), case(2, B=1)):
        inputs["logits"] = inputs["logits"].astype(real)
        out = m.forward(**inputs, training=True)
        grads = m.backward()
        want = reference.run(graph, inputs, {})
        np.testing.assert_allclose(out["nll"], want["nll"], rtol=tol)
        ref_grad = reference.gradients(graph, inputs, {}).inputs["logits"]
        np.testing.assert_allclose(grads["input:logits"], ref_grad, rtol=tol * 100,
                                   atol=tol)


def test_gradcheck_and_onnx(path, tmp_path):
    assert mdlc(["gradcheck", str(path), "--dims", "T=5,B=2,C=4,L=2"]) == 0
    ort = pytest.importorskip("onnxruntime")
    out = export_onnx(path, tmp_path / "ctc.onnx", dtype="f64")
    graph = check_file(str(path), dtype="f64").graph
    inputs = case(3)
    session = ort.InferenceSession(str(out))
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, inputs)))
    want = reference.run(graph, inputs, {})
    np.testing.assert_allclose(got["nll"], want["nll"], rtol=1e-12)


COUNTS = r"^ctc_loss: each row's label count must lie in \[0, L\], L the width of targets: " \
         r"`target_lengths >= 0 and target_lengths <= L` is false \(computed from the input " \
         r"`target_lengths`\) at flat position 1$"
LABELS = r"^ctc_loss: each label must be one of the C classes, not the blank: .* is false " \
         r"\(computed from the inputs `target_lengths` and `targets`\) at flat position 4$"


@pytest.mark.parametrize("change, message", [
    (dict(target_lengths=[3, 4, 0, 2, 1]), COUNTS),     # more labels than targets holds
    (dict(target_lengths=[3, -1, 0, 2, 1]), COUNTS),
    (dict(label=(1, 1, 0)), LABELS),                    # the blank as a label
    (dict(label=(1, 1, 4)), LABELS),                    # past the C = 4 classes
    (dict(label=(1, 1, -3)), LABELS)])
def test_bad_labels_are_a_value_error_naming_the_inputs(path, change, message):
    """What PyTorch's ctc_loss reads as some other number (or past its memory) is refused
    by ctc_loss's asserts, in the reference and on both targets alike; a label past a
    row's count is padding, never judged."""
    graph = check_file(str(path), dtype="f64").graph
    bad = case(0)
    if "target_lengths" in change:
        bad["target_lengths"] = np.array(change["target_lengths"], np.int32)
    else:
        b, i, value = change["label"]
        bad["targets"][b, i] = value
    with pytest.raises(ValueError, match=message):
        reference.run(graph, bad, {})
    for how in ({}, dict(target="cuda", emulate=True)):
        m = load(path, dtype="f64", **how).CTC(seed=0)
        with pytest.raises(ValueError, match=message):
            m.forward(**bad)
        assert np.all(np.isfinite(m.forward(**case(0))["nll"]))
