"""examples/tagger.mdl, a BiLSTM-CRF tagger, against independent answers: its loss is the
negative log-likelihood of every tag sequence enumerated, and TaggerDecode's Viterbi path
and score are the best of them; trained on a task whose tags depend on the word before,
the decoder tags new sequences right."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from codegen.pipeline import load

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tagger.mdl"
K, V = 5, 20


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """The example with Tagger's emissions as an output too (f64)."""
    path = tmp_path_factory.mktemp("tagger") / "tagger_scores.mdl"
    path.write_text(EXAMPLE.read_text().replace("  scores = emissions(",
                                                "  output scores = emissions(", 1))
    return load(path, dtype="f64", name="tagger_scores")


def path_score(emissions, transitions, start, b: int, tags) -> float:
    out = start[tags[0]] + emissions[0, b, tags[0]]
    for t in range(1, len(tags)):
        out += transitions[tags[t - 1], tags[t]] + emissions[t, b, tags[t]]
    return out


def test_loss_and_viterbi_are_those_of_every_path_enumerated(scored):
    rng = np.random.default_rng(0)
    model = scored.Tagger(seed=3)
    model.set_params({"transitions": rng.standard_normal((K, K)),
                      "start": rng.standard_normal(K)})
    decoder = scored.TaggerDecode(params=model)
    T, B = 4, 6
    words = rng.integers(0, V, (T, B)).astype(np.int32)
    tags = rng.integers(0, K, (T, B)).astype(np.int32)
    lengths = np.array([4, 3, 1, 0, 2, 4], np.int32)
    out = model.forward(words=words, tags=tags, lengths=lengths)
    best = decoder.forward(words=words, lengths=lengths)
    emissions, params = out["scores"], model.params
    nll = []
    for b, n in enumerate(lengths):
        if n == 0:  # no words: no loss, score 0, tags 0
            assert best["score"][b] == 0 and not best["tags"][:, b].any()
            continue
        every = {p: path_score(emissions, params["transitions"], params["start"], b, p)
                 for p in itertools.product(range(K), repeat=int(n))}
        given = every[tuple(tags[:n, b])]
        nll.append(np.log(np.exp(list(every.values())).sum()) - given)
        top = max(every, key=every.get)
        assert best["score"][b] == pytest.approx(every[top], abs=1e-12)
        assert list(best["tags"][:n, b]) == list(top) and not best["tags"][n:, b].any()
    assert out["loss"] == pytest.approx(np.mean(nll), abs=1e-12)


def test_trained_it_tags_new_sequences():
    """Tag = (word + the word before) mod 5: the backward direction alone cannot tell."""
    from test_native import native
    module = native("tagger.mdl", "f32")  # test_native.py's build of it
    model = module.Tagger(seed=0)
    model.set_optimizer("adam", lr=0.02)
    rng = np.random.default_rng(1)

    def batch(B: int, T: int = 12):
        words = rng.integers(0, V, (T, B)).astype(np.int32)
        before = np.vstack([np.zeros((1, B), np.int32), words[:-1]])
        return words, (words + before) % K, rng.integers(1, T + 1, B).astype(np.int32)
    for _ in range(400):
        words, tags, lengths = batch(32)
        loss = model.train_step(words=words, tags=tags.astype(np.int32), lengths=lengths)["loss"]
    assert loss < 0.5
    words, tags, lengths = batch(256)
    got = module.TaggerDecode(params=model).forward(words=words, lengths=lengths)["tags"]
    real = np.arange(len(words))[:, None] < lengths
    assert (got == tags)[real].mean() > 0.95 and not got[~real].any()
