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
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>

#include "blas_control.h"
#include "interrupts.h"
#include "mdl/module.h"
#include "model_object.h"
#include "signature.h"

namespace mdl {
namespace {

namespace py = pybind11;

template <class T>
constexpr const char* capsule_name() {
  return sizeof(T) == 4 ? "mdl.ModelSpec<float>" : "mdl.ModelSpec<double>";
}

// What an instance of a bound class is, and how one comes to be, for built's TypeErrors.
template <class C>
struct Made;
template <class T>
struct Made<Model<T>> {
  static constexpr const char* what = "an mdl model";
  static std::string how(const std::string& cls) {
    return "make one by calling its class, " + cls + "(seed=0)";
  }
};
template <>
struct Made<DeviceArray> {
  static constexpr const char* what = "a DeviceArray";
  static std::string how(const std::string&) {
    return DeviceArray::origin;
  }
};

// The C behind `self`: a TypeError where there is none, as for an instance whose __init__
// never ran (`cls.__new__(cls)`, copyreg), whose memory pybind11 would hand over unbuilt.
template <class C>
C& built(py::handle self) {
  py::detail::make_caster<C> caster;  // as pybind11 reads an argument of type C&
  if (!caster.load(self, false))
    throw py::type_error("expected " + std::string(Made<C>::what) + ", got " + type_name(self));
  if (!constructed(self)) {
    std::string cls = py::str(py::type::handle_of(self).attr("__name__"));
    throw py::type_error(cls + " object was never initialized (its __init__ did not run): " +
                         Made<C>::how(cls));
  }
  return py::detail::cast_op<C&>(caster);
}

// A binding of `method` that refuses an instance that is not built (see built).
template <class C, class R, class... A>
auto checked(R (C::*method)(A...)) {
  return [method](py::handle self, A... args) -> R {
    return (built<C>(self).*method)(std::forward<A>(args)...);
  };
}

template <class C, class R, class... A>
auto checked(R (C::*method)(A...) const) {
  return [method](py::handle self, A... args) -> R {
    return (built<C>(self).*method)(std::forward<A>(args)...);
  };
}

// A binding of `method` (whose parameters are handles) that refuses an instance that is
// not built, its arguments bound as Python binds them (signature.h).
template <class C, class R, class... A>
auto plain(R (C::*method)(A...), Signature<sizeof...(A)> sig) {
  return [method, sig](py::handle self, py::args args, py::kwargs kwargs) -> R {
    auto values = sig.bind(args, kwargs);
    C& c = built<C>(self);
    return std::apply([&](const auto&... v) -> R { return (c.*method)(v...); }, values);
  };
}

template <class C, class R, class... A>
auto plain(R (C::*method)(A...) const, Signature<sizeof...(A)> sig) {
  return [method, sig](py::handle self, py::args args, py::kwargs kwargs) -> R {
    auto values = sig.bind(args, kwargs);
    const C& c = built<C>(self);
    return std::apply([&](const auto&... v) -> R { return (c.*method)(v...); }, values);
  };
}

// A method that takes its arguments by name, as one overload: given positional ones, a
// TypeError saying how to call it instead of pybind11's "incompatible function arguments".
template <class M>
auto by_name(py::dict (M::*method)(py::kwargs), const char* name) {
  return [method, name](py::handle self, py::args args, py::kwargs kwargs) -> py::dict {
    M& m = built<M>(self);
    if (!args.empty()) m.positional(name);
    return (m.*method)(std::move(kwargs));
  };
}

// What a params= argument that is no model of this module is, for the TypeError: a class
// (to call), a model of another module (another build: another file, target or dtype,
// whose weights set_params copies), or any other object, by its type.
inline std::string not_shareable(py::handle params, const std::string& module_name) {
  if (PyType_Check(params.ptr()))
    return "the class " + std::string(py::str(params.attr("__name__"))) +
           ": give a model made by calling it";
  py::object owner = py::getattr(py::type::handle_of(params), "__module__", py::none());
  if (py::hasattr(params, "set_params") && py::isinstance<py::str>(owner)) {
    const std::string other = py::str(owner);
    return "model `" + type_name(params) + "` of " +
           (other == module_name ? "another build of the module `" + other +
                                       "` (another target, dtype or options)"
                                 : "the module `" + other + "`") +
           ": models of two builds share no memory; copy the weights instead "
           "(model.set_params(other.params))";
  }
  return type_name(params);
}

// The class every model class of this module derives from. Its constructor takes the
// model's spec (a capsule), which each model class's own __init__ supplies. Each model
// class's own docstring lists its inputs and outputs (codegen/backend/interface.py).
template <class T>
py::object bind_base(py::module_& m) {
  using M = Model<T>;
  py::class_<M> cls(m, "_Model", py::module_local());
  const std::string module_name = py::str(m.attr("__name__"));
  cls
      .def(py::init([module_name](py::capsule spec, uint64_t seed, py::object params) {
             const M* share = nullptr;
             if (!params.is_none()) {
               if (!py::isinstance<M>(params))
                 throw py::type_error(
                     "params= takes a model of the same module (`" + module_name +
                     "`) to share parameters with, got " + not_shareable(params, module_name));
               share = &built<M>(params);
             }
             if (!spec.name() || std::strcmp(spec.name(), capsule_name<T>()) != 0)
               throw py::type_error("_Model is the base of this module's model classes: make a "
                                    "model by calling one of them, with its seed");
             return new M(spec.get_pointer<const ModelSpec<T>>(), seed, share);
           }),
           py::arg("spec"), py::arg("seed") = 0, py::arg("params") = py::none())
      .def_property_readonly("params", [](py::object self) {
        return built<M>(self).params(self);
      }, "{full name: array}: the live weights (NumPy views on the CPU, copies on a GPU).")
      .def_property_readonly("device_params", [](py::object self) {
        return built<M>(self).device_params(self);
      }, "{full name: DeviceArray}: cuda target: the live weights in the GPU's memory, read "
         "and\nwritten in place through DLPack (torch.from_dlpack); once they are out, "
         "every\ncall first waits for the whole GPU, since any stream may write them.")
      .def("set_params", plain(&M::set_params, signature("set_params(values)", "values")),
           "set_params(values: dict) -> None\n\nCopy arrays into the named parameters; every "
           "name and shape\nis checked before anything changes.")
      .def_property_readonly("device", checked(&M::device),
                             "Where the model's memory lives and its code runs: cpu, cuda, or\ncuda-emulated (a --target cuda --emulate build).")
      .def_property("outputs_on_device", checked(&M::outputs_on_device), checked(&M::set_outputs_on_device),
                    "cuda target: True keeps outputs and gradients in the GPU's memory.")
      .def("to_device", plain(&M::to_device, signature("to_device(array)", "array")),
           "to_device(array) -> DeviceArray\n\ncuda target: a copy of an input in the GPU's "
           "memory,\nread there by every call it is given to.")
      .def_property_readonly("cuda_graphs", checked(&M::cuda_graphs),
                             "{captured, replayed}: calls run as CUDA graphs (0 on the CPU).")
      .def("profile", plain(&M::profile, signature("profile()")),
           "profile() -> list[dict]\n\nA build with --profile: the time each piece of the "
           "model's code took\nin this model's calls, one dict a site (codegen.profile.table "
           "prints\nthem); a RuntimeError for other builds.")
      .def("reset_profile", plain(&M::reset_profile, signature("reset_profile()")),
           "reset_profile() -> None\n\nA build with --profile: profile()'s counts back to "
           "zero.")
      .def_property_readonly("specializations", checked(&M::specializations),
                             "The fixed dims of each compiled specialization.")
      .def_property_readonly("shared", checked(&M::shared), "The parameter names this model shares with the model given as\nparams= ([] for a model made without it).")
      .def_property_readonly("inputs", checked(&M::input_types),
                             "{name: type}: the declared inputs, in order.")
      .def_property_readonly("loss_tokens", checked(&M::loss_tokens),
                             "The input whose sum counts the tokens the minimized loss is a "
                             "mean over\n(cross_entropy's lengths), or None: what "
                             "DataParallel weighs each shard by.")
      .def_property_readonly("loss_mean_dims", checked(&M::loss_mean_dims),
                             "The declared dims the minimized loss is a mean over\n(('B',) "
                             "for a mean of rows, ('T', 'B') for an mse of [T, B, H]), "
                             "or None:\nwhich of the shards' sizes DataParallel weighs "
                             "them by.")
      .def_property_readonly("cotangents", checked(&M::cotangents),
                             "The outputs whose cotangents a vjp build's backward takes.")
      .def_property("rng_calls", checked(&M::rng_calls), checked(&M::set_rng_calls),
                    "Training calls so far; call k draws its dropout masks from (seed, k).")
      .def_property("rng_seed", checked(&M::rng_seed), checked(&M::set_rng_seed),
                    "The dropout stream's seed (the class's seed=): call k draws its masks "
                    "from (rng_seed, k).")
      .def_property_readonly("_regularizers", checked(&M::regularizers),
                             "{name: (l1, l2)}: the scope regularizers of the trainable "
                             "parameters that have one.")
      .def_property_readonly("_training_forwards", checked(&M::training_forwards),
                             "Training forwards begun or refused so far (the PyTorch "
                             "bridge's test of\nwhich one the saved values are).")
      .def("forward", by_name(&M::forward, "forward"),
           "forward(*, <inputs>, training=False) -> dict\n\nRun the model on its inputs, "
           "given by name, and return its\noutputs {name: array}. training=True runs dropout "
           "and keeps what\nbackward() needs. The model class's docstring lists the inputs.")
      .def("backward", by_name(&M::backward, "backward"),
           "backward() -> dict\n\nThe gradients of the minimized output of the last "
           "training forward:\n{parameter full name or input:NAME: array}. A vjp build's "
           "backward(*, <cotangents>)\ntakes a cotangent per float output instead.")
      .def("train_step", by_name(&M::train_step, "train_step"),
           "train_step(*, <inputs>) -> dict\n\nA training forward, its backward and the "
           "optimizer's update\n(set_optimizer first); the forward's outputs.")
      .def("forward_backward", by_name(&M::forward_backward, "forward_backward"),
           "forward_backward(*, <inputs>) -> dict\n\nA training forward and its backward, "
           "the gradients left in\ngradient_buffer for apply_gradients(); the outputs.")
      .def("apply_gradients", plain(&M::apply_gradients, signature("apply_gradients()")),
           "apply_gradients() -> None\n\nThe optimizer's update from gradient_buffer.")
      .def_property_readonly("gradient_buffer", [](py::object self) {
        return built<M>(self).gradient_buffer(self);
      }, "The flat gradients of the last forward_backward, a writable view.")
      .def_property_readonly("device_gradient_buffer", [](py::object self) {
        return built<M>(self).device_gradient_buffer(self);
      }, "A device model's flat gradients in the device's memory, a DeviceArray view\n"
         "(DLPack) that forward_backward fills and apply_gradients steps from from then\n"
         "on: what DataParallel reduces with NCCL.")
      .def_property_readonly("gradient_layout", checked(&M::gradient_layout),
                             "{name: (offset, shape)}: each gradient's place in gradient_buffer.")
      .def("set_optimizer", [](py::handle self, py::args args, py::kwargs options) {
             // set_optimizer("sgd", 0.1): pybind11's "incompatible function arguments"
             const char* shown = "set_optimizer(name, **options)";
             if (args.size() > 1)
               throw py::type_error(std::string(shown) + " takes its options by name "
                                    "(lr=0.1), got " + std::to_string(args.size() - 1) +
                                    " more positional argument(s)");
             bool named = options.contains("name");
             if (args.size() == 1 && named)
               throw py::type_error(std::string(shown) +
                                    " got multiple values for argument 'name'");
             if (args.empty() && !named)
               throw py::type_error(std::string(shown) + " missing required argument 'name'");
             py::object name = named ? options.attr("pop")("name") : args[0];
             built<M>(self).set_optimizer(name, std::move(options));
           },
           "set_optimizer(name, **options) -> None\n\nThe update train_step makes: \"sgd\" or "
           "\"adam\", with the options\ndocs/training.md lists (lr, clip_norm, ...).")
      .def("save", plain(&M::save, signature("save(path)", "path")),
           "save(path) -> None\n\nParameters, optimizer state and the dropout stream's place, "
           "as .npz.")
      .def("load", plain(&M::load, signature("load(path)", "path")),
           "load(path) -> None\n\nWhat save wrote, checked in full before anything changes.")
      .def_property_readonly("optimizer", checked(&M::optimizer),
                             "The optimizer and its options, or None.")
      .def_property("lr", checked(&M::lr), checked(&M::set_lr), "The optimizer's learning rate.")
      .def("__repr__", [](py::object self) {  // a subclass's own name (it was the base's)
        py::handle cls = py::type::handle_of(self);
        return built<M>(self).repr(py::str(cls.attr("__module__")).cast<std::string>() + "." +
                                   py::str(cls.attr("__qualname__")).cast<std::string>());
      })
      // pickle and copy.copy/deepcopy: the class called with the seed, then the checkpoint
      // and the attributes the user set on the instance (as Python's own objects keep them)
      .def("__reduce__", [](py::object self) {
        py::tuple state = built<M>(self).reduced();
        py::object attributes = py::getattr(self, "__dict__", py::dict());
        return py::make_tuple(py::type::of(self), py::make_tuple(state[0]),
                              py::make_tuple(state[1], state[2], attributes));
      }, "__reduce__() -> tuple\n\nFor pickle and copy: the class, the seed, and what a "
         "checkpoint holds\n(parameters, optimizer state, dropout stream) with "
         "outputs_on_device\nand the instance's own attributes.");
  // pybind11 takes a method named __setstate__ for a constructor, which it skips on an
  // instance already made (as __reduce__'s is): so the function has another name
  cls.attr("__setstate__") = py::cpp_function(
      [](py::handle self, py::handle state) {
        // (arrays, outputs_on_device) as pickles before the attributes were kept, or
        // (arrays, outputs_on_device, attributes); the model's part is checked whole first
        bool attributes = PyTuple_Check(state.ptr()) && py::len(state) == 3;
        if (attributes && !PyDict_Check(PyTuple_GET_ITEM(state.ptr(), 2)))
          throw py::type_error("__setstate__: the state's attributes must be a dict, got " +
                               type_name(PyTuple_GET_ITEM(state.ptr(), 2)));
        py::handle model_state = state;
        py::tuple head;
        if (attributes) {
          head = py::make_tuple(py::handle(PyTuple_GET_ITEM(state.ptr(), 0)),
                                py::handle(PyTuple_GET_ITEM(state.ptr(), 1)));
          model_state = head;
        }
        built<M>(self).set_state(model_state);
        if (attributes && py::hasattr(self, "__dict__"))
          self.attr("__dict__").attr("update")(py::handle(PyTuple_GET_ITEM(state.ptr(), 2)));
      },
      py::name("set_state"),
      py::is_method(cls), py::arg("state"),
      py::doc("__setstate__(state) -> None\n\nWhat __reduce__ kept (pickle, copy.deepcopy)."));
  return cls;
}

// The class of outputs a device model hands back in its memory (device_array.h).
void bind_device_array(py::module_& m) {
  py::class_<DeviceArray>(m, "DeviceArray", py::module_local())
      .def(py::init([](py::args, py::kwargs) -> DeviceArray* {  // not "No constructor defined!"
        throw py::type_error("DeviceArray cannot be made by calling it: " +
                             Made<DeviceArray>::how(""));
      }))
      .def("__dlpack__", [](py::object self, py::kwargs options) {
        return built<DeviceArray>(self).dlpack_asked(self, options);
      })
      .def("__dlpack_device__", plain(&DeviceArray::dlpack_device, signature("__dlpack_device__()")))
      .def("numpy", plain(&DeviceArray::numpy, signature("numpy()")), "numpy() -> numpy.ndarray\n\nA copy in host memory.")
      // np.asarray(a), np.testing's comparisons: numpy()'s copy (without it, NumPy made an
      // array of one object). NumPy 2's copy=False asks for no copy, which cannot be had.
      .def("__array__", [](py::handle self, py::object dtype, py::object copy) -> py::object {
        const DeviceArray& a = built<DeviceArray>(self);
        if (!copy.is_none() && !copy.cast<bool>())
          throw py::value_error("a DeviceArray " + a.repr() + " lies in the device's memory: "
                                "NumPy can read it only as a copy in host memory (copy=False "
                                "asked for none)");
        py::object out = a.numpy();
        if (!dtype.is_none()) out = out.attr("astype")(dtype, py::arg("copy") = false);
        return out;
      }, py::arg("dtype") = py::none(), py::arg("copy") = py::none(),
         "__array__(dtype=None, copy=None) -> numpy.ndarray\n\nnumpy()'s copy in host "
         "memory, as np.asarray makes it.")
      .def("__float__", checked(&DeviceArray::to_float))
      .def("__int__", checked(&DeviceArray::to_int))
      .def("__index__", checked(&DeviceArray::to_index))
      .def("__bool__", checked(&DeviceArray::truth))
      .def_property_readonly("shape", [](py::handle self) {
        return py::tuple(py::cast(built<DeviceArray>(self).shape));
      })
      .def_property_readonly("dtype", [](py::handle self) {
        return py::dtype(built<DeviceArray>(self).dtype.numpy);
      })
      .def("__repr__", checked(&DeviceArray::repr));
}

// `class NAME(_Model)` whose __init__(seed=0, params=None) passes the spec to the base.
template <class T>
void bind_model(py::module_& m, py::object base, const ModelSpec<T>* spec) {
  py::dict namespace_;
  namespace_["__module__"] = m.attr("__name__");
  namespace_["__doc__"] = py::str(spec->doc);
  py::object cls = py::reinterpret_borrow<py::object>((PyObject*)&PyType_Type)(
      spec->name, py::make_tuple(base), namespace_);
  py::capsule handle(static_cast<const void*>(spec), capsule_name<T>());
  py::object base_init = base.attr("__init__");
  // how messages write the call (signature.h); shared, as the function outlives this scope
  auto shown = std::make_shared<const std::string>(std::string(spec->name) +
                                                   "(seed=0, params=None)");
  cls.attr("__init__") = py::cpp_function(
      [base_init, handle, spec, shown](py::object self, py::args args, py::kwargs kwargs) {
        auto [seed, params] = Signature<2>{shown->c_str(), {"seed", "params"}, 0}.bind(args, kwargs);
        // a second __init__ would be ignored, its seed and params too, good or bad: pybind11
        // skips a function named __init__ on an instance already made (hence the name below)
        if (constructed(self))
          throw py::type_error(std::string(spec->name) + " object is already initialized: "
                               "make another by calling " + spec->name + "(seed=...), or "
                               "copy one with copy.deepcopy");
        base_init(self, handle,
                  count_argument(seed ? seed : py::int_(0),
                                 std::string(spec->name) + "(seed=...): the seed"),
                  params ? params : py::none());
      },
      py::name("init"), py::is_method(cls),
      py::doc("__init__(seed=0, params=None)\n\nParameters initialized from the seed, or "
              "shared with params=,\na model of the same module."));
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
    // Each docstring starts with its signature: pybind11's would show *args, **kwargs and
    // handles where the runtime checks the arguments itself
    py::options options;
    options.disable_function_signatures();
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
    static const bool blas_ready = (blas_control::init(), true);  // before any product
    (void)blas_ready;
    chain_interrupt_handler();  // Ctrl-C stops a loop between steps (mdl/interrupts.h)
    // the interpreter's exit waits for calls running on other threads (released_gil.h)
    py::module_::import("atexit").attr("register")(py::cpp_function(&close_calls));
    m.def("set_num_threads", [](py::args args, py::kwargs kwargs) {
      auto [count] = signature("set_num_threads(n)", "n").bind(args, kwargs);
      uint64_t requested = 0;
      try {
        requested = count_argument(count, "set_num_threads(n): n");
      } catch (const py::value_error&) {  // below 0 or past 2**64: one message for the range
        throw py::value_error("set_num_threads(n) needs 1 <= n <= 1024, got " +
                              std::string(py::str(count)));
      }
      if (requested < 1 || requested > 1024)
        throw py::value_error("set_num_threads(n) needs 1 <= n <= 1024, got " +
                              std::to_string(requested));
      int n = static_cast<int>(requested);
      if (n > 1 && blas_control::forked_after_threads())
        throw std::runtime_error(
            "set_num_threads(" + std::to_string(n) + "): this process was forked after mdl's "
            "threads had started, and OpenMP cannot start threads again in a forked child, so "
            "its products run on one thread; start worker processes with multiprocessing's "
            "'spawn' or 'forkserver' method to give them threads");
      blas_control::set_threads(n);
    }, "set_num_threads(n: int) -> None\n\nThreads every mdl model in this "
       "process may use for its matrix products\nand its parallel loops.");
    m.def("get_num_threads", [](py::args args, py::kwargs kwargs) {
            signature("get_num_threads()").bind(args, kwargs);
            return blas_control::threads();
          },
          "get_num_threads() -> int\n\nThreads every mdl model in this process may use "
          "for its matrix products\nand its parallel loops.");
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
