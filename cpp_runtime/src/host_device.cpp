// The cpu target's `mdl::Device` (mdl/device.h): the process's own memory, copies that are
// memcpy, and the optimizer's loops, vectorized. Its models need no context and find no
// faults after a call (the CPU's kernels throw where they find one). Part of the runtime
// every module links.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "mdl/arena.h"
#include "mdl/blas.h"
#include "mdl/denormals.h"
#include "mdl/device.h"
#include "mdl/lane_sums.h"
#include "mdl/optimizer.h"

namespace mdl {
namespace {

void require() {}
void* open() { return nullptr; }
void close(void*) {}
void finish(void*) {}

// kAlign-aligned (a cache line: one AVX-512 vector), as the arenas are. calloc's memory is
// aligned to 16 bytes only, and where a parameter store began 16 bytes into a line, every
// vector load of a weight straddled two lines: an LSTM's B = 1 forward (T = 35, H = 128)
// took 1.3-1.45x its time on an Intel Xeon with AVX-512, in the model objects whose store
// fell so. calloc still, for its untouched zero pages: the block's start is kept just
// before the aligned pointer, for `release`.
void* allocate(std::size_t bytes) {
  if (!bytes) return nullptr;
  if (bytes > SIZE_MAX - kAlign - sizeof(void*)) throw OutOfMemory(bytes);
  void* block = std::calloc(bytes + kAlign + sizeof(void*), 1);
  if (!block) throw OutOfMemory(bytes);
  const auto start = reinterpret_cast<std::uintptr_t>(block) + sizeof(void*);
  void** p = reinterpret_cast<void**>((start + kAlign - 1) / kAlign * kAlign);
  p[-1] = block;
  return p;
}

void release(void* p) {
  if (p) std::free(static_cast<void**>(p)[-1]);
}

void copy(void*, void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

// A parameter of at least this many elements has its step split over the products'
// threads (mdl::split_threads); below it, waking the second thread costs more than it
// saves. An Adam element takes about 1.3 ns on one core of an Intel Xeon (AVX-512).
constexpr int64_t kSplitStep = 1 << 14;

// Elements [begin, end) of one parameter's step. The loop is chosen by the step's kind (and
// SGD's momentum) and sees those fields as constants, so that no branch that is the same
// for every element stays inside it and GCC vectorizes each loop.
template <class T, int KIND, bool MOMENTUM>
MDL_NOINLINE void update_range(UpdateStep s, T* w, const T* grad, T* first, T* second,
                               int64_t begin, int64_t end) {
  s.kind = KIND;
  if (!MOMENTUM) s.momentum = 0;
  for (int64_t k = begin; k < end; ++k) update_element(s, w[k], grad[k], first[k], second[k]);
}

// Every element's step is its own, so the threads' shares give what one thread gives.
template <class T, int KIND, bool MOMENTUM>
void update_loop(const UpdateStep& s, T* w, const T* grad, T* first, T* second, int64_t n) {
  if (const int team = n >= kSplitStep ? split_threads() : 1; team > 1) {
#pragma omp parallel num_threads(team)
    {
      flush_denormals();
      const Share share(n, int64_t(kAlign / sizeof(T)));  // no line written by two
      update_range<T, KIND, MOMENTUM>(s, w, grad, first, second, share.begin, share.end);
    }
  } else {
    update_range<T, KIND, MOMENTUM>(s, w, grad, first, second, 0, n);
  }
}

template <class T>
void update(void*, const UpdateStep& s, T* w, const T* grad, T* first, T* second,
            int64_t n) {
  constexpr int SGD = OptimizerConfig::SGD, ADAM = OptimizerConfig::ADAM;
  FlushDenormals flush;  // a tiny gradient's square (Adam's second moment) is one
  // SGD has no second moment: `first` stands in for it, never touched
  if (s.kind == ADAM) update_loop<T, ADAM, true>(s, w, grad, first, second, n);
  else if (s.momentum == 0) update_loop<T, SGD, false>(s, w, grad, first, first, n);
  else update_loop<T, SGD, true>(s, w, grad, first, first, n);
}

// The sum of squares in fixed-order running sums (mdl/lane_sums.h): vectorized, and the
// same result on any machine and any count of threads, as data-parallel ranks clipping the
// same gradients need.
template <class T>
double sum_squares(void*, const T* g, int64_t n) {
  FlushDenormals flush;  // a denormal gradient's square is far below any norm that clips
  double lanes[kSumLanes] = {};
  add_in_lanes(lanes, n, [g](int64_t k) { return double(g[k]) * g[k]; });
  return lanes_total(lanes);
}

void synchronize() {}

}  // namespace

extern const Device host_device = {
    "cpu",
    1,  // DLPack's kDLCPU
    require,
    open,
    close,
    finish,
    allocate,
    release,
    copy,  // upload
    copy,  // download
    copy,
    update<float>,
    update<double>,
    sum_squares<float>,
    sum_squares<double>,
    synchronize,
    true,  // in place: NumPy's arrays are its memory
};

}  // namespace mdl
