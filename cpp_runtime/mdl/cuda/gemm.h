// Products on the GPU: mdl::gemm's row-major contract through cuBLAS.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "mdl/cuda/context.h"
#include "mdl/cuda/launch.h"

namespace mdl {
namespace cuda {

// ---- products -------------------------------------------------------------------------

inline cublasStatus_t cublas_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                  int64_t m, int64_t n, int64_t k, const float* alpha,
                                  const float* a, int64_t lda, const float* b, int64_t ldb,
                                  const float* beta, float* c, int64_t ldc) {
  return cublasSgemm_64(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline cublasStatus_t cublas_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                  int64_t m, int64_t n, int64_t k, const double* alpha,
                                  const double* a, int64_t lda, const double* b, int64_t ldb,
                                  const double* beta, double* c, int64_t ldc) {
  return cublasDgemm_64(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// c = beta * c over an m x n row-major block (rows ldc apart); beta 0 writes zeros.
template <class T>
__global__ void scale_kernel(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t e = first_item(); e < m * n; e += item_stride()) {
    T& v = c[e / n * ldc + e % n];
    v = beta == T(0) ? T(0) : beta * v;
  }
}

// mdl::gemm on the GPU: row-major c = alpha op(a) op(b) + beta c. To column-major cuBLAS a
// row-major matrix is its transpose, so it computes c^T = op(b)^T op(a)^T.
template <class T>
void gemm(Context& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // as the CPU: cuBLAS may refuse the leading dims of empty operands
    launch(scale_kernel<T>, blocks(m * n), kThreads, g.stream, m, n, beta, c, ldc);
    check_launch("gemm");
    return;
  }
  const auto op = [](bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; };
  if (Signature* dry = recording()) {  // mdl/cuda/graph.h
    static const char product = 0;
    dry->add(&product, g.blas, g.stream, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  check(cublas_gemm(g.blas, op(tb), op(ta), n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc),
        "cublas gemm");
}

}  // namespace cuda
}  // namespace mdl
