"""The mdl side: each case's model from benchmarks/models.mdl, compiled by whatever the
code generator makes today for the case's device (target cpu or cuda), specialized for
the case's T and B, with the case's weights."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks import data
from benchmarks.cases import DECODE, DECODERS, FORWARD, STEP, TRAIN, Bench, Case
from codegen.compile.options import BuildOptions
from codegen.pipeline import build, import_built

MODELS = Path(__file__).resolve().with_name("models.mdl")
MODEL_OF = {"lstm": "LSTM", "stacked": "Stacked", "milstm": "MILSTM", "gru_if": "GRUIf",
            "tied": "Tied", "ponder": "Ponder",
            "generation": "LSTMStep", "attention": "Attention", "crf": "CRF",
            "greedy": "Greedy", "beam": "Beam"}
MEMORY_MODEL = {"stored": "LSTM", "recompute": "LSTMRecompute", "checkpoint": "LSTMCheckpoint"}


def _build_options(case: Case) -> tuple[str, BuildOptions]:
    """The case's model name, and the options its module is built with."""
    name = MEMORY_MODEL[case.loop] if case.group == "memory" else MODEL_OF[case.group]
    decoder = case.group in DECODERS  # T: the tokens it decodes, a hyper-parameter
    hyper = ("H", "K", "V", "T") if decoder else ("H", "K")
    defines = {k: v for k, v in case.dims.items() if k in hyper}
    specialize = [{"B": case.dims["B"]} if case.group == "generation" or decoder
                  else {"T": case.dims["T"], "B": case.dims["B"]}]
    return name, BuildOptions(case.device, "f32", defines, name, specialize)


def prebuild(cases: list[Case], workers: int) -> None:
    """Builds every case's module into the cache, `workers` compilers at a time, so that
    the worker that times a case only loads it (the GPU rows' nvcc builds take seconds
    each, one after another in the worker)."""
    def one(case: Case) -> None:
        name, options = _build_options(case)
        build(MODELS, f"bench_{name.lower()}", options)
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, cases))


def setup(case: Case, resident: bool = True) -> Bench:
    """Builds (through the cache) the case's model and copies the case's weights into it.
    On a GPU the data stays there (`resident`), as the peers' tensors do: the inputs are
    put on the device once, and outputs and gradients are left there; otherwise each call
    copies them over PCIe, as a call with NumPy arrays does."""
    name, options = _build_options(case)
    module = import_built(MODELS, f"bench_{name.lower()}", options)
    model = getattr(module, name)(seed=0)
    model.set_params(data.params(case))
    xs = data.inputs(case)
    resident = resident and case.device != "cpu"
    place = model.to_device if resident else (lambda a: a)
    model.outputs_on_device = resident
    if case.group == "generation":
        return _generation(model, [place(x) for x in xs["xs"]], place(np.zeros_like(xs["xs"][0])))
    if case.group in DECODERS:
        return _decode(model, place(xs["start"]))
    return _training(model, {k: place(v) for k, v in xs.items()}, xs.get("weights"))


def _host(value) -> np.ndarray:
    """A result as a NumPy array: a device model's are DeviceArrays, which numpy() copies."""
    return value if isinstance(value, np.ndarray) else value.numpy()


def _training(model, xs: dict, weights: np.ndarray | None) -> Bench:
    """`weights`: those of a loss sum(hs * weights), if that is the case's loss."""
    def step():
        model.forward(**xs, training=True)
        return model.backward()

    def check():
        loss = _host(model.forward(**xs, training=True)["loss"])
        grads = {k: _host(v) for k, v in model.backward().items()}
        if weights is None:  # crf's: a sum of positive terms, known to its own size
            return {"loss": loss, **grads}
        # |loss| <= |hs| |weights|, and d loss / d weights = hs: the scale of the terms
        # whose summation order differs between frameworks (the loss cancels a lot)
        scale = np.linalg.norm(grads["input:weights"]) * np.linalg.norm(weights)
        return {"loss": loss, "loss_scale": scale, **grads}
    return Bench({TRAIN: step, FORWARD: lambda: model.forward(**xs)}, check)


def _generation(model, xs: list, zeros) -> Bench:
    state = {"h": zeros, "c": zeros, "t": 0}

    def step():
        out = model.forward(x=xs[state["t"] % len(xs)], h=state["h"], c=state["c"])
        state.update(h=out["h_next"], c=out["c_next"], t=state["t"] + 1)

    def check():
        h = c = zeros
        for x in xs:
            out = model.forward(x=x, h=h, c=c)
            h, c = out["h_next"], out["c_next"]
        return {"h": _host(h), "c": _host(c)}
    return Bench({STEP: step}, check)


def _decode(model, start) -> Bench:
    """T tokens in one call; the check: the tokens and their scores."""
    def check():
        return {k: _host(v) for k, v in model.forward(start=start).items()}
    return Bench({DECODE: lambda: model.forward(start=start)}, check)
