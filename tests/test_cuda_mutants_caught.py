"""The cuda target's code on the emulated device where the rest of the suite left a bug
unseen: hand-made bugs of the CUDA code (a QA pass of mutation testing under the emulated
device, docs/cuda.md) that every other test passed, each now failing one of these. Small
sizes, checked against the reference interpreter or NumPy.

- a loop's branch conditions read at once before it from a strided sequence (a column of
  a `bool[T, S]` input stepped through by an outer loop): reading them as if contiguous
  went unseen, every other condition sequence being contiguous;
- a reversed, checkpointed loop that draws dropout masks, in an `if`: the backward reads
  a padding step's flag on the host and must not count the step's draws; the steps after
  it draw at the positions the forward drew at (a forward loop's padding steps come
  last, so counting them there changes nothing);
- a function run as a CUDA graph on the same dims but other input memory (arrays put on
  the device, all held): a replay must read the new memory, not the captured pointers of
  a cuBLAS product's operand.
"""
from __future__ import annotations

import numpy as np
import pytest
from source_files import source_file
from test_cuda_emulated import EMULATE, SUFFIX

from codegen.pipeline import load
from dsl import check_file
from test_native import assert_training_matches

SOURCE = """
model ColumnConditions(H = 4) {
  input xs : f32[T, B, H]
  input flags : bool[T, S]
  param P : f32[H, H] = uniform(-0.5, 0.5)
  h = zeros[B, H]
  columns = transpose(flags)
  for column in columns {
    for x in xs, f in column {
      if f { v = tanh(x @ P) } else { v = 0.5 * x }
      h = tanh(v + h)
    }
  }
  output loss = sum(h * h)
  minimize loss
}

model ReversedDraws(H = 4) {
  input xs : f32[T, B, H]
  input c : f32
  param V : f32[H, H] = uniform(-0.8, 0.8)
  h = zeros[B, H]
  if c > 0.0 {
    h = h + c
  } else {
    for x in reversed(xs) (checkpoint = 2) { h = tanh(dropout(x, 0.3) @ V + h + c) }
  }
  output loss = sum(h * h)
  minimize loss
}

model Project(H = 4, K = 3) {
  input x : f32[B, H]
  param W : f32[H, K] = normal(0, 1)
  output y = x @ W
}
"""


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "caught.mdl", SOURCE)


@pytest.fixture(scope="module")
def module(path):
    """The file's module on the emulated device (with MDL_TEST_DEVICE=gpu, on the GPU)."""
    return load(path, target="cuda", emulate=EMULATE, dtype="f64",
                name=f"mutants_caught_f64_{SUFFIX}")


def graph(path, model: str):
    return check_file(str(path), model=model, dtype="f64").graph


def test_conditions_of_a_strided_column_are_read_at_their_steps(module, path):
    """The inner loop's conditions are a column of `flags` (steps S elements apart), read
    to the host at once before the loop: each step's branch is the one its flag picks,
    as the reference takes it, in the loss and every gradient."""
    g = graph(path, "ColumnConditions")
    m = module.ColumnConditions(seed=1)
    rng = np.random.default_rng(3)
    T, B, S = 5, 2, 3
    for _ in range(2):
        flags = rng.random((T, S)) < 0.5
        inputs = {"xs": rng.standard_normal((T, B, 4)), "flags": flags}
        assert_training_matches(m, g, inputs, 1e-10, seed=1)


@pytest.mark.parametrize("T", [3, 5])
def test_a_reversed_checkpointed_loop_in_an_if_draws_the_references_masks(module, path, T):
    """The `else` branch's loop runs reversed, in segments of 2 (the last padded at odd
    T); its backward recomputes each segment's dropout at the forward's positions. A
    padding step draws nothing: the masks, so the loss's gradients, are the reference's."""
    g = graph(path, "ReversedDraws")
    m = module.ReversedDraws(seed=2)
    rng = np.random.default_rng(T)
    for _ in range(2):
        inputs = {"xs": rng.standard_normal((T, 2, 4)), "c": np.array(-1.0)}
        grads = assert_training_matches(m, g, inputs, 1e-10, seed=2)
        assert all(np.isfinite(v).all() for v in grads.values())


def test_a_replayed_graph_reads_the_inputs_of_its_call(module):
    """Calls on the same dims, each on an input array put on the device (all held, so
    each its own memory): the work a call queues names its input's memory, so the graph
    captured for one array (the third call, repeating the second's work) is replayed for
    it (the fourth) and not for another (the fifth). Each call's product is of its own
    input (16 rows: cuBLAS's product, not the few-row kernel's)."""
    m = module.Project(seed=0)
    w = np.array(m.params["W"])
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((16, 4)) for _ in range(3)]
    on_device = [m.to_device(x) for x in xs]
    for k in (0, 1, 1, 1, 2):
        np.testing.assert_allclose(m.forward(x=on_device[k])["y"], xs[k] @ w, rtol=1e-13,
                                   atol=1e-14, err_msg=f"input {k}")
    assert m.cuda_graphs == {"captured": 1, "replayed": 1}
