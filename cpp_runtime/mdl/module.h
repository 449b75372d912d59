// The Python face of a generated model: one class per model with `params` (live NumPy
// views), `forward`, `backward`, `specializations`. The generated code supplies a
// `ModelSpec` (tables and function pointers); everything generic lives here.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "mdl/runtime.h"

namespace mdl {

namespace py = pybind11;

enum DType { F32 = 0, F64 = 1, I32 = 2, BOOL = 3 };

inline const char* dtype_name(int d) {
  static const char* names[] = {"f32", "f64", "i32", "bool"};
  return names[d];
}

// A dim of a declared shape: >= 0 a constant, < 0 the user dim with index -(d + 1).
struct TensorSpec {
  std::string name;
  int dtype;
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
  std::vector<int64_t> (*output_shape)(int which, const int64_t* dims, const int64_t* dyn);
  std::vector<int64_t> (*grad_shape)(int which, const int64_t* dims, const int64_t* dyn);
};

inline int dtype_of(const py::array& a) {
  char kind = a.dtype().kind();
  auto size = a.dtype().itemsize();
  if (kind == 'f' && size == 4) return F32;
  if (kind == 'f' && size == 8) return F64;
  if (kind == 'i' && size == 4) return I32;
  if (kind == 'b') return BOOL;
  return -1;
}

inline py::dtype numpy_dtype(int d) {
  static const char* names[] = {"float32", "float64", "int32", "bool"};
  return py::dtype(names[d]);
}

inline std::string type_text(const TensorSpec& s, const std::vector<std::string>& dim_names) {
  std::string out = dtype_name(s.dtype);
  if (s.dims.empty()) return out;
  out += "[";
  for (std::size_t i = 0; i < s.dims.size(); ++i) {
    if (i) out += ", ";
    out += s.dims[i] >= 0 ? std::to_string(s.dims[i]) : dim_names[-s.dims[i] - 1];
  }
  return out + "]";
}

inline std::string shape_text(const py::array& a) {
  std::string out = std::string(py::str(a.dtype())) + "[";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) out += (i ? ", " : "") + std::to_string(a.shape(i));
  return out + "]";
}

// `Tag` makes each model of a module its own C++ type (pybind11 registers one class
// per type).
template <class T, class Tag>
class Model {
 public:
  Model(const ModelSpec<T>* spec, uint64_t seed) : spec_(spec) {
    state_.seed = seed;
    state_.params.assign(spec->param_count, T(0));
    state_.saved.assign(spec->saved, nullptr);
    state_.tapes.resize(spec->tapes);
    state_.dyn.assign(spec->dynamic, 0);
    for (std::size_t i = 0; i < spec->params.size(); ++i) {
      const ParamSpec& p = spec->params[i];
      initialize(state_.params.data() + p.offset, p.shape, p.init, seed, i);
    }
  }

  py::dict params(py::object self) {
    py::dict out;
    for (const ParamSpec& p : spec_->params) {
      std::vector<py::ssize_t> shape(p.shape.begin(), p.shape.end());
      out[py::str(p.name)] = py::array_t<T>(shape, state_.params.data() + p.offset, self);
    }
    return out;
  }

  py::dict forward(py::kwargs kwargs) {
    bool training = false;
    std::vector<py::array> keep;  // owns converted inputs during the call
    Call call;
    for (auto item : kwargs) {
      std::string key = py::str(item.first);
      if (key == "training") {
        training = py::cast<bool>(item.second);
        continue;
      }
      bool known = false;
      for (const TensorSpec& s : spec_->inputs) known |= s.name == key;
      if (!known) throw py::type_error("unknown input '" + key + "' (" + input_list() + ")");
    }
    call.dims.assign(spec_->dim_names.size(), -1);
    for (const TensorSpec& s : spec_->inputs) {
      if (!kwargs.contains(s.name.c_str()))
        throw py::type_error("missing input '" + s.name + "' (" + input_list() + ")");
      keep.push_back(convert(s, kwargs[s.name.c_str()], call.dims));
      call.inputs.push_back(const_cast<void*>(keep.back().data()));
    }
    const Variant<T>& v = choose(call.dims);
    call.outputs.assign(spec_->outputs.size() + spec_->saved, nullptr);
    py::dict out;
    // The lock is taken without the GIL and kept until the results are copied out of the
    // arena, so another thread's call cannot overwrite them first.
    std::unique_lock<std::mutex> guard(lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
      if (training && !v.train) {
        throw std::runtime_error("model " + spec_->name + " minimizes no output: forward("
                                 "training=True) and backward() need `minimize NAME`");
      } else if (training) {
        state_.dropout_key = derive(state_.seed, ++state_.calls);
        state_.drawn.clear();
        v.train(state_, call);
        trained_ = &v;
        dims_ = call.dims;
      } else {
        v.infer(state_, call);
      }
    }
    for (std::size_t k = 0; k < spec_->outputs.size(); ++k)
      out[py::str(spec_->outputs[k].name)] = result(spec_->output_shape(int(k), call.dims.data(),
                                                                       state_.dyn.data()),
                                                    spec_->outputs[k].dtype, call.outputs[k]);
    return out;
  }

  py::dict backward() {
    Call call;
    std::unique_lock<std::mutex> guard(lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
      if (!trained_)
        throw std::runtime_error("backward() needs a forward(..., training=True) first");
      call.dims = dims_;
      call.outputs.assign(spec_->grads.size(), nullptr);
      trained_->backward(state_, call);
    }
    py::dict out;
    for (std::size_t k = 0; k < spec_->grads.size(); ++k)
      out[py::str(spec_->grads[k].name)] = result(spec_->grad_shape(int(k), call.dims.data(),
                                                                    state_.dyn.data()),
                                                  spec_->grads[k].dtype, call.outputs[k]);
    return out;
  }

  // Training calls so far: the next one draws dropout masks from stream calls + 1.
  uint64_t rng_calls() const { return state_.calls; }
  void set_rng_calls(uint64_t n) { state_.calls = n; }

  py::list specializations() const {
    py::list out;
    for (std::size_t i = 1; i < spec_->variants.size(); ++i) out.append(spec_->variants[i].fixed);
    return out;
  }

 private:
  std::string input_list() const {
    std::string out = "inputs are ";
    for (std::size_t i = 0; i < spec_->inputs.size(); ++i)
      out += (i ? ", " : "") + spec_->inputs[i].name;
    return out;
  }

  // A NumPy array of the declared dtype, rank and dims, C-contiguous; binds user dims.
  py::array convert(const TensorSpec& s, py::handle obj, std::vector<int64_t>& dims) {
    py::object arr = py::reinterpret_borrow<py::object>(obj);
    if (!py::isinstance<py::array>(arr)) {
      py::module_ np = py::module_::import("numpy");
      arr = py::hasattr(arr, "__dlpack__") ? np.attr("from_dlpack")(arr)
                                           : np.attr("asarray")(arr);
    }
    py::array a = py::reinterpret_borrow<py::array>(arr);
    // the message is built only when there is something to say
    auto bad = [&](const std::string& why) {
      return py::value_error("input '" + s.name + "': expected " +
                             type_text(s, spec_->dim_names) + ", got " + shape_text(a) + " (" +
                             why + ")");
    };
    if (dtype_of(a) != s.dtype) throw bad("wrong dtype");
    if (a.ndim() != py::ssize_t(s.dims.size())) throw bad("wrong rank");
    for (std::size_t i = 0; i < s.dims.size(); ++i) {
      int64_t got = a.shape(i), d = s.dims[i];
      if (d >= 0 && got != d)
        throw bad("dim " + std::to_string(i) + " must be " + std::to_string(d));
      if (d < 0) {
        int64_t& bound = dims[-d - 1];
        if (bound >= 0 && bound != got)
          throw bad(spec_->dim_names[-d - 1] + " = " + std::to_string(bound) +
                    " from an earlier input");
        bound = got;
      }
    }
    if (a.flags() & py::array::c_style) return a;
    py::array contiguous = py::array::ensure(a, py::array::c_style);
    if (!contiguous) throw std::bad_alloc();
    return contiguous;
  }

  const Variant<T>& choose(const std::vector<int64_t>& dims) const {
    for (std::size_t i = 1; i < spec_->variants.size(); ++i) {
      bool match = true;
      for (auto& [name, value] : spec_->variants[i].fixed)
        for (std::size_t k = 0; k < spec_->dim_names.size(); ++k)
          if (spec_->dim_names[k] == name && dims[k] != value) match = false;
      if (match) return spec_->variants[i];
    }
    return spec_->variants[0];
  }

  static py::array result(const std::vector<int64_t>& shape, int dtype, const void* data) {
    std::vector<py::ssize_t> s(shape.begin(), shape.end());
    py::array out(numpy_dtype(dtype), s);
    if (out.nbytes()) std::memcpy(out.mutable_data(), data, out.nbytes());
    return out;
  }

  const ModelSpec<T>* spec_;
  State<T> state_;
  std::mutex lock_;
  const Variant<T>* trained_ = nullptr;
  std::vector<int64_t> dims_;
};

template <class Tag, class T>
void bind_model(py::module_& m, const ModelSpec<T>* spec) {
  using M = Model<T, Tag>;
  // mdl::ValueError (bad values in the inputs, found by native code) is Python's ValueError
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  py::class_<M>(m, spec->name.c_str(), py::module_local())
      .def(py::init([spec](uint64_t seed) { return new M(spec, seed); }), py::arg("seed") = 0)
      .def_property_readonly("params", [](py::object self) {
        return self.cast<M&>().params(self);
      })
      .def_property_readonly("specializations", &M::specializations)
      .def_property("rng_calls", &M::rng_calls, &M::set_rng_calls)
      .def("forward", &M::forward)
      .def("backward", &M::backward);
}

}  // namespace mdl
