"""What the backward pass keeps, as the language page says: storing everything keeps
every per-step value the backward needs; `recompute` keeps only the per-step state;
`checkpoint = k` keeps the state every k steps plus, while a segment is re-run, its k
steps' activations, so the segment's backward re-runs nothing more (memory O(T/k + k))."""
from __future__ import annotations

import math

import numpy as np

import pytest
from ir_helpers import joint, model, rnn_model

from codegen.transforms.tapes import saved_bytes

H, B, T = 4, 2, 64
STATE = 2 * B * H * 8          # h and c of one step, f64


POSITION = 16                  # a random stream's position (i32[4])


def saved(options: str, steps: int = T, call: str = "lstm(x, h, c)") -> int:
    graph = joint(model(rnn_model(call, options, H=H, state="h, c")))
    return saved_bytes(graph, {"T": steps, "B": B})


def test_a_recomputed_dropout_keeps_its_streams_position_not_its_mask():
    """`recompute` and `checkpoint` draw a dropout's mask again in the backward, from
    the position its stream had in the forward (ops/structured/replay.py): a step of
    `recompute`, a segment of `checkpoint`, keeps 16 bytes for it, not the mask. (Until
    2026-11-29 both kept every step's mask: at T=1000, B=16, E=H=256 in f32, with a
    dropout of x and one of h, 125 MiB for `recompute` and 363 MiB for `checkpoint =
    32`, more than storing everything; now 62.5 and 13 MiB.)"""
    call = "lstm(dropout(x, 0.5), h, c)"
    assert saved("(recompute)", call=call) == saved("(recompute)") + T * POSITION
    one_input = B * 2 * 8  # x of one step (E = 2), f64
    for steps in (T, 2 * T, 3 * T):
        grown = saved("(checkpoint = 8)", steps, call) - saved("(checkpoint = 8)", steps)
        # a position a segment; a segment re-run keeps its steps' mask and dropped x
        assert grown == math.ceil(steps / 8) * POSITION + 8 * 2 * one_input


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


# ---- the yields of a loop that recomputes, read again from its backward -----------------
WEIGHTED = '''
import "std/rnn.mdl"
model M(H = 3) {{
  input xs : f32[T, B, 2]; input w : f32[T, B, H]
  h = zeros[B, H]; c = zeros[B, H]
  hs = for x in xs {options} {{
    h, c = lstm(x, h, c)
    yield h
  }}
  output loss = {loss}
  minimize loss
}}'''


def forward_yields_read_by_backward(options: str, loss: str) -> list:
    """The forward loop's stacked yields (and selections of them) that the backward
    block or a gradient reads."""
    from codegen.ir.graph import free_values
    g = joint(model(WEIGHTED.format(options=options, loss=loss)))
    loop = next(op for op in g.body.ops if op.prim == "for")
    made = {v.id for v in loop.outputs[2:3]}
    for op in g.body.ops:  # what selects from them (checkpoint's unsegment)
        if op.inputs and op.inputs[0].id in made:
            made.update(v.id for v in op.outputs)
    read = [v for v in free_values(g.backward) if v.id in made]
    return read + [v for v in g.input_grads.values() if v.id in made]


@pytest.mark.parametrize("options", ["(recompute)", "(checkpoint = 4)"])
def test_a_recomputing_loop_s_backward_yields_its_hs_again(options):
    """d loss / d w = hs: the backward, which re-runs the steps, yields hs again, and the
    forward keeps it for nothing."""
    assert forward_yields_read_by_backward(options, "sum(hs * w)") == []
    assert forward_yields_read_by_backward("", "sum(hs * w)") != []  # stored: kept


def test_the_forward_s_yields_stay_where_the_loop_s_cotangents_need_them():
    """sum(hs * hs): d hs = 2 hs feeds the backward loop, which cannot make it itself."""
    assert forward_yields_read_by_backward("(checkpoint = 4)", "sum(hs * hs)") != []


@pytest.mark.parametrize("options", ["(recompute)", "(checkpoint = 4)", "(checkpoint = 3)"])
def test_gradients_through_yields_read_again_match_finite_differences(options):
    from ir_helpers import check_coordinates, random_params
    loss = "sum(hs * w) + sum(h * c)"
    assert forward_yields_read_by_backward(options, loss) == []
    graph = model(WEIGHTED.format(options=options, loss=loss))
    rng = np.random.default_rng(3)
    inputs = {"xs": rng.normal(size=(7, 2, 2)), "w": rng.normal(size=(7, 2, 3))}
    assert check_coordinates(graph, inputs, random_params(graph)) < 1e-7
