// The record of what device code found wrong with a call's data (mdl/faults.h's kinds): the
// host's Context (mdl/cuda/context.h) holds it in device memory, kernels fill it in
// (mdl/cuda/device.h's report), and src/cuda_device.cu throws it after the function.
#pragma once

#include <cstdint>

namespace mdl {
namespace cuda {

// A host string (an input's name, a literal of the generated code) that device code carries
// into a fault record without reading it: a value to the launch, not a pointer to check.
struct HostText {
  const char* text;
};

// What device code found wrong with the caller's data (mdl/faults.h); the first fault of
// a call wins. `what` is the host string naming the input (a literal of the generated
// code), carried through device memory untouched.
struct Fault {
  int kind;          // FaultKind; 0 while nothing was found
  int64_t value;     // the bad id, target or length
  int64_t position;  // its flat position in its input
  int64_t bound;     // the rows, classes or steps it had to lie within
  const char* what;  // the input's name, as the CPU's kernels word it
};

}  // namespace cuda
}  // namespace mdl
