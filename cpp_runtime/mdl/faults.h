// What a kernel finds wrong with the caller's data (a token id past the table, a target
// past the classes), and the exception that says so, worded once for every target: the
// CPU's kernels (mdl/kernels.h) throw it where they find it; the cuda target's device code
// records it (mdl/cuda/context.h's Fault) and src/cuda_device.cu throws it after the call.
#pragma once

#include <cstdint>

namespace mdl {

enum class FaultKind : int {
  None = 0,
  GatherIndex,      // gather: an id outside the table's rows (IndexError)
  Target,           // cross_entropy: a target outside the classes (IndexError)
  ScatterIndex,     // scatter_add: an id outside the rows it adds into (IndexError)
  Length,           // a sequence length outside [0, steps] (ValueError)
  Subscript,        // x[i]: a scalar index outside x's rows (IndexError)
  Assert,           // an `assert` of the model's found an element false (ValueError)
  AssertAt,         // the same in a loop's body: `what` is the text before the step or
                    // trip (`value`), a NUL, and the text after it (ValueError)
};

// Throws the exception of fault `kind`: `value` found at `position` of the data `what`
// names (null: unnamed; codegen/ir/origins.py words it: an input, or the variable and the
// inputs it is computed from), which had to lie within `bound`. In the runtime object
// (src/faults.cpp): generated code only calls it.
[[noreturn]] void raise_fault(FaultKind kind, int64_t value, int64_t position, int64_t bound,
                              const char* what);

}  // namespace mdl
