"""An LSTM written in .mdl (the standard library's `lstm` in a `for`), compiled natively,
against torch.nn.LSTM with the same weights: outputs and every gradient."""
import numpy as np
import pytest

from codegen import load

torch = pytest.importorskip("torch", reason="torch is not installed (pip install "
                                            "torch==2.13.0 to run this comparison)")

MODEL = """
import "std/rnn.mdl"
model Parity(I = 5, H = 4) {
  input xs : f32[T, B, I]; input h0 : f32[B, H]; input c0 : f32[B, H]
  input weights : f32[T, B, H]
  h = h0
  c = c0
  hs = for x in xs {
    h, c = lstm(x, h, c)
    yield h
  }
  output out = hs
  output last_c = c
  output loss = sum(hs * weights) + sum(c * c)
  minimize loss
}
"""


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    path = tmp_path_factory.mktemp("parity") / "parity.mdl"
    path.write_text(MODEL)
    return load(path, dtype="f64").Parity(seed=0)


def test_lstm_matches_torch(parity):
    rng = np.random.default_rng(0)
    T, B, I, H = 6, 3, 5, 4
    x = {"xs": rng.standard_normal((T, B, I)), "h0": rng.standard_normal((B, H)),
         "c0": rng.standard_normal((B, H)), "weights": rng.standard_normal((T, B, H))}
    p = parity.params
    out = parity.forward(**x, training=True)
    grads = parity.backward()

    lstm = torch.nn.LSTM(I, H).double()
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.from_numpy(p["lstm/W"].T.copy()))
        lstm.weight_hh_l0.copy_(torch.from_numpy(p["lstm/U"].T.copy()))
        lstm.bias_ih_l0.copy_(torch.from_numpy(p["lstm/b"]))
        lstm.bias_hh_l0.zero_()
    t = {k: torch.from_numpy(v).requires_grad_() for k, v in x.items()}
    hs, (hT, cT) = lstm(t["xs"], (t["h0"][None], t["c0"][None]))
    loss = (hs * t["weights"]).sum() + (cT[0] * cT[0]).sum()
    loss.backward()

    close = lambda a, b: np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-10,  # noqa
                                                    atol=1e-12)
    close(out["out"], hs)
    close(out["last_c"], cT[0])
    close(out["loss"], loss)
    close(grads["lstm/W"], lstm.weight_ih_l0.grad.T)
    close(grads["lstm/U"], lstm.weight_hh_l0.grad.T)
    close(grads["lstm/b"], lstm.bias_ih_l0.grad)
    for name in ("xs", "h0", "c0"):
        close(grads[f"input:{name}"], t[name].grad)
