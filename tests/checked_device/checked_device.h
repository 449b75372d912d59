// A stand-in GPU for the tests of the runtime's device paths (tests/test_device_runtime.py):
// an mdl::Device whose "device memory" is host memory it allocated itself, so that a model
// whose spec names it runs the CPU target's generated code, while every copy, update and
// release the runtime makes through the table is checked for the side each pointer lies
// on. A violation throws std::logic_error (a RuntimeError in Python), so the test fails.
#pragma once

#include <vector>

#include "mdl/device.h"

namespace mdl {

extern const Device checked_device;

// Called first by every function of a model on the checked device (the test's target
// emits it): each of `pointers` (the call's inputs, the parameters) must be the device's
// memory, as a GPU's code needs it; else std::logic_error naming `what`.
void expect_on_device(const void* const* pointers, std::size_t count, const char* what);

template <class T>
void expect_on_device(const std::vector<T*>& pointers, const char* what) {
  expect_on_device(reinterpret_cast<const void* const*>(pointers.data()), pointers.size(),
                   what);
}

}  // namespace mdl
