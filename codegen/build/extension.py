"""Turn generated C++ sources into an importable Python extension, through the cache
(codegen/build/cache.py).

What every model shares (the Python-facing class, argument checks, arenas, the parameter
store: cpp_runtime/src/) is compiled once per cache into an object file, the runtime; a
model's build then compiles only the model's own code and links it with the runtime, in
one compiler call, without CMake (docs/build.md has the measurements behind this). Which
compiler, flags and further runtime objects a target's build takes is its toolchain's
(codegen/build/toolchain.py); this file runs the build every toolchain shares. A key hashes
everything that can change the built file: the sources, the toolchain and its flags,
CODEGEN_VERSION, the runtime's sources, the compiler, Python's ABI and pybind11's version.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
import pybind11

from ..backend.paths import RUNTIME_DIR
from ..backend.templating import environment
from ..ir.diagnostics import MdlBuildError, count
from .blas import blas
from .cache import CODEGEN_VERSION, Failed, cached, digest, sha256
from .cuda_toolkit import toolkit

if TYPE_CHECKING:  # a target names its toolchain, which builds through this file
    from ..backend.target import Target

EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
RUNTIME_SOURCES = ("src/python_module.cpp", "src/checkpoint.cpp")  # relative to RUNTIME_DIR
RUNTIME_OBJECT = "mdl_runtime.o"
MODEL_HEADER = "mdl/python.h"   # what generated code includes first (precompiled)
PRECOMPILED = "precompiled"

LANGUAGE_FLAGS = ("-std=c++17", "-fPIC", "-fvisibility=hidden")  # CMake spells these itself
# -fopenmp-simd: `#pragma omp simd` (reductions that may vectorize) without OpenMP threads.
# -fno-math-errno: nothing reads errno, so calls to exp, tanh, sqrt, ... have no side
# effect: a loop calling them vectorizes even where a `where` uses only one of its arms
# (with errno, GCC computes each arm under its condition, and control flow stops it).
CODE_FLAGS = ("-fopenmp-simd", "-fno-math-errno")
RELEASE_FLAGS = ("-O3", "-march=native", "-DNDEBUG")
DEBUG_FLAGS = ("-O0", "-g")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer")
SOURCE_SUFFIXES = (".cpp", ".cc", ".cu", ".h", ".hpp")
CUDA_RUNTIME_SOURCE = "src/cuda_device.cu"  # the cuda target's mdl::Device (relative to RUNTIME_DIR)

ERROR_LINES = 25  # of the compiler's output quoted in an MdlBuildError
FIRST_ERROR = re.compile(r"error:|undefined reference")
# Lines a compiler prints before an error to say where it was reached from.
CONTEXT = re.compile(r"^(In file included from |\s+from |\S+: In |\S+:\d+:\d+: +required )")


def compile_flags(debug: bool = False, sanitize: bool = False) -> list[str]:
    """The C++ compiler's flags for the runtime and for models (sanitizer reports want
    line numbers and honest frames, so sanitize implies debug)."""
    debug = debug or sanitize
    return [*LANGUAGE_FLAGS, *CODE_FLAGS, *(DEBUG_FLAGS if debug else RELEASE_FLAGS),
            *(SANITIZE_FLAGS if sanitize else ()), blas().define,
            *(("-DMDL_LIBMVEC",) if _libmvec() else ())]


@functools.cache
def _libmvec() -> bool:
    """Whether the compiler links glibc's vector math library (cpp_runtime/mdl/vector_math.h
    then lets loops call its SIMD exp, tanh, ...)."""
    found = _output([host_compiler()["path"], "-print-file-name=libmvec.so"]).strip()
    return os.path.isabs(found) and os.path.exists(found)


def include_dirs() -> list[str]:
    return [str(RUNTIME_DIR), blas().include_dir,
            sysconfig.get_paths()["include"], pybind11.get_include()]


def render_cmakelists(source_names: Iterable[str], module_name: str, target: Target, *,
                      debug: bool = False, sanitize: bool = False) -> str:
    """A CMakeLists.txt that builds `source_names`, generated for `target`, and the runtime
    into the extension `module_name` with the same flags as `build_extension` (what `mdlc
    emit` writes). CMake compiles CUDA sources (a target's module.cu) with nvcc."""
    cuda = target.source.endswith(".cu")
    context = {
        "name": module_name,
        "sources": sorted(source_names),
        "runtime_sources": [str(RUNTIME_DIR / source) for source in RUNTIME_SOURCES] + (
            [str(RUNTIME_DIR / CUDA_RUNTIME_SOURCE)] if cuda else []),
        "build_type": "Debug" if debug or sanitize else "Release",
        "cxx_flags": compile_flags(debug, sanitize)[len(LANGUAGE_FLAGS):],
        "link_flags": SANITIZE_FLAGS[:1] if sanitize else [],
        "include_dirs": [str(RUNTIME_DIR), blas().include_dir],
        "libraries": [str(blas().library), *blas().system_libraries,
                      *(["mvec"] if _libmvec() else [])],
        "rpath": blas().lib_dir,
        "cuda": _cmake_cuda(compile_flags(debug, sanitize)) if cuda else None,
    }
    if cuda:  # cuBLAS as the build links it (codegen/build/cuda_toolkit.py), found by RPATH too
        context["include_dirs"].append(toolkit().cublas_include)
        context["libraries"].append(str(toolkit().cublas_library))
        context["rpath"] += f";{toolkit().cublas_library.parent}"
    return _template("CMakeLists.txt.j2").render(context)


def _cmake_cuda(cxx_flags: list[str]) -> dict:
    """CUDA_ARCHITECTURES and the CUDA sources' own flags (the host compiler's go through
    -Xcompiler), for an emitted CMakeLists.txt."""
    host = [f for f in cxx_flags[len(LANGUAGE_FLAGS):] if not f.startswith(("-D", "-O"))]
    defines = [f for f in cxx_flags if f.startswith("-D")]
    return {"architectures": toolkit().architectures,
            "flags": [*defines, "-Xcompiler=" + ",".join(host)]}


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
    show = sys.stderr.isatty() if progress is None else progress
    linked = toolchain.runtime(debug, sanitize, show)
    fields = _key_fields(sources, module_name, target, debug, sanitize)

    def make(work: Path, final: Path) -> None:
        _write_key(work, fields)
        compiled = _write_sources(work, sources)
        command = toolchain.command(compiled, linked, work / (module_name + EXT_SUFFIX),
                                    final, debug, sanitize)
        _compile(work, [command], f"building {module_name}{toolchain.label}", show)
    return cached(digest(fields), module_name + EXT_SUFFIX, make)


@dataclass(frozen=True)
class Runtime:
    """The runtime as built for one set of flags: its object file, and a directory
    holding `mdl/python.h` precompiled (found before the header itself, it spares each
    model a few hundred milliseconds of parsing)."""
    object: Path
    precompiled: Path


def build_runtime(*, debug: bool = False, sanitize: bool = False,
                  progress: bool = False) -> Runtime:
    """The runtime for these flags, compiled once per cache."""
    compiler = [host_compiler()["path"], *compile_flags(debug, sanitize),
                *(f"-I{d}" for d in include_dirs())]

    def precompile(work: Path) -> list[list[str]]:
        (work / PRECOMPILED / "mdl").mkdir(parents=True)
        return [[*compiler, "-x", "c++-header", str(RUNTIME_DIR / MODEL_HEADER),
                 "-o", str(work / PRECOMPILED / f"{MODEL_HEADER}.gch")]]
    built = runtime_object(RUNTIME_OBJECT, _runtime_fields(debug, sanitize), compiler,
                           [RUNTIME_DIR / source for source in RUNTIME_SOURCES],
                           "the mdl runtime", progress, precompile)
    return Runtime(built, built.parent / PRECOMPILED)


def runtime_object(product: str, fields: dict, compiler: list[str], sources: list[Path],
                   what: str, progress: bool,
                   beside: Callable[[Path], list[list[str]]] = lambda work: []) -> Path:
    """`product`, compiled once per cache for `fields` (their "product" names it): each of
    `sources` compiled by `compiler` (a command up to its input file), side by side with
    the commands `beside(work)` returns, then all linked into one relocatable object, so
    that a model's link names a single file for them."""
    def make(work: Path, final: Path) -> None:
        _write_key(work, fields)
        objects = [work / (source.stem + ".o") for source in sources]
        _compile(work, [*([*compiler, "-c", str(source), "-o", str(obj)]
                          for source, obj in zip(sources, objects)), *beside(work)],
                 f"building {what} (once per cache)", progress)
        _compile(work, [[host_compiler()["path"], "-r", "-nostdlib", *map(str, objects),
                         "-o", str(work / product)]], f"linking {what}", progress)
    return cached(digest(fields), product, make)


def _write_key(work: Path, fields: dict) -> None:
    """A build directory's key.json: what its key was computed from, readable."""
    (work / "key.json").write_text(json.dumps(fields, indent=2, sort_keys=True) + "\n")


def _write_sources(work: Path, sources: Mapping[str, str]) -> list[str]:
    """A build directory's sources (work/src); the files to compile."""
    (work / "src").mkdir()
    for name, text in sources.items():
        (work / "src" / name).write_text(text)
    return [str(work / "src" / n) for n in sorted(sources) if not n.endswith((".h", ".hpp"))]


def _check_names(sources: Mapping[str, str], module_name: str) -> None:
    if not module_name.isidentifier():
        raise ValueError(f"module name {module_name!r} is not a Python identifier")
    for name in sources:
        if Path(name).name != name or not name.endswith(SOURCE_SUFFIXES):
            raise ValueError(f"source {name!r}: a source is a plain file name ending in "
                             f"{' '.join(SOURCE_SUFFIXES)}")


def _template(name: str) -> jinja2.Template:
    return environment().get_template(name)


def _environment() -> dict:
    """What decides every build besides its own sources and flags."""
    return {"codegen_version": CODEGEN_VERSION, "runtime": _runtime_digest(),
            "compiler": host_compiler(),
            "python": {"ext_suffix": EXT_SUFFIX, "soabi": sysconfig.get_config_var("SOABI"),
                       "version": list(sys.version_info[:2])},
            "pybind11": pybind11.__version__, "blas": str(blas().library)}


def _runtime_fields(debug: bool, sanitize: bool) -> dict:
    return {"product": "runtime", "flags": compile_flags(debug, sanitize),
            **_environment()}


def _key_fields(sources: Mapping[str, str], module_name: str, target: Target, debug: bool,
                sanitize: bool) -> dict:
    """What the key hashes, kept readable: it is also written to the build's key.json. The
    runtime objects a module links are built from what it holds (its toolchain's flags,
    the runtime's sources), so their own keys need not be in it."""
    return {"product": "module", "module": module_name,
            "sources": {name: sha256(text) for name, text in sources.items()},
            **target.toolchain.fields(debug, sanitize), **_environment()}


def environment_key() -> dict:
    """What besides the sources decides a build (the pipeline's index keys on it too)."""
    return _environment()


def _runtime_digest() -> str:
    """Every file under cpp_runtime/, read on each call: headers change during a session."""
    h = hashlib.sha256()
    for path in sorted(p for p in RUNTIME_DIR.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(RUNTIME_DIR)).encode() + b"\0")
        h.update(sha256(path.read_bytes()).encode())
    return h.hexdigest()


def link_flags(sanitize: bool) -> list[str]:
    """The BLAS lives in a Python package, not a system directory: modules find it by
    RPATH (codegen/build/blas.py)."""
    return [*(SANITIZE_FLAGS[:1] if sanitize else ()), *blas().link_flags(),
            *(("-lmvec",) if _libmvec() else ())]


@functools.cache
def host_compiler() -> dict:
    """The C++ compiler, and its identity: `--version` and what
    `-march=native` means on this machine (a shared cache may serve several CPUs)."""
    path = shutil.which(os.environ.get("CXX") or "c++")
    if path is None:
        raise MdlBuildError("no C++ compiler found: install g++ or clang++, or set CXX")
    version = _output([path, "--version"])
    native = _output([path, *RELEASE_FLAGS, "-E", "-v", "-x", "c++", os.devnull, "-o",
                      os.devnull])
    return {"path": path, "version": version.splitlines()[0], "identity": sha256(version + native)}


def _output(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    return done.stdout + done.stderr


def _compile(work: Path, commands: list[list[str]], label: str, show: bool) -> None:
    """Run compiler commands side by side; their output goes to work/build.log."""
    procs: list[_Process] = []
    try:
        with _Progress(label, show) as progress:
            procs = [_Process(command) for command in commands]
            while any(p.running() for p in procs):
                progress.draw()
                time.sleep(0.05)
    finally:
        for p in procs:
            p.stop()
    log = "".join(f"{' '.join(p.command)}\n{p.output()}" for p in procs)
    (work / "build.log").write_text(log)
    if any(p.status for p in procs):
        raise Failed(log, _describe_failure)


class _Process:
    """A compiler run whose output a background thread collects (a full pipe would
    stall it)."""

    def __init__(self, command: list[str]):
        self.command = command
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout),
                                       daemon=True)
        self.reader.start()

    def running(self) -> bool:
        return self.reader.is_alive() or self.proc.poll() is None

    @property
    def status(self) -> int:
        return self.proc.wait()

    def output(self) -> str:
        self.reader.join()
        return "".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:  # interrupted: do not leave a compiler running
            self.proc.kill()
            self.proc.wait()


class _Progress:
    """`building charlm... 2s` on stderr, redrawn in place; nothing when disabled."""

    def __init__(self, label: str, enabled: bool):
        self.label, self.enabled = label, enabled
        self.start = time.monotonic()
        self.shown = ""

    def __enter__(self) -> _Progress:
        self.draw()
        return self

    def __exit__(self, *exc) -> None:
        self._write("")

    def draw(self) -> None:
        self._write(f"{self.label}... {time.monotonic() - self.start:.0f}s")

    def _write(self, text: str) -> None:
        if not self.enabled or text == self.shown:
            return
        # Spaces, not terminal escapes, erase the old text: the stream may be a log file.
        sys.stderr.write("\r" + text.ljust(len(self.shown)) + ("" if text else "\r"))
        sys.stderr.flush()
        self.shown = text


def _describe_failure(kept: Path, log: str) -> str:
    what = json.loads((kept / "key.json").read_text())
    name = f"`{what['module']}`" if "module" in what else f"the mdl {what['product']}"
    return (f"building {name} failed; the compiler said:\n{_first_errors(log)}\n"
            f"the build directory is kept at {kept} (full log: {kept / 'build.log'})")


def _first_errors(log: str) -> str:
    """The first error: the lines that say where it was reached from, the error, its source
    line and notes; then a count of what the full log holds beyond it."""
    lines = log.splitlines()
    first = next((i for i, line in enumerate(lines) if FIRST_ERROR.search(line)), None)
    if first is None:  # no recognizable error (a crash, a killed compiler): the log's end
        return "\n".join(lines[-ERROR_LINES:])
    start = first
    while start > 0 and CONTEXT.match(lines[start - 1]):
        start -= 1
    end = next((i for i in range(first + 1, len(lines))
                if CONTEXT.match(lines[i]) or FIRST_ERROR.search(lines[i])), len(lines))
    end = min(end, start + ERROR_LINES)
    rest = sum(1 for line in lines[end:] if FIRST_ERROR.search(line))
    more = [f"... and {count(rest, 'more error')} in the full log"] if rest else []
    return "\n".join(lines[start:end] + more)
