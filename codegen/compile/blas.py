"""Which BLAS the CPU target links, chosen by the CPU that builds (a module is built for
the machine it runs on: -march=native): OpenBLAS (the `scipy-openblas32` wheel, a
dependency everywhere) on an AMD CPU, where MKL is not installed and with Clang, else
Intel MKL (the `mkl` and `mkl-include` wheels). `MDL_BLAS=mkl` or `MDL_BLAS=openblas`
chooses explicitly.

With Clang, whose code runs on LLVM's OpenMP, MKL would run its threads on a second
runtime: its GNU threading layer on GNU OpenMP, two pools of threads spinning against
each other (the char LM's B=32 training step 22.2 ms, 15.4 with MKL on Intel's OpenMP,
17.6 with OpenBLAS, whose parallel parts run on mdl's own pool); and its Intel layer, on
Intel's build of LLVM's OpenMP, takes `omp_get_thread_num` from whatever GNU OpenMP a
process has loaded globally (PyTorch does): every thread of its products then took the
whole product, and gradients came out twice what they are (docs/build.md, "Compilers:
GCC and Clang").

Why, measured with the benchmark suite's models (docs/build.md, "The BLAS"): on Intel,
MKL's products were 1.3 to 3x faster than OpenBLAS's on a recurrent step's shapes, and
it can pack a loop's weight once. On AMD, MKL runs its generic library (`libmkl_def`): on
an AMD EPYC of Zen 4 OpenBLAS made 11 of the 13 LSTM rows faster (the generation step
19.2 -> 8.1 us, the B=32 H=256 forward 13.5 -> 9.5 ms); on an AMD EPYC of Zen 3 (AVX2,
no AVX-512), the two builds alternating in one process, OpenBLAS took 0.90-1.08x MKL's
time in the 35 rows of the LSTM, MILSTM, GRU and memory cases (0.92-0.94x at B=64
H=1024, 0.90x the MILSTM's B=1 H=256 forward); of the rows MKL won, only the GRU with
`if` at B=1 H=128 (training, 1.02-1.03x) stayed so when measured again.

Small products have a choice of their own (`MDL_SMALL_PRODUCTS`): `own`, mdl's kernels,
or `blas`, the BLAS's, or a number N: mdl's kernels for products of at most N rows. mdl's
are cpp_runtime/mdl/small_gemm.h for a loop's products of at most 1024 rows whose right
operand the loop does not write (`h @ U`, packed once before the loop), and
mdl/row_gemm.h for a step's independent products of at most 8 rows, split over the
threads together (a generation step's `x @ W` and `h @ U`); the two also take other
products of 2 to 256 rows whose right operand they read in place (`own_rows` in blas.h: a
B=1 model's hoisted input product and weight gradients). `blas` is MKL's packed API and
its products one after another, or with OpenBLAS, which cannot pack, its products
re-packing at every step. By default `own` with OpenBLAS and on an AMD CPU, where on an
AMD EPYC of Zen 4 MKL with mdl's kernels took 0.52-0.93x MKL's time in every LSTM, GRU
and MILSTM row tried and 0.39-0.75x in the generation step, with AVX-512 and restricted
to AVX2; and `1` with MKL on Intel: on an Intel Xeon (AVX-512, 2026-11-28), builds
alternating in one process, mdl's kernels on one-row products took 0.72-1.00x MKL's
time in 21 of the suite's 22 rows at B=1 (the generation step 0.86x), while on every
product up to 1024 rows they took 0.95-1.29x at B >= 20 (slower in 42 of 44 rows), and
at B=1 taking products of 2 to 64 rows too (a hoisted input product) gained nothing more
(docs/build.md, "On an Intel Xeon"). One-row products of every size: until 2026-11-30
those of a weight past 8 MiB were MKL's, which streamed them faster than the packed
kernel; `row_gemm::one_row` streams them faster still (an LSTM at B=1, H=1024 and 2048
in 0.78-0.88x the time, greedy decoding's 20 MB output product 0.92x; docs/build.md,
"One row on an Intel Xeon").

Both come from Python packages, not system directories: modules find the library by
RPATH. cpp_runtime/mdl/blas.h reads the defines to call one or the other.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from ..ir.diagnostics import MdlBuildError
from .compiler import host_compiler
from .cpu import cpu

CHOICES = ("mkl", "openblas")
OWN_ROWS = 1024  # the most rows of a product mdl's kernels take (small_gemm.h, blas.h)


@dataclass(frozen=True)
class Blas:
    name: str            # "mkl" or "openblas"
    include_dir: str
    library: Path        # the shared library modules link and find by RPATH
    define: str          # tells cpp_runtime/mdl/blas.h which API to call
    # mdl's kernels take small products of at most this many rows (0: none, the BLAS takes
    # them all): MDL_SMALL_PRODUCTS
    own_rows: int = OWN_ROWS

    @property
    def own_kernels(self) -> bool:
        return self.own_rows > 0

    @property
    def defines(self) -> tuple[str, ...]:
        return (self.define, f"-DMDL_OWN_KERNELS={int(self.own_kernels)}",
                f"-DMDL_OWN_ROWS={self.own_rows}")

    @property
    def lib_dir(self) -> str:
        return str(self.library.parent)

    def link_flags(self) -> list[str]:
        """The library, found by RPATH. MKL's threads run on the OpenMP runtime generated
        code links (cpp_runtime/mdl/blas.h, blas_init; flags.openmp_library)."""
        return [str(self.library), f"-Wl,-rpath,{self.lib_dir}"]


def blas() -> Blas:
    """The BLAS of this installation and CPU (see the module's docstring for the choice),
    for MDL_BLAS and MDL_SMALL_PRODUCTS as they are now: a process that changes them
    between builds gets what they say (and an error for a bad value) then."""
    return _blas(os.environ.get("MDL_BLAS", "").strip().lower(),
                 os.environ.get("MDL_SMALL_PRODUCTS", "").strip().lower(),
                 host_compiler()["gcc"])


@functools.cache
def _blas(wanted: str, small: str, gcc: bool) -> Blas:
    """blas() for these values (cached: what is installed does not change)."""
    library = _library(wanted, gcc)
    if not small:
        return library
    if small == "own":
        return replace(library, own_rows=OWN_ROWS)
    if small == "blas":
        return replace(library, own_rows=0)
    if small.isdigit() and 1 <= int(small) <= OWN_ROWS:
        return replace(library, own_rows=int(small))
    raise MdlBuildError(f"MDL_SMALL_PRODUCTS={small!r}: expected own, blas, or the most "
                        f"rows of a product mdl's kernels take (1 to {OWN_ROWS})")


blas.cache_clear = _blas.cache_clear  # for a CPU the tests stand in


def _library(wanted: str, gcc: bool) -> Blas:
    if wanted and wanted not in CHOICES:
        raise MdlBuildError(f"MDL_BLAS={wanted!r}: expected one of {', '.join(CHOICES)}")
    if not wanted and (cpu().vendor == "AMD" or not gcc):
        return _openblas()
    if wanted != "openblas":
        found = _mkl()
        if found is not None:
            return found
        if wanted == "mkl":
            raise MdlBuildError("MDL_BLAS=mkl but MKL is not installed: "
                               "pip install mkl mkl-include")
    return _openblas()


def _mkl() -> Blas | None:
    library = installed_file("mkl", "libmkl_rt.so.")
    header = installed_file("mkl-include", "mkl_cblas.h")
    if library is None or header is None:
        return None
    # mdl's kernels where MKL's small products were measured slower: on AMD all of them,
    # elsewhere (an Intel Xeon) those of one row
    amd = cpu().vendor == "AMD"
    return Blas("mkl", str(header.parent), library, "-DMDL_BLAS_MKL",
                own_rows=OWN_ROWS if amd else 1)


def _openblas() -> Blas:
    try:
        import scipy_openblas32 as ob
    except ImportError:
        raise MdlBuildError("no BLAS found: install mkl and mkl-include (x86-64) or "
                           "scipy-openblas32") from None
    library = Path(ob.get_lib_dir()) / f"lib{ob.get_library()}.so"
    return Blas("openblas", ob.get_include_dir(), library, "-DMDL_BLAS_OPENBLAS",
                own_rows=OWN_ROWS)  # OpenBLAS cannot pack


def installed_file(distribution: str, name: str) -> Path | None:
    """A file `distribution` installed whose name starts with `name`, or None."""
    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        return None
    dist = metadata.distribution(distribution)
    for f in files:
        if f.name.startswith(name):
            path = Path(dist.locate_file(f)).resolve()
            if path.exists():
                return path
    return None
