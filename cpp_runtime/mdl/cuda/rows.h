// Reductions, softmax, argmax, topk and cross-entropy on the GPU (the cuda target's
// versions of mdl/kernels.h's): each row of the work goes to W threads, a block, a warp or
// one thread as its length suits, combined with warp shuffles.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "mdl/cuda/context.h"
#include "mdl/cuda/device.h"
#include "mdl/cuda/kernels.h"
#include "mdl/cuda/launch.h"
#include "mdl/cuda/primitives.h"
#include "mdl/kernels.h"

namespace mdl {
namespace cuda {

// ---- rows shared by W threads (reductions, softmax, cross-entropy) ---------------------

// W threads work on one row: a block for long contiguous rows, a warp for shorter ones, one
// thread for rows too short or strided to share (then neighbouring threads read
// neighbouring elements of neighbouring rows). A few long rows (a greedy decoder's one row
// of 10,000 scores a step) get a block of kWide threads each: with kThreads, a thread read
// 39 elements of such a row, one load after another, and softmax, argmax and max of one
// row took 5 to 7 us each on an H100.
constexpr int kWide = 1024;
constexpr int64_t kWideRows = 256;  // their 1024-thread blocks all run at once on an H100
inline int row_width(bool contiguous, int64_t length, int64_t total, int64_t rows) {
  if (!contiguous || length < 32) return 1;
  if (total < 4096) return 32;
  return total >= 4 * kWide && rows <= kWideRows ? kWide : kThreads;
}

// Calls run(std::integral_constant<int, W>) for the width w row_width chose; widths past
// `Widest` (which a kernel cannot take) are never instantiated, and none may be chosen.
template <int Widest = kWide, class F>
void with_width(int w, F&& run) {
  if constexpr (Widest >= kWide)
    if (w == kWide) return run(std::integral_constant<int, kWide>());
  if (w == kThreads)
    run(std::integral_constant<int, kThreads>());
  else if (w == 32)
    run(std::integral_constant<int, 32>());
  else
    run(std::integral_constant<int, 1>());
}

// The threads of a block whose rows are W threads wide: kThreads, or W for wider rows.
template <int W>
constexpr int kBlockOf = W > kThreads ? W : kThreads;

// The blocks of `rows` rows W threads wide, up to 65535 (then each takes several rows).
template <int W>
unsigned row_blocks(int64_t rows) {
  constexpr int64_t per_block = kBlockOf<W> / W;
  return unsigned(std::clamp<int64_t>((rows + per_block - 1) / per_block, 1, 65535));
}

template <int W>
__device__ int64_t first_row() {
  return (blockIdx.x * int64_t(kBlockOf<W>) + threadIdx.x) / W;
}
template <int W>
__device__ int64_t row_stride() { return int64_t(gridDim.x) * (kBlockOf<W> / W); }

// The larger, NaN if either is: mdl::larger (mdl/scalar.h), as the CPU folds it.
struct Larger {
  template <class T>
  __device__ T operator()(T a, T b) const { return larger(a, b); }
};

// ---- an assert --------------------------------------------------------------------------

// The smaller: the first of two flat positions.
struct Smaller {
  template <class T>
  __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};

// An `assert` (mdl/kernels.h's check_all), one block: its threads find the first false
// element together (a few microseconds for the lengths or labels a model checks), which
// is recorded as the call's fault, as the CPU would find it. out[0] = true. In a loop's
// body (check_all_at) `step` holds the steps or trips of its `levels` loops, innermost
// first, for all n (rows = 1) or a row: the fault's are the first false element's.
static __global__ void check_all_kernel(const uint8_t* cond, int64_t n, HostText what, uint8_t* out,
                                        Fault* fault, const int32_t* step, int64_t rows,
                                        int levels) {
  int64_t first = n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (!cond[i]) {
      first = i;
      break;
    }
  first = across<kThreads>(first, Smaller());
  if (threadIdx.x == 0) {
    if (first < n) {
      if (step) {
        const int32_t* at = step + first / (n / rows) * levels;
        report(fault, FaultKind::AssertAt, at[0], first, n, what, at + 1, levels - 1);
      } else
        report(fault, FaultKind::Assert, 0, first, n, what);
    }
    out[0] = 1;
  }
}

void check_all(Context& g, const uint8_t* cond, int64_t n, const char* what, uint8_t* out) {
  launch(check_all_kernel, 1, kThreads, g.stream, cond, n, HostText{what}, out, g.fault,
         static_cast<const int32_t*>(nullptr), int64_t(1), 1);
  check_launch("check_all");
}

void check_all_at(Context& g, const uint8_t* cond, int64_t n, const char* what, uint8_t* out,
                  const int32_t* step, int64_t rows, int levels) {
  launch(check_all_kernel, 1, kThreads, g.stream, cond, n, HostText{what}, out, g.fault, step,
         rows, levels);
  check_launch("check_all_at");
}

// ---- reduce ---------------------------------------------------------------------------

// reduce's input as kept and reduced axes, each run of neighbours of one kind merged and
// axes of size 1 dropped (mdl::merge_axes), with their strides in the input. There is
// always a reduced axis (of size 1 when nothing is reduced): lanes share its last one.
struct ReduceAxes {
  int kept = 0, summed = 0;
  int64_t kdim[kMaxRank] = {}, kstride[kMaxRank] = {}, rdim[kMaxRank] = {},
          rstride[kMaxRank] = {};
  int64_t nout = 1, count = 1;
};

// Needs every shape[i] > 0.
inline ReduceAxes reduce_axes(const int64_t* shape, int rank, uint32_t mask) {
  int64_t dims[kMaxRank], strides[kMaxRank];
  bool reduced[kMaxRank];
  const int r = merge_axes(shape, rank, mask, dims, reduced);
  for (int64_t i = r - 1, s = 1; i >= 0; --i) {
    strides[i] = s;
    s *= dims[i];
  }
  ReduceAxes a;
  for (int i = 0; i < r; ++i) {
    if (reduced[i]) {
      a.rdim[a.summed] = dims[i];
      a.rstride[a.summed++] = strides[i];
      a.count *= dims[i];
    } else {
      a.kdim[a.kept] = dims[i];
      a.kstride[a.kept++] = strides[i];
      a.nout *= dims[i];
    }
  }
  if (a.summed == 0) {
    a.rdim[0] = 1;
    a.rstride[0] = 0;
    a.summed = 1;
  }
  return a;
}

// Where output element o's inputs start.
__device__ inline int64_t kept_offset(const ReduceAxes& a, int64_t o) {
  int64_t off = 0;
  for (int d = a.kept - 1; d >= 0; --d) {
    off += o % a.kdim[d] * a.kstride[d];
    o /= a.kdim[d];
  }
  return off;
}

// f(x) for this lane's share of the inputs of one output: runs along the last reduced
// axis (lanes take every W-th element), the other reduced axes advanced like an odometer.
// Moves `off` (the offset of reduced element idx) to the next reduced element, the axes
// before `end` counted like an odometer's digits, the last fastest.
__device__ inline void next_reduced(const ReduceAxes& a, int end, int64_t* idx, int64_t& off) {
  for (int d = end - 1; d >= 0; --d) {
    off += a.rstride[d];
    if (++idx[d] < a.rdim[d]) return;
    off -= a.rstride[d] * a.rdim[d];
    idx[d] = 0;
  }
}

template <int W, class T, class F>
__device__ void visit(const ReduceAxes& a, const T* base, int lane, F&& f) {
  const int last = a.summed - 1;
  const int64_t inner = a.rdim[last], step = a.rstride[last], runs = a.count / inner;
  int64_t idx[kMaxRank] = {}, off = 0;
  for (int64_t run = 0; run < runs; ++run) {
    for (int64_t i = lane; i < inner; i += W) f(base[off + i * step]);
    next_reduced(a, last, idx, off);
  }
}

template <int W, class T>
__global__ void __launch_bounds__(kBlockOf<W>)
    reduce_kernel(Reduction kind, const T* x, ReduceAxes a, T* out) {
  const int lane = threadIdx.x % W;
  for (int64_t o = first_row<W>(); o < a.nout; o += row_stride<W>()) {
    const T* base = x + kept_offset(a, o);
    if (kind == Reduction::Sum || kind == Reduction::Mean) {  // f32's in double, as the CPU's
      Wide<T> s = 0;
      visit<W>(a, base, lane, [&](T v) { s = Plus()(s, Wide<T>(v)); });
      s = across<W>(s, Plus());
      if (lane == 0) out[o] = T(kind == Reduction::Mean ? s / Wide<T>(a.count) : s);
      continue;
    }
    T m = max_identity<T>();
    visit<W>(a, base, lane, [&](T v) { m = Larger()(m, v); });
    m = across<W>(m, Larger());
    if constexpr (std::is_floating_point<T>::value) {  // (an i32 max has no logsumexp)
      if (kind == Reduction::LogSumExp && std::isfinite(m)) {
        T s = 0;
        visit<W>(a, base, lane, [&](T v) { s += std::exp(v - m); });
        m = std::log(across<W>(s, Plus())) + m;
      }
    }
    if (lane == 0) out[o] = m;
  }
}

// A sum or mean whose outputs are too few to fill the GPU one thread each, over strided
// inputs (a bias gradient's column sums: [T*B, 4H] summed over its rows): the reduced
// elements of each output are cut into `slices` runs, one thread a run and an output,
// neighbouring threads on neighbouring outputs; each run's sum goes to partial[s][o], and
// the second kernel adds an output's runs in order (the same sum from run to run). f32's
// add in double (Wide), rounded once into the output, as the CPU's.
template <class T>
__global__ void __launch_bounds__(kThreads)
    reduce_runs_kernel(const T* x, ReduceAxes a, int64_t slices, int64_t run, Wide<T>* partial) {
  for (int64_t v = first_item(); v < a.nout * slices; v += item_stride()) {
    const int64_t o = v % a.nout, first = v / a.nout * run;
    const int64_t last = first + run < a.count ? first + run : a.count;
    int64_t idx[kMaxRank] = {}, off = 0;  // element `first` of the reduced axes, as digits
    for (int64_t d = a.summed - 1, k = first; d >= 0; --d) {
      idx[d] = k % a.rdim[d];
      off += idx[d] * a.rstride[d];
      k /= a.rdim[d];
    }
    const T* base = x + kept_offset(a, o);
    Wide<T> s = 0;
    for (int64_t k = first; k < last; ++k) {
      s = Plus()(s, Wide<T>(base[off]));
      next_reduced(a, a.summed, idx, off);
    }
    partial[v] = s;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    add_runs_kernel(bool mean, const Wide<T>* partial, int64_t slices, ReduceAxes a, T* out) {
  for (int64_t o = first_item(); o < a.nout; o += item_stride()) {
    Wide<T> s = 0;
    for (int64_t r = 0; r < slices; ++r) s = Plus()(s, partial[r * a.nout + o]);
    out[o] = T(mean ? s / Wide<T>(a.count) : s);
  }
}

// How many runs reduce_runs_kernel cuts each output's elements into: enough threads to
// fill an H100 (132 multiprocessors of 2048 threads), runs of 32 elements at least; 1
// where one thread an output is enough.
inline int64_t reduce_slices(int64_t nout, int64_t count) {
  const int64_t wanted = (int64_t(1) << 18) / nout;
  return std::max<int64_t>(1, std::min<int64_t>({wanted, count / 32, 1024}));
}

template <class T>
void reduce(Context& g, Reduction kind, const T* x, const int64_t* shape, int rank,
            uint32_t mask, T* out) {
  int64_t nout = 1, count = 1;
  for (int i = 0; i < rank; ++i) ((mask >> i) & 1 ? count : nout) *= shape[i];
  if (nout == 0) return;
  if (count == 0) {  // the CPU's starting values; a mean of nothing is 0 / 0
    fill(g, out, nout, kind == Reduction::Sum    ? T(0)
                       : kind == Reduction::Mean ? std::numeric_limits<T>::quiet_NaN()
                                                 : max_identity<T>());
    return;
  }
  const ReduceAxes a = reduce_axes(shape, rank, mask);
  const int last = a.summed - 1;
  const int width = row_width(a.rstride[last] == 1, a.rdim[last], a.count, a.nout);
  const int64_t slices = reduce_slices(a.nout, a.count);
  if (width == 1 && slices > 1 && (kind == Reduction::Sum || kind == Reduction::Mean)) {
    auto* partial = reinterpret_cast<Wide<T>*>(
        g.staging.hold(std::size_t(slices * a.nout) * sizeof(Wide<T>)));
    const int64_t run = (a.count + slices - 1) / slices;
    launch(reduce_runs_kernel<T>, blocks(slices * a.nout), kThreads, g.stream, x, a, slices,
           run, partial);
    check_launch("reduce");
    launch(add_runs_kernel<T>, blocks(a.nout), kThreads, g.stream, kind == Reduction::Mean,
           partial, slices, a, out);
    check_launch("reduce");
    return;
  }
  with_width(width, [&](auto w) {
    constexpr int W = decltype(w)::value;
    launch(reduce_kernel<W, T>, row_blocks<W>(nout), kBlockOf<W>, g.stream, kind, x, a, out);
  });
  check_launch("reduce");
}

// ---- softmax and cross-entropy --------------------------------------------------------

template <int W, class T>
__global__ void __launch_bounds__(kBlockOf<W>)
    softmax_kernel(bool log, const T* x, int64_t outer, int64_t n, int64_t inner, T* out) {
  const int lane = threadIdx.x % W;
  for (int64_t r = first_row<W>(); r < outer * inner; r += row_stride<W>()) {
    const int64_t start = r / inner * n * inner + r % inner;
    const T* xs = x + start;
    T* ys = out + start;
    T mx = max_identity<T>();
    for (int64_t i = lane; i < n; i += W) mx = Larger()(mx, xs[i * inner]);
    mx = across<W>(mx, Larger());
    const T shift = log_shift(log, mx);
    T sum = 0;
    for (int64_t i = lane; i < n; i += W) sum += std::exp(xs[i * inner] - shift);
    sum = across<W>(sum, Plus());
    const T norm = log ? std::log(sum) : T(1) / sum;
    for (int64_t i = lane; i < n; i += W)
      ys[i * inner] = normalized(log, xs[i * inner] - shift, norm);
  }
}

template <class T>
void softmax(Context& g, bool log, const T* x, int64_t outer, int64_t n, int64_t inner, T* out) {
  if (outer * n * inner == 0) return;
  with_width(row_width(inner == 1, n, n, outer * inner), [&](auto w) {
    constexpr int W = decltype(w)::value;
    launch(softmax_kernel<W, T>, row_blocks<W>(outer * inner), kBlockOf<W>, g.stream, log, x,
           outer, n, inner, out);
  });
  check_launch("softmax");
}

// An element of a topk's row: its value and its index in the row.
template <class T>
struct Pick {
  T value;
  int64_t index;
};

template <class T>
__device__ Pick<T> shuffle_xor(Pick<T> p, int s) {
  return {shuffle_xor(p.value, s), shuffle_xor(p.index, s)};
}

// What no element is: every element of a row comes before it.
constexpr int64_t kNone = INT64_MAX;
template <class T>
__device__ Pick<T> no_pick() {
  return {max_identity<T>(), kNone};
}

// Whether a comes before b in a topk's order (mdl::topk_row's): the larger value first, a
// NaN before every number, equal values (and NaNs) by index. A strict total order on a
// row's elements, so that the first of a set is the same whichever way it is folded.
template <class T>
__device__ bool before(Pick<T> a, Pick<T> b) {
  return replaces(a.value, b.value) || (!replaces(b.value, a.value) && a.index < b.index);
}

// The first of two elements, in `before`'s order.
struct First {
  template <class T>
  __device__ Pick<T> operator()(Pick<T> a, Pick<T> b) const { return before(a, b) ? a : b; }
};

// use(e, load(e)) for a thread's share of n elements (e from `lane` on, W apart), Batch at
// a time: a batch's loads are all issued before any is used, so that they are in flight
// together. A thread's next load otherwise waits for the use of its last, whose branch
// depends on it: argmax of one row of 10,000 in a block of 1024 threads took 6.2 us on an
// H100, one read of the row, where max took 4.0.
template <int W, int Batch, class Load, class Use>
__device__ void each_of_share(int64_t n, int lane, Load load, Use use) {
  using V = decltype(load(int64_t()));
  for (int64_t e = lane; e < n; e += Batch * W) {
    V batch[Batch];
    MDL_UNROLL
    for (int b = 0; b < Batch; ++b)
      if (e + b * W < n) batch[b] = load(e + b * W);
    MDL_UNROLL
    for (int b = 0; b < Batch; ++b)
      if (e + b * W < n) use(e + b * W, batch[b]);
  }
}

// mdl::argmax (kernels.h): the first of the row's elements in `before`'s order (the
// largest value, a NaN if the row holds one, the first index of equal ones), in one read of
// the row: each thread's first, then the first of the W threads'.
template <int W, class T>
__global__ void __launch_bounds__(kBlockOf<W>)
    argmax_kernel(const T* x, int64_t outer, int64_t n, int64_t inner, int32_t* out) {
  const int lane = threadIdx.x % W;
  for (int64_t r = first_row<W>(); r < outer * inner; r += row_stride<W>()) {
    const T* xs = x + r / inner * n * inner + r % inner;
    Pick<T> best = no_pick<T>();
    each_of_share<W, 4>(n, lane, [=](int64_t e) { return xs[e * inner]; },
                        [&](int64_t e, T v) {
                          if (before(Pick<T>{v, e}, best)) best = Pick<T>{v, e};
                        });
    best = across<W>(best, First());
    if (lane == 0) out[r] = best.index < n ? int32_t(best.index) : -1;
  }
}

template <class T>
void argmax(Context& g, const T* x, int64_t outer, int64_t n, int64_t inner, int32_t* out) {
  if (outer * inner == 0) return;
  with_width(row_width(inner == 1, n, n, outer * inner), [&](auto w) {
    constexpr int W = decltype(w)::value;
    launch(argmax_kernel<W, T>, row_blocks<W>(outer * inner), kBlockOf<W>, g.stream, x, outer,
           n, inner, out);
  });
  check_launch("argmax");
}

// The k <= L first of a thread's share of n elements (from `lane` on, W apart), as
// `at(e)` reads element e (a Pick), in `before`'s order, into held[0..L) (the places from
// k on: no_pick), read Batch at a time (each_of_share). Each element is carried down the
// list, swapping with every held one it comes before, unless it does not come before the
// k-th: most elements of a long share do not, and cost one comparison. The loops are
// unrolled, so that the list stays in registers (a batch takes some too: a block of 1024
// threads has 64 a thread).
template <int W, int L, int Batch, class T, class At>
__device__ void first_of_share(At at, int64_t n, int64_t k, int lane, Pick<T> (&held)[L]) {
  MDL_UNROLL
  for (int q = 0; q < L; ++q) held[q] = no_pick<T>();
  Pick<T> last_held = no_pick<T>();  // held[k - 1]
  each_of_share<W, Batch>(n, lane, at, [&](int64_t, Pick<T> carried) {
    if (!before(carried, last_held)) return;
    MDL_UNROLL
    for (int q = 0; q < L; ++q) {
      if (q < k && before(carried, held[q])) {
        const Pick<T> dropped = held[q];
        held[q] = carried;
        carried = dropped;
      }
      if (q == k - 1) last_held = held[q];
    }
  });
}

// The first k <= L of n >= k elements that W threads share, as `at(e)` reads them: each
// thread keeps the first k of its share (first_of_share), and k rounds each take the first
// of the threads' heads, the thread it came from moving on to its next. put(q, pick) gets
// the q-th, called by that thread (not lane 0: a host compiler splits the loop on a test
// that never changes in it, and the emulated device's threads would then wait at copies
// of one barrier). Every pick is an element, and only one thread holds it.
template <int W, int L, int Batch, class T, class At, class Put>
__device__ void first_k(At at, int64_t n, int64_t k, int lane, Put put) {
  Pick<T> held[L];
  first_of_share<W, L, Batch>(at, n, k, lane, held);
  for (int64_t q = 0; q < k; ++q) {
    const Pick<T> pick = across<W>(held[0], First());
    if (held[0].index == pick.index) {
      put(q, pick);
      MDL_UNROLL
      for (int p = 0; p + 1 < L; ++p) held[p] = held[p + 1];
      held[L - 1] = no_pick<T>();
    }
  }
}

// mdl::topk (kernels.h) on contiguous rows of 32 or more, W threads a row (a warp or a
// block of kThreads), k <= L: the row's first k in `before`'s order (first_k), so the
// CPU's answer.
template <int W, int L, class T>
__global__ void __launch_bounds__(kBlockOf<W>)
    topk_held_kernel(const T* x, int64_t rows, int64_t n, int64_t k, T* values,
                     int32_t* indices) {
  const int lane = threadIdx.x % W;
  for (int64_t r = first_row<W>(); r < rows; r += row_stride<W>()) {
    const T* xs = x + r * n;
    first_k<W, L, 4, T>([=](int64_t e) { return Pick<T>{xs[e], e}; }, n, k, lane,
                     [&](int64_t q, Pick<T> p) {
                       values[r * k + q] = p.value;
                       indices[r * k + q] = int32_t(p.index);
                     });
  }
}

// The same for larger k: k rounds, each the first element after the last pick among the
// threads' shares, a read of the row a round.
template <int W, class T>
__global__ void __launch_bounds__(kBlockOf<W>)
    topk_rounds_kernel(const T* x, int64_t rows, int64_t n, int64_t k, T* values,
                       int32_t* indices) {
  const int lane = threadIdx.x % W;
  for (int64_t r = first_row<W>(); r < rows; r += row_stride<W>()) {
    const T* xs = x + r * n;
    Pick<T> last{T(), -1};  // the last round's pick; index -1 before the first
    for (int64_t q = 0; q < k; ++q) {
      Pick<T> pick = no_pick<T>();
      for (int64_t e = lane; e < n; e += W) {
        const Pick<T> u{xs[e], e};
        if ((last.index < 0 || before(last, u)) && before(u, pick)) pick = u;
      }
      pick = across<W>(pick, First());
      if (pick.index % W == lane) {  // the thread whose share holds it (first_k says why)
        values[r * k + q] = pick.value;
        indices[r * k + q] = int32_t(pick.index);
      }
      last = pick;
    }
  }
}

// A few long rows (a beam search's one row of K x V scores a step) are cut into chunks
// of kChunk elements (the last takes the rest), a warp a chunk: the first k of each go to
// `firsts`, k a chunk, with their indices in the row; the row's first k are the first k
// of those, a block of kThreads a row (topk_of_firsts_kernel: a few picks a thread, read
// one at a time). A block of 1024 threads a row took 59 us for the top 4 of 40,000 scores
// on an H100, every warp of it carrying elements down its lists on one multiprocessor;
// chunks spread them over the GPU.
constexpr int64_t kChunk = 256;
template <int L, class T>
__global__ void __launch_bounds__(kThreads)
    topk_chunks_kernel(const T* x, int64_t rows, int64_t n, int64_t k, int64_t chunks,
                       Pick<T>* firsts) {
  const int lane = threadIdx.x % 32;
  for (int64_t c = first_row<32>(); c < rows * chunks; c += row_stride<32>()) {
    const int64_t start = c % chunks * kChunk;
    const int64_t length = c % chunks + 1 < chunks ? kChunk : n - start;
    const T* xs = x + c / chunks * n + start;
    first_k<32, L, 4, T>([=](int64_t e) { return Pick<T>{xs[e], start + e}; }, length, k,
                         lane, [&](int64_t q, Pick<T> p) { firsts[c * k + q] = p; });
  }
}

template <int L, class T>
__global__ void __launch_bounds__(kThreads)
    topk_of_firsts_kernel(const Pick<T>* firsts, int64_t rows, int64_t m, int64_t k,
                          T* values, int32_t* indices) {
  const int lane = threadIdx.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const Pick<T>* ps = firsts + r * m;
    first_k<kThreads, L, 1, T>([=](int64_t e) { return ps[e]; }, m, k, lane,
                     [&](int64_t q, Pick<T> p) {
                       values[r * k + q] = p.value;
                       indices[r * k + q] = int32_t(p.index);
                     });
  }
}

// mdl::topk (kernels.h) on other rows, a row a thread, each running the CPU's
// mdl::topk_row: rows too short to share, or strided (neighbouring threads then read
// neighbouring elements of neighbouring rows).
template <class T>
__global__ void __launch_bounds__(kThreads) topk_kernel(const T* x, int64_t outer, int64_t n,
                                                        int64_t inner, int64_t k, T* values,
                                                        int32_t* indices) {
  for (int64_t r = first_row<1>(); r < outer * inner; r += row_stride<1>()) {
    const int64_t o = r / inner, j = r % inner;
    topk_row(x + o * n * inner + j, n, inner, k, values + o * k * inner + j,
             indices + o * k * inner + j);
  }
}

// One thread a row ran a beam's topk of 4 from 40,000 scores in 6.7 ms on an H100, one
// element after another: 235 of a 237 ms decode. Up to kHeld picks, a thread holds its
// share's first ones in registers; more take a read of the row each. The firsts of a few
// long rows' chunks live in g.staging.
constexpr int kHeld = 8;
template <class T>
void topk(Context& g, const T* x, int64_t outer, int64_t n, int64_t inner, int64_t k,
          T* values, int32_t* indices) {
  if (outer * inner == 0) return;
  const int w = row_width(inner == 1, n, n, outer);
  if (w == 1) {
    launch(topk_kernel<T>, blocks(outer * inner), kThreads, g.stream, x, outer, n, inner, k,
           values, indices);
  } else if (w == kWide && k <= kHeld) {
    const int64_t chunks = n / kChunk, m = chunks * k;
    auto* firsts = reinterpret_cast<Pick<T>*>(
        g.staging.hold(std::size_t(outer * m) * sizeof(Pick<T>)));
    launch(topk_chunks_kernel<kHeld, T>, blocks(outer * chunks * 32), kThreads, g.stream, x,
           outer, n, k, chunks, firsts);
    check_launch("topk");
    launch(topk_of_firsts_kernel<kHeld, T>, unsigned(outer), kThreads, g.stream, firsts,
           outer, m, k, values, indices);
  } else {
    with_width(w, [&](auto width) {
      constexpr int W = decltype(width)::value;
      if constexpr (W == 32 || W == kThreads) {
        if (k <= kHeld)
          return launch(topk_held_kernel<W, kHeld, T>, row_blocks<W>(outer), kBlockOf<W>,
                        g.stream, x, outer, n, k, values, indices);
      }
      launch(topk_rounds_kernel<W, T>, row_blocks<W>(outer), kBlockOf<W>, g.stream, x, outer,
             n, k, values, indices);
    });
  }
  check_launch("topk");
}

// The losses of the counted rows (in double, as the CPU), summed per block (at most
// kPartials: each leaves its sum and count of row losses).
template <int W, class T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows(const T* logits, const int32_t* targets, const int32_t* lengths,
                       int64_t rows, int64_t classes, int64_t batch, HostText what,
                       Fault* fault, double* totals, int64_t* counts) {
  const int lane = threadIdx.x % W;
  double total = 0;
  int64_t count = 0;
  for (int64_t r = first_row<W>(); r < rows; r += row_stride<W>()) {
    if (lengths && r / batch >= lengths[r % batch]) continue;
    const int32_t target = targets[r];
    if (outside(target, classes)) {
      if (lane == 0) report(fault, FaultKind::Target, target, r, classes, what);
      continue;
    }
    const T* row = logits + r * classes;
    T mx = max_identity<T>();
    for (int64_t c = lane; c < classes; c += W) mx = Larger()(mx, row[c]);
    mx = across<W>(mx, Larger());
    double sum = 0;
    for (int64_t c = lane; c < classes; c += W) sum += std::exp(double(row[c] - mx));
    total += (double(mx) - double(row[target])) + std::log(across<W>(sum, Plus()));
    ++count;
  }
  total = across<kThreads>(lane == 0 ? total : 0.0, Plus());  // each row once: its lane 0's
  count = across<kThreads>(lane == 0 ? count : int64_t(0), Plus());
  if (threadIdx.x == 0) {
    totals[blockIdx.x] = total;
    counts[blockIdx.x] = count;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_mean(const double* totals, const int64_t* counts, unsigned parts, T* out) {
  double total = 0;
  int64_t count = 0;
  for (unsigned i = threadIdx.x; i < parts; i += kThreads) {
    total += totals[i];
    count += counts[i];
  }
  total = across<kThreads>(total, Plus());
  count = across<kThreads>(count, Plus());
  if (threadIdx.x == 0) out[0] = count ? T(total / count) : T(0);
}

// Lengths outside [0, steps] reported, as seq_order's, in a launch of their own: the
// rows' launch after it reports a target, which this fault comes before.
static __global__ void lengths_kernel(const int32_t* lengths, int64_t batch, int64_t steps,
                                      HostText what, Fault* fault) {
  for (int64_t b = first_item(); b < batch; b += item_stride())
    if (outside(lengths[b], steps + 1))
      report(fault, FaultKind::Length, lengths[b], b, steps, what);
}

// What mdl::cross_entropy computes, into out[0] on the device. The blocks' partial sums
// live in g.staging.
template <class T>
void cross_entropy(Context& g, const T* logits, const int32_t* targets, const int32_t* lengths,
                   int64_t rows, int64_t classes, int64_t batch, const char* what,
                   const char* lengths_what, T* out) {
  if (lengths && batch > 0)
    launch(lengths_kernel, blocks(batch), kThreads, g.stream, lengths, batch, rows / batch,
           HostText{lengths_what}, g.fault);
  // (kThreads wide at most: a block's partial sums are the across<kThreads> below)
  with_width<kThreads>(std::min(row_width(true, classes, classes, rows), kThreads),
                       [&](auto w) {
    constexpr int W = decltype(w)::value;
    const unsigned parts = std::min(blocks(rows * W), kPartials);
    auto* totals = reinterpret_cast<double*>(
        g.staging.hold(parts * (sizeof(double) + sizeof(int64_t))));
    auto* counts = reinterpret_cast<int64_t*>(totals + parts);
    launch(cross_entropy_rows<W, T>, parts, kThreads, g.stream,
        logits, targets, lengths, rows, classes, batch, HostText{what}, g.fault, totals,
        counts);
    launch(cross_entropy_mean<T>, 1, kThreads, g.stream, totals, counts, parts, out);
  });
  check_launch("cross_entropy");
}

}  // namespace cuda
}  // namespace mdl
