// GEMM through OpenBLAS (scipy-openblas32), row-major, transposes as flags: no copies.
#pragma once

#include <cblas.h>

#include <cstdint>

namespace mdl {

inline CBLAS_TRANSPOSE trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

// c = alpha * op(a) @ op(b) + beta * c with op(a): m x k, op(b): k x n, c: m x n.
inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  if (m == 0 || n == 0) return;
  scipy_cblas_sgemm(CblasRowMajor, trans(trans_a), trans(trans_b), m, n, k, alpha, a, lda, b,
                    ldb, beta, c, ldc);
}

inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                 const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
                 double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  scipy_cblas_dgemm(CblasRowMajor, trans(trans_a), trans(trans_b), m, n, k, alpha, a, lda, b,
                    ldb, beta, c, ldc);
}

inline void set_blas_threads(int n) { scipy_openblas_set_num_threads(n); }

}  // namespace mdl
