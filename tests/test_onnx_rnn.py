"""ONNX's `LSTM` and `GRU` nodes for loops of an LSTM or GRU step (codegen/export/
onnx_rnn.py): which loops become them (the examples; bodies that are std/rnn.mdl's cells,
or the same step written out; near misses, f64 and a loop with lengths whose final c is
read stay `Loop`s), and that both forms compute what mdl's reference does, in
onnxruntime, onnx's reference evaluator and (where installed) OpenVINO, with initial
states that are not zeros, rows of no steps, and dropout in the step."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from source_files import source_file
from test_onnx import EXAMPLES, TOLERANCE, inputs_for, rel_error, run_onnx

from codegen.cli import main as mdlc
from codegen.export import export_onnx, verify_onnx
from codegen.export.parameters import initial_values
from codegen.reference import interpreter as reference
from dsl import check_file


def std_loop(name: str, cell: str = "lstm", reverse: bool = False, lengths: bool = False,
             yields: str = "h", outputs: str = "hs, h_last = h, c_last = c") -> str:
    """A model of one loop of std/rnn.mdl's `cell` from initial states given as inputs."""
    lstm = cell == "lstm"
    outputs = outputs if lstm else outputs.replace(", c_last = c", "")
    seq = "reversed(xs)" if reverse else "xs"
    return "\n".join([
        f"model {name}(E = 3, H = 4) {{", "  input xs : f32[T, B, E]",
        *(["  input lengths : i32[B]"] if lengths else []), "  input h0 : f32[B, H]",
        *(["  input c0 : f32[B, H]", "  h = h0; c = c0"] if lstm else ["  h = h0"]),
        f"  {'hs = ' if yields else ''}for x in {seq}"
        f"{' (lengths = lengths)' if lengths else ''} {{",
        "    h, c = lstm(x, h, c)" if lstm else "    h = gru(x, h)",
        *([f"    yield {yields}"] if yields else []), "  }",
        *(f"  output {o.strip()}" for o in outputs.split(",")), "}", ""])


# the GRU step written out, its sums and products in other orders, two input biases
OWN_GRU = """
model OwnGRU(E = 3, H = 4) {
  input xs : f32[T, B, E]
  input h0 : f32[B, H]
  param W : f32[E, 3*H] = uniform(-0.5, 0.5)
  param U : f32[H, 3*H] = uniform(-0.5, 0.5)
  param b1 : f32[3*H] = uniform(-0.5, 0.5)
  param b2 : f32[3*H] = uniform(-0.5, 0.5)
  h = h0
  hs = for x in xs {
    xr, xz, xn = split(b1 + x @ W + b2, 3, axis = 1)
    hr, hz, hn = split(h @ U, 3, axis = 1)
    r = sigmoid(hr + xr)
    z = sigmoid(xz + hz)
    n = tanh(hn * r + xn)
    h = h * z + n * (1.0 - z)
    yield h
  }
  output hs
}
"""
# the LSTM step written out as one would: c assigned before h, so that the Loop's states
# are (c, h) (it stayed a Loop); the final c read after it
OWN_LSTM = """
model OwnLSTM(E = 3, H = 4) {
  input xs : f32[T, B, E]
  input h0 : f32[B, H]
  input c0 : f32[B, H]
  param W : f32[E, 4*H] = uniform(-0.5, 0.5)
  param U : f32[H, 4*H] = uniform(-0.5, 0.5)
  param b : f32[4*H] = uniform(-0.5, 0.5)
  c = c0; h = h0
  hs = for x in xs {
    i, f, g, o = split(x @ W + h @ U + b, 4, axis = 1)
    c = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h = sigmoid(o) * tanh(c)
    yield h
  }
  output hs
  output h_last = h
  output c_last = c
}
"""
# dropout's steps stay in the loop, and are `Identity`s in an inference graph
DROPOUT = """
model Dropout(E = 3, H = 4) {
  input xs : f32[T, B, E]
  input lengths : i32[B]
  input h0 : f32[B, H]
  input c0 : f32[B, H]
  h = h0; c = c0
  hs = for x in xs (lengths = lengths) {
    h, c = lstm(dropout(x, 0.2), h, c)
    yield dropout(h, 0.3)
  }
  output hs
  output h_last = h
}
"""
# near misses: each a recurrence of its own, not a std cell's step
NEAR_MISSES = """
model ProductOfC(E = 3, H = 4) {       # with lengths, so that the mask reads h
  input xs : f32[T, B, E]
  input lengths : i32[B]
  input h0 : f32[B, H]
  input c0 : f32[B, H]
  param W : f32[E, 4*H] = uniform(-0.5, 0.5)
  param U : f32[H, 4*H] = uniform(-0.5, 0.5)
  h = h0; c = c0
  hs = for x in xs (lengths = lengths) {
    i, f, g, o = split(x @ W + c @ U, 4, axis = 1)
    c2 = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h = sigmoid(o) * tanh(c2)
    c = c2
    yield h
  }
  output hs
}

model InputOfTheState(E = 3, H = 4) {
  input xs : f32[T, B, E]
  input h0 : f32[B, H]
  input c0 : f32[B, H]
  h = h0; c = c0
  for x in xs {
    h, c = lstm(x * sum(h), h, c)
  }
  output h_last = h
}
"""
SOURCE = "\n".join([
    'import "std/rnn.mdl"', "",
    std_loop("Forward"), std_loop("Backward", reverse=True),
    std_loop("GRUBackward", "gru", reverse=True),
    std_loop("Lengths", lengths=True, outputs="hs, h_last = h"),
    std_loop("GRULengths", "gru", reverse=True, lengths=True), OWN_GRU, OWN_LSTM,
    OWN_LSTM.replace("OwnLSTM", "OwnLSTMLengths").replace("for x in xs", "for x in "
        "reversed(xs) (lengths = lengths)").replace("  output c_last = c\n", "").replace(
        "input h0", "input lengths : i32[B]\n  input h0"), DROPOUT,
    # near misses: a yield other than h, a final c of a loop with lengths, z's roles
    # swapped, a product of another value than h
    std_loop("YieldsC", yields="c", outputs="hs"),
    std_loop("FinalCWithLengths", lengths=True, yields="", outputs="c_last = c"),
    OWN_GRU.replace("OwnGRU", "ZSwapped").replace("h = h * z + n * (1.0 - z)",
                                                  "h = z * n + (1.0 - z) * h"),
    OWN_GRU.replace("OwnGRU", "ProductOfTanh").replace("split(h @ U", "split(tanh(h) @ U"),
    # the roles of the gates i and f swapped
    OWN_LSTM.replace("OwnLSTM", "GatesSwapped").replace("sigmoid(f) * c + sigmoid(i)",
                                                        "sigmoid(i) * c + sigmoid(f)"),
    NEAR_MISSES])
NODES = {"Forward": ["LSTM"], "Backward": ["LSTM"], "GRUBackward": ["GRU"],
         "Lengths": ["LSTM"], "GRULengths": ["GRU"], "OwnGRU": ["GRU"], "Dropout": ["LSTM"],
         "OwnLSTM": ["LSTM"], "OwnLSTMLengths": ["LSTM"],
         "ZSwapped": ["Loop"], "GatesSwapped": ["Loop"], "InputOfTheState": ["Loop"],
         "ProductOfC": ["Loop"], "ProductOfTanh": ["Loop"],
         "YieldsC": ["Loop"], "FinalCWithLengths": ["Loop"]}
EXAMPLE_NODES = {"CharLM": ["LSTM"], "GRUClassifier": ["GRU"], "BiTagger": ["LSTM", "LSTM"],
                 "Tagger": ["LSTM", "LSTM", "Loop"], "MILSTMLM": ["Loop", "Loop"],
                 "TranslatorEncode": ["Loop"]}  # its final c, with lengths: not in `Y`


def loops(path: Path) -> list[str]:
    """The LSTM, GRU and Loop nodes of an ONNX file's main graph, in order."""
    return [n.op_type for n in onnx.load(str(path)).graph.node
            if n.op_type in ("LSTM", "GRU", "Loop")]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return source_file(tmp_path_factory, "rnn.mdl", SOURCE)


def test_the_models_here_are_all_checked():
    assert set(NODES) == set(re.findall(r"^model (\w+)", SOURCE, re.M))


@pytest.mark.parametrize("model", sorted(EXAMPLE_NODES))
def test_which_example_loops_become_lstm_or_gru_nodes(tmp_path, model):
    file = next(p for p in EXAMPLES.glob("*.mdl") if f"model {model}(" in p.read_text())
    assert loops(export_onnx(file, tmp_path / "m.onnx", model=model)) == EXAMPLE_NODES[model]
    plain = export_onnx(file, tmp_path / "loops.onnx", model=model, rnn_ops=False)
    assert set(loops(plain)) == {"Loop"}


@pytest.mark.parametrize("model", sorted(NODES))
def test_each_form_computes_what_the_reference_does(tmp_path, source, model):
    """The node where the body is a cell, the Loop where it is not, and the Loop asked for
    (rnn_ops=False); every runtime at hand, three calls each (`verify_onnx`)."""
    runtimes = ["onnxruntime", "onnx-reference"] + (
        ["openvino"] if importlib.util.find_spec("openvino") else [])
    for rnn_ops, kinds in ((True, NODES[model]), (False, ["Loop"])):
        out = export_onnx(source, tmp_path / f"{rnn_ops}.onnx", model=model, seed=3,
                          rnn_ops=rnn_ops)
        assert loops(out) == kinds
        for verdict in verify_onnx(source, out, runtimes=runtimes, model=model, seed=3):
            assert verdict.agrees, str(verdict)


@pytest.mark.parametrize("model", ["Lengths", "GRULengths", "OwnLSTMLengths"])
def test_rows_of_no_steps_keep_their_initial_state(tmp_path, source, model):
    """Lengths 0 and T among others, initial states not zeros: a row of no steps ends in
    its initial h and yields zeros, which `Y` of a node run over every step does not
    say."""
    graph = check_file(str(source), model=model).graph
    params = initial_values(graph, 5, np.float32)
    out = export_onnx(source, tmp_path / "m.onnx", model=model, params=params)
    assert loops(out) == NODES[model]
    for steps in (6, 1):
        inputs = inputs_for(graph, {"T": steps, "B": 5}, seed=steps)
        assert inputs["lengths"][0] == 0 and np.abs(inputs["h0"][0]).max() > 0.1
        got = run_onnx(out, inputs)
        want = reference.run(graph, inputs, params, dtype=np.float32)
        for name in graph.outputs:
            assert rel_error(got[name], want[name]) < TOLERANCE, (steps, name)
        np.testing.assert_array_equal(got["h_last"][0], inputs["h0"][0])


@pytest.mark.parametrize("model", sorted(m for m, kinds in NODES.items() if "Loop" not in kinds))
def test_no_steps_and_no_rows_run_as_the_loop_does(tmp_path, source, model):
    """QA: at T = 0 onnxruntime's LSTM node left its final h and c unset (zeros, or other
    values each call) and its GRU node ended the process ("terminate called without an
    active exception"), as both did at B = 0; the node runs one step (row) of zeros
    there, its results dropped."""
    graph = check_file(str(source), model=model).graph
    params = initial_values(graph, 5, np.float32)
    out = export_onnx(source, tmp_path / "m.onnx", model=model, params=params)
    assert loops(out) == NODES[model]
    for steps, rows in ((0, 3), (2, 0), (0, 0), (2, 3)):
        inputs = inputs_for(graph, {"T": steps, "B": 3}, seed=steps)
        for name, v in graph.inputs.items():  # the first `rows` rows
            axis = [str(d) for d in v.type.shape].index("B")
            inputs[name] = np.take(inputs[name], range(rows), axis=axis)
        got = run_onnx(out, inputs)
        want = reference.run(graph, inputs, params, dtype=np.float32)
        for name in graph.outputs:
            assert got[name].shape == want[name].shape, (steps, name)
            assert rel_error(got[name], want[name]) < TOLERANCE, (steps, name)
        if steps == 0 and rows and "h_last" in got:
            np.testing.assert_array_equal(got["h_last"], inputs["h0"])


def test_f64_exports_keep_the_loop(tmp_path, source):
    """onnxruntime's LSTM and GRU kernels are f32 only."""
    out = export_onnx(source, tmp_path / "m.onnx", model="Forward", dtype="f64")
    assert loops(out) == ["Loop"]


def test_mdlc_export_loops(tmp_path, capsys):
    charlm = str(EXAMPLES / "charlm.mdl")
    for flags, kinds in (([], ["LSTM"]), (["--loops"], ["Loop"])):
        out = tmp_path / f"{len(flags)}.onnx"
        assert mdlc(["export", charlm, "--model", "CharLM", "--onnx", str(out), *flags]) == 0
        assert loops(out) == kinds
    capsys.readouterr()
