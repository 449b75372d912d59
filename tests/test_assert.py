"""`assert`: a model's checks of a call's data. The reference interpreter and generated
modules (CPU and the emulated device) raise the same ValueError, before the statements
after the assert run; the passes keep an assert nothing reads; any message reaches C++
as a literal that means exactly it; random inputs (gradcheck, profile, export --verify)
are drawn to pass what asserts compare inputs with; symbolic dims are values."""
from __future__ import annotations

import numpy as np
import pytest
from source_files import source_file

from codegen.cli import main as mdlc
from codegen.export import export_onnx
from codegen.ir.graph import walk_ops
from codegen.pipeline import differentiate, for_backends
from codegen.reference import gradcheck
from codegen.reference import interpreter as reference
from dsl import check_file
from dsl.parser import parse
from dsl.printer import expr_text
from test_cuda_emulated import on_both_targets

# docs/language.md's example, with a message of every kind of character C++ could misread
MESSAGE = 'ids must index the rows of x \\ ??= ?? \t é ∑ %s %d'
SOURCE = """
def pick(x : f32[R, N], ids : i32[K]) -> f32[K, N] {
  assert ids >= 0 and ids < R, "MESSAGE"
  return x[ids]
}
model Picked(N = 4) {
  input x : f32[R, N]
  input ids : i32[K]
  input scale : f32
  assert scale > 0.0
  n = R                                   # a symbolic dim is a value: i32, R's size
  output y = sum(pick(x, ids)) * scale / f32(n)
  minimize y
}
""".replace("MESSAGE", MESSAGE)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "picked.mdl", SOURCE)


@pytest.fixture(scope="module")
def modules(path):
    return on_both_targets(path, "picked", dtype="f64")


def call(ids=(0, 2), scale=0.5):
    return dict(x=np.arange(20.0).reshape(5, 4), ids=np.array(ids, np.int32),
                scale=np.array(scale))


PICK = f"pick: {MESSAGE}: `ids >= 0 and ids < R` is false (computed from the input `ids`)"
SCALE = "assertion `scale > 0.0` is false (computed from the input `scale`)"
CASES = [(dict(ids=(0, 5)), PICK + " at flat position 1"),
         (dict(ids=(-1, 2, 9)), PICK + " at flat position 0"),
         (dict(ids=(0,), scale=0.0), SCALE),     # one element: no position
         (dict(ids=(9,), scale=-1.0), SCALE)]    # the first assert to fail is the one said


@pytest.mark.parametrize("bad, message", CASES)
def test_every_run_says_the_same(path, modules, bad, message):
    graph = check_file(str(path), dtype="f64").graph
    with pytest.raises(ValueError) as caught:
        reference.run(graph, call(**bad), {})
    assert str(caught.value) == message
    for target, module in modules.items():
        m = module.Picked(seed=0)
        m.set_optimizer("sgd", lr=0.1)
        for run in (m.forward, m.train_step):
            with pytest.raises(ValueError) as caught:
                run(**call(**bad))
            assert str(caught.value) == message, target  # the assert, not the gather
        assert np.isfinite(m.train_step(**call())["y"])  # the model goes on working


def test_a_passing_call_is_the_reference(path, modules):
    graph = check_file(str(path), dtype="f64").graph
    want = reference.run(graph, call(), {})["y"]
    assert want == pytest.approx((sum(range(0, 4)) + sum(range(8, 12))) * 0.5 / 5)
    for module in modules.values():
        assert module.Picked(seed=0).forward(**call())["y"] == pytest.approx(want, rel=1e-14)


def test_the_passes_keep_an_assert_nothing_reads(path):
    graph = check_file(str(path), dtype="f64").graph
    for g in (for_backends(graph), differentiate(graph)):
        found = [op for op in walk_ops(g.body) if op.prim == "assert"]
        assert len(found) == 2
        assert not [op for op in walk_ops(g.backward) if op.prim == "assert"]


def test_random_inputs_pass_the_asserts(path):
    """gradcheck draws ids within [0, R) and scale above 0 from the asserts alone (the
    gather bounds ids too); labels that must not be the blank are drawn without it."""
    graph = check_file(str(path), dtype="f64").graph
    for seed in range(20):
        inputs = gradcheck.random_inputs(graph, {"R": 3, "K": 6}, np.random.default_rng(seed))
        assert inputs["scale"] > 0 and inputs["scale"].shape == ()
        reference.run(graph, inputs, {})
    assert mdlc(["gradcheck", str(path), "--dims", "R=3,K=4"]) == 0


def test_random_ints_keep_relations_with_numbers(tmp_path):
    source = tmp_path / "ints.mdl"
    source.write_text("""
model Ints() {
  input a : i32[K]
  input b : i32[K]
  input c : i32[K]
  assert a >= 3 and 7 > a and a != 4
  assert b < -2 or sum(f32(b)) > 1e9
  assert c == 2
  output y = sum(a) + sum(b) + sum(c)
}""")
    graph = check_file(str(source)).graph
    for seed in range(10):
        got = gradcheck.random_inputs(graph, {"K": 50}, np.random.default_rng(seed))
        assert set(got["a"]) <= {3, 5, 6} and set(got["c"]) == {2}
        assert np.all(got["b"] < -2) and np.all(got["b"] >= -7)
        reference.run(graph, got, {})


def test_gradcheck_says_when_random_inputs_cannot_pass(tmp_path, capsys):
    source = tmp_path / "sums.mdl"
    source.write_text("""
model Sums() {
  input x : f32[K]
  assert sum(x) > 1e9, "the total must be large"
  output loss = sum(x * x)
  minimize loss
}""")
    assert mdlc(["gradcheck", str(source)]) == 2
    err = capsys.readouterr().err
    assert "the random inputs fail the model's check: the total must be large" in err
    # it told the user to give inputs with mdlc profile --inputs, which gradcheck cannot take
    assert err.rstrip().endswith("for a check or an index of another form, write it in one "
                                 "of those forms: mdlc gradcheck draws every input itself")


def test_onnx_does_not_check(path, tmp_path):
    """ONNX has no operator that raises: the exported model runs every call."""
    ort = pytest.importorskip("onnxruntime")
    out = export_onnx(path, tmp_path / "picked.onnx", dtype="f64")
    session = ort.InferenceSession(str(out))
    good = session.run(None, call())[0]
    graph = check_file(str(path), dtype="f64").graph
    assert good == pytest.approx(reference.run(graph, call(), {})["y"], rel=1e-14)
    session.run(None, call(scale=-1.0))  # no check: runs


@pytest.mark.parametrize("text", ["(x or y) and z", "x or y and z", "a - (b - c)",
                                  "a - b - c", "-x ** 2", "(-x) ** 2", "x ** y ** z",
                                  "(x ** y) ** z", "not (a and b)", "(a < b) == c",
                                  "(a + b)[0]", "-x[1] * (y + 2) // 3", "not counted or c"])
def test_conditions_print_as_they_parse(text):
    """An assert's message shows its condition: parentheses where precedence needs them,
    none where it does not, and the text parses back to the same expression."""
    def parsed(t):
        model = parse(f"model M() {{ v = {t} }}").models[0]
        return model.body.stmts[0].value
    assert expr_text(parsed(text)) == text
    assert expr_text(parsed(expr_text(parsed(text)))) == text


DIMS_AS_VALUES = """
model Dims() {
  input xs : f32[T, B]
  if T > 2 { y = sum(xs[0:2]) } else { y = sum(xs) }
  output z = y * f32(T * B)
  output last = xs[T - 1]
}
"""


def test_symbolic_dims_are_values(tmp_path):
    """A dim in an expression is its size in the call: a runtime `if` on it, arithmetic,
    an index; on both targets as in the reference."""
    path = tmp_path / "dims.mdl"
    path.write_text(DIMS_AS_VALUES)
    graph = check_file(str(path), dtype="f64").graph
    builds = [module.Dims() for module in on_both_targets(path, "dims", dtype="f64").values()]
    for steps in (1, 2, 3, 4):
        xs = np.arange(steps * 2.0).reshape(steps, 2)
        first = xs[:2].sum() if steps > 2 else xs.sum()
        want = reference.run(graph, {"xs": xs}, {})
        assert want["z"] == first * steps * 2 and np.array_equal(want["last"], xs[-1])
        for m in builds:
            got = m.forward(xs=xs)
            assert got["z"] == want["z"] and np.array_equal(got["last"], want["last"])


def test_the_docstring_lists_the_checks(modules):
    doc = modules["cpu"].Picked.__doc__
    assert "A call whose data fails a check raises ValueError:\n" \
           "    assertion `scale > 0.0`\n" \
           f"    pick: {MESSAGE}: `ids >= 0 and ids < R`\n" in doc
