// A per-step product of a loop (a batch of up to kSmallRows rows) against a right
// operand packed once before the loop: mdl's own kernel, used with OpenBLAS, which has no
// packed API and re-packs the right operand at every call, and with MKL on AMD, where
// MKL's packed products were slower; with MKL on Intel for one-row products only (by
// default: codegen/compile/blas.py chooses, MDL_SMALL_PRODUCTS overrides; blas.h shares a
// product's panels out over the threads).
// It reads op(B) from panels of kPanel columns packed once and keeps kRows x kPanel sums
// in registers. [1, 128] @ [128, 512] on an AMD EPYC of Zen 4: 2.5-3.0 us, OpenBLAS 4.2,
// MKL restricted to AVX2 4.1 (docs/build.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace mdl::small_gemm {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;  // AVX2 (or narrower, which the compiler splits)
#endif
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));
constexpr int kPanel = 2 * kLanes;  // columns of a packed panel: two vectors
// Rows of the left operand a block keeps sums for: 2 vectors of sums a row, and the two
// vectors of the panel's row and a broadcast, in the 32 vector registers of AVX-512 or the
// 16 of AVX2 (8 rows there spilled sums: [20, 200] @ [200, 800] took 101 us, 64 with 6).
#if defined(__AVX512F__)
constexpr int kRows = 8;
#else
constexpr int kRows = 6;
#endif
// Rows up to which a loop's packed product runs this kernel, past them the BLAS. Up to
// 64 until 2026-11-27; then, measured as two builds of an LSTM (T = 35) alternating in one
// process (AMD EPYC of Zen 4, 2 threads; forward / training step, new / old): B = 80-128,
// H = 256-1024 0.75-0.96 / 0.86-0.91 with OpenBLAS, 0.84-0.96 / 0.86 with MKL, 0.96-0.97
// / 0.96 restricted to AVX2; B = 256-1024, H = 128-256 0.91-0.99 / 0.93-0.98 (AVX2 at B
// = 512: 1.01 / 0.99); a beam search of 32 x 4 rows at H = 256, 0.85. OpenBLAS's GEMM
// zeroes c, packs a and re-packs the weight at every step (21% of that beam search).
constexpr int64_t kSmallRows = 1024;

inline int64_t panels(int64_t n) { return (n + kPanel - 1) / kPanel; }

inline std::size_t packed_bytes(int64_t n, int64_t k) {
  return std::size_t(panels(n) * k * kPanel) * sizeof(float);
}

// op(b) (k x n; b stored row-major with leading dimension ldb, transposed if trans_b) into
// panels: panel q holds columns [q kPanel, (q + 1) kPanel) row by row, zero beyond n.
// Transposed, op(b)'s column j is b's row j: it is read along that row kDepth elements at
// a time, so that the panel rows written stay in the L1 cache (the element-by-element
// gather it replaced took 73 us for [512, 128]^T, 543 for [1024, 256]^T; now 19 and 84).
void pack(bool trans_b, int64_t n, int64_t k, const float* b, int64_t ldb,
          float* dst);  // src/products.cpp

// Keeps a vector just loaded in a register. Without it GCC reads the panel's row from
// memory again in each of a block's R multiply-adds, and 4 rows ran at half the speed
// ([4, 128] @ [128, 512]: 10.6 us, 4.8 kept, AVX-512).
inline void in_register(Vec& v) {
#if defined(__AVX__) && defined(__GNUC__)
  asm("" : "+v"(v));
#else
  (void)v;
#endif
}

// out[0:kLanes] = sum + beta * out (out not read when beta is 0). A panel's row was stored
// through a loop over its columns, which GCC made a call to memcpy per row: 5% of an LSTM
// forward's time at B = 32, H = 256 (AMD EPYC of Zen 4, `perf`).
inline void store(float* out, Vec sum, float beta) {
  if (beta != 0.f) {
    Vec old;
    std::memcpy(&old, out, sizeof(Vec));
    sum += beta * old;
  }
  std::memcpy(out, &sum, sizeof(Vec));
}

// c[0:R, 0:cols] = op(a)[0:R, :] @ panel + beta * c, op(a) R x k, the panel's rows ldp
// floats apart: kPanel where it is packed (`Packed`: a constant, so that its rows are read
// at constant offsets), b's leading dimension where b is read in place. With one or two
// rows, a row's sums are kept in C chains over k (chain j takes p = j, j + C, ...), so
// that enough multiply-adds are in flight: in one chain each waited for the one before
// ([1, 128] @ [128, 512] with AVX2: 4.6 us, 2.7-3.2 in 4 chains). Inlined into its caller,
// as it was when every model compiled it, not called once a panel.
template <int R, bool TransA, bool Packed>
[[gnu::always_inline]] inline void block(int64_t k, const float* a, int64_t lda,
                                         const float* panel, int64_t ldp_in, float beta,
                                         float* c, int64_t ldc, int64_t cols) {
  const int64_t ldp = Packed ? int64_t(kPanel) : ldp_in;
  constexpr int C = R == 1 ? 4 : R == 2 ? 2 : 1;
  Vec sum[C][R][2];
  for (int j = 0; j < C; ++j)
    for (int i = 0; i < R; ++i) sum[j][i][0] = sum[j][i][1] = Vec{};
  auto step = [&](int j, int64_t p) {
    Vec b0, b1;
    std::memcpy(&b0, panel + p * ldp, sizeof(Vec));
    std::memcpy(&b1, panel + p * ldp + kLanes, sizeof(Vec));
    in_register(b0);
    in_register(b1);
    for (int i = 0; i < R; ++i) {
      const float x = TransA ? a[p * lda + i] : a[i * lda + p];
      sum[j][i][0] += x * b0;
      sum[j][i][1] += x * b1;
    }
  };
  int64_t p = 0;
  for (; p + C <= k; p += C)
    for (int j = 0; j < C; ++j) step(j, p + j);
  for (; p < k; ++p) step(0, p);
  for (int j = 1; j < C; ++j)
    for (int i = 0; i < R; ++i) {
      sum[0][i][0] += sum[j][i][0];
      sum[0][i][1] += sum[j][i][1];
    }
  for (int i = 0; i < R; ++i) {
    float* row = c + i * ldc;
    if (cols == kPanel) {  // a whole panel: two vector stores
      store(row, sum[0][i][0], beta);
      store(row + kLanes, sum[0][i][1], beta);
      continue;
    }
    float out[kPanel];
    std::memcpy(out, &sum[0][i][0], sizeof(Vec));
    std::memcpy(out + kLanes, &sum[0][i][1], sizeof(Vec));
    if (beta == 0.f)
      for (int64_t j = 0; j < cols; ++j) row[j] = out[j];
    else
      for (int64_t j = 0; j < cols; ++j) row[j] = out[j] + beta * row[j];
  }
}

// Rows [i, m) of one panel, kRows at a time, then the rest.
template <bool TransA, bool Packed>
inline void panel_rows(int64_t m, int64_t k, const float* a, int64_t lda, const float* panel,
                       int64_t ldp, float beta, float* c, int64_t ldc, int64_t cols) {
  int64_t i = 0;
  auto rows = [&](auto r) {  // block<r> at row i
    block<decltype(r)::value, TransA, Packed>(k, TransA ? a + i : a + i * lda, lda, panel,
                                               ldp, beta, c + i * ldc, ldc, cols);
  };
  for (; i + kRows <= m; i += kRows) rows(std::integral_constant<int, kRows>{});
  switch (m - i) {
    case 7: rows(std::integral_constant<int, 7>{}); break;
    case 6: rows(std::integral_constant<int, 6>{}); break;
    case 5: rows(std::integral_constant<int, 5>{}); break;
    case 4: rows(std::integral_constant<int, 4>{}); break;
    case 3: rows(std::integral_constant<int, 3>{}); break;
    case 2: rows(std::integral_constant<int, 2>{}); break;
    case 1: rows(std::integral_constant<int, 1>{}); break;
    default: break;
  }
}

// Columns [q0 kPanel, q1 kPanel) (panels q0 to q1) of c = op(a) @ op(b) + beta * c, op(a)
// m x k (m <= kSmallRows), op(b) packed by `pack`.
void multiply(bool trans_a, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* packed, float beta, float* c, int64_t ldc, int64_t q0,
              int64_t q1);  // src/products.cpp

// Blocks of rows a pass over the right operand: kRows rows, then the rest.
inline int64_t passes(int64_t m) { return m / kRows + (m % kRows != 0); }

// Whole panels [q0, q1) of c = op(a) @ b + beta * c with b (k x n, row-major, leading
// dimension ldb) read where it lies, not packed: a panel's row is kPanel floats of b's.
// Columns past the last whole panel are the caller's.
void multiply_in_place(bool trans_a, int64_t m, int64_t k, const float* a, int64_t lda,
                       const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                       int64_t q0, int64_t q1);  // src/products.cpp

}  // namespace mdl::small_gemm
