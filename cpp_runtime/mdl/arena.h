// One growable, 64-byte-aligned byte buffer per function: the memory plan assigns every
// value an offset in it once per call shape, so nothing is allocated inside loops.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

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

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
};

// A growable stack of fixed-size records (a While loop's tape): amortized growth, so the
// number of iterations needs no bound.
class Tape {
 public:
  void clear() { used_ = 0; }
  char* push(std::size_t bytes) {
    if (used_ + bytes > buffer_.size()) buffer_.reserve(2 * (used_ + bytes));
    char* top = buffer_.data() + used_;
    used_ += bytes;
    return top;
  }
  char* pop(std::size_t bytes) {
    used_ -= bytes;
    return buffer_.data() + used_;
  }
  std::size_t used() const { return used_; }

 private:
  // Growth keeps the records: copy into a larger buffer.
  struct Buffer {
    char* ptr = nullptr;
    std::size_t cap = 0;
    ~Buffer() { std::free(ptr); }
    std::size_t size() const { return cap; }
    char* data() { return ptr; }
    void reserve(std::size_t bytes) {
      char* grown = static_cast<char*>(std::aligned_alloc(kAlign, align_up(bytes)));
      if (!grown) throw std::bad_alloc();
      if (ptr) std::memcpy(grown, ptr, cap);
      std::free(ptr);
      ptr = grown;
      cap = align_up(bytes);
    }
  } buffer_;
  std::size_t used_ = 0;
};

}  // namespace mdl
