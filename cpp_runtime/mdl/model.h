// What a generated model hands the runtime: its tables (`ModelSpec`) and its functions,
// which work on a `State` and a `Call`. Generated code and the runtime library (compiled
// once, src/python_module.cpp) both include this header; it knows nothing of Python, so
// a model's build never parses pybind11, nor of the BLAS (mdl/runtime.h), so that the
// Python face is compiled once for every BLAS.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mdl/arena.h"
#include "mdl/device.h"
#include "mdl/error.h"
#include "mdl/init.h"
#include "mdl/result_pool.h"

namespace mdl {

// A dtype as the caller sees it, from the Python dtype table (codegen/ir/dtypes.py): the
// runtime never numbers dtypes itself.
struct DTypeSpec {
  const char* name;   // mdl's name: f32, f64, i32, bool
  const char* numpy;  // NumPy's name: float32, ...
  char kind;          // NumPy's kind character: f, i, b
  int itemsize;
};

// A dim of a declared shape: >= 0 a constant, < 0 the user dim with index -(d + 1),
// unless it is made of others (T*B, T + 1), which its text says (`derived`): an input's
// is checked against ModelSpec::input_shape once the dims it is made of are bound (the
// checker has them bound by the inputs declared before it, or by its own axes before
// it), an output's never.
struct TensorSpec {
  const char* name;
  DTypeSpec dtype;
  int rank;
  const int64_t* dims;
  const char* const* texts;  // where a dim is derived, each derived one's text as the
                             // checker writes it (`T + 1`), the others' nullptr; else nullptr

  bool derived(int i) const { return texts && texts[i]; }
};

struct ParamSpec {
  const char* name;
  int rank;
  const int64_t* shape;
  InitSpec init;
  int64_t offset;
  int grad;            // index among the model's gradients; -1: not trainable
  double l1, l2;       // its scope's regularizer: each penalty's strength, 0 for none
};

// Results smaller than this are copied out of the arena rather than allocated for the call:
// a copy of a few KiB costs less than the allocations and the capsule that hand memory
// over (an LSTM generation step at B = 1, H = 128 has two 512-byte results).
constexpr std::size_t kCopiedResultBytes = 4096;

// One call: input pointers, user dims, and the pointers the function leaves its results at.
// A caller that hands the results to Python sets `fresh`: memory of results that generated
// code asks with `result_memory` is then this call's alone (from the result pool: memory
// of earlier results that Python let go, or new) and handed over uncopied
// (src/model_object.h's `results`), when of kCopiedResultBytes or more; else it is the
// arena slot. Its contents are not zeroed: generated code writes every element.
struct Call {
  std::vector<void*> inputs;
  std::vector<int64_t> dims;
  std::vector<void*> outputs;
  bool fresh = false;
  std::vector<std::shared_ptr<Arena>> memory;  // what result_memory took
  std::size_t handed = 0;                      // their bytes

  // In the runtime object (src/call.cpp): generated code only calls it.
  char* result_memory(char* slot, std::size_t bytes);

  // The allocation of result_memory holding [p, p + bytes), if one does.
  std::shared_ptr<Arena> owner_of(const void* p, std::size_t bytes) const {
    const char* c = static_cast<const char*>(p);
    for (const auto& m : memory)
      if (c >= m->data() && c + bytes <= m->data() + m->size()) return m;
    return nullptr;
  }
};

// A profiled build (`mdlc build --profile`, codegen/backend/profile.py) times each piece of
// its functions' code, a site: a fused loop, a product, a kernel, a loop or branch with
// all it runs (its sites' `parent`), or a whole function (parent -1).
struct ProfileSite {
  const char* function;  // forward, training forward, backward
  int parent;            // the site this one runs inside; -1: none
  const char* where;     // the .mdl source of its first op: file:line:col ("" for none)
  const char* what;      // what runs there: `for`, `matmul x2`, `tanh, sigmoid, mul`
};

// What a site took, summed over the calls of one model.
struct ProfileCount {
  uint64_t runs = 0, nanoseconds = 0;
};

inline uint64_t profile_clock() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// A site has run once since `start` (profile_clock's). Sites of loops run at once are
// distinct sites, each counted by its own thread.
inline void profile_add(ProfileCount& count, uint64_t start) {
  count.nanoseconds += profile_clock() - start;
  ++count.runs;
}

template <class T>
struct State {
  std::vector<T*> param;  // where each parameter lives: this model's store or a sharer's
  std::vector<Arena> arenas;  // one per kind of function (ModelSpec::arenas)
  std::vector<void*> saved;
  std::vector<Tape> tapes;
  std::vector<Arena> packs;  // loop-invariant operands in the BLAS's packed form (blas.h)
  std::vector<Arena> scratch;  // values sized by a dim a function learns as it runs
  std::vector<int64_t> dyn;
  uint64_t seed = 0, dropout_key = 0, calls = 0;
  std::map<uint64_t, uint64_t> drawn;  // per random op (salt): numbers drawn in this call
  void* device = nullptr;  // the device's context for generated code (Device::open)
  std::vector<ProfileCount> profile;  // a profiled build's: one per ModelSpec::profile_sites

  // The first counter of the next `n` numbers of stream `salt` in this call. A stream
  // already drawn from (or opened with n = 0) is only found, never inserted: loops run at
  // once (mdl/concurrent.h) draw from streams of their own, opened before they start.
  uint64_t draw(uint64_t salt, uint64_t n) {
    auto it = drawn.find(salt);
    if (it == drawn.end()) it = drawn.emplace(salt, 0).first;
    const uint64_t first = it->second;
    it->second += n;
    return first;
  }
};

template <class T>
using Function = void (*)(State<T>&, Call&);

// A dim a specialization fixes: user dim `dim` (an index into dim_names) is `value`.
struct FixedDim {
  int dim;
  int64_t value;
};

// The code for one set of dims: generic (no fixed dims) or a specialization.
template <class T>
struct Variant {
  int n_fixed;
  const FixedDim* fixed;
  Function<T> infer, train, backward;  // train and backward are null without `minimize`
};

// Writes the shape of output (gradient, input) `which` from the user dims and the sizes
// known only at run time (none in an input's).
using ShapeFunction = void (*)(int which, const int64_t* dims, const int64_t* dyn,
                               int64_t* shape);

// The value of size `which` of a model's values from the user dims (ModelSpec::size_names).
using SizeFunction = int64_t (*)(int which, const int64_t* dims);

// Everything the runtime knows of a model: constant tables, so that a model's build
// compiles no constructors (a spec of vectors and strings cost half a second).
template <class T>
struct ModelSpec {
  const char* name;
  int n_dims;
  const char* const* dim_names;
  int n_inputs, n_outputs, n_grads, n_params;
  const TensorSpec* inputs;
  const TensorSpec* outputs;
  const TensorSpec* grads;   // what backward returns
  const ParamSpec* params;
  int64_t param_count;
  int saved, tapes, packs, scratch, dynamic, arenas;
  DTypeSpec dtype;             // its float dtype (f32 or f64)
  int n_variants;
  const Variant<T>* variants;  // variants[0] is the generic code
  ShapeFunction output_shape, grad_shape, input_shape;
  int n_cotangents;            // a vjp build: backward takes a cotangent of these outputs
  const int* cotangents;       // (their indexes); an ordinary build: none
  const Device* device;        // where its memory lives and its code runs (host_device, ...)
  const char* doc;             // its class's docstring (codegen/backend/interface.py)
  int n_profile_sites;         // a profiled build's sites (ProfileSite); else 0
  const ProfileSite* profile_sites;
  int n_sizes;                    // sizes the dims could make negative (`T - 30`), and
  const char* const* size_names;  // slices' bounds: a call whose dims make one negative is
                                  // refused with its text (`{}` where its value goes)
  SizeFunction size_value;
  const char* loss_tokens;  // the input the loss is a mean over the tokens of (the
                            // lengths of a minimized cross_entropy), or nullptr
  const char* loss_mean_dims;  // the declared dims the loss is a mean over, joined by commas
                               // ("B", "T,B", "" for none), or nullptr: no such mean
};

}  // namespace mdl
