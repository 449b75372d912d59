// Loops that share no memory, run at once: each arm of a group (codegen/backend/
// concurrent.py) is a lambda of the generated function, run in an OpenMP section:
//
//   mdl::Arms arms(2, {rows of each product in them});
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
#include "mdl/small_gemm.h"
#include "mdl/threads.h"

namespace mdl {

class Arms {
 public:
  // `count` arms, whose products have at most max(`rows`) rows. They run one a thread where
  // the process has from 2 to `count` threads (a bidirectional LSTM on two cores) and every
  // product would run on the calling thread there: mdl's own kernels and MKL do inside a
  // parallel region, and mdl's take products of up to small_gemm::kSmallRows rows (OpenBLAS
  // would run a larger one's parts on threads of their own, one product at a time:
  // run_openblas_parts). With more threads than arms each arm runs alone, its products
  // and large loops split over all of them, as before; with one thread, one by one.
  Arms(int count, std::initializer_list<int64_t> rows) : errors_(count) {
    const int n = omp_in_parallel() || forked_after_threads() ? 1 : blas_threads();
    const bool alone = std::all_of(rows.begin(), rows.end(),
                                   [](int64_t m) { return m <= small_gemm::kSmallRows; });
    threads = n > 1 && n <= count && alone ? n : 1;
    if (threads > 1) threads_started() = true;
  }

  int threads;

  // Runs arm `k`. An exception may not leave an OpenMP region: it is kept, and the first
  // arm's that failed is thrown again once all have ended (rethrow).
  template <class Arm>
  void run(int k, Arm&& arm) {
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
