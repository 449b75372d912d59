// The device memory of DeviceArrays (a device model's outputs left on the device, and
// to_device's copies), kept when Python lets an array go, for a later array of the same
// size. New device memory is a cudaMalloc and a zeroing memset waited for, and freeing it
// (cudaFree) waits for the whole device: a generation step whose outputs stayed on an H100
// took 80 us a call, its GPU busy for 12. The pool keeps at most as many bytes as the
// largest call has handed out, the oldest blocks going first (mdl/kept_blocks.h, as the
// host's results' pool, mdl/result_pool.h).
//
// A block that went out through DLPack is never kept: its consumer (PyTorch, on a stream of
// its own) may still be reading it when it lets it go, and only cudaFree waits for that.
#pragma once

#include <cstddef>
#include <memory>

#include "mdl/device.h"
#include "mdl/kept_blocks.h"

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
    if (std::unique_ptr<DeviceBlock> kept = kept_.take(device, bytes))
      made->buffer = std::move(kept->buffer);
    else
      made->buffer = Buffer<char>(device, int64_t(bytes));
    return block;
  }

  // A call has handed out `bytes` of DeviceArrays: the pool may keep that many.
  void handed(std::size_t bytes) { kept_.handed(bytes); }

  std::size_t kept_bytes() { return kept_.kept_bytes(); }

 private:
  void keep(const Device* device, DeviceBlock* b) {
    std::unique_ptr<DeviceBlock> block(b);
    const std::size_t size = block->size();
    if (size && !block->exported) kept_.keep(device, std::move(block), size);
  }

  KeptBlocks<DeviceBlock, const Device*> kept_;
};

// The process's pool (a module's: each extension module has its own). Never destroyed:
// DeviceArrays handed to Python may outlive everything else at exit.
inline DevicePool& device_pool() {
  static DevicePool* pool = new DevicePool;
  return *pool;
}

}  // namespace mdl
