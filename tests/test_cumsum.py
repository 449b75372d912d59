"""`cumsum(x, axis, reverse = false)`: running sums, against NumPy (in order: the targets
add in NumPy's order, so f32 agrees bit for bit), on the CPU and the emulated device, in
f32, f64 and i32 (wrapping around), forward and gradient (the reversed sums), along
every axis and one of no elements; PyTorch's torch.cumsum where it is installed;
onnxruntime's CumSum."""
from __future__ import annotations

import numpy as np
import pytest
from source_files import source_file

from codegen.cli import main as mdlc
from codegen.export import export_onnx
from codegen.pipeline import load
from codegen.reference import interpreter as reference
from dsl import check_file
from test_cuda_emulated import EMULATE, SUFFIX

SOURCE = """
model Sums() {
  input x : f32[T, B, F]
  input n : i32[T, B]
  output over_time = cumsum(x, axis = 0)
  output to_go = cumsum(x, 1, reverse = true)
  output last = cumsum(x, axis = -1, reverse = true)
  output counts = cumsum(n, axis = 0)
  output loss = sum(cumsum(x * x, 0) * x) + sum(cumsum(x, 2, reverse = true) * x)
  minimize loss
}
"""


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "sums.mdl", SOURCE)


def numpy_sums(x, n):
    """NumPy's running sums, f32's added in f64 and each rounded to f32, as mdl adds them
    (kernels.h's Wide: added in f32, 16.8M values of 0.1 ended 4% off)."""
    wide = np.float64 if x.dtype == np.float32 else x.dtype

    def run(a, axis):
        return np.cumsum(a, axis, dtype=wide).astype(a.dtype)

    def back(a, axis):
        return np.flip(run(np.flip(a, axis), axis), axis)
    return {"over_time": run(x, 0), "to_go": back(x, 1),
            "last": back(x, 2), "counts": np.cumsum(n, 0, dtype=np.int32)}


def inputs(steps=5, batch=3, features=4, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    n = rng.integers(-9, 10, (steps, batch)).astype(np.int32)
    if steps >= 2:
        n[:2, 0] = [2**31 - 1, 5]            # wraps around, as NumPy's i32 does
    return {"x": rng.standard_normal((steps, batch, features)).astype(dtype), "n": n}


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_sums_are_numpys(path, target, dtype):
    how = dict(target="cuda", emulate=EMULATE, name=f"sums_{dtype}_{SUFFIX}") \
        if target == "cuda" else dict(name=f"sums_{dtype}")
    m = load(path, dtype=dtype, **how).Sums()
    real = np.float32 if dtype == "f32" else np.float64
    with np.errstate(over="ignore"):
        for steps in (5, 1, 0):
            given = inputs(steps, dtype=real)
            got, want = m.forward(**given), numpy_sums(given["x"], given["n"])
            for name, value in want.items():
                assert got[name].dtype == value.dtype and np.array_equal(got[name], value), name


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_gradient_is_the_references(path, target):
    how = dict(target="cuda", emulate=EMULATE, name=f"sums_f64_{SUFFIX}") \
        if target == "cuda" else dict(name="sums_f64")
    m = load(path, dtype="f64", **how).Sums()
    graph = check_file(str(path), dtype="f64").graph
    given = inputs(dtype=np.float64)
    m.forward(**given, training=True)
    got = m.backward()["input:x"]
    want = reference.gradients(graph, given, {}).inputs["x"]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    x = given["x"]   # by hand: d/dx of sum(cumsum(x*x, 0) * x) + sum(revcumsum(x, 2) * x)
    after = np.flip(np.cumsum(np.flip(x, 0), 0), 0)
    before = np.cumsum(x, 2)
    hand = 2 * x * after + np.cumsum(x * x, 0) + before + np.flip(np.cumsum(np.flip(x, 2), 2), 2)
    np.testing.assert_allclose(got, hand, rtol=1e-12)


def test_gradcheck(path):
    assert mdlc(["gradcheck", str(path), "--dims", "T=4,B=2,F=3"]) == 0


def test_it_is_pytorchs(path):
    torch = pytest.importorskip("torch")
    m = load(path, dtype="f64", name="sums_f64").Sums()
    given = inputs(6, 2, 3, seed=4, dtype=np.float64)
    got = m.forward(**given)
    x = torch.from_numpy(given["x"])
    np.testing.assert_array_equal(got["over_time"], torch.cumsum(x, 0).numpy())
    np.testing.assert_allclose(got["to_go"], torch.flip(torch.cumsum(torch.flip(x, [1]), 1),
                                                        [1]).numpy(), rtol=1e-15)


def test_onnx(path, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    out = export_onnx(path, tmp_path / "sums.onnx", dtype="f64")
    session = ort.InferenceSession(str(out))
    given = inputs(dtype=np.float64)
    given["n"][:2, 0] = [3, 5]   # onnxruntime's i32 overflow is its own
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, given)))
    for name, value in numpy_sums(given["x"], given["n"]).items():
        np.testing.assert_allclose(got[name], value, rtol=1e-14, err_msg=name)
