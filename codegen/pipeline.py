"""The compiler's stages, run in order, for every entry point (`mdlc build/emit/
gradcheck`, `codegen.load`):

    check          .mdl file -> checked forward graphs      dsl.SourceFile
    prepare        loops with lengths -> plain loops        transforms.prepare
    differentiate  + the backward of the minimized output  autodiff (transforms.prepare),
                   (or, --vjp, a vector-Jacobian product)   transforms.passes.optimize
    generate       split, lower, plan, render for a target backend.module.generate
    build          the runtime once, then one compiler call compile.extension.build_extension,
                   by the target's toolchain
    import         the extension as a Python module

A build seen before is found from the .mdl sources and options alone (the index,
codegen/compile/index.py), so nothing is checked or generated again."""
from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from dsl import SourceFile, UsageError, file_warnings

from .backend.module import generate
from .compile.cache import reading
from .compile.extension import build_extension
from .compile.index import lookup, remember
from .compile.options import BuildOptions, dims_text, module_name_for
from .ir.diagnostics import Diagnostic, warn_caller
from .ir.graph import Graph, clone_graph
from .targets.registry import TARGETS, target
from .transforms.autodiff import cotangent_names, grad_graph, vjp_graph
from .transforms.passes import optimize
from .transforms.prepare import prepare

Warn = Callable[[Diagnostic], None]  # where a stage's warnings go (cli: stderr)


def check(path: str | Path, options: BuildOptions, warn: Warn | None = None) -> list[Graph]:
    """The checked graphs of the models to build: `options.model`, else every model of
    the file (one class each in the module), each warning of theirs given to `warn` once.
    Each `--specialize` set must fit (name only symbolic dims of) at least one of them."""
    source = SourceFile(path)
    names = [options.model] if options.model is not None else source.model_names()
    defines = source.defines_by_model(names, options.defines)
    checked = [source.check(name, defines[name], options.dtype) for name in names]
    for w in file_warnings(checked) if warn else ():
        warn(w)
    out = [cm.graph for cm in checked]
    for spec in options.specialize:
        if any(_fits(spec, graph) for graph in out):
            continue
        graph = out[0]
        dims = _symbolic_dims(graph)
        if len(out) == 1:
            unknown = ", ".join(sorted(set(spec) - dims))
            known = ", ".join(sorted(dims)) or "none"
            raise UsageError(f"the specialization {dims_text(spec)} names {unknown}, not a "
                             f"symbolic dim of model `{graph.name}` (it has {known})")
        has = "; ".join(f"`{g.name}` has {', '.join(sorted(_symbolic_dims(g))) or 'none'}"
                        for g in out)
        raise UsageError(f"the specialization {dims_text(spec)} fits no model: none has all of "
                         f"{', '.join(spec)} as symbolic dims ({has})")
    for graph in out:
        for spec in specializations_of(graph, options):
            _runs_at(graph, spec)
    return out


def _runs_at(graph: Graph, spec: dict[str, int]) -> None:
    """Refuse a specialization every call of which the model would refuse (`zeros[T - 2]`
    at T = 1): code compiled for dims no call can have, or an ONNX graph that fails."""
    from .ops.entry import call_bounds
    for text, d in call_bounds([graph], _symbolic_dims(graph)):
        if d.symbols <= set(spec) and (value := d.evaluate(spec)) < 0:
            raise UsageError(f"the specialization {dims_text(spec)}: model `{graph.name}` refuses "
                             f"every call at these dims: they make "
                             + text.replace("{}", str(value)))


def specializations_of(graph: Graph, options: BuildOptions) -> list[dict[str, int]]:
    """The `--specialize` sets that fit `graph`: in a file of several models, a set applies
    to the models that have all its dims."""
    return [spec for spec in options.specialize if _fits(spec, graph)]


def _fits(spec: dict[str, int], graph: Graph) -> bool:
    return set(spec) <= _symbolic_dims(graph)


def differentiate(graph: Graph, vjp: bool = False) -> Graph:
    """The joint graph: forward and backward of the minimized output (`vjp`: the
    vector-Jacobian product, whose backward takes a cotangent per float output; autodiff
    prepares the copy it differentiates), simplified by the passes. `graph` is left as
    it is: the inference functions are generated from it."""
    joint = vjp_graph(graph) if vjp else grad_graph(graph)
    optimize(joint)
    return joint


def trains(graph: Graph, options: BuildOptions) -> bool:
    """Whether a build of `graph` has a training forward and a backward: a minimized
    output, or with `vjp` a float output to take a cotangent of."""
    return bool(cotangent_names(graph)) if options.vjp else graph.loss is not None


def for_backends(graph: Graph) -> Graph:
    """A copy of the forward graph prepared for a backend (loops with lengths lowered to
    plain ones) and simplified by the passes, as the joint graph is; `graph` stays as
    checked."""
    ready = clone_graph(graph)
    prepare(ready.body, autodiff=False)
    optimize(ready)
    return ready


def sources(path: str | Path, module_name: str, options: BuildOptions,
            warn: Warn | None = None) -> tuple[list[Graph], dict[str, str]]:
    """The checked graphs and the generated sources {file name: text}; the checker's
    warnings go to `warn`."""
    chosen = target(options.target, options.emulate, options.sanitize, options.profile)
    models = check(path, options, warn)
    for graph in models:
        weights_in(graph, options.dtype)
    built = [(for_backends(g), differentiate(g, options.vjp) if trains(g, options) else None,
              specializations_of(g, options)) for g in models]
    return models, generate(built, module_name, options.dtype, chosen, options.vjp, models)


def weights_in(graph: Graph, dtype: str) -> None:
    """A module stores every weight in its build's float type: a parameter declared of the
    other one (`param w : f64[3]` in an f32 build) is refused where it is declared (its
    build once broke: a float* read as double*), by a build and by `mdlc check` of the
    same --dtype. The reference and ONNX take it."""
    from .ir.diagnostics import MdlTypeError
    for p in graph.params.values():
        if p.value.type.dtype != dtype:
            raise MdlTypeError(f"parameter `{p.name}` is {p.value.type.dtype}, and a module "
                               f"holds its weights in its build's float type, {dtype}: "
                               f"declare it {dtype}, or build with --dtype "
                               f"{p.value.type.dtype} (dtype=\"{p.value.type.dtype}\")",
                               p.decl)


def build(path: str | Path, name: str | None = None, options: BuildOptions | None = None,
          progress: bool | None = None, warn: Warn | None = None) -> Path:
    """Build (or take from the cache) the module of a .mdl file; the extension's path.
    A build seen before is found from the .mdl sources alone (the index), without
    generating code. The checker's warnings go to `warn`, a cached build's as the index
    recorded them."""
    options = options or BuildOptions()
    chosen = target(options.target, options.emulate, options.sanitize, options.profile)
    module_name = module_name_for(path, name)
    built = lookup(path, module_name, options, warn)
    if built is None:
        found: list[Diagnostic] = []

        def seen(w: Diagnostic) -> None:  # said before the compiler's seconds, not after
            found.append(w)
            if warn:
                warn(w)
        _, srcs = sources(path, module_name, options, seen)
        built = build_extension(srcs, module_name, chosen, debug=options.debug,
                                sanitize=options.sanitize, progress=progress)
        remember(path, module_name, options, built, chosen.toolchain, found)
    return built


def load(path: str | Path, target: str = "cpu", defines: dict[str, Any] | None = None,
         dtype: str = "f32", model: str | None = None,
         specialize: list[dict[str, int]] | None = None, name: str | None = None,
         vjp: bool = False, *, emulate: bool = False, profile: bool = False) -> ModuleType:
    """Build (through the cache) and import the native module of a .mdl file; `vjp`: its
    backward takes cotangents of the float outputs (what codegen.pytorch needs); `emulate`:
    the cuda target's code built for mdl's emulated device, which runs it on the CPU;
    `profile`: its code times itself (a model's `profile()`, codegen.profile)."""
    if emulate and target != "cuda" and target in TARGETS:  # registry's words are mdlc's
        raise UsageError(f"emulate=True is for target='cuda' (here target={target!r}): it "
                         "runs the cuda target's generated code on the CPU")
    options = BuildOptions(target, dtype, dict(defines) if isinstance(defines, dict) else
                           (defines or {}), model,
                           specialize if isinstance(specialize, (dict, str))
                           else list(specialize or []),
                           vjp=vjp, emulate=emulate, profile=profile)
    found: list[Diagnostic] = []
    module = import_built(path, module_name_for(path, name), options, found.append)
    warn_caller(found)
    return module


# The names import_built has left in sys.modules: a later load of the same name replaces
# its module there (pickle then no longer finds the classes of the earlier one).
_LOADED: set[str] = set()


def import_built(path: str | Path, module_name: str, options: BuildOptions,
                 warn: Warn | None = None) -> ModuleType:
    """Build (through the cache) and import the module `module_name` of a .mdl file, its
    warnings given to `warn`. It is in sys.modules, as an import's would be, so that
    pickle finds its classes by name, unless that name was another module's (a model file
    json.mdl must not hide the json package)."""
    held = sys.modules.get(module_name)
    # the module's cache entry is kept from a prune until it is loaded (cache.reading)
    with reading(lambda: build(path, module_name, options, warn=warn),
                 lambda built: [built]) as built:
        spec = importlib.util.spec_from_file_location(module_name, built)
        module = importlib.util.module_from_spec(spec)  # CPython puts it into sys.modules
        spec.loader.exec_module(module)
    if held is None or module_name in _LOADED:
        sys.modules[module_name] = module
        _LOADED.add(module_name)
    else:
        sys.modules[module_name] = held
    return module


def _symbolic_dims(graph: Graph) -> set[str]:
    return {s for v in graph.inputs.values() for d in v.type.shape for s in d.symbols}
