// A CUDA or cuBLAS call that failed, as the C++ exception the runtime turns into a Python
// RuntimeError naming the call and CUDA's reason.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <new>
#include <string>

#include "mdl/error.h"

namespace mdl {
namespace cuda {

inline void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  if (status == cudaErrorMemoryAllocation) throw std::bad_alloc();
  throw Error(std::string(what) + ": " + cudaGetErrorString(status));
}

inline void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string(what) + ": cuBLAS status " + std::to_string(int(status)) + " (" +
              cublasGetStatusString(status) + ")");
}

}  // namespace cuda
}  // namespace mdl
