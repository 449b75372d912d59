"""A `recompute` loop's backward re-runs its steps: a decision made from floats there (a
comparison, a cast to i32, an argmax) must see the forward's own bits. The re-run once
computed a block of 16 steps' products as one (for_hoist.py), which f32's own kernels
round unlike the forward's step-by-step products; a branch near its threshold then went
the other way, and the gradient was a forward's that never ran: 4 of 20 random calls on
the CPU, 16 of 20 on the emulated device. The model here makes each step's slope the
parity of the last bits of its value (`i32(a * 1e7) % 2`), so that any such difference
shows; the gradient is checked against backpropagation by hand over the forward's own
values and branches (its yields)."""
from __future__ import annotations

import numpy as np
import pytest
from source_files import built_for, source_file


SOURCE = """
model Recomputed(H = 16, SCALE = 1e7) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = normal(0, 0.3)
  param U : f32[H, H] = normal(0, 0.3)
  h = zeros[B, H]
  as_, ss = for x in xs (recompute) {
    a = x @ W + h @ U
    s = where(i32(a * SCALE) % 2 == 0, 1.0, 2.0)
    h = tanh(a * s - stop_gradient(a * s - a))
    yield a, s
  }
  output as_
  output ss
  output loss = sum(h)
  minimize loss
}
"""


def by_hand(xs, W, U, A, S):
    """loss = sum(h_T), h_t = tanh(a_t) going forward, slope s_t * tanh'(a_t) going back."""
    T, B, H = xs.shape
    hs = [np.zeros((B, H))] + [np.tanh(A[t]) for t in range(T)]
    gW, gU, gh = np.zeros((H, H)), np.zeros((H, H)), np.ones((B, H))
    for t in reversed(range(T)):
        ga = gh * S[t] * (1 - np.tanh(A[t]) ** 2)
        gW += xs[t].T.astype(np.float64) @ ga
        gU += hs[t].T @ ga
        gh = ga @ U.T.astype(np.float64)
    return gW, gU


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "recomputed.mdl", SOURCE)


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_the_backward_differentiates_the_forward_that_ran(path, target):
    module = built_for(path, target, dtype="f32")
    rng = np.random.default_rng(0)
    wrong = []
    for trial in range(20):
        T, B = int(rng.integers(2, 12)), int(rng.integers(1, 8))
        xs = rng.standard_normal((T, B, 16)).astype(np.float32)
        m = module.Recomputed(seed=trial)
        out = m.forward(xs=xs, training=True)
        got = m.backward()
        want = by_hand(xs, np.asarray(m.params["W"]), np.asarray(m.params["U"]),
                       np.asarray(out["as_"], np.float64), np.asarray(out["ss"], np.float64))
        err = max(np.abs(got[k] - w).max() / np.abs(w).max() for k, w in zip("WU", want))
        if err > 1e-3:
            wrong.append((trial, T, B, err))
    assert wrong == []
