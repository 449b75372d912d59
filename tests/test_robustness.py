"""The checker answers any input with success or located diagnostics: never a traceback,
never a RecursionError, however broken, deep or long the input is; and what it accepts,
the later stages compile or refuse with located diagnostics too."""
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen.compile.options import BuildOptions
from codegen.pipeline import sources
from dsl import MdlError, UsageError, check_source
from dsl.calls import MAX_INLINED_CALLS

SEEDS = [
    """import "std/rnn.mdl"
model CharLM(V = 16, E = 8, H = 12) {
  input tokens : i32[T, B]; input targets : i32[T, B]; input lengths : i32[B]
  param embed : f32[V, E] = uniform(-0.1, 0.1)
  h = zeros[B, H]; c = zeros[B, H]
  hs = for x in embed[tokens] (lengths = lengths) { h, c = lstm(x, h, c); yield h }
  logits = reshape(linear(reshape(hs, [T * B, H]), V), [T, B, V])
  output loss = cross_entropy(logits, targets, lengths = lengths)
  minimize loss
}""",
    """def fc(x : f32[N, I], out : int) -> f32[N, out] {
  param W : f32[I, out] = normal(0, 0.1)
  param b : f32[out] = zeros
  return sigmoid(x @ W + b)
}
model Towers() {
  input a1 : f32[8, 20]; input a2 : f32[8, 20]
  scope fc0 { o1 = fc(a1, 20) as level0 }
  share (fc1 = fc0) { scope fc1 { o2 = fc(a2, 20) as level0 } }
  output s = sum(o1 + o2)
  minimize s
}""",
    """model Control(H = 4) {
  input xs : f32[T, B, H]
  h = zeros[B, H]; steps = 0
  hs = for x in reversed(xs) (checkpoint = 2) {
    if mean(x) > 0.0 { h = relu(x) + h } else { h = 0.1 * x - h }
    while norm(h) > 1.0 and steps < 10 { h = 0.5 * h; steps = steps + 1 }
    yield h[:, 0:2]
  }
  output y = sum(hs * hs, axis = [0, 1], keepdims = true)
}""",
]

TOKENS = ["(", ")", "{", "}", "[", "]", ",", ";", "=", ".", ":", "+", "-", "*", "/", "//", "%",
          "@", "**", "<", "==", "and", "not", "if", "else", "for", "in", "reversed", "while",
          "yield", "return", "param", "scope", "share", "model", "def", "input", "output",
          "minimize", "as", "x", "h", "T", "B", "H", "0", "1", "2.5", "1e999", "\"s\"", "f32",
          "i32", "zeros", "split", "lstm", "#", "\n", "$", "99999999999"]


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 12)))
        kind = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        if kind == "delete":
            text = text[:i] + text[j:]
        elif kind == "insert":
            text = text[:i] + " " + draw(st.sampled_from(TOKENS)) + " " + text[i:]
        elif kind == "replace":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[j:]
        else:
            text = text[:i] + text[i:j] + text[i:]
    return text


def answers_cleanly(text: str) -> None:
    try:
        check_source(text, "fuzz.mdl")
    except MdlError as exc:
        assert exc.diagnostics and all(d.loc is not None for d in exc.diagnostics)
        assert all(d.loc.line >= 1 and d.loc.col >= 1 for d in exc.diagnostics)
        exc.render()
    except UsageError as exc:  # only a request the command line must disambiguate
        assert "several models" in str(exc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_programs_get_success_or_located_diagnostics(text):
    answers_cleanly(text)


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_arbitrary_text_gets_success_or_located_diagnostics(text):
    answers_cleanly(text)


EXAMPLES = [p.read_text() for p in
            sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.mdl"))]
WORD = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d*)?(?:e-?\d+)?")
FIRST_MODEL = re.compile(r"^model\s+(\w+)", re.MULTILINE)


@st.composite
def edited(draw):
    """A seed or an example with one to three of its words or numbers replaced by another
    of its words or a small number: often still a well-typed program, of another meaning."""
    text = draw(st.sampled_from(SEEDS + EXAMPLES))
    for _ in range(draw(st.integers(1, 3))):
        words = list(WORD.finditer(text))
        spot = draw(st.sampled_from(words))
        new = draw(st.sampled_from(sorted({w.group() for w in words})
                                   + ["0", "1", "2", "0.5", "1e30"]))
        text = text[:spot.start()] + new + text[spot.end():]
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edited())
def test_edited_programs_that_check_also_compile(text):
    """What the checker accepts, the later stages compile (autodiff, the passes, lowering
    and both targets' code, a vjp build's too), or refuse with a located diagnostic: never
    an internal error (mdlc's exit status 3)."""
    model = FIRST_MODEL.search(text)
    options = {"model": model.group(1) if model else None}
    try:
        check_source(text, "edited.mdl", **options)
    except (MdlError, UsageError):
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "edited.mdl"
        path.write_text(text)
        for target, vjp in (("cpu", False), ("cuda", True)):
            try:
                sources(path, "edited", BuildOptions(target=target, vjp=vjp, **options))
            except MdlError as exc:
                assert exc.loc is not None, exc.render()
                return


N = 20000
DEEP = {
    "unary": "model M() { input x : f32[B]; output y = " + "-" * N + "x }",
    "left-sum": "model M() { input x : f32[B]; output y = " + "x+" * N + "x }",
    "power": "model M() { input x : f32[B]; output y = " + "x**" * N + "x }",
    "lists": "model M() { input x : f32[B]; output y = " + "[" * N + "x" + "]" * N + " }",
    "calls": "model M() { input x : f32[B]; output y = " + "tanh(" * N + "x" + ")" * N + " }",
    "blocks": "model M() { input x : f32[B]; c = sum(x) > 0.0; " + "if c { " * N + "y = x"
              + " }" * N + " output y = x }",
    "unclosed": "model M() { input x : f32[B]; output y = " + "(" * N,
}


@pytest.mark.parametrize("name", list(DEEP))
def test_deep_inputs_end_in_a_diagnostic(name):
    with pytest.raises(MdlError) as info:
        check_source(DEEP[name], "deep.mdl")
    assert info.value.loc is not None


def test_deep_parentheses_and_long_files_check():
    check_source("model M() { input x : f32[B]; output y = " + "(" * N + "x" + ")" * N + " }")
    check_source("model M() { input x : f32[B]; " + "y = x * 2.0; " * 5000 + "output z = y }")


def test_a_doubling_chain_of_calls_stops_at_the_inlining_limit():
    """f{k}(a) = f{k-1}(f{k-1}(a)): calling f12 inlines 8191 calls, each level twice the
    last; the call past the limit is the error, found long before the whole chain is."""
    defs = ["def f0(a : f32[N]) -> f32[N] { return a * 2.0 }"] + [
        f"def f{k}(a : f32[N]) -> f32[N] {{ return f{k - 1}(f{k - 1}(a)) }}"
        for k in range(1, 13)]
    source = "\n".join(defs + ["model M() { input x : f32[3]; output y = sum(f12(x)) }"])
    with pytest.raises(MdlError) as info:
        check_source(source, "chain.mdl")
    first = info.value.diagnostics[0]
    assert first.message.startswith(f"this call of `f4` takes the model past "
                                    f"{MAX_INLINED_CALLS} inlined calls")
    assert (first.loc.line, first.loc.col) == (6, 42) and len(info.value.diagnostics) == 1
