"""examples/charlm.mdl's CharLMSample: T characters drawn in one call by the Gumbel-max
trick, each fed to the next step. It draws what CharLMStep's logits give, a step at a
time from Python, on the same noise; and its draws are distributed as the softmax of the
logits over the temperature."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codegen.pipeline import load

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
H = 32


@pytest.fixture(scope="module")
def charlm():
    return load(EXAMPLES / "charlm.mdl", dtype="f64", defines={"H": H}, name="charlm_sampling")


def test_one_call_draws_what_the_step_model_gives_from_python(charlm):
    lm = charlm.CharLM(seed=1)
    sampler, step = charlm.CharLMSample(params=lm), charlm.CharLMStep(params=lm)
    rng = np.random.default_rng(0)
    T, B, temperature = 30, 3, 0.7
    noise = rng.random((T, B, 96))
    start = np.array([5, 40, 90], np.int32)
    h, c = rng.standard_normal((2, B, H)) * 0.1  # the state a prime left
    out = sampler.forward(token=start, h=h, c=c, noise=noise,
                          temperature=np.float64(temperature))
    token, drawn = start, []
    for u in noise:
        step_out = step.forward(token=token, h=h, c=c)
        h, c = step_out["h_out"], step_out["c_out"]
        gumbel = -np.log(-np.log(u))
        token = np.argmax(step_out["logits"] / temperature + gumbel, axis=1).astype(np.int32)
        drawn.append(token)
    assert np.array_equal(out["tokens"], np.stack(drawn))
    assert np.allclose(out["h_out"], h, atol=1e-12) and np.allclose(out["c_out"], c, atol=1e-12)
    assert len(np.unique(out["tokens"])) > 10  # draws, not one repeated choice


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_draws_follow_the_softmax_of_the_logits_over_the_temperature(charlm, temperature):
    lm = charlm.CharLM(seed=2)
    rng = np.random.default_rng(3)  # logits far apart: a wrong temperature shows
    lm.set_params({"decoder/W": rng.normal(0.0, 3.0, (H, 96)),
                   "decoder/b": rng.normal(0.0, 1.0, 96)})
    sampler, step = charlm.CharLMSample(params=lm), charlm.CharLMStep(params=lm)
    B = 40_000  # one state, drawn from B times: a frequency's sd is at most 0.0025
    token, h, c = np.full(B, 7, np.int32), np.zeros((B, H)), np.zeros((B, H))
    noise = rng.random((1, B, 96))
    drawn = sampler.forward(token=token, h=h, c=c, noise=noise,
                            temperature=np.float64(temperature))["tokens"][0]
    logits = step.forward(token=token[:1], h=h[:1], c=c[:1])["logits"][0]

    def softmax(x):
        e = np.exp(x - x.max())
        return e / e.sum()
    def distance(q):  # total variation: half the sum of the differences
        return 0.5 * np.abs(np.bincount(drawn, minlength=96) / B - q).sum()
    assert distance(softmax(logits / temperature)) < 0.03  # measured 0.008-0.018
    assert distance(softmax(logits / (1.5 * temperature))) > 0.09  # another's: 0.13-0.19
