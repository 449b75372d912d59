"""Vector-Jacobian products (autodiff.vjp_graph, `load(..., vjp=True)`): the backward
takes a cotangent per float output. The reference's vjp against the minimized gradient
(cotangent 1 for the loss, 0 elsewhere) and against central differences; native vjps
against the reference on random cotangents (f64, 1e-10) for loops with lengths, reversed
loops, `if` and `while`, a model without `minimize` and a specialization; the speed
passes on the vjp graph; the bad calls."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from ir_helpers import model, random_params, rel_error, rnn_model

from codegen import cli
from codegen.ir.graph import walk_ops
from codegen.ops.rng import derive
from codegen.ops.verify import verify
from codegen.compile import index
from codegen.pipeline import BuildOptions, differentiate, load
from codegen.reference import gradcheck, interpreter as reference
from codegen.transforms.autodiff import GradientError, cotangent_names, vjp_graph
from codegen.transforms.passes import optimize
from dsl import check_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DIMS = {"T": 5, "B": 3}
SMALL = {"charlm.mdl": {"H": 16}}
MINIMIZING = [(f, m) for f in ("charlm.mdl", "bidirectional.mdl", "control.mdl", "towers.mdl")
              for m in re.findall(r"^model (\w+)", (EXAMPLES / f).read_text(), re.M)
              if check_file(str(EXAMPLES / f), model=m).graph.loss is not None]
NATIVE = [("charlm.mdl", "CharLM"), ("charlm.mdl", "CharLMStep"),
          ("bidirectional.mdl", "BiTagger"), ("control.mdl", "Adaptive")]


def graph_of(file: str, name: str):
    return check_file(str(EXAMPLES / file), model=name, dtype="f64",
                      defines=SMALL.get(file, {})).graph


def random_cotangents(outputs: dict, names: list[str], seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(np.shape(outputs[k])) for k in names}


def case(graph, seed: int = 1, dims: dict | None = None):
    """Random inputs (integers valid for their use) and parameters near their inits."""
    inputs = gradcheck.random_inputs(graph, dims or DIMS, np.random.default_rng(seed))
    return inputs, random_params(graph, seed, scale=0.1)


@pytest.mark.parametrize("file, name", MINIMIZING)
def test_the_loss_cotangent_alone_gives_the_minimized_gradient(file, name):
    graph = graph_of(file, name)
    inputs, params = case(graph)
    outputs = reference.run(graph, inputs, params)
    cts = {k: np.full(np.shape(outputs[k]), float(k == graph.loss))
           for k in cotangent_names(graph)}
    got = reference.gradients(graph, inputs, params, cotangents=cts)
    want = reference.gradients(graph, inputs, params)
    for kind in ("params", "inputs"):
        for k, g in getattr(want, kind).items():
            np.testing.assert_allclose(getattr(got, kind)[k], g, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("file, name", [("charlm.mdl", "CharLMStep"),
                                        ("bidirectional.mdl", "BiTagger")])
def test_the_reference_vjp_matches_central_differences(file, name):
    """<vjp(ct), u> = d/de sum(ct * outputs(p + e u)) along random directions u of every
    parameter and float input at once."""
    graph = graph_of(file, name)
    inputs, params = case(graph)
    names = cotangent_names(graph)
    cts = random_cotangents(reference.run(graph, inputs, params), names, 2)
    vjp = reference.gradients(graph, inputs, params, cotangents=cts)
    rng = np.random.default_rng(3)
    floats = [k for k in inputs if inputs[k].dtype.kind == "f"]
    for _ in range(2):
        dp = {k: rng.normal(size=v.shape) for k, v in params.items()}
        di = {k: rng.normal(size=inputs[k].shape) for k in floats}
        analytic = sum(np.sum(vjp.params[k] * d) for k, d in dp.items()) + \
            sum(np.sum(vjp.inputs[k] * d) for k, d in di.items())

        def moved(step: float) -> float:
            p = {k: v + step * dp[k] for k, v in params.items()}
            i = {k: v + step * di[k] if k in di else v for k, v in inputs.items()}
            out = reference.run(graph, i, p)
            return sum(float(np.sum(cts[k] * out[k])) for k in names)
        numeric = (moved(1e-6) - moved(-1e-6)) / 2e-6
        assert abs(analytic - numeric) <= 1e-7 * max(abs(analytic), abs(numeric))


def test_the_vjp_graph_verifies_after_every_pass_and_is_time_batched():
    """The speed passes run on it too: the LSTM's weight gradients are products after
    the backward loop, which carries only dh and dc."""
    joint = vjp_graph(model(rnn_model("lstm(x, h, c)", "(lengths = lengths)")))
    verify(joint)
    optimize(joint, verify)
    assert [v.hint for v in joint.backward.args] == ["d_loss"]
    (back,) = [op for op in walk_ops(joint.backward) if op.prim == "for"]
    assert back.attrs["n_state"] == 2
    for name in ("lstm/W", "lstm/U", "lstm/b"):
        assert joint.param_grads[name] not in back.outputs


def test_a_model_without_float_outputs_has_no_vjp():
    graph = model("model M() { input n : i32[B]\n output m = n + 1 }")
    with pytest.raises(GradientError, match="no float output"):
        vjp_graph(graph)


_BUILT: dict = {}


def native(file: str):
    """The vjp build (f64) of an example file; charlm's with a specialization for DIMS."""
    if file not in _BUILT:
        special = [DIMS] if file == "charlm.mdl" else []
        _BUILT[file] = load(EXAMPLES / file, dtype="f64", defines=SMALL.get(file, {}),
                            specialize=special, vjp=True, name=f"{Path(file).stem}_f64_vjp")
    return _BUILT[file]


def assert_vjp_matches_the_reference(m, graph, inputs: dict, seed: int) -> None:
    params = {k: np.array(v) for k, v in m.params.items()}
    calls = m.rng_calls
    out = m.forward(**inputs, training=True)
    cts = random_cotangents(out, m.cotangents, seed)
    got = m.backward(**cts)
    want = reference.gradients(graph, inputs, params, training=True,
                               seed=derive(seed, calls + 1), cotangents=cts)
    for k in graph.outputs:
        assert rel_error(out[k], want.outputs[k]) < 1e-10, k
    expected = {**want.params, **{f"input:{k}": v for k, v in want.inputs.items()}}
    assert set(got) == set(expected)
    for k, g in got.items():
        assert rel_error(g, expected[k]) < 1e-10, k


@pytest.mark.parametrize("file, name", NATIVE, ids=[f"{f}:{m}" for f, m in NATIVE])
def test_native_vjps_match_the_reference(file, name):
    graph = graph_of(file, name)
    m = getattr(native(file), name)(seed=4)
    assert m.cotangents == cotangent_names(graph)
    assert_vjp_matches_the_reference(m, graph, case(graph, seed=5)[0], seed=4)


def test_specialized_and_generic_vjps_both_match():
    graph = graph_of("charlm.mdl", "CharLM")
    m = native("charlm.mdl").CharLM(seed=0)
    assert m.specializations == [DIMS]
    for dims in (DIMS, {"T": 4, "B": 2}):  # the first runs the specialization
        assert_vjp_matches_the_reference(m, graph, case(graph, 6, dims)[0], seed=0)


@pytest.fixture(scope="module")
def step():
    """CharLMStep's vjp build after a training forward, and its float outputs."""
    graph = graph_of("charlm.mdl", "CharLMStep")
    m = native("charlm.mdl").CharLMStep(seed=0)
    out = m.forward(**case(graph)[0], training=True)
    return m, {k: np.ones_like(out[k]) for k in m.cotangents}


BAD_COTANGENTS = [
    (lambda c: {k: v for k, v in c.items() if k != "h_out"}, TypeError,
     "missing cotangent 'h_out' (backward() takes one per float output: logits, h_out, c_out)"),
    (lambda c: {**c, "h": c["h_out"]}, TypeError, "unknown cotangent 'h'"),
    (lambda c: {**c, "logits": c["logits"][:2]}, ValueError,
     "cotangent 'logits': expected f64[3, 96] (output 'logits' of the last training "
     "forward), got float64[2, 96] (wrong shape)"),
    (lambda c: {**c, "c_out": c["c_out"].astype(np.float32)}, ValueError,
     "cotangent 'c_out': expected f64[3, 16] (output 'c_out' of the last training "
     "forward), got float32[3, 16] (wrong dtype)"),
    # QA: it said "got object[] (wrong dtype)", where an input of None says None
    (lambda c: {**c, "h_out": None}, TypeError, "cotangent 'h_out': expected f64 (output "
     "'h_out'), got None"),
    # QA: "got object[3, 16] (wrong dtype)", of an int NumPy reads as an object
    (lambda c: {**c, "h_out": [[0] * 15 + [10**400]] * 3}, ValueError, "cotangent 'h_out': "
     "holds 1e+400 (element 15), past the range of the model's f64"),
    # QA: read as 1.0, where a bool array is refused
    (lambda c: {**c, "h_out": [[0.0] * 16] * 2 + [[True] + [0.0] * 15]}, ValueError,
     "cotangent 'h_out': holds a bool (element 32), not an f64 (wrong dtype)"),
]


@pytest.mark.parametrize("change, error, message", BAD_COTANGENTS)
def test_bad_cotangents_raise_naming_them(step, change, error, message):
    m, cts = step
    with pytest.raises(error) as info:
        m.backward(**change(cts))
    assert message in str(info.value)


def test_cotangents_may_be_strided_or_dlpack(step):
    m, cts = step
    want = m.backward(**cts)
    wide = np.ones((3, 2 * 16))[:, ::2]  # a strided view: copied by the runtime
    torch = pytest.importorskip("torch", reason="torch is not installed")
    got = m.backward(**{**cts, "h_out": wide, "logits": torch.ones(3, 96, dtype=torch.float64)})
    for k, g in want.items():
        np.testing.assert_array_equal(got[k], g)


def test_a_vjp_build_does_not_train_natively(step):
    m, _ = step
    with pytest.raises(RuntimeError, match="set_optimizer\\(\\): model CharLMStep was built "
                       "with vjp: its backward takes cotangents"):
        m.set_optimizer("sgd", lr=0.1)
    assert m.optimizer is None
    with pytest.raises(RuntimeError, match="built with vjp: its backward takes cotangents"):
        m.train_step(token=np.zeros(3, np.int32), h=np.zeros((3, 16)), c=np.zeros((3, 16)))
    fresh = native("charlm.mdl").CharLMStep(seed=0)
    with pytest.raises(RuntimeError, match="needs a forward"):
        fresh.backward(**{k: np.zeros(1) for k in fresh.cotangents})


def test_an_ordinary_build_takes_no_cotangents(tmp_path):
    path = tmp_path / "tiny.mdl"
    path.write_text("model Tiny() { input x : f32[B]\n param w : f32[] = ones\n"
                    "output y = w * x\n output loss = sum(y * y)\n minimize loss }")
    m = load(path, dtype="f64").Tiny()
    assert m.cotangents == [] and m.inputs == {"x": "f64[B]"}
    m.forward(x=np.ones(2), training=True)
    assert m.backward()["w"] == pytest.approx(4.0)
    with pytest.raises(TypeError, match="takes no cotangents: it was built without vjp"):
        m.backward(loss=np.ones(()))
    v = load(path, dtype="f64", vjp=True).Tiny()
    v.forward(x=np.ones(2), training=True)
    assert v.backward(y=np.ones(2), loss=np.zeros(()))["w"] == pytest.approx(2.0)


def test_vjp_is_part_of_the_build_and_its_cache_key(monkeypatch, capsys, tmp_path):
    path = EXAMPLES / "charlm.mdl"
    assert index._entry(path, "m", BuildOptions(vjp=True)) != index._entry(path, "m", BuildOptions())
    seen = []
    built = tmp_path / "entry" / "charlm.so"  # what the build made, which `reading` locks
    built.parent.mkdir()
    built.touch()

    def build(f, n, options, **kwargs):
        seen.append(options)
        return built
    monkeypatch.setattr("codegen.pipeline.build", build)
    monkeypatch.setattr("codegen.compile.index.lookup", lambda *args: None)
    monkeypatch.setattr("codegen.compile.extension.install", lambda *args: "built")
    assert cli.main(["build", str(path), "--vjp"]) == 0
    assert seen[0].vjp
    assert cli.main(["emit", "--ir", "--vjp", str(path), "--model", "CharLMStep"]) == 0
    assert "backward(%d_logits" in capsys.readouterr().out


def test_differentiate_builds_either_joint_graph():
    graph = graph_of("charlm.mdl", "CharLM")
    assert differentiate(graph).backward.args == []
    assert [v.hint for v in differentiate(graph, vjp=True).backward.args] == ["d_logits",
                                                                             "d_loss"]
