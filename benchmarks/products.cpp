// Times one float32 product shape in each BLAS it can load (benchmarks/products.py builds
// and runs it): MKL plain and with its right operand packed once, OpenBLAS
// (scipy-openblas32), oneDNN's dnnl_sgemm, BLIS. Each library is opened with dlopen from a
// path given on the command line, so none is needed to build this file and any can be left
// out.
//
//   products THREADS REPS M N K TA TB [mkl=PATH] [openblas=PATH] [onednn=PATH] [blis=PATH]
//
// Prints one line per candidate: `name median_us checksum`, the checksum the sum of its
// product's elements (benchmarks/products.py compares it with NumPy's, so that a library
// called with the wrong transposes or strides cannot pass for a fast one). The candidates
// run interleaved, one sample each in turn, so that a change of load touches them alike.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112, kPacked = 151, kBMatrix = 162 };

using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);
using PackSize = size_t (*)(int, int, int, int);
using Pack = void (*)(int, int, int, int, int, int, float, const float*, int, float*);
using Compute = void (*)(int, int, int, int, int, int, const float*, int, const float*, int,
                         float, float*, int);
using SetThreads = void (*)(int);
using SetLayer = int (*)(int);
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
// BLIS's object-free API (bli_sgemm) takes strides; its thread count is set globally.
using BliSgemm = void (*)(int, int, int64_t, int64_t, int64_t, const float*, const float*,
                          int64_t, int64_t, const float*, int64_t, int64_t, const float*,
                          float*, int64_t, int64_t);
using BliSetThreads = void (*)(int64_t);
constexpr int kBlisTrans = 8;  // BLIS_TRANSPOSE (BLIS_NO_TRANSPOSE is 0)

void* open(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "cannot open %s: %s\n", path.c_str(), dlerror());
    std::exit(2);
  }
  return handle;
}

template <class F>
F symbol(void* handle, const char* name) {
  void* found = dlsym(handle, name);
  if (found == nullptr) {
    std::fprintf(stderr, "no symbol %s\n", name);
    std::exit(2);
  }
  return reinterpret_cast<F>(found);
}

struct Candidate {
  std::string name;
  std::function<void()> run;
  std::vector<double> us;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: products THREADS REPS M N K TA TB [lib=PATH]...\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]), reps = std::atoi(argv[2]);
  const int m = std::atoi(argv[3]), n = std::atoi(argv[4]), k = std::atoi(argv[5]);
  const bool ta = std::atoi(argv[6]) != 0, tb = std::atoi(argv[7]) != 0;
  // op(A): m x k, op(B): k x n, row-major, leading dimensions of the stored matrices.
  const int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
  std::vector<float> a(size_t(m) * k), b(size_t(k) * n), c(size_t(m) * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(int64_t(i * 7 % 13) - 6) / 8.f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(int64_t(i * 5 % 11) - 5) / 8.f;
  const int ta_flag = ta ? kTrans : kNoTrans, tb_flag = tb ? kTrans : kNoTrans;

  std::vector<Candidate> candidates;
  std::vector<float> packed;
  for (int i = 8; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    const std::string lib = arg.substr(0, eq), path = arg.substr(eq + 1);
    void* h = open(path);
    if (lib == "mkl") {
      symbol<SetLayer>(h, "MKL_Set_Threading_Layer")(3);  // GNU OpenMP, as modules run it
      // As the runtime does (cpp_runtime/mdl/blas.h): under 2^18 multiply-adds, one thread.
      const int64_t work = int64_t(m) * n * k;
      symbol<SetThreads>(h, "MKL_Set_Num_Threads")(work < (int64_t(1) << 18) ? 1 : threads);
      auto gemm = symbol<CblasSgemm>(h, "cblas_sgemm");
      candidates.push_back({"mkl", [=, &a, &b, &c] {
        gemm(kRowMajor, ta_flag, tb_flag, m, n, k, 1.f, a.data(), lda, b.data(), ldb, 0.f,
             c.data(), ldc);
      }, {}});
      auto size = symbol<PackSize>(h, "cblas_sgemm_pack_get_size");
      auto pack = symbol<Pack>(h, "cblas_sgemm_pack");
      auto compute = symbol<Compute>(h, "cblas_sgemm_compute");
      packed.resize(size(kBMatrix, m, n, k) / sizeof(float) + 1);
      pack(kRowMajor, kBMatrix, tb_flag, m, n, k, 1.f, b.data(), ldb, packed.data());
      candidates.push_back({"mkl-packed", [=, &a, &c, &packed] {
        compute(kRowMajor, ta_flag, kPacked, m, n, k, a.data(), lda, packed.data(), n, 0.f,
                c.data(), ldc);
      }, {}});
    } else if (lib == "openblas") {
      symbol<SetThreads>(h, "scipy_openblas_set_num_threads")(threads);
      auto gemm = symbol<CblasSgemm>(h, "scipy_cblas_sgemm");
      candidates.push_back({"openblas", [=, &a, &b, &c] {
        gemm(kRowMajor, ta_flag, tb_flag, m, n, k, 1.f, a.data(), lda, b.data(), ldb, 0.f,
             c.data(), ldc);
      }, {}});
    } else if (lib == "onednn") {
      auto gemm = symbol<DnnlSgemm>(h, "dnnl_sgemm");
      candidates.push_back({"onednn", [=, &a, &b, &c] {
        gemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, a.data(), lda, b.data(), ldb, 0.f,
             c.data(), ldc);
      }, {}});
    } else if (lib == "blis") {
      symbol<BliSetThreads>(h, "bli_thread_set_num_threads")(threads);
      auto gemm = symbol<BliSgemm>(h, "bli_sgemm");
      const float one = 1.f, zero = 0.f;
      // Row-major: row stride = leading dimension, column stride 1.
      candidates.push_back({"blis", [=, &a, &b, &c] {
        gemm(ta ? kBlisTrans : 0, tb ? kBlisTrans : 0, m, n, k, &one, a.data(), lda, 1, b.data(), ldb, 1, &zero,
             c.data(), ldc, 1);
      }, {}});
    } else {
      std::fprintf(stderr, "unknown library %s\n", lib.c_str());
      return 2;
    }
  }
  // Enough calls a sample that one sample takes ~2 ms, after a warm-up of as many.
  for (auto& cand : candidates) cand.run();
  int calls = 1;
  {
    auto t0 = std::chrono::steady_clock::now();
    candidates[0].run();
    const double one = std::chrono::duration<double, std::micro>(
                           std::chrono::steady_clock::now() - t0).count();
    calls = std::max(1, int(2000.0 / std::max(one, 0.1)));
  }
  for (auto& cand : candidates)
    for (int i = 0; i < calls; ++i) cand.run();
  for (int r = 0; r < reps; ++r) {
    for (auto& cand : candidates) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) cand.run();
      cand.us.push_back(std::chrono::duration<double, std::micro>(
                            std::chrono::steady_clock::now() - t0).count() / calls);
    }
  }
  for (auto& cand : candidates) {
    std::fill(c.begin(), c.end(), 0.f);
    cand.run();
    double checksum = 0;
    for (float x : c) checksum += x;
    std::sort(cand.us.begin(), cand.us.end());
    std::printf("%s %.3f %.9g\n", cand.name.c_str(), cand.us[cand.us.size() / 2], checksum);
  }
  return 0;
}
