"""What a build of a .mdl file is asked for (`mdlc build`'s options, `codegen.load`'s
arguments) and the name of the module it makes. Kept apart from the pipeline so that the
build index (codegen/compile/index.py) can answer for a build without importing it."""
from __future__ import annotations

import keyword
import numbers
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..ir.diagnostics import UsageError
from ..ir.requests import check_request

from ..ir.dtypes import I32_MAX

MAX_SIZE = I32_MAX  # a dim's value is an i32 in the generated code (`f32(T)`), as mdlc's
                    # --specialize and --dims say


@dataclass
class BuildOptions:
    target: str = "cpu"
    dtype: str = "f32"
    defines: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    specialize: list[dict[str, int]] = field(default_factory=list)
    debug: bool = False
    sanitize: bool = False
    vjp: bool = False   # backward takes a cotangent per float output (codegen.pytorch)
    emulate: bool = False  # --target cuda built for mdl's emulated device, on the CPU
    profile: bool = False  # its code times itself (codegen/backend/profile.py)

    def __post_init__(self) -> None:
        """What `load(...)` is given is checked as the command line's options are: a
        UsageError naming the argument, not a failure deep in the build."""
        check_request(self.model, self.defines, self.dtype)
        for flag in ("debug", "sanitize", "vjp", "emulate", "profile"):
            if not isinstance(getattr(self, flag), bool):  # "no" would be true
                raise UsageError(f"{flag} takes True or False, got {getattr(self, flag)!r}")
        if not isinstance(self.specialize, (list, tuple)) or not all(
                isinstance(s, dict) for s in self.specialize):
            raise UsageError(f"specialize takes a list of {{dim: size}} dicts, e.g. "
                             f"[{{'T': 35, 'B': 8}}], got {self.specialize!r}")
        for spec in self.specialize:
            if not spec:
                raise UsageError("specialize: a specialization fixes one dim or more, got {}")
            for dim, size in spec.items():
                if not (isinstance(dim, str) and dim.isidentifier()) or isinstance(
                        size, bool) or not isinstance(size, numbers.Integral) or not (
                            1 <= size <= MAX_SIZE):
                    raise UsageError(f"specialize {dim!r}: {size!r}: a dim is a name and its "
                                     f"size an int from 1 to {MAX_SIZE}")
        self.specialize = [{dim: int(size) for dim, size in s.items()}
                           for s in self.specialize]
        for k, spec in enumerate(self.specialize):
            if spec in self.specialize[:k]:  # compiled twice, and listed twice in help()
                raise UsageError(f"specialize: {dims_text(spec)} is given twice")


ASCII_NAME = "give the module an ASCII identifier as its name (mdlc's --name, load's name=)"


def dims_text(spec: dict[str, int]) -> str:
    """Sizes of dims as the command line writes them: `T=35,B=8`."""
    return ",".join(f"{k}={v}" for k, v in spec.items())


# What mdl and the modules it builds import: a model's module named so (`numpy.mdl`) took
# its place in the folder it was built in, where `import numpy` then found the model (and
# `torch.mdl`'s, codegen.pytorch's torch). Every top-level name codegen and dsl import
# that is not Python's own is here (tests/test_cli.py reads their imports); markupsafe
# (jinja2's) and tqdm (the examples' progress bar) besides.
MDL_IMPORTS = frozenset({"codegen", "dsl", "benchmarks", "numpy", "lark", "jinja2",
                         "markupsafe", "pybind11", "tqdm", "graphviz", "pygments",
                         "scipy_openblas32", "torch", "onnx", "onnxruntime", "openvino",
                         "google"})


def module_name_for(path: str | Path, name: str | None = None) -> str:
    """The Python module name: `name`, or the file's stem made an identifier. Either must
    be ASCII: CPython finds the init function of a module named otherwise by another
    symbol (`PyInitU_` and its punycode) than the `PyInit_<name>` the module exports."""
    if name is not None:
        if not isinstance(name, str):
            raise UsageError(f"name takes a module name (a str), got {name!r}")
        if not name.isidentifier() or keyword.iskeyword(name):
            raise UsageError(f"module name {name!r} is not a valid Python module name"
                             + (" (a keyword: `import` cannot name it)"
                                if keyword.iskeyword(name) else ""))
        if not name.isascii():
            raise UsageError(f"module name {name!r} is not ASCII, and Python imports no "
                             f"compiled module of such a name: {ASCII_NAME}")
        return _short(name, "module name")
    stem = re.sub(r"\W", "_", Path(path).stem)
    if not stem.isascii():
        raise UsageError(f"the module of `{path}` would be named {stem!r}, which is not ASCII, "
                         f"and Python imports no compiled module of such a name: {ASCII_NAME} "
                         "(or rename the file)")
    importable = (stem.isidentifier() and not keyword.iskeyword(stem)
                  and stem not in sys.stdlib_module_names  # `import os` finds Python's
                  and stem not in MDL_IMPORTS)
    return _short(stem if importable else f"m_{stem}", f"the module of `{path}`")


def own_module_name(path: str | Path) -> str:
    """The name of a module a command builds for its own use (gradcheck, profile), which
    no user imports: the file's, or `model` where the file's is none (`mödel é.mdl` was
    refused, with advice to give a --name those commands do not take)."""
    try:
        return module_name_for(path)
    except UsageError:
        return "model"


def _short(name: str, what: str) -> str:
    """`name`, if its extension's file name fits in a directory entry (255 bytes): a longer
    one was an internal error (OSError: File name too long) or a linker's failure."""
    import sysconfig  # the suffix environment.py names EXT_SUFFIX, without its imports
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    most = 255 - len(suffix)
    if len(name) > most:
        raise UsageError(f"{what}: a name of {len(name)} characters is too long; the module's "
                         f"file, the name and {suffix}, holds at most {most} (a file name's "
                         "255 bytes): give a shorter one (mdlc's --name, load's name=)")
    return name
