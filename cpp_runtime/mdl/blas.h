// GEMM through the BLAS codegen/compile/blas.py chose: Intel MKL (MDL_BLAS_MKL) or OpenBLAS from
// scipy-openblas32 (MDL_BLAS_OPENBLAS). Row-major, transposes as flags: no copies.
//
// A right operand used by many products of one shape (a weight inside a time loop) can
// be packed once before the loop (`pack_b`) and multiplied in its packed form
// (`gemm_packed`). With MDL_OWN_KERNELS (by default with OpenBLAS, which cannot pack, and
// with MKL on AMD; MDL_SMALL_PRODUCTS overrides), a float product of up to
// small_gemm::kSmallRows rows (1024) runs mdl's own kernel on the packed operand
// (mdl/small_gemm.h), its panels shared out over OpenMP's threads from
// kOwnKernelSplitWork multiply-adds. Other packed products are MKL's packed API, which
// skips re-packing the operand at every step (15-30% of a recurrent product), or with
// OpenBLAS a plain `gemm`. The BLAS's own parallel parts run on OpenMP's threads too
// (blas_init), so that all products share one pool.
//
// The products themselves are defined in src/products.cpp, compiled once into the runtime
// object, for float and double: a model's code only calls them. Inline here, every
// model's compile instantiated mdl's kernels again (1.2-2 s of the char LM's 4.1-4.7 s
// build: docs/build.md, "What a model's compile holds").
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "mdl/arena.h"
#include "mdl/row_gemm.h"
#include "mdl/small_gemm.h"
#include "mdl/threads.h"

#if defined(MDL_BLAS_MKL)
#include <mkl_cblas.h>
#include <mkl_service.h>
#elif defined(MDL_BLAS_OPENBLAS)
#include <cblas.h>
#else
#error "define MDL_BLAS_MKL or MDL_BLAS_OPENBLAS (codegen/compile/blas.py chooses)"
#endif

namespace mdl {

// Products below this many multiply-adds (m * n * k) run on the calling thread: waking a
// second one costs more than it saves ([1, 128] @ [128, 512] packed: 2.2 us on one
// thread, 3.3 on two; docs/build.md).
constexpr int64_t kOneThreadWork = int64_t(1) << 18;

// What the calling thread's last product asked for: 1 (one thread: it was small), or 0
// (the global count, set_num_threads; as a function starts). MKL is told it; with either
// BLAS, a split right after a small product stays on one thread (split_threads).
inline int& product_threads_told() {
  thread_local int told = 0;
  return told;
}

// How many threads the calling thread's next product may use: one below kOneThreadWork,
// else the global count. MKL is told only when that changes, so a loop's small products
// make no call at all (two calls a product, setting and restoring, cost more than the
// second thread saves at B = 1).
inline void threads_for_product(int64_t work) {
  const int wanted = work < kOneThreadWork ? 1 : 0;
#if defined(MDL_BLAS_MKL)
  if (wanted == 0) threads_started() = true;
  if (wanted != product_threads_told()) mkl_set_num_threads_local(wanted);
#endif
  product_threads_told() = wanted;
}

// Declared first in every generated function: when it returns (or throws), MKL is back to
// the global count, so the next function (of this module or of another one, which keeps
// its own product_threads_told) and any other MKL user on this thread start from it.
class ProductThreads {
 public:
  ProductThreads() = default;
  ~ProductThreads() { threads_for_product(kOneThreadWork); }
  ProductThreads(const ProductThreads&) = delete;
  ProductThreads& operator=(const ProductThreads&) = delete;
};

#if MDL_OWN_KERNELS
// A float product of 2 to kOwnRowsMax rows, b not transposed, that is not a loop's (those
// are packed once: pack_b) runs mdl's kernels on b as it lies (own_rows_product), when
// their passes over b (one per block of rows) read at most kOwnRowsTraffic bytes: beyond,
// b no longer stays in the caches between passes and the BLAS's blocking wins. Up to
// kRowKernelRows rows the kernel is row_gemm's, above it small_gemm's blocks of rows. See
// own_rows_product (src/products.cpp) for the measurements.
constexpr int64_t kOwnRowsTraffic = int64_t(8) << 20;
constexpr int64_t kRowKernelRows = 8;
constexpr int64_t kOwnRowsMax = 256;

inline bool own_rows(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha) {
  if (trans_b || alpha != 1.f || m < 2 || m > kOwnRowsMax) return false;
  const int64_t passes = m <= kRowKernelRows ? row_gemm::passes(m) : small_gemm::passes(m);
  return passes * n * k * int64_t(sizeof(float)) <= kOwnRowsTraffic;
}
#endif

// c = alpha * op(a) @ op(b) + beta * c with op(a): m x k, op(b): k x n, c: m x n.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// Packs op(b) (k x n) into `buffer` for products with m-row left operands.
template <class T>
void pack_b(Arena& buffer, bool trans_b, int64_t m, int64_t n, int64_t k, const T* b,
            int64_t ldb);

// c = op(a) @ op(b) + beta * c, with op(b) packed into `buffer` by pack_b (same m, n, k);
// `b` itself is read only where neither mdl's kernel nor the BLAS packed it.
template <class T>
void gemm_packed(const Arena& buffer, bool trans_a, int64_t m, int64_t n, int64_t k, const T* a,
                 int64_t lda, bool trans_b, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// Threads the BLAS may use (every model of the process shares them).
inline void set_blas_threads(int n) {
#if defined(MDL_BLAS_MKL)
  mkl_set_num_threads(n);
#else
  scipy_openblas_set_num_threads(n);
#endif
}

inline int blas_threads() {
#if defined(MDL_BLAS_MKL)
  return mkl_get_max_threads();
#else
  return scipy_openblas_get_num_threads();
#endif
}

// Threads a product of mdl's own kernel or a large elementwise loop (codegen/targets/cpu.py)
// is split over: the products' count, on the same pool; one inside a parallel region
// (OpenMP would not nest it), and one right after a small product, where waking the
// other threads for one split costs more than it saves: a GRU's training step at B = 1,
// H = 256, whose backward step adds a [256, 256] gradient after a small product, took
// 0.51-0.78x the time with the add on one thread (OpenBLAS; MKL, whose own count it
// was before, 0.80-0.82x: docs/build.md).
inline int split_threads() {
  if (omp_in_parallel() || product_threads_told() == 1) return 1;
  const int n = blas_threads();
  if (n > 1) threads_started() = true;
  return n;
}

// Whether small float products run mdl's own kernels (MDL_OWN_KERNELS=1: packed ones of up
// to small_gemm::kSmallRows rows, and those run together) or the BLAS (0):
// codegen/compile/blas.py chooses, `MDL_SMALL_PRODUCTS`.
#if !defined(MDL_OWN_KERNELS)
#error "define MDL_OWN_KERNELS to 0 or 1 (codegen/compile/blas.py chooses)"
#endif

// Whether pack_b and gemm_packed run mdl's own kernel on float operands of this shape; both
// ask, with the same m, n, k, so they agree.
inline bool own_kernel(int64_t m, int64_t n, int64_t k) {
  return MDL_OWN_KERNELS && m != 0 && n != 0 && k != 0 && m <= small_gemm::kSmallRows;
}

// Products OpenBLAS runs on the calling thread: a GEMM of up to this many multiply-adds,
// a matrix-vector product of fewer than kOpenBlasRowWork (its interface's thresholds:
// SMP_THRESHOLD_MIN times GEMM_MULTITHREAD_THRESHOLD, and 2304 times the latter).
constexpr int64_t kOpenBlasOneThreadWork = int64_t(1) << 18;
constexpr int64_t kOpenBlasRowWork = 2304 * 4;

// Whether a product (`packed`: a loop's, with pack_b) runs on the calling thread inside a
// parallel region, as loops run at once need (mdl/concurrent.h): mdl's own kernels and MKL
// do; OpenBLAS splits a larger product into parts that must all run at once
// (run_openblas_parts), on threads of their own there, one product at a time.
template <class T>
inline bool on_calling_thread(bool packed, bool trans_b, int64_t m, int64_t n, int64_t k) {
#if defined(MDL_BLAS_MKL)
  (void)packed, (void)trans_b, (void)m, (void)n, (void)k;
  return true;
#else
  if constexpr (std::is_same_v<T, float>) {
    if (packed && own_kernel(m, n, k)) return true;
#if MDL_OWN_KERNELS
    if (!packed && own_rows(trans_b, m, n, k, 1.f)) return true;
#endif
    if (m == 1) return n * k < kOpenBlasRowWork;  // blas_row_product
  }
  (void)packed, (void)trans_b;
  return m * n * k <= kOpenBlasOneThreadWork;
#endif
}

// From this many multiply-adds mdl's kernel shares a product's panels out over the threads:
// half of MKL's kOneThreadWork, since the pool's threads are OpenMP's and still awake from
// the step before. A GRU at B = 1, H = 256 (its [1, 256] @ [256, 768] step product) on an
// AMD EPYC of Zen 4: forward 0.75 -> 0.59 ms, training step 2.70 -> 2.05; at 2^15 the
// LSTM's [1, 128] @ [128, 512] split too and gained nothing (docs/build.md).
constexpr int64_t kOwnKernelSplitWork = int64_t(1) << 17;

// One product's arguments, as `gemm` takes them (alpha 1).
template <class T>
struct Product {
  bool trans_a, trans_b;
  int64_t m, n, k;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T beta;
  T* c;
  int64_t ldc;
};

// Products of one step that read none of each other's results (codegen/backend/products.py
// groups them): with mdl's kernels, where they are worth it, all in one parallel region, each
// thread computing its share of every product's columns (mdl/row_gemm.h), so that a step
// forks and joins the threads once and each core streams its own part of the weights; else
// one after another.
template <class T>
void gemm_together(const Product<T>* p, std::size_t count);

// Called once before the first product (src/products.cpp says what it sets up).
void blas_init();

}  // namespace mdl
