// The emulated CUDA device's kernel side: what a kernel compiled by the host compiler
// against this directory's cuda_runtime.h sees (threadIdx, __syncthreads, shuffles,
// atomics, shared arrays), and the launch that hands a grid to the scheduler
// (src/emulator/). Every CUDA thread runs as a fiber on the CPU; barriers, shuffles and
// shared memory are checked as they run (docs/cuda.md, "The emulated device").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <typeinfo>
#include <utility>

#define MDL_CUDA_EMULATED 1

struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x = 1, unsigned int y = 1, unsigned int z = 1) : x(x), y(y), z(z) {}
};

struct CUstream_st;  // the emulator's stream (src/emulator/streams.cpp)
typedef CUstream_st* cudaStream_t;

namespace mdl {
namespace emulated {

// Where the running CUDA thread is: what threadIdx, blockIdx, blockDim and gridDim read,
// and which launch it is of (a GPU's %gridid: distinct for every grid the process runs).
struct Coordinates {
  uint3 thread, block;
  dim3 block_dim, grid_dim;
  unsigned long long launch = 0;
};

extern thread_local const Coordinates* running;

// ---- launches -------------------------------------------------------------------------

// One grid's work for a stream: `body` runs one CUDA thread (it reads `running`).
struct Grid {
  const void* kernel;  // its address, for its name (symbols.cpp)
  dim3 grid, block;
  std::function<void()> body;
};

// Queues or runs the grid on `stream` (streams.cpp); a violation found while it runs makes
// the device's error sticky, as a failed kernel does on a GPU.
void submit(cudaStream_t stream, Grid grid);

// Checks that pointer argument `index` of `count` is null or device memory; records a
// sticky error naming the kernel and the argument otherwise. False when it failed.
bool expect_device_argument(const void* kernel, int index, int count, const void* pointer,
                            const char* type);

template <class P>
bool check_argument(const void* kernel, int index, int count, const P& value) {
  if constexpr (std::is_pointer_v<P>)
    return expect_device_argument(kernel, index, count, static_cast<const void*>(value),
                                  typeid(P).name());
  return true;
}

template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t stream, A... args) {
  const void* id = reinterpret_cast<const void*>(kernel);
  int index = 0;
  bool ok = true;
  ((ok = check_argument(id, index++, int(sizeof...(P)), args) && ok), ...);
  if (!ok) return;
  submit(stream, Grid{id, grid, block, [kernel, args...]() { kernel(args...); }});
}

// ---- synchronization inside a block ---------------------------------------------------

// Where a barrier or shuffle is in the source (its call's return address tells two apart).
struct Site {
  const char* file;
  int line;
};

void barrier(Site site);
uint64_t shuffle_xor(unsigned mask, uint64_t bits, int lane_mask, int width, Site site);

// Inlined, so that each shuffle of the source has its own call (a site of its own).
template <class T>
__attribute__((always_inline)) inline T shfl_xor(unsigned mask, T value, int lane_mask, int width,
                                                 Site site);

template <class T>
__attribute__((always_inline)) inline T shfl_xor(unsigned mask, T value, int lane_mask, Site site) {
  return shfl_xor(mask, value, lane_mask, 32, site);
}

template <class T>
__attribute__((always_inline)) inline T shfl_xor(unsigned mask, T value, int lane_mask, int width,
                                                 Site site) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>,
                "the emulator shuffles values of up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = shuffle_xor(mask, bits, lane_mask, width, site);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

// ---- shared memory --------------------------------------------------------------------

// What the race check knows of one element of a shared array (scheduler.cpp).
struct SharedMark {
  int32_t writer, reader;  // thread of the last write / read (-2: several readers)
  uint32_t wrote, read;    // the barrier epoch of each, plus one (0: never)
};

void shared_read(const char* name, int64_t index, int64_t count, SharedMark* mark);
void shared_write(const char* name, int64_t index, int64_t count, SharedMark* mark);
// Room for `count` elements of `bytes` each in the running block's shared memory, poisoned,
// with their marks cleared; the same room for every thread of the block.
void* shared_room(const void* key, std::size_t bytes, int64_t count, SharedMark** marks);

// Shared memory is the emulator's to check (shared_read, shared_write): a ThreadSanitizer
// build leaves its accesses alone, since the poison a block's first thread writes into the
// room every thread uses would look like a race to it.
#define MDL_EMULATOR_OWN_CHECK __attribute__((no_sanitize("thread")))

template <class T>
class SharedElement {
 public:
  SharedElement(T* p, SharedMark* mark, const char* name, int64_t index, int64_t count)
      : p_(p), mark_(mark), name_(name), index_(index), count_(count) {}
  MDL_EMULATOR_OWN_CHECK operator T() const {
    shared_read(name_, index_, count_, mark_);
    return *p_;
  }
  MDL_EMULATOR_OWN_CHECK SharedElement& operator=(T value) {
    shared_write(name_, index_, count_, mark_);
    *p_ = value;
    return *this;
  }
  SharedElement& operator=(const SharedElement& other) { return *this = T(other); }
  SharedElement& operator+=(T value) { return *this = T(*this) + value; }

 private:
  T* p_;
  SharedMark* mark_;
  const char* name_;
  int64_t index_, count_;
};

template <class T, int N>
class SharedView {
 public:
  SharedView(T* data, SharedMark* marks, const char* name)
      : data_(data), marks_(marks), name_(name) {}
  SharedElement<T> operator[](int64_t i) const {
    const bool inside = i >= 0 && i < N;  // outside: reported by the element's first use
    return SharedElement<T>(data_ + (inside ? i : 0), marks_ + (inside ? i : 0), name_, i, N);
  }

 private:
  T* data_;
  SharedMark* marks_;
  const char* name_;
};

// A `__shared__ T name[N]` of a kernel (MDL_SHARED_ARRAY in mdl/cuda/device.h).
template <class T, int N>
class SharedArray {
 public:
  SharedView<T, N> view(const char* name) {
    SharedMark* marks = nullptr;
    T* data = static_cast<T*>(shared_room(this, sizeof(T), N, &marks));
    return SharedView<T, N>(data, marks, name);
  }
};

// ---- atomics ---------------------------------------------------------------------------

// Threads of a block take turns only at barriers and shuffles, so a plain read and write
// would do; they are real atomics (acquire and release, stronger than CUDA's relaxed ones)
// so that a ThreadSanitizer build (`--emulate --sanitize`) tells them from the plain
// read-modify-write of two threads, which it reports as a race.
template <class T>
T atomic_add(T* p, T value) {
  if constexpr (std::is_integral_v<T>) {
    return __atomic_fetch_add(p, value, __ATOMIC_ACQ_REL);
  } else {
    T old;
    __atomic_load(p, &old, __ATOMIC_ACQUIRE);
    T sum = old + value;
    while (!__atomic_compare_exchange(p, &old, &sum, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      sum = old + value;
    return old;
  }
}

template <class T>
T atomic_cas(T* p, T compare, T value) {
  __atomic_compare_exchange_n(p, &compare, value, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return compare;  // what *p held: `compare` itself when it was swapped
}

template <class T>
T atomic_max(T* p, T value) {
  T old = __atomic_load_n(p, __ATOMIC_ACQUIRE);
  while (value > old &&
         !__atomic_compare_exchange_n(p, &old, value, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
  return old;
}

}  // namespace emulated
}  // namespace mdl

// ---- CUDA's names for them ------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

#define threadIdx (::mdl::emulated::running->thread)
#define blockIdx (::mdl::emulated::running->block)
#define blockDim (::mdl::emulated::running->block_dim)
#define gridDim (::mdl::emulated::running->grid_dim)
#define warpSize 32

#define __syncthreads() ::mdl::emulated::barrier(::mdl::emulated::Site{__FILE__, __LINE__})
#define __shfl_xor_sync(mask, value, ...) \
  ::mdl::emulated::shfl_xor(mask, value, __VA_ARGS__, ::mdl::emulated::Site{__FILE__, __LINE__})

inline float atomicAdd(float* p, float value) { return ::mdl::emulated::atomic_add(p, value); }
inline double atomicAdd(double* p, double value) { return ::mdl::emulated::atomic_add(p, value); }
inline int atomicAdd(int* p, int value) { return ::mdl::emulated::atomic_add(p, value); }
inline int atomicCAS(int* p, int compare, int value) {
  return ::mdl::emulated::atomic_cas(p, compare, value);
}
inline int atomicExch(int* p, int value) { return __atomic_exchange_n(p, value, __ATOMIC_ACQ_REL); }
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long value) {
  return ::mdl::emulated::atomic_max(p, value);
}
inline void __threadfence() {}
