"""Loops that share no memory run at once on the CPU target (codegen/backend/concurrent.py,
cpp_runtime/mdl/concurrent.h): which loops are grouped, that the arms of a group use no
memory of each other's, that a group computes what one thread computes and the reference
does, and that an error inside an arm reaches Python as the same error alone."""
import re

import numpy as np
import pytest
from source_files import source_file

from codegen.compile.options import BuildOptions
from codegen.pipeline import load, sources
from codegen.reference import interpreter as reference
from dsl import check_file
from test_lowering import function_texts, functions
from test_native import assert_training_matches

# Two loops over the same tokens, each feeding back the argmax of its state as an index
# into its table (so the gather stays in the loop: `shift` past the table is an
# IndexError raised inside it), and a third loop reading both.
TWO = """
model Two(V = 7, E = 4, H = 5) {
  input xs : f32[T, B, E]
  input shift_a : i32
  input shift_b : i32
  param ta : f32[V, H] = normal(0, 1)
  param tb : f32[V, H] = normal(0, 1)
  param wa : f32[E, H] = normal(0, 0.4)
  param wb : f32[E, H] = normal(0, 0.4)
  param u : f32[H, H] = normal(0, 0.4)
  h = zeros[B, H]
  ha = for x in xs {
    h = tanh(x @ wa + ta[argmax(h, axis = 1) + shift_a] + h @ u)
    yield h
  }
  g = zeros[B, H]
  hb = for x in reversed(xs) {
    g = tanh(x @ wb + tb[argmax(g, axis = 1) + shift_b] + g @ u)
    yield g
  }
  s = zeros[B, H]
  for a in ha, b in hb {
    s = tanh(a * b + s)
  }
  output hs = ha + hb
  output loss = sum(s * s)
  minimize loss
}

model Stacked(E = 4, H = 5) {
  input xs : f32[T, B, E]
  param w1 : f32[E, H] = normal(0, 0.4)
  param w2 : f32[H, H] = normal(0, 0.4)
  h = zeros[B, H]
  first = for x in xs { h = tanh(x @ w1 + h); yield h }
  g = zeros[B, H]
  for y in first { g = tanh(y @ w2 + g) }
  output loss = sum(g)
  minimize loss
}

model BranchYields(H = 4) {
  input xs : f32[T, B, H]
  input flag : bool
  h = zeros[B, H]; g = zeros[B, H]
  for x in xs { h = tanh(x + h) }
  d = h * 2.0
  if flag { e = d } else { e = xs[0] }
  for x in reversed(xs) { g = tanh(x + g) }
  output loss = sum(e * g)
  minimize loss
}

model Dropped(E = 4, H = 5) {
  input xs : f32[T, B, E]
  param w : f32[E, H] = normal(0, 0.4)
  h = zeros[B, H]; g = zeros[B, H]
  for x in xs { h = tanh(dropout(x @ w, 0.5) + h) }
  for x in reversed(xs) { g = tanh(dropout(x @ w, 0.5) + g) }
  output loss = sum(h * g)
  minimize loss
}

model StartsFromARow(H = 4) {
  input xs : f32[T, B, H]
  input limit : f32
  param w : f32[H, H] = normal(0, 0.4)
  for x in xs { assert abs(x) < limit, "in the first loop" }
  h = xs[0]
  for x in xs { h = tanh(h @ w + x) }
  output loss = sum(h * h)
  minimize loss
}

model Checked(H = 4) {
  input xs : f32[T, B, H]
  input limit : f32
  k = 0
  while k < 2 {
    k = k + 1
    assert abs(xs[0]) < limit, "first, in the while"
  }
  assert abs(xs) < limit + 1.0, "second, after the while"
  h = zeros[B, H]
  for x in xs { h = tanh(x + h) }
  output y = sum(h)
}
"""


def arms(function: str) -> list[tuple[str, str]]:
    """(the text before the group, each arm's lambda) of the function's groups, one list
    entry per arm."""
    out = []
    for group in re.finditer(r"mdl::Arms (arms\d+)\((\d+), ", function):
        name, count = group.group(1), int(group.group(2))
        for k in range(count):
            start = function.index(f"{name}.run({k}, [&] {{", group.start())
            end = function.index("\n    });", start)
            out.append((function[:group.start()], function[start:end]))
    return out


@pytest.fixture(scope="module")
def two_path(tmp_path_factory):
    return source_file(tmp_path_factory, "two.mdl", TWO)


@pytest.fixture(scope="module")
def two(two_path):
    return load(two_path)


def test_a_bilstm_runs_its_two_directions_at_once():
    """The BiLSTM-CRF's two LSTMs in every function (forward, training forward,
    backward), each arm one time loop."""
    for kind, text in functions("CRF").items():
        assert text.count("mdl::Arms ") == 1, kind
        got = arms(text)
        assert len(got) == 2, kind
        for _, arm in got:
            assert len(re.findall(r"for \(int64_t s\d+ = 0;", arm)) == 1, kind
        # the CRF's loop, which reads both (its backward writes what both read), alone
        assert len(re.findall(r"for \(int64_t s\d+ = 0;", text)) == 3, kind


def test_the_arms_of_a_group_use_no_memory_of_each_other(two_path):
    """Every arena slot an arm reaches, inside its lambda or through the pointers made
    before the group (its outputs), is the arm's alone."""
    for kind, text in function_texts(two_path, "Two", {}).items():
        got = arms(text)
        assert len(got) == 2, kind
        slots = []
        for before, arm in got:
            pointers = dict(re.findall(r"auto\* (v\d+) = .*?off\[(\d+)\]", before))
            used = set(re.findall(r"off\[(\d+)\]", arm))
            used |= {pointers[v] for v in re.findall(r"\b(v\d+)\b", arm) if v in pointers}
            slots.append(used)
        # what both read and neither writes (an input's copy, xs @ w) may be shared:
        # only slots written in an arm must be its own
        written = [set(re.findall(r"\b(v\d+)\[[^\]]+\] = ", arm)) for _, arm in got]
        for k, (before, _) in enumerate(got):
            pointers = dict(re.findall(r"auto\* (v\d+) = .*?off\[(\d+)\]", before))
            own = {pointers[v] for v in written[k] if v in pointers}
            assert not own & slots[1 - k], (kind, own & slots[1 - k])


def test_loops_that_read_each_other_run_one_after_another(two_path):
    """A stacked RNN's second loop reads what the first yields."""
    for kind, text in function_texts(two_path, "Stacked", {}).items():
        assert "mdl::Arms" not in text, kind


def test_loops_that_draw_numbers_open_their_streams_first(two_path):
    """Each dropout's stream exists before the arms draw from it (State::draw then only
    finds it); the backward reads the masks the forward drew."""
    texts = function_texts(two_path, "Dropped", {})
    for kind, text in texts.items():
        assert len(arms(text)) == 2, kind
    before = arms(texts["train"])[0][0]
    assert len(re.findall(r"m\.draw\(uint64_t\(\d+\), 0\);", before)) == 2


def inputs(seed, T=6, B=3, E=4):
    rng = np.random.default_rng(seed)
    return {"xs": rng.standard_normal((T, B, E)).astype(np.float32),
            "shift_a": np.int32(0), "shift_b": np.int32(1)}


@pytest.mark.parametrize("model", ["Two", "Dropped"])
def test_loops_run_at_once_compute_what_one_thread_and_the_reference_do(two, two_path,
                                                                         model):
    """Bit for bit what one thread computes (each arm's arithmetic is the same, each
    dropout's numbers its own stream's), on two threads and on three (more threads than
    arms: the products are too small to split, so the arms still run at once), and the
    reference's loss and gradients."""
    case = inputs(0)
    if model == "Dropped":
        case = {"xs": case["xs"]}
    before = two.get_num_threads()
    got = {}
    try:
        for threads in (1, 2, 3):
            two.set_num_threads(threads)
            m = getattr(two, model)(seed=3)
            got[threads] = (m.forward(**case, training=True), m.backward())
    finally:
        two.set_num_threads(before)
    for threads in (2, 3):
        for one, many in zip(got[1], got[threads]):
            for name in one:
                np.testing.assert_array_equal(one[name], many[name], err_msg=name)
    graph = check_file(str(two_path), model=model).graph
    assert_training_matches(getattr(two, model)(seed=3), graph, case, tol=1e-4, seed=3)


@pytest.mark.parametrize("shifts", [(7, 1), (0, 7), (9, 9)])
def test_an_index_error_inside_an_arm_is_raised_after_the_group(two, shifts):
    """An arm's error is thrown again once both have ended (the first arm's where both
    fail); the model then runs as before."""
    before = two.get_num_threads()
    try:
        two.set_num_threads(2)
        m = two.Two(seed=3)
        bad = dict(inputs(1), shift_a=np.int32(shifts[0]), shift_b=np.int32(shifts[1]))
        with pytest.raises(IndexError):
            m.forward(**bad)
        good = m.forward(**inputs(1))
        assert np.isfinite(good["loss"])
    finally:
        two.set_num_threads(before)


def test_of_two_checks_that_fail_the_first_in_the_program_is_raised(two, two_path):
    """The `while` (an assert in its body) and the `for` share no memory: they run at
    once, and the assert between them, which may raise too, stays after the group, not
    before it (where it raised its own error where the `while`'s comes first: fuzz seed
    1051). Each error alone is raised as the reference raises it."""
    _, files = sources(two_path, "checked", BuildOptions(model="Checked"))
    assert files["module.cpp"].count("mdl::Arms ") == 1  # its one function, inference
    graph = check_file(str(two_path), model="Checked").graph
    xs = np.zeros((3, 2, 4), np.float32)
    for first, second, said in ((1, 1, "first, in the while"), (0, 1, "second, after"),
                                (1, 0, "first, in the while")):
        xs[0, 1, 2], xs[2, 0, 3] = 0.9 * first, 1.9 * second
        with pytest.raises(ValueError, match=said):
            two.Checked(seed=0).forward(xs=xs, limit=np.float32(0.5))
        with pytest.raises(ValueError, match=said):
            reference.run(graph, {"xs": xs, "limit": np.float32(0.5)}, {})


@pytest.mark.parametrize("flag", [True, False])
def test_a_branch_yielding_a_value_from_outside_stays_after_what_makes_it(two, two_path,
                                                                          flag):
    """The `if` copies `d`, made from the first loop's state, out of its branch: it reads
    `d` though no instruction in it does, so it stays after the group and after `d`
    (moved before them, it read `d` before its pointer existed: fuzz seed 562)."""
    case = {"xs": inputs(2, E=4)["xs"], "flag": np.bool_(flag)}
    graph = check_file(str(two_path), model="BranchYields").graph
    assert_training_matches(two.BranchYields(seed=3), graph, case, tol=1e-4, seed=3)


def test_a_loop_does_not_run_before_a_kept_instruction_asking_its_streams_position():
    """An `rng_position` asks where a stream stands before the loop that draws from it
    (ops/structured/replay.py); nothing but the order ties the two. Where it must keep
    its place after an earlier loop (their memory shared), the later loop that draws from
    its stream joins no group with that earlier loop, which would run it first; a loop
    drawing from another stream does."""
    from codegen.backend.concurrent import _group
    from codegen.backend.lower import Kernel, Structured
    from codegen.ir.graph import Block, Op, Value
    from codegen.ir.shapes import TensorType
    f32 = TensorType.of("f32", (2,))

    def loop(salt):
        x = Value(f32)
        body = Block([x], [Op("dropout_mask", [x], [Value(f32)], {"p": 0.5, "salt": salt})])
        body.results = [body.ops[0].outputs[0]]
        op = Op("for", [Value(TensorType.of("f32", (3, 2)))], [Value(TensorType.of(
            "f32", (3, 2)))], {"n_seq": 1, "n_state": 0, "reversed": False,
                               "has_lengths": False}, [body])
        return Structured(op, [[]])
    first, asked = loop(1), Kernel(Op("rng_position", [], [Value(TensorType.of("i32", (4,)))],
                                      {"salt": 2}), [])
    for salt, grouped in ((2, False), (3, True)):
        later = loop(salt)
        instrs = [first, asked, later]
        touches = {id(first): ({1}, {2}), id(asked): (set(), {2}), id(later): ({3}, {4})}
        out, _ = _group(instrs, 0, touches, set())
        assert (len(out) == 2) == grouped, salt  # [group, asked] or the three as they were


def test_an_instruction_that_may_raise_is_not_moved_past_another():
    """Of two instructions that may raise (an assert, an index), a call raises the one
    the program runs first: one between two loops is moved before their group only where
    no arm before it may raise, and a loop that may raise joins no group past one that
    may raise and stays after the group."""
    from codegen.backend.concurrent import _group
    from codegen.backend.lower import Concurrent, Kernel, Structured
    from codegen.ir.graph import Block, Op, Value
    from codegen.ir.shapes import TensorType
    f32, flag = TensorType.of("f32", (2,)), TensorType.of("bool", ())

    def check():
        return Op("assert", [Value(TensorType.of("bool", (2,)))], [Value(flag)],
                  {"what": "w", "said": "s"})

    def loop(raises):
        x = Value(f32)
        body = Block([x], [Op("tanh", [x], [Value(f32)])] + ([check()] if raises else []))
        body.results = [body.ops[0].outputs[0]]
        op = Op("for", [Value(TensorType.of("f32", (3, 2)))], [Value(TensorType.of(
            "f32", (3, 2)))], {"n_seq": 1, "n_state": 0, "reversed": False,
                               "has_lengths": False}, [body])
        return Structured(op, [[]])

    def grouped(a, k, b, k_clashes=False):
        """The order after grouping [a, k, b]: each named, a group as a tuple."""
        touches = {id(a): ({1}, {2}), id(k): ({2} if k_clashes else {5}, {6}),
                   id(b): ({3}, {4})}
        instrs = [a, k, b]
        faults = {id(x) for x, raises in ((a, ra), (k, True), (b, rb)) if raises}
        out, _ = _group(instrs, 0, touches, faults)
        names = {id(a): "a", id(k): "k", id(b): "b"}
        return [tuple(names[id(x)] for x in ins.arms) if isinstance(ins, Concurrent)
                else names[id(ins)] for ins in out]

    for ra, rb, clashes, want in ((True, False, False, [("a", "b"), "k"]),
                                  (False, True, False, ["k", ("a", "b")]),
                                  (False, False, False, ["k", ("a", "b")]),
                                  (True, True, False, ["a", "k", "b"]),
                                  (False, True, True, ["a", "k", "b"]),
                                  (False, False, True, [("a", "b"), "k"])):
        a, b = loop(ra), loop(rb)
        k = Kernel(check(), [])
        assert grouped(a, k, b, clashes) == want, (ra, rb, clashes)


def test_a_loop_starting_from_a_row_kept_after_the_group_stays_after_it(two, two_path):
    """`h = xs[0]` may raise (an index), so it stays after the first loop, which may raise
    too (its assert). The second loop starts from that row: a view, which writes no
    memory, but whose pointer exists only once the index has run. So the loop stays
    after it and joins no group with the first (grouped, it read the pointer before its
    declaration and the module did not compile: fuzz seed 1157)."""
    for kind, text in function_texts(two_path, "StartsFromARow", {}).items():
        assert "mdl::Arms" not in text, kind
    case = {"xs": inputs(4, E=4)["xs"], "limit": np.float32(10.0)}
    graph = check_file(str(two_path), model="StartsFromARow").graph
    assert_training_matches(two.StartsFromARow(seed=3), graph, case, tol=1e-4, seed=3)
    with pytest.raises(ValueError, match="in the first loop"):
        two.StartsFromARow(seed=3).forward(xs=case["xs"], limit=np.float32(0.1))
