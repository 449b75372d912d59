// The memory of results handed to Python (Call::result_memory), kept when Python lets them
// go, for later results of the same size. New memory costs a page fault and a zeroed page
// every 4 KiB, 1.5 us a page on an AMD EPYC of Zen 4 (a VM): an LSTM training step at
// B = 32, H = 256 took 1297 faults a call, about 1.9 ms of its 20.6, for its 4.3 MiB of
// gradients. The pool keeps blocks under kGiveBackBytes (arena.h: larger ones are worth
// giving back, and their faults are a smaller share of a longer call), and at most as many
// bytes as the largest call has handed out; the oldest go first. Kept, a T = 1000, B = 16,
// H = 256 step's 16 MiB gradients, alive through the next call's forward, raised the peak
// memory of `recompute` and `checkpoint = 32` by 16 MiB (73 -> 89, 46 -> 62 MiB).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>

#include "mdl/arena.h"
#include "mdl/kept_blocks.h"

namespace mdl {

class ResultPool {
 public:
  // Memory for a result of `bytes`: a kept block of that size, or a new one. It comes back
  // to the pool when the last owner lets it go.
  std::shared_ptr<Arena> take(std::size_t bytes) {
    const std::size_t size = align_up(std::max<std::size_t>(bytes, 1));
    std::shared_ptr<Arena> block(new Arena, [this](Arena* a) { keep(a); });
    if (std::unique_ptr<Arena> kept = kept_.take(0, size))
      kept->move_to(*block);
    else
      block->reserve(size);
    return block;
  }

  // A call has handed out `bytes` of results so far: the pool may keep that many.
  void handed(std::size_t bytes) { kept_.handed(bytes); }

  std::size_t kept_bytes() { return kept_.kept_bytes(); }

 private:
  void keep(Arena* a) {
    std::unique_ptr<Arena> block(a);
    const std::size_t size = block->size();
    if (size && size < kGiveBackBytes) kept_.keep(0, std::move(block), size);
  }

  KeptBlocks<Arena> kept_;
};

// The process's pool (a module's: each extension module has its own). Never destroyed:
// results handed to Python may outlive everything else at exit.
inline ResultPool& result_pool() {
  static ResultPool* pool = new ResultPool;
  return *pool;
}

}  // namespace mdl
