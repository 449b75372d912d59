// The Python face of generated models, compiled once per cache (codegen/build.py) and
// linked into every generated module: argument checks, the parameter store, arenas and
// the class a model's Python class derives from. A generated module contributes only its
// `ModelSpec`s; `create_module` makes the module and its classes from them.
// A model class's __init__ forwards to its base's on purpose (see bind_model): no warning.
#define PYBIND11_DISABLE_NEW_STYLE_INIT_WARNING
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "mdl/python.h"

namespace mdl {
namespace {

namespace py = pybind11;

bool has_dtype(const py::array& a, const DTypeSpec& d) {
  return a.dtype().kind() == d.kind && a.dtype().itemsize() == d.itemsize;
}

std::string type_text(const TensorSpec& s, const char* const* dim_names) {
  std::string out = s.dtype.name;
  if (!s.rank) return out;
  out += "[";
  for (int i = 0; i < s.rank; ++i) {
    if (i) out += ", ";
    out += s.dims[i] >= 0 ? std::to_string(s.dims[i]) : dim_names[-s.dims[i] - 1];
  }
  return out + "]";
}

std::string shape_text(const py::array& a) {
  std::string out = std::string(py::str(a.dtype())) + "[";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) out += (i ? ", " : "") + std::to_string(a.shape(i));
  return out + "]";
}

template <class T>
class Model {
 public:
  Model(const ModelSpec<T>* spec, uint64_t seed) : spec_(spec) {
    state_.seed = seed;
    state_.params.assign(spec->param_count, T(0));
    state_.saved.assign(spec->saved, nullptr);
    state_.tapes.resize(spec->tapes);
    state_.dyn.assign(spec->dynamic, 0);
    for (int i = 0; i < spec->n_params; ++i) {
      const ParamSpec& p = spec->params[i];
      initialize(state_.params.data() + p.offset,
                 std::vector<int64_t>(p.shape, p.shape + p.rank), p.init, seed, i);
    }
  }

  py::dict params(py::object self) {
    py::dict out;
    for (int i = 0; i < spec_->n_params; ++i) {
      const ParamSpec& p = spec_->params[i];
      std::vector<py::ssize_t> shape(p.shape, p.shape + p.rank);
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
      for (int i = 0; i < spec_->n_inputs; ++i) known |= spec_->inputs[i].name == key;
      if (!known) throw py::type_error("unknown input '" + key + "' (" + input_list() + ")");
    }
    call.dims.assign(spec_->n_dims, -1);
    for (int i = 0; i < spec_->n_inputs; ++i) {
      const TensorSpec& s = spec_->inputs[i];
      if (!kwargs.contains(s.name))
        throw py::type_error("missing input '" + std::string(s.name) + "' (" + input_list() +
                             ")");
      keep.push_back(convert(s, kwargs[s.name], call.dims));
      call.inputs.push_back(const_cast<void*>(keep.back().data()));
    }
    const Variant<T>& v = choose(call.dims);
    call.outputs.assign(spec_->n_outputs + spec_->saved, nullptr);
    // The lock is taken without the GIL and kept until the results are copied out of the
    // arena, so another thread's call cannot overwrite them first.
    std::unique_lock<std::mutex> guard(lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
      if (training && !v.train) {
        throw std::runtime_error("model " + std::string(spec_->name) + " minimizes no output: "
                                 "forward(training=True) and backward() need `minimize NAME`");
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
    return results(spec_->outputs, spec_->n_outputs, spec_->output_shape, call);
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
      call.outputs.assign(spec_->n_grads, nullptr);
      trained_->backward(state_, call);
    }
    return results(spec_->grads, spec_->n_grads, spec_->grad_shape, call);
  }

  // Training calls so far: the next one draws dropout masks from stream calls + 1.
  uint64_t rng_calls() const { return state_.calls; }
  void set_rng_calls(uint64_t n) { state_.calls = n; }

  py::list specializations() const {
    py::list out;
    for (int i = 1; i < spec_->n_variants; ++i) {
      const Variant<T>& v = spec_->variants[i];
      py::dict fixed;
      for (int k = 0; k < v.n_fixed; ++k)
        fixed[spec_->dim_names[v.fixed[k].dim]] = v.fixed[k].value;
      out.append(fixed);
    }
    return out;
  }

 private:
  std::string input_list() const {
    std::string out = "inputs are ";
    for (int i = 0; i < spec_->n_inputs; ++i)
      out += (i ? ", " : "") + std::string(spec_->inputs[i].name);
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
      return py::value_error("input '" + std::string(s.name) + "': expected " +
                             type_text(s, spec_->dim_names) + ", got " + shape_text(a) + " (" +
                             why + ")");
    };
    if (!has_dtype(a, s.dtype)) throw bad("wrong dtype");
    if (a.ndim() != s.rank) throw bad("wrong rank");
    for (int i = 0; i < s.rank; ++i) {
      int64_t got = a.shape(i), d = s.dims[i];
      if (d >= 0 && got != d)
        throw bad("dim " + std::to_string(i) + " must be " + std::to_string(d));
      if (d < 0) {
        int64_t& bound = dims[-d - 1];
        if (bound >= 0 && bound != got)
          throw bad(std::string(spec_->dim_names[-d - 1]) + " = " + std::to_string(bound) +
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
    for (int i = 1; i < spec_->n_variants; ++i) {
      const Variant<T>& v = spec_->variants[i];
      bool match = true;
      for (int k = 0; k < v.n_fixed; ++k) match &= dims[v.fixed[k].dim] == v.fixed[k].value;
      if (match) return v;
    }
    return spec_->variants[0];
  }

  // Copies of the arrays a function left in `call.outputs`, by name.
  py::dict results(const TensorSpec* specs, int count, ShapeFunction shape_of,
                   const Call& call) const {
    py::dict out;
    for (int k = 0; k < count; ++k) {
      std::vector<int64_t> shape(specs[k].rank);
      shape_of(k, call.dims.data(), state_.dyn.data(), shape.data());
      py::array a(py::dtype(specs[k].dtype.numpy),
                  std::vector<py::ssize_t>(shape.begin(), shape.end()));
      if (a.nbytes()) std::memcpy(a.mutable_data(), call.outputs[k], a.nbytes());
      out[py::str(specs[k].name)] = a;
    }
    return out;
  }

  const ModelSpec<T>* spec_;
  State<T> state_;
  std::mutex lock_;
  const Variant<T>* trained_ = nullptr;
  std::vector<int64_t> dims_;
};

template <class T>
constexpr const char* capsule_name() {
  return sizeof(T) == 4 ? "mdl.ModelSpec<float>" : "mdl.ModelSpec<double>";
}

// The class every model class of this module derives from. Its constructor takes the
// model's spec (a capsule), which each model class's own __init__ supplies.
template <class T>
py::object bind_base(py::module_& m) {
  using M = Model<T>;
  return py::class_<M>(m, "_Model", py::module_local())
      .def(py::init([](py::capsule spec, uint64_t seed) {
             return new M(spec.get_pointer<const ModelSpec<T>>(), seed);
           }),
           py::arg("spec"), py::arg("seed") = 0)
      .def_property_readonly("params", [](py::object self) {
        return self.cast<M&>().params(self);
      })
      .def_property_readonly("specializations", &M::specializations)
      .def_property("rng_calls", &M::rng_calls, &M::set_rng_calls)
      .def("forward", &M::forward)
      .def("backward", &M::backward);
}

// `class NAME(_Model)` whose __init__(seed=0) passes the spec to the base.
template <class T>
void bind_model(py::module_& m, py::object base, const ModelSpec<T>* spec) {
  py::dict namespace_;
  namespace_["__module__"] = m.attr("__name__");
  namespace_["__doc__"] = py::str("The mdl model " + std::string(spec->name) + ".");
  py::object cls = py::reinterpret_borrow<py::object>((PyObject*)&PyType_Type)(
      spec->name, py::make_tuple(base), namespace_);
  py::capsule handle(static_cast<const void*>(spec), capsule_name<T>());
  py::object base_init = base.attr("__init__");
  cls.attr("__init__") = py::cpp_function(
      [base_init, handle](py::object self, uint64_t seed) { base_init(self, handle, seed); },
      py::name("__init__"), py::is_method(cls), py::arg("seed") = 0);
  m.attr(spec->name) = cls;
}

template <class T>
_object* make_module(const char* name, const ModelSpec<T>* const* specs) {
  try {
    py::detail::get_internals();
    std::string doc = "mdl models:";
    for (auto s = specs; *s; ++s) doc += (s == specs ? " " : ", ") + std::string((*s)->name);
    // CPython keeps a pointer to the definition for as long as the module may live
    auto m = py::module_::create_extension_module(name, nullptr, new PyModuleDef());
    m.doc() = doc;
    // mdl::ValueError (bad values in the inputs, found by native code) is Python's ValueError
    py::register_local_exception_translator([](std::exception_ptr p) {
      try {
        if (p) std::rethrow_exception(p);
      } catch (const ValueError& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
      }
    });
    py::object base = bind_base<T>(m);
    for (auto s = specs; *s; ++s) bind_model<T>(m, base, *s);
    return m.release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_ImportError, e.what());
  }
  return nullptr;
}

}  // namespace

_object* create_module(const char* name, const ModelSpec<float>* const* specs) {
  return make_module(name, specs);
}

_object* create_module(const char* name, const ModelSpec<double>* const* specs) {
  return make_module(name, specs);
}

}  // namespace mdl
