"""Matrix products of a few rows (2 to 8: a beam's K rows at B=1, a small batch), which
the cuda target runs in a kernel of its own instead of cuBLAS (mdl/cuda/gemm.h,
`skinny`), against the reference: as written, with the first operand transposed, with a
k that does not split evenly into the kernel's slices (70; 3: one warp; 600: every warp of
a block, each slice batches of loads and a rest), n past a tile of 32 columns, and through
their gradients (x^T dy products of 3 rows, gradients of one parameter used twice), and in
a recompute loop's steps. Row counts of 1 and 9, and products added into what c holds
(BLAS's beta = 1: a weight's gradient summed over a loop's steps), and k past 1024, take
cuBLAS."""
from __future__ import annotations

import numpy as np
import pytest
from test_edge_values import TARGETS, load_on

from codegen.reference import interpreter
from dsl import check_source

SOURCE = """
model Products(K = 3, N = 70) {
  input x : f32[B, K]
  input y : f32[K, B]
  param w : f32[K, N] = normal(0, 1)
  param v : f32[N, K] = normal(0, 1)
  a = x @ w                      # B rows, k = 3
  b = transpose(y) @ w           # the first operand transposed
  c = a @ v                      # k = 70
  output ab = a + b
  output c = c
  output loss = sum(tanh(a) * b) + sum(c * c)
  minimize loss
}
model Deep(K = 600, N = 40) {
  input x : f32[B, K]
  input z : f32[B, 1100]
  param w : f32[K, N] = normal(0, 0.05)
  param v : f32[N, K] = normal(0, 0.2)
  param u : f32[1100, 8] = normal(0, 0.05)
  a = x @ w                      # k = 600: a block's every warp, slices of batches and a rest
  c = tanh(a) @ v                # n = 600: 19 tiles of 32 columns, k = 40
  d = z @ u                      # k = 1100: deeper than the kernel takes, so cuBLAS
  output c = c
  output d = d
  output loss = sum(c * c) + sum(d * d)
  minimize loss
}
model Steps(H = 3) {
  input xs : f32[T, B, H]
  param u : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  h0 = tanh(xs[0] @ u)
  for x in xs (recompute) { h = tanh(x + h @ u + h0) }
  output loss = sum(h * h)
  minimize loss
}
"""


@pytest.fixture(scope="module", params=TARGETS, ids=["cpu", "cuda"])
def module(request, tmp_path_factory):
    return load_on(request.param, SOURCE, "products", tmp_path_factory)


def trains_as_the_reference(module, name: str, inputs: dict) -> None:
    """Model `name`'s training forward and backward on `inputs`: every output, every
    parameter's gradient and every float input's, as the reference's (f64, to 1e-11)."""
    model = getattr(module, name)(seed=0)
    params = {k: np.array(v) for k, v in model.params.items()}
    got = model.forward(**inputs, training=True)
    grads = model.backward()
    graph = check_source(SOURCE, model=name, dtype="f64").graph
    want = interpreter.gradients(graph, inputs, params, training=True)
    tolerance = {"rtol": 1e-11, "atol": 1e-12}
    for k, value in want.outputs.items():
        np.testing.assert_allclose(np.asarray(got[k]), value, err_msg=k, **tolerance)
    for k, value in want.params.items():
        np.testing.assert_allclose(np.asarray(grads[k]), value, err_msg=k, **tolerance)
    for k, value in want.inputs.items():
        np.testing.assert_allclose(np.asarray(grads[f"input:{k}"]), value, err_msg=k,
                                   **tolerance)


@pytest.mark.parametrize("rows", [1, 2, 5, 8, 9])
def test_products_of_a_few_rows_and_their_gradients(module, rows):
    rng = np.random.default_rng(rows)
    trains_as_the_reference(module, "Products", {"x": rng.standard_normal((rows, 3)),
                                                 "y": rng.standard_normal((3, rows))})


@pytest.mark.parametrize("rows", [2, 5, 8])
def test_products_of_a_few_rows_deep_and_wide(module, rows):
    rng = np.random.default_rng(rows)
    trains_as_the_reference(module, "Deep", {"x": rng.standard_normal((rows, 600)),
                                             "z": rng.standard_normal((rows, 1100))})


@pytest.mark.parametrize("rows", [2, 8])
def test_products_of_a_few_rows_in_a_recompute_loop(module, rows):
    xs = np.random.default_rng(rows).standard_normal((5, rows, 3))
    model = module.Steps(seed=0)
    params = {k: np.array(v) for k, v in model.params.items()}
    got = model.forward(xs=xs, training=True)
    grads = model.backward()
    graph = check_source(SOURCE, model="Steps", dtype="f64").graph
    want = interpreter.gradients(graph, {"xs": xs}, params, training=True)
    np.testing.assert_allclose(float(got["loss"]), want.outputs["loss"], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grads["u"]), want.params["u"], rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(np.asarray(grads["input:xs"]), want.inputs["xs"], rtol=1e-11,
                               atol=1e-12)
