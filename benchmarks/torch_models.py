"""The PyTorch side: nn.LSTM and nn.LSTMCell for the LSTM cases, and the MILSTM, the
GRU with a branch and the attention decoder written as plain modules (the per-step math
of std/rnn.mdl, with mdl's weight layout, `x @ W`), run eagerly, through TorchScript or
through torch.compile, on the case's device (the GPU rows: cuDNN's LSTM, float32 without
TF32; every pass waits for the GPU before it returns)."""
from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from benchmarks import data
from benchmarks.cases import (BEAM_WIDTH, DECODE, DECODERS, FORWARD, PONDER_SETTLED, PONDER_TRIPS,
                              STEP, TRAIN, Bench, Case)


class Cell(nn.Module):
    """A loop written as a plain module, its parameters the case's weights under mdl's
    names (`names`: attribute -> mdl name), in mdl's layout."""
    names: dict[str, str] = {}

    def __init__(self, params: dict[str, np.ndarray]):
        super().__init__()
        for attr, key in self.names.items():
            setattr(self, attr, nn.Parameter(torch.from_numpy(params[key].copy())))

    def gradients(self) -> dict[str, np.ndarray]:
        """The parameters' gradients under mdl's names (in mdl's layout already)."""
        return {key: _numpy(getattr(self, attr).grad) for attr, key in self.names.items()}


class MILSTM(Cell):
    """std/rnn.mdl's `milstm` in a loop over time, loss sum(hs * weights)."""
    names = {"W": "milstm/W", "U": "milstm/U", "alpha": "milstm/alpha",
             "beta1": "milstm/beta1", "beta2": "milstm/beta2", "b": "milstm/b"}

    def forward(self, xs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        h = xs.new_zeros(xs.size(1), self.U.size(0))
        c = h
        hs = []
        for t in range(xs.size(0)):
            xw = xs[t] @ self.W
            hu = h @ self.U
            g = self.alpha * xw * hu + self.beta1 * hu + self.beta2 * xw + self.b
            i, f, o, u = g.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(u)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
        return (torch.stack(hs) * weights).sum()


class GRUIf(Cell):
    """benchmarks/models.mdl's GRUIf: per step, the input is projected (tanh(x @ P)) when
    that step's sign is positive, else halved; then std/rnn.mdl's `gru`."""
    names = {"P": "P", "W": "gru/W", "U": "gru/U", "bW": "gru/bW", "bU": "gru/bU"}

    def forward(self, xs: torch.Tensor, signs: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
        h = xs.new_zeros(xs.size(1), self.U.size(0))
        hs = []
        for t in range(xs.size(0)):
            if bool(signs[t] > 0.0):
                v = torch.tanh(xs[t] @ self.P)
            else:
                v = 0.5 * xs[t]
            xr, xz, xn = (v @ self.W + self.bW).chunk(3, 1)
            hr, hz, hn = (h @ self.U + self.bU).chunk(3, 1)
            r = torch.sigmoid(xr + hr)
            z = torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = (1.0 - z) * n + z * h
            hs.append(h)
        return (torch.stack(hs) * weights).sum()


class Tied(Cell):
    """benchmarks/models.mdl's Tied: per step, tanh(x @ W + h @ U + b), then the state
    through U again, tanh(h @ U + b)."""
    names = {"W": "W", "U": "U", "b": "b"}

    def forward(self, xs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        h = xs.new_zeros(xs.size(1), self.U.size(0))
        hs = []
        for t in range(xs.size(0)):
            h = torch.tanh(xs[t] @ self.W + h @ self.U + self.b)
            h = torch.tanh(h @ self.U + self.b)
            hs.append(h)
        return (torch.stack(hs) * weights).sum()


class Ponder(Cell):
    """benchmarks/models.mdl's Ponder: per step, tanh(x @ W + h @ U + b), then the state
    through tanh(x @ W + h @ V + c) again while its mean absolute change is above
    PONDER_SETTLED, at most PONDER_TRIPS times (a Python `while` reading the change)."""
    names = {"W": "W", "U": "U", "V": "V", "b": "b", "c": "c"}

    def __init__(self, params: dict[str, np.ndarray]):
        super().__init__(params)
        self.trips, self.settled = PONDER_TRIPS, PONDER_SETTLED  # (TorchScript reads no globals)

    def forward(self, xs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        h = xs.new_zeros(xs.size(1), self.U.size(0))
        hs = []
        for t in range(xs.size(0)):
            xw = xs[t] @ self.W
            h = torch.tanh(xw + h @ self.U + self.b)
            n = 0
            change = 1.0
            while n < self.trips and change > self.settled:
                g = torch.tanh(xw + h @ self.V + self.c)
                change = float((g - h).abs().mean())
                h = g
                n += 1
            hs.append(h)
        return (torch.stack(hs) * weights).sum()


class Attention(Cell):
    """benchmarks/models.mdl's Attention: std/rnn.mdl's `lstm` on x beside the last
    context, dot-product scores against the encoder states by a batched product, their
    softmax over time, and the context as another."""
    names = {"W": "lstm/W", "U": "lstm/U", "b": "lstm/b"}

    def forward(self, enc: torch.Tensor, xs: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
        h = xs.new_zeros(xs.size(1), self.U.size(0))
        c, context = h, h
        keys = enc.transpose(0, 1)                                       # [B, T, H]
        hs = []
        for t in range(xs.size(0)):
            g = torch.cat([xs[t], context], 1) @ self.W + h @ self.U + self.b
            i, f, u, o = g.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(u)
            h = torch.sigmoid(o) * torch.tanh(c)
            scores = torch.softmax(torch.bmm(keys, h.unsqueeze(2)), 1)   # [B, T, 1]
            context = torch.bmm(scores.transpose(1, 2), keys).squeeze(1)
            hs.append(h + context)
        return (torch.stack(hs) * weights).sum()


class CRF(nn.Module):
    """benchmarks/models.mdl's CRF as a PyTorch user writes it: nn.LSTM(bidirectional=True)
    (oneDNN's LSTM on the CPU, cuDNN's on a GPU), an nn.Linear for the emissions, and the
    forward algorithm's loop over time, the case's weights copied into torch's layout."""

    def __init__(self, params: dict[str, np.ndarray]):
        super().__init__()
        H, K = params["forward/U"].shape[0], params["transitions"].shape[0]
        self.lstm = nn.LSTM(H, H, bidirectional=True)
        self.emit = nn.Linear(2 * H, K)
        self.transitions = nn.Parameter(torch.from_numpy(params["transitions"].copy()))
        with torch.no_grad():  # mdl multiplies x @ W and has one bias
            for suffix, scope in (("", "forward"), ("_reverse", "backward")):
                getattr(self.lstm, "weight_ih_l0" + suffix).copy_(
                    torch.from_numpy(params[scope + "/W"].T))
                getattr(self.lstm, "weight_hh_l0" + suffix).copy_(
                    torch.from_numpy(params[scope + "/U"].T))
                getattr(self.lstm, "bias_ih_l0" + suffix).copy_(
                    torch.from_numpy(params[scope + "/b"]))
                getattr(self.lstm, "bias_hh_l0" + suffix).zero_()
            self.emit.weight.copy_(torch.from_numpy(params["emit/W"].T))
            self.emit.bias.copy_(torch.from_numpy(params["emit/b"]))

    def forward(self, xs: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        emissions = self.emit(self.lstm(xs)[0])                          # [T, B, K]
        hot = nn.functional.one_hot(tags.long(), self.transitions.size(0)).to(xs.dtype)
        alpha = emissions[0]
        gold = (hot[0] * alpha).sum(1)
        for t in range(1, xs.size(0)):
            alpha = torch.logsumexp(alpha.unsqueeze(2) + self.transitions, 1) + emissions[t]
            gold = gold + ((hot[t - 1] @ self.transitions + emissions[t]) * hot[t]).sum(1)
        return (torch.logsumexp(alpha, 1) - gold).sum()

    def gradients(self) -> dict[str, np.ndarray]:
        """The parameters' gradients under mdl's names, in mdl's layout."""
        out = {"transitions": _numpy(self.transitions.grad),
               "emit/W": _numpy(self.emit.weight.grad).T, "emit/b": _numpy(self.emit.bias.grad)}
        for suffix, scope in (("", "forward"), ("_reverse", "backward")):
            grad = {name: _numpy(getattr(self.lstm, name + suffix).grad)
                    for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0")}
            out.update({scope + "/W": grad["weight_ih_l0"].T,
                        scope + "/U": grad["weight_hh_l0"].T, scope + "/b": grad["bias_ih_l0"]})
        return out


class LanguageModel(nn.Module):
    """benchmarks/models.mdl's decoders' language model as a PyTorch user writes it: an
    embedding, nn.LSTMCell and nn.Linear, the case's weights copied into torch's layout;
    `steps`: the tokens a call decodes."""

    def __init__(self, params: dict[str, np.ndarray], steps: int):
        super().__init__()
        H, V = params["lstm/U"].shape[0], params["out/b"].shape[0]
        self.steps = steps
        self.embedding = nn.Embedding(V, H)
        self.cell = _lstm_cell(params)
        self.out = nn.Linear(H, V)
        with torch.no_grad():  # mdl multiplies x @ W
            self.embedding.weight.copy_(torch.from_numpy(params["embedding"]))
            self.out.weight.copy_(torch.from_numpy(params["out/W"].T))
            self.out.bias.copy_(torch.from_numpy(params["out/b"]))


class Greedy(LanguageModel):
    """Greedy decoding: each step's most likely token is the next step's input."""

    def forward(self, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.zeros(start.size(0), self.cell.hidden_size, device=start.device)
        c, token, score = h, start.long(), torch.zeros(start.size(0), device=start.device)
        tokens = []
        for _ in range(self.steps):
            h, c = self.cell(self.embedding(token), (h, c))
            best, token = torch.log_softmax(self.out(h), 1).max(1)
            score = score + best
            tokens.append(token)
        return torch.stack(tokens), score


class Beam(LanguageModel):
    """Beam search of width `width`: each row's beams as rows of one batch, the K best of
    their K * V extensions by `topk`, the states gathered from the beams they extend."""

    def __init__(self, params: dict[str, np.ndarray], steps: int, width: int):
        super().__init__(params, steps)
        self.width = width

    def forward(self, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, K, V = start.size(0), self.width, self.out.out_features
        where = start.device
        h = torch.zeros(B * K, self.cell.hidden_size, device=where)
        c, token = h, start.long().repeat_interleave(K)
        scores = torch.full((B, K), float("-inf"), device=where)
        scores[:, 0] = 0.0  # one sequence to start from
        sequences = torch.zeros(B * K, 0, dtype=torch.long, device=where)
        base = (torch.arange(B, device=where) * K).unsqueeze(1)
        for _ in range(self.steps):
            h, c = self.cell(self.embedding(token), (h, c))
            logp = torch.log_softmax(self.out(h), 1).view(B, K, V)
            scores, best = (scores.unsqueeze(2) + logp).view(B, K * V).topk(K, 1)
            rows = (base + torch.div(best, V, rounding_mode="floor")).view(-1)
            token = (best % V).view(-1)
            h, c = h[rows], c[rows]
            sequences = torch.cat([sequences[rows], token.unsqueeze(1)], 1)
        return sequences.view(B, K, self.steps), scores


CELLS = {"milstm": MILSTM, "gru_if": GRUIf, "tied": Tied, "ponder": Ponder,
         "attention": Attention, "crf": CRF}


def eager(case: Case) -> Bench:
    """nn.LSTM / nn.LSTMCell for the LSTM cases, the plain modules for the others."""
    if case.group in ("lstm", "stacked"):
        return _on_device(_lstm(case), case)
    if case.group == "generation":
        return _on_device(_generation(case), case)
    if case.group in DECODERS:
        return _on_device(_decode(_decoder(case), case), case)
    module = CELLS[case.group](data.params(case)).to(_device(case))
    return _on_device(_training(module, module, case), case)


def scripted(case: Case) -> Bench:
    """The module through torch.jit.script."""
    if case.group in DECODERS:
        return _on_device(_decode(torch.jit.script(_decoder(case)), case), case)
    module = CELLS[case.group](data.params(case)).to(_device(case))
    return _on_device(_training(module, torch.jit.script(module), case), case)


def cuda_product(n: int) -> Bench:
    """The GPU's float32 peak for the GPU rows: an n x n product a call (sgemm.py)."""
    _device_named("cuda")
    a, b = (torch.randn(n, n, device="cuda") for _ in range(2))
    out = torch.empty_like(a)

    def product():
        torch.matmul(a, b, out=out)
        torch.cuda.synchronize()
    return Bench({"sgemm": product}, dict)


def _device(case: Case) -> torch.device:
    return _device_named(case.device)


def _device_named(name: str) -> torch.device:
    if name == "cuda":  # the same float32 math as mdl's cuBLAS products and kernels
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return torch.device(name)


def _on_device(bench: Bench, case: Case) -> Bench:
    """On a GPU every pass returns once its work is done, as mdl's calls do."""
    if case.device != "cuda":
        return bench

    def synced(run):
        def call():
            result = run()
            torch.cuda.synchronize()
            return result
        return call
    bench.passes = {name: synced(run) for name, run in bench.passes.items()}
    return bench


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def compiled(case: Case) -> Bench:
    """The module through torch.compile; the first call of its pass (a training step: the
    forward and backward graphs compiled) is timed as the compile time, and the graphs it
    made are counted: none means that Dynamo gave up on the loop and runs it eagerly."""
    from torch._dynamo.utils import counters
    if case.group in DECODERS:  # the loop of 35 steps, unrolled into the graph
        bench = _on_device(_decode(torch.compile(_decoder(case)), case), case)
    else:
        module = CELLS[case.group](data.params(case)).to(_device(case))
        bench = _on_device(_training(module, torch.compile(module), case), case)
    graphs = counters["stats"]["unique_graphs"]
    start = time.perf_counter()
    bench.passes[case.passes[0]]()
    bench.notes["compile_s"] = time.perf_counter() - start
    bench.notes["graphs"] = counters["stats"]["unique_graphs"] - graphs
    return bench


def _tensors(case: Case, grad: bool = False) -> dict[str, torch.Tensor]:
    """The case's inputs; with `grad`, the float ones (xs, weights, attention's enc)
    require gradients, as mdl's backward returns them too (an LSTM fed by an embedding
    needs d xs anyway)."""
    out = {k: torch.from_numpy(v).to(_device(case)) for k, v in data.inputs(case).items()}
    for k in ("enc", "xs", "weights") if grad else ():
        if k in out:
            out[k].requires_grad_(True)
    return out


def _input_grads(xs: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {f"input:{k}": _numpy(x.grad) for k, x in xs.items() if x.requires_grad}


def _zero_grad(module: nn.Module, xs: dict[str, torch.Tensor]) -> None:
    module.zero_grad(set_to_none=True)
    for x in xs.values():
        x.grad = None


def _training(module: nn.Module, run, case: Case) -> Bench:
    xs = _tensors(case, grad=True)

    def step():
        _zero_grad(module, xs)
        run(**xs).backward()

    def check():
        _zero_grad(module, xs)
        loss = run(**xs)
        loss.backward()
        return {"loss": _numpy(loss), **_input_grads(xs), **module.gradients()}
    return Bench({TRAIN: step}, check)


def _lstm(case: Case) -> Bench:
    """nn.LSTM, of two layers for the stacked group (mdl's scopes layer1 and layer2)."""
    H, p = case.dims["H"], data.params(case)
    scopes = ("layer1", "layer2") if case.group == "stacked" else ("lstm",)
    lstm = nn.LSTM(H, H, num_layers=len(scopes))
    with torch.no_grad():  # mdl multiplies x @ W and has one bias; torch stores W transposed
        for k, scope in enumerate(scopes):
            getattr(lstm, f"weight_ih_l{k}").copy_(torch.from_numpy(p[scope + "/W"].T))
            getattr(lstm, f"weight_hh_l{k}").copy_(torch.from_numpy(p[scope + "/U"].T))
            getattr(lstm, f"bias_ih_l{k}").copy_(torch.from_numpy(p[scope + "/b"]))
            getattr(lstm, f"bias_hh_l{k}").zero_()
    lstm.to(_device(case))
    xs = _tensors(case, grad=True)

    def loss():
        return (lstm(xs["xs"])[0] * xs["weights"]).sum()

    def step():
        _zero_grad(lstm, xs)
        loss().backward()

    def forward():
        with torch.no_grad():
            return loss()

    def check():
        _zero_grad(lstm, xs)
        value = loss()
        value.backward()
        grads = {}
        for k, scope in enumerate(scopes):
            grads.update({scope + "/W": _numpy(getattr(lstm, f"weight_ih_l{k}").grad).T,
                          scope + "/U": _numpy(getattr(lstm, f"weight_hh_l{k}").grad).T,
                          scope + "/b": _numpy(getattr(lstm, f"bias_ih_l{k}").grad)})
        return {"loss": _numpy(value), **_input_grads(xs), **grads}
    return Bench({TRAIN: step, FORWARD: forward}, check)


def _lstm_cell(p: dict[str, np.ndarray]) -> nn.LSTMCell:
    """nn.LSTMCell with std/rnn.mdl's `lstm` weights (scope lstm): mdl multiplies x @ W and
    has one bias, torch stores W transposed and has two."""
    cell = nn.LSTMCell(p["lstm/W"].shape[0], p["lstm/U"].shape[0])
    with torch.no_grad():
        cell.weight_ih.copy_(torch.from_numpy(p["lstm/W"].T))
        cell.weight_hh.copy_(torch.from_numpy(p["lstm/U"].T))
        cell.bias_ih.copy_(torch.from_numpy(p["lstm/b"]))
        cell.bias_hh.zero_()
    return cell


def _generation(case: Case) -> Bench:
    cell = _lstm_cell(data.params(case)).to(_device(case))
    xs = list(_tensors(case)["xs"])
    zeros = torch.zeros_like(xs[0])
    state = {"hc": (zeros, zeros), "t": 0}

    @torch.no_grad()
    def step():
        state["hc"] = cell(xs[state["t"] % len(xs)], state["hc"])
        state["t"] += 1

    @torch.no_grad()
    def check():
        hc = (zeros, zeros)
        for x in xs:
            hc = cell(x, hc)
        return {"h": _numpy(hc[0]), "c": _numpy(hc[1])}
    return Bench({STEP: step}, check)


def _decoder(case: Case) -> nn.Module:
    """The case's decoder, on the case's device."""
    if case.group == "beam":
        return Beam(data.params(case), case.dims["T"], BEAM_WIDTH).to(_device(case))
    return Greedy(data.params(case), case.dims["T"]).to(_device(case))


def _decode(module, case: Case) -> Bench:
    start = _tensors(case)["start"]

    @torch.no_grad()
    def decode():
        return module(start)

    def check():
        tokens, scores = decode()
        return {"tokens": _numpy(tokens).astype(np.int32), "scores": _numpy(scores)}
    return Bench({DECODE: decode}, check)
