"""f32 sums over many elements add in double (mdl/kernels.h's Wide): `sum`, `mean` (a
loss over a large tensor), a fused loop's sum, and `cumsum`. Added in float, 16.8M values
of 0.1f came to 1% off (sum) and 4% (cumsum's last), where NumPy's pairwise sum is within
2e-7. Here 4M values of 0.1f against the exact sum of the f32 values. A fused loop's sum
along an outer loop (a column sum: rows added into the totals in turn) adds in doubles
too (mdl::WideSums): in float it was 4% short at 4M rows of 0.2f, 1e-5 with 512 values a
row. The cuda target's (here on the emulated device) add in double too: its reductions'
partial sums, and a fused loop's totals (its atomic adds, into doubles rounded once): in
float, `sum` of these 4M values was 4e-5 over and the fused column sums 1% short."""
from __future__ import annotations

import numpy as np
import pytest
from source_files import built_for, source_file


SOURCE = """
model Sums() {
  input x : f32[N, 4]
  output whole = sum(x)
  output average = mean(x)
  output squares = mean(x * x)
  output columns = sum(x, axis = 0)
  output running = cumsum(x, axis = 0)
}
"""
N = 1 << 20  # rows of 4: 4M values


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "sums.mdl", SOURCE)


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_f32_sums_of_millions_keep_their_digits(path, target):
    m = built_for(path, target, dtype="f32").Sums(seed=0)
    x = np.full((N, 4), 0.1, np.float32)
    out = m.forward(x=x)
    tenth = float(np.float32(0.1))  # what each element is
    square = float(np.float32(0.1) * np.float32(0.1))
    assert out["running"][-1, 0] == pytest.approx(N * tenth, rel=1e-7)
    assert out["running"][N // 2 - 1, 3] == pytest.approx(N // 2 * tenth, rel=1e-7)
    assert float(out["whole"]) == pytest.approx(4 * N * tenth, rel=1e-7)
    assert float(out["average"]) == pytest.approx(tenth, rel=1e-7)
    assert float(out["squares"]) == pytest.approx(square, rel=1e-7)
    np.testing.assert_allclose(out["columns"], N * tenth, rtol=1e-7)


COLUMNS = """
model Columns() {
  param b : f32[4] = zeros
  input x : f32[N, 4]
  input y : f32[P, 8, Q]
  output columns = sum(x * 2.0, axis = 0)
  output middle = sum(y * 2.0, axis = [0, 2])
  output loss = sum((x + b) * 0.1)
  minimize loss
}
"""


# The emulated device runs a CUDA thread at a time, an atomic add an element: a quarter of
# the rows there (its forward and backward took 60 s of a Zen 3 core at 1M rows, 21 s at
# 256K). Each column's total is then 256K atomic adds, which in float come to 0.25% short
# (NumPy's float32 cumsum of them; 1% at 1M), 25000 times the tolerance.
COLUMN_ROWS = {"cpu": N, "emulated": N // 4}


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_fused_column_sums_keep_their_digits(tmp_path_factory, target):
    m = built_for(source_file(tmp_path_factory, "columns.mdl", COLUMNS), target,
                  dtype="f32").Columns(seed=0)
    rows = COLUMN_ROWS[target]
    tenth = float(np.float32(0.1))
    x = np.full((rows, 4), 0.1, np.float32)
    y = np.full((rows >> 10, 8, 1 << 9), 0.1, np.float32)  # (Q: an inner sum, then rows)
    out = m.forward(x=x, y=y, training=True)
    grads = m.backward()
    np.testing.assert_allclose(out["columns"], 2 * rows * tenth, rtol=1e-7)
    np.testing.assert_allclose(out["middle"], 2 * (rows >> 1) * tenth, rtol=1e-7)
    scaled = float(np.float32(0.1) * np.float32(0.1))  # each (x + b) * 0.1
    np.testing.assert_allclose(out["loss"], 4 * rows * scaled, rtol=1e-7)
    np.testing.assert_allclose(grads["b"], rows * tenth, rtol=1e-7)
