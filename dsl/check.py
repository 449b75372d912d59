"""The front end's public entry: check a .mdl file (parse, imports, elaborate) and
describe the result as a summary, a parameter table or JSON."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codegen.ir.diagnostics import (Diagnostic, Loc, MdlError, MdlNameError, Source,
                                     UsageError, distinct, printable)
from codegen.ir.dtypes import literal
from codegen.ir.graph import Graph
from codegen.ir.requests import check_request
from codegen.ir.shapes import numel

from .elaborate import elaborate
from .program import load_program, read_source


@dataclass
class CheckedModel:
    path: str
    graph: Graph
    warnings: list[Diagnostic]
    # the assignments some read reaches, and which of `warnings` say a name is never read
    read_at: frozenset = frozenset()
    unused: tuple = ()


def file_warnings(checked: list[CheckedModel]) -> list[Diagnostic]:
    """The warnings of a file's models, each once (a function's, found in each model that
    calls it), but for a function's local that one model leaves unread and another reads:
    `mdlc check` of the whole file warned of it (a QA pass)."""
    read = frozenset().union(*(cm.read_at for cm in checked))
    unused = {id(w) for cm in checked for w in cm.unused}
    return distinct(w for cm in checked for w in cm.warnings
                    if id(w) not in unused or w.loc not in read)


def check_source(text: str, path: str = "<string>", defines: dict[str, Any] | None = None,
                 model: str | None = None, dtype: str = "f32") -> CheckedModel:
    """Check one model of a source text; raise MdlError on errors in it, UsageError on a
    bad request (unknown model or hyper-parameter)."""
    if not isinstance(text, str):  # None read a file named `<string>`
        raise TypeError(f"check_source takes the source as a str, got {type(text).__name__}")
    return SourceFile(path, text).check(model, defines, dtype)


def check_file(path: str, **options) -> CheckedModel:
    return SourceFile(path).check(**options)


def model_names(path: str) -> list[str]:
    """The models a file defines, in order (MdlError when it does not parse)."""
    return SourceFile(path).model_names()


def defines_by_model(path: str, names: list[str], defines: dict[str, Any]) -> dict[str, dict]:
    return SourceFile(path).defines_by_model(names, defines)


class SourceFile:
    """A .mdl file with everything it imports, read and parsed once: the names of its
    models, and each of them checked from that one parse (a file of three models and an
    import parsed once instead of five times: a quarter second of a build)."""

    def __init__(self, path: str | Path, text: str | None = None):
        # a descriptor (check_file(0)) was read, then closed; None read a file `<string>`
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path takes a file's path (a str or a Path), got "
                            f"{type(path).__name__}")
        if text is not None and not isinstance(text, str):
            raise TypeError(f"text takes the source as a str, got {type(text).__name__}")
        self.path = str(path)
        self.text = read_source(path) if text is None else text
        self.program = load_program(self.text, self.path)

    def model_names(self) -> list[str]:
        """The models the file defines, in order."""
        if not self.program.models:
            raise self._no_model()
        return list(self.program.models)

    def defines_by_model(self, names: list[str], defines: dict[str, Any]) -> dict[str, dict]:
        """What each of the models `names` takes of `defines`, when they are checked or
        built together: a hyper-parameter is set in the models that declare it (a file's
        training model and its generation model both have H; only the one that decodes has
        a step count L). A name that none of them declares is a usage error; a single model
        takes them all, and says which it does not have."""
        if not defines or len(names) < 2:
            return {name: defines for name in names}
        has = {name: [h.name.name for h in self.program.models[name].hparams]
               for name in names}
        unknown = sorted(set(defines) - {h for hs in has.values() for h in hs})
        if unknown:
            listing = "; ".join(f"`{name}` has {', '.join(hs) or 'none'}"
                                for name, hs in has.items())
            raise UsageError(f"no model of {self.path} has a hyper-parameter "
                             f"{', '.join(unknown)} ({listing})")
        return {name: {k: v for k, v in defines.items() if k in has[name]} for name in names}

    def check(self, model: str | None = None, defines: dict[str, Any] | None = None,
              dtype: str = "f32") -> CheckedModel:
        """Check one model; raise MdlError on errors in it, UsageError on a bad request
        (unknown model or hyper-parameter)."""
        check_request(model, {} if defines is None else defines, dtype)  # as load's
        models = self.program.models
        if not models:
            raise self._no_model()
        if model is None:
            if len(models) > 1:
                raise UsageError(f"{self.path} defines several models ({', '.join(models)}); "
                                 "choose one with --model NAME")
            model = next(iter(models))
        if model not in models:
            raise UsageError(f"{self.path} has no model `{printable(model)}` (it has "
                             f"{', '.join(models)})")
        graph, warnings, found = elaborate(self.program, models[model], defines or {}, dtype)
        return CheckedModel(self.path, graph, warnings, frozenset(found.read_at),
                            tuple(found.unused))

    def _no_model(self) -> MdlError:
        return MdlNameError("this file defines no model (write `model Name() { ... }`)",
                            Loc(Source(self.path, self.text), 1, 1))


def to_json(cm: CheckedModel) -> dict:
    g = cm.graph
    return {
        "model": g.name,
        "inputs": {k: v.type.json() for k, v in g.inputs.items()},
        "outputs": {k: v.type.json() for k, v in g.outputs.items()},
        "params": {
            p.name: {**p.value.type.json(), "init": str(p.init), "trainable": p.trainable,
                     "regularizer": str(p.regularizer) if p.regularizer else None,
                     "uses": [str(u) for u in p.uses]}
            for p in g.params.values()},
    }


def summary(cm: CheckedModel) -> str:
    g = cm.graph
    hp = ", ".join(f"{k}={literal(v)}" for k, v in g.hparams.items())
    lines = [f"model {g.name}({hp}): ok"]
    for k, v in g.inputs.items():
        lines.append(f"  input  {k} : {v.type}")
    for k, v in g.outputs.items():
        lines.append(f"  output {k} : {v.type}" + ("   (minimized)" if k == g.loss else ""))
    count = sum(numel(p.value.type.shape).value for p in g.params.values())
    lines.append(f"  {_counted(len(g.params), 'parameter')}, {_counted(count, 'weight')}")
    return "\n".join(lines)


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


SHORT = 6  # significant digits of the numbers in the parameter table (--json has all)


def params_table(cm: CheckedModel) -> str:
    rows = [("parameter", "type", "init", "trainable", "regularizer", "used at")]
    for p in cm.graph.params.values():
        rows.append((p.name, str(p.value.type), p.init.text(SHORT), str(p.trainable).lower(),
                     p.regularizer.text(SHORT) if p.regularizer else "-",
                     ", ".join(str(u) for u in p.uses) or "(unused)"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]
                     for r in rows)
