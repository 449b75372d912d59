"""What the cuda target builds with: nvcc (on PATH, in $CUDA_HOME/bin or
/usr/local/cuda/bin), cuBLAS from the toolkit when it has it, else from the `nvidia-cublas`
wheel (pip install "mdl[cuda]"), and the GPU architectures to compile for: the GPU of
this machine when `nvidia-smi` reports one, else sm_90 (the H100) plus PTX, which newer
GPUs compile when they load the module. `MDL_CUDA_ARCH=86` (a compute capability without
the dot) chooses explicitly. The CUDA runtime is linked statically (nvcc's default), so a
module needs only cuBLAS beside it, found by RPATH."""
from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..ir.diagnostics import MdlBuildError
from .blas import installed_file
from .cache import sha256
from .compiler import printed

DEFAULT_ARCH = "90"  # no GPU here to ask: the H100's, plus PTX for newer ones


@dataclass(frozen=True)
class CudaToolkit:
    nvcc: str
    version: str          # nvcc --version, last line
    cuda_include: str     # cuda_runtime.h's directory, for the C++ compiler (nvcc knows it)
    cublas_include: str
    cublas_library: Path  # libcublas.so.N, linked by path and found by RPATH
    arch_flags: tuple[str, ...]
    architectures: str    # the same for CMake's CUDA_ARCHITECTURES

    def link_flags(self) -> list[str]:
        return [str(self.cublas_library), f"-Wl,-rpath,{self.cublas_library.parent}"]


@functools.cache
def toolkit() -> CudaToolkit:
    nvcc = _nvcc()
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    roots = _roots(nvcc)
    include, library = _cublas(roots)
    arches = _architectures()
    # no GPU to compile for: PTX as well, which a newer GPU compiles when it loads the module
    ptx = not gpu_capabilities() and not os.environ.get("MDL_CUDA_ARCH", "").strip()
    flags = tuple(f"-gencode=arch=compute_{a},code=sm_{a}" for a in arches) + (
        (f"-gencode=arch=compute_{arches[0]},code=compute_{arches[0]}",) if ptx else ())
    cmake = ";".join(f"{a}-real" for a in arches) + (f";{arches[0]}-virtual" if ptx else "")
    return CudaToolkit(nvcc, version.strip().splitlines()[-1], _cuda_include(roots), include,
                       library, flags, cmake)


def nvcc_host_compiler(nvcc: str) -> dict:
    """The host compiler nvcc runs (`gcc` on PATH by default, or what `-ccbin`,
    NVCC_CCBIN or nvcc.profile name), as nvcc's dry run shows it: its path and an identity
    of its `--version`, for the cuda target's cache keys (a new gcc on PATH builds anew).
    Asked again when PATH or nvcc's variables change."""
    return _nvcc_host_compiler(nvcc, *(os.environ.get(name, "") for name in (
        "PATH", "NVCC_CCBIN", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")))


@functools.cache
def _nvcc_host_compiler(nvcc: str, *environment: str) -> dict:
    done = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                          capture_output=True, text=True, errors="replace")
    for line in (done.stdout + done.stderr).splitlines():
        words = shlex.split(line[3:]) if line.startswith("#$ ") else []
        if words and "-E" in words and "c++" in words and "-D__CUDACC__" in words:
            path = shutil.which(words[0])  # none: nvcc's build says so
            return {"path": path or words[0],
                    "identity": path and sha256(printed([path, "--version"]))}
    # no dry run to read (an nvcc wrapper that refuses it): the build says what is wrong
    return {"path": None, "identity": sha256(done.stdout + done.stderr)}


def _cuda_include(roots: list[Path]) -> str:
    """The toolkit's include directory (cuda_runtime.h), which module.cpp's C++ compiler
    is given: nvcc finds it by itself."""
    for root in roots:
        for sub in ("include", "targets/x86_64-linux/include", "targets/sbsa-linux/include"):
            if (root / sub / "cuda_runtime.h").is_file():
                return str(root / sub)
    raise MdlBuildError(f"the cuda target needs the CUDA toolkit's headers (cuda_runtime.h): "
                        f"none in {', '.join(map(str, roots))}; set CUDA_HOME to the toolkit")


def _nvcc() -> str:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [shutil.which("nvcc"), *([str(Path(home) / "bin" / "nvcc")] if home else []),
                  "/usr/local/cuda/bin/nvcc"]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise MdlBuildError("the cuda target needs nvcc, the CUDA compiler: install the CUDA "
                        "toolkit (or put its bin/ on PATH, or set CUDA_HOME)")


def _roots(nvcc: str) -> list[Path]:
    """Where the toolkit may be installed: around nvcc (which may be a wrapper script
    elsewhere), $CUDA_HOME, /usr/local/cuda."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    roots = [Path(nvcc).resolve().parent.parent, *([Path(home)] if home else []),
             Path("/usr/local/cuda")]
    return list(dict.fromkeys(roots))


def _cublas(roots: list[Path]) -> tuple[str, Path]:
    """cuBLAS's include directory and shared library: the toolkit's, else the wheel's."""
    for root in roots:
        header = root / "include" / "cublas_v2.h"
        for lib_dir in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            libraries = sorted((root / lib_dir).glob("libcublas.so.*"))
            if header.is_file() and libraries:
                return str(header.parent), libraries[0]
    wheel_header = installed_file("nvidia-cublas", "cublas_v2.h")
    wheel_library = installed_file("nvidia-cublas", "libcublas.so.")
    if wheel_header is None or wheel_library is None:
        raise MdlBuildError(f"the cuda target needs cuBLAS: the CUDA toolkit "
                            f"({', '.join(map(str, roots))}) has none; pip install "
                            "nvidia-cublas (or \"mdl[cuda]\")")
    return str(wheel_header.parent), wheel_library


def _architectures() -> list[str]:
    """The compute capabilities to compile for: MDL_CUDA_ARCH, else this machine's GPUs,
    else DEFAULT_ARCH (toolkit() adds its PTX then)."""
    chosen = os.environ.get("MDL_CUDA_ARCH", "").strip()
    if chosen:
        if not re.fullmatch(r"\d{2,3}[af]?", chosen):
            raise MdlBuildError(f"MDL_CUDA_ARCH={chosen!r}: expected a compute capability "
                                "without the dot, such as 90 or 86")
        return [chosen]
    return gpu_capabilities() or [DEFAULT_ARCH]


def gpu_capabilities() -> list[str]:
    """The compute capabilities of this machine's GPUs (90 for 9.0), none when there is
    no GPU or no driver to ask."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = re.findall(r"^\s*(\d+)\.(\d+)\s*$", done.stdout, re.M) if done.returncode == 0 else []
    return sorted({major + minor for major, minor in found})
