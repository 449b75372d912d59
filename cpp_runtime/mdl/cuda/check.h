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
  // the error is also CUDA's last one: left there, the next call's first check took it for
  // its own ("gemm: ... cudaMemcpy ..." after a refused copy); a sticky one stays anyway
  cudaGetLastError();
  if (status == cudaErrorMemoryAllocation)  // once MemoryError("std::bad_alloc")
    throw OutOfMemory::saying(std::string(what) + ": the GPU's memory is used up (" +
                              cudaGetErrorString(status) + ")");
  throw Error(std::string(what) + ": " + cudaGetErrorString(status));
}

inline void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string(what) + ": cuBLAS status " + std::to_string(int(status)) + " (" +
              cublasGetStatusString(status) + ")");
}

}  // namespace cuda
}  // namespace mdl
