// Copies between device memory and the host for the cuda target's generated host code: a
// copy on the device, a condition read back, a loop's conditions read at once, a push onto
// a tape. Host code only: no kernels (those are in mdl/cuda/primitives.h's functions).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mdl/cuda/check.h"
#include "mdl/cuda/context.h"
#include "mdl/cuda/graph.h"

namespace mdl {
namespace cuda {

template <class T>
void copy(Context& g, T* out, const T* in, int64_t n) {
  if (out == in || n <= 0) return;
  if (Signature* dry = recording()) {  // mdl/cuda/graph.h
    static const char copied = 0;
    dry->add(&copied, g.stream, out, in, n * int64_t(sizeof(T)));
    return;
  }
  check(cudaMemcpyAsync(out, in, sizeof(T) * n, cudaMemcpyDeviceToDevice, g.stream),
        "cudaMemcpyAsync");
}

// Element 0 of device memory, on the host (a branch or loop condition): waits for the
// stream's work up to here.
template <class T>
T scalar(Context& g, const T* p) {
  host_work("reads a value back to the host");
  T value;
  check(cudaMemcpyAsync(&value, p, sizeof(T), cudaMemcpyDeviceToHost, g.stream),
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(g.stream), "cudaStreamSynchronize");
  return value;
}

// Elements 0, stride, 2 * stride, ... (n of them) of device memory, on the host: a loop's
// branch conditions, read at once before it rather than one a step. Waits for the
// stream's work up to here.
template <class T>
std::vector<T> copy_steps(Context& g, const T* p, int64_t n, int64_t stride) {
  std::vector<T> out(std::size_t(std::max<int64_t>(n, 0)));
  if (n <= 0) return out;
  std::vector<T> span(std::size_t((n - 1) * stride + 1));
  check(cudaMemcpyAsync(span.data(), p, sizeof(T) * span.size(), cudaMemcpyDeviceToHost,
                        g.stream),
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(g.stream), "cudaStreamSynchronize");
  for (int64_t i = 0; i < n; ++i) out[std::size_t(i)] = span[std::size_t(i * stride)];
  return out;
}

// copy_steps of memory the function writes itself (a condition it computed).
template <class T>
std::vector<T> read_steps(Context& g, const T* p, int64_t n, int64_t stride) {
  host_work("reads values back to the host");
  return copy_steps(g, p, n, stride);
}

// copy_steps of memory the function does not write (an input, or what the training
// forward kept for the backward): a function that runs as a graph reads it in its dry
// run, when its stream is not capturing, and its later pass takes the same values.
template <class T>
std::vector<T> read_steps_before(Context& g, const T* p, int64_t n, int64_t stride) {
  KeptReads* kept = kept_reads();
  if (!kept) return copy_steps(g, p, n, stride);
  if (kept->next == kept->values.size()) {  // the first pass: read now
    std::vector<T> values = copy_steps(g, p, n, stride);
    kept->values.emplace_back(reinterpret_cast<const char*>(values.data()),
                              values.size() * sizeof(T));
  }
  const std::string& bytes = kept->values[kept->next++];
  std::vector<T> out(bytes.size() / sizeof(T));
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(out.data()));
  return out;
}

inline void tape_push(Context& g, int k, const void* src, std::size_t bytes) {
  host_work("pushes onto a tape");
  char* at = g.tape(k).push(bytes, g.stream);
  if (bytes)
    check(cudaMemcpyAsync(at, src, bytes, cudaMemcpyDeviceToDevice, g.stream),
          "cudaMemcpyAsync");
}

}  // namespace cuda
}  // namespace mdl
