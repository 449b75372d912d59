// mdl's products (declared in mdl/blas.h): the BLAS calls, mdl's own kernels and the choice
// between them, compiled once into the runtime object for float and double, so that a
// model's compile does not instantiate them again.
#include <pthread.h>

#include <mutex>
#include <thread>
#include <vector>

#include "mdl/blas.h"

namespace mdl {

namespace {

CBLAS_TRANSPOSE trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

#if defined(MDL_BLAS_MKL)
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
               float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
               float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
               double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
               double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#else
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
               float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
               float beta, float* c, int64_t ldc) {
  scipy_cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
// c[0, :n] = alpha * x @ op(b) + beta * c, x the k elements x[0], x[incx], ...: a product
// of one row as OpenBLAS's matrix-vector kernel (its GEMM kernel for one row took 5 of a
// generation step's 11.5 us: docs/build.md). With beta 0, c is zeroed first, so that
// whatever the memory held (a NaN) cannot reach the result through beta * c.
void blas_row_product(bool tb, int64_t n, int64_t k, float alpha, const float* x,
                      int64_t incx, const float* b, int64_t ldb, float beta, float* c) {
  if (beta == 0.f) std::fill(c, c + n, 0.f);
  if (tb)  // op(b) = b^T, b n x k: c = b @ x
    scipy_cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, alpha, b, ldb, x, incx, beta, c, 1);
  else     // b k x n: c = b^T @ x
    scipy_cblas_sgemv(CblasRowMajor, CblasTrans, k, n, alpha, b, ldb, x, incx, beta, c, 1);
}
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
               double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
               double beta, double* c, int64_t ldc) {
  scipy_cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#endif

#if defined(MDL_BLAS_MKL)
std::size_t pack_size(float*, int64_t m, int64_t n, int64_t k) {
  return cblas_sgemm_pack_get_size(CblasBMatrix, m, n, k);
}
std::size_t pack_size(double*, int64_t m, int64_t n, int64_t k) {
  return cblas_dgemm_pack_get_size(CblasBMatrix, m, n, k);
}
void blas_pack(bool tb, int64_t m, int64_t n, int64_t k, const float* b, int64_t ldb,
               float* dst) {
  cblas_sgemm_pack(CblasRowMajor, CblasBMatrix, trans(tb), m, n, k, 1.0f, b, ldb, dst);
}
void blas_pack(bool tb, int64_t m, int64_t n, int64_t k, const double* b, int64_t ldb,
               double* dst) {
  cblas_dgemm_pack(CblasRowMajor, CblasBMatrix, trans(tb), m, n, k, 1.0, b, ldb, dst);
}
void blas_compute(bool ta, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* packed, float beta, float* c, int64_t ldc) {
  cblas_sgemm_compute(CblasRowMajor, trans(ta), CblasPacked, m, n, k, a, lda, packed, n, beta,
                      c, ldc);
}
void blas_compute(bool ta, int64_t m, int64_t n, int64_t k, const double* a,
                  int64_t lda, const double* packed, double beta, double* c,
                  int64_t ldc) {
  cblas_dgemm_compute(CblasRowMajor, trans(ta), CblasPacked, m, n, k, a, lda, packed, n, beta,
                      c, ldc);
}
#endif

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
void own_rows_product(bool trans_a, int64_t m, int64_t n, int64_t k, const float* a,
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
    const Share share(n, rows ? row_gemm::kLanes : small_gemm::kPanel);
    part(share.begin, share.end);
  }
}
#endif

// mdl's kernel on the packed op(b), its panels shared out over the BLAS's threads (OpenMP's:
// OpenBLAS's and MKL's own run there too, blas_init) when the product is worth a second
// thread.
void own_product(bool trans_a, int64_t m, int64_t n, int64_t k, const float* a,
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
    const Share part(panels, 1);
    small_gemm::multiply(trans_a, m, n, k, a, lda, packed, beta, c, ldc, part.begin, part.end);
  }
}

#if MDL_OWN_KERNELS
// Products run together are split over the threads from this many multiply-adds in all,
// with at most kTogetherRows rows each: an LSTM's generation step at B = 1, H = 128 (x @ W
// and h @ U, [1, 128] @ [128, 512] each) took 5.2 us on one thread, 3.8 split (AMD EPYC of
// Zen 4, docs/build.md). With MKL on AMD restricted to AVX2, once row_gemm's AVX2 code was
// mended, 6.9 us against 11.8 for MKL's products one after another.
constexpr int64_t kTogetherSplitWork = int64_t(1) << 16;
constexpr int64_t kTogetherRows = 8;

// Whether the float products `p` are worth splitting together, and over how many threads.
int together_threads(const Product<float>* p, int count) {
  int64_t work = 0;
  for (int i = 0; i < count; ++i) {
    if (p[i].trans_b || p[i].m == 0 || p[i].n == 0 || p[i].k == 0 || p[i].m > kTogetherRows)
      return 1;
    work += p[i].m * p[i].n * p[i].k;
  }
  return work < kTogetherSplitWork ? 1 : split_threads();
}
#endif

#if defined(MDL_BLAS_OPENBLAS)
// OpenBLAS's threading, given to OpenMP: it calls this with `jobs` parts of one product
// (`size` bytes each, from `data`), which wait for each other's packed panels, so all must
// run at once: the parts an OpenMP team cannot hold (a nested call, OMP_THREAD_LIMIT) get
// threads of their own. Products of two caller threads take turns, as OpenBLAS's own
// server makes them (the parts' scratch buffers are OpenBLAS's, one per part number).
void run_openblas_parts(int, openblas_dojob_callback part, int jobs,
                        size_t size, void* data, int buffer) {
  static std::mutex one_product;
  std::lock_guard<std::mutex> turn(one_product);
  threads_started() = true;
  char* const parts = static_cast<char*>(data);
#pragma omp parallel num_threads(jobs)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    std::vector<std::thread> more;
    if (t == 0)
      for (int j = team; j < jobs; ++j) more.emplace_back(part, j, parts + j * size, buffer);
    part(t, parts + t * size, buffer);
    for (auto& thread : more) thread.join();
  }
}
#endif

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
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

template <class T>
void pack_b(Arena& buffer, bool trans_b, int64_t m, int64_t n, int64_t k, const T* b,
            int64_t ldb) {
  if constexpr (std::is_same_v<T, float>) {
    if (own_kernel(m, n, k)) {
      buffer.reserve(small_gemm::packed_bytes(n, k));
      small_gemm::pack(trans_b, n, k, b, ldb, reinterpret_cast<float*>(buffer.data()));
      return;
    }
  }
#if defined(MDL_BLAS_MKL)
  if (m == 0 || n == 0 || k == 0) return;
  threads_for_product(m * n * k);
  buffer.reserve(pack_size(static_cast<T*>(nullptr), m, n, k));
  blas_pack(trans_b, m, n, k, b, ldb, reinterpret_cast<T*>(buffer.data()));
#else
  (void)buffer, (void)trans_b, (void)m, (void)n, (void)k, (void)b, (void)ldb;
#endif
}

template <class T>
void gemm_packed(const Arena& buffer, bool trans_a, int64_t m, int64_t n, int64_t k, const T* a,
                 int64_t lda, bool trans_b, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const void* packed = const_cast<Arena&>(buffer).data();
  if constexpr (std::is_same_v<T, float>) {
    if (own_kernel(m, n, k)) {
      own_product(trans_a, m, n, k, a, lda, static_cast<const float*>(packed), beta, c, ldc);
      return;
    }
  }
#if defined(MDL_BLAS_MKL)
  if (m != 0 && n != 0 && k != 0) {
    threads_for_product(m * n * k);
    blas_compute(trans_a, m, n, k, a, lda, static_cast<const T*>(packed), beta, c, ldc);
    return;
  }
#endif
  (void)packed;
  gemm(trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm_together(const Product<T>* p, std::size_t count) {
#if MDL_OWN_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (const int threads = together_threads(p, int(count)); threads > 1) {
#pragma omp parallel num_threads(threads)
      for (std::size_t i = 0; i < count; ++i) {
        const Product<float>& q = p[i];
        const Share part(q.n, row_gemm::kLanes);
        row_gemm::columns(q.trans_a, q.m, q.k, q.a, q.lda, q.b, q.ldb, q.beta, q.c, q.ldc,
                          part.begin, part.end);
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

// Called once before the first product. MKL runs its threads on GNU OpenMP (libgomp, which
// generated code links), not on a second OpenMP runtime of its own; OpenBLAS runs its own
// threads' work on OpenMP's too (run_openblas_parts): with a pool of its own, its threads
// and OpenMP's (mdl's own kernel) would spin against each other on the same cores.
// A child forked after threads had started gets one thread (forked_after_threads).
void blas_init() {
#if defined(MDL_BLAS_MKL)
  mkl_set_threading_layer(MKL_THREADING_GNU);
#else
  scipy_openblas_set_threads_callback_function(run_openblas_parts);
#endif
  pthread_atfork(nullptr, nullptr, [] {
    if (!threads_started()) return;
    forked_after_threads() = true;
    set_blas_threads(1);
  });
}

template void gemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                   const float*, int64_t, float, float*, int64_t);
template void gemm(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                   const double*, int64_t, double, double*, int64_t);
template void pack_b(Arena&, bool, int64_t, int64_t, int64_t, const float*, int64_t);
template void pack_b(Arena&, bool, int64_t, int64_t, int64_t, const double*, int64_t);
template void gemm_packed(const Arena&, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                          bool, const float*, int64_t, float, float*, int64_t);
template void gemm_packed(const Arena&, bool, int64_t, int64_t, int64_t, const double*,
                          int64_t, bool, const double*, int64_t, double, double*, int64_t);
template void gemm_together(const Product<float>*, std::size_t);
template void gemm_together(const Product<double>*, std::size_t);

}  // namespace mdl
