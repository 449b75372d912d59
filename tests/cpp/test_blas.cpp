// mdl::gemm and mdl::gemm_packed against a naive triple loop: every transpose combination,
// leading dims wider than the matrices (views into larger buffers), alpha and beta (zero
// too), the shapes of mdl's own packed kernel, and the empty cases.
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <vector>

#include "check.h"
#include "mdl/blas.h"

namespace {

// op(a)[i][p] of a row-major matrix with leading dim ld, stored as given (maybe transposed).
template <class T>
T at(const std::vector<T>& a, bool trans, int64_t ld, int64_t i, int64_t p) {
  return trans ? a[p * ld + i] : a[i * ld + p];
}

template <class T>
void check_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double tol,
                double beta_value = -0.5) {
  const int64_t pad = 3;  // every leading dim exceeds its row length
  int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  std::vector<T> a((ta ? k : m) * lda), b((tb ? n : k) * ldb), c(m * ldc);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = T(int(i % 7) - 3) / T(4);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = T(int(i % 5) - 2) / T(3);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = T(int(i % 3));
  std::vector<T> expected = c;
  T alpha = T(1.5), beta = T(beta_value);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += double(at(a, ta, lda, i, p)) * at(b, tb, ldb, p, j);
      expected[i * ldc + j] = T(alpha * sum + beta * expected[i * ldc + j]);
    }
  std::vector<T> c0 = c;
  mdl::gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  for (std::size_t i = 0; i < c.size(); ++i) CHECK_NEAR(c[i], expected[i], tol);  // padding too
  // the same product with b packed first (alpha = 1), twice from one pack
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T& e = expected[i * ldc + j];
      e = (e - beta * c0[i * ldc + j]) / alpha + beta * c0[i * ldc + j];
    }
  mdl::Arena packed;
  mdl::pack_b(packed, tb, m, n, k, b.data(), ldb);
  for (int twice = 0; twice < 2; ++twice) {
    c = c0;
    mdl::gemm_packed(packed, ta, m, n, k, a.data(), lda, tb, b.data(), ldb, beta, c.data(), ldc);
    for (std::size_t i = 0; i < c.size(); ++i) CHECK_NEAR(c[i], expected[i], tol);
  }
}

template <class T>
void check_all(double tol) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm<T>(ta, tb, 5, 4, 3, tol);
      check_gemm<T>(ta, tb, 1, 7, 9, tol);
      check_gemm<T>(ta, tb, 33, 17, 65, tol);  // past OpenBLAS's small-matrix paths
      // With MDL_OWN_KERNELS, gemm_packed's own kernel (mdl/small_gemm.h): every row
      // remainder of its 8- or 6-row blocks, depths around its 4 or 2 chains of sums,
      // columns around its panels' width (16 or 32), up to its last row count (1024) and
      // past it (the BLAS again), and past 2^17 multiply-adds (64 x 100 x 70: split).
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 23, 64, 65, 130, 1024, 1025})
        for (int64_t n : {15, 32, 33, 100})
          for (int64_t k : {3, 9})
            check_gemm<T>(ta, tb, m, n, m == 64 ? 70 : k, tol * 10, ta ? 0.0 : -0.5);
    }
}

void empty_products() {
  float c[4] = {1, 2, 3, 4}, none[1] = {0};
  mdl::gemm(false, false, 0, 2, 2, 1.0f, none, 2, none, 2, 0.0f, c, 2);  // m = 0: nothing
  CHECK(c[0] == 1 && c[3] == 4);
  mdl::gemm(false, false, 2, 2, 0, 1.0f, none, 0, none, 2, 0.5f, c, 2);  // k = 0: c *= beta
  CHECK(c[0] == 0.5f && c[1] == 1.0f && c[2] == 1.5f && c[3] == 2.0f);
}

// One row with beta 0 over memory holding NaN (OpenBLAS builds multiply one row with the
// matrix-vector kernel, which must not read what c held), both layouts of b, and a's row
// read with a stride (a transposed).
void one_row_over_nan() {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t n = 6, k = 5, lda = ta ? 3 : k, ldb = tb ? k + 2 : n + 1;
      std::vector<float> a(k * lda), b((tb ? n : k) * ldb);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 7) - 3);
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 5) - 2);
      std::vector<float> c(n, std::nanf(""));
      mdl::gemm(ta, tb, 1, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum += a[ta ? p * lda : p] * (tb ? b[j * ldb + p] : b[p * ldb + j]);
        CHECK_NEAR(c[j], sum, 1e-5);
      }
    }
}

// A loop's products of one row against a b of at least row_gemm::kStreamBytes, b not
// transposed, which with MDL_OWN_KERNELS read b unpacked (row_gemm::one_row): on one thread
// (1000 x 37: 148 KB), split over two, each thread's columns past one chunk of 4096 (9000
// x 20), columns past the last whole vector and depths past the last 8 rows (4133 x 37);
// a read with a stride (a transposed), b's leading dim wider than its rows, beta 0 over
// NaN and beta -0.5.
void one_row_streamed() {
  mdl::set_blas_threads(2);
  struct Shape { int64_t n, k; };
  for (const Shape shape : {Shape{1000, 37}, Shape{9000, 20}, Shape{4133, 37}})
    for (bool ta : {false, true})
      for (float beta : {0.0f, -0.5f}) {
        const int64_t n = shape.n, k = shape.k, lda = ta ? 3 : k, ldb = n + 5;
        std::vector<float> a(ta ? k * lda : k), b(k * ldb), c(n);
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 7) - 3) / 4;
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 5) - 2) / 3;
        for (std::size_t i = 0; i < c.size(); ++i)
          c[i] = beta == 0.0f ? std::nanf("") : float(int(i % 3));
        std::vector<float> expected = c, c0 = c;
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p) sum += double(a[ta ? p * lda : p]) * b[p * ldb + j];
          expected[j] = float(beta == 0.0f ? sum : sum + beta * expected[j]);
        }
        mdl::Arena packed;
        mdl::pack_b(packed, false, 1, n, k, b.data(), ldb);
        for (int twice = 0; twice < 2; ++twice) {
          c = c0;
          mdl::gemm_packed(packed, ta, 1, n, k, a.data(), lda, false, b.data(), ldb, beta,
                           c.data(), n);
          for (int64_t j = 0; j < n; ++j) CHECK_NEAR(c[j], expected[j], 1e-4);
        }
      }
}

// Products split over two threads: mdl's own kernel (OpenBLAS builds) and the BLAS's own
// parts, which run on OpenMP's threads (blas_init); then the same from inside a parallel
// region, where a BLAS part the nested team cannot hold gets a thread of its own.
void threaded_products() {
  mdl::set_blas_threads(2);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm<float>(ta, tb, 64, 1000, 70, 1e-3);
      check_gemm<float>(ta, tb, 300, 200, 100, 1e-3);
    }
#pragma omp parallel num_threads(2)
  check_gemm<float>(false, true, 300, 200, 100, 1e-3);
}

// Two independent products run together (mdl::gemm_together): with MDL_OWN_KERNELS split
// over two threads with mdl/row_gemm.h where each has at most 8 rows and its b is not
// transposed (every row remainder of its 4-row strips, 300 columns: past the last whole
// vector, a read transposed), else one after another; beta 0 over NaN and beta -0.5.
void products_together() {
  mdl::set_blas_threads(2);
  const int64_t n = 300, k = 300;
  for (int64_t m : {1, 3, 4, 5, 8, 9})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, -0.5f}) {
          std::vector<float> a[2], b[2], c[2], expected[2];
          for (int q = 0; q < 2; ++q) {
            a[q].resize(m * k), b[q].resize(k * n), c[q].resize(m * n);
            for (std::size_t i = 0; i < a[q].size(); ++i) a[q][i] = float(int((i + q) % 7) - 3) / 4;
            for (std::size_t i = 0; i < b[q].size(); ++i) b[q][i] = float(int((i + q) % 5) - 2) / 3;
            for (std::size_t i = 0; i < c[q].size(); ++i)
              c[q][i] = beta == 0.0f ? std::nanf("") : float(int(i % 3));
            expected[q] = c[q];
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double sum = 0;
                for (int64_t p = 0; p < k; ++p)
                  sum += double(at(a[q], ta, ta ? m : k, i, p)) * at(b[q], tb, tb ? k : n, p, j);
                float& e = expected[q][i * n + j];
                e = float(beta == 0.0f ? sum : sum + beta * e);
              }
          }
          const mdl::Product<float> products[] = {
              {ta, tb, m, n, k, a[0].data(), ta ? m : k, b[0].data(), tb ? k : n, beta,
               c[0].data(), n},
              {ta, tb, m, n, k, a[1].data(), ta ? m : k, b[1].data(), tb ? k : n, beta,
               c[1].data(), n}};
          mdl::gemm_together(products, 2);
          for (int q = 0; q < 2; ++q)
            for (std::size_t i = 0; i < c[q].size(); ++i) CHECK_NEAR(c[q][i], expected[q][i], 1e-3);
        }
}

// Products of 2 to 256 rows, alpha 1, b not transposed: with MDL_OWN_KERNELS mdl's kernels
// on b as it lies (blas.h, own_rows): row_gemm's strips up to 8 rows, above them small_gemm's
// blocks on b's whole panels and row_gemm on the columns past them; on one thread and
// split over two (from 2^17 multiply-adds: 35 x 520 x 130), a leading dim of b wider than
// its rows; beta 0 over NaN and beta -0.5; 257 rows, the BLAS again.
void own_rows_products() {
  mdl::set_blas_threads(2);
  for (bool ta : {false, true})
    for (int64_t m : {2, 3, 5, 8, 9, 17, 35, 64, 200, 257})
      for (int64_t n : {7, 16, 33, 100, 520})
        for (int64_t k : {3, 130})
          for (float beta : {0.0f, -0.5f}) {
            const int64_t lda = ta ? m : k, ldb = n + 5;
            std::vector<float> a(ta ? k * m : m * k), b(k * ldb), c(m * n);
            for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 7) - 3) / 4;
            for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 5) - 2) / 3;
            for (std::size_t i = 0; i < c.size(); ++i)
              c[i] = beta == 0.0f ? std::nanf("") : float(int(i % 3));
            std::vector<float> expected = c;
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double sum = 0;
                for (int64_t p = 0; p < k; ++p) sum += double(at(a, ta, lda, i, p)) * b[p * ldb + j];
                float& e = expected[i * n + j];
                e = float(beta == 0.0f ? sum : sum + beta * e);
              }
            mdl::gemm(ta, false, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, beta, c.data(), n);
            for (std::size_t i = 0; i < c.size(); ++i) CHECK_NEAR(c[i], expected[i], 1e-3);
          }
}

// Products inside a parallel region, as loops run at once (mdl/concurrent.h) make them:
// each that on_calling_thread says runs on the calling thread must not reach OpenBLAS's
// threading (run_openblas_parts, which marks the threads started); a large double one does.
void products_in_a_parallel_region() {
#if defined(MDL_BLAS_OPENBLAS)
  mdl::set_blas_threads(2);
  struct Case { bool is_float, packed; int64_t m, n, k; };
  const Case cases[] = {{true, true, 1, 512, 128}, {true, true, 4, 512, 128},
                        {true, true, 64, 1024, 256}, {true, false, 8, 512, 128},
                        {true, false, 1, 40, 40}, {false, false, 4, 64, 64},
                        {false, false, 64, 1024, 512}};
  for (const Case& q : cases) {
    const bool alone = q.is_float
        ? mdl::on_calling_thread<float>(q.packed, false, q.m, q.n, q.k)
        : mdl::on_calling_thread<double>(q.packed, false, q.m, q.n, q.k);
    mdl::threads_started() = false;
#pragma omp parallel num_threads(2)
    {
      if (q.is_float) {
        std::vector<float> a(q.m * q.k, 0.5f), b(q.k * q.n, 0.25f), c(q.m * q.n);
        mdl::Arena pack;
        if (q.packed) {
          mdl::pack_b(pack, false, q.m, q.n, q.k, b.data(), q.n);
          mdl::gemm_packed(pack, false, q.m, q.n, q.k, a.data(), q.k, false, b.data(), q.n,
                           0.0f, c.data(), q.n);
        } else {
          mdl::gemm(false, false, q.m, q.n, q.k, 1.0f, a.data(), q.k, b.data(), q.n, 0.0f,
                    c.data(), q.n);
        }
        CHECK_NEAR(c[0], 0.125 * double(q.k), 1e-3);
      } else {
        std::vector<double> a(q.m * q.k, 0.5), b(q.k * q.n, 0.25), c(q.m * q.n);
        mdl::gemm(false, false, q.m, q.n, q.k, 1.0, a.data(), q.k, b.data(), q.n, 0.0,
                  c.data(), q.n);
        CHECK_NEAR(c[0], 0.125 * double(q.k), 1e-12);
      }
    }
    if (alone) CHECK(!mdl::threads_started());
  }
  CHECK(!mdl::on_calling_thread<double>(false, false, 64, 1024, 512));
  CHECK(mdl::threads_started());  // the last case: OpenBLAS's threading was asked
#endif
}

// MKL builds: packed products of few columns run as two halves of their rows on two
// threads (mdl::mkl_halves): every transpose, f32 and f64, beta 0 and -0.5 (check_gemm),
// and inside a parallel region, where the halves run one after the other; the pack made
// on two threads serves a call on one.
void packed_halves() {
#if defined(MDL_BLAS_MKL)
  mdl::set_blas_threads(2);
  CHECK(mdl::mkl_halves(32, 128, 512) && !mdl::mkl_halves(32, 512, 128) &&
        !mdl::mkl_halves(31, 128, 512) && !mdl::mkl_halves(32, 128, 1024));
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, -0.5}) {
        check_gemm<float>(ta, tb, 32, 128, 512, 1e-3, beta);
        check_gemm<double>(ta, tb, 16, 100, 200, 1e-10, beta);
      }
  const int64_t m = 32, n = 128, k = 512;
  std::vector<float> a(m * k), b(k * n), c(m * n), in_region(m * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 7) - 3) / 4;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 5) - 2) / 3;
  mdl::Arena pack;
  mdl::pack_b(pack, false, m, n, k, b.data(), n);
  mdl::gemm_packed(pack, false, m, n, k, a.data(), k, false, b.data(), n, 0.0f, c.data(), n);
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    mdl::gemm_packed(pack, false, m, n, k, a.data(), k, false, b.data(), n, 0.0f,
                     in_region.data(), n);
  }
  CHECK(c == in_region);  // the same sums, to the bit
  mdl::set_blas_threads(1);
  std::fill(in_region.begin(), in_region.end(), 0.0f);
  mdl::gemm_packed(pack, false, m, n, k, a.data(), k, false, b.data(), n, 0.0f,
                   in_region.data(), n);
  CHECK(c == in_region);
  mdl::set_blas_threads(2);
#endif
}

}  // namespace

int main() {
  mdl::blas_init();
  check_all<float>(1e-4);
  check_all<double>(1e-12);
  empty_products();
  one_row_over_nan();
  one_row_streamed();
  threaded_products();
  products_together();
  own_rows_products();
  products_in_a_parallel_region();
  packed_halves();
  return check::failures;
}
