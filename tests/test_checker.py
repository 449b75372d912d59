"""The checker's positive rules: every built-in's shape rule, dims unified across inputs
and calls, hyper-parameters, scope attributes, imports, --dtype."""
import re
from pathlib import Path

import pytest

from dsl import MdlError, check_source

HEAD = ("model M(H = 4, E = 3) {\n input x : f32[T, B, H]\n input m : f32[B, H]\n"
        " input ids : i32[T, B]\n input n : i32[B]\n")

# (expression, the type it must have)
RULES = [
    ('m @ transpose(m)', 'f32[B, B]'),
    ('x @ ones[H, E]', 'f32[T, B, 3]'),
    ('x + m', 'f32[T, B, 4]'),
    ('x * 2', 'f32[T, B, 4]'),
    ('2.0 ** m', 'f32[B, 4]'),
    ('sum(x)', 'f32'),
    ('sum(x, axis = 0)', 'f32[B, 4]'),
    ('sum(x, axis = [0, 2], keepdims = true)', 'f32[1, B, 1]'),
    ('mean(x, axis = -1)', 'f32[T, B]'),
    ('max(m, axis = 1)', 'f32[B]'),
    ('logsumexp(x, axis = 2)', 'f32[T, B]'),
    ('softmax(x)', 'f32[T, B, 4]'),
    ('log_softmax(m, axis = 0)', 'f32[B, 4]'),
    ('concat([m, m], axis = 1)', 'f32[B, 8]'),
    ('concat([x, x])', 'f32[2*T, B, 4]'),
    ('stack([m, m, m], axis = 1)', 'f32[B, 3, 4]'),
    ('reshape(x, [T * B, H])', 'f32[B*T, 4]'),
    ('transpose(x, [1, 0, 2])', 'f32[B, T, 4]'),
    ('x[0]', 'f32[B, 4]'),
    ('x[1:, :, 0:2]', 'f32[T - 1, B, 2]'),
    ('m[:, 1]', 'f32[B]'),
    ('ones[H, E][ids]', 'f32[T, B, 3]'),
    ('one_hot(ids, 5)', 'f32[T, B, 5]'),
    ('f64(m)', 'f64[B, 4]'),
    ('i32(m)', 'i32[B, 4]'),
    ('where(m > 0.0, m, -m)', 'f32[B, 4]'),
    ('clip(m, -1.0, 1.0)', 'f32[B, 4]'),
    ('norm(m)', 'f32'),
    ('norm(m, axis = 1)', 'f32[B]'),
    ('mse(m, zeros[B, H])', 'f32'),
    ('dropout(m, 0.1)', 'f32[B, 4]'),
    ('maximum(m, 0.0)', 'f32[B, 4]'),
    ('m[:, 0:H/2]', 'f32[B, 2]'),
    ('full[B, 2*H](1.5)', 'f32[B, 8]'),
    ('zeros[B, H] + H', 'f32[B, 4]'),
    ('cross_entropy(x, ids)', 'f32'),
    ('cross_entropy(x, ids, lengths = n)', 'f32'),
    ('m < 0.5', 'bool[B, 4]'),
    ('not (m < 0.5)', 'bool[B, 4]'),
    ('(m < 0.5) and (m > 0.1)', 'bool[B, 4]'),
    ('exp(log(sqrt(abs(sin(cos(m))))))', 'f32[B, 4]'),
    ('sigmoid(tanh(relu(m)))', 'f32[B, 4]'),
]


@pytest.mark.parametrize("expr, expected", RULES)
def test_builtin_shape_rules(expr, expected):
    cm = check_source(HEAD + f" output y = {expr}\n}}", "p.mdl")
    assert str(cm.graph.outputs["y"].type) == expected


def test_function_dims_bind_per_call_and_unify():
    src = """
def pair(a : f32[N, K], b : f32[N, K], k : int) -> f32[N, 2*K] {
  return concat([a, b], axis = 1) * k
}
model M() {
  input x : f32[B, 3]; input y : f32[B, 5]
  output p = pair(x, x, 2)
  output q = pair(y, y, 3)
}"""
    out = check_source(src).graph.outputs
    assert str(out["p"].type) == "f32[B, 6]" and str(out["q"].type) == "f32[B, 10]"
    with pytest.raises(MdlError, match=r"argument `b` of `pair` is f32\[N, K\], here "
                                       r"f32\[B, 3\], got f32\[B, 5\]: dim 1 differs: K = 3 "
                                       r"as argument `a` of `pair` bound it \(given "
                                       r"f32\[B, 3\]\)\n"):
        check_source(src.replace("pair(y, y, 3)", "pair(x, y, 3)"))


def test_a_mismatch_at_a_call_names_the_argument_that_bound_the_dim():
    """QA: `lstm(h, x, c)`, h and x swapped, blamed `c` alone ("is f32[B, H], here
    f32[B, 4]"), so the user looked at the one argument that was right: the error names
    the argument that made H 4. A dim its own argument bound is not named again."""
    src = """import "std/rnn.mdl"
model M(E = 4, H = 6) {
  input xs : f32[T, B, E]
  h = zeros[B, H]; c = zeros[B, H]
  for x in xs { h, c = lstm(h, x, c) }
  output loss = mean(h)
}"""
    with pytest.raises(MdlError, match=r"argument `c` of `lstm` is f32\[B, H\], here "
                       r"f32\[B, 4\], got f32\[B, 6\]: dim 1 differs: H = 4 as argument "
                       r"`h` of `lstm` bound it \(given f32\[B, 4\]\)\n"):
        check_source(src)
    square = "def sq(a : f32[N, N]) -> f32[N, N] { return a }\nmodel M() {\n"
    with pytest.raises(MdlError, match=r"here f32\[3, 3\], got f32\[3, 5\]: dim 1 differs\n"):
        check_source(square + "  input x : f32[3, 5]\n  output y = sq(x)\n}")


LEADING = """
def proj(x : f32[..., N, I], n : int) -> f32[..., N, n] {
  param W : f32[I, n]
  return x @ W
}
def act(x : f32[...]) -> f32[...] { return x * sigmoid(x) }
def gate(a : f32[..., K], b : f32[..., K]) -> (f32[..., K], f32[..., 2*K]) {
  return a * b, concat([a, b], axis = -1)
}
model M() {
  input x : f32[T, B, 3]; input m : f32[B, 3]; input s : f32
"""


@pytest.mark.parametrize("body, expected", [
    ("output y = proj(x, 5)", "f32[T, B, 5]"),          # `...` is [T]
    ("output y = proj(m, 5)", "f32[B, 5]"),             # `...` is no dims
    ("output y = act(x)", "f32[T, B, 3]"),
    ("output y = act(s)", "f32"),                       # f32[...] takes a scalar too
    ("output y = act(2)", "f32"),                       # and a number, as a rank-0 tensor
    ("output y = swapaxes(x, -1, 0)", "f32[3, B, T]"),
    ("output y = proj(swapaxes(x, 0, -2), 2)", "f32[B, T, 2]"),
    ("a, y = gate(x, x); output y", "f32[T, B, 6]"),
    ("y, b = gate(m, m); output y", "f32[B, 3]"),
])
def test_a_functions_leading_dims_take_any_dims_before_the_named_ones(body, expected):
    src = LEADING + f"  {body}\n}}"
    assert str(check_source(src).graph.outputs["y"].type) == expected


@pytest.mark.parametrize("expr, message", [
    ("gate(x, m)", r"argument `b` of `gate` is f32\[\.\.\., K\], where `\.\.\.` is \[T, B\] "
                   r"as argument `a` of `gate` bound it, got f32\[B, 3\]"),
    ("gate(m[0], x)", r"where `\.\.\.` is no dims as argument `a` of `gate` bound it, got "
                   r"f32\[T, B, 3\]"),
    ("proj(x[0, 0], 2)", r"argument `x` of `proj` is f32\[\.\.\., N, I\] \(of 2 dims or "
                         r"more\), got f32\[3\]"),
    ("proj(i32(x), 2)", r"argument `x` of `proj` is f32\[\.\.\., N, I\], got i32\[T, B, 3\]"),
    ("gate(x, x[:, :, 0:2])", r"argument `b` of `gate` is f32\[\.\.\., K\], here "
                              r"f32\[T, B, 3\], got f32\[T, B, 2\]: dim 2 differs"),
])
def test_a_functions_leading_dims_are_checked_at_each_call(expr, message):
    with pytest.raises(MdlError, match=message):
        check_source(LEADING + f"  output y = {expr}\n}}")


def test_hyper_parameters_arithmetic_and_overrides():
    src = "model M(H = 8, K = H / 2, D = 2 * K + 1) { input x : f32[B]; output y = zeros[D] }"
    assert str(check_source(src).graph.outputs["y"].type) == "f32[9]"
    assert str(check_source(src, defines={"H": 4}).graph.outputs["y"].type) == "f32[5]"


def test_dtype_f64_turns_every_float_into_f64():
    src = "model M() { input x : f32[B]; param w : f32[3]; output y = sum(x) * sum(w) }"
    cm = check_source(src, dtype="f64")
    assert str(cm.graph.outputs["y"].type) == "f64"
    assert str(cm.graph.params["w"].value.type) == "f64[3]"


def test_an_integer_constant_cast_to_a_float_is_that_float():
    """f32(2 ** 31) went through i32 first: "the integer 2147483648 does not fit in i32"."""
    cm = check_source("model M() { input x : f32[3]; output y = x + f32(2 ** 31) }")
    fills = [op.attrs["value"] for op in cm.graph.body.ops if op.prim == "full"]
    assert fills == [2**31] and str(cm.graph.outputs["y"].type) == "f32[3]"
    f64 = check_source("model M() { input x : f32[3]; output y = x + f32(2 ** 31) }",
                       dtype="f64")
    assert str(f64.graph.outputs["y"].type) == "f64[3]"


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_a_float_and_an_int_number_meeting_in_a_builtin_are_floats(dtype):
    """QA: `where(c, 0.5, 1)` and `maximum(0.5, 1)` were refused ("operands of one dtype,
    got f32 and i32"), while `0.5 + 1` is 1.5: numbers are weakly typed."""
    import numpy as np
    from codegen.reference import interpreter
    src = ("model M() { input x : f32[3]; output a = where(x > 0.0, 0.5, 1) * x; "
           "output b = maximum(0.5, 1) * x; output c = minimum(2, 0.25) + x }")
    graph = check_source(src, dtype=dtype).graph
    x = np.array([-1.0, 2.0, 4.0], {"f32": np.float32, "f64": np.float64}[dtype])
    out = interpreter.run(graph, {"x": x}, {})
    assert out["a"].tolist() == [-1.0, 1.0, 2.0] and out["b"].tolist() == x.tolist()
    assert out["c"].tolist() == [-0.75, 2.25, 4.25]
    assert {str(graph.outputs[k].type) for k in "abc"} == {f"{dtype}[3]"}


def test_scope_attributes_are_inherited_and_overridden():
    src = """
model M() {
  input x : f32[B, 4]
  scope enc (init = uniform(-0.1, 0.1), regularizer = l2(1e-4), trainable = false) {
    param a : f32[4]
    scope inner (trainable = true) { param b : f32[4] = ones }
  }
  param c : f32[4, 4]
  param d : f32[4]
  output y = sum(x * a + x * b) + sum(x @ c + d)
}"""
    params = check_source(src).graph.params
    a, b, c, d = (params[k] for k in ("enc/a", "enc/inner/b", "c", "d"))
    assert (str(a.init), a.trainable, str(a.regularizer)) == ("uniform(-0.1, 0.1)", False,
                                                             "l2(0.0001)")
    assert (str(b.init), b.trainable, str(b.regularizer)) == ("ones", True, "l2(0.0001)")
    assert (str(c.init), str(d.init), c.regularizer) == ("xavier", "zeros", None)


def test_paths_name_parameters_searching_outward():
    src = """
model M() {
  input ids : i32[B]
  scope embed { param table : f32[10, 4] }
  scope dec { scope deeper { e = embed.table[ids] } }
  output y = sum(e)
}"""
    assert "embed/table" in check_source(src).graph.params


def test_imports_resolve_relative_then_std_and_allow_cycles(tmp_path):
    (tmp_path / "a.mdl").write_text('import "b.mdl"\ndef fa(x : f32[N]) -> f32[N] '
                                    '{ return fb(x) * 2.0 }')
    (tmp_path / "b.mdl").write_text('import "a.mdl"\nimport "std/rnn.mdl"\n'
                                    'def fb(x : f32[N]) -> f32[N] { return x + 1.0 }')
    main = tmp_path / "main.mdl"
    main.write_text('import "a.mdl"\nmodel M() { input x : f32[B, 3]\n'
                    '  output y = fa(sum(x, axis = 1)) + sum(linear(x, 2), axis = 1) }')
    from dsl import check_file
    cm = check_file(str(main))
    assert set(cm.graph.params) == {"linear/W", "linear/b"}


def test_an_import_of_a_folder_says_it_is_one(tmp_path):
    """QA: `import "sub"` of a folder beside the file said "cannot find `sub`"."""
    (tmp_path / "sub").mkdir()
    main = tmp_path / "main.mdl"
    main.write_text('import "sub"\nmodel M() { input x : f32[B]; output y = x }')
    from dsl import check_file
    with pytest.raises(MdlError, match=re.escape(f"`sub` is a folder in {tmp_path}: an "
                                                 "import names a file")):
        check_file(str(main))


def test_a_function_defined_in_two_files_is_an_error(tmp_path):
    (tmp_path / "a.mdl").write_text("def f(x : f32[N]) -> f32[N] { return x }")
    main = tmp_path / "main.mdl"
    main.write_text('import "a.mdl"\ndef f(x : f32[N]) -> f32[N] { return x }\n'
                    'model M() { input x : f32[B]; output y = f(x) }')
    from dsl import check_file
    with pytest.raises(MdlError, match="function `f` is defined twice"):
        check_file(str(main))


def test_constant_if_conditions_select_a_branch_at_compile_time():
    src = ("model M(DEEP = false) { input x : f32[B]\n"
           "  if DEEP { y = tanh(x) } else { y = x * 2.0 }\n  output z = y }")
    prims = [op.prim for op in check_source(src).graph.body.ops]
    assert "tanh" not in prims and "if" not in prims
    prims = [op.prim for op in check_source(src, defines={"DEEP": True}).graph.body.ops]
    assert "tanh" in prims


def test_loop_state_and_yields_become_for_outputs():
    src = """
model M(H = 3) {
  input xs : f32[T, B, H]; input n : i32[B]
  h = zeros[B, H]; s = 0.0
  hs, gs = for x in reversed(xs) (lengths = n, checkpoint = 2) {
    h = tanh(x + h)
    yield h, 2.0 * h
  }
  output a = hs; output b = h
}"""
    g = check_source(src).graph
    loop = next(op for op in g.body.ops if op.prim == "for")
    assert loop.attrs == {"n_seq": 1, "n_state": 1, "reversed": True, "has_lengths": True,
                          "recompute": False, "checkpoint": 2}
    assert [str(v.type) for v in loop.outputs] == ["f32[B, 3]", "f32[T, B, 3]", "f32[T, B, 3]"]


def test_a_redeclaration_asking_for_other_attributes_is_warned():
    src = ("model M() { input x : f32[B, 3]\n  param w : f32[3] = ones\n"
           "  scope s { w2 = 1.0 }\n  param w : f32[3] = zeros\n  output y = sum(x * w) }")
    warnings = [w.message for w in check_source(src).warnings]
    assert warnings == ["parameter `w` is declared again with init zeros, trainable true, "
                        "regularizer none; the first declaration's (ones, true, none) applies"]


def test_a_redeclaration_by_a_function_names_its_two_calls():
    """QA: a function's `param` reached again from a scope of other attributes was warned
    at the `param` line, with a note pointing at that same line: the calls are named."""
    src = ("def f(x : f32[N]) -> f32[N] { param w : f32[N]; return x * w }\n"
           "model M() {\n  input x : f32[3]\n  scope a (regularizer = l2(0.5)) { y = f(x) }\n"
           "  scope a { y = f(y) }\n  output l = sum(y)\n  minimize l\n}\n")
    [warning] = check_source(src).warnings
    assert "is declared again" in warning.message
    assert (warning.loc.line, warning.loc.col) == (5, 17)
    assert [(text, loc.line, loc.col) for text, loc in warning.notes] == [
        ("the declaration, in the function", 1, 37), ("first declared by the call here", 4, 41)]


def test_a_loop_runs_over_an_indexing_of_a_variable():
    graph = check_source("""
model M(V = 5, E = 3) {
  input tokens : i32[T, B]
  param embedding : f32[V, E] = normal(0, 1)
  s = zeros[B, E]
  for x in embedding[tokens] { s = s + x }
  ys = for y in reversed(embedding[tokens][:, :, 0:2]) { yield y }
  output total = sum(s) + sum(ys)
}""", "t.mdl").graph
    assert graph.outputs["total"].type.rank == 0


def test_sizes_the_call_binds_are_not_refused_when_compiling():
    """Only a size known when compiling must be positive: T may be 0 in a call, and a
    size made by subtracting is checked when the model is called."""
    cm = check_source("model M() { input x : f32[T]; a = zeros[T - 30]; b = range(1, T)\n"
                      "  output y = sum(x) + sum(a) + f32(sum(b)) + sum(full[T, 2](0.5)) }")
    assert str(cm.graph.outputs["y"].type) == "f32"


@pytest.mark.parametrize("path, model, tokens", [
    ("charlm.mdl", "CharLM", "lengths"), ("attention.mdl", "Translator", "target_lengths"),
    ("bidirectional.mdl", "BiTagger", "lengths"),
    # a `lengths` input, but a mean over rows: DataParallel once weighed these by tokens
    ("gru.mdl", "GRUClassifier", None), ("tagger.mdl", "Tagger", None),
    ("recognizer.mdl", "Recognizer", None), ("towers.mdl", "Towers", None)])
def test_the_loss_names_the_input_counting_its_tokens(path, model, tokens):
    """Graph.loss_tokens (a model's `loss_tokens`, what data-parallel shards weigh by)."""
    from dsl.check import SourceFile
    examples = Path(__file__).parents[1] / "examples"
    assert SourceFile(examples / path).check(model=model).graph.loss_tokens == tokens


@pytest.mark.parametrize("loss, tokens", [
    ("cross_entropy(x, t, lengths = L)", "L"),
    ("cross_entropy(x, t, lengths = L, label_smoothing = 0.1)", "L"),
    ("cross_entropy(x, t)", None),
    ("cross_entropy(x, t, lengths = L) + 0.1 * sum(x)", None),  # not a token mean
    ("cross_entropy(x, t, lengths = L + 0)", None)])  # not an input
def test_only_a_token_mean_over_an_input_names_it(loss, tokens):
    src = ("model M() { input x : f32[T, B, 5]; input t : i32[T, B]; input L : i32[B]; "
           f"output loss = {loss}; minimize loss }}")
    assert check_source(src).graph.loss_tokens == tokens


@pytest.mark.parametrize("loss, dims", [
    ("cross_entropy(x, t)", ("T", "B")),
    ("cross_entropy(x[0], t[0], label_smoothing = 0.1)", ("B",)),
    ("cross_entropy(x, t, lengths = L)", None),  # a mean over tokens: loss_tokens
    ("mean(r)", ("B",)), ("mean(r, axis = 0)", ("B",)), ("mean(x)", ("T", "B")),
    ("mse(x, y)", ("T", "B")), ("mean(x[1:])", None),  # T - 1: not one name
    ("mean(h)", ("B",)),  # the hyper-parameter's dim left out
    ("mean(full[4](1.0))", ()),
    ("0.5 * mean(r)", None), ("sum(r) / 4.0", None), ("mean(r) + mean(r)", None)])
def test_the_loss_names_the_dims_it_is_a_mean_over(loss, dims):
    """Graph.loss_mean_dims (a model's `loss_mean_dims`: which of the shards' sizes
    data-parallel training weighs them by)."""
    src = ("model M(H = 3) { input x : f32[T, B, 5]; input y : f32[T, B, 5]; "
           "input t : i32[T, B]; input L : i32[B]; input r : f32[B]; h = zeros[B, H] + 1.0; "
           f"output loss = {loss}; minimize loss }}")
    assert check_source(src).graph.loss_mean_dims == dims


SHARE = """model M(V = 10, H = 4) {
  input ids : i32[B]
  share (PAIR) {
    scope enc { param table : f32[V, H] = normal(0, 1); x = table[ids] }
    scope dec { param table : f32[V, H]; y = x @ transpose(table) }
  }
  output loss = mean(y)
}"""


@pytest.mark.parametrize("pair, warning", [
    ("dec = enc", None),
    ("dec = encodr", "`share (dec = encodr)` ties `dec`'s parameters to no other: none outside "
                     "it is under `encodr`; did you mean `enc`?"),
    ("decc = enc", "`share (decc = enc)` maps no parameter: none inside the block is declared "
                   "under `decc`"),
    ("dec = shared", None),  # a rename (another model's names): no scope of a close name
])
def test_a_share_that_ties_nothing_is_warned_of(pair, warning):
    """QA: `share (dec = encodr)`, a typo, checked without a word and trained `dec`'s
    table apart from `enc`'s: a mapping that maps nothing, or ties nothing where a scope
    of a close name holds parameters, is a warning (the model still checks)."""
    checked = check_source(SHARE.replace("PAIR", pair))
    said = [(w.message, w.loc.line, w.loc.col) for w in checked.warnings]
    assert said == ([] if warning is None else [(warning, 3, 10)])
    assert len(checked.graph.params) == (1 if pair == "dec = enc" else 2)
