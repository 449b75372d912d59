"""The host C++ compiler: which one (`c++`, or $CXX), what identifies it in a cache key
(its version and what `-march` means on this machine), and whether it is GCC or Clang,
whose flags differ (codegen/compile/flags.py)."""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

from ..ir.diagnostics import MdlBuildError
from .cache import sha256


def march() -> str:
    """The instruction set generated code is built for: `-march=native` (this machine's
    own), or `-march=$MDL_MARCH` (`x86-64-v3`: AVX2 and FMA, the x86 machines without
    AVX-512; what `mdlc bench --isa avx2` builds). Part of every cache key (the compiler's
    identity)."""
    wanted = os.environ.get("MDL_MARCH", "").strip() or "native"
    if not re.fullmatch(r"[\w.-]+", wanted):
        raise MdlBuildError(f"MDL_MARCH={wanted!r}: expected an -march value such as "
                            "x86-64-v3 or native")
    return f"-march={wanted}"


def host_compiler() -> dict:
    """The C++ compiler, and its identity: `--version` and what `-march` means on this
    machine, the compiler's own command and the macros it defines (a shared cache may
    serve several CPUs); whether that target has AVX-512 (`avx512`), and whether the
    compiler is GCC (`gcc`: not Clang, nor a compiler built on it, which define
    __GNUC__ too)."""
    return _host_compiler(os.environ.get("CXX") or "c++", march())


@functools.cache
def _host_compiler(name: str, march_flag: str) -> dict:
    path = shutil.which(name)
    if path is None and "CXX" in os.environ:
        raise MdlBuildError(f"CXX={name!r} names no program on the PATH: set CXX to one C++ "
                            "compiler's command (g++, clang++ or a path to one)")
    if path is None:
        raise MdlBuildError("no C++ compiler found: install g++ or clang++, or set CXX")
    version = printed([path, "--version"])
    native = printed([path, march_flag, "-dM", "-E", "-v", "-x", "c++", os.devnull])
    chosen = os.environ.get("MDL_MARCH", "").strip()  # march()'s: empty is native
    if version.strip() and "#define __cplusplus " not in native and chosen \
            and "#define __cplusplus " in printed([path, "-dM", "-E", "-x", "c++", os.devnull]):
        # a compiler that answers, but not with this -march (a typo): it was said to be no
        # compiler at all, with advice to change CXX
        said = next((line.strip() for line in native.splitlines() if "error:" in line), "")
        raise MdlBuildError(f"MDL_MARCH={chosen!r}: {path} does not "
                            f"take {march_flag}" + (f" ({said})" if said else ""))
    if not version.strip() or "#define __cplusplus " not in native:
        raise MdlBuildError(f"{path} does not answer as a C++ compiler (its `--version` "
                            "printed nothing, or its preprocessor defines no __cplusplus): "
                            "set CXX to g++ or clang++")
    return {"path": path, "version": version.splitlines()[0],
            "identity": sha256(version + native), "avx512": "__AVX512F__ " in native,
            "gcc": "#define __GNUC__ " in native and "#define __clang__ " not in native}


def printed(cmd: list[str]) -> str:
    """What `cmd` printed, on stdout and stderr."""
    done = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    return done.stdout + done.stderr


def compiler_file(name: str) -> str:
    """Where the host compiler's own library `name` lies (not an absolute path where it
    ships none)."""
    return printed([host_compiler()["path"], f"-print-file-name={name}"]).strip()
