"""Shared helpers of the IR, autodiff and reference tests: compiling snippets, random
parameters, and gradient checks by central differences."""
from __future__ import annotations

import numpy as np

from codegen.ops.verify import verify
from codegen.pipeline import differentiate
from codegen.reference import interpreter as reference
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


# models with control flow, shared by the gradient checks and the pass tests
CONTROL = {
    "if inside for": """
model M(H = 3) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  hs, taken = for x in xs {
    a = tanh(x @ W + h)
    if mean(a) > 0.0 { h = relu(a) * 0.5 } else { h = a * a + x }
    yield h, f32(mean(a) > 0.0)
  }
  output taken
  output loss = sum(hs * hs)
  minimize loss
}""",
    "while with a data-dependent trip count inside for": """
model M(H = 3) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = normal(0, 0.5)
  param v : f32[H] = normal(0, 1)
  h = zeros[B, H]
  hs, trips = for x in xs {
    y = tanh(x @ W + h) * 3.0
    n = 0
    while norm(y) > 0.3 and n < 20 { y = 0.6 * y * sigmoid(v) + 0.05 * tanh(y); n = n + 1 }
    h = y + h * 0.5
    yield y, f32(n)
  }
  output trips
  output loss = sum(hs * hs) + sum(h)
  minimize loss
}""",
    "while and if at the top": """
model M(H = 3) {
  input x : f32[B, H]
  param W : f32[H, H] = normal(0, 0.5)
  y = x @ W
  k = 0
  while sum(y * y) > 0.1 { y = tanh(y @ W) * 0.7; k = k + 1 }
  if k > 1 { z = y * 2.0 } else { z = exp(y) }
  output loss = sum(z) + mean(x * y)
  minimize loss
}""",
    "nested loops": """
model M(H = 3, E = 2) {
  input xss : f32[T, K, B, E]
  param W : f32[E, H] = normal(0, 0.5)
  param U : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  hs = for xs in xss {
    g = h
    gs = for x in reversed(xs) (recompute) {
      g = tanh(x @ W + g @ U)
      yield g
    }
    h = g + 0.5 * h
    yield mean(gs, axis = 0)
  }
  output loss = sum(hs * hs)
  minimize loss
}""",
    "while in while": """
model M(H = 3) {
  input x : f32[B, H]
  param W : f32[H, H] = normal(0, 0.5)
  y = x
  i = 0
  while i < 3 {
    z = y @ W
    while norm(z) > 0.5 { z = z * 0.6 }
    y = tanh(z + y)
    i = i + 1
  }
  output loss = sum(y * y)
  minimize loss
}""",
    "loops in the branches of an if in a while": """
model M(H = 3) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  k = 0
  while k < 2 {
    if k == 0 {
      for x in xs (checkpoint = 2) { h = tanh(x @ W + h) }
    } else {
      for x in reversed(xs) (recompute) { h = sigmoid(x @ W) * h }
    }
    k = k + 1
  }
  output loss = sum(h * h)
  minimize loss
}""",
    "a parameter shared by three call sites": """
import "std/rnn.mdl"
model M() {
  input a : f32[B, 3]; input b : f32[B, 3]; input c : f32[B, 3]
  scope enc { p = linear(a, 4) as proj }
  scope enc { q = linear(b, 4) as proj }
  scope enc { r = linear(tanh(c), 4) as proj }
  output loss = sum(p * q) + sum(r * r * p)
  minimize loss
}""",
}


def control_inputs(name: str) -> dict:
    rng = np.random.default_rng(3)
    if name == "nested loops":
        return {"xss": rng.normal(size=(3, 2, 2, 2))}
    if name in ("while and if at the top", "while in while"):
        return {"x": rng.normal(size=(2, 3))}
    if name.startswith("a parameter"):
        return {k: rng.normal(size=(2, 3)) for k in "abc"}
    # steps of very different sizes: the while runs 0, 3, 3 and 2 times
    return {"xs": rng.normal(size=(4, 2, 3)) * np.array([0.05, 1, 3, 0.3])[:, None, None]}


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
        dp = {k: rng.normal(size=np.shape(v)) for k, v in params.items()
              if graph.params[k].trainable}
        di = {k: rng.normal(size=np.shape(inputs[k])) for k in float_names(inputs)}
        analytic = sum(np.sum(grads.params[k] * d) for k, d in dp.items()) + \
            sum(np.sum(grads.inputs[k] * d) for k, d in di.items())

        def moved(step: float):
            p = {k: v + step * dp[k] if k in dp else v for k, v in params.items()}
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
    """The verified gradient graph, simplified as a build would."""
    g = differentiate(graph)
    verify(g)
    return g
