// The CUDA runtime API as the emulated device provides it: the part of it mdl's cuda target
// uses (memory, copies, streams, errors, launches, graphs captured from a stream, events),
// declared for the host compiler, which then builds the target's generated module.cpp and
// kernels.cu and runtime as C++ (codegen/compile/toolchain.py).
// The definitions are in src/emulator/; the kernel side is mdl_emulator.h. Every call
// checks its pointers against the table of device allocations; what it finds wrong is an
// error CUDA-style (a status, sticky once a kernel has failed) whose text says what.
#pragma once

#include <cmath>
#include <cstddef>

#include "mdl_emulator.h"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureImplicit = 906,
};
typedef cudaError_t cudaError;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

struct CUgraph_st;      // a captured graph (src/emulator/streams.cpp)
struct CUgraphExec_st;  // an instantiated one
typedef CUgraph_st* cudaGraph_t;
typedef CUgraphExec_st* cudaGraphExec_t;
struct CUevent_st;      // an event: when its stream reached it (src/emulator/streams.cpp)
typedef CUevent_st* cudaEvent_t;

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};

enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};

struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

// What memory `pointer` is in: the emulated device's (within one of its allocations) or
// none it knows (host memory, cudaMemoryTypeUnregistered), as CUDA 11+ answers.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer);

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
// Frees every allocation and stream and clears a sticky error (the emulator's tests use it
// between deliberately failing kernels).
cudaError_t cudaDeviceReset();

cudaError_t cudaMalloc(void** pointer, std::size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** pointer, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(pointer), bytes);
}
cudaError_t cudaFree(void* pointer);
cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t stream = 0);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = 0);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize();

// Stream capture: while a stream captures, the work queued on it is recorded, not run. In
// the global and thread-local modes a call that could synchronize with it (cudaMalloc,
// cudaFree, a synchronous copy or set, a stream's or the device's synchronization, work
// on the legacy stream) is refused with cudaErrorStreamCaptureUnsupported or
// cudaErrorStreamCaptureImplicit, and invalidates the capture; so is a copy between host
// and device memory (a replay would read or write host memory no one may own by then).
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

// Events: cudaEventRecord queues a mark that notes the host's steady clock when its stream
// runs it; cudaEventElapsedTime gives the milliseconds between two marks, and refuses
// events never recorded (cudaErrorInvalidResourceHandle) or whose mark has not run yet
// (cudaErrorNotReady: a missing synchronization shows). The profiled cuda build times its
// sites so (mdl/cuda/profile.h).
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
