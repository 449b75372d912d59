// The emulated device's runtime API: errors, streams, memory calls and copies. Work runs in
// its stream's order, at once, or with MDL_CUDA_EMULATOR=deferred only when the stream is
// synchronized: a device-to-host copy's destination holds poison (0xff bytes) until then,
// so a missing cudaStreamSynchronize shows as wrong numbers.
#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "emulator.h"

struct CUstream_st {
  std::deque<std::function<void()>> queue;
};

namespace mdl {
namespace emulated {
namespace {

std::recursive_mutex lock;  // one caller at a time in the emulator
CUstream_st legacy;         // stream 0
std::set<CUstream_st*> streams;

cudaError_t sticky_code = cudaSuccess;
std::string sticky_text;
thread_local cudaError_t last = cudaSuccess;
thread_local std::map<int, std::string> texts;  // the latest text of each error code

const char* generic(cudaError_t code) {
  switch (code) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
  }
  return "unknown error";
}

// The stream a handle names; nullptr (after refusing) for one that does not exist.
CUstream_st* stream_of(cudaStream_t stream, const char* call) {
  if (!stream) return &legacy;
  if (streams.count(stream)) return stream;
  refuse(cudaErrorInvalidResourceHandle,
         std::string(call) + ": the stream is not one cudaStreamCreate made (destroyed?)");
  return nullptr;
}

void execute(const std::function<void()>& work) {
  if (sticky_code != cudaSuccess) return;  // a failed device runs nothing more
  try {
    work();
  } catch (const Violation& v) {
    fail(cudaErrorLaunchFailure, v.what());
  }
}

void drain(CUstream_st* s) {
  while (!s->queue.empty()) {
    auto work = std::move(s->queue.front());
    s->queue.pop_front();
    execute(work);
  }
}

const char* direction(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice:
      return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost:
      return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice:
      return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault:
      return "cudaMemcpyDefault";
  }
  return "an unknown direction";
}

// Why one side of a copy is wrong for its direction, or "" when it is right.
std::string misplaced(const char* side, const void* p, std::size_t bytes, bool device) {
  if (device ? on_device(p, bytes) : !on_device(p)) return "";
  if (device)
    return std::string("its ") + side + " " + describe(p) + " does not hold " +
           std::to_string(bytes) + " bytes of device memory";
  return std::string("its ") + side + " " + describe(p) + " is device memory, not host memory";
}

// Settings are read now: a bad MDL_CUDA_EMULATOR is an error of the call that meets it.
bool deferred() {
  try {
    return settings().deferred;
  } catch (const Violation& v) {
    fail(cudaErrorLaunchFailure, v.what());
    return false;
  }
}

}  // namespace

// ---- errors ---------------------------------------------------------------------------

void fail(cudaError_t code, const std::string& what) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code == cudaSuccess) {
    sticky_code = code;
    sticky_text = "emulated CUDA device: " + what;
  }
  last = code;
}

cudaError_t sticky() { return sticky_code; }

cudaError_t refuse(cudaError_t code, const std::string& what) {
  last = code;
  texts[code] = "emulated CUDA device: " + what;
  return code;
}

void clear_errors() {
  sticky_code = cudaSuccess;
  sticky_text.clear();
  last = cudaSuccess;
  texts.clear();
}

// ---- streams --------------------------------------------------------------------------

void enqueue(cudaStream_t stream, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  CUstream_st* s = stream_of(stream, "a launch");
  if (!s || sticky_code != cudaSuccess) return;
  if (deferred()) {
    s->queue.push_back(std::move(work));
    return;
  }
  drain(s);  // what an earlier deferred setting left queued comes first
  execute(work);
}

void drain_all() {
  std::lock_guard<std::recursive_mutex> hold(lock);
  drain(&legacy);
  for (CUstream_st* s : streams) drain(s);
}

void submit(cudaStream_t stream, Grid grid) {
  enqueue(stream, [grid = std::move(grid)] { run_grid(grid); });
}

bool expect_device_argument(const void* kernel, int index, int count, const void* pointer,
                            const char* type) {
  if (!pointer || on_device(pointer)) return true;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> readable(
      abi::__cxa_demangle(type, nullptr, nullptr, &status), std::free);
  fail(cudaErrorIllegalAddress, "kernel " + kernel_name(kernel) + ": argument " +
                                    std::to_string(index + 1) + " of " + std::to_string(count) +
                                    " (" + (status == 0 ? readable.get() : type) + ") is " +
                                    describe(pointer) + "; a kernel reads only device memory");
  return false;
}

}  // namespace emulated
}  // namespace mdl

using namespace mdl::emulated;

// ---- the runtime API ------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return refuse(cudaErrorInvalidValue, "cudaGetDeviceCount: count is null");
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code != cudaSuccess) return sticky_code;
  cudaError_t code = last;
  last = cudaSuccess;
  return code;
}

cudaError_t cudaPeekAtLastError() {
  std::lock_guard<std::recursive_mutex> hold(lock);
  return sticky_code != cudaSuccess ? sticky_code : last;
}

const char* cudaGetErrorString(cudaError_t error) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (error != cudaSuccess && error == sticky_code) return sticky_text.c_str();
  auto it = texts.find(error);
  return it != texts.end() ? it->second.c_str() : generic(error);
}

const char* cudaGetErrorName(cudaError_t error) { return generic(error); }

cudaError_t cudaDeviceReset() {
  std::lock_guard<std::recursive_mutex> hold(lock);
  legacy.queue.clear();
  for (CUstream_st* s : streams) delete s;
  streams.clear();
  release_all();
  clear_errors();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code != cudaSuccess) return sticky_code;
  if (!pointer) return refuse(cudaErrorInvalidValue, "cudaMalloc: the result pointer is null");
  *pointer = allocate(bytes);
  if (!*pointer) return refuse(cudaErrorMemoryAllocation, "cudaMalloc: out of memory");
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  drain_all();  // as on a GPU: cudaFree waits for the device
  if (!pointer) return cudaSuccess;
  if (!release(pointer))
    return refuse(cudaErrorInvalidDevicePointer,
                  "cudaFree: " + describe(pointer) + " does not start a device allocation");
  return sticky_code;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code != cudaSuccess) return sticky_code;
  if (bytes && !on_device(pointer, bytes))
    return refuse(cudaErrorInvalidValue, "cudaMemset: " + describe(pointer) + " does not hold " +
                                             std::to_string(bytes) + " bytes of device memory");
  if (!stream_of(stream, "cudaMemsetAsync")) return last;
  enqueue(stream, [=] { std::memset(pointer, value, bytes); });
  return sticky_code;
}

cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  cudaError_t status = cudaMemsetAsync(pointer, value, bytes, 0);
  if (status != cudaSuccess) return status;
  drain(&legacy);
  return sticky_code;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code != cudaSuccess) return sticky_code;
  if (!stream_of(stream, "cudaMemcpyAsync")) return last;
  if (!bytes) return cudaSuccess;
  if (kind == cudaMemcpyDefault)
    kind = on_device(src) ? (on_device(dst) ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                          : (on_device(dst) ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice)
    return refuse(cudaErrorInvalidMemcpyDirection, "cudaMemcpy: an unknown direction");
  const bool from_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool to_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  std::string wrong = misplaced("source", src, bytes, from_device);
  if (wrong.empty()) wrong = misplaced("destination", dst, bytes, to_device);
  if (!wrong.empty())
    return refuse(cudaErrorInvalidValue, std::string("cudaMemcpy with ") + direction(kind) +
                                             " of " + std::to_string(bytes) + " bytes: " + wrong);
  if (!from_device) {  // the host's bytes are taken now, as CUDA stages pageable memory
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    enqueue(stream, [=] { std::memcpy(dst, staged->data(), bytes); });
    return sticky_code;
  }
  if (!to_device && deferred()) std::memset(dst, 0xff, bytes);  // until the copy runs
  enqueue(stream, [=] { std::memmove(dst, src, bytes); });
  return sticky_code;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  cudaError_t status = cudaMemcpyAsync(dst, src, bytes, kind, 0);
  if (status != cudaSuccess) return status;
  drain(&legacy);
  return sticky_code;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (!stream) return refuse(cudaErrorInvalidValue, "cudaStreamCreate: the result pointer is null");
  *stream = new CUstream_st();
  streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (!stream || !streams.count(stream))
    return refuse(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  drain(stream);  // its work still runs, as on a GPU
  streams.erase(stream);
  delete stream;
  return sticky_code;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  CUstream_st* s = stream_of(stream, "cudaStreamSynchronize");
  if (!s) return last;
  drain(s);
  return sticky_code;
}

cudaError_t cudaDeviceSynchronize() {
  drain_all();
  return sticky_code;
}
