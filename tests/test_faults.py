"""Indices out of range found while a model runs: the IndexError names the input the
caller can mend, also when the model computes the index from it (codegen/ir/origins.py),
on the CPU and on the emulated device alike, and the reference interpreter raises too
where NumPy would read a negative index from the end."""
from __future__ import annotations

import numpy as np
import pytest

from codegen.pipeline import load
from codegen.reference import interpreter as reference
from dsl import check_file
from source_files import source_file
from test_cuda_emulated import on_both_targets

PICKS = """
model Picks(N = 4) {
  input x : f32[R, N]
  input i : i32
  input n : i32
  input ids : i32[K]
  param W : f32[N] = normal(0, 0.1)
  j = i + 1
  row = x[j] * W
  k = i + n
  other = x[k]
  output loss = sum(row) + sum(x[ids * 2] * W) + sum(other)
  minimize loss
}
"""


@pytest.fixture(scope="module")
def picks(tmp_path_factory):
    path = source_file(tmp_path_factory, "picks.mdl", PICKS)
    return path, on_both_targets(path, "picks")


def call(x_rows=5, i=0, n=0, ids=(0, 1)):
    return dict(x=np.ones((x_rows, 4), np.float32), i=np.array(i, np.int32),
                n=np.array(n, np.int32), ids=np.array(ids, np.int32))


CASES = [
    (dict(i=4), r"^`j` at picks.mdl:9:10 \(computed from the input `i`\) is 5, outside "
                r"\[0, 5\): the rows of the value it indexes$"),
    (dict(i=-2), r"^`j` at picks.mdl:9:10 \(computed from the input `i`\) is -1, outside "
                 r"\[0, 5\)"),
    (dict(i=1, n=7), r"^`k` at picks.mdl:11:12 \(computed from the inputs `i` and `n`\) is "
                     r"8, outside \[0, 5\)"),
    (dict(ids=(2, 3)), r"^the index at picks.mdl:12:33 computed from the input `ids` holds 6 "
                       r"at flat position 1, outside \[0, 5\): the rows of the table it "
                       r"indexes$"),
    (dict(ids=(-1,)), r"^the index at picks.mdl:12:33 computed from the input `ids` holds -2 "
                      r"at flat position 0"),
]


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("bad, message", CASES)
def test_a_computed_index_names_the_inputs_it_comes_from(picks, target, bad, message):
    _, modules = picks
    m = modules[target].Picks(seed=0)
    m.set_optimizer("sgd", lr=0.1)
    for run in (m.forward, m.train_step):
        with pytest.raises(IndexError, match=message):
            run(**call(**bad))
    assert np.isfinite(m.train_step(**call())["loss"])  # the model goes on working


@pytest.mark.parametrize("bad, message", CASES)
def test_the_reference_says_what_a_module_says(picks, bad, message):
    """NumPy reads x[-1] and np.take(x, [-1]) from the end; mdl's indices do not wrap, and
    the reference's IndexError is the module's, word for word."""
    path, modules = picks
    graph = check_file(str(path)).graph
    params = reference.init_params(graph)
    with pytest.raises(IndexError, match=message) as caught:
        reference.run(graph, call(**bad), params)
    with pytest.raises(IndexError) as native:
        modules["cpu"].Picks(seed=0).forward(**call(**bad))
    assert str(caught.value) == str(native.value)
    reference.run(graph, call(), params)


STEPS = """
model Steps() {
  input x : f32[B, 3]
  input ids : i32[S]
  ys = for t in range(3) { yield x[t] }
  zs = for i in ids { yield x[i + 1] }
  output o = sum(ys) + sum(zs)
}
"""


@pytest.mark.parametrize("given, message", [
    (dict(B=2), r"^`t` at steps.mdl:5:35 is 2, outside \[0, 2\): the rows of the value "
                r"it indexes$"),
    (dict(ids=(0, 3)), r"^the index at steps.mdl:6:30 computed from the input `ids` is 4, "
                       r"outside \[0, 4\)")])
def test_a_loop_variable_is_computed_from_its_sequence_alone(tmp_path_factory, given, message):
    """A `for`'s variable is a step of its sequence (a range's counter: of no input), not
    of everything the loop reads: the loop indexing `x` does not make `x` the index's
    source (the caller would mend the wrong input)."""
    path = source_file(tmp_path_factory, "steps.mdl", STEPS)
    call = dict(x=np.ones((given.get("B", 4), 3), np.float32),
                ids=np.array(given.get("ids", (0, 1)), np.int32))
    with pytest.raises(IndexError, match=message):
        reference.run(check_file(str(path)).graph, call, {})
    for target, module in on_both_targets(path, "steps").items():
        with pytest.raises(IndexError, match=message):
            module.Steps().forward(**call)


NESTED_LENGTHS = """
model Nested() {
  input xs   : f32[N, L, B]
  input lens : i32[N, B]
  input ys   : f32[T, B]
  input top  : i32[B]
  total = zeros[B]
  for x in xs, n in lens {
    for v in x (lengths = n) { total = total + v }
  }
  for y in ys (lengths = top) { total = total + y }
  output y = sum(total)
}
"""


@pytest.mark.parametrize("lens, top, message", [
    ([[1, 2], [3, 9]], [2, 2],
     r"^n\[1\] = 9 is outside \[0, 4\] \(the sequence length\); n is computed from the "
     r"input `lens`$"),
    ([[1, 2], [3, 4]], [2, 3], r"^top\[1\] = 3 is outside \[0, 2\] \(the sequence length\)$")])
def test_lengths_a_loop_computes_name_the_inputs_they_come_from(tmp_path_factory, lens, top,
                                                                 message):
    """An inner loop's lengths, a step of an input, were named by their variable alone
    (`n[1] = 9`): the caller saw no input to mend (QA)."""
    path = source_file(tmp_path_factory, "nested_lengths.mdl", NESTED_LENGTHS)
    call = dict(xs=np.ones((2, 4, 2), np.float32), lens=np.array(lens, np.int32),
                ys=np.ones((2, 2), np.float32), top=np.array(top, np.int32))
    with pytest.raises(ValueError, match=message):
        reference.run(check_file(str(path)).graph, call, {})
    for target, module in on_both_targets(path, "nested_lengths").items():
        with pytest.raises(ValueError, match=message):
            module.Nested().forward(**call)


def test_the_reference_refuses_a_target_past_the_classes(tmp_path):
    """NumPy's take_along_axis read a target of -1 as the last class."""
    path = tmp_path / "loss.mdl"
    path.write_text("model Loss() {\n  input logits : f32[T, B, 4]\n  input targets : i32[T, B]\n"
                    "  input lengths : i32[B]\n"
                    "  output loss = cross_entropy(logits, targets, lengths = lengths)\n}\n")
    graph = check_file(str(path)).graph
    given = dict(logits=np.zeros((3, 2, 4), np.float32), targets=np.zeros((3, 2), np.int32),
                 lengths=np.array([3, 1], np.int32))
    given["targets"][2, 1] = -1            # padding (t >= lengths[1]): never read
    model = load(path, name="loss_targets").Loss()
    assert np.isclose(reference.run(graph, given, {})["loss"], model.forward(**given)["loss"])
    given["targets"][1, 0] = -1
    message = ("`targets` holds -1 at flat position 2: cross_entropy's targets lie in [0, 4), "
               "one per class")
    with pytest.raises(IndexError) as caught:
        reference.run(graph, given, {})
    assert str(caught.value) == message
    with pytest.raises(IndexError) as native:
        model.forward(**given)
    assert str(native.value) == message


MANY = """
model Many(V = 5, H = 3) {
  input ids : i32[N]
  input tokens : i32[T, N]
  input targets : i32[N]
  param emb : f32[V, H] = normal(0, 1)
  param u : f32[H, H] = normal(0, 0.5)
  h = zeros[N, H]
  for t in tokens {
    h = tanh(emb[t + i32(h[:, 0] > 5.0)] + h @ u)
  }
  output y = sum(emb[ids]) + sum(h)
  output l = cross_entropy(emb[ids * 0], targets)
}
"""


@pytest.fixture(scope="module")
def many_modules(tmp_path_factory):
    path = source_file(tmp_path_factory, "many.mdl", MANY)
    return path, on_both_targets(path, "many")


def many(bad: str):
    """4000 rows (16 blocks of the device's kernels), three bad ones in `bad`."""
    ids, tokens, targets = (np.zeros(4000, np.int32), np.zeros((3, 4000), np.int32),
                            np.zeros(4000, np.int32))
    if bad == "ids":
        ids[[100, 3000, 3500]] = 7, 9, -1
    if bad == "targets":
        targets[[50, 2000, 3999]] = 3, 5, -2
    if bad == "tokens":  # step 0's two, and step 1's, at a position before them
        tokens[0, [2000, 2500]], tokens[1, 10] = (-3, 8), 6
    return dict(ids=ids, tokens=tokens, targets=targets)


@pytest.mark.parametrize("bad, message", [
    ("ids", r"^`ids` holds 7 at flat position 100, outside \[0, 5\)"),
    ("targets", r"^`targets` holds 3 at flat position 50: cross_entropy's targets"),
    ("tokens", r"^the index at many.mdl:10:17 computed from the input `tokens` holds -3 "
               r"at flat position 2000,")])
def test_of_many_bad_elements_the_first_is_named_whatever_order_blocks_run_in(
        many_modules, monkeypatch, bad, message):
    """A GPU runs a kernel's blocks in any order, and several may find a bad element: the
    error names the first, as the CPU's loop and the reference do, and a later launch (the
    next step of a loop) replaces nothing, even at a lesser position (mdl/cuda/device.h's
    report; the emulated device runs the blocks in reverse and shuffled)."""
    path, modules = many_modules
    graph = check_file(str(path)).graph
    model = modules["cpu"].Many(seed=0)
    with pytest.raises(IndexError, match=message):
        reference.run(graph, many(bad), {k: np.array(v) for k, v in model.params.items()})
    with pytest.raises(IndexError, match=message):
        model.forward(**many(bad))
    for order in ("order=forward", "order=reverse", "blocks=shuffle,seed=4"):
        monkeypatch.setenv("MDL_CUDA_EMULATOR", order)
        with pytest.raises(IndexError, match=message):
            modules["cuda"].Many(seed=0).forward(**many(bad))
