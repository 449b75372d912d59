"""`@` of two batches of matrices, [..., M, K] @ [..., K, N] with the same batch dims (the
`bmm` primitive): dot-product attention's scores and context, which once needed a
broadcast multiply and a sum over an [B, S, S, H] temporary. Against NumPy, PyTorch's
gradients, every target and onnxruntime; empty dims; the errors."""
from __future__ import annotations

import numpy as np
import pytest
from source_files import built_for, source_file

from codegen.reference import interpreter as reference
from dsl import MdlError, check_file, check_source

SOURCE = """
model Attention(H = 4) {
  input q : f32[B, S, H]
  input k : f32[B, S, H]
  input v : f32[B, S, H]
  param w : f32[H, H] = normal(0, 0.5)
  scores = (q @ w) @ transpose(k, [0, 2, 1])
  output att = softmax(scores, axis = 2)
  output ctx = att @ v
  output loss = sum(ctx * ctx)
  minimize loss
}

model Grid() {
  input a : f32[P, Q, M, K]
  input b : f32[P, Q, K, N]
  output c = a @ b
}
"""


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "batched.mdl", SOURCE)


def attention_inputs(B, S, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal((B, S, 4)).astype(dtype) for n in "qkv"}


def test_gradients_are_pytorchs(path):
    torch = pytest.importorskip("torch")
    graph = check_file(str(path), dtype="f64", model="Attention").graph
    inputs = attention_inputs(2, 3)
    w = np.random.default_rng(1).standard_normal((4, 4))
    got = reference.gradients(graph, inputs, {"w": w})
    t = {n: torch.tensor(x, requires_grad=True) for n, x in {**inputs, "w": w}.items()}
    att = torch.softmax((t["q"] @ t["w"]) @ t["k"].transpose(1, 2), dim=2)
    (att @ t["v"]).pow(2).sum().backward()
    np.testing.assert_allclose(got.params["w"], t["w"].grad.numpy(), rtol=1e-13)
    for n in "qkv":
        np.testing.assert_allclose(got.inputs[n], t[n].grad.numpy(), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("target, dtype", [("cpu", "f64"), ("cpu", "f32"),
                                           ("emulated", "f64")])
def test_builds_compute_the_references_values_and_gradients(path, target, dtype):
    module = built_for(path, target, dtype=dtype)
    real = np.float64 if dtype == "f64" else np.float32
    rtol = 1e-12 if dtype == "f64" else 2e-5
    graph = check_file(str(path), dtype=dtype, model="Attention").graph
    m = module.Attention(seed=0)
    w = np.asarray(m.params["w"], np.float64)
    for B, S in ((2, 3), (1, 1), (3, 0), (0, 2)):
        inputs = attention_inputs(B, S, seed=B + S, dtype=real)
        out = m.forward(**inputs, training=True)
        grads = m.backward()
        want = reference.gradients(graph, inputs, {"w": w}, dtype=real)
        for name in ("att", "ctx"):
            np.testing.assert_allclose(out[name], want.outputs[name], rtol=rtol, atol=1e-6,
                                       err_msg=f"{name} at B={B}, S={S}")
        np.testing.assert_allclose(grads["w"], want.params["w"], rtol=rtol, atol=1e-5)
    grid = module.Grid(seed=0)
    rng = np.random.default_rng(3)
    for P, Q, M, K, N in ((2, 3, 4, 5, 6), (1, 2, 3, 0, 2), (2, 1, 0, 3, 4)):
        a = rng.standard_normal((P, Q, M, K)).astype(real)
        b = rng.standard_normal((P, Q, K, N)).astype(real)
        np.testing.assert_allclose(grid.forward(a=a, b=b)["c"], np.matmul(a, b), rtol=rtol,
                                   atol=1e-6, err_msg=f"{(P, Q, M, K, N)}")


def test_onnxruntime_runs_it_as_the_reference(path, tmp_path):
    pytest.importorskip("onnxruntime")
    from test_onnx import run_onnx

    from codegen.export import export_onnx
    from codegen.export.parameters import initial_values
    out = export_onnx(path, tmp_path / "attention.onnx", model="Attention")  # Model(seed=0)'s
    inputs = attention_inputs(2, 5, dtype=np.float32)
    got = run_onnx(out, inputs)
    graph = check_file(str(path), model="Attention").graph
    params = initial_values(graph, 0, np.float32)
    want = reference.run(graph, inputs, params, dtype=np.float32)
    np.testing.assert_allclose(got["ctx"], want["ctx"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("source, message", [
    ("model M() { input a : f32[B, 2, 3]; input b : f32[C, 3, 4]; output c = a @ b }",
     "`@` of two batches of matrices needs the same batch dims, got f32[B, 2, 3] @ "
     "f32[C, 3, 4]"),
    ("model M() { input a : f32[B, 2, 3]; input b : f32[B, 2, 4]; output c = a @ b }",
     "`@` needs matching inner dims, got f32[B, 2, 3] @ f32[B, 2, 4]"),
    ("model M() { input a : f32[2, 3]; input b : f32[B, 3, 4]; output c = a @ b }",
     "`@` of two batches of matrices needs the same batch dims, got f32[2, 3] @ f32[B, 3, 4]"),
])
def test_mismatched_batches_are_located_errors(source, message):
    with pytest.raises(MdlError, match=__import__("re").escape(message)):
        check_source(source, "t.mdl")
