"""`range`, the built-in: its values in every form against Python's range, natively on
both targets and in the reference and ONNX (`range(start, stop)` of sizes the call binds
too); and sizes that subtract (`range(T - 2)`, `range(1, T)`,
`zeros[T - 30]`, `xs[1:]`) refused where the call's dims make them negative, rather than
laid out in memory (a segmentation fault before)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from source_files import source_file

from codegen import MdlWarning
from codegen.export import export_onnx
from codegen.pipeline import load
from codegen.reference import interpreter as reference
from dsl import check_file

FORMS = """
model Forms(K = 4) {
  input xs : f32[T, B]
  output counts = range(T)
  output rows = range(2 * B + 1)
  output four = range(K)
  output steps = range(2, 11, 3)
  output down = range(5, -1, -2)
  output none = range(3, 1)
  output shifted = range(T) + 7
  s = 0
  for t in reversed(range(T)) { s = s * 10 + t }
  output digits = s
}
"""
WANT = {"counts": lambda T, B: range(T), "rows": lambda T, B: range(2 * B + 1),
        "four": lambda T, B: range(4), "steps": lambda T, B: range(2, 11, 3),
        "down": lambda T, B: range(5, -1, -2), "none": lambda T, B: range(3, 1),
        "shifted": lambda T, B: range(7, T + 7),
        "digits": lambda T, B: int("".join(map(str, reversed(range(T)))) or 0)}

# range(start, stop) of dims the call binds: stop - start values (T >= 1 here)
STARTS = """
model Starts() {
  input xs : f32[T, B]
  output from_one = range(1, T)
  output around = range(-2, T)
  output upper = range(B, 2 * B + 3)
  output between = range(B, T + B)
  s = 0
  for t in range(1, T) { s = s * 10 + t }
  output digits = s
  r = 0
  for t in reversed(range(1, T + 1)) { r = r * 10 + t }
  output down = r
}
"""
WANT_STARTS = {"from_one": lambda T, B: range(1, T), "around": lambda T, B: range(-2, T),
               "upper": lambda T, B: range(B, 2 * B + 3),
               "between": lambda T, B: range(B, T + B),
               "digits": lambda T, B: int("".join(map(str, range(1, T))) or 0),
               "down": lambda T, B: int("".join(map(str, reversed(range(1, T + 1)))))}

NEGATIVE = """
model Shorter() {
  input xs : f32[T, 3]
  s = 0
  for t in range(T - 2) { s = s + t }
  output y = sum(xs[1:]) + f32(s)
}
"""


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    return source_file(tmp_path_factory, "forms.mdl", FORMS + STARTS)


def as_array(value) -> np.ndarray:
    return np.asarray(list(value) if isinstance(value, range) else value).astype(np.int32)


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_range_gives_pythons_numbers(forms, target):
    how = dict(target="cuda", emulate=True) if target == "emulated" else {}
    with warnings.catch_warnings(record=True) as caught:  # xs gives T and B: it is used
        warnings.simplefilter("always", MdlWarning)
        module = load(forms, **how)
    assert not [w for w in caught if "xs" in str(w.message)]
    for model, want, cases in (("Forms", WANT, ((0, 0), (1, 3), (6, 2))),
                               ("Starts", WANT_STARTS, ((1, 0), (1, 3), (6, 2)))):
        m = getattr(module, model)(seed=0)
        graph = check_file(str(forms), model=model).graph
        for T, B in cases:
            xs = np.zeros((T, B), np.float32)
            got, ref = m.forward(xs=xs), reference.run(graph, {"xs": xs}, {})
            for name, values in want.items():
                expected = as_array(values(T, B))
                assert got[name].dtype == np.int32 and ref[name].dtype == np.int32, name
                np.testing.assert_array_equal(got[name], expected, err_msg=name)
                np.testing.assert_array_equal(ref[name], expected, err_msg=name)
    # range(1, T) at T = 0 would be -1 values: refused, as xs[1:] is (Python's is empty)
    xs = np.zeros((0, 2), np.float32)
    with pytest.raises(ValueError, match=r"\(T = 0, B = 2\) make T - 1, the size of a value at "):
        module.Starts(seed=0).forward(xs=xs)
    with pytest.raises(ValueError, match=r"make T - 1, the size "):
        reference.run(check_file(str(forms), model="Starts").graph, {"xs": xs}, {})


def test_range_exports_to_onnx(forms, tmp_path):
    """A range of a size the call binds is a Range node; one known when compiling, a
    constant."""
    ort = pytest.importorskip("onnxruntime")
    for model, want in (("Forms", WANT), ("Starts", WANT_STARTS)):
        path = export_onnx(forms, tmp_path / f"{model}.onnx", model=model)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        xs = np.zeros((5, 2), np.float32)
        for name, got in zip(names, session.run(names, {"xs": xs})):
            np.testing.assert_array_equal(got, as_array(want[name](5, 2)), err_msg=name)


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_a_size_the_dims_make_negative_is_refused(tmp_path, target):
    path = tmp_path / "shorter.mdl"
    path.write_text(NEGATIVE)
    how = dict(target="cuda", emulate=True) if target == "emulated" else {}
    m = load(path, **how).Shorter(seed=0)
    graph = check_file(str(path)).graph
    assert m.forward(xs=np.ones((4, 3), np.float32))["y"] == 9 + 1
    assert m.forward(xs=np.ones((2, 3), np.float32))["y"] == 3
    for T, size, value in ((1, "T - 2", -1), (0, "T - 1", -1)):
        xs = np.ones((T, 3), np.float32)
        with pytest.raises(ValueError, match=rf"\(T = {T}\) make {size}, the size of a "
                                             rf"value at shorter.mdl:\d+:\d+, {value}: a "
                                             "size cannot be negative"):
            m.forward(xs=xs)
        with pytest.raises(ValueError, match=rf"make {size}, the size "):
            reference.run(graph, {"xs": xs}, {})
    assert m.forward(xs=np.ones((3, 3), np.float32))["y"] == 6  # the model still runs


BATCHED = """
model Batched(H = 3) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  for t in range(1, T) { h = tanh(xs[t - 1] @ W + h) }
  output loss = sum(h * h)
  minimize loss
}
"""


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_a_module_words_a_refusal_as_the_reference_does(tmp_path, target):
    """The passes batch `xs[t - 1] @ W` over the steps, whose rows B*T - B the dims make
    negative too: a module refused T = 0 naming that size, where the reference names the
    source's T - 1. The checked graph's sizes are now checked first."""
    path = tmp_path / "batched.mdl"
    path.write_text(BATCHED)
    how = dict(target="cuda", emulate=True) if target == "emulated" else {}
    m = load(path, name=f"batched_{target}", **how).Batched(seed=0)
    graph = check_file(str(path)).graph
    xs = np.zeros((0, 2, 3), np.float32)
    said = r"\(T = 0, B = 2\) make T - 1, the size of a value at batched.mdl:6:12, -1"
    for training in (False, True):
        with pytest.raises(ValueError, match=said):
            m.forward(xs=xs, training=training)
    with pytest.raises(ValueError, match=said):
        reference.run(graph, {"xs": xs}, reference.init_params(graph))
