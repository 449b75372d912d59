"""Export to ONNX (codegen/export/): every example model and every std-library cell, run by
onnxruntime at two sequence lengths from one export, with uneven lengths, matches the
reference interpreter and the native module (and every example in onnx's reference
evaluator and, where it is installed, in OpenVINO matches the reference); the initial
values match Model(seed=0)'s; the graph passes onnx's full check; errors name what is
wrong."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from fuzz_generate import generate
from fuzz_onnx import run_program
from fuzz_source import module_source
from test_topk import SOURCE as TOPK_SOURCE
from test_topk import edge_rows

from codegen.cli import main as mdlc
from codegen.export import export_onnx, verify_onnx
from codegen.export.parameters import initial_values
from codegen.export.verify import session
from codegen.ir.diagnostics import MdlError, UsageError
from codegen.pipeline import load
from codegen.reference import gradcheck
from codegen.reference import interpreter as reference
from dsl import check_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MODELS = [(path.name, name) for path in sorted(EXAMPLES.glob("*.mdl"))
          for name in re.findall(r"^model (\w+)", path.read_text(), re.M)]
TOLERANCE = 1e-5  # f32, relative to the largest element
_BUILT: dict = {}


def native(path: Path, name: str):
    """The f32 module of a .mdl file (the name test_native.py builds examples under, so a
    session builds each once)."""
    if name not in _BUILT:
        _BUILT[name] = load(path, dtype="f32", name=name)
    return _BUILT[name]


def rel_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max(initial=0.0)), 1e-30)
    return float(np.abs(got - want).max(initial=0.0)) / scale


def inputs_for(graph, dims: dict, seed: int) -> dict:
    """Random valid inputs; lengths uneven: one row empty, one full, the rest between."""
    rng = np.random.default_rng(seed)
    out = gradcheck.random_inputs(graph, dims, rng)
    for name, v in graph.inputs.items():
        if v.type.is_float:
            out[name] = out[name].astype(np.float32)
        elif name == "lengths":
            steps = dims["T"]
            lengths = rng.integers(0, steps + 1, out[name].shape)
            lengths[:2] = [0, steps]
            out[name] = lengths.astype(np.int32)
    return out


def run_onnx(path: Path, inputs: dict) -> dict:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {k: np.asarray(v) for k, v in inputs.items()
                                               if k in wanted})))


@pytest.mark.parametrize("file,model", MODELS)
def test_example_runs_in_onnxruntime_like_the_reference_and_the_native_module(
        tmp_path, file, model):
    path = EXAMPLES / file
    graph = check_file(str(path), model=model).graph
    m = getattr(native(path, f"{path.stem}_f32"), model)(seed=0)
    params = {k: np.array(v) for k, v in m.params.items()}
    out = export_onnx(path, tmp_path / "m.onnx", model=model, params=m)
    for steps in (5, 2):  # one export, two sequence lengths
        inputs = inputs_for(graph, {"T": steps, "B": 3, "S": 4}, seed=steps)
        got = run_onnx(out, inputs)
        assert set(got) == set(graph.outputs)
        want = reference.run(graph, inputs, params, dtype=np.float32)
        native_out = m.forward(**inputs)
        for name in graph.outputs:
            assert rel_error(got[name], want[name]) < TOLERANCE, (steps, name)
            assert rel_error(got[name], native_out[name]) < TOLERANCE, (steps, name)


@pytest.mark.parametrize("file,model", MODELS)
def test_example_runs_in_openvino_like_the_reference(tmp_path, file, model):
    """A second runtime nobody here wrote (where it is installed: CI installs it)."""
    openvino = pytest.importorskip("openvino")
    path = EXAMPLES / file
    graph = check_file(str(path), model=model).graph
    params = initial_values(graph, 0, np.float32)
    out = export_onnx(path, tmp_path / "m.onnx", model=model)
    core = openvino.Core()
    # f32 asked for: on a CPU with bf16 instructions (avx512_bf16, AMX) OpenVINO infers in
    # bf16 by default, 3 significant digits (0.1162 for 0.1163 on an AMD Zen 4)
    compiled = core.compile_model(core.read_model(str(out)), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    for steps in (5, 2):
        inputs = inputs_for(graph, {"T": steps, "B": 3, "S": 4}, seed=steps)
        feeds = {name: inputs[name] for i in compiled.inputs for name in i.names
                 if name in graph.inputs}
        got = compiled(feeds)
        want = reference.run(graph, inputs, params, dtype=np.float32)
        for port in compiled.outputs:
            name, = (n for n in port.names if n in graph.outputs)
            assert rel_error(got[port], want[name]) < TOLERANCE, (steps, name)


@pytest.mark.parametrize("file,model", MODELS)
def test_example_runs_in_the_onnx_reference_evaluator_like_the_reference(tmp_path, file, model):
    """A third runtime: onnx's own reference evaluator, the ONNX spec written in NumPy
    (its Loop's scan outputs stacked, as the runtimes stack them: codegen/export/verify.py)."""
    path = EXAMPLES / file
    graph = check_file(str(path), model=model).graph
    params = initial_values(graph, 0, np.float32)
    run, _ = session(export_onnx(path, tmp_path / "m.onnx", model=model), "onnx-reference")
    for steps in (5, 2):
        inputs = inputs_for(graph, {"T": steps, "B": 3, "S": 4}, seed=steps)
        with np.errstate(divide="ignore", invalid="ignore"):  # log(0) and where()s untaken side
            got = run(inputs)
        want = reference.run(graph, inputs, params, dtype=np.float32)
        for name in graph.outputs:
            assert rel_error(got[name], want[name]) < TOLERANCE, (steps, name)


def dead_nodes(graph, outer_reads=frozenset()) -> list[str]:
    """Names of the nodes of `graph` (and of the graphs in it) none of whose outputs is
    read: by a node, a graph nested in one, or as an output."""
    reads = {o.name for o in graph.output} | set(outer_reads)
    nested = [a.g for n in graph.node for a in n.attribute if a.type == a.GRAPH]
    def all_reads(g):
        inner = [a.g for n in g.node for a in n.attribute if a.type == a.GRAPH]
        return {i for n in g.node for i in n.input}.union(*map(all_reads, inner))
    reads |= {i for n in graph.node for i in n.input}.union(*map(all_reads, nested))
    dead = [n.name for n in graph.node if not reads.intersection(n.output)]
    return dead + [d for g in nested for d in dead_nodes(g)]


@pytest.mark.parametrize("file,model", MODELS)
def test_no_node_computes_what_nothing_reads(tmp_path, file, model):
    """A rule may make what a step might need (each sequence's step, read or not); the
    graph keeps only what its outputs need (codegen/export/onnx_graph.py, `live`), so a
    Loop body does no dead work each trip and netron shows none."""
    out = export_onnx(EXAMPLES / file, tmp_path / "m.onnx", model=model)
    assert dead_nodes(onnx.load(str(out)).graph) == []


@pytest.mark.parametrize("file,model", MODELS)
def test_initial_values_are_those_of_model_seed_0(file, model):
    """Without parameters, an export carries what Model(seed=0) starts from (the runtime's
    initializers, recomputed in NumPy)."""
    path = EXAMPLES / file
    graph = check_file(str(path), model=model).graph
    m = getattr(native(path, f"{path.stem}_f32"), model)(seed=0)
    mine = initial_values(graph, 0, np.float32)
    assert set(mine) == set(m.params)
    for name, value in m.params.items():
        np.testing.assert_allclose(mine[name], value, rtol=1e-6, atol=1e-7, err_msg=name)


CELLS = {"LSTM": ("lstm(x, h, c)", "h, c"), "GRU": ("gru(x, h)", "h"),
         "MILSTM": ("milstm(x, h, c)", "h, c"), "LNLSTM": ("ln_lstm(x, h, c)", "h, c")}


def _cell_models() -> str:
    """A model per std-library cell and direction, over a sequence with lengths."""
    text = ['import "std/rnn.mdl"']
    for cell, (call, state) in CELLS.items():
        for direction in ("", "reversed"):
            first = state.split(",")[0]
            inits = "\n  ".join(f"{s.strip()} = zeros[B, H]" for s in state.split(","))
            seq = "reversed(xs)" if direction else "xs"
            text.append(f"""
model {cell}{direction.title()}(H = 5, E = 3) {{
  input xs : f32[T, B, E]
  input lengths : i32[B]
  {inits}
  hs = for x in {seq} (lengths = lengths) {{
    {state} = {call}
    yield {first}
  }}
  output hs
  output {first}
}}""")
    return "\n".join(text)


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    path = tmp_path_factory.mktemp("cells") / "cells.mdl"
    path.write_text(_cell_models())
    return path, native(path, "onnx_cells_f32")


@pytest.mark.parametrize("model", [f"{c}{d}" for c in CELLS for d in ("", "Reversed")])
def test_std_cells_run_in_onnxruntime_like_the_reference_and_the_native_module(
        tmp_path, cells, model):
    path, module = cells
    graph = check_file(str(path), model=model).graph
    m = getattr(module, model)(seed=1)
    params = {k: np.array(v) for k, v in m.params.items()}
    out = export_onnx(path, tmp_path / "cell.onnx", model=model, params=params)
    for steps in (6, 3):
        inputs = inputs_for(graph, {"T": steps, "B": 4, "S": 4}, seed=steps)
        got = run_onnx(out, inputs)
        want = reference.run(graph, inputs, params, dtype=np.float32)
        native_out = m.forward(**inputs)
        for name in graph.outputs:
            assert rel_error(got[name], want[name]) < TOLERANCE, (steps, name)
            assert rel_error(got[name], native_out[name]) < TOLERANCE, (steps, name)


def test_a_data_dependent_while_and_an_if_inside_a_for(tmp_path):
    """examples/control.mdl halves the state while its norm is above 1 (a trip count each
    step its own) after an `if` on the input's mean: inputs scaled so that both branches
    run and the while runs 0 to 10 times."""
    path = EXAMPLES / "control.mdl"
    graph = check_file(str(path)).graph
    params = initial_values(graph, 0, np.float32)
    out = export_onnx(path, tmp_path / "control.onnx")
    def kinds(graph) -> set[str]:
        inner = [kinds(a.g) for n in graph.node for a in n.attribute if a.type == a.GRAPH]
        return {n.op_type for n in graph.node}.union(*inner)
    assert {"If", "Loop"} <= kinds(onnx.load(str(out)).graph)
    rng = np.random.default_rng(0)
    for scale in (0.1, 3.0, 30.0):
        inputs = {"xs": (scale * rng.standard_normal((7, 4, 8))).astype(np.float32),
                  "target": rng.standard_normal((4, 16)).astype(np.float32)}
        got = run_onnx(out, inputs)
        want = reference.run(graph, inputs, params, dtype=np.float32)
        for name in graph.outputs:
            assert rel_error(got[name], want[name]) < TOLERANCE, (scale, name)


STATE_OVERWRITTEN = """
model Overwritten() {
  input x : f32[B, 3]
  input y : f32[B, 3]
  input tokens : i32[T, B]
  param table : f32[4, 3] = normal(0, 1)
  a = x + 2.0
  while sum(a) < 1.0 {       # false at the start for most x: no trip
    a = sigmoid(y)           # the body never reads the state it overwrites
  }
  h = zeros[B, 3]
  for e in table[tokens] {
    k = 0
    while k < 1 and mean(h) > 10.0 {
      h = tanh(y)
      k = k + 1
    }
    h = 0.5 * h + 0.5 * tanh(e)
  }
  output a
  output h
}
"""


def openvino_model(path):
    """The ONNX file compiled by OpenVINO's CPU plugin in f32 (skips where OpenVINO is
    not installed; CI installs it)."""
    pytest.importorskip("openvino")
    return session(path, "openvino")[0]


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_a_loop_of_no_trips_keeps_a_state_its_body_only_overwrites(tmp_path, runtime):
    """A `while` false at the start gives its state's value before it, also when its body
    overwrites the state without reading it. OpenVINO 2026.4 dropped such a body input
    and gave zeros (and, nested in a `for`, failed its shape inference); the export makes
    every carried value read its input (OnnxGraph.carry)."""
    path = tmp_path / "overwritten.mdl"
    path.write_text(STATE_OVERWRITTEN)
    graph = check_file(str(path)).graph
    params = initial_values(graph, 0, np.float32)
    out = export_onnx(path, tmp_path / "overwritten.onnx")
    run = (lambda inputs: run_onnx(out, inputs)) if runtime == "onnxruntime" \
        else openvino_model(out)
    rng = np.random.default_rng(0)
    for shift in (0.0, -9.0):  # no trip, then trips
        inputs = {"x": (rng.standard_normal((3, 3)) + shift).astype(np.float32),
                  "y": rng.standard_normal((3, 3)).astype(np.float32),
                  "tokens": rng.integers(0, 4, (5, 3)).astype(np.int32)}
        got = run(inputs)
        want = reference.run(graph, inputs, params, dtype=np.float32)
        for name in graph.outputs:
            assert rel_error(got[name], want[name]) < TOLERANCE, (shift, name)


BESIDE_INPUTS = {  # a value of parameters only, added to one of the call's inputs
    "logsumexp": "sum(logsumexp(p, axis = 1))",
    "i32": "mean(f32(i32(q * 100.0)))",
    "topk": "mean(best)",
    "argmax": "f32(argmax(q))",
}


def beside_inputs(tmp_path, construct: str):
    path = tmp_path / f"{construct}.mdl"
    path.write_text(f"""
model Beside() {{
  input xs : f32[T, B, 2]
  param p : f32[2, 2] = normal(0, 1)
  param q : f32[6] = normal(0, 1)
  best, at = topk(q, 3)
  output y = {BESIDE_INPUTS[construct]} + mean(xs)
}}
""")
    return path, export_onnx(path, tmp_path / f"{construct}.onnx")


@pytest.mark.parametrize("construct", list(BESIDE_INPUTS))
def test_no_isnan_isinf_or_gather_in_a_graph(tmp_path, construct):
    """OpenVINO 2026.4 computed ONNX's IsNaN, IsInf and GatherElements of a parameter once
    and gave later calls another value's memory in their place (a sum of IsNaN(p) plus
    one of the input came out as the last call's result plus the input's). logsumexp,
    i32(x), topk and argmax test NaN and infinity with Equal and Abs, and an f32's topk
    maps its keys back to its values."""
    _, out = beside_inputs(tmp_path, construct)
    kinds = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "Equal" in kinds or "Less" in kinds
    assert not kinds & {"IsNaN", "IsInf", "GatherElements"}


@pytest.mark.parametrize("construct", list(BESIDE_INPUTS))
def test_openvino_gives_each_call_its_own_values(tmp_path, construct):
    """Three calls in turn in one compiled model. With IsNaN, IsInf, GatherElements or a
    cast through f64 in the graph, the calls after the first came out as the call
    before's result plus their own input's mean."""
    path, out = beside_inputs(tmp_path, construct)
    graph = check_file(str(path)).graph
    params = initial_values(graph, 0, np.float32)
    run = openvino_model(out)
    rng = np.random.default_rng(1)
    for steps, rows in [(4, 3), (6, 2), (4, 3)]:
        inputs = {"xs": rng.standard_normal((steps, rows, 2)).astype(np.float32)}
        want = reference.run(graph, inputs, params, dtype=np.float32)
        assert rel_error(run(inputs)["y"], want["y"]) < TOLERANCE, (steps, rows)


def test_edge_values_run_in_onnxruntime_as_in_the_module(tmp_path):
    """What tests/test_edge_values.py defines everywhere, in the exported graph too:
    i32(x) of NaN is 0 and of a float past i32 its nearer end (ONNX's Cast is undefined
    there), bool(x) is x != 0, max of negative i32 values is theirs, and i32 arithmetic
    wraps around past i32's range (onnxruntime's i32 ReduceSum stopped at its ends)."""
    path = tmp_path / "edges.mdl"
    path.write_text("""
model Edges() {
  input x : f32[B]
  input i : i32[B, 2]
  output n = i32(x)
  output b = bool(x)
  output m = max(i, axis = 1)
  output rows = sum(i, axis = 1)
  output cols = sum(i * 3, axis = 0)
  output total = sum(i + i)
  output pick = argmax(i, axis = 1)
}
""")
    out = export_onnx(path, tmp_path / "edges.onnx")
    x = np.array([np.nan, 3e9, -3e9, 2.7, -2.7, np.inf, 0.5, 0.0], np.float32)
    i = -np.arange(1, 17, dtype=np.int32).reshape(8, 2)
    got = run_onnx(out, {"x": x, "i": i})
    want = reference.run(check_file(str(path)).graph, {"x": x, "i": i}, {}, dtype=np.float32)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    top, bottom = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    assert got["n"].tolist() == [0, top, bottom, 2, -2, top, 0, 0]
    assert got["m"].tolist() == [-1, -3, -5, -7, -9, -11, -13, -15]
    i[:3] = [[top, 1], [bottom, -1], [top, top]]
    got = run_onnx(out, {"x": x, "i": i})
    want = reference.run(check_file(str(path)).graph, {"x": x, "i": i}, {}, dtype=np.float32)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert got["rows"][:3].tolist() == [bottom, top, -2]


def test_the_transpose_of_a_number_is_itself(tmp_path):
    """QA: ONNX's Transpose takes no empty perm: its export was an internal error."""
    path = tmp_path / "number.mdl"
    path.write_text("model T0() {\n  input x : f32\n  output y = transpose(x) * 2.0\n}\n")
    out = export_onnx(path, tmp_path / "number.onnx")
    assert run_onnx(out, {"x": np.float32(1.5)})["y"] == 3.0


def test_a_where_of_bools_and_a_bool_state_run_in_onnxruntime(tmp_path):
    """onnxruntime (1.32) has no Where of bools: a `where` choosing between bools, and a
    loop's bool state its body overwrites (OnnxGraph.carry), were files it refused; they
    are And/Or/Not now."""
    path = tmp_path / "bools.mdl"
    path.write_text("""
model Bools() {
  input a : f32[N]; input b : f32[N]
  e = where(a > b, a > 0.0, b > 0.0)
  h = a[0] > 100.0
  hs = for x in a {
    h = x < 0.0
    yield f32(where(x > 0.5, h, e[0]))
  }
  output y = f32(e) + hs
  output z = f32(h)
}
""")
    out = export_onnx(path, tmp_path / "bools.onnx")
    graph = check_file(str(path)).graph
    rng = np.random.default_rng(0)
    for n in (1, 6):
        inputs = {k: rng.standard_normal(n).astype(np.float32) for k in ("a", "b")}
        got = run_onnx(out, inputs)
        want = reference.run(graph, inputs, {}, dtype=np.float32)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("seq", ["xs", "reversed(xs)"])
def test_bool_yields_of_a_loop_with_lengths_run_in_onnxruntime(tmp_path, seq):
    """QA: a reversed loop's bool yields, put back in time order (seq_order), made a Where
    of bools, which onnxruntime refused."""
    path = tmp_path / "yields.mdl"
    path.write_text(f"""
model BoolYield() {{
  input xs : f32[T, B]
  input lengths : i32[B]
  pos = for x in {seq} (lengths = lengths) {{
    yield x > 0.0
  }}
  output pos
}}
""")
    out = export_onnx(path, tmp_path / "yields.onnx")
    graph = check_file(str(path)).graph
    rng = np.random.default_rng(0)
    for steps, lengths in ((3, [3, 1]), (4, [0, 4, 2])):
        inputs = {"xs": rng.standard_normal((steps, len(lengths))).astype(np.float32),
                  "lengths": np.array(lengths, np.int32)}
        got = run_onnx(out, inputs)["pos"]
        want = reference.run(graph, inputs, {}, dtype=np.float32)["pos"]
        assert got.dtype == np.bool_ and np.array_equal(got, want), (got, want)


def test_a_bool_sequence_of_a_loop_with_lengths_runs_in_onnxruntime(tmp_path):
    """QA: a mask input stepped by a loop with lengths (put in step order: seq_order) was a
    Where of bools, which onnxruntime refused."""
    path = tmp_path / "mask.mdl"
    path.write_text("""
model BoolSeq() {
  input xs : f32[T, B]
  input ms : bool[T, B]
  input lengths : i32[B]
  s = zeros[B]
  for x in xs, m in ms (lengths = lengths) { s = where(m, s + x, s) }
  output s
}
""")
    out = export_onnx(path, tmp_path / "mask.onnx")
    graph = check_file(str(path)).graph
    rng = np.random.default_rng(1)
    inputs = {"xs": rng.standard_normal((4, 3)).astype(np.float32),
              "ms": rng.random((4, 3)) > 0.5, "lengths": np.array([4, 0, 2], np.int32)}
    got = run_onnx(out, inputs)["s"]
    want = reference.run(graph, inputs, {}, dtype=np.float32)["s"]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_mean_over_an_axis_empty_at_export_is_nan(tmp_path):
    """The mean of nothing is NaN; over a slice empty for the export's -D values ONNX's
    ReduceMean gave 0 (onnxruntime 1.32)."""
    path = tmp_path / "empty.mdl"
    path.write_text("model Empty(K = 2) {\n  input x : f32[B, 4]\n"
                    "  output m = mean(x[:, 2:K], axis = 1) + mean(x)\n}\n")
    out = export_onnx(path, tmp_path / "empty.onnx")
    x = np.ones((3, 4), np.float32)
    assert np.isnan(run_onnx(out, {"x": x})["m"]).all()
    assert np.isnan(reference.run(check_file(str(path)).graph, {"x": x}, {},
                                  dtype=np.float32)["m"]).all()


def test_argmax_runs_in_onnxruntime_as_in_the_module(tmp_path):
    """argmax is the first largest value's index, a NaN counting as the largest (as
    NumPy): onnxruntime's ArgMax passes over a NaN, so the export picks the first NaN
    itself."""
    path = tmp_path / "picks.mdl"
    path.write_text("""
model Picks() {
  input x : f32[B, 3]
  output rows = argmax(x)
  output cols = argmax(x, axis = 0)
}
""")
    out = export_onnx(path, tmp_path / "picks.onnx")
    x = np.array([[1, 3, 3], [np.inf, np.nan, 2], [np.nan, 5, np.nan], [-np.inf] * 3,
                  [2, 1, 0]], np.float32)
    got = run_onnx(out, {"x": x})
    want = reference.run(check_file(str(path)).graph, {"x": x}, {}, dtype=np.float32)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert got["rows"].tolist() == [1, 1, 0, 0, 0] and got["cols"].tolist() == [2, 1, 2]


def test_topk_runs_in_onnxruntime_as_in_the_module(tmp_path):
    """topk puts every NaN first, then +inf, then the numbers, equal ones lower index
    first: the export's TopK orders keys that say so (a NaN as +inf, +inf as the largest
    f64) and gathers the values, NaNs included, from the input. tests/test_topk.py's
    model and rows of edges, in f32."""
    path = tmp_path / "top.mdl"
    path.write_text(TOPK_SOURCE)
    out = export_onnx(path, tmp_path / "top.onnx", model="Top")
    x, n = edge_rows(0)
    x[4, 2] = np.finfo(np.float32).max  # f32's largest, with +inf in its row
    x = x.astype(np.float32)
    got = run_onnx(out, {"x": x, "n": n})
    graph = check_file(str(path), model="Top").graph
    want = reference.run(graph, {"x": x, "n": n}, {}, dtype=np.float32)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert got["indices"][1].tolist() == [2, 5, 3]  # the NaNs, then +inf


def test_i32_floor_division_and_remainder_run_in_onnxruntime_as_in_numpy(tmp_path):
    """ONNX's Div of integers rounds toward zero and a 0 divisor (or i32's lowest value /
    -1) ends onnxruntime with a signal: the export rounds down and guards both."""
    path = tmp_path / "divides.mdl"
    path.write_text("model Divides() { input x : i32[B]; input y : i32[B]; "
                    "output q = x // y; output r = x % y }")
    out = export_onnx(path, tmp_path / "divides.onnx")
    rng = np.random.default_rng(0)
    bottom, top = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    x = np.concatenate([[7, -7, 7, -7, 5, bottom, top, 0],
                        rng.integers(bottom, top, 2000, dtype=np.int64)]).astype(np.int32)
    y = np.concatenate([[2, 2, -2, -2, 0, -1, bottom, 0],
                        rng.integers(-40, 40, 2000)]).astype(np.int32)
    got = run_onnx(out, {"x": x, "y": y})
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got["q"], np.floor_divide(x, y))
        np.testing.assert_array_equal(got["r"], np.remainder(x, y))


def test_the_graph_names_parameters_by_scope_and_dims_by_symbol(tmp_path):
    """Parameters are initializers under their full names, once however many places use
    them (sharing); symbolic dims are dim_params, specialized ones sizes; --outputs leaves
    out the inputs only other outputs read."""
    path = EXAMPLES / "charlm.mdl"
    out = export_onnx(path, tmp_path / "lm.onnx", model="CharLM", defines={"H": 8},
                      specialize={"B": 1}, outputs=["logits"])
    made = onnx.load(str(out))
    onnx.checker.check_model(made, full_check=True)
    assert [i.name for i in made.graph.initializer] == [
        "embedding", "lstm/W", "lstm/U", "lstm/b", "decoder/W", "decoder/b"]
    shapes = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in made.graph.input}
    assert shapes == {"tokens": ["T", 1], "lengths": [1]}
    assert [o.name for o in made.graph.output] == ["logits"]
    assert made.opset_import[0].version == 18

    shared = export_onnx(EXAMPLES / "sharing.mdl", tmp_path / "sharing.onnx")
    names = [i.name for i in onnx.load(str(shared)).graph.initializer]
    graph = check_file(str(EXAMPLES / "sharing.mdl")).graph
    assert sorted(names) == sorted(graph.params) and len(names) == len(set(names))


def test_parameters_come_from_a_checkpoint_of_another_model(tmp_path):
    """CharLMStep exported from a CharLM checkpoint: the names and shapes agree."""
    path = EXAMPLES / "charlm.mdl"
    module = native(path, "charlm_f32")
    lm = module.CharLM(seed=4)
    lm.save(tmp_path / "lm.npz")
    out = export_onnx(path, tmp_path / "step.onnx", model="CharLMStep",
                      params=tmp_path / "lm.npz")
    saved = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(str(out)).graph.initializer}
    for name, value in lm.params.items():
        assert np.array_equal(saved[name], value), name

    with pytest.raises(UsageError, match=r"parameter `lstm/W` has shape \[32, 64\], model "
                       r"`CharLMStep` needs \[32, 1024\]"):
        export_onnx(path, tmp_path / "x.onnx", model="CharLMStep", defines={"H": 256},
                    params={**lm.params, "lstm/W": np.zeros((32, 64), np.float32)})
    with pytest.raises(UsageError, match="has no parameter `decoder/b`"):
        export_onnx(path, tmp_path / "x.onnx", model="CharLMStep",
                    params={k: v for k, v in lm.params.items() if k != "decoder/b"})
    with pytest.raises(UsageError, match="parameter `decoder/b` holds complex64 values, model "
                                         "`CharLMStep` needs real numbers"):
        export_onnx(path, tmp_path / "x.onnx", model="CharLMStep",
                    params={**lm.params, "decoder/b": lm.params["decoder/b"] + 1j})
    # QA: an f64 value past f32's range exported as inf, with NumPy's RuntimeWarning
    # naming mdl's source line; set_params refuses it
    huge = np.array(lm.params["decoder/b"], np.float64)
    huge[2] = -1e300
    with pytest.raises(UsageError, match=re.escape(
            "the given dict: parameter `decoder/b` holds -1e+300 (element 2), past the range "
            "of the export's float32 (its largest number is 3.4e+38)")):
        export_onnx(path, tmp_path / "x.onnx", model="CharLMStep",
                    params={**lm.params, "decoder/b": huge})


def test_an_npz_of_bare_parameter_names_is_no_checkpoint_and_is_told_so(tmp_path):
    """QA: np.savez(**model.params) given as --params said "has no parameter `embedding`
    (...; it has none)", though the file held that very array."""
    path = tmp_path / "plain.npz"
    np.savez(path, embedding=np.zeros((96, 32), np.float32), other=np.zeros(3))
    with pytest.raises(UsageError, match=re.escape(
            f"{path}: not a checkpoint written by `save`: none of its arrays is a "
            "parameter's `param/NAME` (it holds embedding, other); write one with "
            "model.save(path)")):
        export_onnx(EXAMPLES / "charlm.mdl", tmp_path / "x.onnx", model="CharLMStep",
                    params=path)


@pytest.mark.parametrize("argument, message", [
    ({"seed": "1"}, "seed: expected an int, got str '1'"),
    ({"seed": 1.5}, "seed: expected an int, got float 1.5"),
    ({"seed": -1}, "seed: -1 is not a seed (0 to 2**64 - 1)"),
    ({"opset": "19"}, "opset: expected an int, got str '19'"),
    ({"outputs": "loss"}, "outputs: expected a list of output names (None: all of them), "
                          "got 'loss'"),
    ({"outputs": [""]}, "outputs: expected a list of output names (None: all of them), "
                        "got ['']"),
    # once all of them, as if None; the CLI refuses `--outputs ""`
    ({"outputs": []}, "outputs: expected a list of output names (None: all of them), "
                      "got []"),
    ({"specialize": "B=2"}, "specialize: expected a dict {dim name: int size} such as "
                            "{'B': 1}, got 'B=2'"),
    ({"rnn_ops": "no"}, "rnn_ops: expected True or False, got 'no'"),
    ({"params": {3: 1}}, "has no parameter `embedding` (model `CharLMStep` needs it; it has "
                         "3)"),
    ({"params": {"embedding": [1, [2], 3]}}, "the given dict: parameter `embedding` is "
                                             "not an array of numbers"),
])
def test_export_onnx_refuses_arguments_of_the_wrong_kind(tmp_path, argument, message):
    """Once an internal TypeError from deep inside (`seed="1"`), or a wrong message
    (`outputs="loss"` read as the outputs l, o, s)."""
    with pytest.raises(UsageError, match=re.escape(message)):
        export_onnx(EXAMPLES / "charlm.mdl", tmp_path / "x.onnx", model="CharLMStep",
                    **argument)


def test_export_and_verify_take_what_load_takes_and_refuse_the_rest(tmp_path):
    """QA: specialize={"B": np.int64(1)} (which load takes) was refused with a wrong
    message; verify_onnx read runtimes="onnxruntime" as runtimes o, n, n, ...; a file that
    is no ONNX raised protobuf's DecodeError, another model's export onnxruntime's
    "Required inputs ... are missing"."""
    path = EXAMPLES / "charlm.mdl"
    out = export_onnx(path, tmp_path / "b1.onnx", model="CharLMStep",
                      specialize={"B": np.int64(1)})
    inputs = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]
              for i in onnx.load(str(out)).graph.input}
    assert all(dims[0] == 1 for dims in inputs.values()), inputs
    for call, message in [
            (lambda: verify_onnx(path, out, model="CharLMStep", runtimes="onnxruntime"),
             "runtimes: expected a list of runtime names, such as ['onnxruntime'], got "
             "'onnxruntime'"),
            # once [] and a verdict of nothing checked
            (lambda: verify_onnx(path, out, model="CharLMStep", runtimes=[]),
             "runtimes: expected a list of runtime names, such as ['onnxruntime'], got []"),
            (lambda: verify_onnx(path, path, model="CharLMStep"), "not an ONNX file"),
            (lambda: verify_onnx(path, out, model="CharLM"), "is no export of model `CharLM`"),
            # exported at the default H = 256 and f32: the runtimes' own errors, or a
            # TypeError from onnx's evaluator, before these
            (lambda: verify_onnx(path, out, model="CharLMStep", defines={"H": 16}),
             "b1.onnx was exported with other options than these: its input `h` is [1, 256], "
             "the model's f32[B, 16]"),
            (lambda: verify_onnx(path, out, model="CharLMStep", dtype="f64",
                                 runtimes=["onnx-reference"]),
             "its input `h` holds float, the model f64"),
            # QA: a define that changes parameters only (E) gave "onnxruntime: DIFFERS"
            (lambda: verify_onnx(path, out, model="CharLMStep", defines={"E": 8}),
             "b1.onnx was exported with other options than these: its parameter "
             "`embedding` is [96, 32], the model's f32[96, 8]"),
            (lambda: export_onnx(path, None, model="CharLMStep"),
             "out: expected a file's path, got NoneType")]:
        with pytest.raises(UsageError, match=re.escape(message)):
            call()


def test_verify_takes_an_input_declared_f64_in_an_f32_export(tmp_path):
    """An f32 build keeps an input declared `f64` (an f64 build makes every float f64):
    verify called the export of such an input one "with other options" and drew it as
    f32."""
    path = tmp_path / "wide.mdl"
    path.write_text("model Wide() {\n  input x : f32[N]\n  input s : f64\n"
                    "  output y = x * f32(s)\n}\n")
    for dtype in ("f32", "f64"):
        out = export_onnx(path, tmp_path / f"wide_{dtype}.onnx", dtype=dtype)
        verdicts = verify_onnx(path, out, dtype=dtype)
        assert [v.agrees for v in verdicts] == [True], [str(v) for v in verdicts]
    with pytest.raises(UsageError, match=re.escape("its input `x` holds double, the model f32")):
        verify_onnx(path, tmp_path / "wide_f64.onnx")


def test_an_op_without_an_onnx_form_is_an_error_at_its_line(tmp_path, monkeypatch):
    from codegen.ops.entry import entry
    monkeypatch.delitem(entry("tanh").extra, "onnx")
    source = tmp_path / "m.mdl"
    source.write_text("model M() {\n  input x : f32[B, 3]\n  output y = 2.0 * tanh(x)\n}\n")
    with pytest.raises(MdlError) as caught:
        export_onnx(source, tmp_path / "m.onnx")
    text = caught.value.render()
    assert re.match(r".*m\.mdl:3:\d+: error: cannot export `tanh` to ONNX", text)
    assert "output y = 2.0 * tanh(x)" in text and "^" in text
    assert not (tmp_path / "m.onnx").exists()


def test_every_op_declares_its_onnx_rule():
    """Every primitive and structured op has an ONNX form (the error of the test above is
    for ops added without one)."""
    from codegen.ops.entry import OPS
    missing = sorted(name for name, e in OPS.items() if "onnx" not in e.extra)
    assert not missing, missing


def test_mdlc_export(tmp_path, capsys):
    out = tmp_path / "towers.onnx"
    assert mdlc(["export", str(EXAMPLES / "towers.mdl"), "--onnx", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)

    assert mdlc(["export", str(EXAMPLES / "charlm.mdl"), "--onnx", str(out)]) == 2
    assert "defines several models (CharLM, CharLMStep, CharLMSample)" in capsys.readouterr().err
    assert mdlc(["export", str(EXAMPLES / "towers.mdl"), "--onnx", str(out),
                 "--opset", "12"]) == 2
    assert "opset 12 is outside [18, " in capsys.readouterr().err
    assert mdlc(["export", str(EXAMPLES / "towers.mdl"), "--onnx", str(out),
                 "--outputs", "nothing"]) == 2
    assert "has no output nothing" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # it was refused in load()'s words: "(None: ..."
        mdlc(["export", str(EXAMPLES / "towers.mdl"), "--onnx", str(out), "--outputs", ""])
    assert exit_.value.code == 2
    assert "argument --outputs: expected NAME[,NAME...], got ''" in capsys.readouterr().err
    assert mdlc(["export", str(EXAMPLES / "towers.mdl"), "--onnx", str(out),
                 "--params", str(tmp_path / "missing.npz")]) == 2
    assert "no such checkpoint file" in capsys.readouterr().err
    assert mdlc(["export", str(EXAMPLES / "towers.mdl"), "--onnx", str(out),
                 "--params", str(tmp_path)]) == 2
    assert "is a directory, not a checkpoint file" in capsys.readouterr().err


def test_mdlc_export_verify_of_a_runtime_not_installed_writes_nothing(tmp_path, capsys,
                                                                     monkeypatch):
    """QA: --verify openvino without OpenVINO wrote the file, then said what to install
    (an unknown runtime was refused before anything was written)."""
    from codegen.export import verify
    monkeypatch.setitem(verify.RUNTIMES, "openvino", ("no-such-distribution", "OpenVINO"))
    out = tmp_path / "towers.onnx"
    assert mdlc(["export", str(EXAMPLES / "towers.mdl"), "--onnx", str(out),
                 "--verify", "openvino"]) == 2
    assert ("--verify openvino needs the `no-such-distribution` package: pip install "
            "no-such-distribution") in capsys.readouterr().err
    assert not out.exists()


def test_mdlc_export_verify_runs_the_file_against_the_reference(tmp_path, capsys):
    """--verify: the file just written, called three times in turn in each runtime
    named, agrees with mdl's reference; each runtime says so in a line."""
    out = tmp_path / "charlm.onnx"
    runtimes = ["onnxruntime", "onnx-reference"]
    if importlib.util.find_spec("openvino") is not None:
        runtimes.append("openvino")
    assert mdlc(["export", str(EXAMPLES / "charlm.mdl"), "--model", "CharLM", "-D", "H=8",
                 "--onnx", str(out), "--verify", *runtimes]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == str(out) and len(lines) == 1 + len(runtimes)
    for line in lines[1:]:
        assert "agrees with mdl's reference in 3 calls (T=5, B=3; T=2, B=2; T=5, B=3)" in line
    assert mdlc(["export", str(EXAMPLES / "towers.mdl"), "--onnx", str(out), "--verify"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("onnxruntime ")


def test_verify_of_inputs_too_large_for_the_machine_is_a_usage_error(tmp_path, capsys):
    """QA: a MemoryError drawing --verify's inputs was an internal error (exit 3)."""
    path = tmp_path / "big.mdl"
    path.write_text("model Big() {\n  input x : f32[1000000, 1000000]\n"
                    "  output y = sum(x)\n}\n")
    assert mdlc(["export", str(path), "--onnx", str(tmp_path / "big.onnx"), "--verify"]) == 2
    assert ("mdlc: error: --verify's random inputs: the model's inputs and values at these "
            "sizes need more memory than this machine gives") in capsys.readouterr().err


def test_verify_finds_a_file_that_computes_something_else(tmp_path):
    """A file exported from other parameters than those verified against: it differs, and
    the verdict names the output, the sizes and the call."""
    path = EXAMPLES / "towers.mdl"
    out = export_onnx(path, tmp_path / "towers.onnx", seed=0)
    verdict, = verify_onnx(path, out, seed=1)
    assert not verdict.agrees and verdict.error > 1e-3
    assert re.search(r"DIFFERS from mdl's reference: output `\w+` in call \d is ",
                     str(verdict))


def test_a_runtime_that_cannot_run_the_file_fails_its_verdict(tmp_path, capsys):
    """QA: a file onnxruntime refused (f64 Softplus at opset 22, which it has no kernel
    of) made `mdlc export --verify` an internal error, "a bug in mdlc", exit 3; it is
    that runtime's verdict, and exit 1."""
    path = EXAMPLES / "towers.mdl"
    out = export_onnx(path, tmp_path / "towers.onnx")
    model = onnx.load(str(out))
    node = next(n for n in model.graph.node if n.op_type == "MatMul")
    node.op_type, node.domain = "MatMulOfItsOwn", "mdl.qa"
    model.opset_import.append(onnx.helper.make_opsetid("mdl.qa", 1))
    onnx.save(model, str(out))
    verdict, = verify_onnx(path, out)
    assert not verdict.agrees
    assert str(verdict).startswith("onnxruntime: FAILS: it refuses the file: ")
    assert "MatMulOfItsOwn" in str(verdict)


OPENVINO_FAULTS = {  # docs/onnx.md, "OpenVINO on random programs"
    "abs of a parameter's max": ("""
model Fault() {
  input x : f32[B, 2]
  param w : f32[2, 2] = constant(-0.3)
  output y = abs(max(w, axis = 1)) + mean(x)
}
""", r"output `y` in call \d \(B=\d\) is [\d.]+ of its largest value off"),
    "two outputs of one value": ("""
model Fault() {
  input x : f32[B, 2]
  param p : f32 = constant(0.3)
  output o0 = p
  output y = p + 0.0 * mean(x)
  output z = p
}
""", r"output `\w+` in call 1 \(B=3\) is missing"),
}


@pytest.mark.parametrize("fault", list(OPENVINO_FAULTS))
def test_verify_finds_openvinos_faults(tmp_path, capsys, fault):
    """Faults of OpenVINO 2026.4 the export cannot step around: --verify openvino says
    where, and exits 1, while onnxruntime agrees."""
    pytest.importorskip("openvino")
    source, found = OPENVINO_FAULTS[fault]
    path = tmp_path / "fault.mdl"
    path.write_text(source)
    assert mdlc(["export", str(path), "--onnx", str(tmp_path / "a.onnx"),
                 "--verify", "onnxruntime", "openvino"]) == 1
    ort_line, openvino_line = capsys.readouterr().out.splitlines()[1:]
    assert "agrees" in ort_line
    assert openvino_line.startswith("OpenVINO ") and "DIFFERS" in openvino_line
    assert re.search(found, openvino_line), openvino_line


def test_verify_usage_errors(tmp_path, capsys):
    out = tmp_path / "towers.onnx"
    assert mdlc(["export", str(EXAMPLES / "towers.mdl"), "--onnx", str(out),
                 "--verify", "tensorrt"]) == 2
    assert "--verify: no runtime tensorrt (choose from onnxruntime, openvino, " \
        "onnx-reference)" in capsys.readouterr().err
    assert not out.exists()  # refused before writing
    assert mdlc(["export", str(EXAMPLES / "towers.mdl"), "--onnx", str(out), "--dtype", "f64",
                 "--verify", "openvino"]) == 2
    assert "OpenVINO's CPU plugin computes in f32" in capsys.readouterr().err


# ---- the differential fuzzer's programs -------------------------------------------------
FUZZ = [(seed, i, "small") for seed in range(10) for i in range(12)] + [
    (seed, i, "large") for seed in range(2) for i in range(10)]


@pytest.mark.parametrize("seed,index,size", FUZZ)
def test_random_programs_run_in_onnxruntime_like_the_reference(tmp_path, seed, index, size):
    """The fuzzer's random programs (tests/fuzz_generate.py: every construct and
    primitive the language has, loops with lengths, reversed, nested, with ifs and
    whiles) exported in f64 and run by onnxruntime at two sizes, against the reference
    (tests/fuzz_onnx.py runs more, and in other runtimes)."""
    program = generate(seed, index, size)
    failures = run_program(program, tmp_path, "onnxruntime", "f64")
    assert not failures, (failures, module_source([program]))


@pytest.mark.parametrize("seed,index", [(seed, i) for seed in range(4) for i in range(12)])
def test_random_programs_run_in_the_onnx_reference_evaluator_like_the_reference(
        tmp_path, seed, index):
    """The same in onnx's reference evaluator, which reads the spec more strictly than
    onnxruntime (a negative GatherElements axis, more than 64 classes: docs/onnx.md)."""
    program = generate(seed, index, "small")
    failures = run_program(program, tmp_path, "onnx-reference", "f64")
    assert not failures, (failures, module_source([program]))


def test_a_split_into_one_part_runs_in_the_reference_and_onnxruntime(tmp_path):
    """The reference made split(x, 1) a [1, B, 4] (np.split's list of one) and `--verify`
    stopped with an internal error; the native build and onnxruntime were right."""
    path = tmp_path / "one.mdl"
    path.write_text("model M() {\n  input x : f32[B, 4]\n  a = split(x, 1, axis = 1)\n"
                    "  output y = a\n}\n")
    x = np.arange(12.0).reshape(3, 4)
    got = reference.run(check_file(str(path)).graph, {"x": x}, {})["y"]
    np.testing.assert_array_equal(got, x)
    assert mdlc(["export", str(path), "--onnx", str(tmp_path / "one.onnx"), "--verify"]) == 0


def test_verify_with_an_index_computed_past_the_table_is_a_usage_error(tmp_path, capsys):
    """ids drawn within emb's rows, indexing it as ids + 1: it was an internal error."""
    path = tmp_path / "shifted.mdl"
    path.write_text("model M(V = 5) {\n  input ids : i32[B]\n  param emb : f32[V, 2]\n"
                    "  output y = emb[ids + 1]\n}\n")
    assert mdlc(["export", str(path), "--onnx", str(tmp_path / "s.onnx"), "--verify"]) == 2
    assert (f"the random inputs fail the model's check: the index at {path.name}:4:17 computed "
            "from the input `ids` holds 5") in capsys.readouterr().err


@pytest.mark.parametrize("source, message", [
    ("model M() {}", "model `M` has no outputs: an ONNX graph computes at least one"),
    ("model M(H = 24000) {\n  input x : f32[B, H]\n  param w : f32[H, H]\n"
     "  output y = x @ w\n}\n", "model `M`'s parameters take 2.1 GiB, more than the 2 GiB "
     "one ONNX file holds"),
])
def test_a_model_no_onnx_file_can_hold_is_refused(tmp_path, capsys, source, message):
    """No outputs: a file onnxruntime cannot load (and --verify's internal error); weights
    past protobuf's 2 GiB: its EncodeError after a minute and 18 GB of memory."""
    path = tmp_path / "m.mdl"
    path.write_text(source)
    assert mdlc(["export", str(path), "--onnx", str(tmp_path / "m.onnx")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists()


def test_verify_with_inputs_that_fail_an_assert_is_a_usage_error(tmp_path, capsys):
    """It was an internal error (exit 3); gradcheck said what to do, as export now does."""
    path = tmp_path / "checked.mdl"
    path.write_text("model M() {\n  input x : f32[B, 4]\n  assert B > 3\n"
                    "  output z = sum(x)\n}\n")
    assert mdlc(["export", str(path), "--onnx", str(tmp_path / "c.onnx"), "--verify"]) == 2
    assert "the random inputs fail the model's check: assertion `B > 3` is false" in \
        capsys.readouterr().err


def test_a_parameter_named_as_an_input_or_output_keeps_its_own_initializer(tmp_path):
    """`param x` after `input x` (which it shadows) made an initializer `x`, and
    onnxruntime fed the input in its place (60 for 33); `output w` of `param w` was
    refused by ONNX's checker. Such a parameter is `param:NAME` in the file."""
    path = tmp_path / "named.mdl"
    path.write_text("model M() {\n  input x : f32[3]\n  a = sum(x)\n"
                    "  param x : f32[3] = ones\n  output z = a + sum(x)\n}\n"
                    "model W() {\n  input y : f32[3]\n  param w : f32[3] = ones\n"
                    "  output w = y * w\n}\n")
    for model, inputs, want in (("M", {"x": np.full(3, 10.0, np.float32)}, {"z": 33.0}),
                                ("W", {"y": np.full(3, 2.0, np.float32)}, {"w": 2.0})):
        out = tmp_path / f"{model}.onnx"
        export_onnx(str(path), str(out), model=model)
        names = [i.name for i in onnx.load(str(out)).graph.initializer]
        assert names == ["param:" + ("x" if model == "M" else "w")]
        got = ort.InferenceSession(str(out)).run(None, inputs)[0]
        np.testing.assert_allclose(got, next(iter(want.values())))


NOTHING = """
model Unflat(E = 4) {
  input x : f32[T, B, E]
  flat = reshape(x, [T * B, E])
  output y = reshape(2.0 * flat, [T, B, E])
}
model Scan(H = 3) {
  input xs : f32[T, B, H]
  h = zeros[B, H]
  hs = for x in xs { h = tanh(x + h); yield h }
  output hs
  ids = for x in reversed(xs) { yield argmax(x, axis = 1) }
  output ids
}
model Means() {
  input x : f32[B]
  input y : f32[B, 3]
  output m = mean(x)
  output n = mean(y, axis = 0)
  output k = mean(y, axis = 1, keepdims = true)
}
"""


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("model, dims", [("Unflat", {"T": 3, "B": 0}),
                                         ("Scan", {"T": 0, "B": 2}),
                                         ("Means", {"B": 0}), ("Means", {"B": 2})])
def test_a_batch_of_none_and_a_loop_of_no_trips_run_as_in_mdl(tmp_path, runtime, model, dims):
    """Three things that came out wrong at a dim of 0 (QA, 2026-12-03): a Reshape to
    [T * B, E] at B = 0 read its 0 as "the input's dim" (ONNX's default: allowzero); a
    Loop of no trips stacked its yields as [0, 0, 3] for [0, B, 3]; ReduceMean of nothing
    was 0 where mdl's mean of nothing is NaN."""
    if model == "Scan" and runtime == "openvino":
        pytest.skip("OpenVINO 2026.4 still gives [0, 0, 3]: it drops the Reshape after "
                    "the Loop (docs/onnx.md, OpenVINO's faults)")
    path = tmp_path / "nothing.mdl"
    path.write_text(NOTHING)
    graph = check_file(str(path), model=model).graph
    out = export_onnx(path, tmp_path / f"{model}.onnx", model=model)
    run = (lambda inputs: run_onnx(out, inputs)) if runtime == "onnxruntime" \
        else openvino_model(out)
    inputs = inputs_for(graph, dims, 0)
    got = run(inputs)
    want = reference.run(graph, inputs, {}, dtype=np.float32)
    for name in graph.outputs:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)


def test_a_numpy_integer_seed_exports_as_its_int(tmp_path):
    """export_onnx checked a NumPy integer seed and then passed it on as it was: the
    parameters' stream (ops/rng.py's derive) overflowed a C long."""
    a = export_onnx(EXAMPLES / "towers.mdl", tmp_path / "a.onnx", seed=np.int64(3))
    b = export_onnx(EXAMPLES / "towers.mdl", tmp_path / "b.onnx", seed=3)
    assert a.read_bytes() == b.read_bytes()


def test_a_verdict_says_how_an_output_differs():
    from codegen.export.verify import _difference
    same = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert _difference(same, same) == (0.0, "")
    error, how = _difference(same + np.eye(2, 3, dtype=np.int32), same)
    assert error == float("inf")
    assert how == "has other integers than the reference at 2 of its 6 places"
    assert _difference(same[:1], same)[1] == "has shape [1, 3], not [2, 3]"
    error, how = _difference(np.array([1.0, 2.5]), np.array([1.0, 2.0]))
    assert error == 0.25 and how == "is 0.25 of its largest value off"
    assert "NaN or infinity" in _difference(np.array([np.nan]), np.array([1.0]))[1]
