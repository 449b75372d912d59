"""The machine a run measures, as every report names it (CPU vendor, model and the widest
vector ISA), and `--isa avx2`: every framework restricted to AVX2 on a machine that has
more, so that an AVX-512 machine also shows what an AVX2-only one (an AMD EPYC of Zen 3)
would run. MKL's choices that depend on the vendor (its AMD paths) only an AMD machine
shows."""
from __future__ import annotations

import os

from codegen.compile.cpu import cpu

ISAS = ("native", "avx2")

# What restricts each framework to AVX2 and FMA: mdl's generated code and runtime
# (-march=x86-64-v3, codegen/compile/flags.py), MKL (PyTorch's BLAS, and mdl's on Intel),
# oneDNN (PyTorch's LSTM), OpenBLAS (numpy's sgemm peak, and mdl's on AMD) and
# XLA (JAX).
AVX2_ENV = {"MDL_MARCH": "x86-64-v3", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2",
            "OPENBLAS_CORETYPE": "Haswell"}


def isa_environment(isa: str) -> dict[str, str]:
    """The environment variables every worker process of a run gets for `--isa`."""
    if isa == "native":
        return {}
    xla = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_cpu_max_isa=AVX2"]))
    return {**AVX2_ENV, "XLA_FLAGS": xla}


def describe(isa: str = "native") -> str:
    """`AMD EPYC 7B13 (AMD, AVX2)`, or `... (Intel, AVX-512; run restricted to AVX2)`."""
    c = cpu()
    restricted = f"; run restricted to {isa.upper()}" if isa != "native" else ""
    return f"{c.model} ({c.vendor}, {c.isa}{restricted})"
