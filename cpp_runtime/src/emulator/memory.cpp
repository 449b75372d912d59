// The emulated device's memory: a table of allocations, each its own mapping that ends
// at a guard page, so an access past its end faults where it happens (scheduler.cpp turns
// the fault into a report naming the kernel and the allocation).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

#include "emulator.h"

namespace mdl {
namespace emulated {
namespace {

struct Allocation {
  char* data;         // what cudaMalloc returned
  std::size_t bytes;  // what it asked for
  char* mapping;      // the whole mapping: slack, data, then the guard page
  std::size_t mapped;
};

std::size_t page() {
  static const std::size_t size = std::size_t(sysconf(_SC_PAGESIZE));
  return size;
}

// The largest power of two dividing `bytes`, up to 16: an array of any element type T fits
// it (its size is a multiple of sizeof(T)), and the data can end right at the guard page.
std::size_t alignment(std::size_t bytes) {
  std::size_t a = 1;
  while (a < 16 && bytes % (2 * a) == 0) a *= 2;
  return a;
}

std::mutex lock;
std::map<const char*, Allocation> table;  // by data
std::size_t in_use = 0;                   // the pages of every allocation in the table
std::map<const char*, Allocation> freed;  // the last few freed, for reports
uint64_t freed_count = 0;

// The allocation whose data holds `p` (or ends at it), if any.
const Allocation* holding(const void* pointer) {
  auto p = static_cast<const char*>(pointer);
  auto it = table.upper_bound(p);
  if (it == table.begin()) return nullptr;
  --it;
  return p <= it->second.data + it->second.bytes ? &it->second : nullptr;
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

std::string where_in(const Allocation& a, const void* pointer) {
  const auto offset = static_cast<const char*>(pointer) - a.data;
  return hex(pointer) + " (byte " + std::to_string(offset) + " of a " + std::to_string(a.bytes) +
         "-byte device allocation)";
}

}  // namespace

std::size_t capacity() {
  const std::size_t set = settings().memory;
  if (set) return set;
  return std::size_t(sysconf(_SC_PHYS_PAGES)) / 2 * page();
}

std::size_t mapped_size(std::size_t bytes) {
  return (bytes + page() - 1) / page() * page() + page();
}

std::size_t memory_in_use() {
  std::lock_guard<std::mutex> hold(lock);
  return in_use;
}

// Poisoning touches every page: on a machine that overcommits, an allocation larger than
// its memory would succeed and then have the kernel kill the process, where a GPU refuses
// it and the runtime raises MemoryError. So the device's memory is counted.
void* allocate(std::size_t bytes, std::size_t limit) {
  const std::size_t mapped = mapped_size(bytes), data = mapped - page();
  if (data < bytes || data > limit) return nullptr;
  {
    std::lock_guard<std::mutex> hold(lock);
    if (in_use + mapped > limit) return nullptr;
    in_use += mapped;  // reserved before the pages are touched
  }
  auto give_back = [mapped] {
    std::lock_guard<std::mutex> hold(lock);
    in_use -= mapped;
    return nullptr;
  };
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return give_back();
  char* mapping = static_cast<char*>(m);
  if (mprotect(mapping + data, page(), PROT_NONE) != 0) {
    munmap(m, mapped);
    return give_back();
  }
  const std::size_t rounded = (bytes + alignment(bytes) - 1) / alignment(bytes) * alignment(bytes);
  char* start = mapping + data - rounded;
  std::memset(start, 0xff, bytes);  // what a kernel reads of memory no one wrote
  std::lock_guard<std::mutex> hold(lock);
  table[start] = Allocation{start, bytes, mapping, mapped};
  return start;
}

bool release(void* pointer) {
  std::lock_guard<std::mutex> hold(lock);
  auto it = table.find(static_cast<const char*>(pointer));
  if (it == table.end()) return false;
  Allocation a = it->second;
  table.erase(it);
  munmap(a.mapping, a.mapped);
  in_use -= a.mapped;
  freed[a.data] = a;
  if (++freed_count % 4096 == 0) freed.clear();  // keeps the record small
  return true;
}

void release_all() {
  std::lock_guard<std::mutex> hold(lock);
  for (auto& [data, a] : table) munmap(a.mapping, a.mapped);
  table.clear();
  in_use = 0;
  freed.clear();
}

bool on_device(const void* pointer, std::size_t bytes) {
  std::lock_guard<std::mutex> hold(lock);
  const Allocation* a = holding(pointer);
  return a && static_cast<const char*>(pointer) + bytes <= a->data + a->bytes;
}

std::string describe(const void* pointer) {
  if (!pointer) return "a null pointer";
  std::lock_guard<std::mutex> hold(lock);
  if (const Allocation* a = holding(pointer)) return where_in(*a, pointer);
  return hex(pointer) + " (not device memory: a host pointer, or freed)";
}

std::string describe_fault(const void* address) {
  auto p = static_cast<const char*>(address);
  std::lock_guard<std::mutex> hold(lock);
  auto after = table.upper_bound(p);
  if (after != table.begin()) {
    const Allocation& a = std::prev(after)->second;
    if (p >= a.data + a.bytes && p < a.mapping + a.mapped)
      return hex(address) + ", " + std::to_string(p - a.data - a.bytes) +
             " bytes past the end of a " + std::to_string(a.bytes) + "-byte device allocation";
  }
  auto gone = freed.upper_bound(p);
  if (gone != freed.begin()) {
    const Allocation& a = std::prev(gone)->second;
    if (p >= a.mapping && p < a.mapping + a.mapped)
      return hex(address) + ", inside a " + std::to_string(a.bytes) +
             "-byte device allocation that was freed";
  }
  return hex(address) + ", outside every device allocation";
}

}  // namespace emulated
}  // namespace mdl
