"""The activation functions and the minima: `log1p expm1 softplus erf erfc` (primitives),
`silu gelu elu leaky_relu` (their formulas), `min` and `argmin` (max and argmax of the
values in reversed order). Against independent implementations (math's, NumPy's, and
PyTorch's where it is installed, values and gradients), at the edges (0, tiny, large,
infinite, NaN, i32's ends, no elements), natively on both targets, by finite
differences, and in onnxruntime."""
from __future__ import annotations

import math

import numpy as np
import pytest
from source_files import source_file

from codegen.cli import main as mdlc
from codegen.export import export_onnx
from codegen.pipeline import load
from codegen.reference import interpreter as reference
from dsl import check_file, check_source

SOURCE = """
model Acts(A = 0.5, S = 0.2) {
  input x : f32[B, 7]
  input n : i32[B, 7]
  output silu_ = silu(x)
  output gelu_ = gelu(x)
  output gelu_tanh = gelu(x, approximate = true)
  output elu_ = elu(x)
  output elu_a = elu(x, alpha = A)
  output leaky = leaky_relu(x)
  output leaky_s = leaky_relu(x, slope = S)
  output softplus_ = softplus(x)
  output log1p_ = log1p(abs(x))
  output expm1_ = expm1(x)
  output erf_ = erf(x)
  output erfc_ = erfc(x)
  output rows = min(x, axis = 1)
  output cols = min(x, axis = 0, keepdims = true)
  output at = argmin(x)
  output imin = min(n, axis = 0)
  output iat = argmin(n, axis = 0)
}
"""

# Each float output as NumPy (and math) compute it, elementwise in f64
ERF = np.vectorize(math.erf, otypes=[np.float64])
ERFC = np.vectorize(math.erfc, otypes=[np.float64])
WANT = {
    "silu_": lambda x: x / (1 + np.exp(-x)),
    "gelu_": lambda x: x / 2 * ERFC(-x / math.sqrt(2)),   # 1 + erf(x / sqrt(2)), exactly
    "gelu_tanh": lambda x: x / 2 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "elu_": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "elu_a": lambda x: np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0))),
    "leaky": lambda x: np.where(x > 0, x, 0.01 * x),
    "leaky_s": lambda x: np.where(x > 0, x, 0.2 * x),
    "softplus_": lambda x: np.logaddexp(0, x),
    "log1p_": lambda x: np.log1p(np.abs(x)),
    "expm1_": np.expm1,
    "erf_": ERF,
    "erfc_": ERFC,
}

EDGES = np.array([[0.0, -0.0, 1e-300, -1e-12, 3e-9, 0.7, -1.3],
                  [25.0, -25.0, 710.0, -745.0, 40.0, -40.0, 5.9],
                  [np.inf, -np.inf, np.nan, 2.0, -2.0, 1e308, -1e308]])
INTS = np.array([[2147483647, -2147483648, 0, 5, 5, -1, 3],
                 [-2147483648, 2147483647, 0, 5, -7, -1, 3],
                 [7, -2147483648, 1, 5, -7, 4, 2]], np.int32)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "acts.mdl", SOURCE)


def minima(x, n):
    """min and argmin as NumPy's, NaN first (np.min keeps it; np.argmin picks it)."""
    return {"rows": np.min(x, axis=1), "cols": np.min(x, axis=0, keepdims=True),
            "at": np.argmin(x, axis=1), "imin": np.min(n, axis=0),
            "iat": np.argmin(n, axis=0)}


def test_the_reference_computes_numpys_values_at_the_edges(path):
    graph = check_file(str(path), dtype="f64").graph
    with np.errstate(all="ignore"):
        got = reference.run(graph, {"x": EDGES, "n": INTS}, {})
        for name, f in WANT.items():
            # (atol: x * sigmoid(x) at -745 is a denormal where x / (1 + exp(-x)) is -0;
            # gelu: erfc(t)'s relative slope is 2t, so x * -sqrt(0.5) and -x / sqrt(2), a
            # last bit apart, part by 1e-13 at x = -25)
            np.testing.assert_allclose(got[name], f(EDGES), atol=1e-300, err_msg=name,
                                       rtol=1e-12 if name == "gelu_" else 1e-15)
    for name, want in minima(EDGES, INTS).items():
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    assert got["softplus_"][1, 2] == 710.0 and got["softplus_"][1, 3] > 0  # no overflow, no 0
    assert got["log1p_"][0, 2] == 1e-300 and got["expm1_"][0, 3] == np.expm1(-1e-12)


@pytest.mark.parametrize("target,dtype", [("cpu", "f64"), ("cpu", "f32"),
                                          ("emulated", "f64"), ("emulated", "f32")])
def test_builds_give_the_references_values(path, target, dtype):
    """f64 to 1e-13; f32 to 4e-7 (libmvec's SIMD functions on the cpu target are within
    4 ulp), and f32's denormals 0 on the cpu target (native.md)."""
    how = dict(target="cuda", emulate=True) if target == "emulated" else {}
    m = load(path, dtype=dtype, **how).Acts(seed=0)
    graph = check_file(str(path), dtype=dtype).graph
    rng = np.random.default_rng(1)
    real = np.dtype(np.float64 if dtype == "f64" else np.float32)
    cases = [(EDGES, INTS),
             (rng.normal(scale=3, size=(64, 7)), rng.integers(-9, 9, (64, 7), dtype=np.int32)),
             (np.zeros((0, 7)), np.zeros((0, 7), np.int32))]
    # (the reference computes in f64. gelu(x) = x / 2 * erfc(t), t = -x / sqrt(2), where x
    # is far below 0: t in f32 is 6e-8 off, which erfc makes 2t^2 times that, 4e-6 at
    # x = -8, on a value below 1e-14 there; hence f32's atol)
    rtol, atol = (1e-13, 1e-300) if dtype == "f64" else (4e-7, 1e-7)
    for x, n in cases:
        with np.errstate(all="ignore"):
            x = x.astype(real)
            got = m.forward(x=x, n=n)
            want = reference.run(graph, {"x": x, "n": n}, {})
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol,
                                       err_msg=f"{name} of {x.shape}")
    empty = m.forward(x=np.zeros((0, 7), real), n=np.zeros((0, 7), np.int32))
    assert np.all(empty["cols"] == np.inf) and np.all(empty["imin"] == 2147483647)
    assert np.all(empty["iat"] == -1)


GRADIENTS = """
model Grads(A = 0.5, S = 0.2) {
  param p : f64[3, 7] = uniform(-2, 2)
  input w : f64[3, 7]
  input edge : f64[3, 7]
  x = p + edge
  output loss = sum(w * (silu(x) + 2.0 * gelu(x) + 3.0 * elu(x, alpha = A) +
                         5.0 * leaky_relu(x, slope = S) + 7.0 * softplus(x) +
                         11.0 * log1p(abs(x)) + 13.0 * expm1(x) + 17.0 * erf(x) +
                         19.0 * erfc(x) + 23.0 * gelu(x, approximate = true))) +
                sum(min(x, axis = 1)) + min(x)
  minimize loss
}
"""


@pytest.fixture(scope="module")
def grads(tmp_path_factory):
    return source_file(tmp_path_factory, "grads.mdl", GRADIENTS)


def test_gradients_are_pytorchs(grads):
    """The gradient, at points that include 0 (where elu's and leaky_relu's are their
    alpha and slope) and ties of the min, against torch.autograd."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    graph = check_file(str(grads)).graph
    rng = np.random.default_rng(4)
    p = rng.uniform(-2, 2, (3, 7))
    p[0, :3] = 0.0
    p[1, 4] = p[1, 5] = -3.0  # two equal minima of row 1 share its cotangent
    w = rng.normal(size=(3, 7))
    inputs = {"w": w, "edge": np.zeros((3, 7))}
    got = reference.gradients(graph, inputs, {"p": p}).params["p"]
    x = torch.tensor(p, requires_grad=True)
    tw = torch.tensor(w)
    loss = (tw * (F.silu(x) + 2 * F.gelu(x) + 3 * F.elu(x, alpha=0.5)
                  + 5 * F.leaky_relu(x, 0.2) + 7 * F.softplus(x)
                  + 11 * torch.log1p(torch.abs(x)) + 13 * torch.expm1(x)
                  + 17 * torch.erf(x) + 19 * torch.erfc(x)
                  + 23 * F.gelu(x, approximate="tanh"))).sum()
    loss = loss + torch.amin(x, dim=1).sum() + torch.amin(x)
    loss.backward()
    # abs' gradient at 0 is 0 in both; amin's ties share the cotangent evenly in both
    np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_elus_slope_far_left_of_0_keeps_its_digits():
    """QA: elu is alpha * expm1(x) for x <= 0, and expm1's derivative was expm1(x) + 1,
    which cancels: elu's slope was 0 below x = -37 in f64 (PyTorch's, exp(x), is 4.2e-18
    at -40) and kept 8 digits at -20. It is exp(x)."""
    torch = pytest.importorskip("torch")
    source = ("model Far() {\n  input x : f64[N]\n"
              "  output loss = sum(elu(x, alpha = 0.5)) + sum(expm1(x))\n  minimize loss\n}\n")
    x = np.array([-5.0, -20.0, -40.0, -80.0, -700.0])
    got = reference.gradients(check_source(source).graph, {"x": x}, {}).inputs["x"]
    tx = torch.tensor(x, requires_grad=True)
    torch.nn.functional.elu(tx, alpha=0.5).sum().backward()
    np.testing.assert_allclose(got, tx.grad.numpy() + np.exp(x), rtol=1e-14, atol=0)


def test_values_are_pytorchs():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = torch.tensor(EDGES)
    theirs = {"silu_": F.silu(x), "gelu_": F.gelu(x), "elu_": F.elu(x),
              "gelu_tanh": F.gelu(x, approximate="tanh"),
              "elu_a": F.elu(x, alpha=0.5), "leaky": F.leaky_relu(x),
              "leaky_s": F.leaky_relu(x, 0.2), "softplus_": F.softplus(x),
              "log1p_": torch.log1p(x.abs()), "expm1_": torch.expm1(x), "erf_": torch.erf(x),
              "erfc_": torch.erfc(x)}
    with np.errstate(all="ignore"):
        for name, f in WANT.items():
            # torch's softplus is x past x = 20: exp(-20) = 2e-9 off, relative 1e-10
            # and its softplus(-745) 0, not the denormal 5e-324; its gelu's 1 + erf(x)
            # cancels for x < -3 (1e-16 apart, 0 at x = -25 for mdl's -1e-138)
            np.testing.assert_allclose(f(EDGES), theirs[name].numpy(), rtol=1e-9,
                                       atol=1e-15 if name == "gelu_" else 1e-300,
                                       err_msg=name)


def test_gradcheck_passes_with_edges_held_apart(grads, capsys):
    """`mdlc gradcheck` of the same model: every gradient against central differences."""
    assert mdlc(["gradcheck", str(grads)]) == 0
    assert "ok" in capsys.readouterr().out


def test_onnxruntime_runs_them_as_the_reference(path, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    out = tmp_path / "acts.onnx"
    export_onnx(str(path), str(out), dtype="f64")
    graph = check_file(str(path), dtype="f64").graph
    rng = np.random.default_rng(2)
    x = rng.normal(scale=3, size=(4, 7))
    x[0, :3] = [0.0, 7.5, -7.5]
    n = rng.integers(-9, 9, (4, 7), dtype=np.int32)
    session = ort.InferenceSession(str(out))
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, {"x": x, "n": n})))
    want = reference.run(graph, {"x": x, "n": n}, {})
    for name, value in want.items():
        # (erfc in ONNX is a continued fraction right of 2, 1 - erf left of it: 1e-13;
        # onnxruntime's f64 Sigmoid is 1e-3 off at -30 and 0 below -40: gelu_tanh's
        # sigmoid(2u) there, of values below 1e-12)
        np.testing.assert_allclose(got[name], value, rtol=2e-13, err_msg=name,
                                   atol=1e-15 if name == "gelu_tanh" else 0)


def test_onnx_forms_keep_their_digits(tmp_path):
    """ONNX has no Log1p, Expm1 or Erfc: their forms in its nodes keep f32's precision at
    1e-8 (Log(1 + x) gives 0) and the edges, and erfc's far right of 0 (1 - Erf gave 0
    or less)."""
    ort = pytest.importorskip("onnxruntime")
    path = tmp_path / "near.mdl"
    path.write_text("model Near() { input x : f32[N]\n output a = log1p(x)\n"
                    " output b = expm1(x)\n output c = erfc(x) }")
    out = export_onnx(path, tmp_path / "near.onnx")
    x = np.array([0, 1e-30, -1e-8, 1e-8, 3e-4, -0.5, -1, -2, 1, 3, 5, 8, 50, 88, 89, 1e30,
                  np.inf, -np.inf, np.nan, -100], np.float32)
    a, b, c = ort.InferenceSession(str(out)).run(None, {"x": x})
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64)
        for got, want in ((a, np.log1p(wide)), (b, np.expm1(wide))):
            np.testing.assert_allclose(got, want.astype(np.float32), rtol=4e-7, atol=0)
        # (f32's exp(-x^2) at x = 8 is 4e-6 from exp of the exact square)
        np.testing.assert_allclose(c, ERFC(wide).astype(np.float32), rtol=5e-6, atol=1e-44)
