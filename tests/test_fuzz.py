"""The differential fuzzer (tests/fuzz_programs.py) in the suite: a fixed list of seeds,
each one module of small random programs built natively in f64 and compared with the
reference interpreter, forward outputs and every gradient; one more seed's built for the
cuda target and run on the emulated device, one in f32, one with `vjp` (a backward
given random cotangents) and one under AddressSanitizer and UBSan. Each open compiler bug the
fuzzer found is kept as its minimal program, an expected failure (strict: a fix makes
it pass, and it then moves out of BUGS), so the suite stays green and the bug visible.
A fixed-seed program that runs into an open bug is marked the same way, naming it. The
longer run's command and result are in docs/testing.md."""
from __future__ import annotations

import dataclasses
import re
import zlib

import fuzz_compare
import fuzz_programs as fuzz
import numpy as np
import pytest
from fuzz_compare import PRECISIONS, ROWS, case_dims, compare
from fuzz_expressions import ARITH, COMPARE, REDUCTIONS, SOFTMAXES, UNARY
from fuzz_generate import generate
from fuzz_integers import INT_BINARY, INT_REDUCTIONS, INT_UNARY
from fuzz_source import smaller
from optimizer_reference import CONFIGS, Reference

from codegen import MdlWarning
from codegen.compile.sanitizers import has_runtime
from codegen.ops.primitives import TABLE
from codegen.ops.printer import format_graph
from codegen.pipeline import BuildOptions, import_built, load
from codegen.reference import interpreter as reference
from dsl import MdlError, check_source
from dsl.formulas import ACTIVATIONS

SEEDS = (0, 1)      # seed 0's module is specialized for T=4, B=3, seed 1's is not
PER_SEED = 11
EMULATED_SEED = 21  # its programs run as the cuda target's code on the emulated device
EMULATED = 11
F32_SEED = 3        # built in f32, compared at PRECISIONS["f32"]
VJP_SEED = 4        # built in f64 with vjp: backward(**cotangents)
PER_MODE = 11
SANITIZED_SEED = 6  # built under AddressSanitizer and UBSan
SANITIZED = 6

# Open compiler bugs the fuzzer found, each as the smallest program that shows it.
BUGS: dict[str, str] = {}

# Compiler bugs the fuzzer found and that are fixed: their programs stay, and must match.
FIXED = {
    "matmul-of-a-broadcast": """
# The backward of `@` whose cotangent is a broadcast view (the gradient of
# sum(..., axis = 1) here) gave garbage dx and dw: GEMM read the view's repeated rows
# with a leading dimension of its row length. A broadcast operand is now copied.
model MatmulOfABroadcast() {
  input x : f32[3, 3]
  input v : f32[3]
  param w : f32[3, 3] = uniform(-0.5, 0.5)
  output loss = sum(sum(x @ w, axis = 1) * v)
  minimize loss
}
""",
    "while-in-a-for": """
# A while inside a for: wrong gradients, or the process died (free(): invalid next
# size): the backward re-runs the while at every step, and values sized by its trip
# count had arena slots sized when the function started (scratch buffers now), and
# per-step values of that size were stacked as if every step ran as many trips.
model WhileInAFor() {
  input xs : f32[T, B, 3]
  param w : f32[3, 2] = normal(0, 0.5)
  param u : f32[2, 2] = normal(0, 0.5)
  h = zeros[B, 2]
  for e in xs {
    k = 0
    while k < 3 {
      h = tanh((e @ w) + (h @ u))
      k = k + 1
    }
  }
  output loss = mean(h)
  minimize loss
}
""",
    "slice-of-a-constant": """
# A slice of zeros[...] (a constant the backend keeps no memory for) as an operand:
# the generated C++ did not compile. A view of a constant now materializes it.
model SliceOfAConstant() {
  input x : f32[B, 2]
  h = zeros[4]
  y = where(x < 0.0, x, h[0:2])
  output loss = sum(y)
  minimize loss
}
""",
    "split-of-a-broadcast": """
# stack's gradient (a split) of mean's (a broadcast of a constant): IndexError in
# the lowering of the split view; the same fix as slice-of-a-constant.
model SplitOfABroadcast() {
  input x : f32[B, 3]
  y = mean(stack([x, x], axis = 1), axis = 1)
  output loss = sum(y)
  minimize loss
}
""",
    "state-overwritten-by-an-invariant": """
# Loop state overwritten at every step by loop-invariant values (h = tanh(x), then
# g = sin(h)): the training forward's loss was wrong (-0.313 for -0.281 at x = [0.3,
# -0.7]). The loop reads no old h, so the memory plan freed h's buffer at the loop's
# start and gave it to g's step value; a loop's outputs now live until the loop ends.
# Found by `fuzz_programs.py --seed 2 --size large` (Large2_57), shrunk by hand.
model StateOverwrittenByAnInvariant() {
  input x : f32[2]
  input xs : f32[T, 2]
  h = exp(x)
  g = zeros[2]
  for e in xs {
    h = tanh(x)
    g = sin(h)
  }
  output loss = sum(g)
  minimize loss
}
""",
    "doubles-permuted-across-lanes": """
# An f64 module specialized to B = 3: x0's gradient had one element 8.6x off. The
# backward's mask product, a vectorized loop of nine doubles, is read back row by row
# for the concatenation's parts, and GCC 12.2 (-O3, AVX-512) made that one vpermilpd,
# which cannot cross 128-bit lanes. f64 modules now vectorize at 256 bits
# (cpp_runtime/mdl/f64_vectors.h). Found by the fuzzer (seed 751, large, Large751_6).
model DoublesPermutedAcrossLanes() {
  input x0 : f32[T, B, 2]
  input x5 : f32[B, 1]
  input c : f32
  param U : f32[2, 2] = uniform(-0.5, 0.5)
  h1 = zeros[B, 2]
  h1 = tanh(x0[0] + h1 @ U)
  q0 = zeros[B, 3]
  if c >= 0.5 {
    q0 = q0 + 1.0
  } else {
    q0 = q0 + dropout(concat([h1, x5], axis = 1), 0.1)
  }
  output loss = mean(q0 * q0)
  minimize loss
}
""",
    "a-loop-over-a-whole-sequence-in-a-loop": """
# A loop nested in another that reads a whole sequence (xs), not the step (e): loop
# fission moved it out before the outer loop as a loop of its own over the sequences
# the moved ops read: none, so it had no trip count, and the next pass failed
# (IndexError: list index out of range). The moved loop now iterates over one of the
# outer loop's sequences. Found by `fuzz_programs.py --seed 141` (Small141_25).
model ALoopOverAWholeSequenceInALoop() {
  input xs : f32[T, B, 2]
  param w : f32[2, 2] = normal(0, 0.5)
  param u : f32[2, 2] = normal(0, 0.5)
  h = zeros[B, 2]
  for e in xs {
    g = zeros[B, 2]
    for f in xs {
      g = tanh((f @ w) + g)
    }
    h = tanh((g @ u) + (h @ w))
  }
  output loss = mean(h)
  minimize loss
}
""",
}

@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fuzz")
    found = {}
    for seed in SEEDS:
        found.update(fuzz.run(fuzz.programs(seed, PER_SEED), directory, specialize=seed == 0))
    return found


@pytest.mark.parametrize("seed, index", [(s, i) for s in SEEDS for i in range(PER_SEED)])
def test_native_code_matches_the_reference(outcomes, seed, index):
    program = generate(seed, index)
    outcome = outcomes[program.name]
    assert outcome.ok, f"{outcome.kind}: {outcome.detail}\n{program.source()}"


def test_some_calls_are_refused_alike(outcomes):
    """Asserts in loop and branch bodies that bound input data (`assert:falsifiable`)
    fail on some calls of these programs: each such build raised the reference's error
    word for word (the step or trip, the flat position), or it would not be ok."""
    refused = sorted(name for name, o in outcomes.items() if o.kind == "refused")
    assert refused, "no call failed an assert: the fuzzer's asserts check nothing here"


@pytest.fixture(scope="module")
def emulated_outcomes(tmp_path_factory):
    """A module of random programs for the cuda target, run on the emulated device with a
    block's threads in reverse order and every kernel on fibers."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MDL_CUDA_EMULATOR", "order=reverse,fibers")
        return fuzz.run(fuzz.programs(EMULATED_SEED, EMULATED),
                        tmp_path_factory.mktemp("fuzz-emulated"), target="cuda", emulate=True)


@pytest.mark.parametrize("index", range(EMULATED))
def test_the_cuda_targets_code_matches_the_reference_on_the_emulated_device(
        emulated_outcomes, index):
    program = generate(EMULATED_SEED, index)
    outcome = emulated_outcomes[program.name]
    assert outcome.ok, f"{outcome.kind}: {outcome.detail}\n{program.source()}"


@pytest.fixture(scope="module")
def mode_outcomes(tmp_path_factory):
    """The f32 module's and the vjp module's outcomes, by mode."""
    directory = tmp_path_factory.mktemp("fuzz-modes")
    return {"f32": fuzz.run(fuzz.programs(F32_SEED, PER_MODE), directory, dtype="f32"),
            "vjp": fuzz.run(fuzz.programs(VJP_SEED, PER_MODE), directory, specialize=False,
                            vjp=True)}


@pytest.mark.parametrize("mode, seed, index", [(m, s, i) for m, s in (("f32", F32_SEED),
                                                                      ("vjp", VJP_SEED))
                                               for i in range(PER_MODE)])
def test_f32_and_vjp_builds_match_the_reference(mode_outcomes, mode, seed, index):
    program = generate(seed, index)
    outcome = mode_outcomes[mode][program.name]
    assert outcome.ok, f"{outcome.kind}: {outcome.detail}\n{program.source()}"


def test_vjp_programs_train_through_the_pytorch_bridge(mode_outcomes, tmp_path):
    """Seed 4's vjp programs (already compared natively, in child processes, by
    mode_outcomes) wrapped by codegen.pytorch.as_module and differentiated by PyTorch's
    autograd, a call replayed before its backward: every parameter's and float input's
    .grad against the reference (tests/fuzz_torch.py)."""
    pytest.importorskip("torch", reason="the PyTorch bridge needs PyTorch")
    from fuzz_source import module_source
    from fuzz_torch import compare_torch
    progs = fuzz.programs(VJP_SEED, PER_MODE)
    assert all(mode_outcomes["vjp"][p.name].ok for p in progs)
    path, name, options = fuzz.build(module_source(progs), tmp_path, [], vjp=True)
    module = import_built(path, name, options)
    for p in progs:
        graph = check_source(p.source(), model=p.name, dtype="f64").graph
        outcome = compare_torch(module, p.name, graph, case_dims(p.seed)[1], p.lengths,
                                p.seed % 1000)
        assert outcome.ok, f"{outcome.kind}: {outcome.detail}\n{p.source()}"


@pytest.fixture(scope="module")
def sanitized_outcomes(tmp_path_factory):
    """A module of random programs built under AddressSanitizer and UBSan, compared in a
    process with the sanitizer runtime preloaded: a report would end it (a crash)."""
    if not has_runtime():
        pytest.skip("this compiler ships no AddressSanitizer runtime")
    return fuzz.run(fuzz.programs(SANITIZED_SEED, SANITIZED), tmp_path_factory.mktemp(
        "fuzz-sanitized"), sanitize=True)


@pytest.mark.parametrize("index", range(SANITIZED))
def test_random_programs_run_clean_under_sanitizers(sanitized_outcomes, index):
    program = generate(SANITIZED_SEED, index)
    outcome = sanitized_outcomes[program.name]
    assert outcome.ok, f"{outcome.kind}: {outcome.detail}\n{program.source()}"


ASAN = ("==1==ERROR: AddressSanitizer: heap-buffer-overflow\nSUMMARY: AddressSanitizer: "
        "heap-buffer-overflow module.cpp:7 in f\n==1==ABORTING\n", "os.abort()", -6,
        "SUMMARY: AddressSanitizer: heap-buffer-overflow module.cpp:7 in f")
UBSAN = ("module.cpp:12:5: runtime error: signed integer overflow: 2147483647 + 1 cannot "
         "be represented in type 'int'\n    #0 0x7f in f module.cpp:12\n    #1 0x7f in "
         "_start\n", "sys.exit(1)", 1,
         "module.cpp:12:5: runtime error: signed integer overflow: 2147483647 + 1 cannot "
         "be represented in type 'int'")


@pytest.mark.parametrize("report", [ASAN, UBSAN], ids=["asan", "ubsan"])
def test_a_process_that_a_sanitizer_ends_is_a_crash_with_its_summary(tmp_path, monkeypatch,
                                                                      report):
    """What a sanitizer's report looks like to the fuzzer: the comparing process dies and
    the outcome names the report's line that says what happened: ASan's SUMMARY, UBSan's
    `runtime error:` (its halting report ends in a stack, not a summary). Here a process
    writes such a report and dies, standing in for the sanitizer."""
    text, death, status, said = report
    script = f"import os, sys; sys.stderr.write({text!r}); sys.stderr.flush(); {death}"
    real = fuzz.subprocess.Popen

    def child(args, **kwargs):
        return real([args[0], "-c", script], **kwargs)
    monkeypatch.setattr(fuzz.subprocess, "Popen", child)
    outcomes = {}
    fuzz.compare_apart(("x.mdl", "x", BuildOptions()), [("M", "", frozenset(), 0)], outcomes)
    assert outcomes["M"].kind == "crash"
    assert outcomes["M"].detail == f"the process comparing it died (exit status {status}: {said})"


def test_rows_bound_the_second_cases_batch(capsys):
    """`--rows N` draws the second case's B from 1 to N (3 by default): larger batches
    reach the kernels that work in blocks of rows and split work over the threads."""
    default = {case_dims(seed)[1]["B"] for seed in range(60)}
    wide = {case_dims(seed, 300)[1]["B"] for seed in range(60)}
    assert default == set(range(1, ROWS + 1)) and max(wide) <= 300 and min(wide) >= 1
    assert len([b for b in wide if b > 64]) > 30  # most past the kernels' old limit
    with pytest.raises(SystemExit) as exit_info:
        fuzz.main(["--rows", "0"])
    assert exit_info.value.code == 2 and "--rows must be at least 1" in capsys.readouterr().err


def test_a_model_that_never_ends_is_a_hang_and_the_others_go_on(monkeypatch):
    """serve() arms SIGALRM for MODEL_LIMIT_S per model, whose default action ends the
    process (native code that never returns could run no handler): the model is a hang,
    and the next one runs in a new process. Here the first process stands in for a
    hanging one; the second reports its model."""
    script = ["import signal, time; signal.alarm(1); time.sleep(60)",
              "import os, pickle, sys; pickle.load(sys.stdin.buffer); "
              "out = os.fdopen(int(sys.argv[1]), 'wb'); "
              "pickle.dump(('N', 'ok', ''), out); out.flush()"]
    real = fuzz.subprocess.Popen

    def child(args, **kwargs):
        fd = args[-1].split("serve(")[1].rstrip(")")
        return real([args[0], "-c", script.pop(0), fd], **kwargs)
    monkeypatch.setattr(fuzz.subprocess, "Popen", child)
    outcomes = {}
    fuzz.compare_apart(("x.mdl", "x", BuildOptions()),
                       [("M", "", frozenset(), 0), ("N", "", frozenset(), 0)], outcomes)
    assert outcomes["M"].kind == "hang" and str(fuzz.MODEL_LIMIT_S) in outcomes["M"].detail
    assert outcomes["N"].kind == "ok"


@pytest.mark.parametrize("bug", sorted(BUGS))
@pytest.mark.xfail(strict=True, reason="an open compiler bug the fuzzer found")
def test_open_bug(bug, tmp_path):
    outcome = fuzz.run_text(BUGS[bug], tmp_path)
    assert outcome.ok, f"{outcome.kind}: {outcome.detail}"


@pytest.mark.parametrize("bug", sorted(FIXED))
def test_a_fixed_bug_stays_fixed(bug, tmp_path):
    outcome = fuzz.run_text(FIXED[bug], tmp_path)
    assert outcome.ok, f"{outcome.kind}: {outcome.detail}"


def test_the_generator_reaches_every_construct_and_primitive():
    """Over two hundred programs (checked, not built): every one is accepted, every
    construct is drawn and every primitive the generator reads from the table is in a
    graph. (A shared call site is the rarest construct: 0 to 3 in a hundred.)"""
    constructs, prims, rejected = fuzz.coverage(fuzz.programs(0, 100) + fuzz.programs(1, 100))
    assert rejected == []
    drawn = {"for", "for:lengths", "for:reversed", "for:recompute", "for:checkpoint",
             "for:nested", "for:zip", "for:rows", "for:gather", "for:yield", "if", "if:else",
             "if:step", "if:else-if", "for:steps", "for:range-from", "if:joined", "while",
             "while:nested",
             "while:in-for", "while:in-if-in-for", "while:in-if", "while:in-for-in-if",
             "while:in-while", "assert", "assert:in-for", "assert:in-if", "assert:in-while",
             "assert:falsifiable",
             "matmul:variable", "matmul:batched",
             "scope", "scope:attrs",
             "share", "param:shared", "param:in-loop", "call", "call:shared", "state",
             "lstm", "gru", "milstm", "linear", "broadcast", "keepdims", "dropout",
             "static-if", "hyper:dim", "hyper:value", "call:int", "call:scalar-constant",
             "call:scalar-tensor", "call:tuple", "call:leading-dims", "dim:S", "reshape:rows", "concat:time",
             "int:float", "int:cast", "int:truth", "int:compare", "int:branch", "int:where",
             "int:update", "int:output", "int:neg", "int:clip", "int:argmax", "int:argmin",
             "int:topk", *ACTIVATIONS,
             "topk", "for:ints", "cross_entropy:smoothing",
             "for:int-yield", "for:bool-yield", "bool:output", "softmax:masked",
             "swapaxes", "swapaxes:same", "swapaxes:negative", "call:any-rank",
             "call:any-rank-number", "call:shared-leading-dims", "call:no-leading-dims",
             "call:attention-leading-dims", "call:two-ranks", "if:guard", "if:guard-chain",
             "if:guard-and", "if:guard-loop",
             *(f"int:{f}" for f in INT_BINARY + INT_UNARY + INT_REDUCTIONS)}
    assert drawn - set(constructs) == set()
    table = {*(u for u in UNARY if u in TABLE), *ARITH, *COMPARE, *SOFTMAXES, *(r for r in REDUCTIONS if r in TABLE),
             "matmul", "bmm", "concat", "stack", "split", "reshape", "transpose", "index", "slice",
             "gather", "one_hot", "cross_entropy", "argmax", "topk", "where", "for", "if",
             "while"}
    assert table - set(prims) == set()


def overridden(value):
    """Another value of a hyper-parameter's kind: what `-D` sets in the test below."""
    if isinstance(value, bool):
        return not value
    return value + 1 if isinstance(value, int) else value * 0.5


def checked(text: str, name: str, defines: dict) -> str:
    """A model's checked graph as IR text, its values numbered in order of appearance
    (ids count on across checks), or its diagnostic's message."""
    try:
        ir = format_graph(check_source(text, model=name, defines=defines).graph)
    except MdlError as e:
        return "error: " + e.message
    numbers: dict[str, str] = {}
    return re.sub(r"%\w+", lambda m: numbers.setdefault(m[0], f"%{len(numbers)}"), ir)


def test_an_override_checks_as_the_same_default_written_in_the_source_would():
    """`-D K=V` (`defines=`) on a random program gives the graph, or the error, that the
    program with `K = V` written as K's default gives; hyper-parameters derived from K (G =
    W0 * W0 - 1) follow it, and a compile-time `if` on a flag takes its other branch."""
    seen = 0
    for program in fuzz.programs(7, 60):
        literal = [k for k, (_, text) in program.hypers.items()
                   if text in ("true", "false") or text.replace(".", "").isdigit()]
        for name in literal:
            value = overridden(program.hypers[name][0])
            text = str(value).lower() if isinstance(value, bool) else repr(value)
            edited = dataclasses.replace(program, hypers={
                **program.hypers, name: (value, text)})
            got = checked(program.source(), program.name, {name: value})
            assert got == checked(edited.source(), program.name, {}), (name, value)
            assert got != checked(program.source(), program.name, {}), (name, value)
            seen += 1
    assert seen > 60


TANH = """
model Tanh() {
  input x : f32[B, 3]
  param w : f32[3, 3] = normal(0, 0.5)
  output loss = sum(tanh(x @ w))
  minimize loss
}
"""


def test_a_reference_off_by_one_part_in_ten_million_is_caught(tmp_path, monkeypatch):
    """The comparison finds real differences: a tanh whose reference is wrong by 1e-7
    (relative) fails, and the blame falls on the backend, since the graphs after the
    passes agree with the (wrong) reference. Compared in this process, where the
    reference is patched."""
    path, name, *_ = fuzz.build(TANH, tmp_path, [])
    module = load(path, dtype="f64", name=name)
    graph = check_source(TANH, model="Tanh", dtype="f64").graph
    assert compare(module, "Tanh", graph).ok
    monkeypatch.setattr(TABLE["tanh"], "ref", lambda ctx, attrs, x: np.tanh(x) * (1 + 1e-7))
    outcome = compare(module, "Tanh", graph)
    assert outcome.kind == "mismatch"
    assert "output loss" in outcome.detail and "the backend differs" in outcome.detail


EMPTY = """
model Empty() {
  input x : f32[B, 3]
  param w : f32[3, 3] = normal(0, 0.5)
  output top = max(x @ w, axis = 0)
  output loss = sum(tanh(x @ w))
  minimize loss
}
"""


def test_a_batch_of_nothing_is_compared_too(tmp_path, monkeypatch):
    """compare() also runs every program with B = 0 (even seeds) or T = 0 (odd ones): the
    max over no rows is -inf on both sides, the loss 0 and the gradients zeros; a
    reference whose max of nothing were 0 disagrees there, and is caught."""
    path, name, *_ = fuzz.build(EMPTY, tmp_path, [])
    module = load(path, dtype="f64", name=name)
    graph = check_source(EMPTY, model="Empty", dtype="f64").graph
    assert compare(module, "Empty", graph, seed=0).ok
    ref = TABLE["max"].ref
    monkeypatch.setattr(TABLE["max"], "ref", lambda ctx, attrs, x: (
        ref(ctx, attrs, x) if np.size(x) else np.zeros(3)))
    outcome = compare(module, "Empty", graph, seed=0)
    assert outcome.kind == "mismatch"
    assert "'B': 0" in outcome.detail and "output top" in outcome.detail


GUARDED = """
model Guarded() {
  input xs : f32[T, B, 3]
  u = mean(xs, axis = 0)
  if T > 2 { u = sum(xs[2:] - xs[:-2], axis = 0) } else if T > 1 { u = max(xs[1:], axis = 0) }
  output loss = mean(u * u)
  minimize loss
}
"""


@pytest.mark.parametrize("seed", [0, 1])
def test_a_size_an_if_on_t_guards_is_compared_at_few_steps(tmp_path, monkeypatch, seed):
    """A program whose `if T > k` guards a size T - k (`few_steps`, k) runs a third case at
    T of 1 to k, and its case of no elements at T = 0 (B = 0 else, on even seeds), where
    the other branch runs: each branch of the chain above is compared."""
    path, name, *_ = fuzz.build(GUARDED, tmp_path, [])
    module = load(path, dtype="f64", name=name)
    graph = check_source(GUARDED, model="Guarded", dtype="f64").graph
    ran = []
    for what in ("compare_case", "compare_empty"):
        original = getattr(fuzz_compare, what)
        monkeypatch.setattr(fuzz_compare, what, lambda model, graph, dims, *rest, f=original: (
            ran.append(dims["T"]), f(model, graph, dims, *rest))[1])
    assert compare(module, "Guarded", graph, seed=seed, few_steps=2).ok
    assert ran[0] == 4 and ran[2] in (1, 2) and ran[-1] == 0
    assert [p.few_steps for p in fuzz.programs(0, 8)] == [0, 0, 0, 0, 0, 0, 0, 2]


NOISE_AT_T0 = """
model Noise() {
  input x0 : f32[B, 3]
  input ids0 : i32[B]
  input tok0 : i32[T, B]
  input x1 : f32[T, B, 3]
  input x2 : f32
  a0 = cross_entropy((x0 - x0), ids0)
  param p0 : f32[5, 5] = uniform(-0.5, 0.5)
  y1 = for e0 in p0[tok0] {
    y0 = for e1 in x1 {
      param p2 : f32[3, 5] = constant(0.3)
      yield (x0 @ p2)
    }
    yield abs(minimum(x2, a0))
  }
  output loss = a0 + mean(y1 * y1)
  minimize loss
}
"""


def test_with_no_elements_a_gradient_zero_in_exact_arithmetic_is_noise(tmp_path):
    """At T = 0 this loss is NaN and every gradient the reference computes is 0; x0's,
    from x0 - x0, is 6e-18 in the build (two roundings of one product). Its noise floor
    was a part of the largest output or gradient, 0 here, so it was a mismatch (Small519_0,
    shrunk); the floor counts the inputs and weights too, as values of the case."""
    path, name, *_ = fuzz.build(NOISE_AT_T0, tmp_path, [])
    with pytest.warns(MdlWarning, match="`y0` is assigned but never used"):  # as shrunk
        module = load(path, dtype="f64", name=name)
    graph = check_source(NOISE_AT_T0, model="Noise", dtype="f64").graph
    assert compare(module, "Noise", graph, seed=zlib.crc32(b"Small519_0")).ok


@pytest.mark.parametrize("seed", range(len(CONFIGS)))
def test_train_step_is_checked_with_every_optimizer(tmp_path, monkeypatch, seed):
    """compare() also takes one train_step with the optimizer configuration its seed
    picks (each of tests/optimizer_reference.py's in turn); updated weights off by a part
    in ten million are caught there, with the configuration named."""
    path, name, *_ = fuzz.build(TANH, tmp_path, [])
    module = load(path, dtype="f64", name=name)
    graph = check_source(TANH, model="Tanh", dtype="f64").graph
    assert compare(module, "Tanh", graph, seed=seed).ok
    step = Reference.step

    def off(self, grads):  # every updated weight a part in ten million away
        step(self, grads)
        self.w = {k: w * (1 + 1e-7) if k in grads else w for k, w in self.w.items()}
    monkeypatch.setattr(Reference, "step", off)
    outcome = compare(module, "Tanh", graph, seed=seed)
    assert outcome.kind == "mismatch" and "train_step" in outcome.detail
    assert sorted(CONFIGS)[seed] in outcome.detail


def test_a_checkpoint_that_loads_a_weight_one_ulp_off_is_caught(tmp_path):
    """compare() saves the trained model, loads it into a new instance and steps both
    once more: a loaded weight one ulp away from the saved one makes them differ."""
    path, name, *_ = fuzz.build(TANH, tmp_path, [])
    module = load(path, dtype="f64", name=name)
    graph = check_source(TANH, model="Tanh", dtype="f64").graph
    assert compare(module, "Tanh", graph).ok

    class OneUlpOff:   # the module, but its models load `w` one ulp away
        def __getattr__(self, cls):
            def make(seed):
                m = getattr(module, cls)(seed=seed)
                load_exactly = m.load

                class Model:
                    def __getattr__(self, attr):
                        return getattr(m, attr)

                    def __setattr__(self, attr, value):
                        setattr(m, attr, value)

                    def load(self, path):
                        load_exactly(path)
                        m.set_params({"w": np.nextafter(m.params["w"], np.inf)})
                return Model()
            return make
    outcome = compare(OneUlpOff(), "Tanh", graph)
    assert outcome.kind == "mismatch" and outcome.detail.startswith("checkpoint")
    assert "w: relative error" in outcome.detail


def test_an_f32_build_is_compared_at_f32s_tolerance(tmp_path, monkeypatch):
    """An f32 build agrees with the reference (run in float64 on the f32 values) within
    PRECISIONS["f32"], and a tanh whose reference is wrong by ten times that fails."""
    path, name, *_ = fuzz.build(TANH, tmp_path, [], dtype="f32")
    module = load(path, dtype="f32", name=name)
    graph = check_source(TANH, model="Tanh", dtype="f32").graph
    assert compare(module, "Tanh", graph, dtype="f32").ok
    off = 10 * PRECISIONS["f32"].tolerance
    monkeypatch.setattr(TABLE["tanh"], "ref", lambda ctx, attrs, x: np.tanh(x) * (1 + off))
    outcome = compare(module, "Tanh", graph, dtype="f32")
    assert outcome.kind == "mismatch" and "output loss" in outcome.detail


def test_a_vjp_build_is_compared_on_the_same_cotangents(tmp_path, monkeypatch):
    """A vjp build's backward is compared with the reference's vector-Jacobian product on
    the same random cotangents: a reference given them twice as large fails on the
    gradients, which central differences of cotangents times outputs say native has
    right."""
    path, name, *_ = fuzz.build(TANH, tmp_path, [], vjp=True)
    module = load(path, dtype="f64", name=name, vjp=True)
    graph = check_source(TANH, model="Tanh", dtype="f64").graph
    assert compare(module, "Tanh", graph, vjp=True).ok
    gradients = reference.gradients

    def doubled(*args, cotangents=None, **kwargs):
        return gradients(*args, cotangents={k: 2 * c for k, c in cotangents.items()},
                         **kwargs)
    monkeypatch.setattr(reference, "gradients", doubled)
    outcome = compare(module, "Tanh", graph, vjp=True)
    assert outcome.kind == "mismatch" and "gradient w" in outcome.detail
    assert "native is right" in outcome.detail


def test_emulate_is_for_the_cuda_target(capsys):
    with pytest.raises(SystemExit) as exit_:
        fuzz.main(["--programs", "1", "--emulate"])
    assert exit_.value.code == 2
    assert "--emulate is for --target cuda" in capsys.readouterr().err


def test_shrinking_keeps_the_failure_and_drops_the_rest():
    """The shrinker's result still fails (here: still has a while inside a for) and is
    a local minimum: no accepted one-step-smaller program still fails."""
    def fails(programs):
        return ["while" in p.model_source() and "for" in p.model_source() for p in programs]
    program = min((p for p in fuzz.programs(1, 40) if fails([p])[0]), key=lambda p: p.size())
    small = fuzz.shrink(program, fails)
    assert fuzz.accepted(small) and fails([small]) == [True]
    assert small.size() < program.size()
    assert not any(fails([c])[0] for c in smaller(small) if fuzz.accepted(c))
