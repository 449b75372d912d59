// GEMM through the BLAS codegen/compile/blas.py chose: Intel MKL (MDL_BLAS_MKL) or OpenBLAS from
// scipy-openblas32 (MDL_BLAS_OPENBLAS). Row-major, transposes as flags: no copies.
//
// A right operand used by many products of one shape (a weight inside a time loop) can
// be packed once before the loop (`pack_b`) and multiplied in its packed form
// (`gemm_packed`). With MDL_OWN_KERNELS (by default; MDL_SMALL_PRODUCTS overrides), a
// float product of up to small_gemm::kSmallRows rows (1024; with MKL on Intel one row:
// MDL_OWN_ROWS) runs mdl's own kernel on the packed operand
// (mdl/small_gemm.h), its panels shared out over OpenMP's threads from
// kOwnKernelSplitWork multiply-adds; one of one row reads b unpacked (row_gemm::one_row,
// own_row_unpacked). Other packed products are MKL's packed API, which
// skips re-packing the operand at every step (15-30% of a recurrent product), or with
// OpenBLAS a plain `gemm`. The BLAS's own parallel parts run on OpenMP's threads too
// (blas_init), so that all products share one pool.
//
// What chooses a kernel is inline here, so that a model's compile folds its constant
// sizes and flags into it; the kernels themselves (small_gemm::multiply, ::pack,
// ::multiply_in_place, row_gemm::columns) are compiled once, in src/products.cpp. Inline,
// every model's compile instantiated them again (1.2-2 s of the char LM's 4.1-4.7 s build:
// docs/build.md, "What a model's compile holds").
#pragma once

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

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

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>
#else
#error "define MDL_BLAS_MKL or MDL_BLAS_OPENBLAS (codegen/compile/blas.py chooses)"
#endif

namespace mdl {

inline CBLAS_TRANSPOSE trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

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

#if defined(MDL_BLAS_MKL)
inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
                      float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
                      double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                      double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#else
// Calls into OpenBLAS, kept out of a fork: OpenBLAS's own prepare handler, which shuts its
// threads down, hung joining one of them when os.fork() ran while another thread was
// inside an OpenBLAS call (tests/test_module_calls.py's forked child: 8 of 30 forks with
// both cores busy). A fork waits, from its prepare handler (blas_init), until no call is
// inside; calls wait while it forks. Atomics, not a pthread rwlock: in the child the
// forking thread has another id, and glibc would not take its unlock for the writer's.
// One gate a module: each module's handler closes its own.
class OpenBlasGate {
 public:
  void enter() {
    for (;;) {
      while (forking_.load()) std::this_thread::yield();
      inside_.fetch_add(1);
      if (!forking_.load()) return;
      inside_.fetch_sub(1);
    }
  }
  void leave() { inside_.fetch_sub(1); }
  void close() {  // a fork's prepare handler
    forking_.store(true);
    while (inside_.load() != 0) std::this_thread::yield();
  }
  void open() { forking_.store(false); }  // its parent and child handlers

 private:
  std::atomic<int> inside_{0};
  std::atomic<bool> forking_{false};
};

inline OpenBlasGate& openblas_gate() {
  static OpenBlasGate gate;
  return gate;
}

// Held for the length of one call into OpenBLAS.
struct OpenBlasCall {
  OpenBlasCall() { openblas_gate().enter(); }
  ~OpenBlasCall() { openblas_gate().leave(); }
  OpenBlasCall(const OpenBlasCall&) = delete;
  OpenBlasCall& operator=(const OpenBlasCall&) = delete;
};

inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
                      float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float beta, float* c, int64_t ldc) {
  OpenBlasCall calling;
  scipy_cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
// c[0, :n] = alpha * x @ op(b) + beta * c, x the k elements x[0], x[incx], ...: a product
// of one row as OpenBLAS's matrix-vector kernel (its GEMM kernel for one row took 5 of a
// generation step's 11.5 us: docs/build.md). With beta 0, c is zeroed first, so that
// whatever the memory held (a NaN) cannot reach the result through beta * c.
inline void blas_row_product(bool tb, int64_t n, int64_t k, float alpha, const float* x,
                             int64_t incx, const float* b, int64_t ldb, float beta, float* c) {
  if (beta == 0.f) std::fill(c, c + n, 0.f);
  OpenBlasCall calling;
  if (tb)  // op(b) = b^T, b n x k: c = b @ x
    scipy_cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, alpha, b, ldb, x, incx, beta, c, 1);
  else     // b k x n: c = b^T @ x
    scipy_cblas_sgemv(CblasRowMajor, CblasTrans, k, n, alpha, b, ldb, x, incx, beta, c, 1);
}
inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
                      double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                      double beta, double* c, int64_t ldc) {
  OpenBlasCall calling;
  scipy_cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#endif

// The most rows of a product that mdl's kernels take (MDL_OWN_ROWS): a loop's packed
// products (at most small_gemm::kSmallRows) and others (at most kOwnRowsMax, own_rows);
// more go to the BLAS. codegen/compile/blas.py chooses: no limit but those, and with MKL on
// Intel one row, where an Intel Xeon ran MKL's products of more rows faster (docs/build.md).
#if !defined(MDL_OWN_ROWS)
#define MDL_OWN_ROWS 1024
#endif
constexpr int64_t kOwnRows = MDL_OWN_ROWS;

#if MDL_OWN_KERNELS
// A float product of 2 to kOwnRowsMax rows, b not transposed, that is not a loop's (those
// are packed once: pack_b) runs mdl's kernels on b as it lies (own_rows_product), when
// their passes over b (one per block of rows) read at most kOwnRowsTraffic bytes: beyond,
// b no longer stays in the caches between passes and the BLAS's blocking wins. Up to
// kRowKernelRows rows the kernel is row_gemm's, above it small_gemm's blocks of rows. See
// own_rows_product for the measurements.
constexpr int64_t kOwnRowsTraffic = int64_t(8) << 20;
constexpr int64_t kRowKernelRows = 8;
constexpr int64_t kOwnRowsMax = 256;

inline bool own_rows(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha) {
  if (trans_b || alpha != 1.f || m < 2 || m > std::min(kOwnRowsMax, kOwnRows)) return false;
  const int64_t passes = m <= kRowKernelRows ? row_gemm::passes(m) : small_gemm::passes(m);
  return passes * n * k * int64_t(sizeof(float)) <= kOwnRowsTraffic;
}

inline void own_rows_product(bool trans_a, int64_t m, int64_t n, int64_t k, const float* a,
                             int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                             int64_t ldc);  // below
#endif

// c = alpha * op(a) @ op(b) + beta * c with op(a): m x k, op(b): k x n, c: m x n.
template <class T>
inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
                 const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // c = beta * c (MKL refuses the leading dims of empty operands)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  threads_for_product(m * n * k);
#if MDL_OWN_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (own_rows(trans_b, m, n, k, alpha)) {
      own_rows_product(trans_a, m, n, k, a, lda, b, ldb, beta, c, ldc);
      return;
    }
  }
#endif
#if defined(MDL_BLAS_OPENBLAS)
  if constexpr (std::is_same_v<T, float>) {
    if (m == 1) {  // op(a) one row: a[0, :] (lda apart when transposed)
      blas_row_product(trans_b, n, k, alpha, a, trans_a ? lda : 1, b, ldb, beta, c);
      return;
    }
  }
#endif
  blas_gemm(trans(trans_a), trans(trans_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// c[i] = a[i] @ b[i] for i < batch: `@` of two batches of matrices (row-major, each
// contiguous: a [batch, m, k], b [batch, k, n], c [batch, m, n]), one product a matrix.
template <class T>
inline void batched_gemm(int64_t batch, int64_t m, int64_t n, int64_t k, const T* a,
                         const T* b, T* c) {
  for (int64_t i = 0; i < batch; ++i)
    gemm(false, false, m, n, k, T(1), a + i * m * k, std::max<int64_t>(k, 1), b + i * k * n,
         std::max<int64_t>(n, 1), T(0), c + i * m * n, std::max<int64_t>(n, 1));
}

#if defined(MDL_BLAS_MKL)
inline std::size_t pack_size(float*, int64_t m, int64_t n, int64_t k) {
  return cblas_sgemm_pack_get_size(CblasBMatrix, m, n, k);
}
inline std::size_t pack_size(double*, int64_t m, int64_t n, int64_t k) {
  return cblas_dgemm_pack_get_size(CblasBMatrix, m, n, k);
}
inline void blas_pack(bool tb, int64_t m, int64_t n, int64_t k, const float* b, int64_t ldb,
                      float* dst) {
  cblas_sgemm_pack(CblasRowMajor, CblasBMatrix, trans(tb), m, n, k, 1.0f, b, ldb, dst);
}
inline void blas_pack(bool tb, int64_t m, int64_t n, int64_t k, const double* b, int64_t ldb,
                      double* dst) {
  cblas_dgemm_pack(CblasRowMajor, CblasBMatrix, trans(tb), m, n, k, 1.0, b, ldb, dst);
}
inline void blas_compute(bool ta, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                         const float* packed, float beta, float* c, int64_t ldc) {
  cblas_sgemm_compute(CblasRowMajor, trans(ta), CblasPacked, m, n, k, a, lda, packed, n, beta,
                      c, ldc);
}
inline void blas_compute(bool ta, int64_t m, int64_t n, int64_t k, const double* a,
                         int64_t lda, const double* packed, double beta, double* c,
                         int64_t ldc) {
  cblas_dgemm_compute(CblasRowMajor, trans(ta), CblasPacked, m, n, k, a, lda, packed, n, beta,
                      c, ldc);
}
#endif

// The CPUs this process may run on (its affinity mask), at least 1.
inline int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

// Threads the BLAS may use (every model of the process shares them). MKL takes no more
// than the cores; OpenBLAS would take up to its build's limit (64 on 2 cores), so it gets
// no more than the CPUs the process may use, as its own start reads OMP_NUM_THREADS.
inline void set_blas_threads(int n) {
#if defined(MDL_BLAS_MKL)
  mkl_set_num_threads(n);
#else
  OpenBlasCall calling;
  scipy_openblas_set_num_threads(std::min(n, usable_cpus()));
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
  return MDL_OWN_KERNELS && m != 0 && n != 0 && k != 0 &&
         m <= std::min(kOwnRows, small_gemm::kSmallRows);
}

// ... and of those, the ones of one row with b not transposed and of more than
// row_gemm::kStreamBytes, which run on b as it lies, not packed (row_gemm::one_row, which
// streams many of b's rows at once: greedy decoding's [1, 512] @ [512, 10000] projection
// took 0.28x the packed kernel's time; row_gemm.h).
inline bool own_row_unpacked(bool trans_b, int64_t m, int64_t n, int64_t k) {
  return m == 1 && !trans_b && n * k * int64_t(sizeof(float)) > row_gemm::kStreamBytes &&
         own_kernel(m, n, k);
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

#if MDL_OWN_KERNELS
// c = op(a) @ b + beta * c by mdl's kernels (own_rows), shared out over the threads by
// columns from kOwnKernelSplitWork multiply-adds: row_gemm's strips, or small_gemm's blocks
// on b's whole panels where they lie and row_gemm on the columns past them (on the last
// thread). The two builds' products alternating in one process, against OpenBLAS's
// (AMD EPYC of Zen 4, 2 threads; with AVX-512, then restricted to AVX2): [35, 128] @
// [128, 512] (an LSTM's hoisted input product at T = 35, B = 1) 0.53x and 0.57x the
// time; [35, 256] @ [256, 1024] 0.54-0.79x and 0.89x; [8, 256] @ [256, 1024] 0.30x and
// 0.76x; [16, 512] @ [512, 2048] 0.65x with AVX-512. Past the traffic limit: [16, 512] @
// [512, 2048] with AVX2 1.08x, [64, 256] @ [256, 2048] 0.85x and 1.31x, [16, 1024] @
// [1024, 4096] 1.17x, [2, 1024] @ [1024, 4096] 0.47x and 0.59x (row_gemm; small_gemm's
// blocks 0.92x and 1.69x). A weight gradient at B = 1, x^T @ d gates ([35, 128]^T @ [35,
// 512]; [35, 256]^T @ [35, 1024]): 0.68x and 0.87x; 0.71x and 1.04x. [128, 128] @ [128,
// 512] 0.79x and 0.86x.
inline void own_rows_product(bool trans_a, int64_t m, int64_t n, int64_t k, const float* a,
                             int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                             int64_t ldc) {
  const bool rows = m <= kRowKernelRows;
  const int64_t whole = rows ? 0 : n / small_gemm::kPanel;
  auto part = [&](int64_t j0, int64_t j1) {  // columns [j0, j1)
    const int64_t q1 = std::min(j1, whole * small_gemm::kPanel) / small_gemm::kPanel;
    const int64_t q0 = std::min(j0 / small_gemm::kPanel, q1);
    small_gemm::multiply_in_place(trans_a, m, k, a, lda, b, ldb, beta, c, ldc, q0, q1);
    const int64_t rest = std::max(j0, q1 * small_gemm::kPanel);
    if (rest < j1) row_gemm::columns(trans_a, m, k, a, lda, b, ldb, beta, c, ldc, rest, j1);
  };
  const int threads = m * n * k < kOwnKernelSplitWork ? 1 : split_threads();
  if (threads <= 1) {
    part(0, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    flush_denormals();
    const Share share(n, rows ? row_gemm::kLanes : small_gemm::kPanel);
    part(share.begin, share.end);
  }
}
#endif

// mdl's kernel on the packed op(b), its panels shared out over the BLAS's threads (OpenMP's:
// OpenBLAS's and MKL's own run there too, blas_init) when the product is worth a second
// thread.
inline void own_product(bool trans_a, int64_t m, int64_t n, int64_t k, const float* a,
                        int64_t lda, const float* packed, float beta, float* c, int64_t ldc) {
  const int64_t panels = small_gemm::panels(n);
  const int64_t threads =
      m * n * k < kOwnKernelSplitWork ? 1 : std::min<int64_t>(split_threads(), panels);
  if (threads <= 1) {
    small_gemm::multiply(trans_a, m, n, k, a, lda, packed, beta, c, ldc, 0, panels);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    flush_denormals();
    const Share part(panels, 1);
    small_gemm::multiply(trans_a, m, n, k, a, lda, packed, beta, c, ldc, part.begin, part.end);
  }
}

#if defined(MDL_BLAS_MKL)
// A loop's packed product of few columns (n <= 128, k <= 512) and an even count of 16 rows
// or more runs on two threads as the two halves of its rows, each on MKL's one-thread
// kernel, from one pack made for a half: MKL shares such a product between its two
// threads poorly. MKL's own split against the halves, one process (Intel Xeon, family 6
// model 167, 2 threads, medians of 7 x 300): [32, 512] @ [512, 128] (an LSTM's backward
// step, d gates @ U^T, at B = 32, H = 128) 24.5 -> 14.8 us, [64, 512] @ [512, 128] 40 ->
// 30, [32, 128] @ [128, 128] 6.3 -> 4.9, [16, 128] @ [128, 128] 3.4 -> 3.0; f64 alike (0.53-
// 0.94x); the same numbers to the bit. Not for more columns ([32, 128] @ [128, 512]: 1.06x;
// n = 256: 1.0-1.24x) nor a longer k (k = 1024: 1.0-1.41x), nor more than two threads
// (not measured). The pack records the rows it was made for (kPackHeader), so
// gemm_packed does what pack_b chose even if the threads changed between them.
inline bool mkl_halves(int64_t m, int64_t n, int64_t k) {
  return m >= 16 && m % 2 == 0 && n <= 128 && k <= 512 && m * n * k >= kOneThreadWork &&
         blas_threads() == 2;
}

constexpr std::size_t kPackHeader = 64;  // the rows an MKL pack was made for, then the pack
#endif

// Packs op(b) (k x n) into `buffer` for products with m-row left operands.
template <class T>
inline void pack_b(Arena& buffer, bool trans_b, int64_t m, int64_t n, int64_t k, const T* b,
                   int64_t ldb) {
  if constexpr (std::is_same_v<T, float>) {
    if (own_row_unpacked(trans_b, m, n, k)) return;
    if (own_kernel(m, n, k)) {
      buffer.reserve(small_gemm::packed_bytes(n, k));
      small_gemm::pack(trans_b, n, k, b, ldb, reinterpret_cast<float*>(buffer.data()));
      return;
    }
  }
#if defined(MDL_BLAS_MKL)
  if (m == 0 || n == 0 || k == 0) return;
  threads_for_product(m * n * k);
  const int64_t rows = mkl_halves(m, n, k) ? m / 2 : m;
  buffer.reserve(kPackHeader + pack_size(static_cast<T*>(nullptr), rows, n, k));
  *reinterpret_cast<int64_t*>(buffer.data()) = rows;
  blas_pack(trans_b, rows, n, k, b, ldb, reinterpret_cast<T*>(buffer.data() + kPackHeader));
#else
  (void)buffer, (void)trans_b, (void)m, (void)n, (void)k, (void)b, (void)ldb;
#endif
}

// c = op(a) @ op(b) + beta * c, with op(b) packed into `buffer` by pack_b (same m, n, k);
// `b` itself is read only where neither mdl's kernel nor the BLAS packed it.
template <class T>
inline void gemm_packed(const Arena& buffer, bool trans_a, int64_t m, int64_t n, int64_t k,
                        const T* a, int64_t lda, bool trans_b, const T* b, int64_t ldb, T beta,
                        T* c, int64_t ldc) {
  const void* packed = const_cast<Arena&>(buffer).data();
  if constexpr (std::is_same_v<T, float>) {
#if MDL_OWN_KERNELS
    if (own_row_unpacked(trans_b, m, n, k)) {
      own_rows_product(trans_a, m, n, k, a, lda, b, ldb, beta, c, ldc);
      return;
    }
#endif
    if (own_kernel(m, n, k)) {
      own_product(trans_a, m, n, k, a, lda, static_cast<const float*>(packed), beta, c, ldc);
      return;
    }
  }
#if defined(MDL_BLAS_MKL)
  if (m != 0 && n != 0 && k != 0) {
    threads_for_product(m * n * k);
    const int64_t rows = *static_cast<const int64_t*>(packed);
    const T* pack = reinterpret_cast<const T*>(static_cast<const char*>(packed) + kPackHeader);
    if (rows == m) {
      blas_compute(trans_a, m, n, k, a, lda, pack, beta, c, ldc);
      return;
    }
    auto half = [&](int64_t i) {  // rows [i * rows, (i + 1) * rows) of op(a) and c
      blas_compute(trans_a, rows, n, k, trans_a ? a + i * rows : a + i * rows * lda, lda, pack,
                   beta, c + i * rows * ldc, ldc);
    };
    if (split_threads() >= 2) {
#pragma omp parallel num_threads(2)
      {
        flush_denormals();
        half(omp_get_thread_num());
      }
    } else {  // inside a parallel region (loops run at once): one after the other
      half(0);
      half(1);
    }
    return;
  }
#endif
  (void)packed;
  gemm(trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

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

#if MDL_OWN_KERNELS
// Products run together are split over the threads from this many multiply-adds in all,
// with at most kTogetherRows rows each: an LSTM's generation step at B = 1, H = 128 (x @ W
// and h @ U, [1, 128] @ [128, 512] each) took 5.2 us on one thread, 3.8 split (AMD EPYC of
// Zen 4, docs/build.md). With MKL on AMD restricted to AVX2, once row_gemm's AVX2 code was
// mended, 6.9 us against 11.8 for MKL's products one after another.
constexpr int64_t kTogetherSplitWork = int64_t(1) << 16;
constexpr int64_t kTogetherRows = 8;

// Whether the float products `p` are worth splitting together, and over how many threads.
inline int together_threads(const Product<float>* p, int count) {
  int64_t work = 0;
  for (int i = 0; i < count; ++i) {
    if (p[i].trans_b || p[i].m == 0 || p[i].n == 0 || p[i].k == 0 ||
        p[i].m > std::min(kTogetherRows, kOwnRows))
      return 1;
    work += p[i].m * p[i].n * p[i].k;
  }
  return work < kTogetherSplitWork ? 1 : split_threads();
}
#endif

// Products of one step that read none of each other's results (codegen/backend/products.py
// groups them): with mdl's kernels, where they are worth it, all in one parallel region, each
// thread computing its share of every product's columns (mdl/row_gemm.h), so that a step
// forks and joins the threads once and each core streams its own part of the weights; else
// one after another.
template <class T>
inline void gemm_together(const Product<T>* p, std::size_t count) {
#if MDL_OWN_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (const int threads = together_threads(p, int(count)); threads > 1) {
#pragma omp parallel num_threads(threads)
      {
        flush_denormals();
        for (std::size_t i = 0; i < count; ++i) {
          const Share part(p[i].n, row_gemm::kLanes);
          row_gemm::columns(p[i].trans_a, p[i].m, p[i].k, p[i].a, p[i].lda, p[i].b,
                            p[i].ldb, p[i].beta, p[i].c, p[i].ldc, part.begin, part.end);
        }
      }
      return;
    }
  }
#endif
  for (std::size_t i = 0; i < count; ++i) {
    const Product<T>& q = p[i];
    gemm(q.trans_a, q.trans_b, q.m, q.n, q.k, T(1), q.a, q.lda, q.b, q.ldb, q.beta, q.c, q.ldc);
  }
}

#if defined(MDL_BLAS_OPENBLAS)
// OpenBLAS's threading, given to OpenMP: it calls this with `jobs` parts of one product
// (`size` bytes each, from `data`), which wait for each other's packed panels, so all must
// run at once: the parts an OpenMP team cannot hold (a nested call, OMP_THREAD_LIMIT) get
// threads of their own. Products of two caller threads take turns, as OpenBLAS's own
// server makes them (the parts' scratch buffers are OpenBLAS's, one per part number).
inline void run_openblas_parts(int, openblas_dojob_callback part, int jobs,
                              size_t size, void* data, int buffer) {
  static std::mutex one_product;
  std::lock_guard<std::mutex> turn(one_product);
  threads_started() = true;
  char* const parts = static_cast<char*>(data);
#pragma omp parallel num_threads(jobs)
  {
    flush_denormals();
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    std::vector<std::thread> more;
    if (t == 0)
      for (int j = team; j < jobs; ++j)
        more.emplace_back([=] {
          flush_denormals();
          part(j, parts + j * size, buffer);
        });
    part(t, parts + t * size, buffer);
    for (auto& thread : more) thread.join();
  }
}
#endif

// Called once before the first product. MKL runs its threads on GNU OpenMP (libgomp,
// which generated code links with GCC), not on a second OpenMP runtime of its own; OpenBLAS
// runs its own threads' work on OpenMP's too (run_openblas_parts): with a pool of its own,
// its threads and OpenMP's (mdl's own kernel) would spin against each other on the same
// cores. A Clang build runs on LLVM's OpenMP (codegen/compile/flags.py's openmp) and takes
// OpenBLAS unless MDL_BLAS=mkl: then MKL's threads are GNU OpenMP's, a second pool, and
// LLVM's threads sleep as soon as a region ends (blocktime 0) rather than spin beside them.
// A child forked after threads had started gets one thread (forked_after_threads).
inline void blas_init() {
#if defined(MDL_BLAS_MKL)
  mkl_set_threading_layer(MKL_THREADING_GNU);
#if defined(__clang__)
  kmp_set_blocktime(0);
#endif
#else
  scipy_openblas_set_threads_callback_function(run_openblas_parts);
  // registered after OpenBLAS's own handlers (its library loaded first), so its prepare
  // handler runs first: OpenBLAS shuts its threads down with no call of ours inside it
  pthread_atfork([] { openblas_gate().close(); }, [] { openblas_gate().open(); },
                 [] { openblas_gate().open(); });
#endif
  pthread_atfork(nullptr, nullptr, [] {
    if (!threads_started()) return;
    forked_after_threads() = true;
    set_blas_threads(1);
  });
}

}  // namespace mdl
