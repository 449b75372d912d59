"""The cache's index: the module built from these .mdl files with these options, found
without checking or generating anything. A cached `mdlc build` imports only this module
and what it needs (no parser, no primitive table, no NumPy, no Jinja).

An entry, `index/<key>`, is keyed by the text of the .mdl file and of every file it
imports (followed as the front end follows them: dsl/imports.py), the module's name, the
options, a digest of the compiler's own sources (dsl/, codegen/, templates/) and the
environment (codegen/compile/environment.py: the C++ compiler, the runtime's sources, the
BLAS, ...). It names the built module and the toolchain that built it, whose fields (nvcc
and cuBLAS for the cuda target) must still be those in the module's key.json: the
toolchain is known only once the target is, which the index does without."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import dsl
from dsl.imports import closure

from ..backend.paths import PACKAGE, TEMPLATES_DIR
from ..ir.diagnostics import Diagnostic, Loc, MdlBuildError, Source
from .cache import cache_dir, digest, intact, read_key, used
from .environment import environment_key
from .options import BuildOptions
from .replacing import write_over
from .toolchain import EMULATED_CUDA, HOST, NVCC, Toolchain

COMPILER_SOURCES = [Path(dsl.__file__).parent, PACKAGE, TEMPLATES_DIR]
TOOLCHAINS = {t.name: t for t in (HOST, NVCC, EMULATED_CUDA)}


def lookup(path: str | Path, module_name: str, options: BuildOptions,
           warn: Callable[[Diagnostic], None] | None = None) -> Path | None:
    """The module an earlier build of these .mdl files and options made, if it is still
    current, its checker's warnings given to `warn` as that build found them; None sends
    the caller to the full build."""
    entry = _entry(path, module_name, options)
    if entry is None or not entry.is_file():
        return None
    try:
        recorded = json.loads(entry.read_text())
        built = Path(recorded["built"])
        toolchain = TOOLCHAINS[recorded["toolchain"]]
        stored = read_key(built.parent)
        current = toolchain.fields(options.debug, options.sanitize)
        said = replayed(recorded["warnings"], str(path))
    except (OSError, ValueError, KeyError, TypeError, MdlBuildError):
        return None  # an older mdl's entry, a module deleted by hand, nvcc gone, ...
    fresh = all(stored.get(k) == v for k, v in json.loads(json.dumps(current)).items())
    if not (fresh and intact(built)):
        return None  # a damaged module: built again
    for w in said if warn else ():
        warn(w)
    return used(built)


def remember(path: str | Path, module_name: str, options: BuildOptions, built: Path,
             toolchain: Toolchain, warnings: Sequence[Diagnostic] = ()) -> None:
    """Record that `toolchain` built `built` from these .mdl files and options, with these
    warnings of the checker, where the cache lets us: the index only saves work, so a
    cache that cannot hold it (read-only, `index` not a directory) goes without, and the
    next build checks in full."""
    entry = _entry(path, module_name, options)
    if entry is None:
        return
    with contextlib.suppress(OSError):
        entry.parent.mkdir(parents=True, exist_ok=True)
        write_over(entry, json.dumps({"built": str(built), "toolchain": toolchain.name,
                                      "warnings": recorded(warnings, str(path))}))


def recorded(diagnostics: Sequence[Diagnostic], main: str) -> dict:
    """Diagnostics as JSON: each with its place, and the text of each source they quote
    once. The main file is named by `main`, the path it was given as: a later build may
    give it otherwise (`./m.mdl`), and is told by its own name (imports are named by
    their resolved paths, the same from anywhere)."""
    texts: dict[str, str] = {}

    def place(loc: Loc | None) -> list | None:
        if loc is None:
            return None
        name = None if loc.source.path == main else loc.source.path
        texts.setdefault(name or "", loc.source.text)
        return [name, loc.line, loc.col, loc.length]
    return {"sources": texts,
            "diagnostics": [{"message": d.message, "severity": d.severity, "label": d.label,
                             "loc": place(d.loc),
                             "notes": [[text, place(loc)] for text, loc in d.notes]}
                            for d in diagnostics]}


def replayed(data: dict, main: str) -> list[Diagnostic]:
    """The diagnostics `recorded` wrote, the main file named by `main`."""
    sources = {name: Source(name or main, text) for name, text in data["sources"].items()}

    def place(where: list | None) -> Loc | None:
        if where is None:
            return None
        name, line, col, length = where
        return Loc(sources[name or ""], int(line), int(col), int(length))
    return [Diagnostic(str(d["message"]), place(d["loc"]), str(d["severity"]),
                       str(d["label"]), [(str(text), place(loc)) for text, loc in d["notes"]])
            for d in data["diagnostics"]]


def _entry(path: str | Path, module_name: str, options: BuildOptions) -> Path | None:
    """Where the index keeps the build of these .mdl files with these options (None when
    the import closure cannot be read: the full build reports why)."""
    try:
        texts = closure(Path(path))
    except (OSError, UnicodeDecodeError):
        return None
    if texts is None:
        return None
    fields = {"mdl": texts, "module": module_name, "options": repr(options),
              "compiler_sources": _compiler_digest(), "environment": environment_key()}
    return cache_dir() / "index" / digest(fields)


@functools.cache
def _compiler_digest() -> str:
    """Our own code generates the C++: a changed compiler source is a changed build."""
    h = hashlib.sha256()
    for root in COMPILER_SOURCES:
        for f in sorted(root.rglob("*")):
            if f.suffix in (".py", ".lark", ".mdl", ".j2"):
                h.update(f.read_bytes())
    return h.hexdigest()
