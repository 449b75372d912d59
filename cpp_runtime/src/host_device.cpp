// The cpu target's `mdl::Device` (mdl/device.h): the process's own memory, copies that are
// memcpy, and the optimizer's loops, vectorized. Its models need no context and find no
// faults after a call (the CPU's kernels throw where they find one). Part of the runtime
// every module links.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "mdl/arena.h"
#include "mdl/denormals.h"
#include "mdl/device.h"
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

// One parameter's step. The loop is chosen by the step's kind (and SGD's momentum) and
// sees those fields as constants, so that no branch that is the same for every element
// stays inside it and GCC vectorizes each loop.
template <class T, int KIND, bool MOMENTUM>
void update_loop(UpdateStep s, T* w, const T* grad, T* first, T* second, int64_t n) {
  s.kind = KIND;
  if (!MOMENTUM) s.momentum = 0;
  for (int64_t k = 0; k < n; ++k) update_element(s, w[k], grad[k], first[k], second[k]);
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

template <class T>
double sum_squares(void*, const T* g, int64_t n) {
  FlushDenormals flush;  // a denormal gradient's square is far below any norm that clips
  double total = 0;
  for (int64_t k = 0; k < n; ++k) total += double(g[k]) * g[k];
  return total;
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
