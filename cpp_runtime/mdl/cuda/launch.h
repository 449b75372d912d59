// Launching the cuda target's kernels (the runtime's and those generated code defines):
// every block has kThreads threads (but those of a few long rows, mdl/cuda/rows.h's kWide),
// every kernel loops over its items with a grid stride,
// `for (int64_t i = first_item(); i < n; i += item_stride())`.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "mdl/cuda/context.h"

namespace mdl {
namespace cuda {

constexpr int kThreads = 256;  // a launch's block size

// The grid of a grid-stride loop over n items: a thread per item up to 65535 blocks (16.7M
// threads, dozens of times what a GPU runs at once); past that, threads take several.
inline unsigned blocks(int64_t n) {
  return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

// The most blocks of a kernel that ends in one number (a loss, a norm): each block leaves
// its partial sums, which one more step adds up in a fixed order.
constexpr unsigned kPartials = 1024;

inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// A __shared__ array of the block: declared with this macro, so that the emulated device
// can hand each block its own, poisoned and checked for races between barriers.
#if defined(MDL_CUDA_EMULATED)
#define MDL_SHARED_ARRAY(T, name, n)                                          \
  static thread_local ::mdl::emulated::SharedArray<T, (n)> name##_of_block; \
  auto name = name##_of_block.view(#name)
#else
#define MDL_SHARED_ARRAY(T, name, n) __shared__ T name[n]
#endif

// Unrolls the loop it precedes under nvcc, so that a small array the loop indexes stays in
// registers; nothing on the emulated device (a host compiler has no `#pragma unroll`).
#if defined(__CUDACC__)
#define MDL_UNROLL _Pragma("unroll")
#else
#define MDL_UNROLL
#endif

template <class T>
struct As {  // keeps a launch's arguments out of deduction: they convert to the kernel's types
  using type = T;
};

// Every kernel of the target starts here: `kernel<<<grid, block, 0, stream>>>(args...)`
// under nvcc; the emulated device's launch (cpp_runtime/emulated/) when the host compiler
// builds the same source for CI, which runs its threads on the CPU and checks them.
// While a function runs dry (mdl/cuda/graph.h), the launch is recorded instead.
template <class... P>
void launch(void (*kernel)(P...), unsigned grid, unsigned block, cudaStream_t stream,
            typename As<P>::type... args) {
  if (Signature* dry = recording()) {
    dry->add(reinterpret_cast<const void*>(kernel), grid, block, stream, args...);
    return;
  }
#if defined(MDL_CUDA_EMULATED)
  ::mdl::emulated::launch(kernel, grid, block, stream, args...);
#else
  kernel<<<grid, block, 0, stream>>>(args...);
#endif
}

// A launch whose results the host reads before the rest of the function's work (a loop's
// branch conditions, computed from the function's inputs alone): while the function runs
// dry, it is recorded and queued too, so that the dry run can read them
// (mdl/cuda/kernels.h's read_steps_before).
template <class... P>
void launch_now(void (*kernel)(P...), unsigned grid, unsigned block, cudaStream_t stream,
                typename As<P>::type... args) {
  Signature* dry = recording();
  if (dry) dry->add(reinterpret_cast<const void*>(kernel), grid, block, stream, args...);
  recording() = nullptr;
  launch(kernel, grid, block, stream, args...);
  recording() = dry;
}

__device__ inline int64_t first_item() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ inline int64_t item_stride() { return int64_t(gridDim.x) * blockDim.x; }

__device__ inline bool outside(int64_t i, int64_t n) { return i < 0 || i >= n; }

}  // namespace cuda
}  // namespace mdl
