"""`topk`: the k largest values along an axis and their indices, the same on the CPU, on
the emulated device and in the reference, and as a plain sort picks them (largest first,
a NaN the largest, equal values in their order); its gradient against finite differences.
A beam search written with it is tests/test_translator.py's."""
from __future__ import annotations

import math

import numpy as np
import pytest
from test_edge_values import TARGETS, load_on

from codegen.reference import interpreter
from dsl import check_source

SOURCE = """
model Top(K = 3, C = 7) {
  input x : f32[B, C]
  input n : i32[B, C]
  v, i = topk(x, K)
  u, j = topk(transpose(x), 2, axis = 0)      # along the first axis: [2, B]
  m, l = topk(n, C)                           # every one: a sort
  output values = v
  output indices = i
  output column_values = u
  output column_indices = j
  output sorted = m
  output order = l
}
model Wide(K = 4) {
  input x : f32[B, 300]                       # rows a warp shares on a GPU
  input y : f32[B, 5000]                      # rows cut into chunks, a warp each
  input n : i32[B, 300]
  v, i = topk(x, K)                           # up to 8: held by each thread
  w, j = topk(y, 8)
  s, o = topk(y, 4)
  u, h = topk(y, 9)                           # more: a read of the row a pick
  f, e = topk(n, 5)
  m, l = topk(n, 300)                         # every one: a sort
  output values = v
  output indices = i
  output wide_values = w
  output wide_indices = j
  output four_values = s
  output four_indices = o
  output wider_values = u
  output wider_indices = h
  output few = f
  output few_order = e
  output sorted = m
  output order = l
}
model Trained(K = 3, C = 7) {
  input x : f32[B, C]
  input weights : f32[B, K]
  param w : f32[C, C] = normal(0, 1)
  v, i = topk(tanh(x @ w), K)
  output loss = sum(v * weights)
  minimize loss
}
"""
@pytest.fixture(scope="module", params=TARGETS, ids=["cpu", "cuda"])
def module(request, tmp_path_factory):
    return load_on(request.param, SOURCE, "topk", tmp_path_factory)


def sort_picks(row, k: int) -> tuple[list, list]:
    """The k first values of `row` and their indices, sorted by Python: a NaN before every
    number, then larger first, then lower index first."""
    def key(i):
        v = row[i]
        return (0, 0.0, i) if isinstance(v, float) and math.isnan(v) else (1, -v, i)
    order = sorted(range(len(row)), key=key)[:k]
    return [row[i] for i in order], order


def edge_rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, 7))
    x[0, [1, 4, 6]] = 2.5                          # ties: kept in their order
    x[1, [2, 5]] = np.nan                          # NaNs first, in their order
    x[1, 3] = np.inf
    x[2] = [0.0, -0.0, 0.0, -1.0, -np.inf, -0.0, -1.0]
    x[3] = np.nan
    x[4, 0] = np.inf
    x[4, 2] = np.finfo(np.float64).max
    n = rng.integers(-5, 5, (6, 7)).astype(np.int32)
    n[0] = [2**31 - 1, -2**31, 0, -2**31, 2**31 - 1, 7, -7]
    return x, n


def as_numpy(out: dict) -> dict:
    return {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in out.items()}


@pytest.mark.parametrize("seed", [0, 1])
def test_the_k_largest_are_those_a_sort_picks_on_every_target(module, seed):
    x, n = edge_rows(seed)
    got = as_numpy(module.Top().forward(x=x, n=n))
    want = interpreter.run(check_source(SOURCE, model="Top", dtype="f64").graph,
                           {"x": x, "n": n}, {})
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    for b in range(len(x)):
        values, indices = sort_picks(x[b].tolist(), 3)
        np.testing.assert_array_equal(got["values"][b], values)
        assert got["indices"][b].tolist() == indices
        values, indices = sort_picks(n[b].tolist(), 7)
        assert got["sorted"][b].tolist() == values and got["order"][b].tolist() == indices
    for b in range(len(x)):  # along axis 0 of x's transpose: x's rows again, top 2
        values, indices = sort_picks(x[b].tolist(), 2)
        np.testing.assert_array_equal(got["column_values"][:, b], values)
        assert got["column_indices"][:, b].tolist() == indices
    assert got["indices"].dtype == np.int32 and got["sorted"].dtype == np.int32


def wide_rows(seed: int) -> dict:
    """Rows of few distinct values (ties a GPU's threads must order by index), NaNs
    far apart, zeros of both signs, a row of NaNs alone, and rows whose first values are
    all one GPU thread's, largest first (each but the first must pass the thread's k-th)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 3, (4, 300)).astype(np.float64)
    x[0, [299, 7, 130]] = 3.0
    x[1, [290, 33, 64, 1]] = np.nan
    x[2] = rng.choice([0.0, -0.0, -1.0], 300)
    x[2, 3:300:32][:6] = [9, 8, 7, 6, 5, 4]       # lane 3 of a warp's
    x[3] = np.nan
    y = rng.integers(-50, 50, (4, 5000)) / 4
    y[0, [4999, 4095, 256, 31, 3000]] = 20.0
    y[1, [4001, 17, 2600]] = np.nan
    y[1, 5] = np.inf
    y[2] = 1.5
    y[2, 1:256:32] = [9, 8, 7, 6, 5, 4, 3, 2]     # lane 1's of a warp's first chunk
    y[3, ::7] = -np.inf
    n = rng.integers(-4, 4, (4, 300)).astype(np.int32)
    n[0, [3, 200]] = [2**31 - 1, -2**31]
    n[1] = -2**31
    n[2, 0:300:32][:7] = [70, 60, 50, 40, 30, 20, 10]
    return {"x": x, "y": y, "n": n}


@pytest.mark.parametrize("seed", [0, 1])
def test_rows_shared_by_a_warp_or_a_block_pick_as_a_sort_does(module, seed):
    inputs = wide_rows(seed)
    got = as_numpy(module.Wide().forward(**inputs))
    want = interpreter.run(check_source(SOURCE, model="Wide", dtype="f64").graph, inputs, {})
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    for b in range(4):
        for row, k, v, i in (("x", 4, "values", "indices"),
                             ("y", 8, "wide_values", "wide_indices"),
                             ("y", 4, "four_values", "four_indices"),
                             ("y", 9, "wider_values", "wider_indices"),
                             ("n", 5, "few", "few_order"), ("n", 300, "sorted", "order")):
            values, indices = sort_picks(inputs[row][b].tolist(), k)
            np.testing.assert_array_equal(got[v][b], values, err_msg=f"{v}[{b}]")
            assert got[i][b].tolist() == indices, f"{i}[{b}]"


def test_a_batch_of_no_rows(module):
    got = as_numpy(module.Top().forward(x=np.zeros((0, 7)), n=np.zeros((0, 7), np.int32)))
    assert got["values"].shape == (0, 3) and got["column_indices"].shape == (2, 0)


def test_the_gradient_goes_to_the_picked_values_as_finite_differences_say(module):
    rng = np.random.default_rng(5)
    x, weights = rng.standard_normal((4, 7)), rng.standard_normal((4, 3))
    model = module.Trained(seed=1)
    model.forward(x=x, weights=weights, training=True)
    got = model.backward()["input:x"]

    def loss(x):
        return float(model.forward(x=x, weights=weights)["loss"])

    numeric = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        step = np.zeros_like(x)
        step[index] = 1e-6
        numeric[index] = (loss(x + step) - loss(x - step)) / 2e-6
    np.testing.assert_allclose(got, numeric, atol=1e-7)
    assert np.count_nonzero(got) > 0
