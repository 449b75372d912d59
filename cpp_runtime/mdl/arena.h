// One growable, 64-byte-aligned byte buffer per function: the memory plan assigns every
// value an offset in it once per call shape, so nothing is allocated inside loops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "mdl/env.h"

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#endif

// Under AddressSanitizer: GCC says so by __SANITIZE_ADDRESS__, Clang by a feature.
#if defined(__SANITIZE_ADDRESS__)
#define MDL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MDL_ASAN 1
#endif
#endif

#if defined(MDL_ASAN)
#include <sanitizer/asan_interface.h>
#endif

#include "mdl/error.h"

namespace mdl {

constexpr std::size_t kAlign = 64;

inline std::size_t align_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Under AddressSanitizer (mdlc build --sanitize) every slot of a memory plan is followed
// by kRedzone bytes that no value owns, poisoned when the plan is laid out (Arena::guard):
// the slots lie in one allocation, whose inside ASan does not see, so a kernel reading or
// writing up to kRedzone bytes past a value's aligned end would go unreported.
#if defined(MDL_ASAN)
constexpr std::size_t kRedzone = 64;
#else
constexpr std::size_t kRedzone = 0;
#endif

// A function's byte counts for a call, summed in double (target.memory_check): past 2**60
// no machine has the memory, and past 2**63 the int64_t sizes would wrap around to small
// ones, so such a call is refused before any is computed.
inline void check_memory(double bytes) {
  if (bytes <= 0x1p60) return;
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", bytes);
  throw ValueError(std::string("the dims of this call would need ") + text +
                   " bytes of working memory, more than 2**60, which no machine has: an "
                   "input's dims are too large (one with no elements, a 0 in its shape, or "
                   "a broadcast view holds large dims at no cost)");
}

// Past a slot whose size is a multiple of 512 bytes, kStagger bytes no value owns, where
// there is no redzone (which does the same). Slots of one such size ([32, 256] floats: 32
// KiB) otherwise all started at one offset modulo 4 KiB, where a core takes a load for
// one of a store before it to the same offset ("4K aliasing") and waits for it: the ponder
// case's `while` body (tanh and abs over three [32, 256] values into two) took 4.64 ms a
// call, 2.62 with the slots stepped by a cache line (Intel Xeon, docs/build.md, "Slots off
// each other's 4 KiB offsets"). 256 bytes: slots up to 16 apart start at distinct offsets.
constexpr std::size_t kStagger = 256;

// n, or 0 where it is negative: the element count of a value in a branch of an `if` that
// the call's dims make negative, which that branch is refused at (mdl::dims_fit) and so
// does not make: its slot takes nothing (codegen/backend/plan.py, size_bytes). A template:
// the memory check computes the counts in doubles.
template <class N>
constexpr N nonnegative(N n) {
  return n < N(0) ? N(0) : n;
}

// The bytes a plan's slot of `bytes` takes in its arena.
inline std::size_t slot_bytes(std::size_t bytes) {
  const std::size_t aligned = align_up(bytes);
  return aligned + (kRedzone ? kRedzone : aligned % 512 == 0 ? kStagger : 0);
}

// A sanitized build's code marks the plan's slots `ks` (of `n` at `off` in `arena`, `total`
// bytes) dead as their values die and live just before their next values are computed
// (codegen/backend/plan.py, Lifetimes): under AddressSanitizer a dead slot is poisoned, so
// a kernel reading a value after the plan gave its slot away, or before it is computed,
// is reported (use-after-poison) rather than reading whatever lies there. Nothing
// otherwise.
inline void mark_slots(char* arena, const std::size_t* off, int n, std::size_t total,
                       std::initializer_list<int> ks, bool live) {
#if defined(MDL_ASAN)
  for (const int k : ks) {
    const std::size_t end = (k + 1 < n ? off[k + 1] : total) - kRedzone;
    if (live)
      ASAN_UNPOISON_MEMORY_REGION(arena + off[k], end - off[k]);
    else
      ASAN_POISON_MEMORY_REGION(arena + off[k], end - off[k]);
  }
#else
  (void)arena, (void)off, (void)n, (void)total, (void)ks, (void)live;
#endif
}

// Buffers of this size and more are mapped from the system (mmap) and unmapped when they
// go. glibc's malloc raises its mmap threshold to the size of the largest mapped block
// freed (up to 32 MiB); from then on such blocks come from its heap, whose freed pages stay
// resident. A T=1000, B=16, H=256 LSTM training step, whose 16 MiB gradients go to Python
// and are freed at every step, peaked 50-80 MiB higher from its third step on
// (`recompute` 75 -> 122-154 MiB; benchmarks/memory.py).
constexpr std::size_t kMapBytes = std::size_t(1) << 20;

// Mapped memory of this size and more is asked to come in transparent huge pages (2 MiB),
// unless MDL_HUGE_PAGES=0: a first touch of 4 KiB pages costs a fault each, 1.5 us on an
// AMD EPYC of Zen 4 (a VM): 16 MiB took 6.8-7.2 ms to touch, 1.6-2.5 in huge pages. What
// is touched anew at every call: results handed to Python of 4 MiB and more (result_pool.h
// keeps smaller ones) and arena slots given back (give_back). T=1000, B=16, H=256, the
// builds alternating in one process: `checkpoint = 32`'s training step 0.96x the time
// (12288 faults a step -> 552), `recompute` 0.98x, stored 0.99x; the peak 2 MiB higher
// for `checkpoint = 32` (46 -> 48 MiB) and 1.5 for `recompute`, where a huge page is
// resident whole once any of it is touched.
constexpr std::size_t kHugeBytes = std::size_t(2) << 20;

// MDL_HUGE_PAGES as set (env.h): a bad value throws; a model made checks it
// (src/model_object.h), so the arenas, which must not throw, read it as the default.
inline bool huge_pages_setting() { return env_switch("MDL_HUGE_PAGES", true); }

inline bool huge_pages() {
  static const bool on = [] {
    try {
      return huge_pages_setting();
    } catch (const std::invalid_argument&) {
      return true;
    }
  }();
  return on;
}

class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() { release(data_, size_); }

  // Make room for `bytes`; keeps the buffer when it is already large enough. Contents are
  // not preserved across growth (the plan is recomputed for each call).
  void reserve(std::size_t bytes) {
    if (bytes <= size_) return;
    release(data_, size_);
    size_ = align_up(bytes);
    data_ = allocate(size_);
    if (!data_) {
      const std::size_t asked = size_;
      size_ = 0;
      throw OutOfMemory(asked);
    }
  }

  char* data() { return data_; }
  std::size_t size() const { return size_; }

  // Under AddressSanitizer: the redzones of a plan's `n` slots at `off` (of `total`
  // bytes, slot_bytes apart) poisoned, the rest of the buffer not. Nothing otherwise.
  void guard(const std::size_t* off, int n, std::size_t total) {
#if defined(MDL_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(data_, size_);
    for (int i = 0; i < n; ++i) {
      const std::size_t end = i + 1 < n ? off[i + 1] : total;
      ASAN_POISON_MEMORY_REGION(data_ + end - kRedzone, kRedzone);
    }
#else
    (void)off, (void)n, (void)total;
#endif
  }

  // Room for `bytes` (contents not kept), as a pointer: memory sized at run time.
  char* hold(std::size_t bytes) {
    reserve(bytes);
    return data_;
  }

  // Gives up the buffer (the arena is then empty) to `other`, which frees its own first.
  void move_to(Arena& other) {
    release(other.data_, other.size_);
    other.data_ = data_;
    other.size_ = size_;
    data_ = nullptr;
    size_ = 0;
  }

 private:
  // `bytes` (a multiple of kAlign) of kAlign-aligned memory, or null.
  static char* allocate(std::size_t bytes) {
#if defined(__unix__) || defined(__APPLE__)
    if (bytes >= kMapBytes) return map(bytes);
#endif
    return static_cast<char*>(std::aligned_alloc(kAlign, bytes));
  }

#if defined(__unix__) || defined(__APPLE__)
  // `bytes` mapped from the system; from kHugeBytes on, at a multiple of kHugeBytes and
  // marked for transparent huge pages (which Linux then uses in its `always` and `madvise`
  // modes), so that a first touch faults in 2 MiB, not 4 KiB.
  static char* map(std::size_t bytes) {
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
#if defined(MADV_HUGEPAGE)
    if (bytes >= kHugeBytes && huge_pages()) {
      const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
      const std::size_t mapped = (bytes + page - 1) / page * page, span = mapped + kHugeBytes;
      void* p = mmap(nullptr, span, prot, flags, -1, 0);
      if (p == MAP_FAILED) return nullptr;
      const auto first = reinterpret_cast<std::uintptr_t>(p);
      const std::uintptr_t start = (first + kHugeBytes - 1) / kHugeBytes * kHugeBytes;
      if (start > first) munmap(p, start - first);
      if (first + span > start + mapped)
        munmap(reinterpret_cast<void*>(start + mapped), first + span - start - mapped);
      madvise(reinterpret_cast<void*>(start), mapped, MADV_HUGEPAGE);
      return reinterpret_cast<char*>(start);
    }
#endif
    void* p = mmap(nullptr, bytes, prot, flags, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
#endif

  // Frees what `allocate(bytes)` returned (null: nothing).
  static void release(char* p, std::size_t bytes) {
    if (!p) return;
#if defined(MDL_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(p, bytes);  // memory mapped there later starts clean
#endif
#if defined(__unix__) || defined(__APPLE__)
    if (bytes >= kMapBytes) {
      munmap(p, bytes);
      return;
    }
#endif
    std::free(p);
  }

  char* data_ = nullptr;
  std::size_t size_ = 0;
};

// Slots smaller than this are not worth giving back: touching them again in the next call
// costs a page fault a page (4 KiB), about as long as writing the page.
constexpr std::size_t kGiveBackBytes = std::size_t(4) << 20;

// Gives the whole pages inside [p, p + bytes) back to the system: an arena slot that no
// value of the rest of the call touches, given back before the call allocates the results
// it hands to Python, so that the two do not add up in the peak resident memory. Its
// contents are lost (the next touch maps a zero page), which a dead slot does not mind.
inline void give_back(char* p, std::size_t bytes) {
#if defined(__unix__) || defined(__APPLE__)
  if (bytes < kGiveBackBytes) return;
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
#else
  (void)p;
  (void)bytes;
#endif
}

// Where each step of a `for` begins in a tape of its ragged yield (its steps' records laid
// end to end, each step's [trips, ...] rows with the trip count of the while it ran):
// indexed by the step t, in rows, whatever order the steps ran in. Host memory on every
// target: the backward reads a step's count of rows as a dim of its code. A `while`'s
// ragged tape, whose trips are not known before it ends, adds each trip's rows in turn.
class StepRows {
 public:
  void reset(int64_t steps) {
    first_.assign(std::size_t(steps), 0);
    rows_.assign(std::size_t(steps), 0);
    total_ = 0;
  }
  void end(int64_t t, int64_t rows) {
    first_[std::size_t(t)] = total_;
    rows_[std::size_t(t)] = rows;
    total_ += rows;
  }
  void add(int64_t rows) {
    first_.push_back(total_);
    rows_.push_back(rows);
    total_ += rows;
  }
  int64_t first(int64_t t) const { return first_[std::size_t(t)]; }
  int64_t rows(int64_t t) const { return rows_[std::size_t(t)]; }
  int64_t total() const { return total_; }

 private:
  std::vector<int64_t> first_, rows_;
  int64_t total_ = 0;
};

// A growable stack of fixed-size records (a While loop's tape): amortized growth, so the
// number of iterations needs no bound. Records stay in push order; `data()` reads them
// as one array once the loop has ended. A `for`'s ragged yield laid out as another's
// (its steps' rows where that one's are) holds its bytes at once and is written in place.
class Tape {
 public:
  void clear() { bytes_.clear(); }
  // Exactly `bytes` bytes, their contents left to the caller (a null pointer for none).
  char* hold(std::size_t bytes) {
    bytes_.resize(bytes);
    return bytes_.data();
  }
  // Appends `bytes` bytes at `src` (none: nothing, where an empty vector's data() is null
  // and memcpy's pointers must not be, even for 0 bytes: UBSan reported a while loop's
  // tape pushed in a batch of no rows).
  void push(const void* src, std::size_t bytes) {
    if (!bytes) return;
    const std::size_t used = bytes_.size();
    bytes_.resize(used + bytes);
    std::memcpy(bytes_.data() + used, src, bytes);
  }
  char* data() { return bytes_.data(); }
  std::size_t used() const { return bytes_.size(); }
  StepRows steps;  // a `for`'s ragged yield's

 private:
  std::vector<char> bytes_;
};

}  // namespace mdl
