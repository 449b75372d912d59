"""What decides every build besides its own sources and flags: the code generator's
version, the runtime's sources, the compiler, Python's ABI, pybind11 and the BLAS. Every
cache key holds it (modules, runtime objects); the index (codegen/compile/index.py) checks
a module it finds against it."""
from __future__ import annotations

import hashlib
import sys
import sysconfig

import pybind11

from ..backend.paths import RUNTIME_DIR
from .blas import blas
from .cache import CODEGEN_VERSION, sha256
from .compiler import host_compiler

EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def environment_key() -> dict:
    """What besides the sources and flags decides a build, as a cache key's fields."""
    return {"codegen_version": CODEGEN_VERSION, "runtime": _runtime_digest(),
            "compiler": host_compiler(),
            "python": {"ext_suffix": EXT_SUFFIX, "soabi": sysconfig.get_config_var("SOABI"),
                       "version": list(sys.version_info[:2])},
            "pybind11": pybind11.__version__, "blas": str(blas().library)}


def _runtime_digest() -> str:
    """Every file under cpp_runtime/, read on each call: headers change during a session."""
    h = hashlib.sha256()
    for path in sorted(p for p in RUNTIME_DIR.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(RUNTIME_DIR)).encode() + b"\0")
        h.update(sha256(path.read_bytes()).encode())
    return h.hexdigest()
