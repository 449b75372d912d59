"""The CUDA target's statements for each kernel primitive, attached as `extra["cuda"]`: the
shared ones (backend/kernels.py) calling cpp_runtime/mdl/cuda/kernels.h on the model's
stream, and its own products (cuBLAS) and cross-entropy (its loss stays on the device)."""
from __future__ import annotations

from ..backend.kernels import STATEMENTS, cross_entropy_args, gemm_args
from ..ops.primitives.core import TABLE


def _matmul(r, op, inputs, ins, outs, accumulate=False):
    """`accumulate`: add the product into what the output's memory holds (lower.Kernel)."""
    return [f"mdl::cuda::gemm(g, {gemm_args(r, op, inputs, ins, outs, accumulate)});"]


def _cross_entropy(r, op, inputs, ins, outs):
    return [f"mdl::cuda::cross_entropy(g, {cross_entropy_args(r, op, inputs, ins)}, {outs[0]});"]


for _name, _lines in {**STATEMENTS, "matmul": _matmul, "cross_entropy": _cross_entropy}.items():
    TABLE[_name].extra["cuda"] = _lines
