"""The JAX side: the same cells written with jax.numpy, the loops as `lax.scan` (the
branch as `lax.cond`, a `while` as a scan of its most trips), everything under `jax.jit`;
parameters keep mdl's names and layout, so gradients come back keyed as mdl's do. Arrays
are placed on the case's device (the GPU rows: float32 products at full precision, no
TF32), so jitted code runs there."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.nn import sigmoid

from benchmarks import data
from benchmarks.cases import (BEAM_WIDTH, DECODE, DECODERS, FORWARD, PONDER_SETTLED, PONDER_TRIPS,
                              STEP, TRAIN, Bench, Case)


def lstm_cell(p, x, h, c, scope="lstm"):
    """std/rnn.mdl's `lstm` (gates i, f, g, o), its parameters those of `scope`."""
    i, f, g, o = jnp.split(x @ p[scope + "/W"] + h @ p[scope + "/U"] + p[scope + "/b"], 4,
                           axis=1)
    c = sigmoid(f) * c + sigmoid(i) * jnp.tanh(g)
    return sigmoid(o) * jnp.tanh(c), c


def milstm_cell(p, x, h, c):
    """std/rnn.mdl's `milstm` (gates i, f, o, u; forget bias 0)."""
    xw, hu = x @ p["milstm/W"], h @ p["milstm/U"]
    g = p["milstm/alpha"] * xw * hu + p["milstm/beta1"] * hu + p["milstm/beta2"] * xw \
        + p["milstm/b"]
    i, f, o, u = jnp.split(g, 4, axis=1)
    c = sigmoid(f) * c + sigmoid(i) * jnp.tanh(u)
    return sigmoid(o) * jnp.tanh(c), c


def gru_if_cell(p, x, s, h):
    """benchmarks/models.mdl's GRUIf step: the branch, then std/rnn.mdl's `gru`."""
    v = lax.cond(s > 0.0, lambda x: jnp.tanh(x @ p["P"]), lambda x: 0.5 * x, x)
    xr, xz, xn = jnp.split(v @ p["gru/W"] + p["gru/bW"], 3, axis=1)
    hr, hz, hn = jnp.split(h @ p["gru/U"] + p["gru/bU"], 3, axis=1)
    r, z = sigmoid(xr + hr), sigmoid(xz + hz)
    n = jnp.tanh(xn + r * hn)
    return (1.0 - z) * n + z * h


def _loss(group: str):
    """sum(hs * weights) over the case's loop."""
    def lstm_like(cell):
        def loss(p, xs, weights):
            def step(hc, x):
                h, c = cell(p, x, *hc)
                return (h, c), h
            zeros = jnp.zeros(xs.shape[1:], xs.dtype)
            return jnp.sum(lax.scan(step, (zeros, zeros), xs)[1] * weights)
        return loss

    def stacked(p, xs, weights):
        def step(states, x):
            h1, c1 = lstm_cell(p, x, *states[:2], scope="layer1")
            h2, c2 = lstm_cell(p, h1, *states[2:], scope="layer2")
            return (h1, c1, h2, c2), h2
        zeros = jnp.zeros(xs.shape[1:], xs.dtype)
        return jnp.sum(lax.scan(step, (zeros,) * 4, xs)[1] * weights)

    def gru_if(p, xs, signs, weights):
        def step(h, xs_t):
            h = gru_if_cell(p, *xs_t, h)
            return h, h
        return jnp.sum(lax.scan(step, jnp.zeros(xs.shape[1:], xs.dtype), (xs, signs))[1]
                       * weights)
    def tied(p, xs, weights):
        def step(h, x):
            h = jnp.tanh(x @ p["W"] + h @ p["U"] + p["b"])
            h = jnp.tanh(h @ p["U"] + p["b"])
            return h, h
        return jnp.sum(lax.scan(step, jnp.zeros(xs.shape[1:], xs.dtype), xs)[1] * weights)

    def ponder(p, xs, weights):
        # lax.while_loop has no reverse-mode gradient: PONDER_TRIPS trips of a scan, the
        # state kept (`where`) from the trip it settled; lax.cond running only the trips
        # needed took 1.3-7.5x as long (AMD EPYC of Zen 5: 5.6 against 1.2 ms at B=1 H=128)
        def step(h, x):
            xw = x @ p["W"]
            h = jnp.tanh(xw + h @ p["U"] + p["b"])

            def trip(carry, _):
                h, moving = carry
                g = jnp.tanh(xw + h @ p["V"] + p["c"])
                settled = jnp.mean(jnp.abs(g - h)) <= PONDER_SETTLED
                return (jnp.where(moving, g, h), moving & ~settled), None
            h = lax.scan(trip, (h, jnp.array(True)), None, length=PONDER_TRIPS)[0][0]
            return h, h
        return jnp.sum(lax.scan(step, jnp.zeros(xs.shape[1:], xs.dtype), xs)[1] * weights)

    def attention(p, enc, xs, weights):
        def step(carry, x):
            h, c, context = carry
            h, c = lstm_cell(p, jnp.concatenate([x, context], axis=1), h, c)
            scores = jax.nn.softmax(jnp.einsum("tbh,bh->tb", enc, h), axis=0)
            context = jnp.einsum("tb,tbh->bh", scores, enc)
            return (h, c, context), h + context
        zeros = jnp.zeros(xs.shape[1:], xs.dtype)
        return jnp.sum(lax.scan(step, (zeros, zeros, zeros), xs)[1] * weights)
    def crf(p, xs, tags):
        def states(scope, xs):
            def step(hc, x):
                h, c = lstm_cell(p, x, *hc, scope=scope)
                return (h, c), h
            zeros = jnp.zeros(xs.shape[1:], xs.dtype)
            return lax.scan(step, (zeros, zeros), xs)[1]
        both = jnp.concatenate([states("forward", xs), states("backward", xs[::-1])[::-1]], 2)
        emissions = both @ p["emit/W"] + p["emit/b"]
        hot = jax.nn.one_hot(tags, p["transitions"].shape[0], dtype=xs.dtype)

        def step(alpha, t):
            e, before, now = t
            alpha = jax.nn.logsumexp(alpha[:, :, None] + p["transitions"], axis=1) + e
            return alpha, jnp.sum((before @ p["transitions"] + e) * now, axis=1)
        alpha, golds = lax.scan(step, emissions[0], (emissions[1:], hot[:-1], hot[1:]))
        gold = jnp.sum(hot[0] * emissions[0], axis=1) + jnp.sum(golds, axis=0)
        return jnp.sum(jax.nn.logsumexp(alpha, axis=1) - gold)
    return {"lstm": lstm_like(lstm_cell), "stacked": stacked, "milstm": lstm_like(milstm_cell),
            "gru_if": gru_if, "tied": tied, "ponder": ponder, "attention": attention,
            "crf": crf}[group]


def setup(case: Case) -> Bench:
    """Jitted functions for the case, compiled by the first call (the check). The training
    step differentiates the parameters and the float inputs xs and weights, as mdl's
    backward does; every input is an argument, never a constant folded into the program."""
    device = _device(case)
    p = {k: jax.device_put(v, device) for k, v in data.params(case).items()}
    inputs = {k: jax.device_put(v, device) for k, v in data.inputs(case).items()}
    if case.group == "generation":
        return _generation(p, inputs["xs"])
    if case.group in DECODERS:
        return _decode(case, p, inputs["start"])
    loss = _loss(case.group)
    floats = {k: inputs[k] for k in ("enc", "xs", "weights") if k in inputs}
    others = {k: v for k, v in inputs.items() if k not in floats}

    def split_loss(p, floats, others):
        return loss(p, **floats, **others)
    train = jax.jit(jax.value_and_grad(split_loss, argnums=(0, 1)))
    forward = jax.jit(split_loss)

    def check():
        value, (grads, input_grads) = train(p, floats, others)
        return {"loss": np.asarray(value), **{k: np.asarray(g) for k, g in grads.items()},
                **{f"input:{k}": np.asarray(g) for k, g in input_grads.items()}}
    return Bench({TRAIN: lambda: jax.block_until_ready(train(p, floats, others)),
                  FORWARD: lambda: jax.block_until_ready(forward(p, floats, others))}, check)


def _device(case: Case):
    """The case's device; a CPU case stays on the CPU even where JAX sees a GPU."""
    if case.device == "cuda":
        jax.config.update("jax_default_matmul_precision", "highest")
        return jax.devices("gpu")[0]
    return jax.devices("cpu")[0]


def _generation(p, xs) -> Bench:
    cell = jax.jit(lstm_cell)
    steps = list(xs)
    zeros = jnp.zeros_like(steps[0])
    state = {"hc": (zeros, zeros), "t": 0}

    def step():  # generation needs each step's output before the next: wait for it
        state["hc"] = jax.block_until_ready(cell(p, steps[state["t"] % len(steps)],
                                                 *state["hc"]))
        state["t"] += 1

    def check():
        h = c = zeros
        for x in steps:
            h, c = cell(p, x, h, c)
        return {"h": np.asarray(h), "c": np.asarray(c)}
    return Bench({STEP: step}, check)


def _log_probs(p, token, h, c):
    """A language model step: the LSTM on the token's embedding, then log-probabilities of
    the next token."""
    h, c = lstm_cell(p, p["embedding"][token], h, c)
    return jax.nn.log_softmax(h @ p["out/W"] + p["out/b"], axis=1), h, c


def greedy(p, start, steps: int):
    """T tokens, each step's most likely token the next one's input (`lax.scan`)."""
    def step(carry, _):
        logp, h, c = _log_probs(p, *carry)
        token = jnp.argmax(logp, axis=1).astype(start.dtype)
        return (token, h, c), (token, jnp.max(logp, axis=1))
    zeros = jnp.zeros((start.shape[0], p["lstm/U"].shape[0]), jnp.float32)
    _, (tokens, best) = lax.scan(step, (start, zeros, zeros), None, length=steps)
    return tokens, jnp.sum(best, axis=0)


def beam(p, start, steps: int, width: int):
    """Beam search: each row's `width` beams as rows of one batch, the best of their
    extensions by `lax.top_k`, the states taken from the beams they extend."""
    B, K, V = start.shape[0], width, p["out/b"].shape[0]
    base = (jnp.arange(B) * K)[:, None]

    def step(carry, t):
        token, h, c, scores, sequences = carry
        logp, h, c = _log_probs(p, token, h, c)
        scores, best = lax.top_k((scores[:, :, None] + logp.reshape(B, K, V)).reshape(B, -1), K)
        rows = (base + best // V).reshape(-1)
        token = (best % V).reshape(-1).astype(start.dtype)
        sequences = sequences[rows].at[:, t].set(token)
        return (token, h[rows], c[rows], scores, sequences), None
    zeros = jnp.zeros((B * K, p["lstm/U"].shape[0]), jnp.float32)
    scores = jnp.full((B, K), -jnp.inf).at[:, 0].set(0.0)  # one sequence to start from
    carry = (jnp.repeat(start, K), zeros, zeros, scores, jnp.zeros((B * K, steps), start.dtype))
    token, h, c, scores, sequences = lax.scan(step, carry, jnp.arange(steps))[0]
    return sequences.reshape(B, K, steps), scores


def _decode(case: Case, p, start) -> Bench:
    steps = case.dims["T"]
    if case.group == "beam":
        run = jax.jit(lambda p, start: beam(p, start, steps, BEAM_WIDTH))
    else:
        run = jax.jit(lambda p, start: greedy(p, start, steps))

    def check():
        tokens, scores = run(p, start)
        return {"tokens": np.asarray(tokens), "scores": np.asarray(scores)}
    return Bench({DECODE: lambda: jax.block_until_ready(run(p, start))}, check)
