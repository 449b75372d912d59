"""`mdlc gradcheck`: a model built in f64, its gradients compared with central finite
differences of its own forward pass on random inputs. Integer inputs are made valid for
their use: lengths within the sequence, indices within their table, targets within the
classes, and within what the model's `assert`s compare them with (`ids >= 0 and ids < R`,
`labels != 0`: a comparison of an input with a number or a dim, under `and`s, and one
side of an `or`). A model whose `stop_gradient`s let values through has their derivative left out
of its gradient: its finite differences are the reference interpreter's, those values
held at the unperturbed point (ops/context.py, Held)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import I32_MAX, I32_MIN
from ..ir.graph import Graph, Op, Value, walk_ops
from ..ir.shapes import Dim
from ..ops.context import Held
from ..ops.entry import entry
from ..ops.rng import derive
from . import interpreter

DEFAULT_DIMS = {"T": 4, "B": 3}
I32_END = I32_MAX + 1  # the end of a range no use bounds from above
SAMPLES = 12       # elements checked per parameter
EPS = 1e-4        # central differences: truncation ~EPS**2, rounding ~1e-16/EPS
TOLERANCE = 1e-4
# A difference quotient is no finer than the rounding of the two losses it divides:
# about 1e-16 * |loss| / EPS = 1e-12 * |loss| in f64, a little more through a long
# program. Gradients below NOISE * |loss| are compared at that absolute scale, where
# TOLERANCE still sees an error 1e-11 * |loss|.
NOISE = 1e-7


class Unmeasurable(ValueError):
    """The random inputs give a loss so large that its finite differences could not tell
    any gradient from a wholly wrong one (ctc_loss of more labels than frames: ~1e30)."""


@dataclass
class Result:
    name: str
    error: float    # worst relative error over the checked elements
    checked: int


def integer_bounds(graph: Graph, dims: dict[str, int],
                   excluded: dict[str, set[int]] | None = None,
                   floats: dict[str, tuple[float, float]] | None = None
                   ) -> dict[str, tuple[int, int]]:
    """For each i32 input, the half-open range [lo, hi) its values must lie in (an end
    no use bounds is I32_MIN or I32_MAX + 1); values an assert excludes (`!=`) are added
    to `excluded`, and the open ranges asserts hold float inputs in to `floats`."""
    origin = {v.id: name for name, v in graph.inputs.items()}
    dtype = {name: v.type.dtype for name, v in graph.inputs.items()}
    bounds: dict[str, tuple[int, int]] = {}
    producers: dict[int, Op] = {}

    def limit(v: Value, lo: int, hi: int) -> None:
        name = origin.get(v.id)
        if name is not None and dtype[name] == "i32":
            old = bounds.get(name, (lo, hi))
            bounds[name] = (max(old[0], lo), min(old[1], hi))
    size = lambda d: Dim.of(d).evaluate(dims)  # noqa: E731
    for op in walk_ops(graph.body):
        producers.update((v.id, op) for v in op.outputs)
        rules = entry(op)
        if rules.checks:
            for v, symbol, k in _implied(op.inputs[0], producers, size):
                name = origin.get(v.id)
                if name is None or dtype[name] == "bool":
                    continue
                if dtype[name] != "i32":
                    if floats is not None and symbol in ("<", "<=", ">", ">="):
                        lo, hi = floats.get(name, (-np.inf, np.inf))
                        floats[name] = (max(lo, k), hi) if ">" in symbol else (lo, min(hi, k))
                elif symbol == "!=":
                    if excluded is not None:
                        excluded.setdefault(name, set()).add(int(k))
                elif k == int(k):
                    k = int(k)
                    limit(v, *{"<": (I32_MIN, k), "<=": (I32_MIN, k + 1), ">": (k + 1, I32_END),
                               ">=": (k, I32_END), "==": (k, k + 1)}[symbol])
        if rules.selects and op.inputs[0].id in origin:
            for out in op.outputs:  # selected from an input: within its bounds
                origin[out.id] = origin[op.inputs[0].id]
        for whole, step in rules.steps(op) if rules.steps else ():
            if whole.id in origin:  # a loop variable: a step of an input
                origin[step.id] = origin[whole.id]
        if rules.integer_bounds is not None:
            for v, lo, hi in rules.integer_bounds(op, size):
                limit(v, lo, hi)
    return bounds


FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def _implied(cond: Value, producers: dict, size) -> list[tuple[Value, str, int]]:
    """(value, relation, number) facts that make `cond` true everywhere: a comparison of
    a value with a number (a constant or a dim), all those under an `and`, those of one
    side of an `or` (either is enough); nothing of anything else."""
    op = producers.get(cond.id)
    if op is None:
        return []
    extra = entry(op).extra
    if "connective" in extra:
        parts = [_implied(v, producers, size) for v in op.inputs]
        if extra["connective"] is all:
            return [f for part in parts for f in part]
        return next((part for part in parts if part), [])
    if "relation" not in extra:
        return []
    (a, b), symbol = op.inputs, extra["relation"]
    facts = []
    for x, s, other in ((a, symbol, b), (b, FLIPPED[symbol], a)):
        made = producers.get(other.id)
        k = entry(made).uniform(made) if made is not None and entry(made).uniform else None
        if isinstance(k, Dim):
            k = size(k)
        if isinstance(k, (int, float, np.number)) and not isinstance(k, bool):
            facts.append((x, s, k))
    return facts


def random_inputs(graph: Graph, dims: dict[str, int], rng: np.random.Generator) -> dict:
    """Random inputs of the dims `dims`, valid for the model's uses of them (above)."""
    excluded: dict[str, set[int]] = {}
    floats: dict[str, tuple[float, float]] = {}
    bounds = integer_bounds(graph, dims, excluded, floats)
    out = {}
    for name, v in graph.inputs.items():
        shape = tuple(d.evaluate(dims) for d in v.type.shape)
        if v.type.dtype == "i32":
            lo, hi = bounds.get(name, (0, 5))
            if lo == I32_MIN:  # an end no use bounds: five values from the other
                lo = 0 if hi == I32_END else hi - 5
            if hi == I32_END:
                hi = lo + 5
            hi = max(hi, lo + 1)
            drawn = rng.integers(lo, hi, size=shape)
            out_of = sorted(excluded.get(name, ()))
            allowed = [k for k in range(lo, min(hi, lo + len(out_of) + 1)) if k not in out_of]
            if out_of and allowed:  # an excluded value drawn becomes an allowed one
                drawn = np.where(np.isin(drawn, out_of), rng.choice(allowed, size=shape), drawn)
            out[name] = drawn.astype(np.int32)
        elif v.type.dtype == "bool":
            out[name] = rng.random(shape) < 0.5
        else:
            out[name] = np.array(_floats(rng, shape, *floats.get(name, (-np.inf, np.inf))),
                                 np.float64)  # an array even of rank 0: checks perturb it
    return out


def _floats(rng: np.random.Generator, shape: tuple, lo: float, hi: float) -> np.ndarray:
    """Normal draws, or within (lo, hi) where an assert bounds them: uniform between two
    ends, a half-normal step in from one."""
    if np.isfinite(lo) and np.isfinite(hi):
        return rng.uniform(lo, hi, shape) if lo < hi else np.full(shape, lo)
    step = np.abs(rng.standard_normal(shape)) + 0.1
    if np.isfinite(lo):
        return lo + step
    if np.isfinite(hi):
        return hi - step
    return rng.standard_normal(shape)


def check(module, graph: Graph, dims: dict[str, int], seed: int = 0) -> list[Result]:
    """Analytic against numeric gradients of every parameter and float input."""
    rng = np.random.default_rng(seed)
    model = getattr(module, graph.name)(seed=seed)
    inputs = random_inputs(graph, dims, rng)
    params = {k: np.array(v) for k, v in model.params.items()}  # copies, set_params writes

    def native_loss(name: str | None = None) -> float:
        """The loss, with parameter `name` first set to its (perturbed) copy."""
        if name is not None:
            model.set_params({name: params[name]})
        model.rng_calls = 0  # the same dropout masks in every evaluation
        return float(model.forward(**inputs, training=True)[graph.loss])

    def held_loss(name: str | None = None) -> float:
        """The reference's loss of the (perturbed) copies, the values stop_gradient let
        through held at the unperturbed point."""
        return float(interpreter.run(graph, inputs, params, training=True, seed=masks,
                                     held=held.replay())[graph.loss])
    held, masks = Held(), derive(seed, 1)  # the masks of the call after rng_calls = 0
    interpreter.run(graph, inputs, params, training=True, seed=masks, held=held)
    loss = held_loss if held.values else native_loss
    at = native_loss()
    noise = NOISE * max(abs(at), 1.0)
    grads = model.backward()
    largest = max((float(np.abs(g).max(initial=0.0)) for g in grads.values()), default=0.0)
    if np.isfinite(noise) and 0.0 < largest <= TOLERANCE * noise:  # (inf, NaN: FAILED)
        # every gradient, wrong by all of itself, would pass
        raise Unmeasurable(
            f"the loss at these random inputs is {at:.3g}, so large that its finite "
            f"differences, no finer than 1e-7 of it ({noise:.3g}), cannot tell any "
            f"gradient (the largest is {largest:.3g}) from a wrong one: nothing would be "
            "checked. Try another --seed or other --dims (a ctc_loss of more labels than "
            "frames, an impossible alignment, gives such a loss)")
    results = []
    for name, grad in grads.items():
        if name.startswith("input:"):
            results.append(_compare(name, inputs[name[6:]], grad, loss, rng, noise))
        else:
            results.append(_compare(name, params[name], grad, lambda: loss(name), rng,
                                    noise))
            model.set_params({name: params[name]})  # unperturbed again
    return results


def _compare(name: str, target: np.ndarray, grad: np.ndarray, loss, rng,
             noise: float) -> Result:
    """`target`'s elements perturbed in place, `loss()` evaluated at each; gradients
    below `noise` compared at that absolute scale."""
    flat = target.reshape(-1)
    g = grad.reshape(-1)
    half = SAMPLES // 2
    picks = list(np.argsort(-np.abs(g))[:half]) + list(rng.integers(0, flat.size, SAMPLES))
    picks = sorted(set(int(i) for i in picks))[:SAMPLES * 2]
    worst = 0.0
    floor = max(1e-2 * float(np.abs(g).max(initial=0.0)), noise)  # the gradient's scale
    for i in picks:
        old = flat[i]
        flat[i] = old + EPS
        up = loss()
        flat[i] = old - EPS
        down = loss()
        flat[i] = old
        numeric = (up - down) / (2 * EPS)
        scale = max(abs(numeric), abs(g[i]), floor)
        error = abs(numeric - g[i]) / scale
        # NaN or inf on either side (a loss gone NaN) is no agreement: max(0.0, nan) is
        # 0.0, and such a gradient passed with an error of 0
        worst = max(worst, error if np.isfinite(error) else np.inf)
    return Result(name, worst, len(picks))
