"""The NumPy reference interpreter: runs any IR graph (forward, or forward and backward)
with the exact language semantics. It is the oracle every backend is tested against,
and a backend of its own (`codegen.reference.interpreter` needs no compiler).

    run(graph, inputs, params, *, training=False, seed=0, dtype=np.float64)
        -> {output name: array}
    gradients(graph, inputs, params, *, training=False, seed=0, dtype=np.float64,
              cotangents=None)
        -> Gradients(outputs, params, inputs): the outputs, and the gradient of the
           minimized output w.r.t. every trainable parameter and every float input
           (with `cotangents`, {float output: array}: the vector-Jacobian product)
    init_params(graph, seed=0, dtype=np.float64) -> {param name: array}

`inputs` and `params` map names to arrays. Every float computes in `dtype` (float64 for
gradient checks, float32 to mimic a backend), whatever the graph's own float type.
Symbolic dims (T, B) are bound from the inputs' shapes. Dropout is active only when
`training` is true; each dropout draws from its own stream seeded by (seed, its salt).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..ir.graph import Block, Graph, Op, Value, walk_ops
from ..ir.origins import Origins, input_origins, out_of_range
from ..ir.shapes import TensorType
from ..ops.context import Context, Held, OutOfRange
from ..ops.entry import (branch_bounds, call_bounds, call_bounds_of, entry, guarded_ifs,
                         loop_steps, refused)
from ..ops.structured.if_op import no_rows
from ..transforms.autodiff import cotangent_names, grad_graph, vjp_graph


@dataclass
class Gradients:
    outputs: dict[str, np.ndarray]
    params: dict[str, np.ndarray]
    inputs: dict[str, np.ndarray]


def run(graph: Graph, inputs: dict, params: dict, *, training: bool = False, seed: int = 0,
        dtype=np.float64, cotangents: dict | None = None,
        held: Held | None = None) -> dict[str, np.ndarray]:
    """The graph's outputs (and, for a graph made by autodiff, its gradients under the
    names `grad:param:NAME` and `grad:input:NAME`). A vjp graph's backward takes
    `cotangents`: {float output name: array of that output's shape}. `held`: the values
    `stop_gradient` lets through are recorded there, or replayed from it (ops/context.py)."""
    interp = Interpreter(graph, inputs, params, training, seed, dtype, held)
    interp.block(graph.body, [])
    args = graph.backward.args
    if args:
        names = cotangent_names(graph)
        given = cotangents or {}
        args = [interp.conform(_need(given, k, "cotangent"), v, f"cotangent `{k}`")
                for k, v in zip(names, args)]
    interp.block(graph.backward, args)
    named = dict(graph.outputs)
    named.update({f"grad:param:{k}": v for k, v in graph.param_grads.items()})
    named.update({f"grad:input:{k}": v for k, v in graph.input_grads.items()})
    return {k: interp.env[v.id] for k, v in named.items()}


_JOINT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def gradients(graph: Graph, inputs: dict, params: dict, *, training: bool = False,
              seed: int = 0, dtype=np.float64, cotangents: dict | None = None) -> Gradients:
    """Forward and backward in one run of the graph autodiff makes (built once per
    graph and cached; not simplified by the passes, so that it checks them too). With
    `cotangents` ({float output name: array}), the backward is the vector-Jacobian
    product of codegen.transforms.autodiff.vjp_graph instead of the minimized output's gradient."""
    kind = grad_graph if cotangents is None else vjp_graph
    joints = _JOINT.setdefault(graph, {})
    if kind not in joints:
        joints[kind] = kind(graph)
    out = run(joints[kind], inputs, params, training=training, seed=seed, dtype=dtype,
              cotangents=cotangents)
    pick = {kind: {k.split(":", 2)[2]: v for k, v in out.items()
                   if k.startswith(f"grad:{kind}:")} for kind in ("param", "input")}
    return Gradients({k: out[k] for k in graph.outputs}, pick["param"], pick["input"])


class Interpreter:
    """Runs blocks over an environment of arrays keyed by value id."""

    def __init__(self, graph: Graph, inputs: dict, params: dict, training: bool, seed: int,
                 dtype, held: Held | None = None):
        self.ctx = Context(bind_dims(graph, inputs), dtype, training, seed, held)
        self.graph = graph
        self.origins: Origins | None = None  # made for the first index out of range
        # what each branch of an if in no loop checks where it starts
        self.bounds = {branch: branch_bounds(branch, self.ctx.dims) for block in graph.blocks()
                       for op in guarded_ifs(block) for branch in op.blocks}
        self.refuse(call_bounds([graph], self.ctx.dims))
        self.env: dict[int, np.ndarray] = {}
        # a `for`'s ragged yield (value id): (first row, rows) of each step (for_op.py)
        self.ragged: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.salts = {id(op): i for i, op in enumerate(
            op for op in walk_ops(graph.body) if entry(op).random)}
        for name, v in graph.inputs.items():
            self.env[v.id] = self.conform(_need(inputs, name, "input"), v, name)
        for name, p in graph.params.items():
            self.env[p.value.id] = self.conform(_need(params, name, "parameter"), p.value, name)

    def refuse(self, bounds: list) -> None:
        """Refuse the call if its dims break one of `bounds` (ops/entry.py, refused)."""
        refusal = refused(bounds, self.ctx.dims)
        if refusal:
            raise ValueError(refusal)

    def conform(self, array, v: Value, what: str = "", empty: bool = False) -> np.ndarray:
        """An array in the run's dtype for v's type, its shape checked against the type
        (`empty`: or against no rows of it, if_op.no_rows: an if's output that the branch
        which ran does not make)."""
        array = np.asarray(array)
        want = self.ctx.np_dtype(v.type.dtype)
        if array.dtype != want:
            array = array.astype(want)
        types = [v.type] + ([no_rows(v.type)] if empty and no_rows(v.type) else [])
        shapes = [tuple(self.ctx.dim(d, -1) for d in t.shape) for t in types]
        if not any(array.ndim == len(shape) and all(s in (-1, a) for s, a in
                                                     zip(shape, array.shape))
                   for shape in shapes):
            raise ValueError(f"{what or repr(v)}: expected {v.type} (here "
                             f"{list(shapes[0])}), got shape {list(array.shape)}")
        return array

    def branch(self, block: Block) -> list[np.ndarray]:
        """Run the branch `block` of an if, whose sizes the dims must keep >= 0 where it
        starts, for one in no loop (branch_bounds); its results."""
        self.refuse(self.bounds.get(block, []))
        return self.block(block, [])

    def block(self, block: Block, args: list[np.ndarray]) -> list[np.ndarray]:
        for v, a in zip(block.args, args):
            self.env[v.id] = a
        for op in block.ops:
            self.op(op)
        return [self.env[v.id] for v in block.results]

    def named_origins(self) -> Origins:
        """The inputs each value is computed from, for an error's words (made once, at
        the first error)."""
        if self.origins is None:
            self.origins = input_origins(self.graph, steps=loop_steps)
        return self.origins

    def op(self, op: Op) -> None:
        args = [self.env[v.id] for v in op.inputs]
        if entry(op).bounds is not None:  # a slice in a branch or a loop's body, where it runs
            self.refuse(call_bounds_of(op, self.ctx.dims))
        try:
            with np.errstate(all="ignore"):  # masked steps may compute on zeros; IEEE rules
                outs = entry(op).evaluate(self, op, args)
        except OutOfRange as bad:  # worded as a generated module words it
            what = self.named_origins().indices(op.inputs[bad.operand], op.loc)
            raise IndexError(out_of_range(bad.kind, what, bad.value, bad.position,
                                          bad.bound)) from None
        for v, a in zip(op.outputs, outs):
            self.env[v.id] = self.conform(a, v, empty=entry(op).branches)

    def empty_stack(self, steps: int, t: TensorType) -> np.ndarray:
        shape = (steps,) + tuple(self.ctx.dim(d) for d in t.shape)
        return np.zeros(shape, self.ctx.np_dtype(t.dtype))


def _need(values: dict, name: str, what: str):
    if name not in values:
        raise ValueError(f"missing {what} `{name}`")
    return values[name]


def bind_dims(graph: Graph, inputs: dict) -> dict[str, int]:
    """Symbolic dims from the shapes of the inputs, checked consistent."""
    dims: dict[str, int] = {}
    for name, v in graph.inputs.items():
        shape = np.shape(_need(inputs, name, "input"))
        if len(shape) != v.type.rank:
            raise ValueError(f"input `{name}` is {v.type}, got an array of shape {list(shape)}")
        for d, size in zip(v.type.shape, shape):
            if len(d.terms) == 1 and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1:
                symbol = d.terms[0][0][0]
                if dims.setdefault(symbol, size) != size:
                    raise ValueError(f"input `{name}`: dim {symbol} is {size} here but "
                                     f"{dims[symbol]} in an earlier input")
    return dims


# ---- parameter initializers -----------------------------------------------------------
def init_params(graph: Graph, seed: int = 0, dtype=np.float64) -> dict[str, np.ndarray]:
    """Initial values of every parameter, from its declared initializer."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in graph.params.items():
        shape = tuple(d.value for d in p.value.type.shape)
        out[name] = _initial(p.init.kind, p.init.args, shape, rng).astype(dtype)
    return out


def _initial(kind: str, args: tuple, shape: tuple[int, ...], rng) -> np.ndarray:
    # rank 2 or more: the matrix x @ W multiplies by, [..., in, out] as [n / out, out]
    # (the same rule as cpp_runtime/mdl/init.h)
    fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    fan_out = shape[-1] if shape else 1
    if kind in ("zeros", "ones", "constant"):
        return np.full(shape, {"zeros": 0.0, "ones": 1.0}.get(kind, args[0] if args else 0))
    if kind == "uniform":
        return rng.uniform(args[0], args[1], shape)
    if kind == "normal":
        return rng.normal(args[0], args[1], shape)
    if kind == "xavier":
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-limit, limit, shape)
    if kind == "orthogonal":
        a = rng.normal(size=(max(fan_in, fan_out), min(fan_in, fan_out)))
        q, r = np.linalg.qr(a)
        q = q * np.sign(np.diag(r))
        return (q if fan_in >= fan_out else q.T).reshape(shape)
    raise ValueError(f"unknown initializer `{kind}`")
