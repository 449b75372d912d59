"""What the backward pass keeps, as the language page says: storing everything keeps
every per-step value the backward needs; `recompute` keeps only the per-step state;
`checkpoint = k` keeps the state every k steps plus, while a segment is re-run, its k
steps' activations, so the segment's backward re-runs nothing more (memory O(T/k + k))."""
from __future__ import annotations

import math

import pytest
from ir_helpers import joint, model, rnn_model

from codegen.transforms.tapes import saved_bytes

H, B, T = 4, 2, 64
STATE = 2 * B * H * 8          # h and c of one step, f64


def saved(options: str, steps: int = T) -> int:
    graph = joint(model(rnn_model("lstm(x, h, c)", options, H=H, state="h, c")))
    return saved_bytes(graph, {"T": steps, "B": B})


def test_recompute_keeps_only_the_state_of_each_step():
    assert saved("(recompute)") == T * STATE


def test_storing_everything_keeps_more_per_step():
    assert saved("") > 3 * saved("(recompute)")
    assert saved("") == T * saved("", steps=1)


@pytest.mark.parametrize("k", [2, 8, 10, 64])
def test_checkpoint_keeps_one_state_per_segment_and_one_segment(k):
    one_step = saved("", steps=1)  # what storing everything keeps per step
    assert saved(f"(checkpoint = {k})") == math.ceil(T / k) * STATE + k * one_step


def test_checkpoint_memory_grows_as_t_over_k_plus_k():
    assert saved("(checkpoint = 8)") < saved("(checkpoint = 2)") < saved("(recompute)")
    # with lengths, a re-run segment also keeps each step's row mask (one bool a row)
    assert saved("(lengths = lengths, checkpoint = 8)") == saved("(checkpoint = 8)") + 8 * B


def test_a_graph_without_gradients_keeps_nothing():
    assert saved_bytes(model(rnn_model("lstm(x, h, c)", state="h, c")), {"T": T, "B": B}) == 0
