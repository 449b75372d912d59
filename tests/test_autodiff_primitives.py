"""Gradient checks generated from the primitive table: every entry has a case here (a
new primitive without one fails `test_every_primitive_has_a_case`); each case builds
the op on random float64 inputs valid for it, takes the IR gradient of sum(w * out) with
a fixed random w, runs it in the reference interpreter and compares it with central
differences. A few also check the gradient of the gradient (rules are IR)."""
from __future__ import annotations

import numpy as np
import pytest
from ir_helpers import EPS, TOLERANCE, check_coordinates, model, random_params, rel_error

from codegen.ir.graph import Block, Graph, Value
from codegen.ir.shapes import Dim, TensorType
from codegen.ops.builder import Builder
from codegen.ops.context import Held
from codegen.ops.primitives import TABLE
from codegen.ops.verify import verify
from codegen.reference import interpreter as reference
from codegen.transforms.autodiff import vjp


def f(*shape):            # a float input, any values
    return ("f", shape)


def pos(*shape):          # a float input in (0.5, 2)
    return ("pos", shape)


def ints(high, *shape):   # an i32 input in [0, high)
    return ("i", shape, high)


def flags(*shape):        # a bool input
    return ("b", shape)


def holds(*shape):        # a bool input, every element true (an assert's condition)
    return ("true", shape)


D = Dim.of
NONDIFF = "nondiff"       # its cotangents must be zero (or none)

CASES: dict[str, list[tuple]] = {
    **{name: [([f(2, 3)], {})] for name in ("exp", "tanh", "sigmoid", "sin", "cos", "neg",
                                            "abs", "relu", "expm1", "softplus", "erf",
                                            "erfc")},
    "log": [([pos(2, 3)], {})],
    "log1p": [([pos(2, 3)], {})],
    "sqrt": [([pos(2, 3)], {})],
    "sign": [([f(2, 3)], {}, NONDIFF)],
    "not": [([flags(2, 3)], {}, NONDIFF)],
    "assert": [([holds(2, 3)], {"what": "a check is false", "said": "a check"}, NONDIFF)],
    "cumsum": [([f(2, 3)], {"axis": 1, "reverse": False}),
               ([f(3, 2, 2)], {"axis": 0, "reverse": True}),
               ([ints(9, 2, 3)], {"axis": 1, "reverse": False}, NONDIFF)],
    **{name: [([f(2, 3), f(2, 3)], {}), ([f(2, 3), f(3)], {}), ([f(1, 3), f(2, 1)], {})]
       for name in ("add", "sub", "mul", "maximum", "minimum")},
    "div": [([f(2, 3), pos(3)], {}), ([f(3), pos(2, 3)], {})],
    **{name: [([ints(9, 2, 3), ints(4, 3)], {}, NONDIFF)] for name in ("floordiv", "mod")},
    "pow": [([pos(2, 3), f(2, 3)], {}), ([pos(2, 3), f()], {})],
    **{name: [([f(2, 3), f(3)], {}, NONDIFF)] for name in ("lt", "le", "gt", "ge", "eq", "ne")},
    "and": [([flags(2, 3), flags(3)], {}, NONDIFF)],
    "or": [([flags(2, 3), flags(3)], {}, NONDIFF)],
    "where": [([flags(2, 3), f(2, 3), f(3)], {}), ([flags(3), f(2, 1), f()], {})],
    "cast": [([f(2, 3)], {"dtype": "f32"}), ([f(2, 3)], {"dtype": "i32"}, NONDIFF)],
    "full": [([], {"shape": (D(2), D(3)), "value": 0.5, "dtype": "f64"}, NONDIFF)],
    "one_hot": [([ints(4, 2, 3)], {"n": 4, "dtype": "f64"}, NONDIFF)],
    "stop_gradient": [([f(2, 3)], {}, NONDIFF)],
    "range": [([], {"n": D(4), "start": 0, "step": 1}, NONDIFF),
              ([], {"n": D(3), "start": 5, "step": -2}, NONDIFF)],
    "matmul": [([f(2, 3), f(3, 4)], {}), ([f(2, 2, 3), f(3, 4)], {})],
    "bmm": [([f(2, 2, 3), f(2, 3, 4)], {}), ([f(2, 1, 2, 3), f(2, 1, 3, 2)], {})],
    "sum": [([f(2, 3)], {"axes": (1,), "keepdims": False}),
            ([f(2, 3, 2)], {"axes": (0, 2), "keepdims": True})],
    "mean": [([f(2, 3)], {"axes": (0, 1), "keepdims": False}),
             ([f(2, 3, 2)], {"axes": (1,), "keepdims": True})],
    "max": [([f(2, 3)], {"axes": (1,), "keepdims": False}),
            ([f(2, 3, 2)], {"axes": (0, 2), "keepdims": True})],
    "logsumexp": [([f(2, 3)], {"axes": (1,), "keepdims": False}),
                  ([f(2, 3, 2)], {"axes": (0, 1), "keepdims": True})],
    "softmax": [([f(2, 3)], {"axis": 1}), ([f(2, 3)], {"axis": 0})],
    "log_softmax": [([f(2, 3)], {"axis": 1}), ([f(3, 2, 2)], {"axis": 0})],
    "argmax": [([f(2, 3)], {"axis": 1}, NONDIFF), ([f(3, 2, 2)], {"axis": 0}, NONDIFF)],
    "topk": [([f(2, 5)], {"axis": 1, "k": 3}), ([f(4, 2, 3)], {"axis": 0, "k": 2})],
    "cross_entropy": [([f(2, 3, 4), ints(4, 2, 3)], {}), ([f(3, 2, 4), ints(4, 3, 2),
                                                           ("len", (2,), 3)], {})],
    "dropout": [([f(3, 4)], {"p": 0.5, "salt": 0}), ([f(3, 4)], {"p": 0.0, "salt": 1})],
    "dropout_mask": [([f(3, 4)], {"p": 0.5, "salt": 0}, NONDIFF)],
    "rng_position": [([], {"salt": 0}, NONDIFF)],
    "dropout_replay": [([f(3, 4), ints(1000, 4)], {"p": 0.5}, NONDIFF)],
    "rng_skip": [([ints(1000, 4), f(3, 4)], {}, NONDIFF)],
    "concat": [([f(2, 3), f(2, 1), f(2, 2)], {"axis": 1}), ([f(1, 3), f(2, 3)], {"axis": 0})],
    "stack": [([f(2, 3), f(2, 3)], {"axis": 0}), ([f(2, 3), f(2, 3), f(2, 3)], {"axis": 2})],
    "split": [([f(2, 6)], {"axis": 1, "parts": 3}), ([f(4, 3)], {"axis": 0, "parts": 2})],
    "reshape": [([f(2, 3, 2)], {"shape": (D(3), D(4))})],
    "transpose": [([f(2, 3, 4)], {"perm": (2, 0, 1)})],
    "index": [([f(4, 3), ("idx", 4)], {})],
    "slice": [([f(4, 5, 2)], {"starts": (D(1), D(2)), "stops": (D(3), D(5))})],
    "gather": [([f(5, 3), ints(5, 2, 4)], {})],
    "sum_to": [([f(2, 3, 4)], {"shape": (D(3), D(1))}), ([f(2, 3)], {"shape": (D(2), D(3))})],
    "broadcast_to": [([f(3, 1)], {"shape": (D(2), D(3), D(4))})],
    "zeros_like": [([f(2, 3)], {}, NONDIFF)],
    "add_n": [([f(2, 3), f(2, 3), f(2, 3)], {})],
    "unindex": [([f(3, 2), ("idx", 4)], {"n": D(4)})],
    "unslice": [([f(2, 3)], {"starts": (D(1), D(0)), "shape": (D(4), D(3))})],
    "scatter_add": [([f(2, 4, 3), ints(5, 2, 4)], {"n": D(5)})],
    "seq_order": [([f(4, 3, 2), ("len", (3,), 4)], {"reversed": True}),
                  ([f(4, 3), ("len", (3,), 4)], {"reversed": False})],
    "seq_mask": [([f(4, 3), ("len", (3,), 4)], {}, NONDIFF), ([f(4, 3)], {}, NONDIFF)],
    "segment": [([f(5, 2)], {"k": 2}), ([f(6, 2)], {"k": 3})],
    "unsegment": [([f(3, 2, 2), f(5, 4)], {})],
}
SECOND_ORDER = [("tanh", 0), ("sigmoid", 0), ("mul", 0), ("div", 0), ("matmul", 0),
                ("softmax", 0), ("log_softmax", 1), ("logsumexp", 0), ("cross_entropy", 1),
                ("pow", 0), ("sqrt", 0)]


def _array(spec, rng):
    kind, shape = spec[0], spec[1]
    if kind == "f":
        return rng.normal(size=shape)
    if kind == "pos":
        return rng.uniform(0.5, 2.0, size=shape)
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind == "true":
        return np.ones(shape, bool)
    if kind == "idx":
        return np.asarray(rng.integers(spec[1]), np.int32)
    if kind == "len":  # lengths of a batch: each in [0, T], one of them T
        lengths = rng.integers(0, spec[2] + 1, size=shape).astype(np.int32)
        lengths[0] = spec[2]
        return lengths
    return rng.integers(0, spec[2], size=shape).astype(np.int32)


def _type(spec, array) -> TensorType:
    dtype = {"f": "f64", "pos": "f64", "b": "bool", "true": "bool"}.get(spec[0], "i32")
    return TensorType.of(dtype, np.shape(array))


def build(name: str, specs, attrs, seed: int = 0):
    """(graph with loss = sum(w * out) over float outputs, inputs, float input names)."""
    rng = np.random.default_rng(seed)
    arrays = {f"x{i}": _array(s, rng) for i, s in enumerate(specs)}
    values = {k: Value(_type(s, arrays[k]), k) for s, k in zip(specs, arrays)}
    body = Block()
    b = Builder(body)
    outs = b.emit(name, list(values.values()), attrs)
    terms = []
    for i, out in enumerate(outs):
        if out.type.is_float:
            w = Value(out.type, f"w{i}")
            arrays[f"w{i}"] = rng.normal(size=tuple(d.value for d in out.type.shape))
            values[f"w{i}"] = w
            terms.append(b.sum(b.mul(out, w), axes=tuple(range(out.type.rank)), keepdims=False))
    loss = b.total(terms) if terms else b.const(0.0, "f64")
    graph = Graph(name, {}, values, {}, body, {"loss": loss}, "loss")
    wrt = [k for k, s in zip(arrays, specs) if s[0] in ("f", "pos")]
    return graph, arrays, wrt


def add_gradients(graph: Graph, output: str, wrt: list[str], prefix: str) -> None:
    """Append to the graph the IR gradient of `output` w.r.t. the inputs `wrt`."""
    b = Builder(graph.body)
    loss = graph.outputs[output]
    cts = vjp(graph.body, [loss], [b.const(1.0, loss.type.dtype)], [graph.inputs[k] for k in wrt])
    for k, ct in zip(wrt, cts):
        graph.outputs[prefix + k] = ct if ct is not None else b.zeros(graph.inputs[k].type)
    verify(graph)


def numeric(graph: Graph, arrays: dict, name: str, output: str, training: bool) -> np.ndarray:
    """Central differences, what `stop_gradient` lets through held where it was (Held)."""
    out = np.zeros(np.shape(arrays[name]))
    held = Held()
    reference.run(graph, arrays, {}, training=training, seed=7, held=held)
    for idx in np.ndindex(out.shape):
        def at(step):
            moved = dict(arrays)
            moved[name] = np.array(arrays[name], copy=True)
            moved[name][idx] += step
            return float(reference.run(graph, moved, {}, training=training, seed=7,
                                       held=held.replay())[output])
        out[idx] = (at(EPS) - at(-EPS)) / (2 * EPS)
    return out


def all_cases():
    for name in sorted(CASES):
        for i, case in enumerate(CASES[name]):
            yield pytest.param(name, *case[:2], len(case) > 2, id=f"{name}-{i}")


def test_every_primitive_has_a_case():
    assert sorted(CASES) == sorted(TABLE)


@pytest.mark.parametrize("name, specs, attrs, nondiff", list(all_cases()))
def test_gradient_matches_central_differences(name, specs, attrs, nondiff):
    graph, arrays, wrt = build(name, specs, attrs)
    add_gradients(graph, "loss", wrt, "grad_")
    training = TABLE[name].random  # a fixed seed makes dropout's mask part of f
    out = reference.run(graph, arrays, {}, training=training, seed=7)
    for k in wrt:
        expected = numeric(graph, arrays, k, "loss", training)
        if nondiff:
            assert np.all(out["grad_" + k] == 0) and np.all(expected == 0)
        else:
            assert rel_error(out["grad_" + k], expected) < TOLERANCE, k


@pytest.mark.parametrize("name, case", SECOND_ORDER)
def test_gradient_of_gradient(name, case):
    """d/dx sum(v * grad(x)): the backward graph differentiated again."""
    specs, attrs = CASES[name][case][:2]
    graph, arrays, wrt = build(name, specs, attrs, seed=1)
    add_gradients(graph, "loss", wrt, "grad_")
    b = Builder(graph.body)
    rng = np.random.default_rng(2)
    terms = []
    for k in wrt:
        v = Value(graph.inputs[k].type, f"v_{k}")
        graph.inputs[f"v_{k}"] = v
        arrays[f"v_{k}"] = rng.normal(size=np.shape(arrays[k]))
        g = graph.outputs["grad_" + k]
        terms.append(b.sum(b.mul(g, v), axes=tuple(range(g.type.rank)), keepdims=False))
    graph.outputs["inner"] = b.total(terms)
    add_gradients(graph, "inner", wrt, "second_")
    out = reference.run(graph, arrays, {})
    for k in wrt:
        expected = numeric(graph, arrays, k, "inner", False)
        assert np.linalg.norm(expected) > 0
        assert rel_error(out["second_" + k], expected) < TOLERANCE, k


BUILT_INS = """
model M(V = 5, E = 3, H = 4) {
  input ids : i32[T, B]
  input xs : f32[T, B, E]
  param table : f32[V, E] = normal(0, 1)
  param W : f32[2*E, H] = normal(0, 0.5)
  emb = table[ids]
  both = concat([emb, xs], axis = 2)
  hs = for x in both { yield tanh(x @ W) }
  s = stack([hs[0], hs[1]], axis = 1)
  r = reshape(transpose(s, [1, 0, 2]), [2*B, H])
  q = r[:, 1:3]
  m = max(q, axis = 1) + logsumexp(q, axis = 0, keepdims = true)[0, 0]
  p = softmax(r, axis = 1) * log_softmax(r)
  c = clip(r, -0.5, 0.5) + minimum(r, 0.2 * r) + where(r > 0.0, r, abs(r) ** 1.5)
  output loss = sum(m) + sum(p) + sum(c * c) + mse(r, 0.3 * r) + norm(q) + mean(sqrt(exp(r)))
  minimize loss
}"""


def test_built_ins_written_in_mdl():
    """The sugar the front end lowers (indexing, slicing, gathering, clip, norm, mse)
    differentiates through the language too."""
    graph = model(BUILT_INS)
    rng = np.random.default_rng(0)
    inputs = {"ids": rng.integers(0, 5, size=(3, 2)).astype(np.int32),
              "xs": rng.normal(size=(3, 2, 3))}
    assert check_coordinates(graph, inputs, random_params(graph)) < TOLERANCE
