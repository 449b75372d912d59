"""The PyTorch bridge: a compiled model as a `torch.nn.Module`, so that a native recurrent
core sits inside a larger PyTorch model and trains with torch's optimizers.

    from codegen import load
    from codegen.pytorch import as_module
    core = as_module(load("core.mdl", vjp=True).Core(seed=0))
    hs = core(xs=embedding(tokens))          # the float outputs, as tensors
    loss_of(hs).backward()                   # gradients land in core's parameters' .grad
    torch.optim.Adam(model.parameters()).step()   # updates the native weights in place

The module's parameters are the model's own memory (torch.from_numpy over the views of
`model.params`; on the cuda target torch.from_dlpack over `model.device_params`, in the
GPU's memory), so an optimizer's update is what the next native forward sees. Its
forward is an autograd Function calling the native training forward, and its backward
the native vector-Jacobian product, which a build with `vjp` has: the backward takes
torch's cotangent of every float output. Tensors cross without copies where their layout
is the model's (contiguous, on the model's device, of its dtype): a cuda model's outputs
and gradients stay on the GPU (`outputs_on_device`). PyTorch stays optional: without it,
importing this module raises an ImportError saying how to install it.
"""
from __future__ import annotations

import functools
import operator
import threading
import weakref
from collections import namedtuple
from typing import Any

import numpy as np

from .models import check_model

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    raise ImportError("codegen.pytorch puts compiled models inside PyTorch models: install "
                      "PyTorch (pip install 'mdl[torch]', or torch==2.13.0)") from None

__all__ = ["CompiledModule", "as_module"]

# A model keeps the saved values of its latest training forward only; its count of them
# (`_training_forwards`, which every training forward begun or refused moves on) tells a
# backward whether they are still its call's or it must replay that forward. (The count
# was rng_calls, which a refused call does not move and a caller may set back: the
# backward then ran on another call's values, or raised.)

# Per model: a lock held from a training forward's call to its count, and from a
# backward's look at the count through its replay and vjp. The native calls each take the
# model's own lock, but not the three steps as one: another thread's training forward
# landing between the look and the vjp gave the vjp that forward's saved values (wrong
# gradients, silently).
_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


def _lock(model: Any) -> threading.Lock:
    with _LOCKS_LOCK:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = threading.Lock()
        return lock


# A copied module's copied nn.Parameter (by id, with a weak reference to it: tensors
# compare element by element): the model of the first module copied with it
# (CompiledModule._tie_again).
_COPIED: dict[int, tuple[weakref.ref, Any]] = {}


def _copied_by(copied: torch.Tensor) -> Any:
    entry = _COPIED.get(id(copied))
    return entry[1] if entry is not None and entry[0]() is copied else None


def _note_copied(copied: torch.Tensor, model: Any) -> None:
    if _copied_by(copied) is None:
        key = id(copied)
        _COPIED[key] = (weakref.ref(copied, lambda _: _COPIED.pop(key, None)), model)

# The nn.Parameter over each piece of native memory that one lives over: models sharing
# parameters (`params=`), or one model wrapped twice, get the same Parameter, so a torch
# optimizer steps it once (two Parameters over one memory were stepped twice) and an
# in-place step bumps the version every call that saved it checks.
_PARAMETERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _parameter(tensor: torch.Tensor, requires_grad: bool) -> torch.nn.Parameter:
    return _over(_PARAMETERS, tensor,
                 lambda: torch.nn.Parameter(tensor, requires_grad=requires_grad))


# The same for frozen parameters (buffers): one tensor a memory, so that copies, which copy
# a tensor once however many modules hold it, tie their models again (_tie_again)
_BUFFERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _buffer(tensor: torch.Tensor) -> torch.Tensor:
    return _over(_BUFFERS, tensor, lambda: tensor)


def _over(table: weakref.WeakValueDictionary, tensor: torch.Tensor, make) -> torch.Tensor:
    """The tensor of `table` over `tensor`'s memory, made by `make()` the first time. One
    kept alive elsewhere (an optimizer's) after `.double()`, `.to()` or `.data = ` gave it
    other memory is no longer over this one: a new model's weight allocated where a freed
    model's lay got it, and with it another dtype and numbers."""
    key = _key(tensor)
    shared = table.get(key)
    if shared is None or _key(shared) != key:
        shared = table[key] = make()
    return shared


def _key(tensor: torch.Tensor) -> tuple:
    return (str(tensor.device), tensor.data_ptr(), tuple(tensor.shape), tensor.dtype)


def _penalize(parameter: torch.nn.Parameter, strength: tuple[float, float] | None,
              owner: str) -> None:
    """`parameter`'s scope regularizer (`strength`: l1, l2; None: none) joins its `.grad`
    once per backward that reaches it, as a penalty in the loss would: a hook after torch
    has summed the gradients of every call of every module over its memory (added in
    each call's backward, a core called twice in one graph had it twice). The modules over
    one memory (`owner`: the first one's model) must regularize it alike."""
    strength = strength or (0.0, 0.0)
    had = getattr(parameter, "_mdl_penalty", None)
    if had is None:
        parameter._mdl_penalty = (strength, owner)
        if strength != (0.0, 0.0):
            parameter.register_post_accumulate_grad_hook(_add_penalty)
    elif had[0] != strength:
        raise ValueError(f"{owner} shares its memory with {had[1]}, regularized "
                         f"{_said(strength)} here and {_said(had[0])} there: as one torch "
                         "Parameter it takes one penalty, so give both scopes the same "
                         "regularizer")


def _said(strength: tuple[float, float]) -> str:
    l1, l2 = strength
    return " + ".join([*([f"l1({l1})"] if l1 else []), *([f"l2({l2})"] if l2 else [])]) \
        or "by nothing"


def _add_penalty(parameter: torch.nn.Parameter) -> None:
    """`l2(x)`: x * w, `l1(x)`: x * sign(w), as mdl's own optimizer adds them."""
    l1, l2 = parameter._mdl_penalty[0]
    with torch.no_grad():
        weight = parameter.detach()
        parameter.grad.add_(l2 * weight + l1 * torch.sign(weight))


def as_module(model: Any) -> CompiledModule:
    """`model`, a compiled model built with vjp (`load(..., vjp=True)`, `mdlc build
    --vjp`), as a torch.nn.Module sharing its parameters' memory."""
    return CompiledModule(model)


class CompiledModule(torch.nn.Module):
    """A compiled model inside PyTorch. Its trainable parameters are nn.Parameters (and
    its frozen ones buffers) named as in `model.params`, over the model's own memory.
    `forward(*inputs, **inputs)` takes the declared inputs (positional ones in
    declaration order; tensors, NumPy arrays or `__dlpack__` objects; integer ones, such
    as token ids and lengths, are passed through) and returns the float outputs: the
    tensor when there is one, else a named tuple in declaration order. In training mode
    it runs the native training forward (dropout on) and gradients flow back through it;
    in eval mode the inference forward, which keeps nothing to differentiate."""

    def __init__(self, model: Any):
        super().__init__()
        check_model(model, "as_module")
        if not model.cotangents:
            raise ValueError(f"model {type(model).__name__}'s backward takes no gradients of "
                             "its outputs: it was built without vjp (build it with "
                             "load(..., vjp=True) or mdlc build --vjp), or it has no float "
                             "output to differentiate")
        self.model = model
        self.input_names = list(model.inputs)
        self.output_names = list(model.cotangents)
        self._outputs = self._output_tuple()
        self._on_device = model.device != "cpu"
        if self._on_device:  # its outputs as tensors where they are
            model.outputs_on_device = True
        self._bind_weights()

    def _bind_weights(self) -> None:
        """The parameters and buffers as tensors over the model's memory (no copy). Those
        there were (a pickled or deep-copied module's copies of another model's weights)
        give way, handing on `requires_grad` (their `.grad` is gone, as torch's copies'
        is)."""
        self._native: dict[str, tuple[int, tuple[int, ...]]] = {}
        weights = _weights(self.model)
        trainable = self.model.gradient_layout
        self._trainable = [name for name in weights if name in trainable]
        penalties = self.model._regularizers
        for name, array in weights.items():
            if name not in self._parameters and name not in self._buffers \
                    and hasattr(self, name):  # torch's KeyError "attribute ... exists"
                raise ValueError(f"model {type(self.model).__name__}'s parameter `{name}` is "
                                 "named as an attribute of torch.nn.Module, so as_module "
                                 "cannot make it one of the module's: rename it, or declare "
                                 "it in a scope (its name then holds a `/`)")
            tensor = _tensor(array)
            self._native[name] = (tensor.data_ptr(), tuple(tensor.shape))
            if name not in trainable:
                self.register_buffer(name, _buffer(tensor))
                continue
            old = self._parameters.get(name)
            parameter = _parameter(tensor, old is None or old.requires_grad)
            _penalize(parameter, penalties.get(name), f"model {type(self.model).__name__}'s "
                      f"parameter `{name}`")
            self.register_parameter(name, parameter)

    def _output_tuple(self) -> type:
        return _output_class(type(self.model).__name__, tuple(self.output_names))

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_outputs"]  # a class made here, remade by __setstate__
        return state

    def __setstate__(self, state: dict) -> None:
        """pickle and copy.deepcopy rebuild the model (its own copy, mdl's __reduce__) and
        the tensors apart; the module's weights are then made its model's memory again."""
        super().__setstate__(state)
        self._outputs = self._output_tuple()
        self._tie_again()
        self._bind_weights()

    def _tie_again(self) -> None:
        """Copies of modules whose models share parameters (`params=`) share them again:
        copy.deepcopy and pickle copy a shared nn.Parameter once (their memo), but each
        model apart, with parameters of its own (a copy of a model is one of its own):
        the copied net's tied weights were untied, silently. The first module copied
        notes its model under the copied Parameters and buffers; a module whose copied one
        another model took is rebuilt on that model's parameters (`params=`) with the
        rest of its state."""
        owner = None
        weights = {**self._parameters, **self._buffers}  # frozen shared ones too
        for name, copied in weights.items():
            other = _copied_by(copied) if copied is not None else None
            if other is not None and other is not self.model \
                    and _tensor(_weights(other)[name]).data_ptr() \
                    != _tensor(_weights(self.model)[name]).data_ptr():
                owner = other
                break
        if owner is not None:
            cls, args, state = self.model.__reduce__()
            self.model = cls(*args, params=owner)
            self.model.__setstate__(state)
        for copied in weights.values():
            if copied is not None:
                _note_copied(copied, self.model)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        given = self._bind(args, kwargs)
        self._check_shared()
        tensors = dict(self.named_parameters(recurse=False))
        params = [tensors[name] for name in self._trainable]
        outs = _Call.apply(self, self.training, list(given), *params, *given.values())
        return outs[0] if len(outs) == 1 else self._outputs(*outs)

    def get_extra_state(self) -> dict:
        """What state_dict() holds besides the weights: where the model's dropout stream
        stands (`rng_seed`, `rng_calls`), so that a run resumed from its state_dict, as
        PyTorch's are, draws the masks an unbroken run would (it drew them anew: 0.012 off
        in 6 steps)."""
        return {"rng_seed": int(self.model.rng_seed), "rng_calls": int(self.model.rng_calls)}

    def set_extra_state(self, state: Any) -> None:
        keys = ("rng_seed", "rng_calls")
        values = [state.get(k) for k in keys] if isinstance(state, dict) else [None]
        if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
            raise ValueError(f"{type(self.model).__name__}'s state_dict entry _extra_state "
                             "holds {'rng_seed': int, 'rng_calls': int} (its dropout "
                             f"stream's place), got {state!r}")
        self.model.rng_seed, self.model.rng_calls = values

    def extra_repr(self) -> str:
        return (f"{type(self.model).__name__}: inputs {', '.join(self.input_names)}; "
                f"float outputs {', '.join(self.output_names)}")

    def _bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """The call's inputs by name (the native forward checks names, types and dims)."""
        if len(args) > len(self.input_names):
            raise TypeError(f"{type(self.model).__name__} takes {len(self.input_names)} "
                            f"inputs ({', '.join(self.input_names)}), got {len(args)} "
                            "positional arguments")
        given = dict(zip(self.input_names, args))
        for name, value in kwargs.items():
            if name in given:
                raise TypeError(f"input '{name}' given both by position and by name")
            if name == "training":  # the native forward's flag: it said "multiple values"
                raise TypeError("unknown input 'training': the module's mode chooses the "
                                "forward, .train() the training one, .eval() inference")
            given[name] = value
        return given

    def _check_shared(self) -> None:
        """Each parameter still is the model's memory: .to(), .double() or assigning
        `.data` give a tensor the native code would never see."""
        tensors = {**dict(self.named_parameters(recurse=False)),
                   **dict(self.named_buffers(recurse=False))}
        for name, (address, shape) in self._native.items():
            t = tensors.get(name)
            if t is None or t.data_ptr() != address or tuple(t.shape) != shape:
                raise RuntimeError(f"parameter '{name}' no longer shares memory with the "
                                   "compiled model (moved, converted or replaced); the "
                                   "module's parameters must stay where as_module put them")


@functools.lru_cache(maxsize=None)
def _output_class(model: str, names: tuple[str, ...]) -> type:
    """The named tuple of a model's float outputs, one field per output as declared: a
    namedtuple, but an output whose name starts with `_` (namedtuple renamed `_h` to `_0`)
    is read by its own name too, and pickle (torch.save) remakes it through _outputs
    (it could not find a class made here by name)."""
    base = namedtuple(f"{model}Outputs", names, rename=True)
    body: dict[str, Any] = {
        "__slots__": (), "_fields": names,
        "__reduce__": lambda self: (_outputs, (model, names, tuple(self))),
        "__repr__": lambda self: f"{model}Outputs(" + ", ".join(
            f"{k}={v!r}" for k, v in zip(names, self)) + ")"}
    body.update({k: property(operator.itemgetter(i), doc=f"output {k}")
                 for i, k in enumerate(names) if k != base._fields[i]})
    return type(f"{model}Outputs", (base,), body)


def _outputs(model: str, names: tuple[str, ...], values: tuple) -> tuple:
    """A model's outputs tuple, as pickle remakes it."""
    return _output_class(model, names)(*values)


class _Call(torch.autograd.Function):
    """One native call: forward(bridge, training, input names, *parameters, *inputs)."""

    @staticmethod
    def forward(ctx, bridge: CompiledModule, training: bool, names: list[str], *values):
        n = len(bridge._trainable)
        declared = bridge.model.inputs  # an unknown name: the native forward says so
        arrays = {k: _array(f"input '{k}'", v, bridge._on_device, declared.get(k, ""))
                  for k, v in zip(names, values[n:])}
        model = bridge.model
        ctx.bridge, ctx.training, ctx.names = bridge, training, names
        if not training:
            out = model.forward(**arrays, training=False)
        else:
            with _lock(model):
                out = model.forward(**arrays, training=True)
                ctx.call, ctx.saved = model.rng_calls, model._training_forwards
            ctx.arrays = arrays  # views of the inputs, for a replay
            # saved so that torch refuses a backward after they changed in place (an
            # optimizer step): the native saved forward belongs to their old values
            ctx.save_for_backward(*(v for v in values if isinstance(v, torch.Tensor)))
        return tuple(_tensor(out[k]) for k in bridge.output_names)

    @staticmethod
    def backward(ctx, *cotangents):
        bridge = ctx.bridge
        if torch.is_grad_enabled():  # a backward with create_graph=True
            raise RuntimeError(f"{type(bridge.model).__name__}'s backward is native code, "
                               "which PyTorch cannot differentiate again: gradients of "
                               "gradients through it (create_graph=True) are not supported")
        if not ctx.training:
            raise RuntimeError(f"{type(bridge.model).__name__} ran its inference forward "
                               "(eval mode), which keeps nothing to differentiate: call "
                               ".train() on the module for gradients")
        ctx.saved_tensors  # noqa: B018 - raises if a parameter or input changed since
        model = bridge.model
        given = {k: _array(f"the gradient of output '{k}'", c, bridge._on_device)
                 for k, c in zip(bridge.output_names, cotangents)}
        with _lock(model):
            if model._training_forwards != ctx.saved:
                _replay(model, ctx)
            grads = model.backward(**given)
        n = len(bridge._trainable)
        wanted = ctx.needs_input_grad[3:]
        params = [_tensor(grads[k]) if w else None for k, w in zip(bridge._trainable, wanted[:n])]
        inputs = [_tensor(grads[f"input:{k}"]) if w and f"input:{k}" in grads
                  else None for k, w in zip(ctx.names, wanted[n:])]
        return (None, None, None, *params, *inputs)


def _replay(model: Any, ctx) -> None:
    """Run the training forward of `ctx` again: the model keeps only its latest, and
    another training call has replaced it. Its parameters and inputs are unchanged (torch
    checked) and it draws the same dropout masks (call k draws from stream k), so it
    computes the same values; the model's count of calls is left where it was."""
    latest = model.rng_calls
    model.rng_calls = ctx.call - 1
    try:
        model.forward(**ctx.arrays, training=True)
    finally:
        model.rng_calls = latest
    ctx.saved = model._training_forwards


def _weights(model: Any) -> dict:
    """A model's weights where they live: views of them (a cuda model's in the GPU's
    memory)."""
    return model.params if model.device == "cpu" else model.device_params


def _tensor(array: Any) -> torch.Tensor:
    """A native result or weight as a tensor over its memory: a NumPy array's, or a
    DeviceArray's through DLPack (the GPU's; the emulated device's is the host's)."""
    return torch.from_numpy(array) if isinstance(array, np.ndarray) else torch.from_dlpack(array)


def _array(what: str, value: Any, on_device: bool = False, expected: str = "") -> Any:
    """What the native model takes for `value`: a tensor's memory as a NumPy array (no
    copy) where it is on the CPU, a CUDA tensor itself for a cuda model (read in place
    through `__dlpack__`), anything else as it is (NumPy arrays, `__dlpack__` objects).
    `expected`: the type the model declares, for the error of a dtype NumPy has not."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.is_nested:  # torch's "Internal error: NestedTensorImpl doesn't support sizes"
        raise TypeError(f"{what}: expected {expected or 'a dense tensor'}, got a nested "
                        "tensor: give a dense one (.to_padded_tensor(0.0))")
    if value.layout != torch.strided:  # its numpy() fails as for a dtype NumPy has not
        raise TypeError(f"{what}: expected {expected or 'a dense tensor'}, got a tensor of "
                        f"layout {value.layout}: give a dense one (.to_dense())")
    runs_on = "cuda" if on_device else "cpu"
    if value.device.type not in ("cpu", runs_on):  # a meta tensor went on to DLPack's error
        raise ValueError(f"{what} is on {value.device}: the compiled model runs on "
                         f"{'the GPU (cuda)' if on_device else 'the CPU'}")
    value = value.detach().resolve_conj().resolve_neg()  # numpy() refuses those lazy bits
    if value.device.type == "cpu":
        try:
            return value.numpy()
        except TypeError:  # bfloat16, float8, ...
            raise TypeError(f"{what}: expected {expected or 'a NumPy dtype'}, got a "
                            f"{value.dtype} tensor, which NumPy cannot hold") from None
    return value.contiguous()
