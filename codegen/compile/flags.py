"""The flags every build passes the host C++ compiler (codegen/compile/compiler.py): the
flags of each variant (release, debug, sanitized), GCC's and Clang's, the include
directories and what a module links. Toolchains
(codegen/compile/toolchain.py) assemble their commands from these; the emitted
CMakeLists.txt (codegen/compile/cmake.py) renders the same lists."""
from __future__ import annotations

import functools
import os
import sysconfig

import pybind11

from ..backend.paths import RUNTIME_DIR
from .blas import blas
from .compiler import compiler_file, host_compiler, march, printed

LANGUAGE_FLAGS = ("-std=c++17", "-fPIC", "-fvisibility=hidden")  # CMake spells these itself
# -fopenmp (OPENMP_LIBRARIES: its runtime by compiler): `#pragma omp simd` (reductions that may
# vectorize), and OpenMP's threads for products and large elementwise loops split over
# the cores (mdl/threads.h).
# -fno-math-errno: nothing reads errno, so calls to exp, tanh, sqrt, ... have no side
# effect: a loop calling them vectorizes even where a `where` uses only one of its arms
# (with errno, GCC computes each arm under its condition, and control flow stops it).
CODE_FLAGS = ("-fopenmp", "-fno-math-errno")
# GCC's own, where the host compiler is GCC (Clang has no such option and refuses it):
# -fno-tree-sink: GCC otherwise moves a value that only one arm of a `where` reads into a
# branch of its own (an LSTM step with lengths: its gates' exp and tanh, read only where
# the row is real), and the loop, no longer straight, stays scalar: the char LM's forward
# at B=32 took 2.3x as long, its training step 1.6x.
GCC_CODE_FLAGS = ("-fno-tree-sink",)
# nvcc compiles host code with GCC (its default), whatever $CXX is
NVCC_HOST_CODE_FLAGS = CODE_FLAGS + GCC_CODE_FLAGS
DEBUG_FLAGS = ("-O0", "-g")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer")
# An emulated cuda build's kernels, sanitized: races between CUDA threads (toolchain.py);
# -g puts source lines in the reports
TSAN_FLAGS = ("-fsanitize=thread", "-fno-omit-frame-pointer", "-g")


# Where the target has AVX-512, loops vectorize with its 512-bit vectors: GCC and Clang
# otherwise tune Intel's chips to 256 (-march=native on an Intel Xeon: GCC's
# prefer-vector-width=256; AMD's Zen 4 and 5 already take 512), which halves what a fused
# loop does an instruction and a call of libmvec's exp and tanh. On an Intel Xeon (family
# 6 model 167, 2026-12-01), builds alternating in one process over 21 of the suite's cases:
# forwards 0.84-1.01x the time (most 0.90-0.96), training steps 0.90-1.03x (docs/build.md,
# "512-bit vectors on Intel"). f64 modules' own code stays at 256 (mdl/f64_vectors.h).
# Targets without AVX-512 are left as their tuning has them.
WIDE_VECTORS = "-mprefer-vector-width=512"


def machine_flags() -> tuple[str, ...]:
    """The flags that choose the instructions of every release compile, the cuda target's
    host code too: `-march`, and WIDE_VECTORS where it has AVX-512."""
    return (march(), *((WIDE_VECTORS,) if host_compiler()["avx512"] else ()))


# Clang's way to libmvec (GCC's is mdl/vector_math.h's declarations): a loop calling exp,
# log, pow, sin or cos calls its vector variant. Clang 14 has no mapping for tanh, expm1,
# log1p or erf: mdl/vector_math.h builds the first three from exp and log under Clang
# (simd_tanh, ...), and loops calling erf stay scalar.
CLANG_LIBMVEC = ("-fveclib=libmvec",)


def code_flags() -> tuple[str, ...]:
    """What every compile of the runtime and of generated code passes the host compiler:
    CODE_FLAGS, and GCC_CODE_FLAGS where it is GCC."""
    return CODE_FLAGS + (GCC_CODE_FLAGS if host_compiler()["gcc"] else ())


def release_flags() -> tuple[str, ...]:
    return ("-O3", *machine_flags(), "-DNDEBUG")


def compile_flags(debug: bool = False, sanitize: bool = False) -> list[str]:
    """The C++ compiler's flags for the runtime and for models (sanitizer reports want
    line numbers and honest frames, so sanitize implies debug)."""
    debug = debug or sanitize
    return [*LANGUAGE_FLAGS, *code_flags(), *(DEBUG_FLAGS if debug else release_flags()),
            *(SANITIZE_FLAGS if sanitize else ()), *blas().defines,
            *(("-DMDL_LIBMVEC", *(() if host_compiler()["gcc"] else CLANG_LIBMVEC))
              if libmvec() else ())]


# The OpenMP runtime generated code and the runtime run their threads on (mdl/threads.h),
# by compiler: GCC's GNU OpenMP, on which MKL runs its threads too (its GNU threading
# layer: mdl/blas.h's blas_init), one pool for both; Clang's LLVM OpenMP, whose builds
# take OpenBLAS, which runs its parallel parts there (blas.py says why not MKL).
OPENMP_LIBRARIES = {"gcc": "gomp", "clang": "omp"}


def openmp_library() -> str:
    """The host compiler's OpenMP runtime (OPENMP_LIBRARIES)."""
    return OPENMP_LIBRARIES["gcc" if host_compiler()["gcc"] else "clang"]


def sanitize_link_flags(thread: bool = False) -> list[str]:
    """A sanitized module links the sanitizers' runtime as a shared library (GCC's
    default; Clang's with -shared-libsan), which the importing process preloads
    (sanitizers.py): AddressSanitizer's and UBSan's, or with `thread` ThreadSanitizer's
    (a sanitized emulated cuda module)."""
    return [(TSAN_FLAGS if thread else SANITIZE_FLAGS)[0],
            *(() if host_compiler()["gcc"] else ("-shared-libsan",))]


def link_flags(sanitize: bool) -> list[str]:
    """The BLAS lives in a Python package, not a system directory: modules find it by
    RPATH (codegen/compile/blas.py). Then the one OpenMP runtime (openmp_library): generated
    code's calls into OpenMP (omp_get_thread_num) must reach the runtime that runs its
    parallel regions (a Clang build that linked libgomp beside libomp split every loop
    wrongly on two threads: each thread took all of it)."""
    return [*(sanitize_link_flags() if sanitize else ()), *blas().link_flags(),
            *openmp_dir(), f"-l{openmp_library()}", *(("-lmvec",) if libmvec() else ())]


def openmp_dir() -> list[str]:
    """Where Clang's OpenMP runtime lies (-L), for a link by another driver: nvcc links a
    cuda module with GCC, which does not look in Clang's own library directory (the one
    above its resource directory: /usr/lib/llvm-14/lib)."""
    if host_compiler()["gcc"]:
        return []
    resources = printed([host_compiler()["path"], "-print-resource-dir"]).strip()
    lib = os.path.dirname(os.path.dirname(resources))
    found = os.path.isabs(lib) and os.path.exists(f"{lib}/lib{openmp_library()}.so")
    return [f"-L{lib}"] if found else []


def include_dirs() -> list[str]:
    return [str(RUNTIME_DIR), blas().include_dir,
            sysconfig.get_paths()["include"], pybind11.get_include()]


@functools.cache
def libmvec() -> bool:
    """Whether the compiler links glibc's vector math library (cpp_runtime/mdl/vector_math.h
    then lets loops call its SIMD exp, tanh, ...)."""
    found = compiler_file("libmvec.so")
    return os.path.isabs(found) and os.path.exists(found)
