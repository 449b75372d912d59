// Columns of a product with few rows against a right operand as it lies (row-major k x n,
// not packed): the kernel each thread runs on its share of the columns when a step's
// independent products are split over the cores together (blas.h, `gemm_together`), and
// for a product of up to 256 rows that is not a loop's (blas.h, `own_rows`).
// The BLAS cannot be called there: OpenBLAS would hand each part to the same threads
// again. With one row the product streams op(b) once, many of its rows at a time
// (`one_row`); with more, 4 rows x 4 vectors of sums share each load of b, and a row left
// over keeps a strip of 8 vectors (128 columns with AVX-512) to have loads enough in
// flight. A loop's one-row products run `one_row` too, on b unpacked (blas.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "mdl/small_gemm.h"

namespace mdl::row_gemm {

using small_gemm::kLanes;
using small_gemm::Vec;

// c[0:R, 0:V kLanes] = op(a)[0:R, :] @ b[:, 0:V kLanes] + beta * c, op(a) R x k. The loops
// over V are unrolled: with AVX2, GCC otherwise copied b's row through the stack and kept
// the sums there ([1, 128] @ [128, 512]: 10.4 -> 3.1 us). With AVX-512 and more than one
// row, b's row stays in registers (small_gemm::in_register; [4, 128] @ [128, 512]: 9.3 ->
// 6.3 us); in AVX2's 16 registers beside 16 sums that spilled (10.7 -> 11.7 us).
template <int R, int V, bool TransA>
inline void strip(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                  float beta, float* c, int64_t ldc) {
  Vec sum[R][V];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) sum[i][v] = Vec{};
  for (int64_t p = 0; p < k; ++p) {
    Vec row[V];
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) {
      std::memcpy(&row[v], b + p * ldb + v * kLanes, sizeof(Vec));
      if constexpr (R > 1 && kLanes == 16) small_gemm::in_register(row[v]);
    }
    for (int i = 0; i < R; ++i) {
      const float x = TransA ? a[p * lda + i] : a[i * lda + p];
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) sum[i][v] += x * row[v];
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) {
      float* out = c + i * ldc + v * kLanes;
      if (beta != 0.f) {
        Vec old;
        std::memcpy(&old, out, sizeof(Vec));
        sum[i][v] += beta * old;
      }
      std::memcpy(out, &sum[i][v], sizeof(Vec));
    }
}

// Rows [0, R) of columns [j0, j1), a whole number of vectors: strips of V vectors, then of
// one.
template <int R, int V, bool TransA>
inline void rows(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                 float beta, float* c, int64_t ldc, int64_t j0, int64_t j1) {
  int64_t j = j0;
  for (; j + V * kLanes <= j1; j += V * kLanes)
    strip<R, V, TransA>(k, a, lda, b + j, ldb, beta, c + j, ldc);
  for (; j + kLanes <= j1; j += kLanes)
    strip<R, 1, TransA>(k, a, lda, b + j, ldb, beta, c + j, ldc);
}

// The last `cols` (fewer than a vector's) columns of c = op(a) @ b + beta * c, op(a) m x k:
// b's columns copied, kDepth rows at a time, into a strip one vector wide, zero past them,
// which strips of up to 4 rows multiply into a tile of sums, kBlock rows at a time; `cols`
// columns of it stored. They were summed one column at a time, each a chain of dependent
// adds over k: [32, 320]^T @ [320, 30], a projection's weight gradient at 30 classes, took
// 409 us on one thread, its 14 columns past one strip nearly all of it; now 11.3 us, and
// 7.7 with 32 columns. [32, 35]^T @ [35, 5]: 15.3 -> 1.5 us (AMD EPYC of Zen 4).
template <bool TransA>
inline void tail(int64_t m, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float beta, float* c, int64_t ldc, int64_t cols) {
  constexpr int64_t kDepth = 128, kBlock = 64;
  alignas(64) float strip_b[kDepth * kLanes];
  alignas(64) float sums[kBlock * kLanes];
  auto at = [&](int64_t i, int64_t p) { return TransA ? a + p * lda + i : a + i * lda + p; };
  for (int64_t i0 = 0; i0 < m; i0 += kBlock) {
    const int64_t block = std::min(kBlock, m - i0);
    std::fill(sums, sums + block * kLanes, 0.f);
    for (int64_t p0 = 0; p0 < k; p0 += kDepth) {
      const int64_t depth = std::min(kDepth, k - p0);
      for (int64_t p = 0; p < depth; ++p) {
        float* row = strip_b + p * kLanes;
        std::memcpy(row, b + (p0 + p) * ldb, cols * sizeof(float));
        std::fill(row + cols, row + kLanes, 0.f);
      }
      int64_t i = 0;
      for (; i + 4 <= block; i += 4)
        strip<4, 1, TransA>(depth, at(i0 + i, p0), lda, strip_b, kLanes, 1.f,
                            sums + i * kLanes, kLanes);
      for (; i < block; ++i)
        strip<1, 1, TransA>(depth, at(i0 + i, p0), lda, strip_b, kLanes, 1.f,
                            sums + i * kLanes, kLanes);
    }
    for (int64_t i = 0; i < block; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        float* out = c + (i0 + i) * ldc + j;
        *out = beta != 0.f ? sums[i * kLanes + j] + beta * *out : sums[i * kLanes + j];
      }
  }
}

// Columns [j0, j1) of c = op(a) @ b + beta * c for one row of op(a) (its elements lda
// apart when transposed): b streamed kDepth rows at a time, each a run of up to kChunk
// contiguous columns, into sums kept in a buffer the L1 cache holds. A strip of 64 columns
// (with AVX2) walked down b's rows reads one stream of 256 bytes a row, and a packed panel
// one stream too; kDepth streams at once keep more of the memory's requests in flight.
// [1, 512] @ [512, 10000], 35 times from one packing (greedy decoding's projection; AMD
// EPYC of Zen 3, 2 threads): 0.28x the packed kernel's time; [1, 1024] @ [1024, 4096]
// 0.31x; [1, 128] @ [128, 512] 0.81x; on one thread 0.41x, 0.36x and 0.77x.
// A thread streams its columns of b by `one_row` past this many bytes of them; fewer stay
// in the caches from call to call, where a strip's sums kept in registers do as well or
// better: the `while` of the suite's ponder case at B = 1, H = 128 ([1, 128] @ [128, 128],
// 64 KB) took 1.07x the time of its training step by `one_row`, and the generation step
// at H = 128 (two threads' halves of [128, 512]: 128 KB each) 0.94-1.13x (Zen 3).
constexpr int64_t kStreamBytes = int64_t(128) << 10;

template <bool TransA>
inline void one_row(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float beta, float* c, int64_t j0, int64_t j1) {
  constexpr int kDepth = 8;
  constexpr int64_t kChunk = 4096;
  alignas(64) float sums[kChunk];
  const int64_t step = TransA ? lda : 1;
  for (int64_t c0 = j0; c0 < j1; c0 += kChunk) {
    const int64_t width = std::min(kChunk, j1 - c0), whole = width / kLanes * kLanes;
    std::fill(sums, sums + width, 0.f);
    int64_t p = 0;
    for (; p + kDepth <= k; p += kDepth) {
      float x[kDepth];
      const float* row[kDepth];
      for (int i = 0; i < kDepth; ++i) {
        x[i] = a[(p + i) * step];
        row[i] = b + (p + i) * ldb + c0;
      }
      for (int64_t j = 0; j < whole; j += kLanes) {
        Vec sum;
        std::memcpy(&sum, sums + j, sizeof(Vec));
#pragma GCC unroll 8
        for (int i = 0; i < kDepth; ++i) {
          Vec v;
          std::memcpy(&v, row[i] + j, sizeof(Vec));
          sum += x[i] * v;
        }
        std::memcpy(sums + j, &sum, sizeof(Vec));
      }
      for (int64_t j = whole; j < width; ++j)
        for (int i = 0; i < kDepth; ++i) sums[j] += x[i] * row[i][j];
    }
    for (; p < k; ++p) {
      const float x = a[p * step], *row = b + p * ldb + c0;
      for (int64_t j = 0; j < width; ++j) sums[j] += x * row[j];
    }
    float* out = c + c0;
    if (beta == 0.f)
      std::memcpy(out, sums, width * sizeof(float));
    else
      for (int64_t j = 0; j < width; ++j) out[j] = sums[j] + beta * out[j];
  }
}

// Passes over b that `columns` makes for m rows: one per 4 rows, one per row left over.
inline int64_t passes(int64_t m) { return m / 4 + m % 4; }

// Columns [j0, j1) of c = op(a) @ b + beta * c, op(a) m x k, b k x n row-major (ldb).
template <bool TransA>
inline void columns(int64_t m, int64_t k, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float beta, float* c, int64_t ldc, int64_t j0, int64_t j1) {
  if (m == 1 && (j1 - j0) * k * int64_t(sizeof(float)) > kStreamBytes)
    return one_row<TransA>(k, a, lda, b, ldb, beta, c, j0, j1);
  auto at = [&](int64_t i) { return TransA ? a + i : a + i * lda; };
  const int64_t whole = j0 + (j1 - j0) / kLanes * kLanes;  // columns in whole vectors
  int64_t i = 0;
  for (; i + 4 <= m; i += 4)
    rows<4, 4, TransA>(k, at(i), lda, b, ldb, beta, c + i * ldc, ldc, j0, whole);
  for (; i < m; ++i)
    rows<1, 8, TransA>(k, at(i), lda, b, ldb, beta, c + i * ldc, ldc, j0, whole);
  if (whole < j1) tail<TransA>(m, k, a, lda, b + whole, ldb, beta, c + whole, ldc, j1 - whole);
}

void columns(bool trans_a, int64_t m, int64_t k, const float* a, int64_t lda, const float* b,
             int64_t ldb, float beta, float* c, int64_t ldc, int64_t j0,
             int64_t j1);  // src/products.cpp

}  // namespace mdl::row_gemm
