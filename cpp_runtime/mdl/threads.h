// The process's threads as generated code and the BLAS see them: all run on GNU OpenMP
// (libgomp, one pool for every product and every loop split over the cores; blas.h), and
// the facts about them a forked child needs.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "mdl/denormals.h"

// A fused loop that runs either on the threads or on one is generated once, as a lambda
// both ways call (codegen/targets/cpu.py): kept out of line, so that the compiler does not
// copy it back into each.
#define MDL_NOINLINE __attribute__((noinline))

namespace mdl {

// Whether this module opened a parallel region (a product or a loop on more than one
// thread), which starts OpenMP's threads (libgomp's, which MKL and OpenBLAS use too).
inline bool& threads_started() {
  static bool started = false;
  return started;
}

// Whether this process was forked from one whose threads had started: libgomp cannot start
// threads again in it (a parallel region waits forever for the parent's), so its products
// and loops run on one thread (blas_init).
inline bool& forked_after_threads() {
  static bool forked = false;
  return forked;
}

// The part [begin, end) of `n` iterations that the calling thread of an OpenMP team takes:
// even shares, each boundary a multiple of `align` (a vector's elements, so that a split
// contiguous loop keeps its vectors aligned and no two threads write one cache line).
struct Share {
  int64_t begin, end;
  Share(int64_t n, int64_t align) {
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t blocks = (n + align - 1) / align;
    begin = std::min(n, blocks * t / team * align);
    end = std::min(n, blocks * (t + 1) / team * align);
  }
};

}  // namespace mdl
