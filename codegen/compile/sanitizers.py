"""What a process needs to import a sanitized module (`mdlc build --sanitize`): the
AddressSanitizer runtime of the compiler that built it, loaded before Python starts
(Python itself is not built with it), with the C++ library after it: ASan replaces
C++'s `throw` when it starts, and in a Python that has not loaded libstdc++ it finds no
real one to call, so the first exception a call raised aborted the process ("CHECK
failed: ... real___cxa_throw"). Python's own leaks are not reported, and UBSan stops at
its first report. An emulated cuda module built with --sanitize needs ThreadSanitizer's
runtime instead (`thread=True`): it reports races between CUDA threads (docs/cuda.md)."""
from __future__ import annotations

import functools
import os
import platform
import shlex
import subprocess

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


def tsan_runtime() -> str:
    """The ThreadSanitizer runtime of the compiler (GCC's libtsan, Clang's shared one)."""
    if host_compiler()["gcc"]:
        return compiler_file("libtsan.so")
    return compiler_file(f"libclang_rt.tsan-{platform.machine()}.so")


@functools.lru_cache(maxsize=None)
def tsan_refusal() -> str:
    """Why a process cannot start with ThreadSanitizer's runtime preloaded here ("" when
    it can): the compiler ships none, or it ends every process at once (Clang 14's, on
    a kernel with 28 bits of mmap randomness: a segmentation fault before main)."""
    runtime = tsan_runtime()
    if not os.path.isabs(runtime):
        return f"{host_compiler()['path']} ships no ThreadSanitizer runtime"
    try:
        status = subprocess.run(["true"], env={**os.environ, "LD_PRELOAD": runtime},
                                capture_output=True, timeout=60).returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"a process with {runtime} preloaded did not run ({e})"
    if status != 0:
        how = f"signal {-status}" if status < 0 else f"status {status}"
        return f"a process with {runtime} preloaded ends at once on this machine ({how})"
    return ""


def sanitizer_env(thread: bool = False) -> dict[str, str]:
    """The environment variables a process importing a sanitized module needs; `thread`:
    an emulated cuda module's (ThreadSanitizer)."""
    if thread:  # the checked code is the module's: not numpy's BLAS threads, which
        # synchronize in ways the sanitizer does not see (reports of their memset)
        return {"LD_PRELOAD": f"{tsan_runtime()} {compiler_file('libstdc++.so')}",
                "TSAN_OPTIONS": "ignore_noninstrumented_modules=1"}
    return {"LD_PRELOAD": f"{asan_runtime()} {compiler_file('libstdc++.so')}",
            "ASAN_OPTIONS": "detect_leaks=0",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}


def how_to_run(thread: bool = False) -> str:
    """The command line prefix that runs Python with a sanitized module importable."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in sanitizer_env(thread).items()) + " python3"
