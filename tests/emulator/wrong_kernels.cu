// Kernels with the bugs the emulated device must catch (tests/test_emulator.py), each
// beside its correct twin, which must run and give the right numbers. Built by the emulated
// toolchain as the cuda target's modules are; each function runs one case and returns the
// device's error text ("" when there was none) and the numbers it read back.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "mdl/cuda/device.h"
#include "mdl/cuda/launch.h"
#include "test_device.h"

namespace py = pybind11;
using mdl::cuda::kThreads;
using mdl::cuda::launch;

namespace {

// ---- kernels --------------------------------------------------------------------------

// out[0] = the sum of 0..255 through shared memory; `wait`: the barrier between the writes
// and thread 0's reads.
__global__ void block_sum(bool wait, double* out) {
  MDL_SHARED_ARRAY(double, cell, kThreads);
  cell[threadIdx.x] = double(threadIdx.x);
  if (wait) __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int i = 0; i < kThreads; ++i) s += cell[i];
    out[0] = s;
  }
}

// A barrier only the first `reach` threads of the block reach.
__global__ void barrier_in_branch(unsigned reach, double* out) {
  MDL_SHARED_ARRAY(double, cell, kThreads);
  cell[threadIdx.x] = 1.0;
  if (threadIdx.x < reach) __syncthreads();
  if (threadIdx.x == 0) out[0] = cell[0];
}

// Two barriers, odd and even threads at different ones.
__global__ void two_barriers(double* out) {
  if (threadIdx.x % 2)
    __syncthreads();
  else
    __syncthreads();
  out[threadIdx.x] = 1.0;
}

// Each warp's sum of its lane numbers, by shuffles with `mask`.
__global__ void warp_sum(unsigned mask, double* out) {
  double v = threadIdx.x % 32;
  for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(mask, v, s);
  out[threadIdx.x] = v;
}

// Lanes 0-15 shuffle among themselves with mask `mask`; the others skip the shuffle.
__global__ void half_warp_sum(unsigned mask, double* out) {
  double v = threadIdx.x % 32;
  if (threadIdx.x % 32 < 16)
    for (int s = 8; s > 0; s >>= 1) v += __shfl_xor_sync(mask, v, s);
  out[threadIdx.x] = v;
}

__global__ void scale(const double* x, int64_t n, double* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = 2 * x[i];
}

// Reads x[0..n], one element past an array of n.
__global__ void read_past(const double* x, int64_t n, double* out) {
  if (threadIdx.x == 0) {
    double s = 0;
    for (int64_t i = 0; i <= n; ++i) s += x[i];
    out[0] = s;
  }
}

// A barrier only when `late` (its first launches pass false: the fast path is taken then).
__global__ void late_barrier(bool late, double* out) {
  if (late) __syncthreads();
  out[threadIdx.x] = 1.0;
}

// ---- the cases ------------------------------------------------------------------------

using Result = std::pair<std::string, std::vector<double>>;

Result shared_race(bool wait) {
  Device d;
  double* out = d.array({0});
  launch(block_sum, 1, kThreads, nullptr, wait, out);
  return {Device::error(), d.read(out, 1)};
}

Result divergent_barrier(unsigned reach) {
  Device d;
  double* out = d.array({0});
  launch(barrier_in_branch, 1, kThreads, nullptr, reach, out);
  return {Device::error(), d.read(out, 1)};
}

Result different_barriers() {
  Device d;
  double* out = d.array(std::vector<double>(kThreads));
  launch(two_barriers, 1, kThreads, nullptr, out);
  return {Device::error(), d.read(out, kThreads)};
}

Result shuffle(unsigned mask, bool half) {
  Device d;
  double* out = d.array(std::vector<double>(64));
  launch(half ? half_warp_sum : warp_sum, 1, 64, nullptr, mask, out);
  return {Device::error(), d.read(out, 64)};
}

Result host_pointer(bool on_device) {
  Device d;
  std::vector<double> host = {1, 2, 3};
  double* x = on_device ? d.array(host) : host.data();
  double* out = d.array({0, 0, 0});
  launch(scale, 1, kThreads, nullptr, x, int64_t(3), out);
  return {Device::error(), d.read(out, 3)};
}

Result past_the_end(int64_t n_read) {
  Device d;
  double* x = d.array({1, 2, 3});
  double* out = d.array({0});
  launch(read_past, 1, kThreads, nullptr, x, n_read - 1, out);
  return {Device::error(), d.read(out, 1)};
}

Result fast_path_barrier() {
  Device d;
  double* out = d.array(std::vector<double>(kThreads));
  launch(late_barrier, 1, kThreads, nullptr, false, out);  // learnt: no barrier
  std::string first = Device::error();
  if (!first.empty()) return {"the first launch failed: " + first, {}};
  launch(late_barrier, 1, kThreads, nullptr, true, out);
  return {Device::error(), d.read(out, 1)};
}

// C (2x2) = A (2x3) B (3x2), column-major, with the leading dimensions and sizes given.
Result gemm(int64_t lda, std::size_t a_size) {
  Device d;
  std::vector<double> a(a_size);
  for (std::size_t i = 0; i < a_size; ++i) a[i] = double(i + 1);
  double* A = d.array(a);
  double* B = d.array({1, 0, 1, 0, 1, 1});
  double* C = d.array({-1, -1, -1, -1});
  cublasHandle_t h;
  cublasCreate(&h);
  const double one = 1, zero = 0;
  cublasStatus_t s = cublasDgemm_64(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A, lda, B, 3,
                                    &zero, C, 2);
  std::string error = s == CUBLAS_STATUS_SUCCESS ? Device::error() : cublasGetStatusString(s);
  cublasDestroy(h);
  return {error, d.read(C, 4)};
}

// Copies x * 2 back on stream s; `wait`: synchronizes the stream before reading.
Result copy_back(bool wait) {
  Device d;
  double* x = d.array({1, 2, 3});
  double* out = d.array({0, 0, 0});
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  launch(scale, 1, kThreads, s, x, int64_t(3), out);
  std::vector<double> host(3);
  cudaMemcpyAsync(host.data(), out, 3 * sizeof(double), cudaMemcpyDeviceToHost, s);
  if (wait) cudaStreamSynchronize(s);
  std::vector<double> seen = host;  // what the host reads now
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  return {Device::error(), seen};
}

// New memory zeroed by cudaMemset, which queues on the legacy stream, then filled by a
// copy on a non-blocking stream and read by a kernel there: the two streams are not
// ordered, so unless the host waits for the memset (`wait`), its zeros may land after the
// copy, as they did on an H100 under load. The numbers: 2 x what the kernel read.
Result zeroed_then_filled(bool wait) {
  Device d;
  double* out = d.array({0, 0, 0});
  void* x = nullptr;
  cudaMalloc(&x, 3 * sizeof(double));
  cudaMemset(x, 0, 3 * sizeof(double));
  if (wait) cudaStreamSynchronize(0);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const double values[3] = {1, 2, 3};
  cudaMemcpyAsync(x, values, sizeof values, cudaMemcpyHostToDevice, s);
  cudaStreamSynchronize(s);
  launch(scale, 1, kThreads, s, static_cast<const double*>(x), int64_t(3), out);
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  return {Device::error(), d.read(out, 3)};
}

// x * 2 into out, captured from stream s as a graph, then replayed twice with new x. With
// `unsafe` 1 to 4, the capture also meets a call CUDA refuses during it (cudaMalloc, the
// stream's synchronization, a copy to the host on it, a synchronous copy), which returns
// its own error and invalidates the capture. The text: that call's error, then
// cudaStreamEndCapture's; the numbers: out before the graph's first launch, then after each.
Result graph(int unsafe) {
  Device d;
  double* x = d.array({1, 2, 3});
  double* out = d.array({0, 0, 0});
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  launch(scale, 1, kThreads, s, x, int64_t(3), out);
  cudaError_t refused = cudaSuccess;
  double host[3];
  void* more = nullptr;
  if (unsafe == 1) refused = cudaMalloc(&more, 8);
  if (unsafe == 2) refused = cudaStreamSynchronize(s);
  if (unsafe == 3) refused = cudaMemcpyAsync(host, out, sizeof host, cudaMemcpyDeviceToHost, s);
  if (unsafe == 4) refused = cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  cudaGraph_t graph = nullptr;
  cudaError_t ended = cudaStreamEndCapture(s, &graph);
  std::string text = refused == cudaSuccess ? "" : cudaGetErrorString(refused);
  std::vector<double> seen = d.read(out, 3);  // captured work has not run
  if (ended != cudaSuccess) {
    cudaStreamDestroy(s);
    return {text + " | " + cudaGetErrorString(ended), seen};
  }
  cudaGraphExec_t exec;
  cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  for (double scale_of_x : {10.0, 100.0}) {
    const double next[3] = {scale_of_x, 2 * scale_of_x, 3 * scale_of_x};
    cudaMemcpy(x, next, sizeof next, cudaMemcpyHostToDevice);
    cudaGraphLaunch(exec, s);
    cudaStreamSynchronize(s);
    for (double v : d.read(out, 3)) seen.push_back(v);
  }
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
  return {text + Device::error(), seen};
}

}  // namespace

// The time between two events around a kernel on stream s; `wait`: synchronizes the stream
// before asking. The error texts of that, and of asking about an event never recorded.
Result event_times(bool wait) {
  Device d;
  double* x = d.array({1, 2, 3});
  double* out = d.array({0, 0, 0});
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t start, stop, never;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventCreate(&never);
  cudaEventRecord(start, s);
  launch(scale, 1, kThreads, s, x, int64_t(3), out);
  cudaEventRecord(stop, s);
  if (wait) cudaStreamSynchronize(s);
  float ms = -1;
  cudaError_t timed = cudaEventElapsedTime(&ms, start, stop);
  std::string error = timed == cudaSuccess ? "" : cudaGetErrorString(timed);
  float unused = 0;
  cudaError_t unrecorded = cudaEventElapsedTime(&unused, start, never);
  cudaGetLastError();
  error += std::string(" | ") + cudaGetErrorString(unrecorded);
  cudaStreamSynchronize(s);
  for (cudaEvent_t e : {start, stop, never}) cudaEventDestroy(e);
  cudaStreamDestroy(s);
  return {error, {double(ms >= 0)}};
}

// cudaMalloc meeting a bad MDL_CUDA_EMULATOR, then again with `good` set: the error
// sticks as a launch's does ("" where the second succeeded).
std::string malloc_after_a_bad_setting(const std::string& good) {
  Device d;
  void* p = nullptr;
  cudaMalloc(&p, 8);
  setenv("MDL_CUDA_EMULATOR", good.c_str(), 1);
  const cudaError_t again = cudaMalloc(&p, 8);
  return again == cudaSuccess ? "" : cudaGetErrorString(again);
}

PYBIND11_MODULE(wrong_kernels, m) {
  m.def("malloc_after_a_bad_setting", &malloc_after_a_bad_setting);
  m.def("shared_race", &shared_race);
  m.def("divergent_barrier", &divergent_barrier);
  m.def("different_barriers", &different_barriers);
  m.def("shuffle", &shuffle);
  m.def("host_pointer", &host_pointer);
  m.def("past_the_end", &past_the_end);
  m.def("fast_path_barrier", &fast_path_barrier);
  m.def("gemm", &gemm);
  m.def("copy_back", &copy_back);
  m.def("zeroed_then_filled", &zeroed_then_filled);
  m.def("graph", &graph);
  m.def("event_times", &event_times);
}
