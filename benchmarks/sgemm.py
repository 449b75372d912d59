"""The peak every row is measured against: a large square float32 product through
numpy's BLAS, in a worker with the run's thread count and in one with a single thread;
for the GPU rows, through PyTorch on the GPU (TF32 off, as every GPU row runs)."""
from __future__ import annotations

import numpy as np

from benchmarks.cases import Bench, Case


def setup(case: Case) -> Bench:
    """One N x N by N x N product a call; nothing to check against another framework."""
    if case.device == "cuda":
        from benchmarks.torch_models import cuda_product
        return cuda_product(case.dims["N"])
    rng = np.random.default_rng(0)
    n = case.dims["N"]
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    out = np.empty_like(a)
    return Bench({"sgemm": lambda: np.matmul(a, b, out=out)}, dict)
