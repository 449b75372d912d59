// The one call a generated module makes into the runtime library: its PyInit function
// returns `mdl::create_module(...)`, a Python module with one class per model. Only a
// forward declaration of Python's object type is needed here, so generated code parses
// neither Python.h nor pybind11.
#pragma once

#include "mdl/model.h"

struct _object;  // CPython's PyObject

// The module's entry point must be visible although everything else is hidden.
#define MDL_EXPORT extern "C" __attribute__((visibility("default")))

namespace mdl {

// A new module `name` holding a class for each of `specs` (null-terminated); nullptr with
// a Python exception set on failure, as PyInit functions report errors.
_object* create_module(const char* name, const ModelSpec<float>* const* specs);
_object* create_module(const char* name, const ModelSpec<double>* const* specs);

}  // namespace mdl
