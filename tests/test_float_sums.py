"""f32 sums over many elements add in double (mdl/kernels.h's Wide): `sum`, `mean` (a
loss over a large tensor), a fused loop's sum, and `cumsum`. Added in float, 16.8M values
of 0.1f came to 1% off (sum) and 4% (cumsum's last), where NumPy's pairwise sum is within
2e-7. Here 4M values of 0.1f against the exact sum of the f32 values."""
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
    if target == "cpu":  # (the device's sums are its own tree of partial sums)
        assert float(out["whole"]) == pytest.approx(4 * N * tenth, rel=1e-7)
        assert float(out["average"]) == pytest.approx(tenth, rel=1e-7)
        assert float(out["squares"]) == pytest.approx(square, rel=1e-7)
        np.testing.assert_allclose(out["columns"], N * tenth, rtol=1e-7)
