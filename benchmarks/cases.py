"""The suite's cases, one table: what each measures, at which sizes, against which peers,
and how many floating-point operations its passes count. Every process (the driver and
each framework's worker) reads the same table, so a case travels between them by name."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# The workers, by framework. "torch" is eager PyTorch; TorchScript and torch.compile run in
# processes of their own, so that no compiler state leaks into eager runs.
MDL, TORCH, SCRIPT, COMPILE, JAX = "mdl", "torch", "torchscript", "torch.compile", "jax"
SGEMM = "sgemm"  # numpy's matrix product: the peak every row is measured against
CRF_TAGS = 16    # the crf group's K (benchmarks/models.mdl's CRF)
BEAM_WIDTH = 4   # the beam group's K (benchmarks/models.mdl's Beam)
# The ponder group's `while` (benchmarks/models.mdl's Ponder): at most N trips a step, while
# the state's mean absolute change is above this
PONDER_TRIPS, PONDER_SETTLED = 6, 0.02

# The passes. A training step is the forward pass that keeps what the backward needs, then
# the backward of the loss sum(hs * weights), with no optimizer update.
TRAIN, FORWARD, STEP = "training step", "forward", "generation step"
DECODE = "decode"  # T tokens of a language model in one call, each fed the one before
DECODERS = ("greedy", "beam")  # the groups of that pass


@dataclass(frozen=True)
class Case:
    """One measurement: a model at one size (dims T, B, H; N for sgemm), its passes, its
    peers, and for the memory group the loop option of the mdl model it builds."""
    name: str
    group: str
    dims: dict[str, int]
    passes: tuple[str, ...]
    peers: tuple[str, ...]
    loop: str = ""
    device: str = "cpu"  # where every framework runs it: "cpu", or "cuda" (an NVIDIA GPU)

    def frameworks(self, skip_compile: bool) -> list[str]:
        """mdl first, then the peers this run measures."""
        return [MDL] + [p for p in self.peers if not (skip_compile and p == COMPILE)]


@dataclass
class Bench:
    """What a framework's worker builds for one case: a callable per pass (one call, the
    result ready when it returns), the values that prove it computes the same math, and
    notes for the report (torch.compile's compile time and graph count)."""
    passes: dict[str, Callable[[], object]]
    check: Callable[[], dict[str, np.ndarray]]
    notes: dict = field(default_factory=dict)


GROUPS = {  # group: (passes, peers, description)
    "lstm": ((TRAIN, FORWARD), (TORCH, JAX), "std `lstm` in a `for`, against nn.LSTM and lax.scan"),
    "stacked": ((TRAIN, FORWARD), (TORCH, JAX),
                "two `lstm` layers in one `for`, against nn.LSTM(num_layers=2) and lax.scan"),
    "generation": ((STEP,), (TORCH, JAX),
                   "one LSTM step a call, state carried, against nn.LSTMCell and a jitted cell"),
    "milstm": ((TRAIN,), (TORCH, SCRIPT, COMPILE, JAX), "std `milstm` in a `for`"),
    "gru_if": ((TRAIN,), (TORCH, SCRIPT, COMPILE, JAX),
               "a GRU whose input takes one of two branches, chosen per step"),
    "tied": ((TRAIN,), (TORCH, SCRIPT, COMPILE, JAX),
             "an RNN whose state goes through one transition weight twice a step"),
    "ponder": ((TRAIN,), (TORCH, SCRIPT, COMPILE, JAX),
               "an RNN whose every step iterates its state until it settles (a `while` "
               "in the `for`)"),
    "attention": ((TRAIN,), (TORCH, SCRIPT, COMPILE, JAX),
                  "an LSTM decoder attending to T encoder states at every step"),
    "crf": ((TRAIN,), (TORCH, SCRIPT, COMPILE, JAX),
            "a BiLSTM-CRF tagger: the forward algorithm's logsumexp over the tag before, "
            "a step a word"),
    "greedy": ((DECODE,), (TORCH, SCRIPT, COMPILE, JAX),
               "an LSTM language model decoding T tokens greedily (argmax fed back), in one "
               "call"),
    "beam": ((DECODE,), (TORCH, SCRIPT, COMPILE, JAX),
             f"the same model's beam search of width {BEAM_WIDTH} (topk of K * V a step, "
             "states reordered by parent), in one call"),
    "memory": ((TRAIN,), (), "peak memory and time of an LSTM training step, by loop option"),
}


DEVICES = ("cpu", "cuda")


def _case(group: str, loop: str = "", device: str = "cpu", **dims: int) -> Case:
    passes, peers, _ = GROUPS[group]
    size = "-".join(f"{k.lower()}{v}" for k, v in dims.items())
    name = f"{group}-{loop}-{size}" if loop else f"{group}-{size}"
    return Case(("gpu-" if device == "cuda" else "") + name, group, dims, passes, peers, loop,
                device)


def cases(quick: bool, device: str = "cpu") -> list[Case]:
    """Every case of a run on `device`: the issues' sizes, or tiny ones (`--quick`, for the
    tests)."""
    if device == "cuda":
        return _gpu_cases(quick)
    if quick:
        lstm = [dict(T=4, B=2, H=8)]
        cells = attention = crf = stacked = [dict(T=4, B=2, H=8)]
        memory, k = dict(T=24, B=2, H=8), 4
        step = dict(T=4, B=1, H=8)
        decode = [dict(T=4, B=2, H=8, V=12)]
    else:
        sizes = ((35, 1, 128), (35, 20, 200), (35, 32, 256), (35, 32, 512), (35, 64, 1024),
                 (100, 32, 256))
        lstm = [dict(T=t, B=b, H=h) for t, b, h in sizes]
        cells = [dict(T=35, B=b, H=h) for b in (1, 32) for h in (128, 256)]
        attention = [dict(T=35, B=b, H=h) for b, h in ((1, 128), (32, 256), (64, 512))]
        crf = [dict(T=35, B=b, H=h) for b, h in ((1, 128), (32, 256), (64, 512))]
        stacked = [dict(T=35, B=b, H=h) for b, h in ((1, 128), (1, 256), (32, 256), (64, 512))]
        memory, k = dict(T=1000, B=16, H=256), 32
        step = dict(T=35, B=1, H=128)  # T: the steps of the check, from a zero state
        # characters (V = 96) and words (V = 10000); T: the tokens decoded
        decode = [dict(T=35, B=b, H=h, V=v) for b, h, v in ((1, 128, 96), (32, 256, 96),
                                                            (1, 512, 10000))]
    return ([_case("lstm", **d) for d in lstm] + [_case("stacked", **d) for d in stacked]
            + [_case("generation", **step)]
            + [_case(g, **d) for g in ("milstm", "gru_if", "tied", "ponder")
               for d in cells]
            + [_case("attention", **d) for d in attention] + [_case("crf", **d) for d in crf]
            + [_case(g, **d) for g in DECODERS for d in decode]
            + [_case("memory", "stored", **memory), _case("memory", "recompute", **memory),
               _case("memory", "checkpoint", **memory, K=k)])


def _gpu_cases(quick: bool) -> list[Case]:
    """The GPU rows: issue #9's sizes, against cuDNN (nn.LSTM, nn.LSTMCell) and JAX, and
    the decoders (a step's token fed to the next, in one call); no memory cases (they
    measure the host's resident set)."""
    if quick:
        lstm = cells = [dict(T=4, B=2, H=8)]
        step = dict(T=4, B=1, H=8)
        decode = [dict(T=4, B=2, H=8, V=12)]
    else:
        lstm = [dict(T=35, B=b, H=h) for b, h in ((1, 128), (32, 256), (64, 1024), (256, 512))]
        cells = [dict(T=35, B=b, H=h) for b, h in ((1, 128), (32, 256), (64, 1024))]
        step = dict(T=35, B=1, H=128)
        # the CPU rows' decoders, and a word-level one at B=32
        decode = [dict(T=35, B=b, H=h, V=v) for b, h, v in ((1, 128, 96), (32, 256, 96),
                                                            (1, 512, 10000), (32, 512, 10000))]
    return ([_case("lstm", device="cuda", **d) for d in lstm]
            + [_case("generation", device="cuda", **step)]
            + [_case(g, device="cuda", **d) for g in ("milstm", "gru_if") for d in cells]
            + [_case(g, device="cuda", **d) for g in DECODERS for d in decode])


def sgemm_case(quick: bool, device: str = "cpu") -> Case:
    """The square product whose speed is the run's peak (on a GPU, in float32 without
    TF32, as every GPU row runs)."""
    if device == "cuda":
        return Case("gpu-sgemm", SGEMM, {"N": 256 if quick else 8192}, ("sgemm",), (),
                    device="cuda")
    return Case("sgemm", SGEMM, {"N": 256 if quick else 2048}, ("sgemm",), ())


def select(all_cases: list[Case], only: list[str], quick: bool = False) -> list[Case]:
    """The cases named by `--only`: a group, a case's name or a pattern (`lstm-*-b32-*`).
    A name that selects nothing is an error that lists what there is (and, for `quick`
    cases, that their names are their tiny sizes')."""
    if not only:
        return all_cases
    unknown = [n for n in only if not any(_matches(c, n) for c in all_cases)]
    if unknown:
        names = ", ".join([*GROUPS, *(c.name for c in all_cases)])
        renamed = (" (--quick runs every case at a tiny size, named by it: give a group or "
                   "a pattern such as lstm-*)") if quick else ""
        raise ValueError(f"--only {', '.join(unknown)}: no such case{renamed}; there are "
                         f"{names}")
    return [c for c in all_cases if any(_matches(c, n) for n in only)]


def _matches(case: Case, name: str) -> bool:
    return name == case.group or fnmatch.fnmatchcase(case.name, name)


def branch_signs(T: int) -> np.ndarray:
    """gru_if's per-step condition, an input of the model: > 0 (the branch with a
    projection) on two steps of three, < 0 on the third."""
    return np.where(np.arange(T) % 3 == 2, -1.0, 1.0).astype(np.float32)


def flops(case: Case, pass_name: str) -> float:
    """Floating-point operations of one pass, counting only the matrix products:
    2*B*(I+H)*G*H per step for a cell with G gates (I = H here, 2H for attention's input
    and context; gru_if adds 2*B*H*H on the steps whose branch projects; tied runs 3
    products of 2*B*H*H; ponder 2*B*H*H twice a step and once a trip of its `while`,
    benchmarks/data.py's ponder_trips; attention's
    scores and context are 2*T*B*H each; crf runs two LSTMs and its emissions are
    2*T*B*2H*K; stacked runs two LSTM layers; a decode step runs the LSTM and the output
    projection, 2*R*H*V, on R = B rows, B*K for a beam), twice that again in the backward
    (a training step is 3x the forward); the elementwise work is left out."""
    if case.group == SGEMM:
        return 2.0 * case.dims["N"] ** 3
    B, H = case.dims["B"], case.dims["H"]
    if case.group in DECODERS:
        rows = B * (BEAM_WIDTH if case.group == "beam" else 1)
        return case.dims["T"] * 2.0 * rows * (2 * H * 4 * H + H * case.dims["V"])
    steps = 1 if pass_name == STEP else case.dims["T"]
    if case.group == "crf":
        forward = 2 * steps * 2.0 * B * 2 * H * 4 * H + steps * 2.0 * B * 2 * H * CRF_TAGS
        return forward * (3 if pass_name == TRAIN else 1)
    if case.group == "tied":
        return steps * 3 * 2.0 * B * H * H * (3 if pass_name == TRAIN else 1)
    if case.group == "ponder":
        from benchmarks.data import ponder_trips  # (data reads this table)
        products = 2 * steps + ponder_trips(case)
        return products * 2.0 * B * H * H * (3 if pass_name == TRAIN else 1)
    gates = 3 if case.group == "gru_if" else 4
    inputs = 2 * H if case.group == "attention" else H
    forward = steps * 2.0 * B * (inputs + H) * gates * H
    if case.group == "attention":
        forward += steps * 2 * 2.0 * case.dims["T"] * B * H
    if case.group == "stacked":
        forward *= 2
    if case.group == "gru_if":
        taken = int((branch_signs(case.dims["T"]) > 0).sum())
        forward += taken * 2.0 * B * H * H
    return forward * (3 if pass_name == TRAIN else 1)


def by_name(name: str, quick: bool) -> Case:
    """The case of that name in the run's table (workers receive cases by name)."""
    table = {c.name: c for d in DEVICES for c in [*cases(quick, d), sgemm_case(quick, d)]}
    return table[name]
