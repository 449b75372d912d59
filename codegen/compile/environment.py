"""What decides every build besides its own sources and flags: the code generator's
version, the runtime's sources, the compiler, Python's ABI, pybind11, the BLAS and the
environment variables the compilers read (BUILD_VARIABLES). Every cache key holds it
(modules, runtime objects); the index (codegen/compile/index.py) checks a module it finds
against it."""
from __future__ import annotations

import hashlib
import os
import sys
import sysconfig

import pybind11

from ..backend.paths import RUNTIME_DIR
from .blas import blas
from .cache import CODEGEN_VERSION, sha256
from .compiler import host_compiler

EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")

# Of BUILD_VARIABLES, the lists of directories, whose entries are keyed absolute: the
# compilers run in the caller's directory, and read a relative entry, or an empty one
# (`/opt/include:`), as in that directory.
PATH_VARIABLES = (
    "CPATH", "CPLUS_INCLUDE_PATH",  # GCC's and Clang's: headers found before the system's
    "LIBRARY_PATH",                 # libraries the link finds (-lgomp, -lomp, -lmvec)
    "COMPILER_PATH",                # where the driver finds cc1plus, as and ld
)
# The environment variables the compilers read that change what they build, without a
# flag of ours to show it: a cached module built under other values was served as it was
# (docs/build.md, "What the key covers").
BUILD_VARIABLES = (
    *PATH_VARIABLES,
    "GCC_EXEC_PREFIX",       # GCC's prefix of its own programs and libraries
    "CCC_OVERRIDE_OPTIONS",  # Clang's edits of its own command line
    "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS",  # nvcc's flags before and after ours
    "NVCC_CCBIN",            # nvcc's host compiler
)


def environment_key() -> dict:
    """What besides the sources and flags decides a build, as a cache key's fields; the
    build variables under `variables` where any is set (none set, the key is the one an
    mdl without them computed, so existing caches still answer)."""
    variables = build_variables()
    return {"codegen_version": CODEGEN_VERSION, "runtime": _runtime_digest(),
            "compiler": host_compiler(),
            "python": {"ext_suffix": EXT_SUFFIX, "soabi": sysconfig.get_config_var("SOABI"),
                       "version": list(sys.version_info[:2])},
            "pybind11": pybind11.__version__, "blas": str(blas().library),
            **({"variables": variables} if variables else {})}


def build_variables() -> dict[str, str]:
    """The BUILD_VARIABLES set now, read on each call (a process may change them between
    builds). Set but empty counts (GCC reads an empty LIBRARY_PATH as the current
    directory), as itself: a key that changed with the directory mdlc runs in would
    build again in each."""
    return {name: _resolved(name, os.environ[name]) for name in BUILD_VARIABLES
            if name in os.environ}


def _resolved(name: str, value: str) -> str:
    if name not in PATH_VARIABLES or not value:
        return value
    return os.pathsep.join(os.path.abspath(entry) for entry in value.split(os.pathsep))


def _runtime_digest() -> str:
    """Every file under cpp_runtime/, read on each call: headers change during a session."""
    h = hashlib.sha256()
    for path in sorted(p for p in RUNTIME_DIR.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(RUNTIME_DIR)).encode() + b"\0")
        h.update(sha256(path.read_bytes()).encode())
    return h.hexdigest()
