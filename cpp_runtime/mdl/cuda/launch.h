// Launching the cuda target's kernels (the runtime's and those of a module's kernels.cu)
// from host code: its blocks of kThreads threads (mdl/cuda/grid.h), recorded while a
// function runs dry (mdl/cuda/graph.h). Host code only; what kernels themselves call is
// mdl/cuda/device.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mdl/cuda/check.h"
#include "mdl/cuda/context.h"
#include "mdl/cuda/graph.h"
#include "mdl/cuda/grid.h"

namespace mdl {
namespace cuda {

inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

template <class T>
struct As {  // keeps a launch's arguments out of deduction: they convert to the kernel's types
  using type = T;
};

// Every kernel of the target starts here: `kernel<<<grid, block, 0, stream>>>(args...)`
// under nvcc (the runtime's .cu files); from a module's host code, which the C++ compiler
// builds (a kernel of its kernels.cu being a function declared there), the launch that
// `<<<...>>>` stands for, cudaLaunchKernel of the kernel's host-side address and its
// arguments' addresses; the emulated device's launch (cpp_runtime/emulated/) when the host
// compiler builds both halves for CI, which runs its threads on the CPU and checks them.
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
#elif defined(__CUDACC__)
  kernel<<<grid, block, 0, stream>>>(args...);
#else
  void* addresses[sizeof...(P) + 1] = {static_cast<void*>(&args)...};
  // A failed launch is also CUDA's last error, which check_launch reports by name.
  (void)cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(grid), dim3(block),
                         addresses, 0, stream);
#endif
}

// A launch whose results the host reads before the rest of the function's work (a loop's
// branch conditions, computed from the function's inputs alone): while the function runs
// dry, it is recorded and queued too, so that the dry run can read them
// (mdl/cuda/transfers.h's read_steps_before).
template <class... P>
void launch_now(void (*kernel)(P...), unsigned grid, unsigned block, cudaStream_t stream,
                typename As<P>::type... args) {
  Signature* dry = recording();
  if (dry) dry->add(reinterpret_cast<const void*>(kernel), grid, block, stream, args...);
  recording() = nullptr;
  launch(kernel, grid, block, stream, args...);
  recording() = dry;
}

}  // namespace cuda
}  // namespace mdl
