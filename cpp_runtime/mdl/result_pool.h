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
#include <deque>
#include <memory>
#include <mutex>

#include "mdl/arena.h"

namespace mdl {

class ResultPool {
 public:
  // Memory for a result of `bytes`: a kept block of that size, or a new one. It comes back
  // to the pool when the last owner lets it go.
  std::shared_ptr<Arena> take(std::size_t bytes) {
    const std::size_t size = align_up(std::max<std::size_t>(bytes, 1));
    std::shared_ptr<Arena> block(new Arena, [this](Arena* a) { keep(a); });
    {
      std::lock_guard<std::mutex> hold(lock_);
      auto it = std::find_if(free_.begin(), free_.end(),
                             [&](const auto& a) { return a->size() == size; });
      if (it != free_.end()) {
        (*it)->move_to(*block);
        free_.erase(it);
        bytes_ -= size;
        return block;
      }
    }
    block->reserve(size);
    return block;
  }

  // A call has handed out `bytes` of results so far: the pool may keep that many.
  void handed(std::size_t bytes) {
    std::lock_guard<std::mutex> hold(lock_);
    cap_ = std::max(cap_, bytes);
  }

  std::size_t kept_bytes() {
    std::lock_guard<std::mutex> hold(lock_);
    return bytes_;
  }

 private:
  void keep(Arena* a) {
    std::unique_ptr<Arena> block(a);  // freed here unless kept (after the lock is let go)
    std::lock_guard<std::mutex> hold(lock_);
    if (block->size() == 0 || block->size() >= kGiveBackBytes || block->size() > cap_) return;
    while (bytes_ + block->size() > cap_) {
      bytes_ -= free_.front()->size();
      free_.pop_front();
    }
    bytes_ += block->size();
    free_.push_back(std::move(block));
  }

  std::mutex lock_;
  std::deque<std::unique_ptr<Arena>> free_;  // oldest first
  std::size_t bytes_ = 0;                    // in free_
  std::size_t cap_ = 0;
};

// The process's pool (a module's: each extension module has its own). Never destroyed:
// results handed to Python may outlive everything else at exit.
inline ResultPool& result_pool() {
  static ResultPool* pool = new ResultPool;
  return *pool;
}

}  // namespace mdl
