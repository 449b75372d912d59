// The device memory of DeviceArrays (a device model's outputs left on the device, and
// to_device's copies), kept when Python lets an array go, for a later array of the same
// size. New device memory is a cudaMalloc and a zeroing memset waited for, and freeing it
// (cudaFree) waits for the whole device: a generation step whose outputs stayed on an H100
// took 80 us a call, its GPU busy for 12. The pool keeps at most as many bytes as the
// largest call has handed out (as mdl/result_pool.h does for the host's results), the
// oldest blocks going first.
//
// A block that went out through DLPack is never kept: its consumer (PyTorch, on a stream of
// its own) may still be reading it when it lets it go, and only cudaFree waits for that.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>

#include "mdl/device.h"

namespace mdl {

// One DeviceArray's memory: zeroed when new, not when a kept block is taken again (every
// taker writes all of it).
struct DeviceBlock {
  Buffer<char> buffer;
  bool exported = false;  // handed to a DLPack consumer

  char* data() const { return buffer.data(); }
  std::size_t size() const { return std::size_t(buffer.size()); }
};

class DevicePool {
 public:
  // Memory for `bytes` on `device`: a kept block of that size, or a new one. It comes back
  // to the pool when the last owner lets it go.
  std::shared_ptr<DeviceBlock> take(const Device* device, std::size_t bytes) {
    auto* made = new DeviceBlock;
    std::shared_ptr<DeviceBlock> block(made, [this, device](DeviceBlock* b) { keep(device, b); });
    if (!bytes) return block;
    {
      std::lock_guard<std::mutex> hold(lock_);
      auto it = std::find_if(free_.begin(), free_.end(), [&](const Kept& k) {
        return k.device == device && k.block->size() == bytes;
      });
      if (it != free_.end()) {
        made->buffer = std::move(it->block->buffer);
        free_.erase(it);
        bytes_ -= bytes;
        return block;
      }
    }
    made->buffer = Buffer<char>(device, int64_t(bytes));
    return block;
  }

  // A call has handed out `bytes` of DeviceArrays: the pool may keep that many.
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
    const Device* device;
    std::unique_ptr<DeviceBlock> block;
  };

  void keep(const Device* device, DeviceBlock* b) {
    std::unique_ptr<DeviceBlock> block(b);  // freed here unless kept (after the lock is let go)
    std::lock_guard<std::mutex> hold(lock_);
    if (block->exported || block->size() == 0 || block->size() > cap_) return;
    while (bytes_ + block->size() > cap_) {
      bytes_ -= free_.front().block->size();
      free_.pop_front();
    }
    bytes_ += block->size();
    free_.push_back({device, std::move(block)});
  }

  std::mutex lock_;
  std::deque<Kept> free_;  // oldest first
  std::size_t bytes_ = 0;  // in free_
  std::size_t cap_ = 0;
};

// The process's pool (a module's: each extension module has its own). Never destroyed:
// DeviceArrays handed to Python may outlive everything else at exit.
inline DevicePool& device_pool() {
  static DevicePool* pool = new DevicePool;
  return *pool;
}

}  // namespace mdl
