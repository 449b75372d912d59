"""The cells of std/rnn.mdl, run by the reference interpreter in loops (with lengths,
reversed), against independent NumPy implementations written here, which run each
sequence of the batch on its own (a packed sequence); and against torch.nn.LSTM/GRU and
torch.nn.LayerNorm where torch is installed."""
from __future__ import annotations

import numpy as np
import pytest
from ir_helpers import model, random_params

from codegen.reference import interpreter as reference

H, E, T, B = 3, 2, 5, 3


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_lstm(p, x, h, c):
    i, f, g, o = np.split(x @ p["W"] + h @ p["U"] + p["b"], 4, axis=-1)
    c2 = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(c2), c2


def np_gru(p, x, h):
    xr, xz, xn = np.split(x @ p["W"] + p["bW"], 3, axis=-1)
    hr, hz, hn = np.split(h @ p["U"] + p["bU"], 3, axis=-1)
    r, z = sigmoid(xr + hr), sigmoid(xz + hz)
    n = np.tanh(xn + r * hn)
    return ((1 - z) * n + z * h,)


def np_milstm(p, x, h, c):
    xw, hu = x @ p["W"], h @ p["U"]
    g = p["alpha"] * xw * hu + p["beta1"] * hu + p["beta2"] * xw + p["b"]
    i, f, o, u = np.split(g, 4, axis=-1)
    c2 = sigmoid(f) * c + sigmoid(i) * np.tanh(u)
    return sigmoid(o) * np.tanh(c2), c2


def np_layer_norm(gamma, beta, x, eps=1e-5):
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps) \
        * gamma + beta


def np_ln_lstm(p, x, h, c):
    def norm(scope, v):
        return np_layer_norm(p[f"{scope}/gamma"], p[f"{scope}/beta"], v)
    gates = norm("input_norm", x @ p["W"]) + norm("hidden_norm", h @ p["U"])
    i, f, g, o = np.split(gates, 4, axis=-1)
    c2 = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(norm("cell_norm", c2)), c2


CELLS = {"lstm": (np_lstm, "lstm(x, h, c)", "h, c"), "gru": (np_gru, "gru(x, h)", "h"),
         "ln_lstm": (np_ln_lstm, "ln_lstm(x, h, c)", "h, c"),
         "milstm": (np_milstm, "milstm(x, h, c)", "h, c")}


def np_packed(cell, p, xs, lengths, n_state, reversed_):
    """Each row on its own over its real steps (backwards when reversed): the yields at
    their time positions (zeros elsewhere) and the final states."""
    ys = np.zeros((xs.shape[0], xs.shape[1], H))
    finals = [np.zeros((xs.shape[1], H)) for _ in range(n_state)]
    for b, n in enumerate(lengths):
        state = tuple(np.zeros((1, H)) for _ in range(n_state))
        for t in (reversed(range(n)) if reversed_ else range(n)):
            state = cell(p, xs[t, b][None], *state)
            ys[t, b] = state[0][0]
        for k in range(n_state):
            finals[k][b] = state[k][0]
    return ys, finals


def cell_model(call: str, state: str, options: str, reversed_: bool) -> str:
    seq = "reversed(xs)" if reversed_ else "xs"
    names = [s.strip() for s in state.split(",")]
    return f'''
import "std/rnn.mdl"
model M(H = {H}, E = {E}) {{
  input xs : f32[T, B, E]
  input lengths : i32[B]
  {"; ".join(f"{n} = zeros[B, H]" for n in names)}
  ys = for x in {seq} {options} {{
    {state} = {call}
    yield {names[0]}
  }}
  output ys
  {"; ".join(f"output {n}" for n in names)}
}}'''


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("with_lengths", [False, True], ids=["all", "lengths"])
@pytest.mark.parametrize("reversed_", [False, True], ids=["forward", "reversed"])
def test_cell_matches_numpy(cell, with_lengths, reversed_):
    np_cell, call, state = CELLS[cell]
    graph = model(cell_model(call, state, "(lengths = lengths)" if with_lengths else "",
                             reversed_))
    # names within the cell's scope: lstm/W is W, ln_lstm/input_norm/gamma input_norm/gamma
    params = {k.split("/", 1)[1]: v for k, v in random_params(graph, 2).items()}
    rng = np.random.default_rng(5)
    xs = rng.normal(size=(T, B, E))
    lengths = np.array([5, 2, 0] if with_lengths else [T] * B, np.int32)
    out = reference.run(graph, {"xs": xs, "lengths": lengths},
                        {k: params[k.split("/", 1)[1]] for k in graph.params})
    names = [s.strip() for s in state.split(",")]
    ys, finals = np_packed(np_cell, params, xs, lengths, len(names), reversed_)
    assert np.allclose(out["ys"], ys, rtol=1e-12, atol=1e-14)
    for name, final in zip(names, finals):
        assert np.allclose(out[name], final, rtol=1e-12, atol=1e-14)


def test_the_loop_runs_in_float32_too():
    np_cell, call, state = CELLS["lstm"]
    graph = model(cell_model(call, state, "(lengths = lengths)", True))
    params = random_params(graph, 1)
    inputs = {"xs": np.random.default_rng(6).normal(size=(T, B, E)),
              "lengths": np.array([4, 5, 1], np.int32)}
    single = reference.run(graph, inputs, params, dtype=np.float32)
    double = reference.run(graph, inputs, params)
    assert single["ys"].dtype == np.float32 and double["ys"].dtype == np.float64
    assert np.allclose(single["ys"], double["ys"], atol=1e-5)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_cell_matches_torch(cell):
    torch = pytest.importorskip(
        "torch", reason="torch is not installed; test_cell_matches_numpy covers the cells")
    np_cell, call, state = CELLS[cell]
    graph = model(cell_model(call, state, "", False))
    params = random_params(graph, 3)
    p = {k.split("/")[-1]: torch.tensor(v) for k, v in params.items()}
    net = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(E, H).double()
    with torch.no_grad():
        net.weight_ih_l0.copy_(p["W"].T)
        net.weight_hh_l0.copy_(p["U"].T)
        if cell == "lstm":
            net.bias_ih_l0.copy_(p["b"])
            net.bias_hh_l0.zero_()
        else:
            net.bias_ih_l0.copy_(p["bW"])
            net.bias_hh_l0.copy_(p["bU"])
    xs = np.random.default_rng(7).normal(size=(T, B, E))
    out = reference.run(graph, {"xs": xs, "lengths": np.full(B, T, np.int32)}, params)
    with torch.no_grad():
        ys, _ = net(torch.tensor(xs))
    assert np.allclose(out["ys"], ys.numpy(), rtol=1e-10, atol=1e-12)


def test_layer_norm_matches_torch():
    torch = pytest.importorskip(
        "torch", reason="torch is not installed; test_cell_matches_numpy covers ln_lstm")
    graph = model('''
import "std/rnn.mdl"
model M(D = 5) {
  input x : f32[N, D]
  output y = layer_norm(x) as norm
  output z = layer_norm(x, eps = 0.1) as wide
}''')
    params = random_params(graph, 4)
    x = np.random.default_rng(8).normal(size=(4, 5)) * 3.0 + 1.0
    out = reference.run(graph, {"x": x}, params)
    for name, scope, eps in (("y", "norm", 1e-5), ("z", "wide", 0.1)):
        want = torch.nn.functional.layer_norm(
            torch.tensor(x), (5,), torch.tensor(params[f"{scope}/gamma"]),
            torch.tensor(params[f"{scope}/beta"]), eps)
        np.testing.assert_allclose(out[name], want.numpy(), rtol=1e-12, atol=1e-13)


def test_linear_and_layer_norm_take_any_leading_dims_as_torch_does():
    """std's `linear` takes `[..., N, I]` and `layer_norm` `[..., D]`, as torch.nn.Linear
    and torch.nn.LayerNorm take `[*, I]`: a sequence's `[T, B, I]` with the weights of a
    step's `[B, I]` (one call's parameters serve both)."""
    torch = pytest.importorskip(
        "torch", reason="torch is not installed; test_checker.py checks the types")
    graph = model('''
import "std/rnn.mdl"
model M(I = 4, D = 3) {
  input xs : f32[T, B, I]
  output y = layer_norm(linear(xs, D) as proj) as norm
  output last = layer_norm(linear(xs[-1], D) as proj) as norm
}''')
    params = random_params(graph, 5)
    xs = np.random.default_rng(9).normal(size=(5, 3, 4))
    out = reference.run(graph, {"xs": xs}, params)
    p = {k: torch.tensor(v) for k, v in params.items()}
    want = torch.nn.functional.layer_norm(
        torch.nn.functional.linear(torch.tensor(xs), p["proj/W"].T, p["proj/b"]), (3,),
        p["norm/gamma"], p["norm/beta"])
    assert out["y"].shape == (5, 3, 3)
    np.testing.assert_allclose(out["y"], want.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(out["last"], want.numpy()[-1], rtol=1e-12, atol=1e-13)
