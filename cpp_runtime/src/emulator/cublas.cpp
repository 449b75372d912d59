// cuBLAS on the emulated device: the 64-bit GEMMs with cuBLAS's documented argument rules
// (m, n, k >= 0; each leading dimension at least the rows of its operand as stored),
// every operand's whole extent inside one device allocation, alpha and beta on the host
// (the default pointer mode), and a column-major reference loop of its own, run in the
// handle's stream: a row-/column-major mix-up in a caller shows as a wrong product.
#include <cublas_v2.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "emulator.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace mdl {
namespace emulated {
namespace {

std::mutex lock;
std::set<cublasContext*> handles;
thread_local std::map<int, std::string> texts;  // the latest text of each status

cublasStatus_t status(cublasStatus_t code, const std::string& what) {
  texts[code] = "emulated cuBLAS: " + what;
  return code;
}

const char* op_name(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : "T"; }

// Whether an operand of rows x cols (column-major, leading dimension ld) lies in one
// allocation; a sticky error naming it otherwise.
template <class T>
bool inside(const char* gemm, const char* name, const T* p, int64_t rows, int64_t cols,
            int64_t ld) {
  if (rows == 0 || cols == 0) return true;
  const std::size_t bytes = std::size_t(ld * (cols - 1) + rows) * sizeof(T);
  if (on_device(p, bytes)) return true;
  fail(cudaErrorIllegalAddress, std::string(gemm) + ": operand " + name + " (" +
                                    std::to_string(rows) + " x " + std::to_string(cols) +
                                    ", leading dimension " + std::to_string(ld) + ", " +
                                    std::to_string(bytes) + " bytes) at " + describe(p) +
                                    " does not lie inside one device allocation");
  return false;
}

template <class T>
cublasStatus_t gemm(const char* name, cublasHandle_t handle, cublasOperation_t ta,
                    cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const T* alpha,
                    const T* A, int64_t lda, const T* B, int64_t ldb, const T* beta, T* C,
                    int64_t ldc) {
  {
    std::lock_guard<std::mutex> hold(lock);
    if (!handles.count(handle))
      return status(CUBLAS_STATUS_NOT_INITIALIZED, std::string(name) + ": not a live handle");
  }
  const std::string call = std::string(name) + "(" + op_name(ta) + ", " + op_name(tb) +
                           ", m=" + std::to_string(m) + ", n=" + std::to_string(n) +
                           ", k=" + std::to_string(k) + ")";
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
    return status(CUBLAS_STATUS_INVALID_VALUE, call + ": an operation other than N or T");
  if (m < 0 || n < 0 || k < 0)
    return status(CUBLAS_STATUS_INVALID_VALUE, call + ": m, n and k must not be negative");
  const int64_t rows_a = ta == CUBLAS_OP_N ? m : k, cols_a = ta == CUBLAS_OP_N ? k : m;
  const int64_t rows_b = tb == CUBLAS_OP_N ? k : n, cols_b = tb == CUBLAS_OP_N ? n : k;
  const auto too_small = [&](const char* ld, int64_t value, const char* rows, int64_t need) {
    return status(CUBLAS_STATUS_INVALID_VALUE,
                  call + ": " + ld + " = " + std::to_string(value) + " is below max(1, " + rows +
                      " = " + std::to_string(need) + "), the rows of the operand as stored");
  };
  if (lda < std::max<int64_t>(1, rows_a))
    return too_small("lda", lda, ta == CUBLAS_OP_N ? "m" : "k", rows_a);
  if (ldb < std::max<int64_t>(1, rows_b))
    return too_small("ldb", ldb, tb == CUBLAS_OP_N ? "k" : "n", rows_b);
  if (ldc < std::max<int64_t>(1, m)) return too_small("ldc", ldc, "m", m);
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!alpha || !beta || on_device(alpha) || on_device(beta))
    return status(CUBLAS_STATUS_INVALID_VALUE,
                  call + ": alpha and beta must be host pointers (the default pointer mode)");
  const T a = *alpha, b = *beta;
  if (!inside(call.c_str(), "A", A, k ? rows_a : 0, cols_a, lda) ||
      !inside(call.c_str(), "B", B, k ? rows_b : 0, cols_b, ldb) ||
      !inside(call.c_str(), "C", C, m, n, ldc))
    return CUBLAS_STATUS_EXECUTION_FAILED;  // cublasGetStatusString: the device's error
  enqueue(handle->stream, [=] {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l)
          sum += double(ta == CUBLAS_OP_N ? A[i + l * lda] : A[l + i * lda]) *
                 double(tb == CUBLAS_OP_N ? B[l + j * ldb] : B[j + l * ldb]);
        T& c = C[i + j * ldc];
        c = b == T(0) ? T(a * sum) : T(a * sum + double(b) * double(c));  // beta 0: C unread
      }
  });
  return sticky() == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace
}  // namespace emulated
}  // namespace mdl

using namespace mdl::emulated;

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (!handle)
    return status(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: the result pointer is null");
  std::lock_guard<std::mutex> hold(lock);
  *handle = new cublasContext();
  handles.insert(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  std::lock_guard<std::mutex> hold(lock);
  if (!handles.erase(handle))
    return status(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy: not a live handle");
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  std::lock_guard<std::mutex> hold(lock);
  if (!handles.count(handle))
    return status(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream: not a live handle");
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t code) {
  if (code == CUBLAS_STATUS_EXECUTION_FAILED && sticky() != cudaSuccess)
    return cudaGetErrorString(sticky());  // what the device found
  auto it = texts.find(code);
  if (it != texts.end()) return it->second.c_str();
  switch (code) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
  }
  return "unknown status";
}

cublasStatus_t cublasSgemm_64(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                              const float* alpha, const float* A, int64_t lda, const float* B,
                              int64_t ldb, const float* beta, float* C, int64_t ldc) {
  return gemm("cublasSgemm_64", handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C,
              ldc);
}

cublasStatus_t cublasDgemm_64(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                              const double* alpha, const double* A, int64_t lda, const double* B,
                              int64_t ldb, const double* beta, double* C, int64_t ldc) {
  return gemm("cublasDgemm_64", handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C,
              ldc);
}
