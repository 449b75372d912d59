"""A program: the main file with everything it imports, transitively (cycles allowed),
and the functions and models they define."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from codegen.ir.diagnostics import (Loc, MdlError, MdlNameError, MdlTypeError, Source,
                                    UsageError, printable_path,
                                    raise_all)

from . import nodes as n
from .builtins import reserved
from .imports import MAX_SOURCE_BYTES, find_import, main_directory, source_bytes
from .parser import parse

# What a generated module holds besides its model classes (cpp_runtime/src/python_module.cpp)
MODULE_NAMES = ("DeviceArray", "set_num_threads", "get_num_threads", "_Model")


@dataclass
class Program:
    main: n.Module
    functions: dict[str, n.FuncDef] = field(default_factory=dict)
    models: dict[str, n.ModelDef] = field(default_factory=dict)  # the main file's


def read_source(path: str | Path, loc: Loc | None = None) -> str:
    try:
        data = source_bytes(path)
    except OSError as exc:
        what = f"cannot read `{printable_path(str(path))}`: {exc.strerror or exc}"
        if loc is None:  # the file asked for (mdlc's FILE, load's path): a usage error
            raise UsageError(what) from None
        raise MdlNameError(what, loc) from None  # an import's, an error in the importer
    if len(data) > MAX_SOURCE_BYTES:
        raise MdlNameError(f"`{path}` holds more than {MAX_SOURCE_BYTES >> 20} MiB; "
                           "a source file must be smaller", loc)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as bad:
        raise MdlNameError(f"`{path}` is not UTF-8 text", loc or _byte_at(path, bad)) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # as text mode reads it


def _byte_at(path: str | Path, bad: UnicodeDecodeError) -> Loc:
    """Where in the file the first byte that is not UTF-8 stands (its line shown with
    replacement characters), as a main file's error names it."""
    data = bad.object
    line = data.count(b"\n", 0, bad.start) + 1
    start = data.rfind(b"\n", 0, bad.start) + 1
    col = len(data[start:bad.start].decode("utf-8", "replace")) + 1
    return Loc(Source(str(path), data.decode("utf-8", "replace")), line, col)


def load_program(text: str, path: str) -> Program:
    """Parse `text` (the file at `path`) and its imports; check the definitions' headers."""
    main = parse(text, path)
    program = Program(main)
    errors: list[MdlError] = []
    seen: set[Path] = set()
    pending: list[tuple[n.Module, Path | None]] = [(main, main_directory(path))]
    while pending:
        module, directory = pending.pop(0)
        for fn in module.functions:
            _add_function(program, fn, errors)
        own = {fn.name.name for fn in module.functions}
        for fn in module.functions:
            _check_arguments(fn, own, errors)
        for imp in module.imports:
            try:
                target = _resolve_import(imp, directory)
                if target in seen or target == _resolved(path):
                    continue
                seen.add(target)
                pending.append((parse(read_source(target, imp.loc), str(target)), target.parent))
            except MdlError as exc:
                errors.append(exc)
    for model in main.models:
        if model.name.name.startswith("__"):  # Python's own names (__name__, __doc__)
            errors.append(MdlNameError(
                f"a model cannot be named `{model.name.name}`: a model's name cannot start "
                "with `__`, which Python keeps for a module's own attributes",
                model.name.loc))
        elif model.name.name in MODULE_NAMES:
            errors.append(MdlNameError(
                f"a model cannot be named `{model.name.name}`: the generated module has "
                "an attribute of that name", model.name.loc))
        elif model.name.name in program.models:
            errors.append(MdlNameError(f"model `{model.name.name}` is defined twice", model.loc,
                                       notes=[("first defined here",
                                               program.models[model.name.name].loc)]))
        program.models[model.name.name] = model
    raise_all(errors)
    return program


def _resolved(path: str) -> Path | None:
    p = Path(path)
    return p.resolve() if p.exists() else None


def _resolve_import(imp: n.Import, directory: Path | None) -> Path:
    found = find_import(imp.path, directory)
    if found is not None:
        return found
    where = f"{directory} or the standard library" if directory else "the standard library"
    try:
        folder = directory is not None and (directory / imp.path).is_dir()
    except OSError:  # a name too long for the file system
        folder = False
    if folder:  # it said "cannot find" a folder that is there
        raise MdlNameError(f"`{imp.path}` is a folder in {directory}: an import names a "
                           "file (`import \"layers.mdl\"`)", imp.loc)
    raise MdlNameError(f"cannot find `{imp.path}` (looked in {where})", imp.loc)


def _check_arguments(fn: n.FuncDef, own: set[str], errors: list[MdlError]) -> None:
    """The binding rule of a call (elaborate.py's `check_bindable`) checked where the
    function is defined, so that one never called is checked too: no argument is named
    like a built-in, a function of its own file, or a dim its signature binds before it
    (`def f(a : f32[N], N : int)`; `def f(N : int, a : f32[N])` reads the argument N).
    Functions of other files may be named like its arguments: those depend on what else
    a program imports, and are checked at calls."""
    dims: set[str] = set()
    earlier: set[str] = set()
    for arg in fn.args:
        name = arg.name.name
        # its type first, which may bind a dim of its own name (`a : f32[a]`)
        dims |= {d.id for d in arg.type.dims or () if isinstance(d, n.Name)} - earlier
        if reserved(name) or name in own:
            errors.append(MdlNameError(f"`{name}` is a function and cannot name an argument",
                                       arg.name.loc))
        elif name in dims:
            errors.append(MdlNameError(f"`{name}` is a symbolic dim and cannot name an "
                                       "argument", arg.name.loc))
        earlier.add(name)


def _add_function(program: Program, fn: n.FuncDef, errors: list[MdlError]) -> None:
    name = fn.name.name
    if reserved(name):
        errors.append(MdlNameError(f"`{name}` is a built-in function; choose another name",
                                   fn.name.loc))
        return
    if name in program.functions:
        errors.append(MdlNameError(f"function `{name}` is defined twice", fn.name.loc,
                                   notes=[("first defined here", program.functions[name].loc)]))
        return
    names = [a.name.name for a in fn.args]
    for i, arg in enumerate(fn.args):
        if arg.name.name in names[:i]:
            errors.append(MdlTypeError(f"argument `{arg.name.name}` of `{name}` is declared "
                                       "twice", arg.loc))
    unbound = [t for t in fn.returns or () if t.leading]
    if unbound and not any(arg.type.leading for arg in fn.args):
        errors.append(MdlTypeError(f"`...` in the result type of `{name}` is not bound by its "
                                   "arguments: an argument's type must start with `...` too",
                                   unbound[0].loc))
    if not fn.body.stmts or not isinstance(fn.body.stmts[-1], n.Return):
        errors.append(MdlTypeError(f"function `{name}` must end with a `return`", fn.name.loc))
    program.functions[name] = fn

