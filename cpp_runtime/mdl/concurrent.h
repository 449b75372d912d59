// Loops that share no memory, run at once: each arm of a group (codegen/backend/
// concurrent.py) is a lambda of the generated function, run in an OpenMP section:
//
//   mdl::Arms arms(2, {{on the calling thread, multiply-adds} of each product in them});
//   #pragma omp parallel sections num_threads(arms.threads) if (arms.threads > 1)
//   {
//     #pragma omp section
//     arms.run(0, [&] { ...the first loop... });
//     ...
//   }
//   arms.rethrow();
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <vector>

#include "mdl/blas.h"
#include "mdl/threads.h"

namespace mdl {

// A product inside an arm: whether it runs on the calling thread inside a parallel region
// (on_calling_thread, blas.h), and its multiply-adds (m * n * k).
struct ArmProduct {
  bool alone;
  int64_t work;
};

class Arms {
 public:
  // `count` arms, whose products are `products`. They run at once, one a thread, when the
  // process has threads and every product runs on the calling thread inside a parallel
  // region, as mdl's own kernels and MKL do (OpenBLAS would run a large one's parts on
  // threads of their own, one product at a time). With more threads than arms, only where
  // no product would have been split over the threads anyway (fewer than
  // kOwnKernelSplitWork multiply-adds): otherwise each arm runs alone, its products and
  // large loops on all the threads, as with one thread, one by one.
  Arms(int count, std::initializer_list<ArmProduct> products) : errors_(count) {
    const int n = omp_in_parallel() || forked_after_threads() ? 1 : blas_threads();
    bool alone = true, small = true;
    for (const ArmProduct& p : products) {
      alone = alone && p.alone;
      small = small && p.work < kOwnKernelSplitWork;
    }
    threads = n > 1 && alone && (n <= count || small) ? std::min(n, count) : 1;
    if (threads > 1) threads_started() = true;
  }

  int threads;

  // Runs arm `k`. An exception may not leave an OpenMP region: it is kept, and the first
  // arm's that failed is thrown again once all have ended (rethrow).
  template <class Arm>
  void run(int k, Arm&& arm) {
    flush_denormals();  // the thread's mode for the arm's loops and products (denormals.h)
    try {
      arm();
    } catch (...) {
      errors_[k] = std::current_exception();
    }
  }

  void rethrow() const {
    for (const std::exception_ptr& e : errors_)
      if (e) std::rethrow_exception(e);
  }

 private:
  std::vector<std::exception_ptr> errors_;
};

}  // namespace mdl
