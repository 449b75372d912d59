// Counter-based random numbers: a value depends only on (key, counter), never on call
// order, so the NumPy reference and native code draw the same numbers and a backward
// pass can recompute a forward mask. splitmix64 finalizer as the mixing function.
#pragma once

#include <cmath>
#include <cstdint>

#include "mdl/device.h"  // MDL_HOST_DEVICE: dropout kernels draw on the GPU

namespace mdl {

MDL_HOST_DEVICE inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A key for a stream: combine a parent key with one more number (a site, a step, ...).
MDL_HOST_DEVICE inline uint64_t derive(uint64_t key, uint64_t n) { return mix(key ^ mix(n)); }

// Uniform in [0, 1) with 53 random bits.
MDL_HOST_DEVICE inline double uniform01(uint64_t key, uint64_t counter) {
  return static_cast<double>(mix(key + counter) >> 11) * 0x1.0p-53;
}

// Standard normal by Box-Muller from two uniforms of the same counter.
inline double normal01(uint64_t key, uint64_t counter) {
  double u1 = uniform01(key, 2 * counter), u2 = uniform01(key, 2 * counter + 1);
  return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace mdl
