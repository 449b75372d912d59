// The GPU versions of mdl/kernels.h's data movement, indexing, sequence and dropout
// primitives: host functions that queue their kernels on the model's stream and return at
// once, with the CPU versions' results. Bad input data (an id past a table) never leads
// device code out of bounds: the element is skipped or zeroed and the fault recorded
// (mdl/cuda/fault.h); the host raises the CPU's exception for it once the function's work
// is done. Only src/cuda_device.cu includes this header, which compiles them once for every
// element type mdl/cuda/primitives.h lists (a module's code sees those declarations).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "mdl/cuda/context.h"
#include "mdl/cuda/device.h"
#include "mdl/cuda/launch.h"
#include "mdl/cuda/primitives.h"
#include "mdl/kernels.h"
#include "mdl/rng.h"

namespace mdl {
namespace cuda {

// ---- filling ---------------------------------------------------------------------------

template <class T>
__global__ void fill_kernel(T* out, int64_t n, T value) {
  for (int64_t i = first_item(); i < n; i += item_stride()) out[i] = value;
}

template <class T>
void fill(Context& g, T* out, int64_t n, T value) {
  if (n <= 0) return;
  launch(fill_kernel<T>, blocks(n), kThreads, g.stream, out, n, value);
  check_launch("fill");
}

// A fused kernel's f32 totals, added up in doubles (Wide<float>, as the CPU's:
// mdl::WideSums) and rounded into them once it has run (codegen/targets/cuda.py).
static __global__ void round_wide_kernel(const double* wide, int64_t n, float* out) {
  for (int64_t i = first_item(); i < n; i += item_stride()) out[i] = float(wide[i]);
}

void round_wide(Context& g, const double* wide, int64_t n, float* out) {
  if (n <= 0) return;
  launch(round_wide_kernel, blocks(n), kThreads, g.stream, wide, n, out);
  check_launch("round_wide");
}

// ---- indexing -------------------------------------------------------------------------

template <class T>
__global__ void gather_kernel(const T* table, int64_t rows, int64_t row_size, const int32_t* ids,
                              int64_t count, T* out, HostText what, Fault* fault) {
  for (int64_t i = first_item(); i < count; i += item_stride())
    if (outside(ids[i], rows)) report(fault, FaultKind::GatherIndex, ids[i], i, rows, what);
  for (int64_t e = first_item(); e < count * row_size; e += item_stride()) {
    const int64_t i = e / row_size, id = ids[i];
    out[e] = outside(id, rows) ? T(0) : table[id * row_size + e - i * row_size];
  }
}

template <class T>
void gather(Context& g, const T* table, int64_t rows, int64_t row_size, const int32_t* ids,
            int64_t count, T* out, const char* what) {
  if (count <= 0) return;
  launch(gather_kernel<T>, blocks(count * std::max<int64_t>(row_size, 1)), kThreads, g.stream,
         table, rows, row_size, ids, count, out, HostText{what}, g.fault);
  check_launch("gather");
}

template <class T>
__global__ void scatter_add_kernel(const T* grad, int64_t row_size, const int32_t* ids,
                                   int64_t count, int64_t rows, T* out, HostText what,
                                   Fault* fault) {
  for (int64_t j = first_item(); j < count; j += item_stride())
    if (outside(ids[j], rows)) report(fault, FaultKind::ScatterIndex, ids[j], j, rows, what);
  for (int64_t e = first_item(); e < count * row_size; e += item_stride()) {
    const int64_t j = e / row_size, id = ids[j];
    if (!outside(id, rows)) atomicAdd(out + id * row_size + e - j * row_size, grad[e]);
  }
}

template <class T>
void scatter_add(Context& g, const T* grad, int64_t row_size, const int32_t* ids, int64_t count,
                 int64_t rows, T* out, const char* what) {
  fill(g, out, rows * row_size, T(0));
  if (count <= 0) return;
  launch(scatter_add_kernel<T>, blocks(count * std::max<int64_t>(row_size, 1)), kThreads, g.stream,
         grad, row_size, ids, count, rows, out, HostText{what}, g.fault);
  check_launch("scatter_add");
}

// mdl/kernels.h's cumsum: a thread a column of the [outer, n, inner] layout, adding its
// n elements in the CPU's order, floats in Wide<T> (f32's in double) as there.
template <class T>
__global__ void cumsum_kernel(bool reverse, const T* x, int64_t outer, int64_t n,
                              int64_t inner, T* out) {
  for (int64_t c = first_item(); c < outer * inner; c += item_stride()) {
    const int64_t o = c / inner, at = o * n * inner + (c - o * inner);
    Wide<T> sum = Wide<T>(0);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = at + (reverse ? n - 1 - k : k) * inner;
      if constexpr (std::is_integral<T>::value)
        sum = k ? plus(sum, x[i]) : x[i];
      else
        sum += x[i];
      out[i] = T(sum);
    }
  }
}

template <class T>
void cumsum(Context& g, bool reverse, const T* x, int64_t outer, int64_t n, int64_t inner,
            T* out) {
  if (outer * n * inner <= 0) return;
  launch(cumsum_kernel<T>, blocks(outer * inner), kThreads, g.stream, reverse, x, outer, n,
         inner, out);
  check_launch("cumsum");
}

template <class T>
__global__ void one_hot_kernel(const int32_t* ids, int64_t count, int64_t classes, T* out) {
  for (int64_t e = first_item(); e < count * classes; e += item_stride()) {
    const int64_t i = e / classes;
    out[e] = ids[i] == e - i * classes ? T(1) : T(0);
  }
}

template <class T>
void one_hot(Context& g, const int32_t* ids, int64_t count, int64_t classes, T* out) {
  if (count * classes <= 0) return;
  launch(one_hot_kernel<T>, blocks(count * classes), kThreads, g.stream, ids, count, classes, out);
  check_launch("one_hot");
}

static __global__ void range_kernel(int64_t n, int64_t start, int64_t step, int32_t* out) {
  for (int64_t i = first_item(); i < n; i += item_stride()) out[i] = int32_t(start + i * step);
}

// The language's range: start, start + step, ... (n values; the rule keeps them in i32).
void range(Context& g, int64_t n, int64_t start, int64_t step, int32_t* out) {
  if (n <= 0) return;
  launch(range_kernel, blocks(n), kThreads, g.stream, n, start, step, out);
  check_launch("range");
}

// ---- sequences and dropout ------------------------------------------------------------

template <class T>
__global__ void seq_order_kernel(bool reversed, const T* x, const int32_t* lengths, int64_t steps,
                                 int64_t batch, int64_t row, T* out, HostText name,
                                 Fault* fault) {
  for (int64_t b = first_item(); b < batch; b += item_stride())
    if (outside(lengths[b], steps + 1))
      report(fault, FaultKind::Length, lengths[b], b, steps, name);
  for (int64_t e = first_item(); e < steps * batch * row; e += item_stride()) {
    const int64_t step = e / row / batch, b = e / row % batch;
    const int64_t length = lengths[b] < 0 ? 0 : lengths[b] > steps ? steps : lengths[b];
    const int64_t t = reversed ? length - 1 - step : step;
    out[e] = step < length ? x[(t * batch + b) * row + e % row] : T(0);
  }
}

// A length outside [0, steps] is reported and read as the nearest bound.
template <class T>
void seq_order(Context& g, bool reversed, const T* x, const int32_t* lengths, int64_t steps,
               int64_t batch, int64_t row, T* out, const char* name) {
  if (batch <= 0) return;
  launch(seq_order_kernel<T>, blocks(std::max(steps * batch * row, batch)), kThreads, g.stream,
         reversed, x, lengths, steps, batch, row, out, HostText{name}, g.fault);
  check_launch("seq_order");
}

static __global__ void seq_mask_kernel(const int32_t* lengths, int64_t steps, int64_t batch,
                                       uint8_t* out) {
  for (int64_t e = first_item(); e < steps * batch; e += item_stride())
    out[e] = e / batch < lengths[e % batch];
}

void seq_mask(Context& g, const int32_t* lengths, int64_t steps, int64_t batch,
                     uint8_t* out) {
  if (steps * batch <= 0) return;
  launch(seq_mask_kernel, blocks(steps * batch), kThreads, g.stream, lengths, steps, batch, out);
  check_launch("seq_mask");
}

template <class T>
__global__ void dropout_kernel(bool mask_only, const T* x, int64_t n, double p, T scale,
                               uint64_t key, uint64_t first, T* out) {
  for (int64_t i = first_item(); i < n; i += item_stride()) {
    const T keep = dropout_keep(key, first + i, p, scale);
    out[i] = mask_only ? keep : x[i] * keep;
  }
}

// Draws exactly the CPU's mask (rng.h runs on both sides).
template <class T>
void dropout(Context& g, bool mask_only, const T* x, int64_t n, double p, uint64_t key,
             uint64_t first, T* out) {
  if (n <= 0) return;
  launch(dropout_kernel<T>, blocks(n), kThreads, g.stream, mask_only, x, n, p, T(1.0 / (1.0 - p)),
                                                       key, first, out);
  check_launch("dropout");
}

// Positions of random streams (mdl/kernels.h): set by the host in a kernel's arguments,
// read and moved on the device, so that a replayed loop needs no copy to the host.
static __global__ void rng_position_kernel(uint64_t counter, uint64_t key, int32_t* out) {
  if (first_item() == 0) put_position(counter, key, out);
}

void rng_position(Context& g, uint64_t counter, uint64_t key, int32_t* out) {
  launch(rng_position_kernel, 1, 1, g.stream, counter, key, out);
  check_launch("rng_position");
}

template <class T>
__global__ void dropout_replay_kernel(const int32_t* position, int64_t n, double p, T scale,
                                      T* out) {
  const uint64_t counter = position_word(position, 0), key = position_word(position, 1);
  for (int64_t i = first_item(); i < n; i += item_stride())
    out[i] = dropout_keep(key, counter + i, p, scale);
}

template <class T>
void dropout_replay(Context& g, const int32_t* position, int64_t n, double p, T* out) {
  if (n <= 0) return;
  launch(dropout_replay_kernel<T>, blocks(n), kThreads, g.stream, position, n, p,
         T(1.0 / (1.0 - p)), out);
  check_launch("dropout_replay");
}

static __global__ void rng_skip_kernel(const int32_t* position, int64_t n, int32_t* out) {
  if (first_item() != 0) return;
  const uint64_t counter = position_word(position, 0), key = position_word(position, 1);
  put_position(counter + uint64_t(n), key, out);
}

void rng_skip(Context& g, const int32_t* position, int64_t n, int32_t* out) {
  launch(rng_skip_kernel, 1, 1, g.stream, position, n, out);
  check_launch("rng_skip");
}

}  // namespace cuda
}  // namespace mdl
