"""`range`, the built-in: its values in every form against Python's range, natively on
both targets and in the reference and ONNX; and sizes that subtract (`range(T - 2)`,
`zeros[T - 30]`, `xs[1:]`) refused where the call's dims make them negative, rather than
laid out in memory (a segmentation fault before)."""
from __future__ import annotations

import numpy as np
import pytest
from source_files import source_file

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
    return source_file(tmp_path_factory, "forms.mdl", FORMS)


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_range_gives_pythons_numbers(forms, target):
    how = dict(target="cuda", emulate=True) if target == "emulated" else {}
    m = load(forms, **how).Forms(seed=0)
    graph = check_file(str(forms)).graph
    for T, B in ((0, 0), (1, 3), (6, 2)):
        xs = np.zeros((T, B), np.float32)
        got, ref = m.forward(xs=xs), reference.run(graph, {"xs": xs}, {})
        for name, want in WANT.items():
            expected = np.asarray(list(want(T, B)) if name != "digits" else want(T, B))
            assert got[name].dtype == np.int32 and ref[name].dtype == np.int32, name
            np.testing.assert_array_equal(got[name], expected.astype(np.int32), err_msg=name)
            np.testing.assert_array_equal(ref[name], expected.astype(np.int32), err_msg=name)


def test_range_exports_to_onnx(forms, tmp_path):
    """A range of a size the call binds is a Range node; one known when compiling, a
    constant."""
    ort = pytest.importorskip("onnxruntime")
    path = export_onnx(forms, tmp_path / "forms.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    xs = np.zeros((5, 2), np.float32)
    for name, got in zip(names, session.run(names, {"xs": xs})):
        want = WANT[name](5, 2)
        np.testing.assert_array_equal(got, np.asarray(list(want) if name != "digits"
                                                      else want, np.int32), err_msg=name)


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
        with pytest.raises(ValueError, match=rf"\(T = {T}\) make the size {size} of this "
                                             rf"model's values {value}: a size cannot be "
                                             "negative"):
            m.forward(xs=xs)
        with pytest.raises(ValueError, match=rf"make the size {size} "):
            reference.run(graph, {"xs": xs}, {})
    assert m.forward(xs=np.ones((3, 3), np.float32))["y"] == 6  # the model still runs
