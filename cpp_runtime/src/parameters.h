// A model's parameters: where each lives (`State::param`), in a store of its own or in the
// store of the model it was made to share with, wherever a name is in both; their values
// handed to Python and set from it. The stores are its device's memory.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "arguments.h"
#include "checkpoint.h"
#include "mdl/arena.h"
#include "mdl/device.h"
#include "mdl/init.h"
#include "mdl/model.h"

namespace mdl {

namespace py = pybind11;

// A model's `params`: a dict of its parameters' arrays that refuses to be changed itself
// (`m.params["b"] = a`, `update`, `pop`, ...), which changed nothing of the model: the
// arrays are views of the weights, or a device model's read-only copies. `why` says what
// changes them instead. Storing an entry's own array again, as `m.params["b"] -= g` does
// after writing into it, is no change. A copy or a pickle of it is a plain dict.
inline py::dict params_dict(py::dict values, const char* why) {
  // made once and never freed: a static py::object would be released after Python ends
  static const py::handle type = [] {
    py::object builtins = py::module_::import("builtins");
    py::dict body;
    auto refuse = py::cpp_function([](py::object self, py::args, py::kwargs) {
      throw py::type_error(py::str(self.attr("_why")).cast<std::string>());
    }, py::is_method(py::none()));
    for (const char* name : {"__delitem__", "__ior__", "update", "setdefault", "pop",
                             "popitem", "clear"})
      body[name] = refuse;
    // `params[name] -= g` writes into the array, then stores that same array again:
    // nothing to refuse (it raised after the weight had changed, so a retry changed it twice)
    body["__setitem__"] = py::cpp_function([](py::object self, py::object key, py::object value) {
      PyObject* held = PyDict_GetItemWithError(self.ptr(), key.ptr());
      if (!held && PyErr_Occurred()) throw py::error_already_set();
      if (held != value.ptr())
        throw py::type_error(py::str(self.attr("_why")).cast<std::string>());
    }, py::is_method(py::none()));
    body["__reduce__"] = py::cpp_function([](py::object self) {
      py::object plain = py::module_::import("builtins").attr("dict");
      return py::make_tuple(plain, py::make_tuple(plain(self)));
    }, py::is_method(py::none()));
    body["__module__"] = "mdl";
    body["__doc__"] = "{full name: array}: a model's parameters (its `params`).";
    return builtins.attr("type")("Params", py::make_tuple(builtins.attr("dict")), body)
        .release();
  }();
  py::object out = type(values);
  out.attr("_why") = why;
  return out.cast<py::dict>();
}

template <class T>
class Parameters {
 public:
  // Points `state.param` at every parameter of `spec`: those `share` (a model of the same
  // module; null: none) also has at its memory, which must have the same shapes; the others
  // at a new store, initialized from `seed` as they would be unshared, then copied into
  // the device's memory (`context`: the model's context there).
  Parameters(const ModelSpec<T>& spec, State<T>& state, void* context, uint64_t seed,
             const Parameters* share)
      : spec_(&spec), state_(&state) {
    state.param.assign(spec.n_params, nullptr);
    if (share) {
      stores_ = share->stores_;
      link(*share);
    }
    int64_t own = 0;
    for (int i = 0; i < spec.n_params; ++i)
      if (!state.param[i]) own += padded(numel(spec.params[i]));
    std::shared_ptr<Buffer<T>> store;
    std::vector<T> values;  // initialized on the host, then copied over
    try {
      store = std::make_shared<Buffer<T>>(spec.device, own);
      values.resize(own);
    } catch (const std::bad_alloc&) {  // OutOfMemory's "this call ... give smaller inputs"
      char text[200];
      std::snprintf(text, sizeof text, "the model's parameters, %lld values (%.3g GB), need "
                    "more memory than the model's device would give: use smaller "
                    "hyper-parameters", static_cast<long long>(own),
                    double(own) * sizeof(T) / 1e9);
      throw OutOfMemory::saying(text);
    }
    stores_.push_back(store);
    own = 0;
    for (int i = 0; i < spec.n_params; ++i) {
      if (state.param[i]) continue;
      const ParamSpec& p = spec.params[i];
      state.param[i] = store->data() + own;
      initialize(values.data() + own, std::vector<int64_t>(p.shape, p.shape + p.rank), p.init,
                 seed, i);
      own += padded(numel(p));
    }
    upload(spec.device, context, store->data(), values.data(), own * sizeof(T));
  }
  Parameters(const Parameters&) = delete;
  Parameters& operator=(const Parameters&) = delete;

  // {name: array} viewing the live weights, kept alive by `owner` (the model's object):
  // where the device's memory is the host's own (Device::in_place).
  py::dict views(py::object owner) const {
    py::dict out;
    for (int i = 0; i < spec_->n_params; ++i) {
      const ParamSpec& p = spec_->params[i];
      std::vector<py::ssize_t> shape(p.shape, p.shape + p.rank);
      out[py::str(p.name)] = py::array_t<T>(shape, state_->param[i], owner);
    }
    return out;
  }

  // {name: array}: read-only copies (writing to them would change nothing); under the lock.
  py::dict copies() const {
    py::dict out;
    for (int i = 0; i < spec_->n_params; ++i) {
      py::array copy = copy_of(spec_->params[i], state_->param[i], spec_->device,
                               state_->device);
      copy.attr("flags").attr("writeable") = false;
      out[py::str(spec_->params[i].name)] = copy;
    }
    return out;
  }

  using Values = std::vector<std::pair<int, py::array_t<T>>>;  // (parameter, its value)

  // "its parameters: a, b, c" (the first 24 of them), for a name it does not have
  std::string known_names() const {
    constexpr int kShown = 24;
    std::string text = spec_->n_params == 1 ? "its parameter: " : "its parameters: ";
    for (int i = 0; i < spec_->n_params && i < kShown; ++i)
      text += (i ? ", " : "") + std::string(spec_->params[i].name);
    if (spec_->n_params > kShown)
      text += ", ... (" + std::to_string(spec_->n_params) + " in all)";
    return spec_->n_params ? text : "it has none";
  }

  // `values` ({name: array of the parameter's shape}) for `write`, every name and shape
  // checked (under the GIL).
  Values checked(const py::dict& values) const {
    Values given;
    for (auto item : values) {
      if (!PyUnicode_Check(item.first.ptr()))  // 3 read as '3', a name it could never be
        throw py::type_error("set_params: model " + std::string(spec_->name) + " takes its "
                            "parameters by full name (a str), got the key " +
                            std::string(py::repr(item.first)) + " of type " +
                            type_name(item.first));
      std::string name = text_of(item.first);
      int index = -1;
      for (int i = 0; i < spec_->n_params; ++i)
        if (name == spec_->params[i].name) index = i;
      if (index < 0)
        throw py::key_error("set_params: model " + std::string(spec_->name) +
                            " has no parameter '" + name + "'; " + known_names());
      const ParamSpec& p = spec_->params[index];
      // complex values lost their imaginary part, None became a scalar, strings went on to
      // a message about device memory: real numbers only, read as every argument is
      py::array raw = as_array(item.second, "set_params: parameter", name.c_str());
      const char kind = raw.dtype().kind();
      const bool listed = PyList_Check(item.second.ptr()) || PyTuple_Check(item.second.ptr());
      if (kind == 'O' && listed)  // [2**70] said "holds object values ...; real numbers"
        throw py::type_error("set_params: '" + name + "' is no array of numbers NumPy holds "
                             "in one dtype, got " + type_name(item.second) + " read as "
                             "objects (an int past 64 bits, or values of mixed kinds)");
      if (item.second.is_none())  // said "'lstm/W' holds object values, got NoneType"
        throw py::type_error("set_params: '" + name + "' is None; a parameter takes an array "
                             "of real numbers of its shape");
      if (kind != 'f' && kind != 'i' && kind != 'u')
        throw py::type_error("set_params: '" + name + "' holds " +
                             std::string(py::str(raw.dtype())) + " values, got " +
                             type_name(item.second) + "; a parameter takes real numbers");
      if (sizeof(T) == 4 && kind == 'f' && raw.dtype().itemsize() > 4) past_range(raw, name);
      auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(raw);
      if (!a)
        throw py::value_error("set_params: '" + name + "' is not an array of numbers in host "
                              "memory, got " + type_name(item.second) +
                              " (a DeviceArray's numpy() makes one)");
      bool same = a.ndim() == p.rank;
      for (int d = 0; same && d < p.rank; ++d) same = a.shape(d) == p.shape[d];
      if (!same)
        throw py::value_error("set_params: '" + name + "' is " + shape_of(p) + ", got " +
                              shape_text(a));
      given.emplace_back(index, std::move(a));
    }
    return given;
  }

  // Refuses finite values past the model's range before the cast, which made them inf
  // (1e300 into an f32 model was stored as inf, with NumPy's warning only).
  static void past_range(const py::array& raw, const std::string& name) {
    const double largest = double(std::numeric_limits<T>::max());
    const py::ssize_t k = mdl::past_range(raw, largest);
    if (k < 0) return;
    const double value = py::cast<double>(raw.attr("ravel")()[py::int_(k)]);
    char text[160];
    std::snprintf(text, sizeof text, "set_params: '%s' holds %g (element %zd), past the "
                  "range of the model's f32 (its largest number is %.2g)", name.c_str(),
                  value, k, largest);
    throw py::value_error(text);
  }

  // Copies checked values into their parameters (under the lock).
  void write(const Values& given) {
    for (const auto& [index, a] : given) {
      const std::size_t bytes = numel(spec_->params[index]) * sizeof(T);
      const Device& device = *spec_->device;
      if (device.holds && bytes && device.holds(a.data())) {  // a view of a DeviceArray
        device.copy(state_->device, state_->param[index], a.data(), bytes);
        device.finish(state_->device);
      } else {
        upload(spec_->device, state_->device, state_->param[index], a.data(), bytes);
      }
    }
  }

  // The names this model takes from the model it shares with.
  py::list shared() const {
    py::list out;
    for (const std::string& name : shared_) out.append(name);
    return out;
  }

 private:
  // `n` values and the padding after them that starts the next parameter at a kAlign
  // boundary of the store (whose start the device aligns): a vector load of a weight then
  // never straddles two cache lines (host_device.cpp, allocate).
  static int64_t padded(int64_t n) {
    return int64_t(align_up(std::size_t(n) * sizeof(T)) / sizeof(T));
  }

  // Points this model's parameters that `share` also has at its memory (a ValueError where
  // a shape differs, or where no name is in both).
  void link(const Parameters& share) {
    const ModelSpec<T>& other = *share.spec_;
    for (int i = 0; i < spec_->n_params; ++i) {
      const ParamSpec& p = spec_->params[i];
      for (int j = 0; j < other.n_params; ++j) {
        const ParamSpec& q = other.params[j];
        if (std::strcmp(p.name, q.name)) continue;
        bool same = p.rank == q.rank;
        for (int d = 0; same && d < p.rank; ++d) same = p.shape[d] == q.shape[d];
        if (!same)
          throw py::value_error(std::string(spec_->name) + " cannot share parameters with " +
                                other.name + ": '" + p.name + "' is " + shape_of(q) + " in " +
                                other.name + " but " + shape_of(p) + " in " + spec_->name);
        state_->param[i] = share.state_->param[j];
        shared_.push_back(p.name);
      }
    }
    if (shared_.empty())
      throw py::value_error(std::string(spec_->name) + " has no parameter name in common with " +
                            other.name + ": there is nothing to share");
  }

  std::string shape_of(const ParamSpec& p) const {
    std::string out = std::string(spec_->dtype.name) + "[";
    for (int d = 0; d < p.rank; ++d) out += (d ? ", " : "") + std::to_string(p.shape[d]);
    return out + "]";
  }

  const ModelSpec<T>* spec_;
  State<T>* state_;  // the model's, whose `param` this fills
  // Every store the parameters live in: its own and those of the models it shares with,
  // kept alive as long as it is.
  std::vector<std::shared_ptr<Buffer<T>>> stores_;
  std::vector<std::string> shared_;
};

}  // namespace mdl
