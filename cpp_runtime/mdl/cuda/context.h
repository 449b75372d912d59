// A model's context on the GPU (the cuda target): the stream every function of the model
// runs on, its cuBLAS handle, the arenas the memory plan lays out, scratch buffers, the
// tapes of `while` loops, the functions' CUDA graphs, and the one fault record device code writes when it meets bad
// input (a token id past the table). Generated code reaches it as `mdl::cuda::context(m)`;
// src/cuda_device.cu makes it (Device::open) and checks its fault after every function
// (Device::finish). Host code: a module's module.cpp includes it, compiled by the C++
// compiler, as the runtime's .cu files do.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "mdl/arena.h"
#include "mdl/cuda/check.h"
#include "mdl/cuda/fault.h"
#include "mdl/cuda/graph.h"
#include "mdl/cuda/profile.h"
#include "mdl/error.h"
#include "mdl/faults.h"
#include "mdl/model.h"

namespace mdl {
namespace cuda {

// Device memory that grows on demand; contents are not kept across growth (as Arena).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(data_); }

  char* hold(std::size_t bytes) {
    if (bytes > size_) {
      check(cudaFree(data_), "cudaFree");  // waits for work that may still read it
      data_ = nullptr;
      size_ = 0;
      const cudaError_t got = cudaMalloc(&data_, align_up(bytes));
      if (got == cudaErrorMemoryAllocation) {  // what the call needed, as the cpu target
        cudaGetLastError();                    // says it (it was "std::bad_alloc")
        data_ = nullptr;
        throw OutOfMemory(bytes, "the GPU's memory");
      }
      check(got, "cudaMalloc");
      size_ = align_up(bytes);
    }
    return static_cast<char*>(data_);
  }
  char* data() { return static_cast<char*>(data_); }
  std::size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// A while loop's tape in device memory: records appended in push order, grown by
// doubling (the old records copied over), read as one array once the loop has ended.
class DeviceTape {
 public:
  void clear() { used_ = 0; }
  // Exactly `bytes` bytes, their contents left to the caller (a ragged yield written in
  // place: arena.h's Tape); the old records are not kept.
  char* hold(std::size_t bytes) {
    used_ = bytes;
    return buffer_->hold(bytes);
  }
  // Room for `bytes` more at the end, as a device pointer (stream-ordered: the copy of
  // old records runs on `stream` before anything queued after it).
  char* push(std::size_t bytes, cudaStream_t stream) {
    if (used_ + bytes > buffer_->size()) {
      auto bigger = std::make_unique<DeviceBuffer>();
      bigger->hold(std::max<std::size_t>(2 * buffer_->size(), used_ + bytes));
      if (used_)
        check(cudaMemcpyAsync(bigger->data(), buffer_->data(), used_, cudaMemcpyDeviceToDevice,
                              stream),
              "cudaMemcpyAsync");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      buffer_ = std::move(bigger);  // the old records' memory freed
    }
    char* at = buffer_->data() + used_;
    used_ += bytes;
    return at;
  }
  char* data() { return buffer_->data(); }
  std::size_t used() const { return used_; }
  StepRows steps;  // a `for`'s ragged yield's (host memory)

 private:
  std::unique_ptr<DeviceBuffer> buffer_ = std::make_unique<DeviceBuffer>();
  std::size_t used_ = 0;
};

struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  Fault* fault = nullptr;  // device memory, zeroed
  std::vector<std::unique_ptr<DeviceBuffer>> arenas;  // one per kind of function
  std::vector<std::unique_ptr<DeviceBuffer>> scratch_buffers;
  std::vector<std::unique_ptr<DeviceTape>> tapes;
  DeviceBuffer staging;    // per-block partial sums of kernels that end in one number
  GraphTable graphs;       // the functions captured as CUDA graphs (graph.h)
  Profiler profiler;       // a profiled build's sites' events (profile.h)

  // Arena k (the memory plan of one kind of function: codegen/backend/module.py's ARENAS).
  DeviceBuffer& arena(int k) {
    while (int(arenas.size()) <= k) arenas.push_back(std::make_unique<DeviceBuffer>());
    return *arenas[k];
  }

  // Scratch buffer k (a value sized at run time), at least `bytes` long.
  char* scratch(int k, std::size_t bytes) {
    while (int(scratch_buffers.size()) <= k)
      scratch_buffers.push_back(std::make_unique<DeviceBuffer>());
    return scratch_buffers[k]->hold(bytes);
  }

  DeviceTape& tape(int k) {
    while (int(tapes.size()) <= k) tapes.push_back(std::make_unique<DeviceTape>());
    return *tapes[k];
  }
};

template <class T>
Context& context(State<T>& m) {
  return *static_cast<Context*>(m.device);
}

}  // namespace cuda
}  // namespace mdl
