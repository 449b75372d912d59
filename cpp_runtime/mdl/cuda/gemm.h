// Products on the GPU: mdl::gemm's row-major contract through cuBLAS.
#pragma once

#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>

#include "mdl/cuda/context.h"
#include "mdl/cuda/device.h"
#include "mdl/cuda/launch.h"
#include "mdl/cuda/primitives.h"

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

// Products of a few rows (a beam's K rows at B=1, a batch of 4): cuBLAS ran them on an
// H100 as a 128x32 tile and a split-K reduction, two kernels of 5.4 us together for 4 x 128
// times 128 x 512. Here one kernel: a block a tile of 32 columns of c, each of its warps a
// slice of the k products of every row (a lane a column, reading b's rows along it), the
// slices' sums then added in slice order (the same sum every run). b not transposed: its
// rows are what a warp reads at once; beta 0: c is written, not added to.
//
// A slice is kSkinnyDepth rows of b while the block has warps to spare (up to 32), read
// kSkinnyBatch at a time, all of a batch's loads issued before any is used. With 8 warps
// a block, each running down its 64 of b's 512 rows a load after another, 4 x 512 times
// 512 x 2048 (an LSTM's product at H=512 in a beam of 4) took 12.5 us on an H200 (4 MB:
// 0.33 TB/s), 4 x 128 times 128 x 512 took 3.9 us.
constexpr int64_t kSkinnyRows = 8;
constexpr int64_t kSkinnyDepth = 16;
constexpr int kSkinnyBatch = 8;
template <class T>  // the most warps a block: their sums take 32 KB of shared memory
constexpr int kSkinnySlices = int(32 * 1024 / (kSkinnyRows * 32 * sizeof(T)));
// Deeper products take cuBLAS, which splits k across blocks: here a block is a tile of
// columns, so a deep and narrow b (k = 16384, n = 64) would be read by 2 blocks.
constexpr int64_t kSkinnyDeepest = 1024;
template <class T>
bool skinny(bool tb, int64_t m, int64_t n, int64_t k, T beta) {
  return !tb && beta == T(0) && m >= 2 && m <= kSkinnyRows && k <= kSkinnyDeepest &&
         n * k <= (int64_t(1) << 20);
}

// The warps of a block for k products: the fewest (a power of 2) whose slices are at most
// kSkinnyDepth deep, up to kSkinnySlices.
template <class T>
int skinny_slices(int64_t k) {
  int slices = 1;
  while (slices < kSkinnySlices<T> && slices * kSkinnyDepth < k) slices *= 2;
  return slices;
}

template <class T>
__global__ void __launch_bounds__(kSkinnySlices<T> * 32)
    skinny_gemm_kernel(bool ta, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                       int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
  MDL_SHARED_ARRAY(T, sums, kSkinnySlices<T> * kSkinnyRows * 32);
  const int lane = threadIdx.x % 32, slice = threadIdx.x / 32, slices = blockDim.x / 32;
  const int64_t j = blockIdx.x * int64_t(32) + lane;
  const int64_t per = (k + slices - 1) / slices;
  const int64_t first = slice * per < k ? slice * per : k;
  const int64_t last = first + per < k ? first + per : k;
  T acc[kSkinnyRows] = {};
  const auto add = [&](int64_t p, T bv) {
    MDL_UNROLL
    for (int i = 0; i < kSkinnyRows; ++i)
      if (i < m) acc[i] += (ta ? a[p * lda + i] : a[i * lda + p]) * bv;
  };
  if (j < n) {
    int64_t p = first;
    for (; p + kSkinnyBatch <= last; p += kSkinnyBatch) {
      T bv[kSkinnyBatch];
      MDL_UNROLL
      for (int u = 0; u < kSkinnyBatch; ++u) bv[u] = b[(p + u) * ldb + j];
      MDL_UNROLL
      for (int u = 0; u < kSkinnyBatch; ++u) add(p + u, bv[u]);
    }
    for (; p < last; ++p) add(p, b[p * ldb + j]);
  }
  MDL_UNROLL
  for (int i = 0; i < kSkinnyRows; ++i) sums[(slice * kSkinnyRows + i) * 32 + lane] = acc[i];
  __syncthreads();
  // warp i (and i + slices, ...) writes row i's elements of the tile
  for (int64_t i = slice; i < m; i += slices) {
    if (j >= n) continue;
    T total = 0;
    for (int s = 0; s < slices; ++s) total += sums[(s * kSkinnyRows + i) * 32 + lane];
    c[i * ldc + j] = alpha * total;
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
  if (skinny(tb, m, n, k, beta)) {
    launch(skinny_gemm_kernel<T>, unsigned((n + 31) / 32), unsigned(skinny_slices<T>(k) * 32),
           g.stream, ta, m, n, k, alpha, a, lda, b, ldb, c, ldc);
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
