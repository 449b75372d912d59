"""The runtime, compiled once per cache and flag set, not per model: what every model
shares (the Python-facing class, argument checks, arenas, the parameter stores:
cpp_runtime/src/) becomes one relocatable object, and `mdl/python.h`, the header every
generated file includes first, is precompiled beside it (docs/build.md has the
measurements behind this). `runtime_object` also builds the further runtime objects a
toolchain links (codegen/compile/toolchain.py)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..backend.paths import RUNTIME_DIR
from .cache import cached, digest, write_key
from .commands import run_commands
from .environment import environment_key
from .flags import compile_flags, host_compiler, include_dirs

RUNTIME_SOURCES = ("src/python_module.cpp", "src/host_device.cpp",  # relative to RUNTIME_DIR
                   "src/products.cpp", "src/faults.cpp", "src/call.cpp")
# The Python face: pybind11 glue that runs once a call, around the model's code, and is
# most of the runtime's build. At -O1 with small functions inlined it compiles in 30 s
# instead of 47 at -O3 (one Zen 3 core), and a call takes what it took within 2-4% (0.1
# us); -O1 alone was 10% slower (docs/build.md, "A runtime compiled once"). Clang ignores
# the second flag.
GLUE_SOURCE = "src/python_module.cpp"
GLUE_OPTIMIZATION = ("-O1", "-finline-small-functions")
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
    """The runtime for these flags, compiled once per cache."""
    compiler = [host_compiler()["path"], *compile_flags(debug, sanitize),
                *(f"-I{d}" for d in include_dirs())]
    glue = glue_flags(compiler)

    def precompile(work: Path) -> list[list[str]]:
        (work / PRECOMPILED / "mdl").mkdir(parents=True)
        return [[*compiler, "-x", "c++-header", str(RUNTIME_DIR / MODEL_HEADER),
                 "-o", str(work / PRECOMPILED / f"{MODEL_HEADER}.gch")]]
    built = runtime_object(RUNTIME_OBJECT, runtime_fields(debug, sanitize),
                           [(glue if source == GLUE_SOURCE else compiler, RUNTIME_DIR / source)
                            for source in RUNTIME_SOURCES],
                           "the mdl runtime", progress, precompile)
    return Runtime(built, built.parent / PRECOMPILED)


def glue_flags(flags: list[str]) -> list[str]:
    """`flags` with -O3 made GLUE_OPTIMIZATION: what GLUE_SOURCE is compiled with (a debug
    build's -O0 stays)."""
    return [f for flag in flags for f in (GLUE_OPTIMIZATION if flag == "-O3" else (flag,))]


def runtime_fields(debug: bool, sanitize: bool) -> dict:
    """What the key of the runtime for these flags hashes."""
    flags = compile_flags(debug, sanitize)
    return {"product": "runtime", "flags": flags, "glue_flags": glue_flags(flags),
            **environment_key()}


def runtime_object(product: str, fields: dict, units: list[tuple[list[str], Path]],
                   what: str, progress: bool,
                   beside: Callable[[Path], list[list[str]]] = lambda work: []) -> Path:
    """`product`, compiled once per cache for `fields` (their "product" names it): each of
    `units`, a compiler (a command up to its input file) and a source, compiled side by
    side with the commands `beside(work)` returns, then all linked into one relocatable
    object, so that a model's link names a single file for them."""
    def make(work: Path, final: Path) -> None:
        write_key(work, fields)
        objects = [work / (source.stem + ".o") for _, source in units]
        run_commands(work, [*([*compiler, "-c", str(source), "-o", str(obj)]
                              for (compiler, source), obj in zip(units, objects)),
                            *beside(work)],
                     f"building {what} (once per cache)", progress)
        run_commands(work, [[host_compiler()["path"], "-r", "-nostdlib", *map(str, objects),
                             "-o", str(work / product)]], f"linking {what}", progress)
    return cached(digest(fields), product, make)
