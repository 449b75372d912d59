"""Turn generated C++ sources into an importable Python extension, through the cache
(codegen/cache.py).

What every model shares (the Python-facing class, argument checks, arenas, the parameter
store: cpp_runtime/src/) is compiled once per cache into an object file, the runtime; a
model's build then compiles only the model's own code and links it with the runtime, in
one compiler call, without CMake (docs/build.md has the measurements behind this). A key
hashes everything that can change the built file: the sources, CODEGEN_VERSION, the
runtime's sources, the flags, the compiler, Python's ABI and pybind11's version.
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pybind11

from dsl.diagnostics import MdlBuildError, count

from . import CODEGEN_VERSION
from .blas import blas
from .cache import Failed, cached, digest, sha256
from .paths import RUNTIME_DIR
from .templating import environment

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
CUDA_RUNTIME_OBJECT = "mdl_cuda_runtime.o"

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
    found = _output([_compiler()["path"], "-print-file-name=libmvec.so"]).strip()
    return os.path.isabs(found) and os.path.exists(found)


def include_dirs() -> list[str]:
    return [str(RUNTIME_DIR), blas().include_dir,
            sysconfig.get_paths()["include"], pybind11.get_include()]


def render_cmakelists(source_names: Iterable[str], module_name: str, *, debug: bool = False,
                      sanitize: bool = False) -> str:
    """A CMakeLists.txt that builds `source_names` and the runtime into the extension
    `module_name` with the same flags as `build_extension` (what `mdlc emit` writes)."""
    cuda = any(name.endswith(".cu") for name in source_names)
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
    if cuda:  # cuBLAS as the build links it (codegen/cuda_toolkit.py), found by RPATH too
        from .cuda_toolkit import toolkit
        context["include_dirs"].append(toolkit().cublas_include)
        context["libraries"].append(str(toolkit().cublas_library))
        context["rpath"] += f";{toolkit().cublas_library.parent}"
    return _template("CMakeLists.txt.j2").render(context)


def _cmake_cuda(cxx_flags: list[str]) -> dict:
    """CUDA_ARCHITECTURES and the CUDA sources' own flags (the host compiler's go through
    -Xcompiler), for an emitted CMakeLists.txt."""
    from .cuda_toolkit import toolkit
    host = [f for f in cxx_flags[len(LANGUAGE_FLAGS):] if not f.startswith(("-D", "-O"))]
    defines = [f for f in cxx_flags if f.startswith("-D")]
    return {"architectures": toolkit().architectures,
            "flags": [*defines, "-Xcompiler=" + ",".join(host)]}


def cache_key(sources: Mapping[str, str], module_name: str, *, debug: bool = False,
              sanitize: bool = False) -> str:
    """The cache key of a build: equal keys mean interchangeable extension files."""
    return digest(_key_fields(sources, module_name, debug, sanitize))


def build_extension(sources: Mapping[str, str], module_name: str, *, debug: bool = False,
                    sanitize: bool = False, progress: bool | None = None) -> Path:
    """Compile `sources` ({file name: text}) with the runtime into the extension
    `module_name` and return the path of `<module_name><EXT_SUFFIX>` inside the cache; an
    identical earlier build is returned at once. Shows progress on stderr when it is a
    terminal (or `progress`). Raises MdlBuildError with the compiler's first errors when
    the build fails."""
    _check_names(sources, module_name)
    show = sys.stderr.isatty() if progress is None else progress
    if _is_cuda(sources):
        return _build_cuda_extension(sources, module_name, debug, sanitize, show)
    runtime = build_runtime(debug=debug, sanitize=sanitize, progress=show)
    fields = _key_fields(sources, module_name, debug, sanitize)

    def make(work: Path, final: Path) -> None:
        compiled = _write_sources(work, sources, fields)
        command = [_compiler()["path"], *compile_flags(debug, sanitize),
                   # Debug info and sanitizer reports name the sources where they will stay.
                   f"-ffile-prefix-map={work}={final}", f"-I{runtime.precompiled}",
                   *(f"-I{d}" for d in include_dirs()), "-shared", *compiled,
                   str(runtime.object), "-o", str(work / (module_name + EXT_SUFFIX)),
                   *_link_flags(sanitize)]
        _compile(work, [command], f"building {module_name}", show)
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
    fields = _runtime_fields(debug, sanitize)
    compiler = [_compiler()["path"], *compile_flags(debug, sanitize),
                *(f"-I{d}" for d in include_dirs())]

    def make(work: Path, final: Path) -> None:
        (work / "key.json").write_text(json.dumps(fields, indent=2, sort_keys=True) + "\n")
        (work / PRECOMPILED / "mdl").mkdir(parents=True)
        objects = [work / (Path(source).stem + ".o") for source in RUNTIME_SOURCES]
        _compile(work, [
            *([*compiler, "-c", str(RUNTIME_DIR / source), "-o", str(obj)]
              for source, obj in zip(RUNTIME_SOURCES, objects)),
            [*compiler, "-x", "c++-header", str(RUNTIME_DIR / MODEL_HEADER),
             "-o", str(work / PRECOMPILED / f"{MODEL_HEADER}.gch")]],
            "building the mdl runtime (once per cache)", progress)
        # One relocatable object, so a model's link names a single runtime file.
        _compile(work, [[_compiler()["path"], "-r", "-nostdlib", *map(str, objects),
                         "-o", str(work / RUNTIME_OBJECT)]], "linking the mdl runtime", progress)
    built = cached(digest(fields), RUNTIME_OBJECT, make)
    return Runtime(built, built.parent / PRECOMPILED)


def _write_sources(work: Path, sources: Mapping[str, str], fields: dict) -> list[str]:
    """A build directory's sources (work/src) and key.json; the files to compile."""
    (work / "src").mkdir()
    for name, text in sources.items():
        (work / "src" / name).write_text(text)
    (work / "key.json").write_text(json.dumps(fields, indent=2, sort_keys=True) + "\n")
    return [str(work / "src" / n) for n in sorted(sources) if not n.endswith((".h", ".hpp"))]


def _is_cuda(sources: Mapping[str, str]) -> bool:
    """Whether the sources are the cuda target's (its generated file is CUDA C++)."""
    return any(name.endswith(".cu") for name in sources)


def cuda_flags(debug: bool = False) -> list[str]:
    """nvcc's flags for the cuda target's runtime and models: the GPU architectures
    (codegen/cuda_toolkit.py), and the host compiler's flags as for the cpu target."""
    from .cuda_toolkit import toolkit
    host = ["-fPIC", "-fvisibility=hidden", *CODE_FLAGS, *(() if debug else ("-march=native",))]
    return ["-std=c++17", *toolkit().arch_flags, "-Xcompiler", ",".join(host),
            *(("-O0", "-g") if debug else ("-O3", "-DNDEBUG")), blas().define,
            *(("-DMDL_LIBMVEC",) if _libmvec() else ())]


def _cuda_link_flags() -> list[str]:
    """cuBLAS and the BLAS the runtime calls, in nvcc's spelling of linker options."""
    from .cuda_toolkit import toolkit
    flags = []
    for flag in [*toolkit().link_flags(), *_link_flags(False)]:
        if flag.startswith("-Wl,"):
            flags += ["-Xlinker", flag[len("-Wl,"):]]
        elif flag.startswith("/"):  # nvcc takes no versioned .so as an input file
            flags += [f"-L{Path(flag).parent}", f"-l:{Path(flag).name}"]
        else:
            flags.append(flag)
    return flags


def _cuda_fields(debug: bool) -> dict:
    from .cuda_toolkit import toolkit
    tk = toolkit()
    return {"nvcc": tk.version, "nvcc_path": tk.nvcc, "cublas": str(tk.cublas_library),
            "cuda_flags": cuda_flags(debug)}


def _build_cuda_extension(sources: Mapping[str, str], module_name: str, debug: bool,
                          sanitize: bool, show: bool) -> Path:
    """The cuda target's build: the generated .cu compiled by nvcc and linked with the
    runtime (the same object as the cpu target's) and the cuda runtime object."""
    if sanitize:
        raise MdlBuildError("--sanitize builds are for the cpu target (the sanitizers "
                            "instrument host code); build the cuda target without it")
    from .cuda_toolkit import toolkit
    runtime = build_runtime(debug=debug, progress=show)
    device = build_cuda_runtime(debug=debug, progress=show)
    fields = {**_key_fields(sources, module_name, debug, False), "target": "cuda",
              "cuda_runtime": str(device), **_cuda_fields(debug)}

    def make(work: Path, final: Path) -> None:
        compiled = _write_sources(work, sources, fields)
        command = [toolkit().nvcc, *cuda_flags(debug), "-shared",
                   *(f"-I{d}" for d in [*include_dirs(), toolkit().cublas_include]),
                   *compiled, str(runtime.object), str(device), "-o",
                   str(work / (module_name + EXT_SUFFIX)), *_cuda_link_flags()]
        _compile(work, [command], f"building {module_name} (cuda)", show)
    return cached(digest(fields), module_name + EXT_SUFFIX, make)


def build_cuda_runtime(*, debug: bool = False, progress: bool = False) -> Path:
    """The cuda target's runtime object (cpp_runtime/src/cuda_device.cu: memory, copies,
    the optimizer's kernels, the fault check), compiled once per cache."""
    from .cuda_toolkit import toolkit
    fields = {"product": "cuda runtime", **_cuda_fields(debug), **_environment()}

    def make(work: Path, final: Path) -> None:
        (work / "key.json").write_text(json.dumps(fields, indent=2, sort_keys=True) + "\n")
        _compile(work, [[toolkit().nvcc, *cuda_flags(debug),
                         *(f"-I{d}" for d in [*include_dirs(), toolkit().cublas_include]),
                         "-c", str(RUNTIME_DIR / CUDA_RUNTIME_SOURCE),
                         "-o", str(work / CUDA_RUNTIME_OBJECT)]],
                 "building the mdl cuda runtime (once per cache)", progress)
    return cached(digest(fields), CUDA_RUNTIME_OBJECT, make)


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
            "compiler": _compiler(),
            "python": {"ext_suffix": EXT_SUFFIX, "soabi": sysconfig.get_config_var("SOABI"),
                       "version": list(sys.version_info[:2])},
            "pybind11": pybind11.__version__, "blas": str(blas().library)}


def _runtime_fields(debug: bool, sanitize: bool) -> dict:
    return {"product": "runtime", "flags": compile_flags(debug, sanitize),
            **_environment()}


def _key_fields(sources: Mapping[str, str], module_name: str, debug: bool,
                sanitize: bool) -> dict:
    """What the key hashes, kept readable: it is also written to the build's key.json."""
    return {"product": "module", "module": module_name,
            "sources": {name: sha256(text) for name, text in sources.items()},
            "runtime_key": digest(_runtime_fields(debug, sanitize)),
            "flags": compile_flags(debug, sanitize), "link": _link_flags(sanitize),
            **_environment()}


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


def _link_flags(sanitize: bool) -> list[str]:
    """The BLAS lives in a Python package, not a system directory: modules find it by
    RPATH (codegen/blas.py)."""
    return [*(SANITIZE_FLAGS[:1] if sanitize else ()), *blas().link_flags(),
            *(("-lmvec",) if _libmvec() else ())]


@functools.cache
def _compiler() -> dict:
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
    name = f"`{what['module']}`" if "module" in what else "the mdl runtime"
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
