// The cuda target's `mdl::Device` (mdl/device.h): a model's context on the GPU, the fault
// check after every function, memory and copies, and the optimizer's kernels. Compiled
// once per cache by nvcc and linked only into cuda modules: the runtime library
// (src/model_object.h) reaches CUDA through this table alone.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "mdl/cuda/context.h"
#include "mdl/error.h"
#include "mdl/cuda/device.h"
#include "mdl/cuda/gemm.h"
#include "mdl/cuda/kernels.h"
#include "mdl/cuda/launch.h"
#include "mdl/cuda/rows.h"
#include "mdl/cuda/transfers.h"
#include "mdl/device.h"
#include "mdl/env.h"
#include "mdl/faults.h"

namespace mdl {
namespace {

using cuda::blocks;
using cuda::check;
using cuda::Context;
using cuda::Fault;
using cuda::first_item;
using cuda::item_stride;
using cuda::kThreads;

Context& context_of(void* context) { return *static_cast<Context*>(context); }

cudaStream_t stream_of(void* context) {
  return context ? context_of(context).stream : cudaStream_t(0);
}

// Before this nothing touches CUDA: on a machine without a GPU (or driver) it is the one
// call, and it fails with a message instead of aborting.
// The process that made the first model of this module's device: a child forked after
// it may not use the device, as CUDA refuses its calls there (initialization error). The
// emulated device's locks, which a thread of the parent may have held at the fork, had
// its calls wait forever.
pid_t user = 0;

void check_process() {
  if (user && user != getpid())
    throw std::runtime_error("the cuda target cannot be used in a process forked from one "
                             "that used it (CUDA's rule): make the child with "
                             "multiprocessing's 'spawn' method, or fork before making a "
                             "cuda model");
}

void require() {
  check_process();
  if (!user) user = getpid();
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) return;
  cudaGetLastError();  // clears the error, which is not sticky
  std::string why = status != cudaSuccess ? cudaGetErrorString(status)
                                          : "the CUDA runtime sees no device";
  throw std::runtime_error("no CUDA device was found (" + why + "): this module was built "
                           "with --target cuda; build it with --target cpu to run on this "
                           "machine");
}

// Zeroes new device memory, and waits for it. cudaMemset queues on the legacy stream, which
// a model's stream (non-blocking) is not ordered with: unwaited, the zeros could land after
// the model's first copies and kernels had written the memory. On an H100 running 16 test
// processes they did: inputs, parameters and outputs read as zeros (issue #20).
cudaError_t zero(void* p, std::size_t bytes) {
  cudaError_t status = cudaMemset(p, 0, bytes);
  return status == cudaSuccess ? cudaStreamSynchronize(0) : status;
}

// Frees what `open` made of `c`, however far it got; errors are ignored (a model is going).
void destroy(Context* c) {
  if (c->stream) cudaStreamSynchronize(c->stream);
  if (c->blas) cublasDestroy(c->blas);
  if (c->fault) cudaFree(c->fault);
  cudaStream_t stream = c->stream;
  delete c;  // its arenas, scratch buffers and tapes
  if (stream) cudaStreamDestroy(stream);
}

void* open() {
  Context* c = new Context();
  try {
    check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags");
    check(cublasCreate(&c->blas), "cublasCreate");
    check(cublasSetStream(c->blas, c->stream), "cublasSetStream");
    check(cudaMalloc(&c->fault, sizeof(Fault)), "cudaMalloc");
    check(zero(c->fault, sizeof(Fault)), "cudaMemset");
    c->graphs.enabled = env_switch("MDL_CUDA_GRAPHS", true);  // 0: every call runs as it is
  } catch (...) {
    destroy(c);
    throw;
  }
  return c;
}

void close(void* context) {
  if (context) destroy(static_cast<Context*>(context));
}

void finish(void* context) {
  Context& c = context_of(context);
  Fault f{};
  // the fault's copy is queued behind the call's work: one wait covers both
  cudaError_t status = cudaMemcpyAsync(&f, c.fault, sizeof f, cudaMemcpyDeviceToHost, c.stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(c.stream);
  if (status == cudaSuccess) status = cudaGetLastError();  // a launch that never ran
  if (status != cudaSuccess) {
    cudaGetLastError();
    c.profiler.forget();
    check(status, "running the model on the GPU");
  }
  c.profiler.settle();  // a profiled build's sites' times (mdl/cuda/profile.h)
  if (!f.kind) return;
  check(cudaMemsetAsync(c.fault, 0, sizeof(Fault), c.stream), "cudaMemsetAsync");
  check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");
  // the exception the CPU's kernels throw for the same input
  least_report(f, &f.value, &f.position);
  raise_fault(FaultKind(f.kind), f.value, f.position, f.bound, f.what, f.outer, f.outers);
}

// New device memory, zeroed. Only CUDA's out-of-memory answer is a MemoryError: any other
// (an earlier kernel's sticky fault, a bad MDL_CUDA_EMULATOR setting) is check's
// RuntimeError with CUDA's reason; read as out of memory, it asked for more memory, at
// 512 bytes.
void* allocate(std::size_t bytes) {
  if (!bytes) return nullptr;
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw OutOfMemory(bytes, "the GPU's memory");
  }
  check(status, "cudaMalloc");
  status = zero(p, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    cudaFree(p);
    check(status, "cudaMemset");
  }
  return p;
}

void release(void* p) {
  if (p) cudaFree(p);
}

void copy(void* context, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (!bytes) return;
  cudaStream_t stream = stream_of(context);
  check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void copy_in(void* context, void* dst, const void* src, std::size_t bytes) {
  copy(context, dst, src, bytes, cudaMemcpyHostToDevice);
}

void copy_out(void* context, void* dst, const void* src, std::size_t bytes) {
  copy(context, dst, src, bytes, cudaMemcpyDeviceToHost);
}

// Queued on the model's stream only: the caller's `finish` waits for it with the rest.
void copy_within(void* context, void* dst, const void* src, std::size_t bytes) {
  if (!bytes) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(context)),
        "cudaMemcpyAsync");
}

template <class T>
__global__ void update_kernel(UpdateStep s, T* w, const T* g, T* first, T* second,
                              int64_t n) {
  T unused = 0;  // SGD's second moment
  for (int64_t k = first_item(); k < n; k += item_stride())
    update_element(s, w[k], g[k], first[k], second ? second[k] : unused);
}

template <class T>
void update(void* context, const UpdateStep& s, T* w, const T* g, T* first, T* second,
            int64_t n) {
  if (n <= 0) return;
  cuda::launch(update_kernel<T>, blocks(n), kThreads, stream_of(context), s, w, g, first,
               second, n);
  check(cudaGetLastError(), "launching the optimizer's update");
}

// Each block's sum of squares, in double, into partial[blockIdx.x]: the host adds the
// blocks' sums in a fixed order, so a norm does not change from run to run.
template <class T>
__global__ void sum_squares_kernel(const T* g, int64_t n, double* partial) {
  MDL_SHARED_ARRAY(double, sums, kThreads);
  double sum = 0;
  for (int64_t k = first_item(); k < n; k += item_stride()) sum += double(g[k]) * double(g[k]);
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

template <class T>
double sum_squares(void* context, const T* g, int64_t n) {
  if (n <= 0) return 0;
  Context& c = context_of(context);
  const unsigned parts = std::min(blocks(n), cuda::kPartials);
  auto* partial = reinterpret_cast<double*>(c.staging.hold(parts * sizeof(double)));
  cuda::launch(sum_squares_kernel<T>, parts, kThreads, c.stream, g, n, partial);
  check(cudaGetLastError(), "launching the gradient norm");
  std::vector<double> sums(parts);
  copy_out(context, sums.data(), partial, parts * sizeof(double));
  double total = 0;
  for (double s : sums) total += s;
  return total;
}

void synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

void graph_counts(void* context, int64_t* captured, int64_t* replayed) {
  const cuda::GraphTable& graphs = context_of(context).graphs;
  *captured = graphs.captured;
  *replayed = graphs.replayed;
}

#if defined(MDL_CUDA_EMULATED)
bool holds(const void* p) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}
#endif

}  // namespace

extern const Device cuda_device = {
#if defined(MDL_CUDA_EMULATED)  // its memory is the host's: DLPack's kDLCPU says so to readers
    "cuda-emulated",
    1,
#else
    "cuda",
    2,  // DLPack's kDLCUDA
#endif
    require,
    open,
    close,
    finish,
    allocate,
    release,
    copy_in,
    copy_out,
    copy_within,
    update<float>,
    update<double>,
    sum_squares<float>,
    sum_squares<double>,
    synchronize,
    false,  // its memory is the GPU's
    graph_counts,
#if defined(MDL_CUDA_EMULATED)
    holds,
#else
    nullptr,  // no host pointer is a GPU's memory
#endif
    check_process,
};

}  // namespace mdl

// The kernel primitives every module's host code calls (mdl/cuda/primitives.h), compiled
// here once for each element type it lists rather than in each module.
namespace mdl {
namespace cuda {
MDL_CUDA_PRIMITIVES()
}  // namespace cuda
}  // namespace mdl
