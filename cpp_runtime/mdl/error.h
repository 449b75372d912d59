// Errors raised by generated code and the runtime; the Python glue maps them to exceptions.
#pragma once

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

}  // namespace mdl
