"""Loop options natively against the reference interpreter (f64, 1e-10): `recompute`,
`checkpoint = k` with and without lengths, reversed loops, loops nested in loops, a
product inside a branch inside a loop, yields of the state, layers split into loops.
These are the shapes the backend's loop rewrites meet: products before the loop and sums
after it, weights packed before their loop, yields computed in place, concatenations
filled by the run that computes their parts."""
import ast
from pathlib import Path

import numpy as np
import pytest
from source_files import source_file

from codegen.pipeline import load
from codegen.reference import gradcheck
from codegen.reference import interpreter as reference
from dsl import check_file

from test_native import assert_training_matches, random_case, rel_error, run_alone

SOURCE = """import "std/rnn.mdl"

model Recompute(H = 6) {
  input xs : f32[T, B, 4]; input lengths : i32[B]; input w : f32[T, B, H]
  h = zeros[B, H]; c = zeros[B, H]
  hs = for x in xs (lengths = lengths, recompute) {
    h, c = lstm(x, h, c)
    yield h
  }
  output loss = sum(hs * w)
  minimize loss
}

model Checkpoint(H = 6) {
  input xs : f32[T, B, 4]; input w : f32[T, B, H]
  h = zeros[B, H]; c = zeros[B, H]
  hs = for x in xs (checkpoint = 2) {
    h, c = lstm(x, h, c)
    yield h
  }
  output loss = sum(hs * w)
  minimize loss
}

model CheckpointReversed(H = 5) {
  input xs : f32[T, B, 4]; input lengths : i32[B]; input w : f32[T, B, H]
  h = zeros[B, H]
  hs = for x in reversed(xs) (lengths = lengths, checkpoint = 3) {
    h = gru(dropout(x, 0.25), h)
    yield h
  }
  output loss = sum(hs * w)
  minimize loss
}

model Nested(H = 4) {
  input xs : f32[T, B, H]; input w : f32[T, B, H]
  param U : f32[H, H] = uniform(-0.5, 0.5)
  h = zeros[B, H]
  hs = for x in xs {
    g = x
    for y in xs {
      g = tanh(g @ U + y)
    }
    # the outer state as the inner one's: it lies in the outer loop's memory (the row the
    # training forward keeps), and its old value is kept at every inner step
    for y in reversed(xs) {
      h = tanh(y + h @ U)
    }
    h = tanh(h @ U + g)
    yield h
  }
  output loss = sum(hs * w)
  minimize loss
}

model Branches(H = 5) {
  input xs : f32[T, B, H]; input w : f32[T, B, H]
  k = 1.0 / sqrt(H)
  param P : f32[H, H] = uniform(-k, k)
  h = zeros[B, H]
  hs = for x in xs {
    if mean(x) > 0.0 { v = tanh(x @ P) } else { v = 0.5 * x }
    h = gru(v, h)
    yield h
  }
  output loss = sum(hs * w)
  minimize loss
}

# Weights only one branch uses, the branches reading the state: their gradients are
# summed after the backward loop from operands the if yields (zeros from the other
# branch), through nested ifs (for_sink.py, if_op.py's step_sum). The two cases of the
# loop tests take each of the three branches at some step.
model BranchWeights(H = 5) {
  input xs : f32[T, B, H]; input w : f32[T, B, H]
  param P : f32[H, H] = uniform(-0.5, 0.5)
  param Q : f32[H, H] = uniform(-0.5, 0.5)
  param b : f32[H] = uniform(-0.5, 0.5)
  h = zeros[B, H] + 0.1
  hs = for x in xs {
    if sum(x) > 0.0 {
      if sum(x) > 2.0 { h = tanh(h @ P + x) } else { h = 0.5 * h + x }
    } else {
      h = tanh(h @ Q + b) * x
    }
    yield h
  }
  output loss = sum(hs * w)
  minimize loss
}

# Singular where the padding steps of a segment or block are masked: log(0) = -inf, and
# 0 * inf = NaN in d U had those steps run.
model Singular(H = 4) {
  input xs : f32[T, B, H]; input w : f32[T, B, H]
  param U : f32[H, H] = uniform(-0.5, 0.5)
  h = zeros[B, H] + 0.5
  hs = for x in xs (checkpoint = 2) {
    h = tanh(h @ U) * log(x * x)
    yield h
  }
  gs = for x in xs (recompute) {
    h = tanh(h @ U) * log(x * x)
    yield h
  }
  output loss = sum(hs * w) + sum(gs * w)
  minimize loss
}

# Branches on the step's input alone multiply it by a weight: the inputs' gradients come
# from a product in one branch (d x = g @ P^T), in the then branch (x), in the else
# branch (y), the other branch's gradient zero (z); two branches add to P's.
model BranchInputs(H = 5) {
  input xs : f32[T, B, H]; input ys : f32[T, B, H]; input zs : f32[T, B, H]
  input w : f32[T, B, H]
  param P : f32[H, H] = uniform(-0.5, 0.5)
  param Q : f32[H, H] = uniform(-0.5, 0.5)
  param U : f32[H, H] = uniform(-0.5, 0.5)
  h = zeros[B, H]
  hs = for x in xs, y in ys, z in zs {
    if sum(x) > 0.0 { v = tanh(x @ P) } else { v = 0.5 * x }
    if sum(y) > 1.0 { u = y * y } else { u = sigmoid(y @ Q) }
    if sum(z) < 0.5 { r = z @ P } else { r = zeros[B, H] + 0.25 }
    h = tanh(v + u + r + h @ U)
    yield h
  }
  output loss = sum(hs * w)
  minimize loss
}

# One weight used twice a step in the recurrence (as a layer applied twice, its scope
# re-entered): each use's gradient is one product after the backward loop (add_n's
# step_sum), and where both branches of an `if` use it alike, one for both (the if's).
model TwiceAStep(H = 5) {
  input xs : f32[T, B, H]; input w : f32[T, B, H]
  param P : f32[H, H] = uniform(-0.5, 0.5)
  param b : f32[H] = uniform(-0.5, 0.5)
  h = zeros[B, H] + 0.1
  hs = for x in xs {
    a = tanh(h @ P + x)
    h = tanh(a @ P + 0.5 * h)
    if sum(x) > 0.0 { h = tanh(h @ P + x) } else { h = sigmoid(h @ P + b) * x }
    yield h
  }
  output loss = sum(hs * w)
  minimize loss
}

# A branch that draws in a recompute loop: since 2026-11-29 its backward runs it again,
# drawing the mask again from the stream's position. Before, it kept the mask, and the
# backward read the kept sqrt, zero in a block's padding steps (0 / 0 there): found by
# the fuzzer on the cuda target (seed 618, program 30), whose padding steps ran.
model BranchDraws(H = 2) {
  input xs : f32[T, B, H]; input x1 : f32[T, B, H]; input h0 : f32[B, H]
  h = h0
  ys = for x in xs (recompute) {
    if sum(x1) != 0.1 {
      h = h + tanh(sum(sqrt(sigmoid(x1) + 0.5), axis = 0))
      u = dropout(x, 0.1)
    } else {
      u = h
    }
    yield u
  }
  output loss = mean(ys * ys) + mean(h)
  minimize loss
}

model States(H = 6) {
  input xs : f32[T, B, 4]; input w : f32[T, B, H]
  h = zeros[B, H]; c = zeros[B, H]
  hs, cs, prev = for x in xs {
    old = h
    h, c = lstm(x, h, c)
    yield h, 2.0 * c, old
  }
  output loss = sum(hs * w) + sum(cs * cs) + sum(prev)
  minimize loss
}

# States the step may or may not update where they live (codegen/backend/states.py): d's
# new value is computed by a loop, but the old d is read after it; c's by a product that
# reads the old c (wider than one of the BLAS's tiles); a's is b's old value and b's reads
# the old a; f's loop reads the old f's first row at every row; e's loop reads the old e
# only at the elements it writes (in place), and its old value is yielded; g's old first
# rows are yielded (a view of its old value: g is not written in place).
model InPlace(H = 40) {
  input xs : f32[T, B, H]; input w : f32[T, B, H]
  param U : f32[H, H] = uniform(-0.5, 0.5)
  a = zeros[B, H] + 0.5; b = zeros[B, H] - 0.25; c = zeros[B, H] + 0.1
  d = zeros[B, H] + 0.2; e = zeros[B, H] + 0.3; f = zeros[B, H] + 0.4
  g = zeros[B, H] - 0.1
  ys, zs, olds, parts = for x in xs {
    part = g[0:2, :]
    g = 0.5 * g + x
    f = 0.5 * f + x * f[0:1, :]
    dn = tanh(d + x)
    q = tanh(dn @ U) + d
    bn = tanh(a * x)
    a = b
    b = bn
    c = c @ U
    old = e
    e = 0.5 * e + x
    d = dn
    yield q * a, b + c, old, part
  }
  output loss = sum(ys * w) + sum(zs * zs) + sum(olds * w) + sum(d * e) + sum(f)
              + sum(parts * parts) + sum(g)
  minimize loss
}

# The same hazards in a while's body (its states written in place too; its tapes of
# an old state copied before the state is written).
model WhileInPlace(H = 40) {
  input x : f32[B, H]; input w : f32[B, H]
  param U : f32[H, H] = uniform(-0.5, 0.5)
  a = zeros[B, H] + 0.5; b = zeros[B, H] - 0.25; c = zeros[B, H] + 0.1
  d = zeros[B, H] + 0.2; e = zeros[B, H] + 0.3; f = zeros[B, H] + 0.4
  g = zeros[B, H] - 0.1; part = zeros[2, H]
  q = zeros[B, H]; n = 0
  while n < 3 {
    part = g[0:2, :]
    g = tanh(0.5 * g + x)
    f = 0.5 * f + x * f[0:1, :]
    dn = tanh(d + x)
    q = tanh(dn @ U) + d
    bn = tanh(a * x)
    a = b
    b = bn
    c = c @ U
    e = tanh(e * x)
    d = dn
    n = n + 1
  }
  output loss = sum(q * w) + sum(a * b) + sum(c * c) + sum(d * e) + sum(f)
              + sum(part * part) + sum(g)
  minimize loss
}

# Its loop reads only the sequence's length: the backward loop runs over a constant
# cotangent (d mean), whose steps have no memory (fuzzer seed 119).
model LengthOnly(H = 3) {
  param q : f32[H] = uniform(-0.5, 0.5)
  ys = for e in q {
    param p : f32[H] = uniform(-0.5, 0.5)
    yield p
  }
  output loss = mean(ys)
  minimize loss
}

# Whiles in a for: each step runs them a number of trips of its own (none in some
# steps), and the for keeps their tapes end to end (a ragged yield), a dropout's masks
# too, for the backward, which runs no while again.
model WhileInFor(H = 4) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = uniform(-0.8, 0.8)
  param V : f32[H, H] = uniform(-0.8, 0.8)
  h = zeros[B, H]
  hs = for x in reversed(xs) {
    y = tanh(x @ W + h)
    n = 0
    while norm(y) > 1.2 and n < 4 { y = 0.8 * dropout(y, 0.2) @ V; n = n + 1 }
    z = h + 0.5 * x
    while mean(z * z) > 0.3 { z = 0.7 * tanh(z @ W) }
    h = y + z
    yield h
  }
  output loss = sum(hs * hs) + sum(h)
  minimize loss
}

# Whiles in the branches of an if in a for: the for keeps the tapes of the while that
# ran (no rows for the other), so the backward runs neither again; a dropout's masks too.
model WhileInIf(H = 4) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = uniform(-0.8, 0.8)
  param V : f32[H, H] = uniform(-0.8, 0.8)
  h = zeros[B, H]
  hs = for x in xs {
    y = tanh(x @ W + h)
    if mean(x) > 0.0 {
      n = 0
      while norm(y) > 1.2 and n < 4 { y = 0.8 * dropout(y, 0.2) @ V; n = n + 1 }
    } else {
      z = h + 0.5 * x
      while mean(z * z) > 0.3 { z = 0.7 * tanh(z @ W) }
      y = y + z
    }
    h = y
    yield h
  }
  output loss = sum(hs * hs) + sum(h)
  minimize loss
}

# A loop in a branch whose state is a product's right operand: the state's buffer is the
# if's output, and it holds another matrix at every step, in the forward (m) and in the
# backward (d m), so it is not packed once before the loop as a weight is (until
# 2026-11-29 it was: wrong values).
model StateOperand(H = 3) {
  input xs : f32[T, H, H]
  param W : f32[H, H] = uniform(-0.8, 0.8)
  m = tanh(W)
  if mean(xs * xs) > 0.0 {
    for x in xs { m = tanh(x @ m) }
  }
  output loss = sum(m * m)
  minimize loss
}

# Whiles in ifs in no loop: the ifs output their tapes (a dropout's masks too), the
# branch without the while no rows; the backward runs neither while again.
model WhileInTopIf(H = 4) {
  input x : f32[B, H]
  param W : f32[H, H] = uniform(-0.8, 0.8)
  param V : f32[H, H] = uniform(-0.8, 0.8)
  y = tanh(x @ W)
  if mean(x) > 0.0 {
    n = 0
    while norm(y) > 1.2 and n < 4 { y = 0.8 * dropout(y, 0.2) @ V; n = n + 1 }
  } else {
    if sum(y) < 1.0 {
      z = y + 0.5 * x
      while mean(z * z) > 0.3 { z = 0.7 * tanh(z @ W) }
      y = y + z
    }
  }
  output loss = sum(y * y)
  minimize loss
}

# Whiles in a for in ifs in no loop: the for keeps their tapes (a dropout's masks too) as
# ragged yields, the ifs output them, the other branch no rows; the backward runs neither
# while again. The else branch's checkpointed loop keeps its segments' states and masks.
model ForInTopIf(H = 4) {
  input xs : f32[T, B, H]; input c : f32
  param W : f32[H, H] = uniform(-0.8, 0.8)
  param V : f32[H, H] = uniform(-0.8, 0.8)
  h = zeros[B, H]
  if c > 0.0 {
    if c < 5.0 {
      for x in xs {
        y = tanh(x @ W + h)
        n = 0
        while norm(y) > 0.6 and n < 4 { y = dropout(y, 0.2) * 0.8 @ W; n = n + 1 }
        z = h + x
        while mean(z * z) > 0.3 { z = 0.7 * tanh(z @ V) }
        h = h + y + z
      }
    }
  } else {
    for x in xs (checkpoint = 2) { h = tanh(dropout(x, 0.3) @ V + h + c) }
  }
  output loss = sum(h * h)
  minimize loss
}

# Whiles in a while in no loop (one in an if): the outer while keeps their tapes (a
# dropout's masks too), each trip's rows end to end; the backward runs none again.
model WhileInWhile(H = 4) {
  input x : f32[B, H]
  param W : f32[H, H] = uniform(-0.8, 0.8)
  param V : f32[H, H] = uniform(-0.8, 0.8)
  h = tanh(x @ W)
  n = 0
  while n < 3 and norm(h) > 0.2 {
    y = tanh(h @ W + x)
    k = 0
    while norm(y) > 0.6 and k < 4 { y = dropout(y, 0.2) * 0.8 @ W; k = k + 1 }
    z = h + x
    if mean(z) > 0.0 {
      while mean(z * z) > 0.3 { z = 0.7 * tanh(z @ V) }
    }
    h = 0.5 * (y + z)
    n = n + 1
  }
  output loss = sum(h * h)
  minimize loss
}

# Dropouts in loops the backward runs again (a while in a recompute for, a checkpointed
# for in an if in a for): they draw their masks again at the forward's positions.
model DrawnAgain(H = 4) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = uniform(-0.8, 0.8)
  h = zeros[B, H]
  for x in xs (recompute) {
    y = tanh(x @ W + h)
    k = 0
    while norm(y) > 0.5 and k < 4 { y = dropout(y, 0.2) * 0.7; k = k + 1 }
    h = h + y
  }
  g = zeros[B, H]
  for y in xs { if mean(y) > 0.0 {
    for x in xs (checkpoint = 2) { g = tanh(dropout(x @ W, 0.3) + g + y) }
  } }
  output loss = sum(h * h) + sum(g * g)
  minimize loss
}

# Counting with `range`: a step index beside the input (checkpointed), a count down, and
# numbers from range's other forms.
model Counting(H = 4, K = 3) {
  input xs : f32[T, B, H]; input w : f32[T, B, H]
  param U : f32[H, H] = uniform(-0.5, 0.5)
  h = zeros[B, H]
  hs = for x in xs, t in range(T) (checkpoint = 2) {
    h = tanh(h @ U + x * (0.5 + 0.1 * f32(t)))
    yield h
  }
  g = zeros[B, H]
  for k in reversed(range(K)) { g = tanh(g @ U + f32(k) * 0.25 + h) }
  odd = f32(range(1, 2 * H + 1, 2))                     # 1, 3, 5, 7
  position = f32(reshape(range(T), [T, 1, 1]))
  output loss = sum(hs * w * (1.0 + 0.1 * position)) + sum(g * odd * 0.1)
  minimize loss
}

# Layers: each a loop of its own (loop fission by layers), over padded rows in reverse,
# with a dropout between the side-by-side lower layers and the top one.
model Layers(H = 5) {
  input xs : f32[T, B, H]; input lengths : i32[B]
  a = zeros[B, H]; ac = zeros[B, H]; b = zeros[B, H]; h = zeros[B, H]; g = zeros[B, H]
  hs = for x in reversed(xs) (lengths = lengths) {
    a, ac = lstm(x, a, ac) as left
    b = gru(tanh(x), b) as right
    h = gru(dropout(concat([a, b], axis = 1), 0.3), h) as middle
    g = tanh(linear(h, H) as top_in + linear(g, H) as top_rec)
    yield g + a
  }
  output loss = sum(hs * hs) + sum(ac * b) + sum(h)
  minimize loss
}
"""
MODELS = ["Recompute", "Checkpoint", "CheckpointReversed", "Nested", "Branches",
          "BranchWeights", "BranchInputs", "TwiceAStep", "BranchDraws", "States",
          "InPlace", "WhileInPlace", "LengthOnly", "Layers", "WhileInFor", "WhileInIf",
          "StateOperand", "WhileInTopIf", "ForInTopIf", "WhileInWhile", "DrawnAgain",
          "Counting"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return source_file(tmp_path_factory, "loops.mdl", SOURCE)


@pytest.fixture(scope="module")
def module(source):
    return load(source, dtype="f64", name="native_loops_f64")


@pytest.mark.parametrize("model", MODELS)
def test_loop_options_match_the_reference(source, module, model):
    graph = check_file(str(source), model=model, dtype="f64").graph
    m = getattr(module, model)(seed=2)
    for seed in (1, 2):
        assert_training_matches(m, graph, random_case(graph, "f64", seed), 1e-10, seed=2)


def test_whiles_in_ifs_in_no_loop_match_the_reference_in_each_branch(source, module):
    """WhileInTopIf's branches each (x > 0, x < 0), at B = 0 to 3: the training forward
    and backward (the ifs' tapes) and the inference forward (none) against the
    reference."""
    graph = check_file(str(source), model="WhileInTopIf", dtype="f64").graph
    m = module.WhileInTopIf(seed=2)
    for seed, (sign, rows) in enumerate([(s, b) for s in (1, -1) for b in (0, 1, 2, 3)]):
        inputs = {"x": sign * np.abs(np.random.default_rng(seed).normal(size=(rows, 4)))}
        assert_training_matches(m, graph, inputs, 1e-10, seed=2)
        want = reference.run(graph, inputs, {k: np.array(v) for k, v in m.params.items()})
        assert rel_error(m.forward(**inputs)["loss"], want["loss"]) < 1e-12


def test_loops_in_ifs_in_no_loop_match_the_reference_in_each_branch(source, module):
    """ForInTopIf in each branch (c = 1, 7, -1: the for, the inner if's no for, the
    else's checkpointed for), at T = 0 to 5 and B = 0 to 3: the training forward and
    backward (the for's ragged yields through the ifs, the checkpoint's kept states and
    masks) and the inference forward against the reference."""
    graph = check_file(str(source), model="ForInTopIf", dtype="f64").graph
    m = module.ForInTopIf(seed=2)
    cases = [(c, t, b) for c in (1.0, 7.0, -1.0) for t in (0, 1, 5) for b in (0, 1, 3)]
    for seed, (c, steps, rows) in enumerate(cases):
        inputs = {"xs": np.random.default_rng(seed).normal(size=(steps, rows, 4)),
                  "c": np.array(c)}
        assert_training_matches(m, graph, inputs, 1e-10, seed=2)
        want = reference.run(graph, inputs, {k: np.array(v) for k, v in m.params.items()})
        assert rel_error(m.forward(**inputs)["loss"], want["loss"]) < 1e-12


def test_whiles_in_a_while_match_the_reference(source, module):
    """WhileInWhile at B = 0 to 6 (no outer trip at B = 0, three above, each inner
    while's trips its own): the training forward and backward (the outer while's ragged
    tapes) and the inference forward against the reference."""
    graph = check_file(str(source), model="WhileInWhile", dtype="f64").graph
    m = module.WhileInWhile(seed=2)
    for rows in range(7):
        inputs = {"x": np.random.default_rng(rows).normal(size=(rows, 4))}
        assert_training_matches(m, graph, inputs, 1e-10, seed=2)
        want = reference.run(graph, inputs, {k: np.array(v) for k, v in m.params.items()})
        assert rel_error(m.forward(**inputs)["loss"], want["loss"]) < 1e-12


def test_products_of_many_rows_a_step_match_the_reference(source):
    """Per-step products of 130 rows in float32, forward and backward (mdl's kernel on the
    packed weights, small_gemm.h, up to 1024 rows since 2026-11-27; the BLAS's before):
    16 blocks of 8 rows and 2 more, H = 40's 5 panels of 32 columns or 10 of 16."""
    module = load(source, dtype="f32", name="native_loops_rows", defines={"H": 40},
                  model="Layers")  # this model alone: the file's 23 took 34 s to compile
    graph = check_file(str(source), model="Layers", dtype="f32", defines={"H": 40}).graph
    m = module.Layers(seed=2)
    rng = np.random.default_rng(4)
    inputs = gradcheck.random_inputs(graph, {"T": 3, "B": 130}, rng)
    inputs = {k: v.astype(np.float32) if v.dtype == np.float64 else v
              for k, v in inputs.items()}
    assert_training_matches(m, graph, inputs, 1e-4, seed=2)


@pytest.mark.parametrize("model", ["InPlace", "WhileInPlace"])
def test_states_updated_in_place_keep_the_values_they_had(source, module, model):
    """The inference forward (whose steps keep nothing for a backward, so that more of
    their states are updated where they live: codegen/backend/states.py) gives the loss
    of the training forward, which test_loop_options_match_the_reference checks."""
    graph = check_file(str(source), model=model, dtype="f64").graph
    m = getattr(module, model)(seed=2)
    for seed in (1, 2):
        inputs = random_case(graph, "f64", seed)
        trained = m.forward(**inputs, training=True)["loss"]
        assert rel_error(m.forward(**inputs)["loss"], trained) < 1e-12


@pytest.mark.parametrize("steps", [1, 2, 3, 4, 7, 17])
def test_checkpoint_segments_of_every_length(source, module, steps):
    """Its segments are views of the sequences, the last one, shorter, a padded copy:
    T below k, a multiple of k, and one past it (k = 2 and 3; `recompute`'s backward in
    blocks of 16). The padding steps are skipped (control_flow._skip_padding)."""
    for model in ("Checkpoint", "CheckpointReversed", "Recompute"):
        graph = check_file(str(source), model=model, dtype="f64").graph
        m = getattr(module, model)(seed=2)
        inputs = gradcheck.random_inputs(graph, {"T": steps, "B": 3},
                                         np.random.default_rng(steps))
        assert_training_matches(m, graph, inputs, 1e-10, seed=2)


def test_padding_steps_do_not_run_where_the_body_is_singular(source, module):
    """A padding step does not run (a `for`'s `skip` flags) in native code and in the
    reference alike: the body's log(x * x) at the padding's zeros would make d U NaN."""
    graph = check_file(str(source), model="Singular", dtype="f64").graph
    m = module.Singular(seed=2)
    for steps in (3, 5):
        inputs = gradcheck.random_inputs(graph, {"T": steps, "B": 2},
                                         np.random.default_rng(steps))
        assert_training_matches(m, graph, inputs, 1e-10)
        m.forward(**inputs, training=True)
        assert np.isfinite(m.backward()["U"]).all()


def peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("/proc/self/status has no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux's /proc only")
def test_repeated_training_steps_peak_where_the_second_one_did(source, module):
    """The gradients each step hands to Python (3 and 4.4 MiB) are freed at the next one.
    Memory of 1 MiB and more is mapped and unmapped (mdl/arena.h's kMapBytes), not left to
    malloc, whose heap keeps freed pages resident once it has raised its mmap threshold:
    the peak then grew by 17 MiB over these steps (by 50-80 MiB at T=1000, B=16,
    H=256, f32). Measured in a process of its own (`run_alone`), without huge pages:
    Linux's khugepaged, which scans every 10 s, may make a partly touched 2 MiB region
    one resident huge page at any step of a slow run (+2.3 MiB at the fifth step, 1 run
    in 6 with the test run six at once)."""
    printed = run_alone(f"""
import os
os.environ["MDL_HUGE_PAGES"] = "0"  # before the arenas map anything
import numpy as np
from pathlib import Path
from codegen.pipeline import load
from codegen.reference import gradcheck
from codegen.reference import interpreter as reference
from dsl import check_file
from test_native_loops import peak_mib
module = load({str(source)!r}, dtype="f64", name={module.__name__!r})
graph = check_file({str(source)!r}, model="Recompute", dtype="f64").graph
m = module.Recompute(seed=2)
inputs = gradcheck.random_inputs(graph, {{"T": 240, "B": 400}}, np.random.default_rng(7))
Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) restarts from here
peaks = []
for _ in range(6):
    m.forward(**inputs, training=True)
    m.backward()
    peaks.append(peak_mib())
print(peaks)
""")
    peaks = ast.literal_eval(printed.strip().splitlines()[-1])
    assert len(peaks) == 6 and peaks[-1] - peaks[1] < 1.0, peaks


@pytest.mark.parametrize("model", ["Recompute", "Checkpoint"])
def test_a_training_forward_that_gives_memory_back_runs_again(source, module, model):
    """Large enough (T*B*H f64 >= 4 MiB) that the training forward gives its dead hs back
    to the system (mdl::give_back): the next step, which writes there again, matches the
    reference, and so does a train_step, whose gradients stay in that memory."""
    graph = check_file(str(source), model=model, dtype="f64").graph
    m = getattr(module, model)(seed=2)
    inputs = gradcheck.random_inputs(graph, {"T": 240, "B": 400}, np.random.default_rng(5))
    assert 240 * 400 * 6 * 8 >= 4 << 20
    first = assert_training_matches(m, graph, inputs, 1e-10)
    again = assert_training_matches(m, graph, inputs, 1e-10)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    loss = m.forward(**inputs)["loss"]
    m.set_optimizer("sgd", lr=0.1)
    assert m.train_step(**inputs)["loss"] == loss  # the loss before its update
    assert_training_matches(m, graph, inputs, 1e-10)
