"""The inputs and weights of a case, the same arrays in every worker: drawn from a fixed
seed, named as the mdl models name them (`lstm/W` is [I, 4H], used as `x @ W`). Each peer
copies them into its own layout, so that every framework runs the same math on the same
numbers and the suite can compare their losses and gradients."""
from __future__ import annotations

import numpy as np

from benchmarks.cases import (CRF_TAGS, DECODERS, PONDER_SETTLED, PONDER_TRIPS, Case,
                              branch_signs)


def inputs(case: Case) -> dict[str, np.ndarray]:
    """The model's inputs: `xs` [T, B, H] and the loss weights (the generation case
    steps through `xs` one row at a time; gru_if also takes its per-step `signs`,
    attention the encoder states `enc` [T, B, H] it attends to; crf has tags [T, B] for
    the loss instead of weights; a decoder takes only each row's `start` token)."""
    T, B, H = (case.dims[k] for k in "TBH")
    rng = np.random.default_rng(1)
    if case.group in DECODERS:  # the token each row starts from
        return {"start": rng.integers(0, case.dims["V"], B).astype(np.int32)}
    out = {"xs": rng.standard_normal((T, B, H), dtype=np.float32)}
    if case.group == "crf":
        out["tags"] = rng.integers(0, CRF_TAGS, (T, B)).astype(np.int32)
        return out
    if case.group == "attention":  # the size of an LSTM's states: scores of a few units
        out["enc"] = rng.uniform(-1.0, 1.0, (T, B, H)).astype(np.float32)
    if case.group != "generation":
        out["weights"] = rng.standard_normal((T, B, H), dtype=np.float32)
    if case.group == "gru_if":
        out["signs"] = branch_signs(T)
    return out


def params(case: Case) -> dict[str, np.ndarray]:
    """The model's parameters: uniform(-1/sqrt(H), 1/sqrt(H)) as std/rnn.mdl draws them;
    MILSTM's scales near one and its bias near zero, so every term of its gate matters."""
    H = case.dims["H"]
    rng = np.random.default_rng(0)
    k = 1.0 / np.sqrt(H)

    def uniform(*shape: int) -> np.ndarray:
        return rng.uniform(-k, k, shape).astype(np.float32)

    def near(value: float, n: int) -> np.ndarray:
        return (value + 0.1 * rng.standard_normal(n)).astype(np.float32)
    if case.group == "milstm":
        return {"milstm/W": uniform(H, 4 * H), "milstm/U": uniform(H, 4 * H),
                "milstm/alpha": near(1.0, 4 * H), "milstm/beta1": near(1.0, 4 * H),
                "milstm/beta2": near(1.0, 4 * H), "milstm/b": near(0.0, 4 * H)}
    if case.group == "gru_if":
        return {"P": uniform(H, H), "gru/W": uniform(H, 3 * H), "gru/U": uniform(H, 3 * H),
                "gru/bW": uniform(3 * H), "gru/bU": uniform(3 * H)}
    if case.group == "tied":
        return {"W": uniform(H, H), "U": uniform(H, H), "b": uniform(H)}
    if case.group == "ponder":
        return {name: uniform(H, H) for name in "WUV"} | {"b": uniform(H), "c": uniform(H)}
    if case.group == "crf":  # transitions of the size of the emissions, so both matter
        lstms = {f"{scope}/{name}": uniform(*shape) for scope in ("forward", "backward")
                 for name, shape in (("W", (H, 4 * H)), ("U", (H, 4 * H)), ("b", (4 * H,)))}
        return {**lstms, "emit/W": uniform(2 * H, CRF_TAGS), "emit/b": uniform(CRF_TAGS),
                "transitions": rng.uniform(-0.5, 0.5, (CRF_TAGS, CRF_TAGS)).astype(np.float32)}
    if case.group in DECODERS:  # logits a few units apart: a choice no rounding can flip
        V = case.dims["V"]
        return {"embedding": rng.standard_normal((V, H), dtype=np.float32),
                "lstm/W": uniform(H, 4 * H), "lstm/U": uniform(H, 4 * H),
                "lstm/b": uniform(4 * H), "out/W": 8.0 * uniform(H, V), "out/b": uniform(V)}
    if case.group == "stacked":
        return {f"{layer}/{name}": uniform(*shape) for layer in ("layer1", "layer2")
                for name, shape in (("W", (H, 4 * H)), ("U", (H, 4 * H)), ("b", (4 * H,)))}
    inputs = 2 * H if case.group == "attention" else H  # attention: x beside the context
    return {"lstm/W": uniform(inputs, 4 * H), "lstm/U": uniform(H, 4 * H),
            "lstm/b": uniform(4 * H)}


def ponder_trips(case: Case) -> int:
    """The trips of the ponder group's `while`, all steps together, on the case's data: its
    forward replayed in float32 (the peers' losses agree only where each takes the same
    trips: the changes compared with PONDER_SETTLED stay at least 0.2% away from it at the
    suite's sizes)."""
    p, xs = params(case), inputs(case)["xs"]
    h = np.zeros(xs.shape[1:], np.float32)
    trips = 0
    for x in xs:
        xw = x @ p["W"]
        h = np.tanh(xw + h @ p["U"] + p["b"])
        for _ in range(PONDER_TRIPS):
            g = np.tanh(xw + h @ p["V"] + p["c"])
            change, h = np.mean(np.abs(g - h)), g
            trips += 1
            if change <= PONDER_SETTLED:
                break
    return trips
