"""Export to ONNX (`mdlc export FILE --onnx OUT.onnx`, `codegen.export_onnx`): a model's
inference program as an ONNX graph that onnxruntime, TensorRT or OpenVINO run and netron
shows (docs/onnx.md). Needs the `onnx` extra: `pip install "mdl[onnx]"`."""
from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dsl.imports import not_the_source

from ..ir.diagnostics import Diagnostic, UsageError, writing
from ..ir.dtypes import checked_seed

PEER = 'the `onnx` package: pip install "mdl[onnx]" (or pip install onnx)'

# The most weights one .onnx file holds: protobuf refuses a message of 2 GiB (a model of
# 2.5 GiB failed in serialization after a minute and 20 GB of memory), less room for the
# graph itself
ONNX_FILE_LIMIT = 2**31 - 2**26


def export_onnx(path: str | Path, out: str | Path, *, model: str | None = None,
                params: Any = None, defines: dict[str, Any] | None = None,
                specialize: dict[str, int] | None = None, opset: int | None = None,
                outputs: list[str] | None = None, dtype: str = "f32", seed: int = 0,
                rnn_ops: bool = True, warn: Callable[[Diagnostic], None] | None = None) -> Path:
    """Write the ONNX model of `model` (of the .mdl file `path`) to `out`; its path.

    params: a checkpoint file (`model.save`), a model instance (its current parameters),
        a {name: array} dict, or None: the values `Model(seed=seed)` starts from.
    specialize: dims fixed in the graph ({"B": 1}); the others stay symbolic (dim_params).
    outputs: the outputs to compute (default: all of them); inputs only they need are left
        out of the graph.
    opset: the ONNX opset (default 18, the lowest mdl writes).
    rnn_ops: a `for` whose body is one step of an LSTM or GRU (std/rnn.mdl's `lstm`,
        `gru`) as ONNX's `LSTM` or `GRU` node (f32 only); False: every `for` a `Loop`.
    warn: where the checker's warnings of the file go.
    Raises MdlError (an op without a faithful ONNX form, at its line) or UsageError."""
    onnx = _onnx()
    from .onnx_model import DEFAULT_OPSET, inference_graph, to_onnx

    _paths(path=path, out=out)
    if not isinstance(rnn_ops, bool):  # "no" would be true
        raise UsageError(f"rnn_ops: expected True or False, got {rnn_ops!r}")
    opset = DEFAULT_OPSET if opset is None else _integer("opset", opset)
    if outputs is not None and (isinstance(outputs, str) or not outputs or not all(
            isinstance(k, str) and k for k in outputs)):  # [] would read as "all"
        raise UsageError(f"outputs: expected a list of output names (None: all of them), "
                         f"got {outputs!r}")
    not_the_source(out, path, "out", params)  # before a minute of export, not after
    newest = onnx.defs.onnx_opset_version()
    if not DEFAULT_OPSET <= opset <= newest:
        raise UsageError(f"opset {opset} is outside [{DEFAULT_OPSET}, {newest}]: mdl writes "
                         f"opset {DEFAULT_OPSET} or later, and the installed onnx knows up "
                         f"to {newest}")
    graph, values, fixed = _model(path, model, params, defines, specialize, dtype, seed, warn)
    unknown = [k for k in outputs or [] if k not in graph.outputs]
    if unknown:
        raise UsageError(f"model `{graph.name}` has no output {', '.join(unknown)} (its "
                         f"outputs: {', '.join(graph.outputs)})")
    if not graph.outputs:
        raise UsageError(f"model `{graph.name}` has no outputs: an ONNX graph computes at "
                         "least one")
    ready = inference_graph(graph, outputs)
    made = to_onnx(ready, values, fixed, opset,
                   doc=f"model {graph.name} of {Path(path).name}, exported by mdlc",
                   rnn_ops=rnn_ops)
    onnx.checker.check_model(made, full_check=True)
    out = Path(out)
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(made, str(out))
    return out


def verify_onnx(path: str | Path, exported: str | Path, *, runtimes=("onnxruntime",),
                model: str | None = None, params: Any = None,
                defines: dict[str, Any] | None = None,
                specialize: dict[str, int] | None = None, dtype: str = "f32",
                seed: int = 0) -> list:
    """Run the file `exported` (written by export_onnx with these arguments) in each of
    `runtimes` ("onnxruntime", "openvino", "onnx-reference": onnx's reference evaluator)
    on random inputs, three calls in turn, and compare it with mdl's reference
    interpreter; a Verdict each (`.agrees`, `str()` says what was found)."""
    _onnx()
    from .verify import compare
    if isinstance(runtimes, str) or not isinstance(runtimes, (list, tuple)) or not runtimes \
            or not all(isinstance(r, str) for r in runtimes):  # [] would check nothing
        raise UsageError(f"runtimes: expected a list of runtime names, such as "
                         f"['onnxruntime'], got {runtimes!r}")
    _paths(path=path, exported=exported)
    graph, values, fixed = _model(path, model, params, defines, specialize, dtype, seed)
    return compare(exported, graph, values, fixed, list(runtimes), dtype, seed)


def _paths(**paths: Any) -> None:
    for what, value in paths.items():
        if not isinstance(value, (str, os.PathLike)):
            raise UsageError(f"{what}: expected a file's path, got {type(value).__name__}")


def _integer(what: str, value: Any) -> int:
    """`value`, an int argument (not a bool, a float or a string), or a UsageError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise UsageError(f"{what}: expected an int, got {type(value).__name__} {value!r}")
    return int(value)


def _onnx():
    try:
        import onnx
    except ImportError:
        raise UsageError(f"exporting to ONNX needs {PEER}") from None
    return onnx


def _model(path, model, params, defines, specialize, dtype, seed, warn=None):
    """(the checked graph of `model`, its parameters' values, the fixed dims)."""
    try:  # a NumPy integer as the int it is (derive's C long overflowed on np.int64)
        seed = int(checked_seed(_integer("seed", seed)))
    except ValueError as bad:
        raise UsageError(f"seed: {bad}") from None
    from ..compile.options import BuildOptions
    from ..pipeline import check
    from .parameters import parameter_values
    if specialize is not None and not (isinstance(specialize, dict) and all(
            isinstance(k, str) and isinstance(v, numbers.Integral) and not isinstance(v, bool)
            for k, v in specialize.items())):
        raise UsageError(f"specialize: expected a dict {{dim name: int size}} such as "
                         f"{{'B': 1}}, got {specialize!r}")
    fixed = {k: int(v) for k, v in (specialize or {}).items()}  # np.int64(1) as 1
    graphs = check(path, BuildOptions(dtype=dtype, defines=dict(defines or {}), model=model,
                                      specialize=[fixed] if fixed else []), warn)
    if len(graphs) > 1:
        raise UsageError(f"{path} defines several models ({', '.join(g.name for g in graphs)});"
                         " choose one with --model NAME")
    graph = graphs[0]
    # before the weights are drawn: 2.1 GiB of them took a minute and 18 GB of memory
    size = np.dtype(np.float32 if dtype == "f32" else np.float64).itemsize
    weights = sum(math.prod(d.value for d in p.value.type.shape) * size
                  for p in graph.params.values())
    if weights >= ONNX_FILE_LIMIT:
        raise UsageError(f"model `{graph.name}`'s parameters take {weights / 2**30:.1f} GiB, "
                         f"more than the 2 GiB one ONNX file holds (protobuf's limit); mdlc "
                         "does not write the weights to files beside it: export smaller sizes")
    values = parameter_values(graph, params, seed, np.float32 if dtype == "f32"
                              else np.float64)
    return graph, values, fixed
