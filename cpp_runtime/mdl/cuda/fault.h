// The record of what device code found wrong with a call's data (mdl/faults.h's kinds): the
// host's Context (mdl/cuda/context.h) holds it in device memory, kernels fill it in
// (mdl/cuda/device.h's report), and src/cuda_device.cu throws it after the function.
#pragma once

#include <cstdint>

#include "mdl/faults.h"

namespace mdl {
namespace cuda {

// A host string (an input's name, a literal of the generated code) that device code carries
// into a fault record without reading it: a value to the launch, not a pointer to check.
struct HostText {
  const char* text;
};

// What device code found wrong with the caller's data (mdl/faults.h); the first launch of
// a call to find a fault keeps the record, and of that launch's reports the one at the
// least position, the element the CPU's loop meets first (mdl/cuda/device.h's report).
// `what` is the host string naming the input (a literal of the generated code), carried
// through device memory untouched.
struct Fault {
  int kind;          // FaultKind; 0 while nothing was found, -1 while it is being written
  int64_t value;     // the bad id, target or length
  int64_t position;  // its flat position in its input
  int64_t bound;     // the rows, classes or steps it had to lie within
  const char* what;  // the input's name, as the CPU's kernels word it
  unsigned long long launch;  // the grid that found it (a GPU's %gridid)
  // of that grid's reports at positions below 2^32 - 1, the one at the least: the
  // complement of (position << 32 | the value's 32 bits), so that atomicMax keeps it;
  // 0: none (the other fields then hold the fault)
  unsigned long long least;
  int outers;                          // AssertAt: the outer loops' steps, innermost first
  int32_t outer[kAssertSteps - 1];
};

// The position and value `least` holds, where it holds one (Fault::least).
inline void least_report(const Fault& f, int64_t* value, int64_t* position) {
  if (!f.least) return;
  const unsigned long long key = ~f.least;
  *position = int64_t(key >> 32);
  *value = int32_t(uint32_t(key & 0xffffffffu));
}

}  // namespace cuda
}  // namespace mdl
