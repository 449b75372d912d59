"""Slices whose bounds depend on the call's dims stay inside their axis: `x[:, 5]` of an
axis of length B, or `y[0:B]` of an axis of length T, once read memory before or after
the input (and the backward wrote the gradient there) when the call's dims put them
outside. A call whose dims do is refused before anything runs (where the slice runs, for
one in a branch or a loop's body), with the same words on the reference, the cpu target
and the emulated device; bounds outside for any dims are errors at check."""
from __future__ import annotations

import re

import numpy as np
import pytest

from codegen.ir.diagnostics import MdlTypeError
from codegen.pipeline import load
from codegen.reference import interpreter as reference
from dsl import check_file
from source_files import built_for

SLICES = """
model Column() {
  input x : f32[B, 4]
  output b = transpose(x)[:, 5]
}
model Window() {
  input y : f32[T, 4]
  input z : f32[B]
  param w : f32[4] = ones
  output a = sum(y[0:B] * w) + sum(z)
  minimize a
}
"""
COLUMN = ("the inputs' dims (B = 3) make B - 6, what the slice 5:6 leaves of axis 1 of "
          "f32[4, B] after its end, -3: a slice ends inside its axis")
WINDOW = ("the inputs' dims (T = 2, B = 3) make T - B, what the slice 0:B leaves of axis 0 "
          "of f32[T, 4] after its end, -1: a slice ends inside its axis")


@pytest.fixture(scope="module")
def slices(tmp_path_factory):
    path = tmp_path_factory.mktemp("slices") / "slices.mdl"
    path.write_text(SLICES)
    return path


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_dims_that_put_a_slice_outside_its_axis_are_refused(slices, target):
    module = built_for(slices, target, name=f"slice_bounds_{target}")
    column = module.Column()
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    np.testing.assert_array_equal(column.forward(x=x)["b"], x[5])
    with pytest.raises(ValueError, match=re.escape(COLUMN)):
        column.forward(x=x[:3])
    window = module.Window()
    window.set_optimizer("sgd", lr=0.1)
    with pytest.raises(ValueError, match=re.escape(WINDOW)):
        window.train_step(y=np.ones((2, 4), np.float32), z=np.ones(3, np.float32))
    before = window.params["w"].copy()
    window.train_step(y=np.ones((4, 4), np.float32), z=np.ones(3, np.float32))
    np.testing.assert_allclose(window.params["w"], before - 0.1 * 3)


def test_the_reference_refuses_them_alike(slices):
    column = check_file(str(slices), model="Column").graph
    with pytest.raises(ValueError, match=re.escape(COLUMN)):
        reference.run(column, {"x": np.zeros((3, 4))}, {})
    window = check_file(str(slices), model="Window").graph
    with pytest.raises(ValueError, match=re.escape(WINDOW)):
        reference.run(window, {"y": np.zeros((2, 4)), "z": np.zeros(3)}, {"w": np.ones(4)})


def test_a_slice_in_a_branch_the_dims_keep_from_running_is_not_refused(tmp_path):
    """`if T > 2 { y = sum(xs[0:2]) }` at T = 1: the branch does not run, and the call
    is not refused (only what every call runs is checked before it; see the docs)."""
    path = tmp_path / "branch.mdl"
    path.write_text("model M() {\n  input xs : f32[T, B]\n"
                    "  if T > 2 { y = sum(xs[0:2]) } else { y = sum(xs) }\n"
                    "  output z = y\n}\n")
    graph = check_file(str(path)).graph
    xs = np.ones((1, 2))
    assert reference.run(graph, {"xs": xs}, {})["z"] == 2
    assert built_for(path, "cpu", name="slice_in_branch").M().forward(
        xs=xs.astype(np.float32))["z"] == 2


BLOCKS = """
model InBranch() {
  input x : f32[B, N]
  param w : f32[1] = ones
  y = x[:, 0] * w
  if sum(x) > -1000000.0 { y = x[:, 5] * w }
  output loss = sum(y * y)
  minimize loss
}
model InLoop() {
  input xs : f32[T, B]
  input x : f32[B, N]
  param w : f32[1] = ones
  h = zeros[B]
  for s in xs { h = h + s + x[:, 5] * w }
  output loss = sum(h * h)
  minimize loss
}
"""
IN_BLOCK = ("the inputs' dims ({dims}) make N - 6, what the slice 5:6 leaves of axis 1 of "
            "f32[B, N] after its end, -3: a slice ends inside its axis")


@pytest.mark.parametrize("target", ["reference", "cpu", "emulated"])
def test_a_slice_in_a_branch_or_a_loop_is_refused_where_it_runs(tmp_path_factory, target):
    """The check before the call leaves out a slice in a block (its branch may not run);
    there the cpu target read and wrote outside the operand (garbage, a heap write in the
    backward), and the emulated device faulted. It is refused where it runs, with the
    words the same slice outside any block has, on every target; a loop of no steps, or
    dims that fit, run."""
    path = tmp_path_factory.mktemp("blocks") / "blocks.mdl"
    path.write_text(BLOCKS)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    xs = np.ones((4, 2), np.float32)
    if target == "reference":
        def call(model, **inputs):
            graph = check_file(str(path), model=model).graph
            return reference.run(graph, inputs, {"w": np.ones(1)}, training=True)
    else:
        module = built_for(path, target, name=f"slice_blocks_{target}")
        models = {}

        def call(model, **inputs):
            m = models.setdefault(model, getattr(module, model)())
            out = m.forward(**inputs, training=True)
            m.backward()
            return out
    with pytest.raises(ValueError, match=re.escape(IN_BLOCK.format(dims="B = 2, N = 3"))):
        call("InBranch", x=x)
    with pytest.raises(ValueError,
                       match=re.escape(IN_BLOCK.format(dims="T = 4, B = 2, N = 3"))):
        call("InLoop", xs=xs, x=x)
    assert call("InLoop", xs=xs[:0], x=x)["loss"] == 0  # no step: nothing refused
    wide = np.ones((2, 6), np.float32)
    assert float(call("InBranch", x=wide)["loss"]) == 2.0
    assert float(call("InLoop", xs=xs, x=wide)["loss"]) == 2 * 8.0 ** 2


@pytest.mark.parametrize("body, message", [
    ("output a = x[1:B+1]", "slice 1:B + 1 is out of range for axis 0 of f32[B, 4]"),
    ("output a = x[B:2*B]", "slice B:2*B is out of range for axis 0 of f32[B, 4]"),
    ("output a = x[-B:]", "a bound that is never positive (-B) would count from the end, "
                          "as only a constant one does"),
    # indices of dims only: they passed, and every call raised the IndexError
    ("output a = x[B]", "index B is out of range for f32[B, 4]: its first axis has "
                        "length B, indices 0 to B - 1"),
    ("output a = x[B, 1:3]", "index B is out of range for f32[B, 4]"),
    ("output a = x[2 * B - 1]", "index 2*B - 1 is out of range for f32[B, 4]"),
    # an index of a later axis: it said "slice -1:0" and "slice 4:5"
    ("output a = x[:, -5]", "index -5 is out of range for axis 1 of f32[B, 4], of length 4"),
    ("output a = x[0:1, 4]", "index 4 is out of range for axis 1 of f32[B, 4], of length 4"),
])
def test_bounds_outside_for_any_dims_are_errors_at_check(tmp_path, body, message):
    path = tmp_path / "bad.mdl"
    path.write_text(f"model M() {{\n  input x : f32[B, 4]\n  {body}\n}}\n")
    with pytest.raises(MdlTypeError, match=re.escape(message)):
        check_file(str(path))


def test_negative_constants_count_from_the_end_of_a_symbolic_axis(tmp_path):
    """`x[:-1]` of an axis of length T is x[0:T - 1] (teacher forcing's shifted targets),
    `x[-1]` x[T - 1]: they were refused ("a negative bound needs a known length, not T").
    A call whose dims put one before the start is refused, on every target."""
    path = tmp_path / "neg.mdl"
    path.write_text("model M() {\n  input x : f32[T, B]\n  output a = x[:-1]\n"
                    "  output b = x[-1]\n  output c = x[-2:]\n  output d = x[:, -1]\n"
                    "  output e = x[-1, 0:1]\n  output f = x[1:-1]\n}\n")
    for target in ("cpu", "cuda"):
        model = load(path, target=target, emulate=target == "cuda",
                     name=f"neg_{target}").M()
        for T in (3, 2):
            x = np.arange(T * 2, dtype=np.float32).reshape(T, 2)
            got = {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                   for k, v in model.forward(x=x).items()}
            want = {"a": x[:-1], "b": x[-1], "c": x[-2:], "d": x[:, -1], "e": x[-1, 0:1],
                    "f": x[1:-1]}
            for k, w in want.items():
                assert got[k].shape == w.shape and np.array_equal(got[k], w), (target, T, k)
            ref = reference.run(check_file(str(path)).graph, {"x": x}, {})
            for k, w in want.items():
                np.testing.assert_array_equal(ref[k], w)
        for T in (1, 0):
            with pytest.raises(ValueError, match="a size cannot be negative"):
                model.forward(x=np.zeros((T, 2), np.float32))


def test_indices_of_dims_that_may_be_in_range_are_checked_at_the_call(tmp_path):
    """`x[3 - B]` is in range for B = 2 or 3 only; a call outside names it by its place
    (it was "the indices is -2", then "an index is -2", which named no place)."""
    path = tmp_path / "dims.mdl"
    path.write_text("model M() {\n  input x : f32[B, 4]\n  output a = x[3 - B]\n"
                    "  output b = x[B - 1]\n}\n")
    graph = check_file(str(path)).graph
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    out = reference.run(graph, {"x": x[:2]}, {})
    np.testing.assert_array_equal(out["a"], x[1])
    np.testing.assert_array_equal(out["b"], x[1])
    with pytest.raises(IndexError, match=re.escape(f"the index at {path.name}:3:15 is -2, "
                                                   "outside [0, 5)")):
        reference.run(graph, {"x": x}, {})


@pytest.mark.parametrize("target", ["reference", "cpu", "emulated"])
def test_a_negative_index_of_an_empty_symbolic_axis_is_an_index_error(tmp_path, target):
    """`xs[-1]` is xs[T - 1], and at T = 0 raises what that raises: it was a slice
    T - 1:T, and said "the start T - 1 of the slice T - 1:T ... -1: a slice starts at 0
    or after" (a ValueError, of a slice the source has not)."""
    path = tmp_path / "last.mdl"
    path.write_text("model Last() {\n  input xs : f32[T, 3]\n  output y = xs[-1]\n"
                    "  output z = sum(xs[-2] * xs[-1])\n}\n")
    xs = np.arange(12, dtype=np.float32).reshape(4, 3)
    if target == "reference":
        graph = check_file(str(path)).graph
        def run(x):
            return reference.run(graph, {"xs": x}, {})
    else:
        model = built_for(path, target, name=f"last_{target}").Last()
        def run(x):
            return model.forward(xs=x)
    out = run(xs)
    np.testing.assert_array_equal(out["y"], xs[-1])
    assert out["z"] == np.sum(xs[-2] * xs[-1])
    with pytest.raises(IndexError, match=re.escape(f"the index at {path.name}:4:20 is -1, "
                                                   "outside [0, 1)")):
        run(xs[:1])  # xs[-2], xs[T - 2], at T = 1
    with pytest.raises(IndexError, match=re.escape(f"the index at {path.name}:3:16 is -1, "
                                                   "outside [0, 0)")):
        run(xs[:0])
