// Kernels for the operations that are not fused elementwise loops: reductions, softmax,
// cross-entropy, data movement. Shapes arrive as small arrays of dims (row-major).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mdl/error.h"
#include "mdl/rng.h"

namespace mdl {

constexpr int kMaxRank = 8;

inline int64_t numel(const int64_t* shape, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

// Advance a row-major multi-index; returns false after the last element.
inline bool next_index(int64_t* idx, const int64_t* shape, int rank) {
  for (int i = rank - 1; i >= 0; --i) {
    if (++idx[i] < shape[i]) return true;
    idx[i] = 0;
  }
  return false;
}

template <class T>
void fill(T* out, int64_t n, T value) {
  std::fill(out, out + n, value);
}

template <class T>
void copy(T* out, const T* in, int64_t n) {
  if (out != in && n) std::memmove(out, in, sizeof(T) * n);
}

// Reduce the axes set in `mask`: kind 0 sum, 1 max, 2 mean, 3 logsumexp. `out` has the
// input's shape with the reduced axes removed (or kept as 1: the layout is the same).
// What `reduce` computes; generated code names the member (primitives/cpu.py).
enum class Reduction { Sum, Max, Mean, LogSumExp };

template <class T>
void reduce(Reduction kind, const T* x, const int64_t* shape, int rank, uint32_t mask, T* out) {
  int64_t ostride[kMaxRank], stride = 1, count = 1;
  for (int i = rank - 1; i >= 0; --i) {
    bool reduced = (mask >> i) & 1;
    ostride[i] = reduced ? 0 : stride;
    if (reduced) count *= shape[i]; else stride *= shape[i];
  }
  int64_t nout = stride, n = numel(shape, rank);
  const T lowest = -std::numeric_limits<T>::infinity();
  bool maximum = kind == Reduction::Max || kind == Reduction::LogSumExp;
  std::fill(out, out + nout, maximum ? lowest : T(0));
  auto visit = [&](auto&& f) {
    int64_t idx[kMaxRank] = {0}, o = 0;
    for (int64_t i = 0; i < n; ++i) {
      f(out[o], x[i]);
      for (int d = rank - 1; d >= 0; --d) {  // advance idx and the output offset together
        o += ostride[d];
        if (++idx[d] < shape[d]) break;
        o -= ostride[d] * shape[d];
        idx[d] = 0;
      }
    }
  };
  if (kind == Reduction::Sum || kind == Reduction::Mean) {
    visit([](T& acc, T v) { acc += v; });
    if (kind == Reduction::Mean) for (int64_t i = 0; i < nout; ++i) out[i] /= T(count);
  } else if (kind == Reduction::Max) {
    visit([](T& acc, T v) { acc = std::max(acc, v); });
  } else {  // logsumexp: the maxima first, kept in a reused scratch buffer
    visit([](T& acc, T v) { acc = std::max(acc, v); });
    thread_local std::vector<T> maxima;
    maxima.assign(out, out + nout);
    std::fill(out, out + nout, T(0));
    const T* mx = maxima.data();
    int64_t idx[kMaxRank] = {0}, o = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (std::isfinite(mx[o])) out[o] += std::exp(x[i] - mx[o]);
      for (int d = rank - 1; d >= 0; --d) {
        o += ostride[d];
        if (++idx[d] < shape[d]) break;
        o -= ostride[d] * shape[d];
        idx[d] = 0;
      }
    }
    for (int64_t i = 0; i < nout; ++i)
      out[i] = std::isfinite(mx[i]) ? std::log(out[i]) + mx[i] : mx[i];
  }
}

// softmax (or log_softmax) over the middle dim of an [outer, n, inner] layout.
template <class T>
void softmax(bool log, const T* x, int64_t outer, int64_t n, int64_t inner, T* out) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      const T* xs = x + o * n * inner + j;
      T* ys = out + o * n * inner + j;
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, xs[i * inner]);
      T sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(xs[i * inner] - mx);
      T lse = std::log(sum) + mx;
      for (int64_t i = 0; i < n; ++i)
        ys[i * inner] = log ? xs[i * inner] - lse : std::exp(xs[i * inner] - lse);
    }
  }
}

// Mean over real tokens of -log softmax(logits)[target], in one stable pass per row.
// logits: [rows, classes]; with lengths (rows = T * B, row r = t * B + b), row r counts
// when t < lengths[b].
template <class T>
T cross_entropy(const T* logits, const int32_t* targets, const int32_t* lengths, int64_t rows,
                int64_t classes, int64_t batch, const char* what) {
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (lengths && r / batch >= lengths[r % batch]) continue;
    int32_t target = targets[r];
    if (target < 0 || target >= classes)
      throw IndexError(std::string(what) + " holds " + std::to_string(target) +
                       " at flat position " + std::to_string(r) + ": cross_entropy's targets " +
                       "lie in [0, " + std::to_string(classes) + "), one per class");
    const T* row = logits + r * classes;
    T mx = *std::max_element(row, row + classes);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(double(row[c] - mx));
    total += std::log(sum) + mx - row[target];
    ++count;
  }
  return count ? T(total / count) : T(0);
}

template <class T>
void gather(const T* table, int64_t rows, int64_t row_size, const int32_t* ids, int64_t count,
            T* out, const char* what) {
  for (int64_t i = 0; i < count; ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= rows)
      throw IndexError(std::string(what) + " holds " + std::to_string(id) +
                       " at flat position " + std::to_string(i) + ", outside [0, " +
                       std::to_string(rows) + "): the rows of the table it indexes");
    std::memcpy(out + i * row_size, table + int64_t(id) * row_size, sizeof(T) * row_size);
  }
}

template <class T>
void one_hot(const int32_t* ids, int64_t count, int64_t classes, T* out) {
  std::fill(out, out + count * classes, T(0));
  for (int64_t i = 0; i < count; ++i)
    if (ids[i] >= 0 && ids[i] < classes) out[i * classes + ids[i]] = T(1);
}

inline int64_t checked_index(int64_t i, int64_t n) {
  if (i < 0 || i >= n)
    throw Error("index " + std::to_string(i) + " is outside [0, " + std::to_string(n) + ")");
  return i;
}

// Sequence lengths must lie in [0, steps]; `name` is the input they came from.
inline void check_lengths(const int32_t* lengths, int64_t batch, int64_t steps,
                          const char* name) {
  for (int64_t b = 0; b < batch; ++b)
    if (lengths[b] < 0 || lengths[b] > steps)
      throw ValueError(std::string(name) + "[" + std::to_string(b) + "] = " +
                       std::to_string(lengths[b]) + " is outside [0, " +
                       std::to_string(steps) + "] (the sequence length)");
}

// out [rows, row_size] = zeros, then out[ids[j]] += g[j] (the adjoint of gather).
template <class T>
void scatter_add(const T* g, int64_t row_size, const int32_t* ids, int64_t count, int64_t rows,
                 T* out) {
  std::fill(out, out + rows * row_size, T(0));
  for (int64_t j = 0; j < count; ++j) {
    int64_t id = checked_index(ids[j], rows);
    T* dst = out + id * row_size;
    const T* src = g + j * row_size;
    for (int64_t i = 0; i < row_size; ++i) dst[i] += src[i];
  }
}

// x [T, B, row] in the step order of a loop with lengths: out[i, b] = x[t, b] with
// t = L[b]-1-i (reversed) or t = i, for i < L[b]; zeros after.
template <class T>
void seq_order(bool reversed, const T* x, const int32_t* lengths, int64_t steps, int64_t batch,
               int64_t row, T* out, const char* name) {
  check_lengths(lengths, batch, steps, name);
  for (int64_t i = 0; i < steps; ++i)
    for (int64_t b = 0; b < batch; ++b) {
      T* dst = out + (i * batch + b) * row;
      if (i < lengths[b]) {
        int64_t t = reversed ? lengths[b] - 1 - i : i;
        std::memcpy(dst, x + (t * batch + b) * row, sizeof(T) * row);
      } else {
        std::fill(dst, dst + row, T(0));
      }
    }
}

inline void seq_mask(const int32_t* lengths, int64_t steps, int64_t batch, uint8_t* out) {
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t b = 0; b < batch; ++b) out[t * batch + b] = t < lengths[b];
}

// Copy `chunk` elements from each of `outer` rows at stride `src_stride` to stride
// `dst_stride`: the common core of concat, split, stack and slices of one axis.
template <class T>
void copy_rows(T* dst, int64_t dst_stride, const T* src, int64_t src_stride, int64_t outer,
               int64_t chunk) {
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * dst_stride, src + o * src_stride, sizeof(T) * chunk);
}

// out = x[starts[0]:starts[0]+out_shape[0], ...] over all `rank` axes.
template <class T>
void slice(const T* x, const int64_t* in_shape, int rank, const int64_t* starts,
           const int64_t* out_shape, T* out) {
  if (numel(out_shape, rank) == 0) return;
  int64_t in_stride[kMaxRank], s = 1;
  for (int i = rank - 1; i >= 0; --i) { in_stride[i] = s; s *= in_shape[i]; }
  int64_t idx[kMaxRank] = {0};
  int64_t row = out_shape[rank - 1];
  int64_t rows = numel(out_shape, rank - 1);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0;
    for (int i = 0; i < rank; ++i) off += (starts[i] + idx[i]) * in_stride[i];
    std::memcpy(out + r * row, x + off, sizeof(T) * row);
    next_index(idx, out_shape, rank - 1);
  }
}

template <class T>
void transpose(const T* x, const int64_t* shape, int rank, const int64_t* perm, T* out) {
  int64_t in_stride[kMaxRank], out_shape[kMaxRank], s = 1;
  for (int i = rank - 1; i >= 0; --i) { in_stride[i] = s; s *= shape[i]; }
  for (int i = 0; i < rank; ++i) out_shape[i] = shape[perm[i]];
  int64_t n = numel(shape, rank), idx[kMaxRank] = {0};
  for (int64_t o = 0; o < n; ++o) {
    int64_t off = 0;
    for (int i = 0; i < rank; ++i) off += idx[i] * in_stride[perm[i]];
    out[o] = x[off];
    next_index(idx, out_shape, rank);
  }
}

// Inverted dropout: keep with probability 1 - p and scale by 1 / (1 - p); `mask_only`
// writes the mask itself (what the backward pass multiplies by). Element i draws
// uniform01(key, first + i): `first` continues the op's stream across loop steps.
template <class T>
void dropout(bool mask_only, const T* x, int64_t n, double p, uint64_t key, uint64_t first,
             T* out) {
  T scale = T(1.0 / (1.0 - p));
  for (int64_t i = 0; i < n; ++i) {
    T keep = uniform01(key, first + i) >= p ? scale : T(0);
    out[i] = mask_only ? keep : x[i] * keep;
  }
}

}  // namespace mdl
