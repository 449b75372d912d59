// cuBLAS as the emulated device provides it: handles, streams and the 64-bit GEMMs mdl's
// cuda target calls, with cuBLAS's documented argument rules, every operand's whole extent
// checked against its device allocation, and a column-major reference loop of its own
// (src/emulator/cublas.cpp), independent of the CPU target's BLAS.
#pragma once

#include <cstdint>

#include "cuda_runtime.h"

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
} cublasStatus_t;

typedef enum {
  CUBLAS_OP_N = 0,
  CUBLAS_OP_T = 1,
  CUBLAS_OP_C = 2,
} cublasOperation_t;

struct cublasContext;
typedef cublasContext* cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
const char* cublasGetStatusString(cublasStatus_t status);

cublasStatus_t cublasSgemm_64(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                              const float* alpha, const float* A, int64_t lda, const float* B,
                              int64_t ldb, const float* beta, float* C, int64_t ldc);
cublasStatus_t cublasDgemm_64(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                              const double* alpha, const double* A, int64_t lda, const double* B,
                              int64_t ldb, const double* beta, double* C, int64_t ldc);
