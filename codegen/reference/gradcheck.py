"""`mdlc gradcheck`: a model built in f64, its gradients compared with central finite
differences of its own forward pass on random inputs. Integer inputs are made valid for
their use: lengths within the sequence, indices within their table, targets within the
classes. A model whose `stop_gradient`s let values through has their derivative left out
of its gradient: its finite differences are the reference interpreter's, those values
held at the unperturbed point (ops/context.py, Held)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.graph import Graph, Value, walk_ops
from ..ir.shapes import Dim
from ..ops.context import Held
from ..ops.entry import entry
from ..ops.rng import derive
from . import interpreter

DEFAULT_DIMS = {"T": 4, "B": 3}
SAMPLES = 12       # elements checked per parameter
EPS = 1e-4        # central differences: truncation ~EPS**2, rounding ~1e-16/EPS
TOLERANCE = 1e-4
# A difference quotient is no finer than the rounding of the two losses it divides:
# about 1e-16 * |loss| / EPS = 1e-12 * |loss| in f64, a little more through a long
# program. Gradients below NOISE * |loss| are compared at that absolute scale, where
# TOLERANCE still sees an error 1e-11 * |loss|.
NOISE = 1e-7


@dataclass
class Result:
    name: str
    error: float    # worst relative error over the checked elements
    checked: int


def integer_bounds(graph: Graph, dims: dict[str, int]) -> dict[str, tuple[int, int]]:
    """For each i32 input, the half-open range [lo, hi) its values must lie in."""
    origin = {v.id: name for name, v in graph.inputs.items() if v.type.dtype == "i32"}
    bounds: dict[str, tuple[int, int]] = {}

    def limit(v: Value, lo: int, hi: int) -> None:
        name = origin.get(v.id)
        if name is not None:
            old = bounds.get(name, (lo, hi))
            bounds[name] = (max(old[0], lo), min(old[1], hi))
    size = lambda d: Dim.of(d).evaluate(dims)  # noqa: E731
    for op in walk_ops(graph.body):
        rules = entry(op)
        if rules.selects and op.inputs[0].id in origin:
            for out in op.outputs:  # selected from an integer input: within its bounds
                origin[out.id] = origin[op.inputs[0].id]
        for whole, step in rules.steps(op) if rules.steps else ():
            if whole.id in origin:  # a loop variable: a step of an integer input
                origin[step.id] = origin[whole.id]
        if rules.integer_bounds is not None:
            for v, lo, hi in rules.integer_bounds(op, size):
                limit(v, lo, hi)
    return bounds


def random_inputs(graph: Graph, dims: dict[str, int], rng: np.random.Generator) -> dict:
    bounds = integer_bounds(graph, dims)
    out = {}
    for name, v in graph.inputs.items():
        shape = tuple(d.evaluate(dims) for d in v.type.shape)
        if v.type.dtype == "i32":
            lo, hi = bounds.get(name, (0, 5))
            out[name] = rng.integers(lo, max(hi, lo + 1), size=shape).astype(np.int32)
        elif v.type.dtype == "bool":
            out[name] = rng.random(shape) < 0.5
        else:
            out[name] = rng.standard_normal(shape)
    return out


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
    noise = NOISE * max(abs(native_loss()), 1.0)
    grads = model.backward()
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
        worst = max(worst, abs(numeric - g[i]) / scale)
    return Result(name, worst, len(picks))
