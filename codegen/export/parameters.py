"""The parameter values an exported model carries: a checkpoint's, a model instance's,
a dict's, or those `Model(seed=...)` starts from, computed here in NumPy the way the
runtime computes them (cpp_runtime/mdl/init.h: parameter k of the model's list drawn from
the counter-based stream derive(seed, k) of codegen/ops/rng.py)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..ir.diagnostics import UsageError
from ..ir.graph import Graph
from ..ir.npz import read_npz
from ..ir.weights import host_values
from ..ops.rng import derive, uniform01


def initial_values(graph: Graph, seed: int, dtype) -> dict[str, np.ndarray]:
    """Every parameter as a fresh `Model(seed=seed)` of a native module holds it."""
    return {name: _initialize(p.init.kind, list(p.init.args) + [0.0, 0.0],
                              tuple(d.value for d in p.value.type.shape), seed, k, dtype)
            for k, (name, p) in enumerate(graph.params.items())}


def _initialize(kind: str, args: list, shape: tuple, seed: int, k: int, dtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    key = derive(seed, k)
    counters = np.arange(n, dtype=np.uint64)
    if kind in ("zeros", "ones", "constant"):
        value = {"zeros": 0.0, "ones": 1.0}.get(kind, args[0])
        return np.full(shape, value, dtype)
    if kind in ("uniform", "xavier"):
        lo, hi = args[0], args[1]
        if kind == "xavier":
            fan_out = shape[-1]
            hi = np.sqrt(6.0 / (n / fan_out + fan_out))
            lo = -hi
        return (lo + (hi - lo) * uniform01(key, counters)).astype(dtype).reshape(shape)
    if kind in ("normal", "orthogonal"):
        mean, std = (args[0], args[1]) if kind == "normal" else (0.0, 1.0)
        u1, u2 = uniform01(key, 2 * counters), uniform01(key, 2 * counters + 1)
        w = (mean + std * (np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(6.283185307179586 * u2)))
        w = w.astype(dtype)
        if kind == "orthogonal":
            w = _orthogonalize(w.reshape(n // shape[-1], shape[-1]))
        return w.reshape(shape)
    raise ValueError(f"unknown initializer `{kind}`")


def _orthogonalize(w: np.ndarray) -> np.ndarray:
    """Rows (or columns, whichever are fewer) made orthonormal by modified Gram-Schmidt,
    in the weights' own dtype with sums in double, as init.h does."""
    rows, cols = w.shape
    vectors = w if rows <= cols else w.T.copy()
    t = w.dtype.type
    for v in range(vectors.shape[0]):
        for u in range(v):
            dot = float(np.dot(vectors[v].astype(np.float64), vectors[u].astype(np.float64)))
            vectors[v] -= (dot * vectors[u].astype(np.float64)).astype(t)
        norm = np.sqrt(float(np.dot(vectors[v].astype(np.float64),
                                    vectors[v].astype(np.float64))))
        if norm == 0:
            raise ValueError("orthogonal initialization met a degenerate matrix")
        vectors[v] = (vectors[v].astype(np.float64) / norm).astype(t)
    return vectors if rows <= cols else vectors.T.copy()


def parameter_values(graph: Graph, params, seed: int, dtype) -> dict[str, np.ndarray]:
    """The values to export: `params` a checkpoint file (`model.save`), a model instance
    (its current parameters), a {name: array} mapping, or None (the initial values of
    `seed`). Every parameter of `graph` must be there with its shape: a checkpoint of
    another model fits where the names and shapes do (CharLM's for CharLMStep)."""
    if params is None:
        return initial_values(graph, seed, dtype)
    if isinstance(params, (str, os.PathLike)):
        source, values = str(params), _checkpoint(Path(params))
    elif isinstance(params, Mapping):
        source, values = "the given dict", dict(params)
    elif isinstance(getattr(params, "params", None), Mapping):
        source, values = f"the {type(params).__name__} instance", dict(params.params)
    else:
        raise UsageError(f"params: expected a checkpoint file, a model instance or a "
                         f"{{name: array}} dict, got {type(params).__name__}")
    out = {}
    for name, p in graph.params.items():
        if name not in values:
            raise UsageError(f"{source} has no parameter `{name}` (model `{graph.name}` "
                             f"needs it; it has {', '.join(sorted(map(str, values))) or 'none'})")
        array = _numbers(source, name, values[name])
        if array.dtype.kind not in "biuf":  # complex, strings, objects
            raise UsageError(f"{source}: parameter `{name}` holds {array.dtype} values, "
                             f"model `{graph.name}` needs real numbers")
        shape = tuple(d.value for d in p.value.type.shape)
        if array.shape != shape:
            raise UsageError(f"{source}: parameter `{name}` has shape {list(array.shape)}, "
                             f"model `{graph.name}` needs {list(shape)}")
        if array.dtype.kind == "f" and np.dtype(dtype).kind == "f":
            largest = float(np.finfo(dtype).max)
            past = np.isfinite(array) & (np.abs(array) > largest)
            if past.any():  # set_params refuses them; astype made inf, with NumPy's warning
                k = int(np.flatnonzero(past)[0])
                raise UsageError(f"{source}: parameter `{name}` holds {array.flat[k]:.6g} "
                                 f"(element {k}), past the range of the export's "
                                 f"{np.dtype(dtype).name} (its largest number is "
                                 f"{largest:.2g})")
        out[name] = array.astype(dtype)
    return out


def _numbers(source: str, name: str, value) -> np.ndarray:
    """A parameter's values as an array: a torch tensor's detached (bfloat16 widened to
    float32, exactly: NumPy has no such type), anything NumPy cannot read a UsageError
    naming the parameter, not torch's or NumPy's words."""
    try:
        return host_values(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise UsageError(f"{source}: parameter `{name}` is not an array of numbers "
                         f"({exc})") from None


def _checkpoint(path: Path) -> dict[str, np.ndarray]:
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, not a checkpoint file (an .npz `save` "
                         f"wrote)")
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint file")
    data = read_npz(path, "a checkpoint written by `save` (an .npz)")
    params = {k[len("param/"):]: v for k, v in data.items() if k.startswith("param/")}
    if data and not params:  # np.savez(**model.params): "it has none" named no cause
        names = sorted(data)
        shown = ", ".join(names[:4]) + (f", ... ({len(names)} arrays)" if len(names) > 4 else "")
        raise UsageError(f"{path}: not a checkpoint written by `save`: none of its arrays is "
                         f"a parameter's `param/NAME` (it holds {shown}); write one with "
                         "model.save(path), or give export_onnx the dict itself "
                         "(params=dict(np.load(path)))")
    return params
