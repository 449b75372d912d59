// The Python face of generated models, compiled once per cache (codegen/compile/runtime.py) and
// linked into every generated module: the class a model's Python class derives from (over
// src/model_object.h) and the module itself. A generated module contributes only its
// `ModelSpec`s; `create_module` makes the module and its classes from them.
// A model class's __init__ forwards to its base's on purpose (see bind_model): no warning.
#define PYBIND11_DISABLE_NEW_STYLE_INIT_WARNING
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "mdl/python.h"
#include "model_object.h"

namespace mdl {
namespace {

namespace py = pybind11;

template <class T>
constexpr const char* capsule_name() {
  return sizeof(T) == 4 ? "mdl.ModelSpec<float>" : "mdl.ModelSpec<double>";
}

// The overload of a method that takes its arguments by name which pybind11 reaches only
// when the method was given positional ones: a TypeError saying how to call it instead
// of "incompatible function arguments".
template <class M>
auto by_name_only(const char* method) {
  return [method](const M& m, py::args, py::kwargs) -> py::dict { m.positional(method); };
}

// A model's seed: an int in [0, 2**64), or a TypeError / ValueError naming the model.
inline uint64_t seed_value(py::handle seed, const char* model) {
  std::string what = std::string(model) + "(seed=...)";
  if (PyBool_Check(seed.ptr()) || !PyIndex_Check(seed.ptr()))
    throw py::type_error(what + ": the seed must be an int, got " + type_name(seed));
  py::object value = py::reinterpret_steal<py::object>(PyNumber_Index(seed.ptr()));
  if (!value) throw py::error_already_set();
  unsigned long long v = PyLong_AsUnsignedLongLong(value.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {  // < 0 or >= 2**64
    PyErr_Clear();
    throw py::value_error(what + ": the seed must be in [0, 2**64), got " +
                          std::string(py::str(value)));
  }
  return v;
}

// The class every model class of this module derives from. Its constructor takes the
// model's spec (a capsule), which each model class's own __init__ supplies.
template <class T>
py::object bind_base(py::module_& m) {
  using M = Model<T>;
  return py::class_<M>(m, "_Model", py::module_local())
      .def(py::init([](py::capsule spec, uint64_t seed, py::object params) {
             const M* share = nullptr;
             if (!params.is_none()) {
               if (!py::isinstance<M>(params))
                 throw py::type_error(
                     "params= takes a model of the same module to share parameters with, "
                     "got " + std::string(py::repr(params.get_type())));
               share = &params.cast<const M&>();
             }
             return new M(spec.get_pointer<const ModelSpec<T>>(), seed, share);
           }),
           py::arg("spec"), py::arg("seed") = 0, py::arg("params") = py::none())
      .def_property_readonly("params", [](py::object self) {
        return self.cast<M&>().params(self);
      })
      .def("set_params", &M::set_params, py::arg("values"))
      .def_property_readonly("device", &M::device)
      .def_property("outputs_on_device", &M::outputs_on_device, &M::set_outputs_on_device)
      .def("to_device", &M::to_device, py::arg("array"))
      .def_property_readonly("cuda_graphs", &M::cuda_graphs)
      .def_property_readonly("specializations", &M::specializations)
      .def_property_readonly("shared", &M::shared)
      .def_property_readonly("inputs", &M::input_types)
      .def_property_readonly("cotangents", &M::cotangents)
      .def_property("rng_calls", &M::rng_calls, &M::set_rng_calls)
      .def("forward", &M::forward)
      .def("forward", by_name_only<M>("forward"))
      .def("backward", &M::backward)
      .def("backward", by_name_only<M>("backward"))
      .def("train_step", &M::train_step)
      .def("train_step", by_name_only<M>("train_step"))
      .def("forward_backward", &M::forward_backward)
      .def("forward_backward", by_name_only<M>("forward_backward"))
      .def("apply_gradients", &M::apply_gradients)
      .def_property_readonly("gradient_buffer", [](py::object self) {
        return self.cast<M&>().gradient_buffer(self);
      })
      .def_property_readonly("gradient_layout", &M::gradient_layout)
      .def("set_optimizer", &M::set_optimizer, py::arg("name"))
      .def("save", &M::save, py::arg("path"))
      .def("load", &M::load, py::arg("path"))
      .def_property_readonly("optimizer", &M::optimizer)
      .def_property("lr", &M::lr, &M::set_lr);
}

// The class of outputs a device model hands back in its memory (device_array.h).
void bind_device_array(py::module_& m) {
  py::class_<DeviceArray>(m, "DeviceArray", py::module_local())
      .def("__dlpack__", [](py::object self, py::kwargs) {  // any stream: the work is done
        return self.cast<const DeviceArray&>().dlpack(self);
      })
      .def("__dlpack_device__", &DeviceArray::dlpack_device)
      .def("numpy", &DeviceArray::numpy, "A copy in host memory.")
      .def_property_readonly("shape", [](const DeviceArray& a) {
        return py::tuple(py::cast(a.shape));
      })
      .def_property_readonly("dtype", [](const DeviceArray& a) { return py::dtype(a.dtype.numpy); })
      .def("__repr__", &DeviceArray::repr);
}

// `class NAME(_Model)` whose __init__(seed=0, params=None) passes the spec to the base.
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
      [base_init, handle, spec](py::object self, py::object seed, py::object params) {
        base_init(self, handle, seed_value(seed, spec->name), params);
      },
      py::name("__init__"), py::is_method(cls), py::arg("seed") = 0,
      py::arg("params") = py::none());
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
    // mdl::ValueError and mdl::IndexError (bad values in the inputs, found by native code)
    // are Python's ValueError and IndexError
    py::register_local_exception_translator([](std::exception_ptr p) {
      try {
        if (p) std::rethrow_exception(p);
      } catch (const ValueError& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
      } catch (const IndexError& e) {
        PyErr_SetString(PyExc_IndexError, e.what());
      }
    });
    static const bool blas_ready = (blas_init(), true);  // before any product
    (void)blas_ready;
    m.def("set_num_threads", [](int n) {
      if (n < 1) throw py::value_error("set_num_threads(n) needs n >= 1, got " + std::to_string(n));
      if (n > 1 && forked_after_threads())
        throw std::runtime_error(
            "set_num_threads(" + std::to_string(n) + "): this process was forked after mdl's "
            "threads had started, and OpenMP cannot start threads again in a forked child, so "
            "its products run on one thread; start worker processes with multiprocessing's "
            "'spawn' or 'forkserver' method to give them threads");
      set_blas_threads(n);
    }, py::arg("n"), "Threads the matrix products of every mdl model in this process may use.");
    m.def("get_num_threads", &blas_threads,
          "Threads the matrix products of every mdl model in this process may use.");
    bind_device_array(m);
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
