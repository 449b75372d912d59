// Sums kept in kSumLanes running sums, term i into sum i % kSumLanes, added up in order at
// the end: each sum its own chain, so the adds vectorize (one sum in order made each add
// wait for the last, about 1 ns an element), and the result is the same at every vector
// width, on every machine and for any count of threads. Global-norm clipping's sum of
// squares (src/host_device.cpp), as data-parallel ranks clipping the same gradients need,
// and softmax's and cross_entropy's row sums (mdl/kernels.h).
#pragma once

#include <cstdint>

namespace mdl {

constexpr int kSumLanes = 16;

// lanes[(at + i) % kSumLanes] += term(i) for i in [0, n), where `at` (the count added
// before) is a multiple of kSumLanes.
template <class S, class Term>
inline void add_in_lanes(S (&lanes)[kSumLanes], int64_t n, Term term) {
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int j = 0; j < kSumLanes; ++j) lanes[j] += term(i + j);
  // the tail holds fewer than kSumLanes terms; j's own bound says so to GCC, which with
  // LTO warned "iteration 160 invokes undefined behavior" where it inlined a 256 chunk
  for (int j = 0; j < kSumLanes && i < n; ++j, ++i) lanes[j] += term(i);
}

template <class S>
inline S lanes_total(const S (&lanes)[kSumLanes]) {
  S total = 0;
  for (S lane : lanes) total += lane;
  return total;
}

}  // namespace mdl
