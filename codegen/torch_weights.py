"""A PyTorch model's weights under mdl's parameter names, and back.

`params_from_torch({name: module})` reads torch modules into `{full name: array}` for a
model's `set_params`; `params_to_torch(params, {name: module})` writes a model's
parameters into those modules. A key is a scope for a module that std/rnn.mdl computes
(`nn.Linear` as `linear`, `nn.LSTMCell` or a layer of `nn.LSTM` as `lstm`, `nn.GRUCell`
or a layer of `nn.GRU` as `gru`, `nn.LayerNorm` as `layer_norm`), and a full parameter
name for an `nn.Embedding` or a tensor. PyTorch multiplies `x @ weight.T`, mdl `x @ W`:
W is weight transposed. An LSTM's two biases are one in std's `lstm` (their sum; written
back, all of it goes to `bias_ih` and `bias_hh` becomes 0). Without PyTorch, importing
this module raises an ImportError saying how to install it."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .ir.weights import host_values

try:
    import torch
    from torch.nn.utils import parametrize, prune
    from torch.nn.utils.spectral_norm import SpectralNorm
    from torch.nn.utils.weight_norm import WeightNorm
except ImportError:  # pragma: no cover - depends on the environment
    raise ImportError("codegen.torch_weights reads and writes PyTorch modules: install "
                      "PyTorch (pip install 'mdl[torch]', or torch==2.13.0)") from None

__all__ = ["Layer", "params_from_torch", "params_to_torch"]


@dataclass(frozen=True)
class Layer:
    """Layer `index` of an `nn.LSTM` or `nn.GRU`, its reverse direction if `reverse`
    (of a bidirectional one): one std `lstm` or `gru` cell."""
    module: torch.nn.Module
    index: int = 0
    reverse: bool = False

    def __post_init__(self):
        # an nn.RNN's weights came out under gru's names; Layer(lstm, True) was layer 1
        if not isinstance(self.module, (torch.nn.LSTM, torch.nn.GRU)):
            raise TypeError(f"Layer takes an nn.LSTM or an nn.GRU, got "
                            f"{type(self.module).__name__} (a cell, nn.Linear and the "
                            "others are mapped as they are)")
        if isinstance(self.index, bool) or not isinstance(self.index, int):
            raise TypeError(f"Layer's index takes an int, got {self.index!r}")
        if not isinstance(self.reverse, bool):
            raise TypeError(f"Layer's reverse takes True or False, got {self.reverse!r}")


@dataclass(frozen=True)
class _Part:
    name: str                                  # the mdl parameter's full name
    read: Callable[[], np.ndarray]
    split: Callable[[np.ndarray], tuple[np.ndarray, ...]]  # the values of each of `tensors`
    tensors: tuple[torch.Tensor, ...]          # what a write changes
    transposed: bool = False                   # read as tensors[0].T (x @ W, not x @ W.T)
    computed: str = ""                         # why a write is refused: torch computes it


def params_from_torch(mapping: dict[str, Any]) -> dict[str, np.ndarray]:
    """{full mdl name: array} of every module in `mapping` (key: its mdl scope, or the
    full name of an embedding's or a tensor's parameter), for `model.set_params`."""
    _names(mapping, "mapping", "{mdl scope or name: torch module or tensor}")
    return {p.name: p.read() for p in _all_parts(mapping)}


def params_to_torch(params: dict[str, Any], mapping: dict[str, Any]) -> None:
    """Copy mdl parameters (`model.params`, or a checkpoint's arrays) into the modules of
    `mapping`, as `params_from_torch` names them. Every name, shape and value is checked,
    and a tensor torch computes from others (under a parametrization, weight_norm or
    pruning) refused, before any module changes; a tensor that cannot be written (one made
    in inference mode, an expanded one) leaves every module as it was."""
    _names(params, "params", "{full name: array}, as model.params")
    _names(mapping, "mapping", "{mdl scope or name: torch module or tensor}")
    parts = _all_parts(mapping)
    missing = [p.name for p in parts if p.name not in params]
    if missing:
        raise KeyError(f"no parameter {', '.join(missing)} among the model's "
                       f"({', '.join(sorted(params))}){_other_layout(missing, params, mapping)}")
    values = {p.name: _numbers(p.name, params[p.name]) for p in parts}
    for p in parts:
        want, got = p.read().shape, values[p.name].shape
        if want != got:  # torch's tensor [4H, I] wanted [I, 4H] of mdl's W
            torch_shape = (f" (its torch tensor is {list(p.tensors[0].shape)}, read "
                           "transposed)" if p.transposed else "")
            raise ValueError(f"parameter {p.name} is {list(got)}, its torch module's "
                             f"weight wants {list(want)}{torch_shape}")
    for p in parts:
        if p.computed:
            raise ValueError(f"parameter {p.name}: {p.computed}")
        _fits(p, values[p.name])
    _write(parts, values)


def _write(parts: list[_Part], values: dict[str, np.ndarray]) -> None:
    """Each part's values into its tensors, a tensor at a time: when torch refuses one,
    every tensor written before it is put back (an LSTM's bias is two tensors, and a
    bias_hh refusing left its bias_ih written)."""
    writes = [(p, t, a) for p in parts for t, a in zip(p.tensors, p.split(values[p.name]))]
    written: list[tuple[torch.Tensor, torch.Tensor]] = []  # (tensor, its values before)
    with torch.no_grad():
        for p, t, a in writes:
            before = t.detach().clone()
            try:  # a cuda model's params are read-only copies, which torch.as_tensor warns of
                t.copy_(torch.as_tensor(a if a.flags.writeable else a.copy(), dtype=t.dtype))
            except RuntimeError as exc:  # torch's: the tensor refuses in-place writes
                for changed, saved in reversed(written):  # put back, the last written first
                    changed.copy_(saved)
                raise RuntimeError(f"parameter {p.name}: its torch tensor cannot be "
                                   f"written ({exc}); no module was changed") from None
            written.append((t, before))


def _all_parts(mapping: Mapping[str, Any]) -> list[_Part]:
    """The parameters `mapping` names, each of torch tensors that hold values (a module
    on the meta device gave torch's "Cannot copy out of meta tensor", naming none)."""
    parts = [p for key, value in mapping.items() for p in _parts(key, value)]
    for key, value in mapping.items():  # the forward is the same, the training not
        if isinstance(value, torch.nn.Embedding) and value.scale_grad_by_freq:
            warnings.warn(f"{key!r}: an nn.Embedding with scale_grad_by_freq divides a row's "
                          "gradient by how often the batch reads it; mdl's `table[ids]` "
                          "does not, so training differs from PyTorch's", stacklevel=3)
        if isinstance(value, torch.nn.Embedding) and value.padding_idx is not None:
            warnings.warn(f"{key!r}: an nn.Embedding with padding_idx={value.padding_idx} "
                          "gives that row no gradient; mdl's `table[ids]` trains every row "
                          "it reads (a loop's `lengths` leave padded steps out), so training "
                          "differs from PyTorch's where the padding id is read",
                          stacklevel=3)
    for p in parts:
        if any(t.is_meta for t in p.tensors):
            raise ValueError(f"parameter {p.name}: its torch tensor is on the meta device, "
                             "with a shape and no values (to_empty() and an initialization "
                             "give it some)")
    return parts


# std/rnn.mdl's layers by the names under their scope, and the torch modules of each
_LAYOUTS = {frozenset({"W", "U", "b"}): ("lstm", "an nn.LSTMCell or a layer of nn.LSTM"),
            frozenset({"W", "U", "bW", "bU"}): ("gru", "an nn.GRUCell or a layer of nn.GRU"),
            frozenset({"W", "b"}): ("linear", "an nn.Linear"),
            frozenset({"gamma", "beta"}): ("layer_norm", "an nn.LayerNorm")}


def _other_layout(missing: list[str], params: Mapping[str, Any],
                  mapping: Mapping[str, Any]) -> str:
    """What the model's parameters under a mapped scope are, where they are another std
    layer's than the module mapped to it (an nn.LSTMCell mapped to a `gru`'s scope said
    only "no parameter gru/b")."""
    for key, value in mapping.items():
        if not any(name.startswith(f"{key}/") for name in missing):
            continue
        under = sorted(name[len(key) + 1:] for name in params
                       if name.startswith(f"{key}/") and "/" not in name[len(key) + 1:])
        layout = _LAYOUTS.get(frozenset(under))
        if layout is not None:
            kind, modules = layout
            given = type(value.module if isinstance(value, Layer) else value).__name__
            return (f": the model's {key} is std's {kind} ({', '.join(under)}), mapped to "
                    f"an nn.{given}; map {modules} to it")
    return ""


def _fits(part: _Part, values: np.ndarray) -> None:
    """Values an integer or bool tensor cannot hold are refused first: torch truncated
    fractions (1.7 written as 1) and wrapped values past the range (300 into int8 as 44,
    2 into bool as True)."""
    for t, a in zip(part.tensors, part.split(values)):
        if t.dtype.is_floating_point or t.dtype.is_complex:
            continue
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise ValueError(f"parameter {part.name} holds NaN or infinity, and its torch "
                             f"tensor is {t.dtype}, which holds neither")
        if a.dtype.kind == "f" and not np.all(np.mod(a, 1) == 0):
            raise ValueError(f"parameter {part.name} holds fractions, and its torch tensor "
                             f"is {t.dtype}: it would be truncated")
        low, high = (0, 1) if t.dtype == torch.bool else (torch.iinfo(t.dtype).min,
                                                          torch.iinfo(t.dtype).max)
        # `high + 1`: in float64 int64's high rounds up to 2**63, which int64 has not
        outside = (a < low) | (a >= high + 1)
        if np.any(outside):
            holds, becomes = (("only 0 and 1", "be True") if t.dtype == torch.bool else
                              (f"{low} to {high}", "wrap around"))
            raise ValueError(f"parameter {part.name} holds {a[outside].flat[0]}, and its "
                             f"torch tensor is {t.dtype}, which holds {holds}: it would "
                             f"{becomes}")


def _names(mapping: Any, what: str, takes: str) -> None:
    if not isinstance(mapping, Mapping) or not all(isinstance(k, str) for k in mapping):
        raise TypeError(f"{what} takes a dict {takes}, got {type(mapping).__name__}"
                        + (" with a key that is no str" if isinstance(mapping, Mapping) else ""))


def _numbers(name: str, value: Any) -> np.ndarray:
    """A parameter's values as an array of real numbers, checked before any module changes
    (a str array failed in torch after other modules were written; complex lost its
    imaginary part)."""
    try:
        array = host_values(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"parameter {name}: not an array of numbers ({exc})") from None
    if array.dtype.kind not in "fiu":
        raise TypeError(f"parameter {name} holds {array.dtype.name} values; a weight takes "
                        "real numbers")
    return array


# ---- the layouts ------------------------------------------------------------------------
def _array(t: torch.Tensor) -> np.ndarray:
    """A copy of a weight's values (host_values: bfloat16 widened to float32)."""
    return host_values(t).copy()


def _tensor_part(name: str, t: torch.Tensor, transposed: bool = False,
                 module: torch.nn.Module | None = None, attr: str = "") -> _Part:
    return _Part(name, lambda: _array(t.T if transposed else t),
                 lambda a: (a.T if transposed else a,), (t,), transposed,
                 _computed(t, module, attr))


def _module_part(name: str, module: torch.nn.Module, attr: str,
                 transposed: bool = False) -> _Part:
    """The module's tensor `attr`, which the module tells a parametrization or a hook
    computes (under no_grad, or frozen, the tensor itself does not)."""
    return _tensor_part(name, getattr(module, attr), transposed, module, attr)


# torch's forward pre-hooks that compute a module's tensor from others, anew at each
# forward: the hook's class, its attribute naming the tensor, what it is, what removes it
_HOOKS = ((WeightNorm, "name", "weight_norm", "torch.nn.utils.remove_weight_norm"),
          (SpectralNorm, "name", "spectral_norm", "torch.nn.utils.remove_spectral_norm"),
          (prune.BasePruningMethod, "_tensor_name", "pruning", "torch.nn.utils.prune.remove"))


def _computed(t: torch.Tensor, module: torch.nn.Module | None = None, attr: str = "") -> str:
    """Why params_to_torch refuses to write `t`, which torch computes from other tensors
    (a parametrization at each access, weight_norm and pruning at each forward); "" for
    a tensor that holds its values (a parameter, or a view of one). Written, a computed
    tensor changed no module, and params_to_torch returned as if it had."""
    hooks = module._forward_pre_hooks.values() if module is not None else ()
    found = [(what, remove) for kind, key, what, remove in _HOOKS for hook in hooks
             if isinstance(hook, kind) and getattr(hook, key) == attr]
    base = t._base if t._is_view() else t
    if module is not None and parametrize.is_parametrized(module, attr):
        how, remove = "a parametrization", "torch.nn.utils.parametrize.remove_parametrizations"
    elif found:
        how, remove = found[0]
    elif base.grad_fn is not None:
        return (f"torch computes its tensor from others ({base.grad_fn.name()}), so a "
                "write would not reach them: map a tensor that holds its values (a "
                "parameter, or a view of one)")
    else:
        return ""
    return (f"torch computes its tensor from others ({how} of {attr!r}), so a write would "
            f"not reach the module: remove that first, {remove}(module, {attr!r})")


def _need_bias(module: torch.nn.Module, what: str) -> None:
    """std's layers have biases: a module without them (`bias` None: a Linear's; False:
    a cell's or an RNN's flag) has no layout there."""
    bias = getattr(module, "bias", None)
    if bias is None or bias is False:
        raise ValueError(f"{what} without a bias: std/rnn.mdl's has one (make it "
                         "bias=True, or write the layer without it in .mdl)")


def _linear(scope: str, m: torch.nn.Linear) -> list[_Part]:
    if m.bias is None:  # an attention's projection: a param of its own in .mdl
        raise ValueError(f"an nn.Linear without a bias: std/rnn.mdl's linear has one; write "
                         f"it as a param (`param W : f32[{m.in_features}, {m.out_features}]`, "
                         "`x @ W`) and map that name to the module's `weight.T`, a tensor "
                         "copied as it is (docs/from_pytorch.md)")
    return [_module_part(f"{scope}/W", m, "weight", transposed=True),
            _module_part(f"{scope}/b", m, "bias")]


_CELL_WEIGHTS = (("ih", "weight_ih"), ("hh", "weight_hh"), ("bias_ih", "bias_ih"),
                 ("bias_hh", "bias_hh"))


def _cell_weights(value: Any) -> tuple[str, torch.nn.Module, dict[str, str]]:
    """('lstm' or 'gru', the module, the names of its {ih, hh, bias_ih, bias_hh}) of a
    cell or of one layer."""
    if isinstance(value, (torch.nn.LSTMCell, torch.nn.GRUCell)):
        kind = "lstm" if isinstance(value, torch.nn.LSTMCell) else "gru"
        _need_bias(value, f"an nn.{type(value).__name__}")
        return kind, value, dict(_CELL_WEIGHTS)
    layer = value if isinstance(value, Layer) else Layer(value)
    m = layer.module
    kind = "lstm" if isinstance(m, torch.nn.LSTM) else "gru"
    _need_bias(m, f"an nn.{type(m).__name__}")
    if getattr(m, "proj_size", 0):
        raise ValueError("an nn.LSTM with proj_size: std/rnn.mdl's lstm has no projection")
    if not 0 <= layer.index < m.num_layers or (layer.reverse and not m.bidirectional):
        raise ValueError(f"the nn.{type(m).__name__} has {m.num_layers} layer(s)"
                         f"{', both directions' if m.bidirectional else ', one direction'}:"
                         f" no layer {layer.index}{' reversed' if layer.reverse else ''}")
    if not isinstance(value, Layer) and (m.num_layers > 1 or m.bidirectional):
        raise ValueError(f"an nn.{type(m).__name__} of {m.num_layers} layer(s)"
                         f"{' in both directions' if m.bidirectional else ''} is several "
                         "std cells: map each one's scope to Layer(module, index, reverse)")
    suffix = f"_l{layer.index}" + ("_reverse" if layer.reverse else "")
    return kind, m, {k: f"{w}{suffix}" for k, w in _CELL_WEIGHTS}


def _cell(scope: str, value: Any) -> list[_Part]:
    kind, m, names = _cell_weights(value)
    weights = [_module_part(f"{scope}/W", m, names["ih"], transposed=True),
               _module_part(f"{scope}/U", m, names["hh"], transposed=True)]
    if kind == "gru":
        return weights + [_module_part(f"{scope}/bW", m, names["bias_ih"]),
                          _module_part(f"{scope}/bU", m, names["bias_hh"])]
    ih, hh = (_module_part(f"{scope}/b", m, names[k]) for k in ("bias_ih", "bias_hh"))
    return weights + [_Part(f"{scope}/b", lambda: _array(ih.tensors[0] + hh.tensors[0]),
                            lambda a: (a, np.zeros_like(a)), ih.tensors + hh.tensors,
                            computed=ih.computed or hh.computed)]


def _layer_norm(scope: str, m: torch.nn.LayerNorm) -> list[_Part]:
    if len(m.normalized_shape) != 1 or m.weight is None or m.bias is None:
        missing = [what for what, t in (("a weight", m.weight), ("a bias", m.bias)) if t is None]
        lacks = {0: "", 1: f", without {''.join(missing)}", 2: ", without weight and bias"}
        raise ValueError("an nn.LayerNorm over one dim with weight and bias is std's "
                         f"layer_norm; this one is over {list(m.normalized_shape)}"
                         f"{lacks[len(missing)]}")
    return [_module_part(f"{scope}/gamma", m, "weight"), _module_part(f"{scope}/beta", m, "bias")]


def _parts(key: str, value: Any) -> list[_Part]:
    if isinstance(value, torch.nn.Linear):
        return _linear(key, value)
    if isinstance(value, (torch.nn.LSTMCell, torch.nn.GRUCell, torch.nn.LSTM, torch.nn.GRU,
                          Layer)):
        return _cell(key, value)
    if isinstance(value, torch.nn.LayerNorm):
        return _layer_norm(key, value)
    if isinstance(value, torch.nn.Embedding):
        if value.max_norm is not None:  # its forward rescales rows: the outputs differed
            raise ValueError(f"{key!r}: an nn.Embedding with max_norm rescales the rows it "
                             "reads (and its weight); mdl's `table[ids]` reads them as "
                             "they are: give one with max_norm=None")
        return [_module_part(key, value, "weight")]
    if isinstance(value, torch.Tensor):
        return [_tensor_part(key, value)]
    raise TypeError(f"{key!r}: no mdl layout for {type(value).__name__} (a Linear, "
                    "LSTMCell, GRUCell, LSTM or GRU layer, LayerNorm, Embedding or a tensor)")
