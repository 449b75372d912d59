"""The runtime, compiled once per cache and flag set, not per model: what every model
shares (the Python-facing class, argument checks, arenas, the parameter stores:
cpp_runtime/src/) becomes one relocatable object, and `mdl/python.h`, the header every
generated file includes first, is precompiled beside it (docs/build.md has the
measurements behind this). `runtime_object` also builds the further runtime objects a
toolchain links (codegen/compile/toolchain.py)."""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..backend.paths import RUNTIME_DIR
from ..ir.diagnostics import MdlBuildError
from .blas import blas
from .cache import cache_dir, cached, digest, intact, write_key
from .commands import FIRST_ERROR, run_commands
from .environment import environment_key
from .compiler import host_compiler
from .flags import compile_flags, include_dirs, openmp_library

# relative to RUNTIME_DIR
RUNTIME_SOURCES = ("src/python_module.cpp", "src/host_device.cpp", "src/products.cpp",
                   "src/faults.cpp", "src/call.cpp")
# The Python face: pybind11 glue that runs once a call, around the model's code, and is
# most of the runtime's build. At -O1 with small functions inlined it compiles in 30 s
# instead of 47 at -O3 (one Zen 3 core), and a call takes what it took within 2-4% (0.1
# us); -O1 alone was 10% slower (docs/build.md, "A runtime compiled once"). The second flag
# is GCC's: Clang ignores it, with a warning, so only GCC is given it. The glue includes
# no BLAS header (src/blas_control.h), so its object, cached on its own as GLUE_OBJECT, is
# one for every BLAS and set of product kernels.
GLUE_SOURCE = "src/python_module.cpp"
GLUE_OPTIMIZATION = ("-O1",)
GCC_GLUE_OPTIMIZATION = ("-finline-small-functions",)
GLUE_OBJECT = "mdl_glue.o"
RUNTIME_OBJECT = "mdl_runtime.o"
MODEL_HEADER = "mdl/python.h"   # what generated code includes first (precompiled)
PRECOMPILED = "precompiled"
CUDA_RUNTIME_SOURCE = "src/cuda_device.cu"  # the cuda target's mdl::Device (as above)


@dataclass(frozen=True)
class Runtime:
    """The runtime as built for one set of flags: its object file, and a directory
    holding `mdl/python.h` precompiled (found before the header itself, it spares each
    model a few hundred milliseconds of parsing)."""
    object: Path
    precompiled: Path


def build_runtime(*, debug: bool = False, sanitize: bool = False,
                  progress: bool = False) -> Runtime:
    """The runtime for these flags, compiled once per cache. The glue's object, the same
    for every BLAS, comes from its own cache entry; where that is not built yet, it is
    compiled side by side with the rest and then cached there too."""
    compiler = [host_compiler()["path"], *compile_flags(debug, sanitize),
                *(f"-I{d}" for d in include_dirs())]
    glue = glue_fields(debug, sanitize)
    cached_glue = cache_dir() / digest(glue) / GLUE_OBJECT

    def precompile(work: Path) -> list[list[str]]:
        if not sanitize:  # a sanitized object loads only into a sanitized process
            check_compiler(work)
        (work / PRECOMPILED / "mdl").mkdir(parents=True)
        return [[*compiler, "-x", "c++-header", str(RUNTIME_DIR / MODEL_HEADER),
                 "-o", str(work / PRECOMPILED / f"{MODEL_HEADER}.gch")]]

    def keep_glue(objects: list[Path]) -> list[Path]:
        """The glue's object, from `objects` (compiled here) or its cache entry."""
        if not intact(cached_glue):
            compiled = next(o for o in objects if o.stem == Path(GLUE_SOURCE).stem)

            def copy(work: Path, final: Path) -> None:
                write_key(work, glue)
                shutil.copyfile(compiled, work / GLUE_OBJECT)
            cached(digest(glue), GLUE_OBJECT, copy)
        return [o for o in objects if o.stem != Path(GLUE_SOURCE).stem] + [cached_glue]

    units = [] if intact(cached_glue) else [(glue["command"], RUNTIME_DIR / GLUE_SOURCE)]
    units += [(compiler, RUNTIME_DIR / source) for source in RUNTIME_SOURCES
              if source != GLUE_SOURCE]
    built = runtime_object(RUNTIME_OBJECT, runtime_fields(debug, sanitize), units,
                           "the mdl runtime", progress, precompile, keep_glue,
                           also=(f"{PRECOMPILED}/{MODEL_HEADER}.gch",))
    return Runtime(built, built.parent / PRECOMPILED)


# throws, so its shared object needs the C++ runtime (gcc, clang: the C drivers link none)
LINK_PROBE = """#include <stdexcept>
extern "C" int mdl_links_cxx(int n) {
  try { if (n > 0) throw std::runtime_error("probe"); } catch (const std::exception&) { return 1; }
  return 0;
}
"""
OPENMP_PROBE = """#include <omp.h>
extern "C" int mdl_links_openmp() {
  int threads = 0;
  #pragma omp parallel num_threads(2)
  { if (omp_get_thread_num() == 0) threads = omp_get_num_threads(); }
  return threads;
}
"""


def check_compiler(work: Path) -> None:
    """Before the runtime's first build: the compiler must link C++'s own library into a
    shared object, as it links modules (CXX=gcc linked modules Python could not import,
    `undefined symbol: _ZTVN10__cxxabiv...`), and build OpenMP code with the runtime a
    module links (flags.openmp_library: Clang's needs its OpenMP package)."""
    cxx = host_compiler()["path"]
    failed = _probe(work, "links_cxx", LINK_PROBE, [])
    if failed is not None and failed[0] == "load":
        raise MdlBuildError(f"{cxx} does not link C++ into a shared object, so modules it "
                            f"links could not be imported ({failed[1]}): set CXX to a C++ "
                            "driver (g++ or clang++, not gcc or clang)")
    if failed is not None:  # the compiler or its linker failed: a C++ driver's advice is no help
        raise MdlBuildError(f"{cxx} could not build a shared object, as every module is "
                            f"({failed[1]}): check its installation and its linker, or set "
                            "CXX to another compiler")
    library = openmp_library()
    failed = _probe(work, "links_openmp", OPENMP_PROBE, ["-fopenmp", f"-l{library}"])
    if failed is not None:
        where = ("install Clang's OpenMP runtime (Debian and Ubuntu: libomp-dev)"
                 if not host_compiler()["gcc"] else "install GCC's OpenMP runtime (libgomp)")
        raise MdlBuildError(f"{cxx} does not build OpenMP code with -fopenmp and "
                            f"lib{library} ({failed[1]}), which generated code runs its "
                            f"threads on: {where}, or set CXX to another compiler")


def _probe(work: Path, name: str, text: str,
           flags: list[str]) -> tuple[str, str] | None:
    """Compiles `text` into a shared object with `flags` and loads it: None, or the step
    that failed ("build" or "load") and its first error, else the last line it said."""
    source, shared = work / f"{name}.cpp", work / f"{name}.so"
    source.write_text(text)
    done = subprocess.run([host_compiler()["path"], "-shared", "-fPIC", *flags, str(source),
                           "-o", str(shared)], capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        return "build", _first_line(done.stdout + done.stderr, work, shared)
    try:
        ctypes.CDLL(str(shared))
    except OSError as failed:
        return "load", _first_line(str(failed), work, shared)
    return None


def _first_line(said: str, work: Path, shared: Path) -> str:
    """The first line a build's log counts as an error (commands.FIRST_ERROR: the linker's
    own line before collect2's summary), else the first that names one (a loader's
    `undefined symbol`), else the last line."""
    lines = said.replace(f"{shared}: ", "").replace(f"{work}/", "").strip().splitlines()
    first = next((line for line in lines if FIRST_ERROR.search(line)), None) or next(
        (line for line in lines if re.search(r"error|cannot find|undefined", line,
                                             re.IGNORECASE)), None)
    return (first or (lines[-1] if lines else "failed")).strip()


def glue_fields(debug: bool, sanitize: bool) -> dict:
    """The glue's cache key: its command, the models' flags with -O3 made
    its level (a debug build's -O0 stays) and without the BLAS's defines and
    headers, and the environment but the BLAS."""
    flags = glue_level([f for f in compile_flags(debug, sanitize)
                        if f not in blas().defines])
    dirs = [d for d in include_dirs() if d != blas().include_dir]
    return {"product": "glue",
            "command": [host_compiler()["path"], *flags, *(f"-I{d}" for d in dirs)],
            **{k: v for k, v in environment_key().items() if k != "blas"}}


def glue_optimization() -> tuple[str, ...]:
    """The glue's level: GLUE_OPTIMIZATION, and GCC_GLUE_OPTIMIZATION where the host
    compiler is GCC."""
    return GLUE_OPTIMIZATION + (GCC_GLUE_OPTIMIZATION if host_compiler()["gcc"] else ())


def glue_level(flags: list[str]) -> list[str]:
    """`flags` with -O3 made the glue's level (a debug build's -O0 stays), wherever it is
    compiled (here, an emitted CMakeLists.txt; mdl.cmake spells the same in CMake)."""
    return [f for flag in flags for f in (glue_optimization() if flag == "-O3" else (flag,))]


def runtime_fields(debug: bool, sanitize: bool) -> dict:
    """What the key of the runtime for these flags hashes."""
    return {"product": "runtime", "flags": compile_flags(debug, sanitize),
            "glue": glue_fields(debug, sanitize), **environment_key()}


def runtime_object(product: str, fields: dict, units: list[tuple[list[str], Path]],
                   what: str, progress: bool,
                   beside: Callable[[Path], list[list[str]]] = lambda work: [],
                   linked: Callable[[list[Path]], list[Path]] = lambda objects: objects,
                   also: tuple[str, ...] = ()) -> Path:
    """`product`, compiled once per cache for `fields` (their "product" names it): each of
    `units`, a compiler (a command up to its input file) and a source, compiled side by
    side with the commands `beside(work)` returns, then the objects `linked` makes of
    theirs linked into one relocatable object, so that a model's link names a single
    file for them; `also`: files beside it that `intact` checks too."""
    def make(work: Path, final: Path) -> None:
        write_key(work, fields)
        objects = [work / (source.stem + ".o") for _, source in units]
        run_commands(work, [*([*compiler, "-c", str(source), "-o", str(obj)]
                              for (compiler, source), obj in zip(units, objects)),
                            *beside(work)],
                     f"building {what} (once per cache)", progress)
        run_commands(work, [[host_compiler()["path"], "-r", "-nostdlib",
                             *map(str, linked(objects)), "-o", str(work / product)]],
                     f"linking {what}", progress)
    return cached(digest(fields), product, make, also)
