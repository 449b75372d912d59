// Errors raised by generated code and the runtime; the Python glue maps them to exceptions.
#pragma once

#include <cstddef>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>

namespace mdl {

// A failure inside native code (bad index in a gather, ...): RuntimeError in Python.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A bad argument from the caller (wrong dims, ...): ValueError in Python.
struct ValueError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An index in the caller's data outside what it indexes (a token id past the embedding
// table, a target past the classes): IndexError in Python, as NumPy and PyTorch raise.
struct IndexError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Memory the machine would not give (MemoryError in Python, whose text pybind11 takes
// from what()): how much a call asked for, where std::bad_alloc said only its own name.
class OutOfMemory : public std::bad_alloc {
 public:
  // `memory`: whose ("memory", "the GPU's memory")
  explicit OutOfMemory(std::size_t bytes, const char* memory = "memory") {
    std::snprintf(text_, sizeof text_,
                  "this call needs %.3g GB more of %s (%zu bytes) at these sizes than this "
                  "machine would give: give smaller inputs",
                  double(bytes) / 1e9, memory, bytes);
  }
  // Where the size is not known (a CUDA call that answered out of memory): `text` whole.
  static OutOfMemory saying(const std::string& text) {
    OutOfMemory e(0);
    std::snprintf(e.text_, sizeof e.text_, "%s", text.c_str());
    return e;
  }
  const char* what() const noexcept override { return text_; }

 private:
  char text_[200];
};

}  // namespace mdl
