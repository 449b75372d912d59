// Kernels that race on device memory, each beside a twin that does not, for the emulated
// device's ThreadSanitizer build (`--emulate --sanitize`; tests/test_emulator_races.py).
// Each function runs one case and returns the numbers it read back; the races themselves
// are the sanitizer's reports, on the process's stderr.
#include <cuda_runtime.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "mdl/cuda/device.h"
#include "mdl/cuda/launch.h"
#include "test_device.h"

using mdl::cuda::kThreads;
using mdl::cuda::launch;

namespace {

// out[0] += every x[i], one add a thread and element: a plain `+=` of many threads, or
// atomicAdd (what scatter_add and the fused sums do).
__global__ void add_up(bool atomic, const double* x, int64_t n, double* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (atomic)
      atomicAdd(out, x[i]);
    else
      out[0] += x[i];
  }
}

// Thread 0 of each block writes its block's number: into out[0], which every block writes
// (blocks run at once on a GPU: a race of blocks, not of a block's threads), or out[block].
__global__ void block_numbers(bool same, double* out) {
  if (threadIdx.x == 0) out[same ? 0 : blockIdx.x] = double(blockIdx.x);
}

// Thread 0 writes out[0]; every thread then copies it into out[1 + thread], after a
// barrier or (`wait` false) without one.
__global__ void broadcast(bool wait, double* out) {
  if (threadIdx.x == 0) out[0] = 7.0;
  if (wait) __syncthreads();
  out[1 + threadIdx.x] = out[0];
}

std::vector<double> sum(bool atomic, int blocks) {
  Device d;
  const double* x = d.array(std::vector<double>(1000, 1.0));
  double* out = d.array({0});
  launch(add_up, blocks, kThreads, nullptr, atomic, x, int64_t(1000), out);
  return d.read(out, 1);
}

std::vector<double> numbers(bool same) {
  Device d;
  double* out = d.array({-1, -1, -1, -1});
  launch(block_numbers, 4, 32, nullptr, same, out);
  return d.read(out, 4);
}

std::vector<double> copies(bool wait) {
  Device d;
  double* out = d.array(std::vector<double>(65, 0.0));
  launch(broadcast, 1, 64, nullptr, wait, out);
  return d.read(out, 65);
}

}  // namespace

PYBIND11_MODULE(racing_kernels, m) {
  m.def("sum", &sum);
  m.def("numbers", &numbers);
  m.def("copies", &copies);
}
