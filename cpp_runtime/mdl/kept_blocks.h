// Blocks of memory kept for reuse: what the two pools of results share (mdl/result_pool.h,
// the host's results; src/device_pool.h, DeviceArrays in a device's memory). A block its
// last owner let go is kept under a key (its size, and where it lies) for a later taker of
// the same key, and the pool holds at most as many bytes as the largest call has handed
// out: to make room the oldest blocks go first, and a block larger than that goes at once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace mdl {

template <class Block, class Where = int>
class KeptBlocks {
 public:
  // A kept block of `size` bytes in `where`, or null.
  std::unique_ptr<Block> take(const Where& where, std::size_t size) {
    std::lock_guard<std::mutex> hold(lock_);
    auto it = std::find_if(free_.begin(), free_.end(), [&](const Kept& k) {
      return k.size == size && k.where == where;
    });
    if (it == free_.end()) return nullptr;
    std::unique_ptr<Block> block = std::move(it->block);
    free_.erase(it);
    bytes_ -= size;
    return block;
  }

  // Keeps `block` (of `size` bytes, in `where`), or frees it where it is over the bound.
  void keep(const Where& where, std::unique_ptr<Block> block, std::size_t size) {
    std::vector<std::unique_ptr<Block>> freed;  // freed after the lock is let go
    std::lock_guard<std::mutex> hold(lock_);
    if (size > cap_) {
      freed.push_back(std::move(block));
      return;
    }
    while (bytes_ + size > cap_) {
      bytes_ -= free_.front().size;
      freed.push_back(std::move(free_.front().block));
      free_.pop_front();
    }
    bytes_ += size;
    free_.push_back({where, size, std::move(block)});
  }

  // A call has handed out `bytes` of results: the pool may keep that many.
  void handed(std::size_t bytes) {
    std::lock_guard<std::mutex> hold(lock_);
    cap_ = std::max(cap_, bytes);
  }

  std::size_t kept_bytes() {
    std::lock_guard<std::mutex> hold(lock_);
    return bytes_;
  }

 private:
  struct Kept {
    Where where;
    std::size_t size;
    std::unique_ptr<Block> block;
  };

  std::mutex lock_;
  std::deque<Kept> free_;  // oldest first
  std::size_t bytes_ = 0;  // in free_
  std::size_t cap_ = 0;
};

}  // namespace mdl
