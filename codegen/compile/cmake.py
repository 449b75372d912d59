"""The CMakeLists.txt `mdlc emit` writes beside the generated sources: it builds them and
the runtime's sources into the extension with the flags `build_extension` uses
(codegen/compile/flags.py), for a user who builds with CMake instead of mdl's cache."""
from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pybind11

from ..backend.paths import RUNTIME_DIR
from ..backend.templating import environment
from .blas import blas
from .cuda_toolkit import toolkit
from .extension import compiled
from .compiler import host_compiler
from .flags import (CLANG_LIBMVEC, LANGUAGE_FLAGS, NVCC_HOST_CODE_FLAGS, code_flags,
                    compile_flags, libmvec, openmp_dir, openmp_library, sanitize_link_flags)
from .runtime import CUDA_RUNTIME_SOURCE, GLUE_SOURCE, RUNTIME_SOURCES, glue_level

if TYPE_CHECKING:
    from ..backend.target import Target


# Target names CMake refuses (policy CMP0037, and its generators' own targets): a module
# of such a name (all.mdl) is built by the target mdl_NAME, its file still NAME
CMAKE_RESERVED = {"all", "clean", "help", "install", "test", "package", "package_source",
                  "edit_cache", "rebuild_cache", "list_install_components", "preinstall",
                  "ALL_BUILD", "ZERO_CHECK", "RUN_TESTS", "INSTALL", "PACKAGE",
                  "NIGHTLY", "EXPERIMENTAL", "CONTINUOUS"}


def cmake_target(module_name: str) -> str:
    """The CMake target that builds the module `module_name`: its name, or mdl_NAME for a
    name CMake keeps for itself."""
    return f"mdl_{module_name}" if module_name in CMAKE_RESERVED else module_name


def print_model_target(name: str) -> int:
    """cmake/mdl.cmake's mdl_add_model(TARGET name) at configure time: prints the target
    of module `name`, or says why `name` names no module, in mdlc's words, and returns 1
    (`my-net` failed only at build time, after the runtime compiled; `all`, in CMake's
    and pybind11's files)."""
    from ..ir.diagnostics import UsageError
    from .options import module_name_for
    try:
        module_name_for("", name=name)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(cmake_target(name))
    return 0


def render_cmakelists(source_names: Iterable[str], module_name: str, target: Target, *,
                      debug: bool = False, sanitize: bool = False) -> str:
    """A CMakeLists.txt that builds `source_names`, generated for `target`, and the runtime
    into the extension `module_name` with the same flags as `build_extension` (what `mdlc
    emit` writes). CMake compiles CUDA sources (a GPU target's kernels.cu) with nvcc, and
    the host code that launches them (its module.cpp) with the C++ compiler."""
    cuda = target.kernel_source is not None
    cxx_flags = compile_flags(debug, sanitize)[len(LANGUAGE_FLAGS):]
    context = {
        "name": module_name,
        "target": cmake_target(module_name),
        "sources": compiled(source_names),
        "runtime_sources": [str(RUNTIME_DIR / source) for source in RUNTIME_SOURCES] + (
            [str(RUNTIME_DIR / CUDA_RUNTIME_SOURCE)] if cuda else []),
        "build_type": "Debug" if debug or sanitize else "Release",
        "cxx": host_compiler()["path"],
        # CMake's id of it: another compiler refuses some of its flags (clang++ GCC's
        # -fno-tree-sink, on every source)
        "compiler": "GCC" if host_compiler()["gcc"] else "Clang",
        "compiler_id": "^GNU$" if host_compiler()["gcc"] else "Clang$",
        "cxx_flags": cxx_flags,
        # the runtime's pybind11 glue as mdl's own builds compile it (runtime.py), where
        # those are -O3: its flags come after the target's, and the last -O wins
        "glue": str(RUNTIME_DIR / GLUE_SOURCE),
        "glue_flags": [f for f in glue_level(cxx_flags) if f not in cxx_flags],
        "link_flags": [*(sanitize_link_flags() if sanitize else ()), *openmp_dir()],
        "include_dirs": [str(RUNTIME_DIR), blas().include_dir],
        "libraries": [str(blas().library), openmp_library(),
                      *(["mvec"] if libmvec() else [])],
        "rpath": blas().lib_dir,
        # the Python that emitted it, whose pybind11 and BLAS the paths above name: the
        # defaults, so that `cmake -S DIR -B DIR/build` finds them with no -D
        "python": sys.executable,
        "pybind11_dir": pybind11.get_cmake_dir(),
        "cuda": _cmake_cuda(compile_flags(debug, sanitize)) if cuda else None,
    }
    if cuda:  # cuBLAS as the build links it (codegen/compile/cuda_toolkit.py), found by RPATH too
        context["include_dirs"] += [toolkit().cuda_include, toolkit().cublas_include]
        context["libraries"].append(str(toolkit().cublas_library))
        context["rpath"] += f";{toolkit().cublas_library.parent}"
    return environment().get_template("CMakeLists.txt.j2").render(context)


def _cmake_cuda(cxx_flags: list[str]) -> dict:
    """CUDA_ARCHITECTURES and the CUDA sources' own flags (the host compiler's go through
    -Xcompiler), for an emitted CMakeLists.txt."""
    own = set(code_flags()) | set(CLANG_LIBMVEC)  # the host compiler's, not nvcc's GCC's
    host = [*NVCC_HOST_CODE_FLAGS, *(f for f in cxx_flags[len(LANGUAGE_FLAGS):]
                                     if not f.startswith(("-D", "-O")) and f not in own)]
    defines = [f for f in cxx_flags if f.startswith("-D")]
    return {"architectures": toolkit().architectures,
            "flags": [*defines, "-Xcompiler=" + ",".join(host)]}
