// The emulated device's runtime API: errors, streams, memory calls, copies and graphs. Work
// runs in its stream's order, at once, or with MDL_CUDA_EMULATOR=deferred only when the
// stream is synchronized: a device-to-host copy's destination holds poison (0xff bytes)
// until then, so a missing cudaStreamSynchronize shows as wrong numbers. Streams are
// ordered as CUDA orders them: the legacy stream (0) and the blocking streams each wait
// for the others' earlier work; a non-blocking stream waits for none, so in deferred mode
// what the legacy stream still holds runs after the non-blocking stream's work that is
// synchronized (a cudaMemset not waited for lands after a later copy, as it can on a GPU).
// A capturing stream records its work into a graph instead, which cudaGraphLaunch queues
// again, the same operations on the same arguments, as often as it is launched.
#include <cxxabi.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "emulator.h"

struct CUgraph_st {
  std::vector<std::function<void()>> work;  // in the order it was queued
};

struct CUgraphExec_st {
  std::vector<std::function<void()>> work;
};

struct CUevent_st {
  bool recorded = false;  // cudaEventRecord was called on it
  bool reached = false;   // its latest record's mark has run
  std::chrono::steady_clock::time_point at;  // when it ran
};

struct CUstream_st {
  std::deque<std::pair<uint64_t, std::function<void()>>> queue;  // (when it was queued, work)
  bool blocking = true;  // ordered with the legacy stream (not cudaStreamNonBlocking)
  CUgraph_st* capture = nullptr;  // while capturing: the graph its work goes into
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id owner;          // the thread that began the capture
  std::string invalidated;        // why the capture is invalid ("" while it is valid)
};

namespace mdl {
namespace emulated {
namespace {

std::recursive_mutex lock;  // one caller at a time in the emulator
CUstream_st legacy;         // stream 0
uint64_t queued = 0;        // how much work was ever queued: the order of the queues' work
std::set<CUstream_st*> streams;
std::set<CUgraph_st*> graphs;
std::set<CUgraphExec_st*> execs;
std::set<CUevent_st*> events;

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
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
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

// The streams whose capture a call of this thread may disturb: every capture in the
// global mode, this thread's in the thread-local mode, none in the relaxed mode.
std::vector<CUstream_st*> watching() {
  std::vector<CUstream_st*> out;
  for (CUstream_st* s : streams)
    if (s->capture && (s->mode == cudaStreamCaptureModeGlobal ||
                       (s->mode == cudaStreamCaptureModeThreadLocal &&
                        s->owner == std::this_thread::get_id())))
      out.push_back(s);
  return out;
}

// Refuses `call` (and invalidates the captures it disturbs) when a capture forbids it, as
// CUDA refuses an unsafe call during capture; cudaSuccess when none does.
cudaError_t unsafe_during_capture(const std::string& call,
                                  cudaError_t code = cudaErrorStreamCaptureUnsupported) {
  std::vector<CUstream_st*> disturbed = watching();
  if (disturbed.empty()) return cudaSuccess;
  const std::string why = call + " while a stream is capturing (" +
                          "its work would not be part of the graph, or would wait for it)";
  for (CUstream_st* s : disturbed)
    if (s->invalidated.empty()) s->invalidated = why;
  return refuse(code, why);
}

// Deletes `p`, one of the `live` objects a call made (a graph), or refuses with `wrong`.
template <class T>
cudaError_t destroy(std::set<T*>& live, T* p, const char* wrong) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (!live.erase(p)) return refuse(cudaErrorInvalidValue, wrong);
  delete p;
  return cudaSuccess;
}

void execute(const std::function<void()>& work) {
  if (sticky_code != cudaSuccess) return;  // a failed device runs nothing more
  try {
    work();
  } catch (const Violation& v) {
    fail(cudaErrorLaunchFailure, v.what());
  }
}

void run_first(CUstream_st* s) {
  auto work = std::move(s->queue.front().second);
  s->queue.pop_front();
  execute(work);
}

// Runs the work of the legacy stream and the blocking streams queued before `bound`, in the
// order it was queued: each of them waits for the others' earlier work.
void drain_ordered(uint64_t bound) {
  for (;;) {
    CUstream_st* first = legacy.queue.empty() ? nullptr : &legacy;
    for (CUstream_st* s : streams)
      if (s->blocking && !s->queue.empty() &&
          (!first || s->queue.front().first < first->queue.front().first))
        first = s;
    if (!first || first->queue.front().first >= bound) return;
    run_first(first);
  }
}

// Runs what `s` queued (and what it waits for). A non-blocking stream waits for nothing
// else, and nothing else for it: the legacy stream's work still queued runs after it, the
// order of the two that a missing wait for the legacy stream gets wrong.
void drain(CUstream_st* s) {
  if (s == &legacy || s->blocking) {
    if (!s->queue.empty()) drain_ordered(s->queue.back().first + 1);
    return;
  }
  while (!s->queue.empty()) run_first(s);
  drain_ordered(UINT64_MAX);
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
  if (s->capture) {  // recorded, not run (an invalid capture records nothing more)
    if (s->invalidated.empty()) s->capture->work.push_back(std::move(work));
    return;
  }
  if (s == &legacy &&
      unsafe_during_capture("work queued on the legacy stream", cudaErrorStreamCaptureImplicit))
    return;  // the launch's check finds the error
  if (deferred()) {
    s->queue.emplace_back(++queued, std::move(work));
    return;
  }
  drain(s);  // what an earlier deferred setting left queued comes first
  execute(work);
}

void drain_all() {
  std::lock_guard<std::recursive_mutex> hold(lock);
  drain_ordered(UINT64_MAX);
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
  for (CUstream_st* s : streams) {
    delete s->capture;
    delete s;
  }
  streams.clear();
  for (CUgraph_st* g : graphs) delete g;
  graphs.clear();
  for (CUgraphExec_st* e : execs) delete e;
  execs.clear();
  for (CUevent_st* e : events) delete e;
  events.clear();
  release_all();
  clear_errors();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code != cudaSuccess) return sticky_code;
  if (!pointer) return refuse(cudaErrorInvalidValue, "cudaMalloc: the result pointer is null");
  if (cudaError_t e = unsafe_during_capture("cudaMalloc")) return e;
  std::size_t memory;
  try {
    memory = capacity();
  } catch (const Violation& v) {  // a bad MDL_CUDA_EMULATOR: sticky, as a launch's is
    fail(cudaErrorLaunchFailure, v.what());
    return sticky_code;
  }
  *pointer = allocate(bytes, memory);
  if (!*pointer)  // an allocation takes whole pages and a guard page: say what it took
    return refuse(cudaErrorMemoryAllocation,
                  "cudaMalloc: out of memory: " + std::to_string(bytes) + " bytes asked for "
                  "take " + std::to_string(mapped_size(bytes)) + " (whole pages and a guard "
                  "page after them), " + std::to_string(memory_in_use()) + " of the device's " +
                  std::to_string(memory) + " are in use (MDL_CUDA_EMULATOR's memory=)");
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (!attributes)
    return refuse(cudaErrorInvalidValue, "cudaPointerGetAttributes: the result pointer is null");
  const bool device = pointer && on_device(pointer);
  attributes->type = device ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  attributes->device = device ? 0 : -2;
  attributes->devicePointer = device ? const_cast<void*>(pointer) : nullptr;
  attributes->hostPointer = nullptr;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (cudaError_t e = unsafe_during_capture("cudaFree")) return e;
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
  return last != cudaSuccess ? last : sticky_code;
}

// Of device memory, asynchronous with respect to the host, as CUDA's: queued on the legacy
// stream, which it returns before running in deferred mode.
cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (cudaError_t e = unsafe_during_capture("cudaMemset")) return e;
  return cudaMemsetAsync(pointer, value, bytes, 0);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code != cudaSuccess) return sticky_code;
  CUstream_st* s = stream_of(stream, "cudaMemcpyAsync");
  if (!s) return last;
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
  if (s->capture && !(from_device && to_device)) {
    const std::string why = std::string("cudaMemcpyAsync with ") + direction(kind) +
                            " on a capturing stream (a replay would read or write host memory)";
    if (s->invalidated.empty()) s->invalidated = why;
    return refuse(cudaErrorStreamCaptureUnsupported, why);
  }
  if (s == &legacy)
    if (cudaError_t e = unsafe_during_capture("a copy on the legacy stream",
                                              cudaErrorStreamCaptureImplicit))
      return e;
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
  if (cudaError_t e = unsafe_during_capture("cudaMemcpy")) return e;
  cudaError_t status = cudaMemcpyAsync(dst, src, bytes, kind, 0);
  if (status != cudaSuccess) return status;
  drain(&legacy);
  return sticky_code;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (!stream) return refuse(cudaErrorInvalidValue, "cudaStreamCreate: the result pointer is null");
  *stream = new CUstream_st();
  (*stream)->blocking = !(flags & cudaStreamNonBlocking);
  streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (!stream || !streams.count(stream))
    return refuse(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  if (stream->capture)
    return refuse(cudaErrorStreamCaptureUnsupported, "cudaStreamDestroy: the stream is "
                                                     "capturing (end the capture first)");
  drain(stream);  // its work still runs, as on a GPU
  streams.erase(stream);
  delete stream;
  return sticky_code;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  CUstream_st* s = stream_of(stream, "cudaStreamSynchronize");
  if (!s) return last;
  if (s->capture) {
    const std::string why = "cudaStreamSynchronize of a capturing stream";
    if (s->invalidated.empty()) s->invalidated = why;
    return refuse(cudaErrorStreamCaptureUnsupported, why);
  }
  if (s == &legacy)
    if (cudaError_t e = unsafe_during_capture("cudaStreamSynchronize of the legacy stream"))
      return e;
  drain(s);
  return sticky_code;
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (cudaError_t e = unsafe_during_capture("cudaDeviceSynchronize")) return e;
  drain_all();
  return sticky_code;
}

// ---- graphs ---------------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code != cudaSuccess) return sticky_code;
  if (!stream)
    return refuse(cudaErrorStreamCaptureUnsupported,
                  "cudaStreamBeginCapture: the legacy stream cannot capture");
  CUstream_st* s = stream_of(stream, "cudaStreamBeginCapture");
  if (!s) return last;
  if (s->capture)
    return refuse(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is capturing "
                                           "already");
  if (mode < cudaStreamCaptureModeGlobal || mode > cudaStreamCaptureModeRelaxed)
    return refuse(cudaErrorInvalidValue, "cudaStreamBeginCapture: an unknown mode");
  drain(s);  // what it queued before the capture is not part of the graph
  s->capture = new CUgraph_st();
  s->mode = mode;
  s->owner = std::this_thread::get_id();
  s->invalidated.clear();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (!graph) return refuse(cudaErrorInvalidValue, "cudaStreamEndCapture: graph is null");
  *graph = nullptr;
  CUstream_st* s = stream_of(stream, "cudaStreamEndCapture");
  if (!s) return last;
  if (!s->capture)
    return refuse(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
  if (s->mode != cudaStreamCaptureModeRelaxed && s->owner != std::this_thread::get_id())
    return refuse(cudaErrorIllegalState, "cudaStreamEndCapture: called from another "
                                           "thread than the capture began on");
  std::unique_ptr<CUgraph_st> captured(s->capture);
  s->capture = nullptr;
  if (!s->invalidated.empty())
    return refuse(cudaErrorStreamCaptureInvalidated,
                  "cudaStreamEndCapture: the capture was invalidated by " + s->invalidated);
  if (sticky_code != cudaSuccess) return sticky_code;
  *graph = captured.release();
  graphs.insert(*graph);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (!status) return refuse(cudaErrorInvalidValue, "cudaStreamIsCapturing: status is null");
  CUstream_st* s = stream_of(stream, "cudaStreamIsCapturing");
  if (!s) return last;
  *status = !s->capture                 ? cudaStreamCaptureStatusNone
            : s->invalidated.empty()    ? cudaStreamCaptureStatusActive
                                        : cudaStreamCaptureStatusInvalidated;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code != cudaSuccess) return sticky_code;
  if (!exec) return refuse(cudaErrorInvalidValue, "cudaGraphInstantiate: exec is null");
  if (!graphs.count(graph))
    return refuse(cudaErrorInvalidValue, "cudaGraphInstantiate: not a live graph");
  *exec = new CUgraphExec_st{graph->work};
  execs.insert(*exec);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code != cudaSuccess) return sticky_code;
  if (!execs.count(exec))
    return refuse(cudaErrorInvalidValue, "cudaGraphLaunch: not a live instantiated graph");
  CUstream_st* s = stream_of(stream, "cudaGraphLaunch");
  if (!s) return last;
  if (s->capture)
    return refuse(cudaErrorStreamCaptureUnsupported,
                  "cudaGraphLaunch on a capturing stream (the emulator has no child graphs)");
  for (const auto& work : exec->work) enqueue(stream, work);
  return last != cudaSuccess ? last : sticky_code;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  return destroy(execs, exec, "cudaGraphExecDestroy: not a live instantiated graph");
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  return destroy(graphs, graph, "cudaGraphDestroy: not a live graph");
}

// ---- events ---------------------------------------------------------------------------

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (!event) return refuse(cudaErrorInvalidValue, "cudaEventCreate: the result pointer is null");
  *event = new CUevent_st();
  events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (events.count(event)) drain_all();  // a mark still queued would note into freed memory
  return destroy(events, event, "cudaEventDestroy: not a live event");
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (sticky_code != cudaSuccess) return sticky_code;
  if (!events.count(event))
    return refuse(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live event");
  event->recorded = true;
  event->reached = false;
  enqueue(stream, [event] {
    event->at = std::chrono::steady_clock::now();
    event->reached = true;
  });
  return last != cudaSuccess ? last : sticky_code;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard<std::recursive_mutex> hold(lock);
  if (!ms) return refuse(cudaErrorInvalidValue, "cudaEventElapsedTime: ms is null");
  for (CUevent_st* e : {start, end})
    if (!events.count(e) || !e->recorded)
      return refuse(cudaErrorInvalidResourceHandle,
                    "cudaEventElapsedTime: an event that is not live or was never recorded");
  if (!start->reached || !end->reached)
    return refuse(cudaErrorNotReady, "cudaEventElapsedTime: an event whose stream has not "
                                     "reached it (synchronize the stream first)");
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}
