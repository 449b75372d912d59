"""The front end's public entry: check a .mdl file (parse, imports, elaborate) and
describe the result as a summary, a parameter table or JSON."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codegen.ir.diagnostics import Diagnostic, Loc, MdlNameError, Source, UsageError
from codegen.ir.graph import Graph
from codegen.ir.shapes import numel

from .elaborate import elaborate
from .program import load_program, read_source


@dataclass
class CheckedModel:
    path: str
    graph: Graph
    warnings: list[Diagnostic]


def check_source(text: str, path: str = "<string>", defines: dict[str, Any] | None = None,
                 model: str | None = None, dtype: str = "f32") -> CheckedModel:
    """Check one model of a source text; raise MdlError on errors in it, UsageError on a
    bad request (unknown model or hyper-parameter)."""
    program = load_program(text, path)
    if not program.models:
        raise MdlNameError("this file defines no model (write `model Name() { ... }`)",
                           Loc(Source(path, text), 1, 1))
    if model is None:
        if len(program.models) > 1:
            raise UsageError(f"{path} defines several models ({', '.join(program.models)}); "
                             "choose one with --model NAME")
        model = next(iter(program.models))
    if model not in program.models:
        raise UsageError(f"{path} has no model `{model}` (it has "
                         f"{', '.join(program.models)})")
    graph, warnings = elaborate(program, program.models[model], defines or {}, dtype)
    return CheckedModel(path, graph, warnings)


def check_file(path: str, **options) -> CheckedModel:
    return check_source(read_source(path), path, **options)


def model_names(path: str) -> list[str]:
    """The models a file defines, in order (MdlError when it does not parse)."""
    text = read_source(path)
    names = list(load_program(text, path).models)
    if not names:
        check_source(text, path)  # raises the located "defines no model" error
    return names


def defines_by_model(path: str, names: list[str], defines: dict[str, Any]) -> dict[str, dict]:
    """What each of the models `names` of one file takes of `defines`, when they are
    checked or built together: a hyper-parameter is set in the models that declare it
    (a file's training model and its generation model both have H; only the one that
    decodes has a step count L). A name that none of them declares is a usage error;
    a single model takes them all, and says which it does not have."""
    if not defines or len(names) < 2:
        return {name: defines for name in names}
    program = load_program(read_source(path), path)
    has = {name: [h.name.name for h in program.models[name].hparams] for name in names}
    unknown = sorted(set(defines) - {h for hs in has.values() for h in hs})
    if unknown:
        listing = "; ".join(f"`{name}` has {', '.join(hs) or 'none'}" for name, hs in has.items())
        raise UsageError(f"no model of {path} has a hyper-parameter {', '.join(unknown)} "
                         f"({listing})")
    return {name: {k: v for k, v in defines.items() if k in has[name]} for name in names}


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
    hp = ", ".join(f"{k}={v}" for k, v in g.hparams.items())
    lines = [f"model {g.name}({hp}): ok"]
    for k, v in g.inputs.items():
        lines.append(f"  input  {k} : {v.type}")
    for k, v in g.outputs.items():
        lines.append(f"  output {k} : {v.type}" + ("   (minimized)" if k == g.loss else ""))
    count = sum(numel(p.value.type.shape).value for p in g.params.values())
    lines.append(f"  {len(g.params)} parameters, {count} weights")
    return "\n".join(lines)


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
