"""One model of a built module against the NumPy reference interpreter, the
differential fuzzer's oracle (tests/fuzz_programs.py): the inference outputs, the
training outputs and every gradient (parameters and float inputs), on inputs and
weights drawn from a seed and their names. A mismatch says which stage is to blame
(the graphs after the passes, run in the reference, or the backend) and which side
central differences agree with."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
from optimizer_reference import CONFIGS, Reference

from codegen.ops.rng import derive
from codegen.pipeline import differentiate, for_backends
from codegen.reference import gradcheck, interpreter as reference

TOLERANCE = 1e-9               # relative to the largest element, both sides in f64
# An array is compared relative to its largest element, but never to less than NOISE
# times the largest value of the case: rounding noise stays that far below it.
NOISE = 1e-6
SPECIALIZED = {"T": 4, "B": 3}


@dataclass
class Outcome:
    # ok, built (a cuda build where no GPU runs it), rejected, compiler, build, crash,
    # native, reference, domain, mismatch
    kind: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind in ("ok", "built")


def compare(module, name: str, graph, lengths: set[str] = frozenset(),
            seed: int = 0) -> Outcome:
    """The native model `name` against the reference: at the specialized dims, then at
    others, one instance for both (what the first call leaves behind must not matter).
    `lengths`: the inputs that are a loop's lengths. Parameters and inputs are drawn
    from `seed` and their names, so a smaller program keeps the values of the rest."""
    model = getattr(module, name)(seed=seed % 1000)
    # through set_params: a device model's `params` are read-only copies
    model.set_params({param: 0.5 * stream(seed, "param", param).standard_normal(value.shape)
                      for param, value in model.params.items()})
    dims = stream(seed, "dims")
    other = {"T": int(dims.integers(1, 7)), "B": int(dims.integers(1, 4))}
    for case in (SPECIALIZED, other):
        outcome = compare_case(model, graph, case, lengths, seed % 1000)
        if not outcome.ok:
            return Outcome(outcome.kind, f"at {case}: {outcome.detail}")
    if graph.loss is not None:
        outcome = compare_step(model, graph, other, lengths, seed % 1000)
        if not outcome.ok:
            return Outcome(outcome.kind, f"train_step at {other}: {outcome.detail}")
    return Outcome("ok")


def compare_step(model, graph, dims: dict, lengths: set[str], seed: int) -> Outcome:
    """One train_step, with an optimizer configuration the seed picks (every option of
    SGD and Adam in turn: tests/optimizer_reference.py), against the NumPy update rules
    applied to the gradients of a training forward and backward drawing the same dropout
    masks (the gradients themselves are compare_case's)."""
    config = sorted(CONFIGS)[seed % len(CONFIGS)]
    name, options = CONFIGS[config]
    inputs = case_inputs(graph, dims, lengths, seed)
    params = {k: np.array(v) for k, v in model.params.items()}
    try:
        calls = model.rng_calls
        model.forward(**inputs, training=True)
        grads = model.backward()
        model.rng_calls = calls  # the step's forward draws the same masks
        model.set_optimizer(name, **options)
        model.train_step(**inputs)
    except Exception as e:  # noqa: BLE001 -- a native error is a finding
        return Outcome("native", f"{config}: {type(e).__name__}: {e}")
    ref = Reference(graph, params, name, options)
    ref.step(grads)
    diffs = differences(dict(model.params), ref.w)
    if diffs:
        return Outcome("mismatch", f"{config}: " + "; ".join(f"parameter {k}: {d}"
                                                              for k, d in diffs.items()))
    return Outcome("ok")


def stream(seed: int, *labels) -> np.random.Generator:
    """A random stream of its own for `seed` and `labels`."""
    return np.random.default_rng([seed] + [zlib.crc32(str(x).encode()) for x in labels])


def compare_case(model, graph, dims: dict, lengths: set[str], seed: int) -> Outcome:
    params = {k: np.array(v) for k, v in model.params.items()}
    inputs = case_inputs(graph, dims, lengths, seed)
    calls = model.rng_calls + 1   # the training forward's dropout stream
    try:
        got = model.forward(**inputs)
        got_train = model.forward(**inputs, training=True)
        grads = model.backward()
    except Exception as e:  # noqa: BLE001 -- a native error is a finding
        return Outcome("native", f"{type(e).__name__}: {e}")
    try:
        want = reference.run(graph, inputs, params)
        want_train = reference.gradients(graph, inputs, params, training=True,
                                         seed=derive(seed, calls))
    except Exception as e:  # noqa: BLE001 -- the reference is under test too
        return Outcome("reference", f"{type(e).__name__}: {e}")
    expected = {**want_train.params, **{f"input:{k}": v for k, v in want_train.inputs.items()}}
    checks = (("output", got, want), ("training output", got_train, want_train.outputs),
              ("gradient", grads, expected))
    for what, _, arrays in checks:
        bad = [k for k, a in arrays.items() if not np.all(np.isfinite(a))]
        if bad:
            return Outcome("domain", f"the reference's {what} {bad[0]} is not finite")
    floor = NOISE * max(float(np.abs(a).max(initial=0.0)) for _, _, arrays in checks
                        for a in arrays.values())
    diffs = [f"{what} {k}: {d}" for what, mine, theirs in checks
             for k, d in differences(mine, theirs, floor).items()]
    if not diffs:
        return Outcome("ok")
    stage = blame(graph, inputs, params, derive(seed, calls), checks, floor)
    wrong = [k for k in differences(grads, expected, floor) if k in grads and k in expected]
    if wrong:
        stage += "; " + side(graph, inputs, params, derive(seed, calls), wrong[0],
                             grads[wrong[0]], expected[wrong[0]])
    return Outcome("mismatch", "; ".join(diffs) + f" ({stage})")


def blame(graph, inputs: dict, params: dict, seed: int, checks, floor: float) -> str:
    """Which stage a mismatch comes from: the graphs the backend is handed (after the
    passes), run in the reference, already differ; or they agree and the backend does
    not."""
    try:
        ready = reference.run(for_backends(graph), inputs, params)
        joint = reference.run(differentiate(graph), inputs, params, training=True, seed=seed)
    except Exception as e:  # noqa: BLE001 -- a pass that breaks the graph is a finding
        return f"the graphs after the passes do not run: {type(e).__name__}: {e}"
    grads = {k.split(":", 2)[2] if k.startswith("grad:param:") else k[5:]: v
             for k, v in joint.items() if k.startswith("grad:")}
    optimized = (ready, {k: joint[k] for k in graph.outputs}, grads)
    wrong = [f"{what} {k}" for (what, _, want), got in zip(checks, optimized)
             for k in differences(got, want, floor)]
    if wrong:
        return "the graphs after the passes already differ: " + ", ".join(wrong)
    return "the graphs after the passes agree with the reference: the backend differs"


def case_inputs(graph, dims: dict, lengths: set[str], seed: int) -> dict:
    """Random inputs with valid integers (gradcheck's bounds), each from a stream of its
    own (drawn with the others and kept alone); a row of a lengths input is sometimes
    empty."""
    inputs = {}
    for name in graph.inputs:
        rng = stream(seed, "input", name, dims)
        inputs[name] = gradcheck.random_inputs(graph, dims, rng)[name]
        if name in lengths and rng.random() < 0.3:
            inputs[name][rng.integers(0, len(inputs[name]))] = 0
    return inputs


def differences(got: dict, want: dict, floor: float = 0.0) -> dict[str, str]:
    """What differs between two {name: array}: a missing or extra name, a shape, or an
    error above TOLERANCE relative to the largest element (or to `floor`: a gradient
    that is zero in exact arithmetic is rounding noise on both sides)."""
    out = {k: "missing" for k in want if k not in got}
    out.update({k: "not expected" for k in got if k not in want})
    for k in set(got) & set(want):
        a, b = np.asarray(got[k], np.float64), np.asarray(want[k], np.float64)
        if a.shape != b.shape:
            out[k] = f"shape {list(a.shape)}, expected {list(b.shape)}"
            continue
        scale = max(float(np.abs(b).max(initial=0.0)), floor, 1e-300)
        error = float(np.abs(a - b).max(initial=0.0)) / scale
        if not error <= TOLERANCE:  # NaN included
            out[k] = f"relative error {error:.3g}"
    return out


def side(graph, inputs: dict, params: dict, seed: int, name: str, got, want) -> str:
    """Which side central differences of the reference's loss agree with, at the
    element of gradient `name` where the two differ most."""
    if got.shape != want.shape:
        return "shapes differ"
    target = inputs[name[6:]] if name.startswith("input:") else params[name]
    i = np.unravel_index(np.argmax(np.abs(got - want)), got.shape)
    old, eps, losses = target[i], 1e-6, []
    for value in (old + eps, old - eps):
        target[i] = value
        losses.append(float(reference.run(graph, inputs, params, training=True,
                                          seed=seed)[graph.loss]))
    target[i] = old
    numeric = (losses[0] - losses[1]) / (2 * eps)
    closer = "the reference" if abs(numeric - want[i]) <= abs(numeric - got[i]) else "native"
    return (f"{name}{list(map(int, i))}: native {got[i]:.6g}, reference {want[i]:.6g}, "
            f"central differences {numeric:.6g}: {closer} is right")
