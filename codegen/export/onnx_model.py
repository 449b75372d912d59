"""A checked model as an ONNX model: its inference program (the forward, `training`
off), every op written by its entry's ONNX rule (codegen/export/onnx_graph.py), the
parameters as initializers under their full scoped names, symbolic dims as dim_params."""
from __future__ import annotations

import numpy as np

from ..ir.diagnostics import MdlError
from ..ir.graph import Graph, clone_graph, walk_ops
from ..ir.shapes import Dim
from ..transforms.passes import dce
from ..transforms.prepare import prepare
from .onnx_graph import (Names, NoOnnx, OnnxGraph, Root, element, helper, live,
                         numpy_helper, reads)
from .onnx_rnn import fuse_rnn_loops

DEFAULT_OPSET = 18  # the lowest opset whose Split and reductions mdl's rules write


def stored_names(graph: Graph) -> dict[str, str]:
    """Each parameter's initializer name: its full name, or `param:NAME` for one named
    as an input or an output (`param x` after `input x`, which it shadows: ONNX would
    feed the input in its place, or refuse the file)."""
    taken = {*graph.inputs, *graph.outputs}
    stored = {}
    for name in graph.params:
        stored[name] = name if name not in taken else f"param:{name}"
        taken.add(stored[name])
    return stored


def inference_graph(graph: Graph, outputs: list[str] | None) -> Graph:
    """A copy of the checked graph that computes `outputs` (all by default), its loops
    with lengths rewritten into plain ones (a backend's view of them) and what nothing
    reads dropped."""
    ready = clone_graph(graph)
    if outputs:
        ready.outputs = {k: ready.outputs[k] for k in outputs}
        ready.loss = ready.loss if ready.loss in ready.outputs else None
    prepare(ready.body, autodiff=False)
    dce(ready)
    return ready


def to_onnx(graph: Graph, params: dict[str, np.ndarray], fixed: dict[str, int],
            opset: int, doc: str = "", rnn_ops: bool = True):
    """The ONNX model of `graph` (from `inference_graph`) with `params` as initializers
    and the dims in `fixed` folded; `rnn_ops`: a loop of an LSTM or GRU step as ONNX's
    `LSTM` or `GRU` node (onnx_rnn.py), else every loop a `Loop`."""
    read = {v.id for op in walk_ops(graph.body) for v in op.inputs} | {
        v.id for v in graph.outputs.values()} | {
        v.id for op in walk_ops(graph.body) for b in op.blocks for v in b.results}
    bindings: dict = {}
    for name, v in graph.inputs.items():
        for axis, d in enumerate(v.type.shape):
            symbol = _symbol(d)
            if symbol is not None:
                bindings.setdefault(symbol, (name, axis))
    inputs = {k: v for k, v in graph.inputs.items()
              if v.id in read or any(b[0] == k for b in bindings.values())}
    stored = stored_names(graph)
    names = Names([*graph.inputs, *stored.values(), *graph.outputs])
    root = Root(names, bindings, dict(fixed))
    top = root.graph = OnnxGraph(root)
    for name, v in graph.inputs.items():
        top.bind(v, name)
    for name, p in graph.params.items():
        top.bind(p.value, stored[name])
    for op in graph.body.ops:
        try:
            top.emit(op)
        except NoOnnx as exc:
            raise MdlError(f"cannot export `{op.prim}` to ONNX: {exc}", op.loc) from None
    if rnn_ops:
        fuse_rnn_loops(top, {top.name_of(v) for v in graph.outputs.values()})
    outs = []
    for name, v in graph.outputs.items():
        made = top.name_of(v)
        top.nodes.append(helper.make_node("Identity", [made], [name], name=name))
        outs.append(helper.make_tensor_value_info(name, element(v.type.dtype),
                                                  _shape(v.type.shape, fixed)))
    nodes = live(top.nodes, graph.outputs)
    used = reads(nodes)  # a parameter only dead nodes read is left out too
    initializers = [numpy_helper.from_array(np.array(params[name], order="C"), stored[name])
                    for name in graph.params if stored[name] in used]
    onnx_inputs = [helper.make_tensor_value_info(name, element(v.type.dtype),
                                                 _shape(v.type.shape, fixed))
                   for name, v in inputs.items()]
    body = helper.make_graph(nodes, graph.name, onnx_inputs, outs, initializers,
                             doc_string=doc)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(body, opset_imports=opsets, producer_name="mdl",
                              doc_string=doc)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    hparams = ", ".join(f"{k}={v}" for k, v in graph.hparams.items())
    helper.set_model_props(model, {"mdl.model": graph.name, "mdl.hparams": hparams})
    return model


def _symbol(d: Dim):
    """The one symbol a dim is (T), else None (a constant, or T*B)."""
    if len(d.terms) == 1 and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1:
        return d.terms[0][0][0]
    return None


def _shape(shape, fixed: dict) -> list:
    """An ONNX shape: sizes, dim_params for symbols, unknown (None) for expressions."""
    out = []
    for d in shape:
        d = d.substitute(fixed) if fixed else d
        symbol = _symbol(d)
        out.append(d.value if d.is_const else str(symbol) if symbol is not None else None)
    return out
