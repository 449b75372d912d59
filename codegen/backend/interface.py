"""What a generated model class offers its users, described once: the class's docstring
(`help(charlm.CharLM)`, set from the model's spec) and the module's type stub
(`charlm.pyi`, templates/module.pyi.j2, written beside the extension so that editors and
type checkers know each model's inputs by name) are both made from it."""
from __future__ import annotations

import keyword
from dataclasses import dataclass

from ..ir.graph import Graph, walk_ops
from ..ops.entry import entry
from ..transforms.autodiff import cotangent_names
from .templating import environment


@dataclass
class ModelInterface:
    name: str
    inputs: dict[str, str]        # {name: type as declared, in the build's dtype}
    outputs: dict[str, str]
    loss: str | None              # the minimized output (None: no minimize)
    trains: bool                  # a training forward and a backward were built
    vjp: bool                     # backward takes the outputs' cotangents by name
    cotangents: list[str]         # those outputs (in a vjp build that trains)
    dims: list[str]               # the symbolic dims a call binds
    specializations: list[dict[str, int]]
    hparams: dict[str, object]
    param_arrays: int
    param_numbers: int
    device: str
    dtype: str
    checks: list[str]             # what its asserts say of a call's data

    def doc(self) -> str:
        """The class's docstring: how to make it and call it, its inputs and outputs."""
        inputs = ", ".join(self.inputs)
        lines = [f"{self.name}(seed=0, params=None): the mdl model {self.name} "
                 f"({self.device}, {self.dtype}).", "",
                 f"forward(*, {inputs}{', ' if inputs else ''}training=False) takes the "
                 "inputs by name:"]
        lines += _table(self.inputs, {})
        lines += ["and returns a dict of its outputs:"]
        lines += _table(self.outputs, {self.loss: "(minimized)"} if self.loss else {})
        lines += [""] + self._training()
        if self.checks:
            lines += ["", "A call whose data fails a check raises ValueError:"]
            lines += [f"    {check}" for check in self.checks]
        if self.dims:
            fixed = "; ".join(", ".join(f"{k}={v}" for k, v in s.items())
                              for s in self.specializations)
            lines += ["", ("Dims " if len(self.dims) > 1 else "Dim ") + ", ".join(self.dims)
                      + (" take" if len(self.dims) > 1 else " takes") + " any size in a call"
                      + (f"; compiled for {fixed} too." if fixed else ".")]
        if self.hparams:
            values = ", ".join(f"{k}={_value(v)}" for k, v in self.hparams.items())
            lines += [f"Hyper-parameters: {values}."]
        arrays = "1 array" if self.param_arrays == 1 else f"{self.param_arrays} arrays"
        numbers = "1 number" if self.param_numbers == 1 else f"{self.param_numbers:,} numbers"
        lines += [f"Parameters: {arrays}, {numbers} (.params)."]
        return "\n".join(lines)

    def _training(self) -> list[str]:
        if not self.trains:
            why = "it has no float output" if self.vjp else "it minimizes nothing"
            return [f"It does not train ({why}): no backward, train_step or forward_backward."]
        if self.vjp:
            return [f"backward(*, {', '.join(self.cotangents)}) after forward(..., "
                    "training=True): the gradients of sum(cotangent * output) (a vjp build)."]
        return [f"backward() after forward(..., training=True): the gradients of "
                f"{self.loss}.",
                "train_step(...) runs forward, backward and the optimizer's update "
                "(set_optimizer first)."]


def describe(graph: Graph, joint: Graph | None, vjp: bool,
             specializations: list[dict[str, int]], dims: list[str], param_numbers: int,
             device: str, dtype: str) -> ModelInterface:
    """The interface of one model of a module (`joint`: its differentiated graph, if any;
    `vjp`: a build whose backward takes cotangents)."""
    return ModelInterface(
        graph.name, {k: str(v.type) for k, v in graph.inputs.items()},
        {k: str(v.type) for k, v in graph.outputs.items()}, graph.loss, joint is not None,
        vjp, cotangent_names(joint) if joint is not None and vjp else [], dims,
        specializations, dict(graph.hparams), len(graph.params), param_numbers, device, dtype,
        _checks(graph))


def _checks(graph: Graph) -> list[str]:
    """Each assert of the model: its message and condition (attrs["said"])."""
    return [op.attrs["said"] for op in walk_ops(graph.body) if entry(op).checks]


def stub(module_name: str, models: list[ModelInterface]) -> str:
    """The module's type stub (MOD.pyi); `models` all of one device."""
    return environment().get_template("module.pyi.j2").render(
        module_name=module_name, names=", ".join(m.name for m in models),
        device=models[0].device, models=[_stub_class(m) for m in models])


# Names the stub itself uses (templates/module.pyi.j2): a model class of one would hide
# what its later annotations mean (`int`), or the stub's own names, so it is not declared
STUB_NAMES = {"_np", "_npt", "_os", "_Any", "_Protocol", "_DLPack", "_Array", "_Result",
              "DeviceArray", "_Model", "set_num_threads", "get_num_threads",
              "int", "str", "float", "bool", "dict", "list", "tuple", "property"}


def _stub_class(m: ModelInterface) -> dict:
    """What the stub's template writes of one model class: its methods' keyword arguments."""
    declared = _declarable(m.name) and m.name not in STUB_NAMES
    return dict(name=m.name, declared=declared, trains=m.trains, vjp=m.vjp,
                doc=m.doc().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
                .replace("\n", "\n    ").replace("\n    \n", "\n\n") + "\n    ",
                forward=_keywords(list(m.inputs), ", training: bool = False"),
                step=_keywords(list(m.inputs)), backward=_keywords(m.cotangents))


def _keywords(names: list[str], extra: str = "") -> str:
    """`, *, a: Array, b: Array` and `extra`; names Python cannot declare as arguments
    (`class`, or `self`, the method's own) are taken as `**inputs`."""
    if not names and not extra:
        return ""
    if all(_declarable(k) and k != "self" for k in names):
        return ", *" + "".join(f", {k}: _Array" for k in names) + extra
    return (", *" + extra if extra else "") + ", **inputs: _Array"


def _declarable(name: str) -> bool:
    """A name a stub can declare as a keyword argument: not a keyword, nor `__debug__`,
    which parses but does not compile (`cannot assign to __debug__`)."""
    return name.isidentifier() and not keyword.iskeyword(name) and name != "__debug__"


def _table(types: dict[str, str], notes: dict[str, str]) -> list[str]:
    width = max((len(k) for k in types), default=0)
    return [f"    {k.ljust(width)}  {t}{' ' + notes[k] if k in notes else ''}"
            for k, t in types.items()]


def _value(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
