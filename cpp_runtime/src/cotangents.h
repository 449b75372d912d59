// A vjp build's backward takes a cotangent for each of its float outputs (`ModelSpec::
// cotangents`): which those are, reading them from the call's keywords as inputs are read,
// and checking them against the outputs of the last training forward. An ordinary build
// takes none: its backward differentiates the minimized output.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "arguments.h"
#include "dlpack.h"
#include "mdl/model.h"

namespace mdl {

namespace py = pybind11;

// A cotangent, read under the GIL: the argument, its shape, what it was.
struct Cotangent {
  Argument arg;
  std::vector<int64_t> shape;
  bool dtype_ok;
  std::string text;
};

template <class T>
class Cotangents {
 public:
  explicit Cotangents(const ModelSpec<T>& spec)
      : spec_(&spec), outputs_(spec.cotangents, spec.cotangents + spec.n_cotangents) {}

  // The outputs whose cotangents backward takes, in order.
  py::list names() const {
    py::list out;
    for (int k : outputs_) out.append(spec_->outputs[k].name);
    return out;
  }

  // The cotangents backward was given, by output (a TypeError for a missing or unknown
  // name; an ordinary build takes none), converted as inputs are.
  std::vector<Cotangent> read(const py::kwargs& kwargs) const {
    std::vector<Cotangent> out;
    if (outputs_.empty()) {
      if (kwargs.size())
        throw py::type_error("backward() of model " + std::string(spec_->name) +
                             " takes no cotangents: it was built without vjp and returns the "
                             "gradients of its minimized output (load(..., vjp=True) or "
                             "mdlc build --vjp builds a vector-Jacobian product)");
      return out;
    }
    std::string names = list();
    for (auto item : kwargs) {
      std::string key = text_of(item.first);
      bool known = false;
      for (int k : outputs_) known |= spec_->outputs[k].name == key;
      if (!known) throw py::type_error("unknown cotangent '" + key + "' (" + names + ")");
    }
    for (int k : outputs_) {
      const TensorSpec& s = spec_->outputs[k];
      if (!kwargs.contains(s.name))
        throw py::type_error("missing cotangent '" + std::string(s.name) + "' (" + names + ")");
      py::handle obj = kwargs[s.name];
      if (on_cuda(obj, "cotangent", s.name, *spec_)) {
        DLPackTensor t = take_dlpack(obj);
        out.push_back({in_place(t, "cotangent", s.name), t.shape(),
                       has_dtype(*t.tensor, s.dtype), shape_text(t)});
        continue;
      }
      if (obj.is_none())  // NumPy reads None as an object scalar: "got object[]"
        throw py::type_error("cotangent '" + std::string(s.name) + "': expected " +
                             s.dtype.name + " (output '" + s.name + "'), got None");
      py::array a = as_array(obj, "cotangent", s.name);
      a = as_declared(obj, a, s.dtype, "cotangent", s.name);
      Argument view;  // a view of the emulated device's memory is read there
      out.push_back({device_view(*spec_->device, a, "cotangent", s.name, view) ? view
                                                                              : on_host(a),
                     std::vector<int64_t>(a.shape(), a.shape() + a.ndim()),
                     has_dtype(a, s.dtype), shape_text(a)});
    }
    return out;
  }

  // Under the lock: each cotangent has the dtype and shape its output had in the last
  // training forward (its user dims `dims`, run-time sizes `dyn`).
  void check(const std::vector<Cotangent>& given, const int64_t* dims,
             const int64_t* dyn) const {
    for (size_t i = 0; i < given.size(); ++i) {
      const TensorSpec& s = spec_->outputs[outputs_[i]];
      std::vector<int64_t> want(s.rank);
      spec_->output_shape(outputs_[i], dims, dyn, want.data());
      if (given[i].dtype_ok && given[i].shape == want) continue;
      std::string expected = std::string(s.dtype.name) + "[";
      for (int d = 0; d < s.rank; ++d) expected += (d ? ", " : "") + std::to_string(want[d]);
      throw py::value_error("cotangent '" + std::string(s.name) + "': expected " + expected +
                            "] (output '" + s.name + "' of the last training forward), got " +
                            given[i].text + (given[i].dtype_ok ? " (wrong shape)" : " (wrong dtype)"));
    }
  }

  // `what` runs the backward without cotangents, which a vjp build has not.
  void need_minimized(const char* what) const {
    if (!outputs_.empty())
      throw std::runtime_error(std::string(what) + ": model " + spec_->name + " was built "
                               "with vjp: its backward takes cotangents (backward(**cotangents)), "
                               "not the minimized output; build it without vjp to train it "
                               "natively");
  }

 private:
  std::string list() const {
    std::string out = "backward() takes one per float output: ";
    for (size_t i = 0; i < outputs_.size(); ++i)
      out += (i ? ", " : "") + std::string(spec_->outputs[outputs_[i]].name);
    return out;
  }

  const ModelSpec<T>* spec_;
  std::vector<int> outputs_;  // the outputs a vjp backward takes cotangents of
};

}  // namespace mdl
