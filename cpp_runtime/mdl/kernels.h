// Kernels for the operations that are not fused elementwise loops: reductions, softmax,
// cross-entropy, data movement. Shapes arrive as small arrays of dims (row-major).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <vector>

#include "mdl/faults.h"
#include "mdl/lane_sums.h"
#include "mdl/rng.h"
#include "mdl/scalar.h"

namespace mdl {

// The most dims of a value the kernels index; the checker refuses a program's value of more
// (MAX_RANK, codegen/ir/shapes.py).
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
// What `reduce` computes; generated code names the member (codegen/backend/kernels.py).
enum class Reduction { Sum, Max, Mean, LogSumExp };

// A reduction's axes merged: neighbouring axes that are both reduced or both kept (by
// `mask`) become one, axes of size 1 drop out. Their sizes go to `dims` and their kinds to
// `reduced`; returns how many there are.
inline int merge_axes(const int64_t* shape, int rank, uint32_t mask, int64_t* dims,
                      bool* reduced) {
  int r = 0;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] == 1) continue;
    bool red = (mask >> i) & 1;
    if (r > 0 && reduced[r - 1] == red) {
      dims[r - 1] *= shape[i];
    } else {
      dims[r] = shape[i];
      reduced[r++] = red;
    }
  }
  return r;
}

// The input as runs of its innermost merged axis (merge_axes), so every run is contiguous
// and its inner loop vectorizes. `f(x_run, out_offset, length, reduced)` sees each run
// once, in order.
template <class T, class F>
void for_each_run(const T* x, const int64_t* shape, int rank, uint32_t mask, F&& f) {
  for (int i = 0; i < rank; ++i)
    if (shape[i] == 0) return;
  int64_t dims[kMaxRank], ostride[kMaxRank];
  bool reduced[kMaxRank];
  const int r = merge_axes(shape, rank, mask, dims, reduced);
  if (r == 0) {  // a single element
    f(x, int64_t(0), int64_t(1), true);
    return;
  }
  for (int64_t i = r - 1, s = 1; i >= 0; --i) {
    ostride[i] = reduced[i] ? 0 : s;
    if (!reduced[i]) s *= dims[i];
  }
  const int64_t inner = dims[r - 1];
  const int64_t runs = numel(dims, r - 1);
  int64_t idx[kMaxRank] = {0}, o = 0;
  for (int64_t k = 0; k < runs; ++k) {
    f(x + k * inner, o, inner, reduced[r - 1]);
    for (int d = r - 2; d >= 0; --d) {  // advance idx and the output offset together
      o += ostride[d];
      if (++idx[d] < dims[d]) break;
      o -= ostride[d] * dims[d];
      idx[d] = 0;
    }
  }
}

// What a float sum adds in: double for f32 (16.8M values of 0.1f added in float came to
// 1% off, and a mean over a large tensor's elements is a loss that users read), the type
// itself for f64 and i32 (whose sums wrap around).
template <class T>
using Wide = typename std::conditional<std::is_same<T, float>::value, double, T>::type;

// The double totals of a fused loop's f32 sums that add along one of its outer loops (a
// column sum: each row added into the totals in turn, in float, left 4M rows of 0.2f 4%
// short): `n` zeroed doubles, from a stack of buffers its thread keeps, so that a loop run
// every step allocates nothing after the first; the loop rounds them into its totals.
class WideSums {
 public:
  explicit WideSums(int64_t n) {
    if (depth_ == held_.size()) held_.emplace_back();
    std::vector<double>& mine = held_[depth_++];
    mine.assign(size_t(n), 0.0);
    data_ = mine.data();
  }
  ~WideSums() { --depth_; }
  WideSums(const WideSums&) = delete;
  WideSums& operator=(const WideSums&) = delete;
  double* data() const { return data_; }

 private:
  static thread_local std::vector<std::vector<double>> held_;
  static thread_local size_t depth_;
  double* data_;
};
inline thread_local std::vector<std::vector<double>> WideSums::held_;
inline thread_local size_t WideSums::depth_ = 0;

// A contiguous run's largest value, NaN if any element is (mdl::larger's answer, one
// element after another, which GCC left scalar: a chain of compares and selects): the max
// but for NaNs and whether there is one, in one vectorized pass. An i32 run's max needs
// no NaN test: larger is std::max there, which vectorizes as it is. `max`, `logsumexp`,
// and the shift of softmax's and cross_entropy's rows, where a NaN max makes every result
// of the row NaN, as the NaN in its sum of exponentials (row_exp_sum) would.
template <class T>
inline T row_max(const T* x, int64_t n) {
  if constexpr (std::is_floating_point<T>::value) {
    T mx = -std::numeric_limits<T>::infinity();
    int nan = 0;
#pragma omp simd reduction(max : mx) reduction(| : nan)
    for (int64_t i = 0; i < n; ++i) {
      mx = x[i] > mx ? x[i] : mx;
      nan |= x[i] != x[i];
    }
    return nan ? std::numeric_limits<T>::quiet_NaN() : mx;
  } else {
    T mx = std::numeric_limits<T>::lowest();
    for (int64_t i = 0; i < n; ++i) mx = larger(mx, x[i]);
    return mx;
  }
}

template <class T>
void reduce(Reduction kind, const T* x, const int64_t* shape, int rank, uint32_t mask, T* out) {
  int64_t nout = 1, count = 1;
  for (int i = 0; i < rank; ++i) ((mask >> i) & 1 ? count : nout) *= shape[i];
  const T lowest = max_identity<T>();
  bool maximum = kind == Reduction::Max || kind == Reduction::LogSumExp;
  std::fill(out, out + nout, maximum ? lowest : T(0));
  if (kind == Reduction::Sum || kind == Reduction::Mean) {
    // f32's sums in double, in `near` (on the stack: most reductions keep a few values)
    // or `far`, rounded to T once at the end; f64's and i32's in `out` itself
    constexpr bool widened = !std::is_same<Wide<T>, T>::value;
    constexpr int64_t kNear = 64;
    Wide<T> near[kNear];
    thread_local std::vector<Wide<T>> far;
    Wide<T>* acc = reinterpret_cast<Wide<T>*>(out);
    if constexpr (widened) {
      if (nout > kNear) far.resize(nout);
      acc = nout > kNear ? far.data() : near;
      std::fill(acc, acc + nout, Wide<T>(0));
    }
    for_each_run(x, shape, rank, mask, [&](const T* run, int64_t o, int64_t n, bool red) {
      if constexpr (std::is_integral<T>::value) {  // i32: wrapping (plus)
        T* dst = out + o;
        if (red) {
          uint32_t s = 0;
          for (int64_t i = 0; i < n; ++i) s += uint32_t(run[i]);
          *dst = plus(*dst, T(s));
        } else {
          for (int64_t i = 0; i < n; ++i) dst[i] = plus(dst[i], run[i]);
        }
      } else if (red) {
        Wide<T> s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) s += run[i];
        acc[o] += s;
      } else {
        Wide<T>* dst = acc + o;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) dst[i] += run[i];
      }
    });
    if constexpr (widened)
      for (int64_t i = 0; i < nout; ++i)
        out[i] = T(kind == Reduction::Mean ? acc[i] / Wide<T>(count) : acc[i]);
    else if (kind == Reduction::Mean)
      for (int64_t i = 0; i < nout; ++i) out[i] /= T(count);
    return;
  }
  for_each_run(x, shape, rank, mask, [&](const T* run, int64_t o, int64_t n, bool red) {
    if (red) {
      out[o] = larger(out[o], row_max(run, n));
    } else {
      T* dst = out + o;
      for (int64_t i = 0; i < n; ++i) dst[i] = larger(dst[i], run[i]);
    }
  });
  if (kind == Reduction::Max) return;
  // logsumexp: the maxima are in `out`; sums of exp(x - max) in a reused scratch buffer
  thread_local std::vector<T> sums;
  sums.assign(nout, T(0));
  for_each_run(x, shape, rank, mask, [&](const T* run, int64_t o, int64_t n, bool red) {
    if (red) {
      const T m = out[o];
      if (!std::isfinite(m)) return;
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += std::exp(run[i] - m);
      sums[o] += s;
    } else {  // a run across the outputs: each adds where its max is finite (m - m is 0)
      const T* m = out + o;
      T* sum = sums.data() + o;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i)
        sum[i] += select<T>(m[i] - m[i] == T(0), T(std::exp(run[i] - m[i])), T(0));
    }
  });
  // selects, not branches: with `if`s around exp and log these two loops stayed scalar
  // (logsumexp over the first dim of [96, 2048] f32: 0.98 ms, now 0.21); a finite max's
  // sum is >= 1
#pragma omp simd
  for (int64_t i = 0; i < nout; ++i)
    out[i] = select<T>(out[i] - out[i] == T(0), T(std::log(sums[i]) + out[i]), out[i]);
}

// What softmax subtracts before exp: the row's max; for log_softmax of a row whose max is
// not finite, 0, as logsumexp does (the reference's, PyTorch's): log_softmax([inf, 1]) is
// [NaN, -inf], x - logsumexp(x), where inf - inf in every exp made the whole row NaN.
// (torch.log_softmax itself, 2.13 on the CPU, gives a row of NaN there.)
template <class T>
MDL_HOST_DEVICE inline T log_shift(bool log, T mx) {
  return log && !(mx - mx == 0) ? T(0) : mx;  // (mx - mx is 0 when mx is finite)
}

// One element of softmax (log_softmax), from its distance to the row's shift and the
// row's 1 / sum(exp) (log(sum(exp))). Shifted first, so the result keeps its precision
// when the row's values are large: x - (shift + log(sum)) would round log(sum) away
// (softmax of [-1e9, -1e9] in f32 was [1, 1]).
template <class T>
MDL_HOST_DEVICE inline T normalized(bool log, T shifted, T norm) {
  return log ? shifted - norm : std::exp(shifted) * norm;
}


// The sum over a contiguous row of exp(x[i] - shift), in S (T, or double for
// cross_entropy's f32 rows, whose exponentials are then taken in double too); with `keep`,
// each exp(x[i] - shift) rounded to T is also stored in keep[i]. Vectorized: the
// exponentials of up to kChunk elements at a time into a buffer, a loop GCC calls libmvec's
// exp for, then that buffer added into running sums in a fixed order (mdl/lane_sums.h), so
// the sum is the same on every machine and vector width. Softmax's and cross_entropy's rows
// (a char LM's [T * B, V] logits: 2048 rows of 96) run here.
template <class S, class T>
inline S row_exp_sum(const T* x, int64_t n, T shift, T* keep) {
  constexpr int64_t kChunk = 256;  // a multiple of kSumLanes
  S e[kChunk];
  S lanes[kSumLanes] = {};
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t m = std::min(kChunk, n - at);
    const T* xs = x + at;
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) e[i] = std::exp(S(xs[i] - shift));
    if (keep)
      for (int64_t i = 0; i < m; ++i) keep[at + i] = T(e[i]);
    add_in_lanes(lanes, m, [&](int64_t i) { return e[i]; });
  }
  return lanes_total(lanes);
}

// softmax (or log_softmax) over the middle dim of an [outer, n, inner] layout. A
// contiguous row (inner = 1) takes one exp an element, vectorized.
template <class T>
void softmax(bool log, const T* x, int64_t outer, int64_t n, int64_t inner, T* out) {
  if (inner == 1) {
    for (int64_t o = 0; o < outer; ++o) {
      const T* xs = x + o * n;
      T* ys = out + o * n;
      const T shift = log_shift(log, row_max(xs, n));
      if (log) {
        const T norm = std::log(row_exp_sum<T>(xs, n, shift, static_cast<T*>(nullptr)));
        for (int64_t i = 0; i < n; ++i) ys[i] = normalized(true, xs[i] - shift, norm);
      } else {  // the exponentials kept in ys, then scaled: exp(x - shift) * (1 / sum)
        const T norm = T(1) / row_exp_sum<T>(xs, n, shift, ys);
        for (int64_t i = 0; i < n; ++i) ys[i] *= norm;
      }
    }
    return;
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      const T* xs = x + o * n * inner + j;
      T* ys = out + o * n * inner + j;
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t i = 0; i < n; ++i) mx = larger(mx, xs[i * inner]);
      const T shift = log_shift(log, mx);
      T sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(xs[i * inner] - shift);
      const T norm = log ? std::log(sum) : T(1) / sum;
      for (int64_t i = 0; i < n; ++i)
        ys[i * inner] = normalized(log, xs[i * inner] - shift, norm);
    }
  }
}

// Running sums along the middle dim of an [outer, n, inner] layout, from its end with
// `reverse`: each sum is the one before it plus the next element, in that order on every
// target (mdl/cuda/kernels.h), an i32's wrapping around (plus).
template <class T>
void cumsum(bool reverse, const T* x, int64_t outer, int64_t n, int64_t inner, T* out) {
  if constexpr (std::is_integral<T>::value) {  // i32: wrapping (plus)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = reverse ? n - 1 - k : k, at = (o * n + i) * inner;
        const T* row = x + at;
        T* sum = out + at;
        if (k == 0) {
          for (int64_t j = 0; j < inner; ++j) sum[j] = row[j];
        } else {
          const T* before = out + at + (reverse ? inner : -inner);
          for (int64_t j = 0; j < inner; ++j) sum[j] = plus(before[j], row[j]);
        }
      }
  } else {  // the running sums in Wide<T>, each rounded to T as it is written
    thread_local std::vector<Wide<T>> running;
    for (int64_t o = 0; o < outer; ++o) {
      running.assign(inner, Wide<T>(0));
      for (int64_t k = 0; k < n; ++k) {
        const int64_t at = (o * n + (reverse ? n - 1 - k : k)) * inner;
        for (int64_t j = 0; j < inner; ++j) {
          running[j] += x[at + j];
          out[at + j] = T(running[j]);
        }
      }
    }
  }
}

// Whether v replaces `top` as a row's largest value when it comes later: larger, or the
// row's first NaN (a NaN counts as the largest, as in NumPy's argmax). Ties keep the first.
template <class T>
MDL_HOST_DEVICE inline bool replaces(T v, T top) {
  return v > top || (v != v && top == top);
}

// out[r] = the index of the largest value along the middle dim of an [outer, n, inner]
// layout, the first of equal ones; -1 where n is 0 (there is no index).
template <class T>
void argmax(const T* x, int64_t outer, int64_t n, int64_t inner, int32_t* out) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      const T* xs = x + o * n * inner + j;
      int64_t best = n ? 0 : -1;
      for (int64_t i = 1; i < n; ++i)
        if (replaces(xs[i * inner], xs[best * inner])) best = i;
      out[o * inner + j] = int32_t(best);
    }
  }
}

// The k largest values of one row of n (`stride` apart), largest first, and their
// indices, into `values` and `indices` (also `stride` apart): each value goes in after
// the held ones it does not replace (so equal ones keep their order, a NaN counting as
// the largest), and a row's last held value drops out when k are held. O(n k): k is
// small (a beam's width).
template <class T>
MDL_HOST_DEVICE inline void topk_row(const T* xs, int64_t n, int64_t stride, int64_t k,
                                     T* values, int32_t* indices) {
  int64_t held = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T v = xs[i * stride];
    int64_t at = held;
    while (at > 0 && replaces(v, values[(at - 1) * stride])) --at;
    if (at == k) continue;
    for (int64_t q = held < k ? held : k - 1; q > at; --q) {
      values[q * stride] = values[(q - 1) * stride];
      indices[q * stride] = indices[(q - 1) * stride];
    }
    values[at * stride] = v;
    indices[at * stride] = int32_t(i);
    if (held < k) ++held;
  }
}

// mdl::topk_row for every row along the middle dim of an [outer, n, inner] layout, into
// [outer, k, inner] values and indices (1 <= k <= n, checked when compiling).
template <class T>
void topk(const T* x, int64_t outer, int64_t n, int64_t inner, int64_t k, T* values,
          int32_t* indices) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j)
      topk_row(x + o * n * inner + j, n, inner, k, values + o * k * inner + j,
               indices + o * k * inner + j);
}

// Sequence lengths must lie in [0, steps]; `name` is the input they came from.
inline void check_lengths(const int32_t* lengths, int64_t batch, int64_t steps,
                          const char* name) {
  for (int64_t b = 0; b < batch; ++b)
    if (lengths[b] < 0 || lengths[b] > steps)
      raise_fault(FaultKind::Length, lengths[b], b, steps, name);
}

// out[0] = the mean over real tokens of -log softmax(logits)[target], in one stable pass
// per row. logits: [rows, classes]; with lengths (rows = T * B, row r = t * B + b), row r
// counts when t < lengths[b], each of which must lie in [0, T] (`lengths_what`).
template <class T>
void cross_entropy(const T* logits, const int32_t* targets, const int32_t* lengths,
                   int64_t rows, int64_t classes, int64_t batch, const char* what,
                   const char* lengths_what, T* out) {
  if (lengths && batch > 0) check_lengths(lengths, batch, rows / batch, lengths_what);
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (lengths && r / batch >= lengths[r % batch]) continue;
    int32_t target = targets[r];
    if (target < 0 || target >= classes) raise_fault(FaultKind::Target, target, r, classes, what);
    const T* row = logits + r * classes;
    const T mx = row_max(row, classes);
    const double sum = row_exp_sum<double>(row, classes, mx, static_cast<T*>(nullptr));
    total += (double(mx) - double(row[target])) + std::log(sum);  // difference first: precise
    ++count;
  }
  out[0] = count ? T(total / count) : T(0);
}

template <class T>
void gather(const T* table, int64_t rows, int64_t row_size, const int32_t* ids, int64_t count,
            T* out, const char* what) {
  for (int64_t i = 0; i < count; ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= rows) raise_fault(FaultKind::GatherIndex, id, i, rows, what);
    std::memcpy(out + i * row_size, table + int64_t(id) * row_size, sizeof(T) * row_size);
  }
}

template <class T>
void one_hot(const int32_t* ids, int64_t count, int64_t classes, T* out) {
  std::fill(out, out + count * classes, T(0));
  for (int64_t i = 0; i < count; ++i)
    if (ids[i] >= 0 && ids[i] < classes) out[i * classes + ids[i]] = T(1);
}

// The language's range: start, start + step, ... (n values; the rule keeps them in i32).
inline void range(int64_t n, int64_t start, int64_t step, int32_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = int32_t(start + i * step);
}

// An `assert` in a loop's body: every one of the n elements of cond must be true, else
// the ValueError `what` says (at the first false one's flat position, where n > 1), with
// the steps or trips of the `levels` loops it ran in, innermost first: `step` holds them,
// `levels` for all n (rows = 1) or `levels` a row of cond's leading dims
// (FaultKind::AssertAt: `what` is the text before the first, then before each the next a
// NUL and the text after it). out[0] = true.
inline void check_all_at(const uint8_t* cond, int64_t n, const char* what, uint8_t* out,
                         const int32_t* step, int64_t rows, int levels = 1) {
  for (int64_t i = 0; i < n; ++i)
    if (!cond[i]) {
      if (step) {
        const int32_t* at = step + i / (n / rows) * levels;
        raise_fault(FaultKind::AssertAt, at[0], i, n, what, at + 1, levels - 1);
      }
      raise_fault(FaultKind::Assert, 0, i, n, what);
    }
  out[0] = 1;
}

// An `assert` outside loops: the same with no step.
inline void check_all(const uint8_t* cond, int64_t n, const char* what, uint8_t* out) {
  check_all_at(cond, n, what, out, nullptr, 1);
}

// x[i]'s row i of n; `what` names i (codegen/ir/origins.py).
inline int64_t checked_index(int64_t i, int64_t n, const char* what) {
  if (i < 0 || i >= n) raise_fault(FaultKind::Subscript, i, 0, n, what);
  return i;
}

// 0, where `left` is >= 0: what a slice in a branch or a loop's body leaves of its axis
// past its start or its end, or the size of a value made in a branch of an `if`, which the
// branch checks where it starts. Else the call's dims (`names`, `values`) put the slice
// outside its axis or make the size negative, and it is refused as the same slice or size
// outside any block would have been before anything ran (refuse_dims; codegen/ops/entry.py,
// call_bounds), where it runs. A view's offset adds it (backend/op_lowering.py).
inline int64_t dims_fit(int64_t left, const char* text, std::initializer_list<const char*> names,
                        std::initializer_list<int64_t> values) {
  if (left < 0) refuse_dims(names.begin(), values.begin(), int(names.size()), text, left);
  return 0;
}

// out [rows, row_size] = zeros, then out[ids[j]] += g[j] (the adjoint of gather).
template <class T>
void scatter_add(const T* g, int64_t row_size, const int32_t* ids, int64_t count, int64_t rows,
                 T* out, const char* what) {
  std::fill(out, out + rows * row_size, T(0));
  for (int64_t j = 0; j < count; ++j) {
    const int64_t id = ids[j];
    if (id < 0 || id >= rows) raise_fault(FaultKind::ScatterIndex, id, j, rows, what);
    T* dst = out + id * row_size;
    const T* src = g + j * row_size;
    for (int64_t i = 0; i < row_size; ++i) dst[i] += src[i];
  }
}

// x [T, B, row] in the step order of a loop with lengths: out[i, b] = x[t, b] with
// t = L[b]-1-i (reversed) or t = i, for i < L[b]; zeros after. Each length is read once
// for the check and the address it makes: an input is read where the caller keeps it, and
// another thread changing it between two reads sent a copy outside x (a segfault).
template <class T>
void seq_order(bool reversed, const T* x, const int32_t* lengths, int64_t steps, int64_t batch,
               int64_t row, T* out, const char* name) {
  check_lengths(lengths, batch, steps, name);
  for (int64_t i = 0; i < steps; ++i)
    for (int64_t b = 0; b < batch; ++b) {
      T* dst = out + (i * batch + b) * row;
      const int64_t length = lengths[b];
      if (length < 0 || length > steps) raise_fault(FaultKind::Length, length, b, steps, name);
      if (i < length) {
        int64_t t = reversed ? length - 1 - i : i;
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
// An element's factor: `scale` where its number is at least p, else 0 (every target's).
template <class T>
MDL_HOST_DEVICE inline T dropout_keep(uint64_t key, uint64_t counter, double p, T scale) {
  return uniform01(key, counter) >= p ? scale : T(0);
}

template <class T>
void dropout(bool mask_only, const T* x, int64_t n, double p, uint64_t key, uint64_t first,
             T* out) {
  T scale = T(1.0 / (1.0 - p));
  for (int64_t i = 0; i < n; ++i) {
    T keep = dropout_keep(key, first + i, p, scale);
    out[i] = mask_only ? keep : x[i] * keep;
  }
}

// A dropout's stream position (codegen/ops/primitives/replay.py): its next counter and
// its key, each as two i32 halves. A backward that runs a loop again draws the loop's
// masks again from the positions the forward kept.
MDL_HOST_DEVICE inline void put_position(uint64_t counter, uint64_t key, int32_t* out) {
  const uint64_t words[2] = {counter, key};
  for (int i = 0; i < 2; ++i) {
    out[2 * i] = int32_t(uint32_t(words[i]));
    out[2 * i + 1] = int32_t(uint32_t(words[i] >> 32));
  }
}

MDL_HOST_DEVICE inline uint64_t position_word(const int32_t* position, int i) {
  return uint64_t(uint32_t(position[2 * i])) | uint64_t(uint32_t(position[2 * i + 1])) << 32;
}

inline void rng_position(uint64_t counter, uint64_t key, int32_t* out) {
  put_position(counter, key, out);
}

// The mask dropout drew at `position`, the same numbers bit for bit.
template <class T>
void dropout_replay(const int32_t* position, int64_t n, double p, T* out) {
  dropout(true, out, n, p, position_word(position, 1), position_word(position, 0), out);
}

// `position` moved past `n` numbers (`out` may be `position`).
inline void rng_skip(const int32_t* position, int64_t n, int32_t* out) {
  const uint64_t counter = position_word(position, 0), key = position_word(position, 1);
  put_position(counter + uint64_t(n), key, out);
}

}  // namespace mdl
