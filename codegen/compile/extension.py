"""Building one extension: a target's generated sources compiled and linked with the
runtime (codegen/compile/runtime.py) by the target's toolchain (codegen/compile/toolchain.py),
its sources compiled side by side (a generated one in parts: codegen/compile/parts.py) and
linked, through the cache (codegen/compile/cache.py). Its key hashes
everything that can change the built file: the sources, the toolchain and its flags, and
the environment (codegen/compile/environment.py: CODEGEN_VERSION, the runtime's sources,
the compiler, Python's ABI, pybind11's version, the BLAS, the compilers' environment
variables)."""
from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .cache import cached, digest, reading, sha256, stderr_is_terminal, write_key
from .commands import run_commands
from .environment import EXT_SUFFIX, environment_key
from .parts import defines, jobs_beside, split, units
from .replacing import copy_over

if TYPE_CHECKING:  # a target names its toolchain, which builds through this file
    from ..backend.target import Target

HEADER_SUFFIXES = (".h", ".hpp")
SOURCE_SUFFIXES = (".cpp", ".cc", ".cu", *HEADER_SUFFIXES)
# The module's type stub (codegen/backend/interface.py): among the generated files, part of
# the key, not compiled, and kept beside the extension in the cache and where it is installed
STUB_SUFFIX = ".pyi"


def cache_key(sources: Mapping[str, str], module_name: str, target: Target, *,
              debug: bool = False, sanitize: bool = False) -> str:
    """The cache key of a build: equal keys mean interchangeable extension files."""
    return digest(_key_fields(sources, module_name, target, debug, sanitize))


def build_extension(sources: Mapping[str, str], module_name: str, target: Target, *,
                    debug: bool = False, sanitize: bool = False,
                    progress: bool | None = None) -> Path:
    """Compile `sources` ({file name: text}), generated for `target`, with the runtime into
    the extension `module_name`, by the target's toolchain, and return the path of
    `<module_name><EXT_SUFFIX>` inside the cache; an identical earlier build is returned
    at once. Shows progress on stderr when it is a terminal (or `progress`). Raises
    MdlBuildError with the compiler's first errors when the build fails."""
    _check_names(sources, module_name)
    toolchain = target.toolchain
    toolchain.check(sanitize)
    show = stderr_is_terminal() if progress is None else progress
    fields = _key_fields(sources, module_name, target, debug, sanitize)
    label = f"building {module_name}{toolchain.label}"
    parts = _parts(sources, target.source, toolchain)

    def make(work: Path, final: Path) -> None:
        with reading(lambda: toolchain.runtime(debug, sanitize, show),
                     lambda linked: (*linked.objects, *linked.includes)) as linked:
            compile_and_link(work, final, linked)

    def compile_and_link(work: Path, final: Path, linked) -> None:
        write_key(work, fields)
        paths = _write_sources(work, sources)
        compiles = [(path, []) for path in paths if Path(path).name != target.source]
        compiles += [(path, defines(part) if len(parts) > 1 else [])
                     for path in paths if Path(path).name == target.source for part in parts]
        objects = [work / f"part{k}.o" for k in range(len(compiles))]
        output = work / (module_name + EXT_SUFFIX)
        run_commands(work, [toolchain.compile(source, flags, linked, obj, final, debug, sanitize)
                            for (source, flags), obj in zip(compiles, objects)], label, show)
        run_commands(work, [toolchain.link(objects, linked, output, debug, sanitize)],
                     label, show)
        for obj in objects:  # in the module now: the cache keeps only what it loads
            obj.unlink()
        stub = work / "src" / (module_name + STUB_SUFFIX)
        if stub.is_file():
            shutil.copyfile(stub, work / stub.name)
    return cached(digest(fields), module_name + EXT_SUFFIX, make)


def install(built: Path, directory: str | Path, module_name: str) -> Path:
    """Copy a built extension to DIR/MOD<EXT_SUFFIX> (`mdlc build -o DIR`), and its type
    stub to DIR/MOD.pyi."""
    target = Path(directory) / f"{module_name}{EXT_SUFFIX}"
    target.parent.mkdir(parents=True, exist_ok=True)
    copy_over(built, target)  # not in place: a Python that imported the old one runs it
    stub = built.with_name(module_name + STUB_SUFFIX)
    if stub.is_file():
        copy_over(stub, target.with_name(stub.name))
    return target


def compiled(names: Iterable[str]) -> list[str]:
    """Of a module's generated files, those a compiler is given: no headers, no stub."""
    return sorted(n for n in names if not n.endswith((*HEADER_SUFFIXES, STUB_SUFFIX)))


def _key_fields(sources: Mapping[str, str], module_name: str, target: Target, debug: bool,
                sanitize: bool) -> dict:
    """What the key hashes, kept readable: it is also written to the build's key.json. The
    runtime objects a module links are built from what it holds (its toolchain's flags,
    the runtime's sources), so their own keys need not be in it."""
    return {"product": "module", "module": module_name,
            "sources": {name: sha256(text) for name, text in sources.items()},
            **target.toolchain.fields(debug, sanitize), **environment_key()}


def _write_sources(work: Path, sources: Mapping[str, str]) -> list[str]:
    """A build directory's sources (work/src); the files to compile."""
    (work / "src").mkdir()
    for name, text in sources.items():
        (work / "src" / name).write_text(text)
    return [str(work / "src" / n) for n in compiled(sources)]


def _parts(sources: Mapping[str, str], main: str, toolchain) -> list[list[str]]:
    """The parts the target's main source (`main`: a module's module.cpp) is compiled in,
    side by side (codegen/compile/parts.py): one, compiled whole, unless it marks units
    worth several; each of the other sources (a GPU target's kernels) takes a core of its
    own, compiled whole."""
    names = compiled(sources)
    if main not in names:
        return [[]]
    return split(units(sources[main]), jobs_beside(len(names) - 1), toolchain.part_bytes)


def _check_names(sources: Mapping[str, str], module_name: str) -> None:
    if not module_name.isidentifier():
        raise ValueError(f"module name {module_name!r} is not a Python identifier")
    for name in sources:
        if Path(name).name != name or not name.endswith((*SOURCE_SUFFIXES, STUB_SUFFIX)):
            raise ValueError(f"source {name!r}: a source is a plain file name ending in "
                             f"{' '.join(SOURCE_SUFFIXES)} (or the stub's {STUB_SUFFIX})")
