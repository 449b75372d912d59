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

#include "mdl/optimizer.h"
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
    bool training = kwargs.contains("training") && py::cast<bool>(kwargs["training"]);
    Inputs in = inputs(kwargs, true);
    const Variant<T>& v = choose(in.call.dims);
    // The lock is taken without the GIL and kept until the results are copied out of the
    // arena, so another thread's call cannot overwrite them first.
    std::unique_lock<std::mutex> guard(lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
      if (training) {
        train(v, in.call);
      } else {
        in.call.outputs.assign(spec_->n_outputs, nullptr);
        v.infer(state_, in.call);
      }
    }
    return results(spec_->outputs, spec_->n_outputs, spec_->output_shape, in.call);
  }

  py::dict backward() {
    Call call;
    std::unique_lock<std::mutex> guard(lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
      if (!trained_)
        throw std::runtime_error("backward() needs a forward(..., training=True) first");
      gradients(call);
    }
    return results(spec_->grads, spec_->n_grads, spec_->grad_shape, call);
  }

  // Forward, backward and the optimizer's update in one call; the outputs of the forward.
  py::dict train_step(py::kwargs kwargs) {
    Inputs in = inputs(kwargs, false);
    const Variant<T>& v = choose(in.call.dims);
    std::unique_lock<std::mutex> guard(lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
      if (opt_.config.kind == OptimizerConfig::NONE)
        throw std::runtime_error("train_step() needs an optimizer: call set_optimizer(\"sgd\" "
                                 "or \"adam\", lr=...) first");
      train(v, in.call);
      Call grads;
      gradients(grads);
      opt_.step(*spec_, state_.params.data(), grads.outputs.data());
      trained_ = nullptr;  // the saved forward values belong to the old parameters
    }
    return results(spec_->outputs, spec_->n_outputs, spec_->output_shape, in.call);
  }

  void set_optimizer(const std::string& name, py::kwargs kwargs) {
    OptimizerConfig c = configure(name, kwargs);
    std::lock_guard<std::mutex> guard(lock_);
    opt_.reset(c, spec_->param_count);
  }

  py::object optimizer() const {
    const OptimizerConfig& c = opt_.config;
    if (c.kind == OptimizerConfig::NONE) return py::none();
    py::dict out;
    out["name"] = c.kind == OptimizerConfig::SGD ? "sgd" : "adam";
    out["lr"] = c.lr;
    out["weight_decay"] = c.weight_decay;
    out["clip_norm"] = c.clip_norm > 0 ? py::object(py::float_(c.clip_norm)) : py::none();
    if (c.kind == OptimizerConfig::SGD) {
      out["momentum"] = c.momentum;
      out["nesterov"] = c.nesterov;
    } else {
      out["beta1"] = c.beta1;
      out["beta2"] = c.beta2;
      out["eps"] = c.eps;
      out["decoupled"] = c.decoupled;
    }
    out["steps"] = opt_.steps;
    return out;
  }

  double lr() const {
    if (opt_.config.kind == OptimizerConfig::NONE)
      throw std::runtime_error("no optimizer is set: call set_optimizer(...) first");
    return opt_.config.lr;
  }

  void set_lr(double lr) {
    if (opt_.config.kind == OptimizerConfig::NONE)
      throw std::runtime_error("no optimizer is set: call set_optimizer(...) first");
    if (!(lr > 0)) throw py::value_error("lr must be > 0, got " + std::to_string(lr));
    std::lock_guard<std::mutex> guard(lock_);
    opt_.config.lr = lr;
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
  struct Inputs {
    std::vector<py::array> keep;  // owns converted inputs during the call
    Call call;
  };

  // The call's inputs, checked and converted; `training` is a flag, not an input, where
  // `training_flag` allows it.
  Inputs inputs(const py::kwargs& kwargs, bool training_flag) {
    Inputs in;
    for (auto item : kwargs) {
      std::string key = py::str(item.first);
      if (training_flag && key == "training") continue;
      bool known = false;
      for (int i = 0; i < spec_->n_inputs; ++i) known |= spec_->inputs[i].name == key;
      if (!known) throw py::type_error("unknown input '" + key + "' (" + input_list() + ")");
    }
    in.call.dims.assign(spec_->n_dims, -1);
    for (int i = 0; i < spec_->n_inputs; ++i) {
      const TensorSpec& s = spec_->inputs[i];
      if (!kwargs.contains(s.name))
        throw py::type_error("missing input '" + std::string(s.name) + "' (" + input_list() +
                             ")");
      in.keep.push_back(convert(s, kwargs[s.name], in.call.dims));
      in.call.inputs.push_back(const_cast<void*>(in.keep.back().data()));
    }
    return in;
  }

  // Under the lock: a training forward, keeping what the backward needs.
  void train(const Variant<T>& v, Call& call) {
    if (!v.train)
      throw std::runtime_error("model " + std::string(spec_->name) + " minimizes no output: "
                               "training needs `minimize NAME`");
    call.outputs.assign(spec_->n_outputs + spec_->saved, nullptr);
    state_.dropout_key = derive(state_.seed, ++state_.calls);
    state_.drawn.clear();
    v.train(state_, call);
    trained_ = &v;
    dims_ = call.dims;
  }

  // Under the lock, after `train`: the gradients, left in `call.outputs`.
  void gradients(Call& call) {
    call.dims = dims_;
    call.outputs.assign(spec_->n_grads, nullptr);
    trained_->backward(state_, call);
  }

  static OptimizerConfig configure(const std::string& name, const py::kwargs& kwargs) {
    OptimizerConfig c;
    if (name == "sgd") c.kind = OptimizerConfig::SGD;
    else if (name == "adam") c.kind = OptimizerConfig::ADAM;
    else throw py::value_error("unknown optimizer '" + name + "' (optimizers are sgd, adam)");
    bool sgd = c.kind == OptimizerConfig::SGD;
    const char* known = sgd ? "lr, momentum, nesterov, weight_decay, clip_norm"
                            : "lr, beta1, beta2, eps, weight_decay, decoupled, clip_norm";
    for (auto item : kwargs) {
      std::string key = py::str(item.first);
      py::handle value = item.second;
      if (key == "lr") c.lr = py::cast<double>(value);
      else if (key == "weight_decay") c.weight_decay = py::cast<double>(value);
      else if (key == "clip_norm") c.clip_norm = value.is_none() ? 0 : py::cast<double>(value);
      else if (sgd && key == "momentum") c.momentum = py::cast<double>(value);
      else if (sgd && key == "nesterov") c.nesterov = py::cast<bool>(value);
      else if (!sgd && key == "beta1") c.beta1 = py::cast<double>(value);
      else if (!sgd && key == "beta2") c.beta2 = py::cast<double>(value);
      else if (!sgd && key == "eps") c.eps = py::cast<double>(value);
      else if (!sgd && key == "decoupled") c.decoupled = py::cast<bool>(value);
      else throw py::type_error("set_optimizer(\"" + name + "\") got an unknown option '" +
                                key + "' (options are " + known + ")");
    }
    auto bad = [&](bool cond, const std::string& what) {
      if (cond) throw py::value_error("set_optimizer(\"" + name + "\"): " + what);
    };
    bad(!kwargs.contains("lr"), "lr is required");
    bad(!(c.lr > 0), "lr must be > 0");
    bad(!(c.weight_decay >= 0), "weight_decay must be >= 0");
    bad(!(c.clip_norm >= 0) || (kwargs.contains("clip_norm") && !kwargs["clip_norm"].is_none() &&
                                c.clip_norm == 0), "clip_norm must be > 0 (or None)");
    bad(!(c.momentum >= 0), "momentum must be >= 0");
    bad(c.nesterov && c.momentum == 0, "nesterov needs momentum > 0");
    bad(!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1),
        "beta1 and beta2 must lie in [0, 1)");
    bad(!(c.eps > 0), "eps must be > 0");
    return c;
  }

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
  Optimizer<T> opt_;
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
      .def("backward", &M::backward)
      .def("train_step", &M::train_step)
      .def("set_optimizer", &M::set_optimizer, py::arg("name"))
      .def_property_readonly("optimizer", &M::optimizer)
      .def_property("lr", &M::lr, &M::set_lr);
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
