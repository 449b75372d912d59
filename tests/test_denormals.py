"""Denormal floats (below 1.2e-38 in f32, 2.2e-308 in f64) are flushed to zero while the
cpu target's code runs (cpp_runtime/mdl/denormals.h): a result that small is 0 and such an
input reads as 0, as in XLA's code; an x86 core takes a slow path for each one otherwise.
The calling thread has its own mode back when the call returns."""
import numpy as np
import pytest

from codegen.pipeline import load

SOURCE = """
model Tiny() {
  input x : f32[3]
  output small = x * 1e-30
  output large = x * 1e10
  output loss = sum(large)
  minimize loss
}
"""


def by_dtype(tmp_path_factory, text: str, stem: str, model: str) -> dict:
    """The model of `text` built in f32 and in f64: {dtype: instance}."""
    source = tmp_path_factory.mktemp("denormals") / f"{stem}.mdl"
    source.write_text(text)
    return {dtype: getattr(load(source, name=f"{stem}_{dtype}", dtype=dtype), model)(seed=0)
            for dtype in ("f32", "f64")}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    return by_dtype(tmp_path_factory, SOURCE, "denormals", "Tiny")


def test_the_cpu_target_flushes_denormal_results_and_inputs(tiny):
    x = np.array([1e-10, 1.0, 1e-39], np.float32)   # 1e-39: an f32 denormal
    out = tiny["f32"].forward(x=x)
    # 1e-40 is a denormal result: 0; 1e-30 is not
    assert out["small"][0] == 0 and out["small"][1] == np.float32(1e-30)
    # the denormal input reads as 0, though 1e-29 would be a normal result
    assert out["large"][2] == 0 and out["large"][1] == np.float32(1e10)


def test_f64_denormals_are_flushed_too(tiny):
    out = tiny["f64"].forward(x=np.array([1e-300, 1.0, 1e-310]))   # 1e-310: an f64 denormal
    assert out["small"][0] == 0 and out["small"][1] == 1e-30
    assert out["large"][2] == 0


def test_the_caller_keeps_its_denormals(tiny):
    m = tiny["f32"]
    m.forward(x=np.ones(3, np.float32))
    m.forward(x=np.ones(3, np.float32), training=True)
    m.backward()
    # NumPy on this thread: a denormal input is read, a denormal result is kept
    assert (np.array([1e-39], np.float32) * np.float32(1e10))[0] > 1e-30
    assert (np.array([1e-20], np.float32) * np.float32(1e-20))[0] > 0


LIBM = """
model Libm() {
  input x : f32[5]
  output logs = log(x)
  output roots = x ** 0.5
  output powers_of_x = x ** 1.5
  output inverses = x ** -1.0
  output powers = 2.0 ** x
}
"""


@pytest.fixture(scope="module")
def libm(tmp_path_factory) -> dict:
    return by_dtype(tmp_path_factory, LIBM, "denormals_libm", "Libm")


@pytest.mark.parametrize("dtype, small", [("f32", 1e-39), ("f64", 1e-310)])
def test_log_and_pow_read_a_denormal_as_0(libm, dtype, small):
    """glibc's log and pow take their argument apart by its bits, which DAZ does not
    reach: log(1e-310) was -745.1 and pow(1e-310, 0.5) 1.6e-162. Now a denormal argument
    is 0 of its sign there too (mdl::flushed), as the arithmetic reads it (`x ** 0.5` is
    sqrt, the processor's: `x ** 1.5` is pow's)."""
    x = np.array([small, -small, 1.0, 0.0, 4.0], {"f32": np.float32, "f64": np.float64}[dtype])
    out = libm[dtype].forward(x=x)
    inf = np.inf
    np.testing.assert_array_equal(out["logs"], [-inf, -inf, 0.0, -inf, np.log(x[4])])
    np.testing.assert_array_equal(out["roots"], [0.0, 0.0, 1.0, 0.0, 2.0])  # sqrt
    np.testing.assert_array_equal(out["powers_of_x"], [0.0, 0.0, 1.0, 0.0, 8.0])
    np.testing.assert_array_equal(out["inverses"], [inf, -inf, 1.0, inf, 0.25])
    np.testing.assert_array_equal(out["powers"], [1.0, 1.0, 2.0, 1.0, 16.0])
