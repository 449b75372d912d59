"""One model of a built module against the NumPy reference interpreter, the
differential fuzzer's oracle (tests/fuzz_programs.py): the inference outputs, the
training outputs and every gradient (parameters and float inputs), on inputs and
weights drawn from a seed and their names. A mismatch says which stage is to blame
(the graphs after the passes, run in the reference, or the backend) and which side
central differences agree with.

The module may be built in f64 or f32, and with `vjp` (a backward that takes a cotangent
per float output, drawn like the inputs). The reference always runs in float64, on the
very values the build holds (inputs and weights rounded to its type): it is then the
exact answer to what the build was asked, so what differs is the build's own rounding
(or a bug), not the sum of two roundings in different orders."""
from __future__ import annotations

import os
import re
import tempfile
import zlib
from dataclasses import dataclass

import numpy as np
from fuzz_integers import INPUT_PREFIX
from optimizer_reference import CONFIGS, Reference

from codegen.ir.dtypes import I32_MAX, I32_MIN
from codegen.ops.rng import derive
from codegen.pipeline import differentiate, for_backends
from codegen.reference import gradcheck, interpreter as reference

SPECIALIZED = {"T": 4, "B": 3}   # the first case's dims
OTHER_DIMS = {"S": 2}            # a symbolic dim of some programs besides T and B
ROWS = 3  # the largest B of a program's second case (fuzz_programs.py --rows)
# What a specialized module is specialized for: two buckets, the first (the first that
# matches runs) for the programs with S too, the second for every other program
BUCKETS = ({**SPECIALIZED, **OTHER_DIMS}, SPECIALIZED)


@dataclass(frozen=True)
class Precision:
    """How close a build of one float type must come to the reference: an array is
    compared relative to its largest element (`tolerance`), but never to less than
    `noise` times the largest value of the case, since a gradient that is zero in exact
    arithmetic is rounding noise on the build's side."""
    dtype: str
    tolerance: float
    noise: float


# f32 (unit roundoff 6e-8), measured on 450 programs (docs/testing.md, "f32 and vjp
# builds"): over 11335 arrays the error relative to max(largest element, 1e-3 times the
# case's largest value) was 3e-8 at the median, 1e-6 at the 99th percentile, 1.1e-4 at
# worst (5.5e-4 with a floor of 1e-4, 2.7e-2 with f64's 1e-6: small gradients made of
# cancelling terms); train_step's weights 6e-8 at worst. 1e-3 is nine times the worst,
# and far below what a wrong index or derivative gives (the error is then of order 1).
PRECISIONS = {"f64": Precision("f64", 1e-9, 1e-6), "f32": Precision("f32", 1e-3, 1e-3)}
TOLERANCE = PRECISIONS["f64"].tolerance


@dataclass
class Outcome:
    # ok, built (a cuda build where no GPU runs it), refused (a call both sides refuse
    # with the same error: an assert), rejected, compiler, build, crash, hang, native,
    # reference, domain, mismatch
    kind: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind in ("ok", "built", "refused")


def compare(module, name: str, graph, lengths: set[str] = frozenset(), seed: int = 0,
            dtype: str = "f64", vjp: bool = False, rows: int = ROWS,
            few_steps: int = 0) -> Outcome:
    """The native model `name` against the reference: at the specialized dims, then at
    others, one instance for both (what the first call leaves behind must not matter).
    `lengths`: the inputs that are a loop's lengths. Parameters and inputs are drawn
    from `seed` and their names, so a smaller program keeps the values of the rest.
    `dtype` and `vjp`: how the module was built (a vjp build does not train natively:
    its train_step is not compared). `rows`: the largest B of the other dims.
    `few_steps` (k of an `if T > k` that guards a size T - k): a third case at T of 1 to
    k, and the case of no elements at T = 0, where the other branch runs."""
    precision = PRECISIONS[dtype]
    model = getattr(module, name)(seed=seed % 1000)
    # through set_params: a device model's `params` are read-only copies
    model.set_params({param: 0.5 * stream(seed, "param", param).standard_normal(value.shape)
                      for param, value in model.params.items()})
    cases = case_dims(seed, rows)
    other = cases[1]
    if few_steps:
        cases += ({**other, "T": int(stream(seed, "few steps").integers(1, few_steps + 1))},)
    refused = []
    for case in cases:
        outcome = compare_case(model, graph, case, lengths, seed % 1000, precision, vjp)
        if not outcome.ok:
            return Outcome(outcome.kind, f"at {case}: {outcome.detail}")
        if outcome.kind == "refused":
            refused.append(f"at {case}: {outcome.detail}")
    if refused:  # its train_step and checkpoint would be refused too
        return Outcome("refused", "; ".join(refused))
    if graph.loss is not None and not vjp:
        outcome = compare_step(model, graph, other, lengths, seed % 1000, precision)
        if not outcome.ok:
            return Outcome(outcome.kind, f"train_step at {other}: {outcome.detail}")
        outcome = compare_checkpoint(module, name, model, graph, other, lengths, seed % 1000,
                                     precision)
        if not outcome.ok:
            return Outcome(outcome.kind, f"checkpoint at {other}: {outcome.detail}")
        if outcome.kind == "refused":  # its inputs (another seed's) fail an assert
            refused.append(f"checkpoint at {other}: {outcome.detail}")
    empty = empty_dims(graph, other, seed, "T" if few_steps else None)
    if empty is not None:
        outcome = compare_empty(model, graph, empty, lengths, seed % 1000, precision, vjp)
        if not outcome.ok:
            return Outcome(outcome.kind, f"at {empty}: {outcome.detail}")
    return Outcome("refused", "; ".join(refused)) if refused else Outcome("ok")


def empty_dims(graph, dims: dict, seed: int, zero: str | None = None) -> dict | None:
    """`dims` with `zero`, else B (even seeds) or T (odd ones), set to 0: a batch of no
    sequences, or sequences of no steps; None where the inputs have no such dim."""
    zero = zero or "TB"[seed % 2 == 0]
    if not any(zero in d.symbols for v in graph.inputs.values() for d in v.type.shape):
        return None
    return {**dims, zero: 0}


def compare_empty(model, graph, dims: dict, lengths: set[str], seed: int,
                  precision: Precision = PRECISIONS["f64"], vjp: bool = False) -> Outcome:
    """Inputs with no elements (`dims` has a 0): a forward, a training forward and a
    backward that either raise on both sides (an index into an empty axis) or agree with
    the reference, empty arrays' shapes included. A mean over no elements is NaN on both
    sides, and NaN then runs through the rest: only what the reference computes as a
    number is compared, and there the build must give the same number."""
    inputs = case_inputs(graph, dims, lengths, seed, precision.dtype)
    calls = model.rng_calls + 1
    params = {k: np.array(v) for k, v in model.params.items()}
    cotangents = None
    try:
        got = model.forward(**inputs)
        got_train = model.forward(**inputs, training=True)
        if vjp:
            cotangents = {k: np.ones(np.shape(got_train[k]), got_train[k].dtype)
                          for k in model.cotangents}
        grads = model.backward(**(cotangents or {}))
        native = None
    except Exception as e:  # noqa: BLE001 -- compared with the reference's
        native = f"{type(e).__name__}: {e}"
    try:
        with np.errstate(all="ignore"):
            want = reference.run(graph, inputs, params)
            want_train = reference.gradients(graph, inputs, params, training=True,
                                             seed=derive(seed, calls), cotangents=cotangents)
        refused = None
    except Exception as e:  # noqa: BLE001 -- compared with the build's
        refused = f"{type(e).__name__}: {e}"
    if native is not None and refused is None:
        return Outcome("native", f"{native} (the reference computes this call)")
    if refused is not None:
        # the reference runs the program as written: an index into an empty axis in dead
        # code raises there, and is gone from the graphs the backend is handed
        if native is not None or not Case(graph, inputs, params, derive(seed, calls),
                                          cotangents).refused_after_the_passes():
            return Outcome("ok")
        return Outcome("reference", f"{refused} (the build computes this call)")
    expected = {**want_train.params, **{f"input:{k}": v for k, v in want_train.inputs.items()}}
    checks = (("output", got, want), ("training output", got_train, want_train.outputs),
              ("gradient", grads, expected))
    # the values of the case include its inputs and weights: with no elements, every
    # output and gradient may be NaN or 0, and a gradient that is 0 in exact arithmetic
    # is rounding noise of those (6e-18 where x0 - x0 met cross_entropy at T = 0)
    values = [a for _, _, arrays in checks for a in arrays.values()]
    values += [np.asarray(a, np.float64) for a in (*inputs.values(), *params.values())]
    floor = precision.noise * max(float(np.abs(a[np.isfinite(a)]).max(initial=0.0))
                                  for a in values)
    diffs = [f"{what} {k}: {d}" for what, mine, theirs in checks
             for k, d in numbers_differ(mine, theirs, floor, precision.tolerance).items()]
    return Outcome("mismatch", "; ".join(diffs)) if diffs else Outcome("ok")


# where an assert's loop or branch stands: the module's file and the line the program
# has there, `<string>` and its own line where the reference checked it alone
PLACE = re.compile(r" at (?:<string>|[\w.-]+\.mdl):\d+")


def unplaced(message: str) -> str:
    """An error without the places of the loops and branches it names (the step or trip,
    the flat position and the rest stay): the same words from a module and alone."""
    return PLACE.sub(" at <place>", message)


def raised(error: Exception, graph, inputs: dict, params: dict, seed: int) -> Outcome:
    """A build's call raised `error`: `refused` where the reference raises it too, word
    for word (an assert both fail alike), else a finding."""
    native = f"{type(error).__name__}: {error}"
    said = refusal(graph, inputs, params, seed)
    if said is not None and unplaced(said) == unplaced(native):
        return Outcome("refused", native)
    return Outcome("native", native + (f" (the reference: {said})" if said else ""))


def refusal(graph, inputs: dict, params: dict, seed: int) -> str | None:
    """The error the reference raises first for these inputs, in an inference forward,
    then a training one (its dropout stream's `seed`), as a build raises it: None if
    neither does."""
    for training in (False, True):
        try:
            reference.run(graph, inputs, params, training=training, seed=seed)
        except Exception as e:  # noqa: BLE001 -- what a build must say too
            return f"{type(e).__name__}: {e}"
    return None


def numbers_differ(got: dict, want: dict, floor: float, tolerance: float) -> dict[str, str]:
    """`differences` where the reference may hold NaN (what a mean of nothing gives and
    passes on): names and shapes must agree, and each element the reference computes as
    a number (infinities too) must be the build's, within `tolerance` of the largest
    (or of `floor`)."""
    out, pairs = paired(got, want)
    for k, a, b in pairs:
        known = ~np.isnan(b)
        if not np.array_equal(np.isinf(a[known]) * np.sign(a[known]),
                              np.isinf(b[known]) * np.sign(b[known])):
            out[k] = "an infinity or NaN where the reference has another value"
            continue
        finite = known & np.isfinite(b)
        scale = max(float(np.abs(b[finite]).max(initial=0.0)), floor, 1e-300)
        error = float(np.abs(a[finite] - b[finite]).max(initial=0.0)) / scale
        if not error <= tolerance:
            out[k] = f"relative error {error:.3g}"
    return out


def compare_checkpoint(module, name: str, model, graph, dims: dict, lengths: set[str],
                       seed: int, precision: Precision = PRECISIONS["f64"]) -> Outcome:
    """The model (trained a step: its optimizer has state) saved, loaded into a new
    instance of another seed, and one more train_step on both: the same outputs and
    parameters. Bit for bit on the CPU; a device may sum in another order each time."""
    inputs = case_inputs(graph, dims, lengths, seed + 1, precision.dtype)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "checkpoint.npz")
            model.save(path)
            again = getattr(module, name)(seed=seed + 1)
            again.load(path)
        if again.optimizer != model.optimizer:
            return Outcome("mismatch", f"optimizer {again.optimizer}, "
                                       f"saved {model.optimizer}")
        got, want = again.train_step(**inputs), model.train_step(**inputs)
    except Exception as e:  # noqa: BLE001 -- a native error is a finding, unless the same
        params = {k: np.array(v) for k, v in model.params.items()}
        return raised(e, graph, inputs, params, derive(seed, model.rng_calls))
    tolerance = 0.0 if model.device == "cpu" else precision.tolerance
    diffs = {**differences(got, want, tolerance=tolerance),
             **differences(dict(again.params), dict(model.params), tolerance=tolerance)}
    if diffs:
        return Outcome("mismatch", "; ".join(f"{k}: {d}" for k, d in diffs.items()))
    return Outcome("ok")


def compare_step(model, graph, dims: dict, lengths: set[str], seed: int,
                 precision: Precision = PRECISIONS["f64"]) -> Outcome:
    """One train_step, with an optimizer configuration the seed picks (every option of
    SGD and Adam in turn: tests/optimizer_reference.py), against the NumPy update rules
    (in float64) applied to the gradients of a training forward and backward drawing the
    same dropout masks (the gradients themselves are compare_case's)."""
    config = sorted(CONFIGS)[seed % len(CONFIGS)]
    name, options = CONFIGS[config]
    inputs = case_inputs(graph, dims, lengths, seed, precision.dtype)
    params = {k: np.array(v, np.float64) for k, v in model.params.items()}
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
    ref.step({k: np.asarray(g, np.float64) for k, g in grads.items()})
    diffs = differences(dict(model.params), ref.w, tolerance=precision.tolerance)
    if diffs:
        return Outcome("mismatch", f"{config}: " + "; ".join(f"parameter {k}: {d}"
                                                              for k, d in diffs.items()))
    return Outcome("ok")


def case_dims(seed: int, rows: int = ROWS) -> tuple[dict, dict]:
    """The two sets of dims a program runs at: the specialized ones, then T (1 to 6), B
    (1 to `rows`) and S (1 to 4) drawn from its seed."""
    dims = stream(seed, "dims")
    other = {"T": int(dims.integers(1, 7)), "B": int(dims.integers(1, rows + 1))}
    other.update((s, int(dims.integers(1, 5))) for s in OTHER_DIMS)
    return {**SPECIALIZED, **OTHER_DIMS}, other


def stream(seed: int, *labels) -> np.random.Generator:
    """A random stream of its own for `seed` and `labels`."""
    return np.random.default_rng([seed] + [zlib.crc32(str(x).encode()) for x in labels])


def compare_case(model, graph, dims: dict, lengths: set[str], seed: int,
                 precision: Precision = PRECISIONS["f64"], vjp: bool = False) -> Outcome:
    """One call of each kind at `dims`: an inference forward, a training forward and a
    backward (a vjp build's given random cotangents), against the reference in float64
    on the same values."""
    params = {k: np.array(v) for k, v in model.params.items()}
    inputs = case_inputs(graph, dims, lengths, seed, precision.dtype)
    calls = model.rng_calls + 1   # the training forward's dropout stream
    cotangents = None
    try:
        got = model.forward(**inputs)
        got_train = model.forward(**inputs, training=True)
        if vjp:
            cotangents = {k: stream(seed, "cotangent", k, dims).standard_normal(
                np.shape(got_train[k])).astype(precision.dtype.replace("f", "float"))
                for k in model.cotangents}
        grads = model.backward(**(cotangents or {}))
    except Exception as e:  # noqa: BLE001 -- a native error is a finding, unless the same
        return raised(e, graph, inputs, params, derive(seed, calls))
    try:
        want = reference.run(graph, inputs, params)
        want_train = reference.gradients(graph, inputs, params, training=True,
                                         seed=derive(seed, calls), cotangents=cotangents)
    except Exception as e:  # noqa: BLE001 -- the reference is under test too
        return Outcome("reference", f"{type(e).__name__}: {e}")
    expected = {**want_train.params, **{f"input:{k}": v for k, v in want_train.inputs.items()}}
    checks = (("output", got, want), ("training output", got_train, want_train.outputs),
              ("gradient", grads, expected))
    for what, _, arrays in checks:
        bad = [k for k, a in arrays.items() if not np.all(np.isfinite(a))]
        if bad:
            return Outcome("domain", f"the reference's {what} {bad[0]} is not finite")
    floor = precision.noise * max(float(np.abs(a).max(initial=0.0))
                                  for _, _, arrays in checks for a in arrays.values())
    tolerance = precision.tolerance
    diffs = [f"{what} {k}: {d}" for what, mine, theirs in checks
             for k, d in differences(mine, theirs, floor, tolerance).items()]
    if not diffs:
        return Outcome("ok")
    at = Case(graph, inputs, params, derive(seed, calls), cotangents)
    stage = blame(at, checks, floor, tolerance)
    wrong = [k for k in differences(grads, expected, floor, tolerance)
             if k in grads and k in expected]
    if wrong:
        stage += "; " + side(at, wrong[0], grads[wrong[0]], expected[wrong[0]])
    return Outcome("mismatch", "; ".join(diffs) + f" ({stage})")


@dataclass
class Case:
    """What a training forward and backward ran on: the dropout stream's seed, and a vjp
    build's cotangents (None: the minimized output's gradient)."""
    graph: object
    inputs: dict
    params: dict
    seed: int
    cotangents: dict | None = None

    def scalar(self) -> float:
        """What the backward differentiates, in the reference: the loss, or the sum of
        each cotangent times its output."""
        out = reference.run(self.graph, self.inputs, self.params, training=True,
                            seed=self.seed)
        if self.cotangents is None:
            return float(out[self.graph.loss])
        return sum(float(np.sum(c * out[k])) for k, c in self.cotangents.items())

    def after_the_passes(self) -> tuple[dict, dict]:
        """The reference's run of the graphs the backend is handed: the inference graph's
        outputs, and the joint graph's outputs and gradients."""
        with np.errstate(all="ignore"):
            ready = reference.run(for_backends(self.graph), self.inputs, self.params)
            joint = reference.run(differentiate(self.graph, vjp=self.cotangents is not None),
                                  self.inputs, self.params, training=True, seed=self.seed,
                                  cotangents=self.cotangents)
        return ready, joint

    def refused_after_the_passes(self) -> bool:
        try:
            self.after_the_passes()
        except Exception:  # noqa: BLE001 -- whether it raises is the question
            return True
        return False


def blame(at: Case, checks, floor: float, tolerance: float = TOLERANCE) -> str:
    """Which stage a mismatch comes from: the graphs the backend is handed (after the
    passes), run in the reference, already differ; or they agree and the backend does
    not."""
    try:
        ready, joint = at.after_the_passes()
    except Exception as e:  # noqa: BLE001 -- a pass that breaks the graph is a finding
        return f"the graphs after the passes do not run: {type(e).__name__}: {e}"
    grads = {k.split(":", 2)[2] if k.startswith("grad:param:") else k[5:]: v
             for k, v in joint.items() if k.startswith("grad:")}
    optimized = (ready, {k: joint[k] for k in at.graph.outputs}, grads)
    wrong = [f"{what} {k}" for (what, _, want), got in zip(checks, optimized)
             for k in differences(got, want, floor, tolerance)]
    if wrong:
        return "the graphs after the passes already differ: " + ", ".join(wrong)
    return "the graphs after the passes agree with the reference: the backend differs"


def case_inputs(graph, dims: dict, lengths: set[str], seed: int,
                dtype: str = "f64") -> dict:
    """Random inputs with valid integers (gradcheck's bounds), each from a stream of its
    own (drawn with the others and kept alone), floats in the build's `dtype`; a row of
    a lengths input is sometimes empty; the i32 inputs for arithmetic reach i32's ends."""
    inputs = {}
    for name in graph.inputs:
        rng = stream(seed, "input", name, dims)
        inputs[name] = gradcheck.random_inputs(graph, dims, rng)[name]
        if name.startswith(INPUT_PREFIX) and inputs[name].dtype == np.int32:
            inputs[name] = wide_integers(rng, inputs[name].shape)
        if inputs[name].dtype == np.float64:
            inputs[name] = inputs[name].astype(dtype.replace("f", "float"))
        if name in lengths and len(inputs[name]) and rng.random() < 0.3:
            inputs[name][rng.integers(0, len(inputs[name]))] = 0
    return inputs


def wide_integers(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """i32 values for arithmetic: small ones, some past 16 bits, and i32's ends and their
    neighbours, where `+ - *` wrap around."""
    ends = np.array([I32_MAX, I32_MIN, I32_MAX - 1, I32_MIN + 1, 2 ** 30, -2 ** 30, 46341],
                    np.int64)
    small = rng.integers(-9, 10, shape)
    middle = rng.integers(-70000, 70001, shape)
    edge = ends[rng.integers(0, len(ends), shape)]
    which = rng.random(shape)
    return np.where(which < 0.55, small, np.where(which < 0.8, middle, edge)).astype(np.int32)


def paired(got: dict, want: dict) -> tuple[dict[str, str], list[tuple]]:
    """What differs in names and shapes between two {name: array} ({name: what}), and the
    (name, got, want) pairs of the same shape, as float64 arrays, to compare further."""
    out = {k: "missing" for k in want if k not in got}
    out.update({k: "not expected" for k in got if k not in want})
    pairs = []
    for k in set(got) & set(want):
        a, b = np.asarray(got[k], np.float64), np.asarray(want[k], np.float64)
        if a.shape != b.shape:
            out[k] = f"shape {list(a.shape)}, expected {list(b.shape)}"
        else:
            pairs.append((k, a, b))
    return out, pairs


def differences(got: dict, want: dict, floor: float = 0.0,
                tolerance: float = TOLERANCE) -> dict[str, str]:
    """What differs between two {name: array}: a missing or extra name, a shape, or an
    error above `tolerance` relative to the largest element (or to `floor`: a gradient
    that is zero in exact arithmetic is rounding noise on both sides)."""
    out, pairs = paired(got, want)
    for k, a, b in pairs:
        if np.asarray(b).dtype == np.bool_:  # a bool output: its True count off, if any
            a, b = np.asarray(a, np.int8), np.asarray(b, np.int8)
        scale = max(float(np.abs(b).max(initial=0.0)), floor, 1e-300)
        error = float(np.abs(a - b).max(initial=0.0)) / scale
        if not error <= tolerance:  # NaN included
            out[k] = f"relative error {error:.3g}"
    return out


def side(at: Case, name: str, got, want) -> str:
    """Which side central differences of the reference's loss (or cotangents times
    outputs) agree with, at the element of gradient `name` where the two differ most.
    The element is moved in a float64 copy: a step of 1e-6 is below f32's resolution."""
    if got.shape != want.shape:
        return "shapes differ"
    key = name[6:] if name.startswith("input:") else name
    values = at.inputs if name.startswith("input:") else at.params
    target = values[key] = np.array(values[key], np.float64)
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    i = np.unravel_index(np.argmax(np.abs(got - want)), got.shape)
    old, eps, losses = target[i], 1e-6, []
    for value in (old + eps, old - eps):
        target[i] = value
        losses.append(at.scalar())
    target[i] = old
    numeric = (losses[0] - losses[1]) / (2 * eps)
    closer = "the reference" if abs(numeric - want[i]) <= abs(numeric - got[i]) else "native"
    return (f"{name}{list(map(int, i))}: native {got[i]:.6g}, reference {want[i]:.6g}, "
            f"central differences {numeric:.6g}: {closer} is right")
