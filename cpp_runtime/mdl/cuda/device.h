// What device code of the cuda target calls: generated kernels (the module's kernels.cu
// includes this header alone, codegen/targets/cuda.py) and the runtime's own (mdl/cuda/
// kernels.h, rows.h, gemm.h). Every kernel loops over its items with a grid stride,
// `for (int64_t i = first_item(); i < n; i += item_stride())`. Nothing here is host code,
// so that nvcc parses little besides the kernels.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "mdl/cuda/fault.h"
#include "mdl/cuda/grid.h"
#include "mdl/faults.h"
#include "mdl/scalar.h"  // the scalar functions both targets' code calls (mdl::plus, larger)

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

namespace mdl {
namespace cuda {

__device__ inline int64_t first_item() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ inline int64_t item_stride() { return int64_t(gridDim.x) * blockDim.x; }

__device__ inline bool outside(int64_t i, int64_t n) { return i < 0 || i >= n; }

// The grid the running thread is of: a number no other launch of the process has (the
// emulated device numbers its grids alike).
__device__ inline unsigned long long launch_id() {
#if defined(MDL_CUDA_EMULATED)
  return ::mdl::emulated::running->launch;
#else
  unsigned long long id;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(id));
  return id;
#endif
}

// Records the first fault of the call (mdl/cuda/fault.h): the first launch to report one
// claims the record, and its every report keeps the least position, since its blocks run
// in any order and the CPU (and the reference) name the first bad element. A launch after
// it changes nothing: the stream runs them one after another, so a report that finds the
// record being written (-1) is of the claiming launch. The values reported are 32-bit
// (ids, targets, lengths, steps). An assert's reports carry the steps of its outer loops
// too (`outers` of them at `outer`): one report a launch, the first false element's.
__device__ inline void report(Fault* f, FaultKind kind, int64_t value, int64_t position,
                              int64_t bound, HostText what, const int32_t* outer = nullptr,
                              int outers = 0) {
  const unsigned long long launch = launch_id();
  const unsigned long long least =
      position >= 0 && position < 0xffffffffll
          ? ~(static_cast<unsigned long long>(position) << 32 | uint32_t(value))
          : 0;
  if (atomicCAS(&f->kind, 0, -1) == 0) {
    f->value = value;
    f->position = position;
    f->bound = bound;
    f->what = what.text;
    f->launch = launch;
    f->outers = outers < kAssertSteps ? outers : kAssertSteps - 1;  // the record's room
    for (int k = 0; k < f->outers; ++k) f->outer[k] = outer[k];
    atomicMax(&f->least, least);
    __threadfence();
    atomicExch(&f->kind, int(kind));
    return;
  }
  const volatile Fault* seen = f;
  // an atomic read (adding 0): against the claimer's atomicExch, a plain or volatile one
  // is a race in C++'s terms, which the emulated device's ThreadSanitizer build reports
  const int claimed = atomicAdd(&f->kind, 0);
  if (claimed != -1) {
    __threadfence();
    if (claimed != int(kind) || seen->launch != launch || seen->what != what.text ||
        seen->bound != bound)
      return;  // an earlier launch's fault
  }
  atomicMax(&f->least, least);
}

// a + b, wrapping for i32: mdl::plus (mdl/scalar.h), as the CPU adds.
struct Plus {
  template <class T>
  __device__ T operator()(T a, T b) const { return plus(a, b); }
};

// A thread's value from the lane `s` apart in its warp (xor): a number, or a Pick's two.
template <class T>
__device__ T shuffle_xor(T v, int s) {
  return __shfl_xor_sync(0xffffffffu, v, s);
}

// `op` over the values of a row's W threads, returned to every one of them (so that a
// branch on it is uniform). The block's last barrier lets the next call reuse `partial`.
// W is 1, 32 or a whole block's threads.
template <int W, class T, class Op>
__device__ T across(T v, Op op) {
  if constexpr (W > 1)
    for (int s = 16; s > 0; s >>= 1) v = op(v, shuffle_xor(v, s));
  if constexpr (W >= kThreads) {
    MDL_SHARED_ARRAY(T, partial, W / 32);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    v = partial[0];
    for (int w = 1; w < W / 32; ++w) v = op(v, T(partial[w]));
    __syncthreads();
  }
  return v;
}

// Adds the block's threads' `v` into `*total`: one atomic add a block. Generated kernels
// that sum elements into one number (a loss) end in it, each thread having added up its
// own elements first; an atomic add an element to one address ran one at a time (an LSTM
// loss over 35 x 32 x 256 values took 0.5 ms on an H100). Every thread of the block calls it.
template <class T>
__device__ void add_across_block(T* total, T v) {
  v = across<kThreads>(v, Plus());
  if (threadIdx.x == 0) atomicAdd(total, v);
}

}  // namespace cuda
}  // namespace mdl
