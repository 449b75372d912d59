"""Shared helpers of the IR, autodiff and reference tests: compiling snippets, random
parameters, and gradient checks by central differences."""
from __future__ import annotations

import numpy as np

from codegen import reference
from codegen.autodiff import grad_graph
from codegen.verify import verify
from dsl import check_source

EPS = 1e-6
TOLERANCE = 1e-7


def model(src: str, **defines):
    """The f64 IR graph of a source text holding one model (verified)."""
    graph = check_source(src, "<test>", defines=defines, dtype="f64").graph
    verify(graph)
    return graph


def rnn_model(cell_call: str, loop_options: str = "", reversed_: bool = False, H: int = 3,
              E: int = 2, state: str = "h, c") -> str:
    """A model running a std/rnn.mdl cell over xs (loss: a sum of squares of the yields
    and the final state), e.g. rnn_model("lstm(x, h, c)", "(lengths = lengths)")."""
    seq = "reversed(xs)" if reversed_ else "xs"
    inits = "\n  ".join(f"{s.strip()} = zeros[B, H]" for s in state.split(","))
    first = state.split(",")[0].strip()
    return f'''
import "std/rnn.mdl"
model M(H = {H}, E = {E}) {{
  input xs : f32[T, B, E]
  input lengths : i32[B]
  {inits}
  hs = for x in {seq} {loop_options} {{
    {state} = {cell_call}
    yield {first}
  }}
  output loss = sum(hs * hs) + sum({first} * {first})
  minimize loss
}}'''


def random_params(graph, seed: int = 0, scale: float = 0.5) -> dict[str, np.ndarray]:
    """Parameters drawn around their initializers, so that no two gates coincide."""
    rng = np.random.default_rng(seed)
    return {k: v + scale * rng.normal(size=v.shape)
            for k, v in reference.init_params(graph, seed).items()}


def rel_error(analytic, numeric) -> float:
    """|a - n| / max(|a|, |n|) over whole arrays (norms), 0 when both vanish."""
    a, n = np.ravel(analytic), np.ravel(numeric)
    scale = max(np.linalg.norm(a), np.linalg.norm(n))
    return 0.0 if scale == 0 else float(np.linalg.norm(a - n) / scale)


def loss_of(graph, inputs: dict, params: dict) -> float:
    return float(reference.run(graph, inputs, params)[graph.loss])


def float_names(inputs: dict) -> list[str]:
    return [k for k, v in inputs.items() if np.issubdtype(np.asarray(v).dtype, np.floating)]


def check_model_grads(graph, inputs: dict, params: dict, directions: int = 4,
                      seed: int = 0) -> float:
    """The worst relative error between the reference gradients of the minimized output
    (w.r.t. every parameter and float input) and central differences along random
    directions of all of them at once."""
    grads = reference.gradients(graph, inputs, params)
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(directions):
        dp = {k: rng.normal(size=np.shape(v)) for k, v in params.items()}
        di = {k: rng.normal(size=np.shape(inputs[k])) for k in float_names(inputs)}
        analytic = sum(np.sum(grads.params[k] * d) for k, d in dp.items()) + \
            sum(np.sum(grads.inputs[k] * d) for k, d in di.items())

        def moved(step: float):
            p = {k: v + step * dp[k] for k, v in params.items()}
            i = {k: (v + step * di[k] if k in di else v) for k, v in inputs.items()}
            return loss_of(graph, i, p)
        numeric = (moved(EPS) - moved(-EPS)) / (2 * EPS)
        worst = max(worst, rel_error(analytic, numeric))
    return worst


def check_coordinates(graph, inputs: dict, params: dict) -> float:
    """The worst relative error, array by array, of the reference gradients against
    central differences of every coordinate of every parameter and float input."""
    grads = reference.gradients(graph, inputs, params)
    worst = 0.0
    for kind, values, got in (("param", params, grads.params),
                              ("input", inputs, grads.inputs)):
        for name in (params if kind == "param" else float_names(inputs)):
            numeric = np.zeros(np.shape(values[name]))
            for idx in np.ndindex(numeric.shape):
                def moved(step: float):
                    changed = {k: np.array(v, dtype=np.asarray(v).dtype, copy=True)
                               for k, v in values.items()}
                    changed[name][idx] += step
                    p, i = (changed, inputs) if kind == "param" else (params, changed)
                    return loss_of(graph, i, p)
                numeric[idx] = (moved(EPS) - moved(-EPS)) / (2 * EPS)
            worst = max(worst, rel_error(got[name], numeric))
    return worst


def joint(graph):
    """The verified gradient graph."""
    g = grad_graph(graph)
    verify(g)
    return g
