"""The attention model of examples/attention.mdl: one token at a time, TranslatorEncode
and TranslatorStep give Translator's logits; trained by examples/train_translator.py it
learns to reverse sequences, its attention looks at the mirrored source position, and
TranslatorGreedy and TranslatorBeam decode in one call what the step models decode a
token at a time."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from codegen import load

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import train_translator  # noqa: E402


def test_one_token_at_a_time_gives_the_sequence_models_logits():
    module = load(ROOT / "examples" / "attention.mdl", dtype="f64", name="attention_f64")
    model = module.Translator(seed=4)
    model.set_optimizer("adam", lr=0.02)
    rng = np.random.default_rng(0)
    for _ in range(5):  # trained weights, not the initial ones
        model.train_step(**train_translator.reversal_batch(rng, 6, 7))
    data = train_translator.reversal_batch(rng, 5, 7)
    want = model.forward(**data)["logits"]
    encoder = module.TranslatorEncode(params=model)
    step = module.TranslatorStep(params=model)
    assert sorted(encoder.shared + step.shared) == sorted(model.params)
    enc = encoder.forward(source=data["source"], source_lengths=data["source_lengths"])
    h, c = enc["h"], enc["c"]
    context = np.zeros_like(h)
    for t, token in enumerate(data["target_in"]):
        out = step.forward(token=token, h=h, c=c, context=context, states=enc["states"],
                           keys=enc["keys"], real=enc["real"])
        h, c, context = out["h_out"], out["c_out"], out["context_out"]
        real = t < data["target_lengths"]  # past its length a row's logits are not defined
        assert np.abs(out["logits"][real] - want[t][real]).max() < 1e-12, t
        padding = np.arange(len(data["source"]))[:, None] >= data["source_lengths"]
        assert np.all(out["weights"][padding] == 0.0), "attention on padding"


def test_trained_it_reverses_sequences_and_attends_to_the_mirrored_position():
    """Decoded in one call of TranslatorGreedy (its loop feeds argmax's token to the next
    step), as a call a token from Python decodes it."""
    module, model = train_translator.train(steps=400, length=8, log=lambda line: None)
    result = train_translator.evaluate(module, model, length=8)
    assert result["exact"] > 0.9, result["exact"]
    assert result["attention"] > 0.9, result["attention"]
    assert result["tokens"].shape == (9, 256) and result["tokens"].dtype == np.int32
    np.testing.assert_array_equal(result["tokens"], result["stepped"])


def test_beam_search_keeps_the_best_sequences_by_the_models_own_likelihood():
    """train_translator.beam_search over the step models: at width 1 it is greedy
    decoding; at width 4 every sequence's score is its log-likelihood under Translator
    fed it as the target (up to its first END), and the scores come best first; and
    TranslatorBeam, the same search in one call (`topk` in a loop), finds the same."""
    module = load(ROOT / "examples" / "attention.mdl", dtype="f64", name="attention_f64")
    model = module.Translator(seed=2)
    model.set_optimizer("adam", lr=0.02)
    rng = np.random.default_rng(3)
    for _ in range(60):  # half trained: its choices are not yet sure ones
        model.train_step(**train_translator.reversal_batch(rng, 16, 6))
    data = train_translator.reversal_batch(rng, 5, 6)
    source, lengths, steps = data["source"], data["source_lengths"], 12  # TranslatorBeam's L
    encoder, step = module.TranslatorEncode(params=model), module.TranslatorStep(params=model)
    one, _ = train_translator.beam_search(encoder, step, source, lengths, steps, 1)
    greedy, _ = train_translator.greedy(encoder, step, source, lengths, steps)
    np.testing.assert_array_equal(one[:, 0].T, greedy)
    beams, scores = train_translator.beam_search(encoder, step, source, lengths, steps, 4)
    assert np.all(np.diff(scores, axis=1) <= 0)
    in_one_call = module.TranslatorBeam(params=model).forward(source=source,
                                                              source_lengths=lengths)
    np.testing.assert_array_equal(in_one_call["tokens"], beams)
    np.testing.assert_allclose(in_one_call["scores"], scores, rtol=1e-12)
    for k in range(4):
        target = beams[:, k].T  # [steps, B]
        start = np.full((1, target.shape[1]), train_translator.START, np.int32)
        logits = model.forward(source=source, source_lengths=lengths,
                               target_in=np.concatenate([start, target[:-1]]),
                               target_out=target, target_lengths=np.full(5, steps, np.int32),
                               )["logits"]
        shifted = logits - logits.max(axis=2, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=2, keepdims=True))
        chosen = np.take_along_axis(logp, target[:, :, None], axis=2)[:, :, 0]
        ended = np.cumsum(target == train_translator.END, axis=0)
        counted = (ended == 0) | ((ended == 1) & (target == train_translator.END))
        np.testing.assert_allclose(scores[:, k], (chosen * counted).sum(axis=0), rtol=1e-9)


def test_the_script_runs_as_a_user_runs_it():
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "train_translator.py"),
                          "--steps", "300", "--length", "6"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "reversed exactly:" in run.stdout and "attention of the first sequence" in run.stdout
