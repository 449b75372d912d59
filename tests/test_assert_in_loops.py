"""`assert` in the body of a `for`, an `if` or a `while` (or of a function called there):
it checks each step, branch or trip that runs, and nothing else: a row's padding steps
(`lengths`) and a branch not taken are never judged. The reference interpreter and
generated modules (CPU and the emulated device) raise the same ValueError, which names
the loops and branches around it and the steps (a loop's sequences' t: a row's own with
`lengths`) or trips of up to four loops, innermost first; one always false there (`assert 1 > 2`) is an error where the body
runs, not when the model is checked; a loop that holds nothing but an assert is kept; the
backward of a loop that recomputes its steps checks them again and passes."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from source_files import source_file

from codegen.ir.graph import walk_ops
from codegen.ops.primitives.checks import MAX_STEPS
from codegen.pipeline import differentiate, for_backends, load
from codegen.reference import interpreter as reference
from dsl import check_file
from test_cuda_emulated import on_both_targets

SOURCE = """
def settled(x : f32[B, N], g : f32[B, N]) -> f32[B, N] {
  assert x + g > -100.0, "a step and the state above -100"
  return tanh(x + g)
}
def small(x : f32[B, N]) -> bool {
  assert x < 50.0, "small enough"
  return sum(x) < 10.0
}
model Padded(N = 3) {
  input xs : f32[T, B, N]
  input lengths : i32[B]
  param w : f32[N, N] = normal(0, 0.5)
  h = zeros[B, N]
  for x in reversed(xs) (lengths = lengths, checkpoint = 2) {
    assert x > -100.0, "steps above -100"
    h = tanh(x @ w + h)
  }
  output loss = mean(h)
  minimize loss
}
model Branched(N = 3) {
  input x : f32[B, N]
  param w : f32[N, N] = normal(0, 0.5)
  y = x @ w
  if sum(x) > 0.0 {
    assert x < 50.0, "below 50 where the sum is positive"
    y = tanh(y)
  } else {
    assert x > -50.0
  }
  output loss = mean(y)
  minimize loss
}
model Tripped(N = 3) {
  input x : f32[B, N]
  param w : f32[N, N] = normal(0, 0.5)
  h = x @ w
  k = 0
  while k < 3 {
    assert x * f32(k) < 10.0, "each trip below 10"
    h = tanh(h @ w) + x
    k = k + 1
  }
  output loss = mean(h)
  minimize loss
}
model Called(N = 3) {
  input xs : f32[T, B, N]
  param w : f32[N, N] = normal(0, 0.5)
  g = zeros[B, N]
  for x in xs (recompute) {
    for y in xs {
      g = settled(y @ w, g)
    }
  }
  output loss = mean(g)
  minimize loss
}
model Unreachable() {
  input x : f32[B, 3]
  y = x
  if sum(x) > 10.0 {
    assert 1 > 2, "the sum never above 10"
    y = x * 2.0
  }
  output loss = mean(y)
  minimize loss
}
model Concurrent(N = 3) {
  input xs : f32[T, B, N]
  param w : f32[N, N] = normal(0, 0.5)
  g = zeros[B, N]
  for a in xs {
    assert a < 10.0, "the first loop's steps below 10"
    g = tanh(a @ w + g)
  }
  k = zeros[B, N]
  for b in xs {
    assert b > -10.0, "the second loop's steps above -10"
    k = tanh(b @ w + k)
  }
  output loss = mean(g) + mean(k)
  minimize loss
}
model Stepped(N = 3) {
  input xs : f32[T, B, N]
  input lengths : i32[B]
  h = zeros[B, N]
  for x in xs (lengths = lengths) {
    assert sum(x) != 0.0 and sum(x) < 1000.0, "each step's sum nonzero, below 1000"
    if sum(x) < -50.0 {
      assert x > -100.0, "far below only where the sum is"
    }
    h = h + x
  }
  g = zeros[B, N]
  for x in reversed(xs) (lengths = lengths) {
    assert sum(x) < 100.0, "each reversed step's sum below 100"
    g = g + x
  }
  output loss = mean(h) + mean(g)
  minimize loss
}
model Conditioned(N = 3) {
  input xs : f32[T, B, N]
  h = zeros[B, N]
  for x in xs {  # Conditioned
    k = 0
    while small(x * f32(k)) and k < 3 {
      k = k + 1
    }
    h = h + x * f32(k)
  }
  output loss = mean(h)
  minimize loss
}
model Nested(N = 3) {
  input xs : f32[T, B, N]
  input lengths : i32[B]
  h = zeros[B, N]
  for x in xs {  # Nested
    k = 0
    while k < 2 {
      for y in xs (lengths = lengths) {
        assert sum(y) < 1000.0, "each step's sum below 1000"
        if sum(y) > -1000.0 {
          assert y + x * f32(k) < 50.0, "nested below 50"
        }
        h = tanh(h + y)
      }
      k = k + 1
    }
  }
  output loss = mean(h)
  minimize loss
}
model Deep() {
  input xs : f32[T, B, 3]
  h = zeros[B, 3]
  for u1 in xs {  # Deep
    for u2 in xs {
      for u3 in xs {
        for u4 in xs {
          for e in xs {
            assert e < 50.0, "deep"
            h = h + e
          }
        }
      }
    }
  }
  output total = sum(h)
}
model Only(N = 3) {
  input xs : f32[T, B, N]
  for x in xs {  # Only
    assert x < 100.0, "a loop of nothing but this"
  }
  output total = sum(xs)
  minimize total
}
"""


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return source_file(tmp_path_factory, "looped.mdl", SOURCE)


@pytest.fixture(scope="module")
def modules(path):
    return on_both_targets(path, "looped", dtype="f64")


def data(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"xs": rng.normal(size=(4, 3, 3)), "x": rng.normal(size=(3, 3)),
            "lengths": np.array([4, 2, 3], np.int32)}


def inputs(model: str, changes: dict) -> dict:
    """The model's inputs, `changes` ({name: (index, value)}) written into them."""
    names = {"Padded": ("xs", "lengths"), "Branched": ("x",), "Tripped": ("x",),
             "Called": ("xs",), "Only": ("xs",), "Unreachable": ("x",),
             "Concurrent": ("xs",), "Stepped": ("xs", "lengths"),
             "Conditioned": ("xs",), "Nested": ("xs", "lengths"), "Deep": ("xs",)}[model]
    got = {name: value.copy() for name, value in data().items() if name in names}
    for name, (index, value) in changes.items():
        got[name][index] = value
    return got


def place(line: str) -> str:
    """Where in looped.mdl (file:line) the line that starts with `line` stands."""
    number = next(k for k, text in enumerate(SOURCE.splitlines(), 1)
                  if text.strip().startswith(line))
    return f"looped.mdl:{number}"


FOR = place("for x in reversed(xs)")
IF = place("if sum(x) > 0.0")
STEPPED = place("for x in xs (lengths")
NESTED = place("for x in xs {  # Nested")
NESTED_Y = place("for y in xs (lengths")
# a bad value, the error it gives (None: no error, the value is never judged), the position
RAISING = [
    ("Padded", {"xs": ((1, 1, 2), -300.0)},
     f"steps above -100: `x > -100.0` is false in step 1 of the `for` at {FOR} (computed "
     "from the input `xs`) at flat position 5"),   # row 1's own t, reversed
    ("Padded", {"xs": ((3, 1, 2), -300.0)}, None),   # row 1 runs two steps: padding
    ("Padded", {"xs": ((2, 1, 0), -300.0)}, None),
    ("Branched", {"x": ((0, 1), 60.0)},
     f"below 50 where the sum is positive: `x < 50.0` is false in the `if` branch at {IF} "
     "(computed from the input `x`) at flat position 1"),
    ("Branched", {"x": ((0, 1), -60.0)},
     f"assertion `x > -50.0` is false in the `else` branch at {IF} (computed from the "
     "input `x`) at flat position 1"),
    ("Branched", {"x": ((2, 2), -40.0)}, None),      # the else branch: above -50
    ("Tripped", {"x": ((1, 0), 7.0)},                # trip 2 (k = 2) is the first above 10
     f"each trip below 10: `x * f32(k) < 10.0` is false in trip 2 of the `while` at "
     f"{place('while k < 3')} (computed from the input `x`) at flat position 3"),
    ("Tripped", {"x": ((1, 0), 4.0)}, None),
    ("Called", {"xs": ((2, 0, 1), -1e5)},          # both loops' steps, the inner's first
     f"settled: a step and the state above -100: `x + g > -100.0` is false in step 2 of "
     f"the `for` at {place('for y in xs')}, in step 0 of the `for` at "
     f"{place('for x in xs (recompute)')} (computed from the input `xs`) at flat position 0"),
    # four loops deep, a branch inside: every loop's step or trip, the outer for's too
    ("Nested", {"xs": ((0, 1, 2), 30.0)},            # 30 + 30 at the while's trip 1
     f"nested below 50: `y + x * f32(k) < 50.0` is false in the `if` branch at "
     f"{place('if sum(y) > -1000.0')}, in step 0 of the `for` at {NESTED_Y}, in trip 1 of "
     f"the `while` at {place('while k < 2')}, in step 0 of the `for` at {NESTED} (computed "
     "from the inputs `lengths` and `xs`) at flat position 5"),
    ("Nested", {"xs": ((2, 0, 0), 30.0)},            # the outer for's step 2 reads it too
     f"nested below 50: `y + x * f32(k) < 50.0` is false in the `if` branch at "
     f"{place('if sum(y) > -1000.0')}, in step 2 of the `for` at {NESTED_Y}, in trip 1 of "
     f"the `while` at {place('while k < 2')}, in step 2 of the `for` at {NESTED} (computed "
     "from the inputs `lengths` and `xs`) at flat position 0"),
    ("Nested", {"xs": ((3, 1, 0), 30.0)}, None),     # row 1 runs two steps: padding
    # a condition of the whole step in a `for` with lengths: that loop unnumbered, the
    # loops around it numbered
    ("Nested", {"xs": ((1, 0, 0), 2000.0)},
     f"each step's sum below 1000: `sum(y) < 1000.0` is false in a step of the `for` at "
     f"{NESTED_Y}, in trip 0 of the `while` at {place('while k < 2')}, in step 0 of the "
     f"`for` at {NESTED}"),
    # five loops deep: the four innermost numbered
    ("Deep", {"xs": ((3, 0, 1), 60.0)},
     f"deep: `e < 50.0` is false in step 3 of the `for` at {place('for e in xs')}, in step 0 "
     f"of the `for` at {place('for u4 in xs')}, in step 0 of the `for` at "
     f"{place('for u3 in xs')}, in step 0 of the `for` at {place('for u2 in xs')}, in a step "
     f"of the `for` at {place('for u1 in xs {  # Deep')} (computed from the input `xs`) at "
     "flat position 1"),
    ("Unreachable", {"x": ((0, 0), 20.0)},          # false where it runs, not an error before
     f"the sum never above 10: `1 > 2` is false in the `if` branch at "
     f"{place('if sum(x) > 10.0')}"),
    ("Unreachable", {"x": ((0, 0), 5.0)}, None),
    # with lengths, a condition of the whole step (not one a row) names no step: a step
    # past every row's length runs too, its rows all padding (below)
    ("Stepped", {"xs": ((2, 0, 0), 2000.0)},
     f"each step's sum nonzero, below 1000: `sum(x) != 0.0 and sum(x) < 1000.0` is false "
     f"in a step of the `for` at {STEPPED}"),
    ("Stepped", {"xs": ((1, 2, 1), -300.0)},         # a branch in a loop: both
     f"far below only where the sum is: `x > -100.0` is false in the `if` branch at "
     f"{place('if sum(x) < -50.0')}, in step 1 of the `for` at {STEPPED}"),
    # reversed with lengths, each row at its own t: no one step for the whole of it
    ("Stepped", {"xs": ((2, 0, 0), 500.0)},
     f"each reversed step's sum below 100: `sum(x) < 100.0` is false in a step of the "
     f"`for` at {place('for x in reversed(xs) (lengths = lengths) {')}"),
    ("Stepped", {"xs": ((3, 1, 0), 2000.0)}, None),  # row 1 runs two steps: padding
    # a step past every row's length (lengths 2, 2, 3 of T = 4): its rows all padding,
    # zeros, which a condition of the whole step judges
    ("Stepped", {"lengths": (0, 2)},
     f"each step's sum nonzero, below 1000: `sum(x) != 0.0 and sum(x) < 1000.0` is false "
     f"in a step of the `for` at {STEPPED}"),
    # in a while's condition (through a function): the step of the for around it
    ("Conditioned", {"xs": ((2, 1, 2), 60.0)},
     f"small: small enough: `x < 50.0` is false in step 2 of the `for` at "
     f"{place('for x in xs {  # Conditioned')} (computed from the input `xs`) at flat "
     "position 5"),
    ("Only", {"xs": ((3, 2, 2), 200.0)},
     f"a loop of nothing but this: `x < 100.0` is false in step 3 of the `for` at "
     f"{place('for x in xs {  # Only')} (computed from the input `xs`) at flat position 8"),
]


@pytest.mark.parametrize("model, changes, message", RAISING,
                         ids=[f"{m}-{k}" for k, (m, _, _) in enumerate(RAISING)])
def test_every_run_says_the_same(path, modules, model, changes, message):
    """The reference and both targets raise the same error for a step, branch or trip
    that runs, in forward and train_step alike, and compute the same outputs where the bad
    value stands where nothing judges it; the model goes on working after an error."""
    graph = check_file(str(path), model=model, dtype="f64").graph
    params = reference.init_params(graph, 0)
    bad = inputs(model, changes)
    if message is None:
        want = reference.run(graph, bad, params)
    else:
        with pytest.raises(ValueError) as caught:
            reference.run(graph, bad, params)
        assert str(caught.value).startswith(message)
        message = str(caught.value)
    for target, module in modules.items():
        m = getattr(module, model)(seed=0)
        m.set_params(params)
        if message is None:
            got = m.forward(**bad)
            for name, value in want.items():
                np.testing.assert_allclose(got[name], value, rtol=1e-12, err_msg=target)
            continue
        runs = [m.forward] + ([m.train_step] if graph.loss else [])
        if graph.loss:
            m.set_optimizer("sgd", lr=0.1)
        for run in runs:
            with pytest.raises(ValueError) as caught:
                run(**bad)
            assert str(caught.value) == message, target
        good = m.forward(**inputs(model, {}))
        for name, value in reference.run(graph, inputs(model, {}), params).items():
            np.testing.assert_allclose(good[name], value, rtol=1e-12, err_msg=target)


@pytest.mark.parametrize("model", ["Padded", "Branched", "Tripped", "Called", "Stepped",
                                   "Nested"])
def test_gradients_are_the_references(path, modules, model):
    """A passing call trains as the reference differentiates it (the backward of a loop
    that recomputes its steps, `checkpoint` and `recompute`, checks them again)."""
    graph = check_file(str(path), model=model, dtype="f64").graph
    params = reference.init_params(graph, 0)
    want = reference.gradients(graph, inputs(model, {}), params)
    for target, module in modules.items():
        m = getattr(module, model)(seed=0)
        m.set_params(params)
        m.forward(**inputs(model, {}), training=True)
        got = m.backward()
        for name, value in got.items():
            key = name.removeprefix("input:")
            expected = want.params[key] if name == key else want.inputs[key]
            np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-12,
                                       err_msg=f"{target} {name}")


def test_loops_run_at_once_raise_the_first_loops_error(path, modules):
    """On the CPU two loops that share no memory run at once, on two threads: where both
    fail, the error is the first loop's, as the reference (which runs them in turn) says,
    every time."""
    graph = check_file(str(path), model="Concurrent", dtype="f64").graph
    params = reference.init_params(graph, 0)
    bad = inputs("Concurrent", {})
    bad["xs"][3, 1, 1], bad["xs"][0, 2, 0] = 20.0, -20.0  # the second loop fails sooner
    with pytest.raises(ValueError) as caught:
        reference.run(graph, bad, params)
    assert str(caught.value).startswith("the first loop's steps below 10")
    module = modules["cpu"]
    threads = module.get_num_threads()
    module.set_num_threads(2)
    try:
        m = module.Concurrent(seed=0)
        m.set_params(params)
        for _ in range(10):
            with pytest.raises(ValueError) as again:
                m.forward(**bad)
            assert str(again.value) == str(caught.value)
    finally:
        module.set_num_threads(threads)


def test_a_replayed_cuda_graph_checks_its_steps(path, modules):
    """Calls of the same dims on the device replay the CUDA graph the first captured: its
    checks run in the replay, and a failed one leaves the model working."""
    graph = check_file(str(path), model="Padded", dtype="f64").graph
    bad = inputs("Padded", {"xs": ((1, 1, 2), -300.0)})
    with pytest.raises(ValueError) as caught:
        reference.run(graph, bad, reference.init_params(graph, 0))
    m = modules["cuda"].Padded(seed=0)
    good = [m.forward(**inputs("Padded", {}))["loss"] for _ in range(3)]
    assert m.cuda_graphs["replayed"] >= 1
    replayed = m.cuda_graphs["replayed"]
    with pytest.raises(ValueError) as again:
        m.forward(**bad)
    assert str(again.value) == str(caught.value)
    assert m.cuda_graphs["replayed"] == replayed + 1
    assert m.forward(**inputs("Padded", {}))["loss"] == good[0]


def test_the_passes_keep_a_loop_of_nothing_but_an_assert(path):
    """A loop (or branch) whose outputs nothing reads stays while an assert stands in it."""
    graph = check_file(str(path), model="Only", dtype="f64").graph
    for g in (for_backends(graph), differentiate(graph)):
        assert [op.prim for op in g.body.ops if op.blocks] == ["for"]
        assert [op.prim for op in walk_ops(g.body) if op.prim == "assert"] == ["assert"]


def test_the_docstring_lists_the_checks_and_where_they_stand(modules):
    doc = modules["cpu"].Branched.__doc__
    assert "A call whose data fails a check raises ValueError:\n" \
           f"    below 50 where the sum is positive: `x < 50.0` in the `if` branch at {IF}\n" \
           f"    assertion `x > -50.0` in the `else` branch at {IF}\n" in doc


def test_the_languages_page_says_what_a_call_raises(tmp_path):
    """docs/language.md's CheckedInLoop and the error it says a bad step gives: the
    reference's and a CPU build's, word for word."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "language.md").read_text()
    source = re.search(r"```mdl\n(model CheckedInLoop\(\).*?\n})\n```", page, re.S).group(1)
    said = re.search(r"a call says ``(.*?)``", page, re.S).group(1).replace("\n", " ")
    path = tmp_path / "model.mdl"
    path.write_text(source + "\n")
    xs = np.ones((4, 3), np.float32)
    xs[2, 1] = -1.0
    data = {"xs": xs, "lengths": np.array([4, 3, 2], np.int32)}
    with pytest.raises(ValueError) as caught:
        reference.run(check_file(str(path)).graph, data, {})
    assert str(caught.value) == said
    with pytest.raises(ValueError) as built:
        load(path).CheckedInLoop(seed=0).forward(**data)
    assert str(built.value) == said


def test_the_runtime_has_room_for_the_steps_an_error_numbers():
    """The front end numbers at most MAX_STEPS loops; the runtime's fault record (the cuda
    target's) holds that many: kAssertSteps in mdl/faults.h."""
    header = (Path(__file__).resolve().parents[1] / "cpp_runtime" / "mdl" / "faults.h")
    room = re.search(r"constexpr int kAssertSteps = (\d+);", header.read_text())
    assert room and int(room.group(1)) == MAX_STEPS
