// The shape of the cuda target's launches, which host code (mdl/cuda/launch.h) and device
// code (mdl/cuda/device.h) both name: every block has kThreads threads (but those of a few
// long rows, mdl/cuda/rows.h's kWide), and every kernel loops over its items with a grid
// stride.
#pragma once

#include <cstdint>

namespace mdl {
namespace cuda {

constexpr int kThreads = 256;  // a launch's block size

// The grid of a grid-stride loop over n items: a thread per item up to 65535 blocks (16.7M
// threads, dozens of times what a GPU runs at once); past that, threads take several.
inline unsigned blocks(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return unsigned(wanted < 1 ? 1 : wanted > 65535 ? 65535 : wanted);
}

// The most blocks of a kernel that ends in one number (a loss, a norm): each block leaves
// its partial sums, which one more step adds up in a fixed order.
constexpr unsigned kPartials = 1024;

}  // namespace cuda
}  // namespace mdl
