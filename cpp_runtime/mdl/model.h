// What a generated model hands the runtime: its tables (`ModelSpec`) and its functions,
// which work on a `State` and a `Call`. Generated code and the runtime library (compiled
// once, src/python_module.cpp) both include this header; it knows nothing of Python, so
// a model's build never parses pybind11.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mdl/runtime.h"

namespace mdl {

// A dtype as the caller sees it, from the Python dtype table (codegen/dtypes.py): the
// runtime never numbers dtypes itself.
struct DTypeSpec {
  const char* name;   // mdl's name: f32, f64, i32, bool
  const char* numpy;  // NumPy's name: float32, ...
  char kind;          // NumPy's kind character: f, i, b
  int itemsize;
};

// A dim of a declared shape: >= 0 a constant, < 0 the user dim with index -(d + 1).
struct TensorSpec {
  std::string name;
  DTypeSpec dtype;
  std::vector<int64_t> dims;
};

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  InitSpec init;
  int64_t offset;
};

// One call: input pointers, user dims, and the pointers the function leaves its results at.
struct Call {
  std::vector<void*> inputs;
  std::vector<int64_t> dims;
  std::vector<void*> outputs;
};

template <class T>
struct State {
  std::vector<T> params;
  Arena arena_infer, arena_fwd, arena_bwd;
  std::vector<void*> saved;
  std::vector<Tape> tapes;
  std::vector<int64_t> dyn;
  uint64_t seed = 0, dropout_key = 0, calls = 0;
  std::map<uint64_t, uint64_t> drawn;  // per random op (salt): numbers drawn in this call

  // The first counter of the next `n` numbers of stream `salt` in this call.
  uint64_t draw(uint64_t salt, uint64_t n) {
    uint64_t& used = drawn[salt];
    uint64_t first = used;
    used += n;
    return first;
  }
};

template <class T>
using Function = void (*)(State<T>&, Call&);

// The code for one set of dims: generic (no fixed dims) or a specialization.
template <class T>
struct Variant {
  std::map<std::string, int64_t> fixed;  // user dim name -> value
  Function<T> infer = nullptr, train = nullptr, backward = nullptr;
};

using ShapeFunction = std::vector<int64_t> (*)(int which, const int64_t* dims, const int64_t* dyn);

template <class T>
struct ModelSpec {
  std::string name;
  std::vector<std::string> dim_names;
  std::vector<TensorSpec> inputs, outputs, grads;   // grads: what backward returns
  std::vector<ParamSpec> params;
  int64_t param_count = 0;
  int saved = 0, tapes = 0, dynamic = 0;
  std::vector<Variant<T>> variants;                  // variants[0] is the generic code
  // Shapes of outputs and grads from the dims (user dims, then run-time sizes).
  ShapeFunction output_shape = nullptr, grad_shape = nullptr;
};

}  // namespace mdl
