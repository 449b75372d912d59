// One growable, 64-byte-aligned byte buffer per function: the memory plan assigns every
// value an offset in it once per call shape, so nothing is allocated inside loops.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace mdl {

constexpr std::size_t kAlign = 64;

inline std::size_t align_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() { std::free(data_); }

  // Make room for `bytes`; keeps the buffer when it is already large enough. Contents are
  // not preserved across growth (the plan is recomputed for each call).
  void reserve(std::size_t bytes) {
    if (bytes <= size_) return;
    std::free(data_);
    size_ = align_up(bytes);
    data_ = static_cast<char*>(std::aligned_alloc(kAlign, size_));
    if (!data_) {
      size_ = 0;
      throw std::bad_alloc();
    }
  }

  char* data() { return data_; }
  std::size_t size() const { return size_; }

  // Room for `bytes` (contents not kept), as a pointer: memory sized at run time.
  char* hold(std::size_t bytes) {
    reserve(bytes);
    return data_;
  }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
};

// A growable stack of fixed-size records (a While loop's tape): amortized growth, so the
// number of iterations needs no bound. Records stay in push order; `data()` reads them
// as one array once the loop has ended.
class Tape {
 public:
  void clear() { bytes_.clear(); }
  char* push(std::size_t bytes) {
    std::size_t used = bytes_.size();
    bytes_.resize(used + bytes);
    return bytes_.data() + used;
  }
  char* data() { return bytes_.data(); }
  std::size_t used() const { return bytes_.size(); }

 private:
  std::vector<char> bytes_;
};

}  // namespace mdl
