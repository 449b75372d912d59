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
  Length,           // a sequence length outside [0, steps] (ValueError); `what` is the
                    // lengths' name, then "\x1f" and the inputs of computed ones
  Subscript,        // x[i]: a scalar index outside x's rows (IndexError)
  Assert,           // an `assert` of the model's found an element false (ValueError)
  AssertAt,         // the same in a loop's body: `what` is the text before the innermost
                    // loop's step or trip (`value`), then for it and each outer loop's
                    // (`outer`) a NUL and the text after it (ValueError)
};

// The loops an assert's error numbers the steps or trips of, at most (the innermost and
// kAssertSteps - 1 outer ones; codegen/ops/primitives/checks.py's MAX_STEPS).
constexpr int kAssertSteps = 4;

// Throws the exception of fault `kind`: `value` found at `position` of the data `what`
// names (null: unnamed; codegen/ir/origins.py words it: an input, or the variable and the
// inputs it is computed from), which had to lie within `bound`; for AssertAt, `outer`
// holds the `outers` outer loops' steps, innermost first. In the runtime object
// (src/faults.cpp): generated code only calls it.
[[noreturn]] void raise_fault(FaultKind kind, int64_t value, int64_t position, int64_t bound,
                              const char* what, const int32_t* outer = nullptr,
                              int outers = 0);

// Throws the ValueError of a call whose dims (`names` and their `values`, n of them) make
// a size of the model's values, or what a slice leaves of its axis, `value`, negative:
// "the inputs' dims (T = 1, B = 3) make " and `text` with its {} replaced by `value`, the
// reference's words (codegen/ops/entry.py, refused). In the runtime object (src/faults.cpp).
[[noreturn]] void refuse_dims(const char* const* names, const int64_t* values, int n,
                              const char* text, int64_t value);

}  // namespace mdl
