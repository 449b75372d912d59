// mdl's own product kernels (mdl/small_gemm.h, mdl/row_gemm.h), compiled once into the
// runtime object: the entry points blas.h's products call. Their templates stay in the
// headers, where a model's compile parses them (from the precompiled header) but
// instantiates none. Also the BLAS's threads as the Python face sets them (blas_control.h).
#include "blas_control.h"
#include "mdl/blas.h"
#include "mdl/row_gemm.h"
#include "mdl/small_gemm.h"

namespace mdl {

namespace blas_control {

void init() { blas_init(); }
int threads() { return blas_threads(); }
void set_threads(int n) { set_blas_threads(n); }
bool forked_after_threads() { return mdl::forked_after_threads(); }

}  // namespace blas_control

namespace small_gemm {

void pack(bool trans_b, int64_t n, int64_t k, const float* b, int64_t ldb, float* dst) {
  constexpr int64_t kDepth = 64;
  for (int64_t q = 0; q < panels(n); ++q) {
    float* panel = dst + q * k * kPanel;
    const int64_t cols = std::min<int64_t>(kPanel, n - q * kPanel);
    for (int64_t p0 = 0; p0 < k; p0 += kDepth) {
      const int64_t p1 = std::min(k, p0 + kDepth);
      if (trans_b) {
        for (int64_t j = 0; j < cols; ++j) {
          const float* row = b + (q * kPanel + j) * ldb;
          for (int64_t p = p0; p < p1; ++p) panel[p * kPanel + j] = row[p];
        }
      } else if (cols == kPanel) {  // a size the compiler knows: two vector moves, no call
        for (int64_t p = p0; p < p1; ++p)
          std::memcpy(panel + p * kPanel, b + p * ldb + q * kPanel, kPanel * sizeof(float));
      } else {
        for (int64_t p = p0; p < p1; ++p)
          std::memcpy(panel + p * kPanel, b + p * ldb + q * kPanel, cols * sizeof(float));
      }
      for (int64_t p = p0; p < p1; ++p)
        std::fill(panel + p * kPanel + cols, panel + (p + 1) * kPanel, 0.f);
    }
  }
}

void multiply(bool trans_a, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* packed, float beta, float* c, int64_t ldc, int64_t q0, int64_t q1) {
  for (int64_t q = q0; q < q1; ++q) {
    const float* panel = packed + q * k * kPanel;
    const int64_t cols = std::min<int64_t>(kPanel, n - q * kPanel);
    if (trans_a)
      panel_rows<true, true>(m, k, a, lda, panel, kPanel, beta, c + q * kPanel, ldc, cols);
    else
      panel_rows<false, true>(m, k, a, lda, panel, kPanel, beta, c + q * kPanel, ldc, cols);
  }
}

void multiply_in_place(bool trans_a, int64_t m, int64_t k, const float* a, int64_t lda,
                       const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                       int64_t q0, int64_t q1) {
  for (int64_t q = q0; q < q1; ++q) {
    if (trans_a)
      panel_rows<true, false>(m, k, a, lda, b + q * kPanel, ldb, beta, c + q * kPanel, ldc,
                              kPanel);
    else
      panel_rows<false, false>(m, k, a, lda, b + q * kPanel, ldb, beta, c + q * kPanel, ldc,
                               kPanel);
  }
}

}  // namespace small_gemm

namespace row_gemm {

void columns(bool trans_a, int64_t m, int64_t k, const float* a, int64_t lda,
                    const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int64_t j0,
                    int64_t j1) {
  if (trans_a)
    columns<true>(m, k, a, lda, b, ldb, beta, c, ldc, j0, j1);
  else
    columns<false>(m, k, a, lda, b, ldb, beta, c, ldc, j0, j1);
}

}  // namespace row_gemm

}  // namespace mdl
