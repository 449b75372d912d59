"""`mdlc gradcheck`: passes on every example model, fails on a corrupted gradient."""
import re
from pathlib import Path

import pytest

from codegen import cli
from codegen.ops.primitives import TABLE
from dsl import check_file
from source_files import NEEDS_TWO_STEPS

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# every example model that minimizes an output (a generation model has no gradients)
MODELS = [(path, name) for path in sorted(EXAMPLES.glob("*.mdl"))
          for name in re.findall(r"^model (\w+)", path.read_text(), re.M)
          if check_file(str(path), model=name).graph.loss is not None]


@pytest.mark.parametrize("path, model", MODELS, ids=[f"{p.name}:{m}" for p, m in MODELS])
def test_gradcheck_passes_on_every_example(path, model, capsys):
    assert cli.main(["gradcheck", str(path), "--model", model]) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out and "worst relative error" in out


def test_gradcheck_fails_on_a_corrupted_gradient(tmp_path, monkeypatch, capsys):
    path = tmp_path / "corrupt.mdl"
    path.write_text("model Corrupt() {\n  input x : f32[B, 3]\n  param w : f32[3] = ones\n"
                    "  output loss = sum(tanh(x * w))\n  minimize loss\n}\n")
    right = TABLE["tanh"].grad

    def wrong(b, op, cts):  # twice the true gradient
        return [b.add(g, g) if g is not None else None for g in right(b, op, cts)]
    monkeypatch.setattr(TABLE["tanh"], "grad", wrong)
    assert cli.main(["gradcheck", str(path)]) == 1
    assert "FAILED" in capsys.readouterr().out


@pytest.mark.parametrize("loss", ["sum(sqrt(x * w))", "sum(exp(w * -1e30) * x)"],
                         ids=["nan", "inf"])
def test_a_loss_gone_nan_or_inf_fails(tmp_path, capsys, loss):
    """A NaN (inf) loss made every gradient and difference NaN (inf), and max(0.0, nan)
    is 0.0: such a model passed with a worst error of 0."""
    path = tmp_path / "diverged.mdl"
    path.write_text(f"model N() {{\n  input x : f32[B, 4]\n  param w : f32[4] = "
                    f"constant(-1.0)\n  output y = {loss}\n  minimize y\n}}\n")
    assert cli.main(["gradcheck", str(path)]) == 1
    out = capsys.readouterr().out
    assert "w        inf  (4 elements)  FAILED" in out
    assert "worst relative error inf" in out and "NaN or infinite" in out


def test_gradients_below_the_rounding_of_the_loss_are_compared_at_its_scale(
        tmp_path, monkeypatch, capsys):
    """A difference quotient of a loss near 3 is no finer than ~1e-11: a right gradient
    of 1e-9 differs from it by 1e-3 of itself. It passes (it failed); twice that
    gradient, off by 1e-9, far above the noise, still fails."""
    path = tmp_path / "tiny.mdl"
    path.write_text("model Tiny() {\n  input x : f32[B, 3]\n  param w : f32[3] = ones\n"
                    "  output loss = 3.0 + 1e-9 * sum(tanh(x * w))\n  minimize loss\n}\n")
    assert cli.main(["gradcheck", str(path)]) == 0, capsys.readouterr().out
    right = TABLE["tanh"].grad
    monkeypatch.setattr(TABLE["tanh"], "grad", lambda b, op, cts: [
        b.add(g, g) if g is not None else None for g in right(b, op, cts)])
    wrong = tmp_path / "wrong.mdl"  # another source: not the build above from the cache
    wrong.write_text(path.read_text().replace("Tiny", "Wrong"))
    assert cli.main(["gradcheck", str(wrong)]) == 1


def test_a_loss_too_large_to_measure_any_gradient_is_a_usage_error(capsys):
    """QA: the recognizer's random inputs at T=2 gave rows of more labels than frames,
    whose ctc_loss is ~1e30 (an impossible alignment): its finite differences, no finer
    than 1e-7 of it, passed every gradient with an error of 1e-24, checking nothing."""
    args = ["gradcheck", str(EXAMPLES / "recognizer.mdl"), "-D", "H=8", "--dims", "T=2,B=1",
            "--seed", "7"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "the loss at these random inputs is 3.33e+29" in err
    assert "nothing would be checked" in err


NESTED = """
import "std/rnn.mdl"
model Words(E = 3, H = 4) {
  input chars : f32[T, C, B, E]
  input char_lengths : i32[T, B]
  input labels : i32[B]
  h = zeros[B, H]
  for word in chars, n in char_lengths {
    w = zeros[B, H]
    for ch in word (lengths = n) {
      w = gru(ch, w) as chars
    }
    h = gru(w, h) as words
  }
  output loss = cross_entropy(linear(h, 4), labels)
  minimize loss
}
"""


def test_inputs_stepped_through_by_a_loop_keep_the_bounds_of_their_steps(tmp_path, capsys):
    """An inner loop's lengths are a step of the outer loop's sequence of lengths (a
    word's characters): drawn within C, not the default range, which was past it and
    made gradcheck end in an internal error."""
    path = tmp_path / "words.mdl"
    path.write_text(NESTED)
    assert cli.main(["gradcheck", str(path), "--dims", "C=2"]) == 0, capsys.readouterr()


def test_dims_too_large_for_the_memory_are_a_usage_error(capsys):
    """The inputs drawn at these sizes would take 218 TiB: the user's dims, not our bug."""
    assert cli.main(["gradcheck", str(EXAMPLES / "charlm.mdl"), "--model", "CharLM",
                     "--dims", "T=100000,B=100000000"]) == 2
    assert ("--dims T=100000,B=100000000: the model's inputs and values at these sizes need "
            "more memory than this machine gives" in capsys.readouterr().err)


def test_dims_the_model_does_not_have_are_a_usage_error(capsys):
    """A typo in --dims (t for T) would check other dims than asked for, saying nothing."""
    assert cli.main(["gradcheck", str(EXAMPLES / "charlm.mdl"), "--model", "CharLM", "--dims", "t=2"]) == 2
    assert ("--dims names t, not a symbolic dim of model `CharLM` (it has T, B)"
            in capsys.readouterr().err)


COMPUTED_INDEX = """
model Ix(V = 5, E = 2) {
  input ids : i32[B]
  param emb : f32[V, E] = normal(0, 1)
  y = emb[ids + 1]
  output loss = sum(y * y)
  minimize loss
}
"""

@pytest.mark.parametrize("source, args, message", [
    # ids drawn in [0, V) index emb as ids + 1: an internal error (exit 3) before
    (COMPUTED_INDEX, ["--dims", "B=50"], "the random inputs fail the model's check: the "
     "index at refused.mdl:5:10 computed from the input `ids` holds 5"),
    # sizes the model refuses are the --dims' fault, not an assert's (it said so)
    (NEEDS_TWO_STEPS, ["--dims", "T=1"], "mdlc: error: --dims T=1,B=3: the inputs' dims (T = 1, B = 3) "
     "make T - 2, the size of a value at "),
    (NEEDS_TWO_STEPS, ["-D", "H=2", "--dims", "T=1"], "mdlc: error: -D H=2 --dims T=1,B=3: "),
])
def test_random_inputs_the_model_refuses_are_a_usage_error(tmp_path, capsys, source, args,
                                                          message):
    path = tmp_path / "refused.mdl"
    path.write_text(source)
    assert cli.main(["gradcheck", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and ("asserts" in err) == ("random inputs" in message), err


def test_a_model_with_nothing_to_differentiate_is_a_usage_error(tmp_path, capsys):
    """QA: a loss of an i32 input alone printed "worst relative error 0.00e+00", exit 0,
    having checked nothing."""
    path = tmp_path / "ints.mdl"
    path.write_text("model Z() {\n  input n : i32[B]\n  output loss = sum(f32(n))\n"
                    "  minimize loss\n}\n")
    assert cli.main(["gradcheck", str(path)]) == 2
    assert ("model `Z` has no trainable parameter and no float input: no gradients to check"
            in capsys.readouterr().err)


def test_a_model_of_no_symbolic_dims_is_checked_and_said_so(tmp_path, capsys):
    """The last line ended "... at " with nothing after it."""
    path = tmp_path / "fixed.mdl"
    path.write_text("model N() {\n  param w : f32[3] = ones\n  output loss = sum(w * w)\n"
                    "  minimize loss\n}\n")
    assert cli.main(["gradcheck", str(path)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("worst relative error") and last.endswith("(tolerance 1e-04)")
