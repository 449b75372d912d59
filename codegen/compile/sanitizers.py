"""What a process needs to import a sanitized module (`mdlc build --sanitize`): the
AddressSanitizer runtime of the compiler that built it, loaded before Python starts
(Python itself is not built with it), with the C++ library after it: ASan replaces
C++'s `throw` when it starts, and in a Python that has not loaded libstdc++ it finds no
real one to call, so the first exception a call raised aborted the process ("CHECK
failed: ... real___cxa_throw"). Python's own leaks are not reported, and UBSan stops at
its first report."""
from __future__ import annotations

import os
import platform
import shlex

from .compiler import compiler_file, host_compiler


def asan_runtime() -> str:
    """GCC's libasan, or Clang's shared runtime (which a Clang module links with
    -shared-libsan: flags.link_flags; it holds UBSan's handlers too)."""
    if host_compiler()["gcc"]:
        return compiler_file("libasan.so")
    return compiler_file(f"libclang_rt.asan-{platform.machine()}.so")


def has_runtime() -> bool:
    """Whether the compiler ships AddressSanitizer's runtime."""
    return os.path.isabs(asan_runtime())


def sanitizer_env() -> dict[str, str]:
    """The environment variables a process importing a sanitized module needs."""
    return {"LD_PRELOAD": f"{asan_runtime()} {compiler_file('libstdc++.so')}",
            "ASAN_OPTIONS": "detect_leaks=0",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}


def how_to_run() -> str:
    """The command line prefix that runs Python with a sanitized module importable."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in sanitizer_env().items()) + " python3"
