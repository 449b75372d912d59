"""The shape of the code the CPU target generates for an LSTM, a MILSTM and a GRU: what
the speed work (docs/benchmarks.md) made of each step, kept from regressing. What the
code computes is checked against the reference elsewhere (test_native*.py); this checks
how: weights packed before their loop, one product and one fused loop per forward step,
gate gradients written where the weight gradients read them, sums accumulated by the
loop that computes their terms, inputs the backward reads not copied."""
import re
from pathlib import Path

import pytest

from codegen.pipeline import BuildOptions, sources

MODELS = Path(__file__).resolve().parents[1] / "benchmarks" / "models.mdl"


def function_texts(path, model: str, defines: dict) -> dict[str, str]:
    """{infer, train, backward: C++ text} of `model`'s generic code, the file at `path`
    built with `defines`."""
    _, files = sources(path, "shapes", BuildOptions(defines=defines, model=model))
    text = files["module.cpp"]
    out = {}
    for kind in ("infer", "train", "backward"):
        start = text.index(f"void {kind}_0(Model& m, Call& c) {{")
        out[kind] = text[start:text.index("\n}\n", start)]
    return out


def functions(model: str) -> dict[str, str]:
    """function_texts of a model of benchmarks/models.mdl at H = 16."""
    return function_texts(MODELS, model, {"H": 16})


def loop_body(function: str) -> str:
    """The text of the function's (first) time loop."""
    start = re.search(r"for \(int64_t s\d+ = 0;", function).start()
    depth, i = 0, function.index("{", start)
    for j in range(i, len(function)):
        depth += {"{": 1, "}": -1}.get(function[j], 0)
        if depth == 0:
            return function[i:j]
    raise AssertionError("unbalanced loop")


def count_loops(text: str) -> int:
    """The loops in `text`: a large loop that may run on the threads is there once, in the
    lambda that the threads and the one-thread way both call (codegen/targets/cpu.py), its
    split loop running from the lambda's `begin`."""
    return len(re.findall(r"for \(int64_t i\d+ = (?:0|begin\d+);", text))


@pytest.fixture(scope="module")
def lstm():
    return functions("LSTM")


def test_a_forward_step_is_one_packed_product_and_one_loop(lstm):
    for kind in ("infer", "train"):
        step = loop_body(lstm[kind])
        assert step.count("mdl::gemm_packed(") == 1 and "mdl::gemm(" not in step, kind
        assert count_loops(step) == 2, kind  # one fused loop nest: rows, then columns
        assert "mdl::pack_b(" in lstm[kind].split(step)[0]  # U packed before the loop


def test_the_loss_is_summed_by_the_loop_computing_its_terms(lstm):
    assert "mdl::reduce(" not in lstm["infer"]
    assert "#pragma omp simd reduction(+ :" in lstm["infer"]


def test_the_training_forward_stores_what_it_saves_once(lstm):
    step = loop_body(lstm["train"])
    # the gates go straight into their stacks, the new h and c into their stack and into
    # the state (codegen/backend/states.py), c_{t-1} into its stack as the loop reads it;
    # h_{t-1}, which the loop does not read, is copied into its stack before the loop
    assert step.count("mdl::copy(") == 1
    assert step.index("mdl::copy(") < step.index("if (const int team")
    assert "c.inputs" not in step and "m.saved[0] = v" in lstm["train"]


def test_a_step_updates_its_states_where_they_live(lstm):
    """No copy of a state at the end of a step: the fused loop writes the new c over the
    old one element by element, and the new h into its row of hs and the state."""
    step = loop_body(lstm["infer"])
    assert "mdl::copy(" not in step
    state_views = re.findall(r"auto\* (v\d+) = (v\d+) \+ \(0\);", step)
    written = {v for v, _ in state_views if re.search(rf"\b{v}\[[^]]+\] = s", step)}
    assert len(written) == 2  # c in place; h, stored a second time


def test_gate_gradients_are_written_where_the_weight_gradients_read_them(lstm):
    step = loop_body(lstm["backward"])
    assert count_loops(step) == 2 and step.count("mdl::gemm_packed(") == 1
    assert "mdl::copy(" not in step  # the state cotangents are written where they live
    after = lstm["backward"].split(step)[1]
    assert after.count("mdl::gemm(") == 3  # dU, dW and the inputs' gradient, over all steps


def test_a_gru_step_computes_both_gate_sums_in_one_loop():
    """The branch on the step's input runs for every step in a loop of its own
    (for_fission.py) and v @ W over all steps; the recurrence's step is h @ U and one
    loop nest (rows, then columns) summing both products' gates."""
    train = functions("GRUIf")["train"]
    branch = loop_body(train)
    taken = r"if \(v\d+\[0\]\) \{"  # the branch on the step's flag
    assert re.search(taken, branch) and "mdl::gemm_packed" in branch  # tanh(x @ P)
    step = loop_body(train.split(branch, 1)[1])
    assert not re.search(taken, step) and step.count("mdl::gemm_packed(") == 1
    assert count_loops(step) == 2


def test_milstm_sums_its_gate_weights_gradients_while_computing_them():
    backward = functions("MILSTM")["backward"]
    rest = backward.split(loop_body(backward))[1]
    assert rest.count("] += s") >= 2  # alpha's and beta's gradients accumulated in place


def test_a_recompute_loop_s_backward_sums_weight_gradients_per_block():
    """The backward runs in blocks of 16 steps (for_op.in_blocks): per block, the re-run
    forward's products (x_t @ W, h_{t-1} @ U from the saved states) are one product each
    before the block's steps, and after them dW and dU add one product of 16 * B rows
    each into their accumulators (beta = 1) and d x is one product (for_sink.py); per
    step only the recurrence's product remains (d h_{t-1} = d gates @ U^T)."""
    block = loop_body(functions("LSTMRecompute")["backward"])
    step = loop_body(block[1:])
    assert len(re.findall(r"mdl::gemm\(true, false, int64_t\(16\), int64_t\(64\), "
                          r"\(int64_t\(16\)\*d1\), .*float\(1\), v\d+, int64_t\(64\)\);",
                          block)) == 2
    assert len(re.findall(r"mdl::gemm_packed\(m\.packs\[\d\], false, \(int64_t\(16\)\*d1\)",
                          block.split(step)[0])) == 2
    assert step.count("mdl::gemm_packed(") == 1 and "mdl::gemm(" not in step
    assert len(re.findall(r"mdl::gemm_packed\(m\.packs\[\d\], false, \(int64_t\(16\)\*d1\)",
                          block.split(step)[1])) == 1
    assert "mdl::copy(" not in step  # dh and dc are written where they live (states.py)


def test_checkpoint_segments_are_views_of_the_sequences():
    """A checkpointed loop reads its sequences (xs; in the backward also the cotangent of
    hs) in place, segment by segment: no padded copy of a whole sequence, only the
    shorter last segment is copied, zero-padded, into a buffer of one segment."""
    code = functions("LSTMCheckpoint")
    for kind in ("train", "backward"):
        assert not re.search(r"mdl::fill\(v\d+, \(int64_t\(512\)\*d1\*\(\(\(d0\)", code[kind])
        assert re.search(r"auto\* tail\d+ = reinterpret_cast<float\*>\(m\.scratch\[\d\]"
                         r"\.hold\(4 \* \(int64_t\(512\)\*d1\)\)\);", code[kind]), kind
    assert len(re.findall(r"auto\* tail\d+ = reinterpret_cast<float\*>",
                          code["backward"])) == 2  # xs and d hs


def test_a_training_step_plans_its_forward_and_backward_as_one():
    """The backward computes the same slots of the same arena as the training forward:
    its [T, B, 4H] gate gradients take the slot of the forward's [T, B, 4H] input
    product, dead once the forward's loop has run (saved values keep theirs)."""
    code = functions("LSTM")
    slots = {kind: re.findall(r"off\[\d+\] = total; total \+= mdl::slot_bytes\((.*)\);",
                              code[kind]) for kind in ("train", "backward")}
    assert slots["train"] == slots["backward"]
    assert slots["train"].count("4 * (int64_t(64)*d1*d0)") == 1
    for kind in ("train", "backward"):
        assert "m.arenas[1].reserve(total);" in code[kind], kind


def test_a_backward_sized_by_a_while_s_trips_plans_its_own_arena(tmp_path):
    """A backward value whose size is a count the training forward learns only as it
    runs (a while's trips) cannot have a slot the forward
    computes before its loop: that backward plans its memory alone, in arena 2."""
    path = tmp_path / "trips.mdl"
    path.write_text("""model W() {
  input x : f32[T, B, 5]
  param p : f32[4, 5] = normal(0, 0.5)
  a = x
  k = 0
  while (sum(a) < 1.0) and k < 3 {
    a = sigmoid(x[:, :, 1:5] @ p)
    k = k + 1
  }
  output loss = mean(a * a)
  minimize loss
}
""")
    text = sources(path, "trips", BuildOptions())[1]["module.cpp"]
    assert "m.arenas[1].reserve(total);" in text.split("void backward_0(Model& m, Call& c) {")[0]
    assert "m.arenas[2].reserve(total);" in text.split("void backward_0(Model& m, Call& c) {")[1]


def test_a_training_forward_gives_back_the_hs_it_no_longer_keeps():
    """The backward of `recompute` and of `checkpoint` yields hs again as it re-runs the
    steps (codegen/transforms/reread.py), so the forward's hs ([T, B, H]; the checkpoint's
    [ceil(T/32), 32, B, H] segments) is dead once the loss is summed, and the backward
    puts only results it hands over in its slot: a forward whose results go to Python
    gives that slot back to the system (mdl::give_back). The stored LSTM keeps its hs."""
    dead = {"LSTMRecompute": "4 * (int64_t(16)*d1*d0)",
            "LSTMCheckpoint": "4 * (int64_t(512)*d1*(((d0) + 31) / 32))"}
    for model, size in dead.items():
        code = functions(model)
        given = re.findall(r"if \(c\.fresh\) mdl::give_back\(arena \+ off\[(\d+)\], (.*)\);",
                           code["train"])
        assert [s for _, s in given].count(size) == 1, model
        slot = next(slot for slot, s in given if s == size)
        assert f"off[{slot}] = total; total += mdl::slot_bytes({size});" in code["train"]
        assert "give_back" not in code["backward"]
    stored = re.findall(r"mdl::give_back\(arena \+ off\[\d+\], (.*)\);", functions("LSTM")["train"])
    assert "4 * (int64_t(16)*d1*d0)" not in stored


def test_the_padding_steps_of_segments_are_skipped():
    """A checkpoint's segment loops (the forward's, the re-run and its backward) and the
    steps of a recompute loop's backward blocks do not run a padding step past T: they
    write its yields' zeros and go on (control_flow._skip_padding)."""
    checkpoint = functions("LSTMCheckpoint")
    assert checkpoint["train"].count("continue;") == 1
    assert checkpoint["backward"].count("continue;") == 2
    assert functions("LSTMRecompute")["backward"].count("continue;") == 1
    assert "continue;" not in functions("LSTM")["backward"]


def test_a_while_s_trip_writes_its_states_where_they_live(tmp_path):
    """A trip's fused loop writes the new c and h over the old ones (states.py), so the
    inference trip copies nothing at its end; the training trip copies the old h and c its
    tapes keep, before the fused loop writes them, and nothing more."""
    path = tmp_path / "while_states.mdl"
    path.write_text("""model W(H = 8) {
  input x : f32[B, H]
  param U : f32[H, H] = uniform(-0.5, 0.5)
  h = zeros[B, H]; c = zeros[B, H] + 0.5; k = 0
  while k < 3 {
    c = 0.5 * c + tanh(h @ U + x)
    h = tanh(c) * sigmoid(x)
    k = k + 1
  }
  output loss = sum(h * h)
  minimize loss
}
""")
    text = sources(path, "while_states", BuildOptions())[1]["module.cpp"]
    for kind, copies in (("infer", 0), ("train", 2)):
        start = text.index(f"void {kind}_0(Model& m, Call& c) {{")
        function = text[start:text.index("\n}\n", start)]
        trip = function[function.index("while (true)"):function.index("++trips")]
        assert trip.count("mdl::copy(") == copies, kind
        if copies:
            assert trip.rindex("mdl::copy(") < trip.index("if (const int team")



SUNK = '''
model M(H = 3) {
  input xs : f32[T, B, H]; input a : f32[B, 1]; input c : f32[1, H]
  v = a * c
  hs = for x in xs { yield x * v }
  u = a * (c + 1.0)
  w = tanh(xs[0]) * 0.5
  output loss = sum(hs) + sum(v * 2.0) + sum(u * w)
  minimize loss
}'''


def test_a_broadcast_product_moves_to_its_first_reader_and_no_further(tmp_path):
    """A product of operands broadcast from fewer elements ([B, 1] * [1, H]) goes just
    before its first reader (`lower._sunk`: the reader's fused loop recomputes it instead
    of loading it), unless a loop reads it first, inside its body (moved past that loop,
    it was read before it was computed: the build failed); and the model computes what
    the reference does."""
    from codegen.backend.lower import _sunk
    from codegen.pipeline import for_backends, load
    from dsl import check_source
    from test_native import assert_training_matches, random_case
    graph = check_source(SUNK, "<test>", dtype="f64").graph
    ops = for_backends(graph).body.ops
    order = _sunk(ops)
    named = {op.outputs[0].hint: op for op in ops if op.outputs}
    u, v, loop = named["u"], named["v"], named["hs"]
    reader = next(op for op in ops if u.outputs[0] in op.inputs)
    assert order.index(reader) - order.index(u) == 1 < order.index(u) - order.index(named["w"])
    assert order.index(v) < order.index(loop) and ops.index(u) < ops.index(named["w"])
    path = tmp_path / "sunk.mdl"
    path.write_text(SUNK)
    for module in (load(path, dtype="f64", name="sunk_f64"),
                   load(path, "cuda", dtype="f64", name="sunk_f64_emulated", emulate=True)):
        for seed in (1, 2):
            assert_training_matches(module.M(seed=2), graph, random_case(graph, "f64", seed),
                                    1e-10)
