// The stand-in device of checked_device.h: blocks from calloc, remembered by address, and
// every pointer the runtime hands the table checked against them.
#include "checked_device.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>

namespace mdl {
namespace {

std::mutex blocks_lock;
std::map<const char*, std::size_t> blocks;  // device memory: start -> bytes
constexpr int kContext = 0x6d646c;         // what a context of this device holds

// Whether [p, p + bytes) lies inside one device block.
bool on_device(const void* p, std::size_t bytes) {
  std::lock_guard<std::mutex> guard(blocks_lock);
  auto at = static_cast<const char*>(p);
  auto it = blocks.upper_bound(at);
  if (it == blocks.begin()) return false;
  --it;
  return at >= it->first && at + bytes <= it->first + it->second;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::logic_error("checked device: " + what);
}

void check_context(void* context, const char* call) {
  check(context && *static_cast<int*>(context) == kContext,
        std::string(call) + " got no context of this device");
}

void require() {}
void* open() { return new int(kContext); }
void close(void* context) {
  check_context(context, "close");
  delete static_cast<int*>(context);
}
void finish(void* context) { check_context(context, "finish"); }

void* allocate(std::size_t bytes) {
  if (!bytes) return nullptr;
  char* p = static_cast<char*>(std::calloc(bytes, 1));
  if (!p) throw std::bad_alloc();
  std::lock_guard<std::mutex> guard(blocks_lock);
  blocks[p] = bytes;
  return p;
}

void release(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> guard(blocks_lock);
    check(blocks.erase(static_cast<char*>(p)) == 1, "release of memory it did not allocate");
  }
  std::free(p);
}

void upload(void* context, void* dst, const void* src, std::size_t bytes) {
  check_context(context, "upload");
  check(on_device(dst, bytes), "upload into memory that is not the device's");
  check(!on_device(src, 1), "upload from the device's memory");
  std::memcpy(dst, src, bytes);
}

void download(void* context, void* dst, const void* src, std::size_t bytes) {
  if (context) check_context(context, "download");  // null: a DeviceArray's numpy()
  check(!on_device(dst, 1), "download into the device's memory");
  std::memcpy(dst, src, bytes);
}

void copy(void* context, void* dst, const void* src, std::size_t bytes) {
  check_context(context, "copy");
  // `src` is a result in the generated code's arena, which the CPU target (the code models
  // on this device run) keeps in host memory: only where it goes is checked
  check(on_device(dst, bytes), "a copy on the device into other memory");
  std::memcpy(dst, src, bytes);
}

template <class T>
void update(void* context, const UpdateStep& s, T* w, const T* g, T* first, T* second,
            int64_t n) {
  check_context(context, "update");
  const std::size_t bytes = n * sizeof(T);
  check(on_device(w, bytes), "an optimizer step of weights not in the device's memory");
  check(on_device(first, bytes) && (!second || on_device(second, bytes)),
        "an optimizer step with its state not in the device's memory");
  T unused = 0;  // SGD's second moment
  for (int64_t k = 0; k < n; ++k)
    update_element(s, w[k], g[k], first[k], second ? second[k] : unused);
}

template <class T>
double sum_squares(void* context, const T* g, int64_t n) {
  check_context(context, "sum_squares");
  double total = 0;
  for (int64_t k = 0; k < n; ++k) total += double(g[k]) * g[k];
  return total;
}

void synchronize() {}

}  // namespace

void expect_on_device(const void* const* pointers, std::size_t count, const char* what) {
  for (std::size_t i = 0; i < count; ++i)
    check(!pointers[i] || on_device(pointers[i], 1),
          std::string(what) + " " + std::to_string(i) + " reached generated code in host memory");
}

// Its memory is the host's: DLPack's kDLCPU (1), so NumPy reads the arrays it hands out.
extern const Device checked_device = {"checked", 1, require, open, close, finish, allocate,
                                      release, upload, download, copy, update<float>,
                                      update<double>, sum_squares<float>, sum_squares<double>,
                                      synchronize};

}  // namespace mdl
