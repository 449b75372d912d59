"""The CPU target's statements for each kernel primitive, attached as `extra["cpu"]`: the
shared ones (backend/kernels.py) calling cpp_runtime/mdl/kernels.h, and its own
products, which may multiply a right operand packed once before a loop (mdl/blas.h)."""
from __future__ import annotations

from ..backend.kernels import (STATEMENTS, cross_entropy_args, gemm_args, gemm_operand,
                               gemm_sizes)
from ..ops.primitives.core import TABLE


def _matmul(r, op, inputs, ins, outs, pack=None, accumulate=False):
    """`accumulate`: add the product into what the output's memory holds (lower.Kernel)."""
    if pack is None:
        return [f"mdl::gemm({gemm_args(r, op, inputs, ins, outs, accumulate)});"]
    # b packed before the loop (backend/pack.py, matmul_pack): its layout is in the pack
    a, b = inputs
    m, n, k = gemm_sizes(r, a, b)
    ta, lda = gemm_operand(r, a)
    tb, ldb = gemm_operand(r, b)
    beta = f"{r.ctype(op.outputs[0])}({1 if accumulate else 0})"
    return [f"mdl::gemm_packed(m.packs[{pack.index}], {ta}, {m}, {n}, {k}, {ins[0]}, "
            f"{lda}, {tb}, {ins[1]}, {ldb}, {beta}, {outs[0]}, {n});"]


def matmul_pack(r, pack) -> list[str]:
    """Pack a product's right operand (its memory before the loop: `pack.anchor`, laid
    out as the operand) for the products of a loop."""
    a, b = pack.kernel.inputs
    m, n, k = gemm_sizes(r, a, b)
    tb, ldb = gemm_operand(r, b)
    return [f"mdl::pack_b(m.packs[{pack.index}], {tb}, {m}, {n}, {k}, {r.ptr(pack.anchor)}, "
            f"{ldb});"]


def _cross_entropy(r, op, inputs, ins, outs):
    return [f"{outs[0]}[0] = mdl::cross_entropy({cross_entropy_args(r, op, inputs, ins)});"]


for _name, _lines in {**STATEMENTS, "matmul": _matmul, "cross_entropy": _cross_entropy}.items():
    TABLE[_name].extra["cpu"] = _lines
