// Launching the cuda target's kernels: every block has kThreads threads, every kernel
// loops over its items with a grid stride.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "mdl/cuda/context.h"

namespace mdl {
namespace cuda {

constexpr int kThreads = 256;  // every launch's block size

// The grid of a grid-stride loop over n items: a thread per item up to 65535 blocks (16.7M
// threads, dozens of times what a GPU runs at once); past that, threads take several.
inline unsigned blocks(int64_t n) {
  return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

__device__ inline int64_t first_item() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ inline int64_t item_stride() { return int64_t(gridDim.x) * blockDim.x; }

__device__ inline bool outside(int64_t i, int64_t n) { return i < 0 || i >= n; }

}  // namespace cuda
}  // namespace mdl
