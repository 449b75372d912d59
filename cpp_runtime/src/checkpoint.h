// Checkpoints: a model's parameters, optimizer state and place in its random stream, as
// named arrays in one .npz file that NumPy reads with allow_pickle=False.
//   format                  "mdl checkpoint 1"
//   model                   the model's name (for people; loading does not check it)
//   param/NAME              every parameter, trainable or not
//   optimizer/name          "none", "sgd" or "adam"; with an optimizer also
//   optimizer/steps         updates so far (Adam's bias correction counts them)
//   optimizer/OPTION        lr, momentum, weight_decay, beta1, beta2, eps, clip_norm (0: none),
//                           nesterov, decoupled
//   optimizer/first/NAME    each trainable parameter's momentum (SGD) or first moment (Adam)
//   optimizer/second/NAME   Adam's second moments
//   rng/seed, rng/calls     the dropout stream: the seed and the training calls made
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>
#include <vector>

#include "arguments.h"
#include "mdl/device.h"
#include "mdl/model.h"
#include "mdl/optimizer.h"
#include "npz.h"

namespace mdl {

namespace py = pybind11;

constexpr const char* CHECKPOINT_FORMAT = "mdl checkpoint 1";

// The optimizer's numeric options, by their names in a checkpoint and in set_optimizer.
struct OptionField {
  const char* name;
  double OptimizerConfig::*value;
};
constexpr OptionField OPTION_FIELDS[] = {
    {"lr", &OptimizerConfig::lr},         {"momentum", &OptimizerConfig::momentum},
    {"weight_decay", &OptimizerConfig::weight_decay}, {"beta1", &OptimizerConfig::beta1},
    {"beta2", &OptimizerConfig::beta2},   {"eps", &OptimizerConfig::eps},
    {"clip_norm", &OptimizerConfig::clip_norm}};

inline const char* optimizer_name(OptimizerConfig::Kind kind) {
  return kind == OptimizerConfig::SGD ? "sgd" : kind == OptimizerConfig::ADAM ? "adam" : "none";
}

inline int64_t numel(const ParamSpec& p) {
  int64_t n = 1;
  for (int d = 0; d < p.rank; ++d) n *= p.shape[d];
  return n;
}

// A new array of parameter `p`'s shape holding `data`, in the memory of `device`
// (`context` the model's context there).
template <class T>
py::array_t<T> copy_of(const ParamSpec& p, const T* data, const Device* device, void* context) {
  py::array_t<T> a(std::vector<py::ssize_t>(p.shape, p.shape + p.rank));
  download(device, context, a.mutable_data(), data, numel(p) * sizeof(T));
  return a;
}

// The longest parameter name a checkpoint takes. NumPy's savez writes entry E as the zip
// member "E.npy", and a zip file holds a member name's length in 16 bits: a name past 65535
// bytes was a struct.error from deep in zipfile ("ushort format requires 0 <= number <=
// 65535"), naming nothing. A parameter's longest entry is optimizer/second/NAME; one limit
// for every optimizer, so that a model that saves with one saves with any.
constexpr std::size_t MAX_PARAM_NAME = 65535 - (sizeof("optimizer/second/.npy") - 1);

// Before anything is written: a ValueError naming (the start of) the first parameter
// whose name is past MAX_PARAM_NAME.
template <class T>
void check_param_names_fit(const ModelSpec<T>& spec) {
  for (int i = 0; i < spec.n_params; ++i) {
    const std::string name = spec.params[i].name;
    if (name.size() <= MAX_PARAM_NAME) continue;
    throw py::value_error(
        "save(path): parameter '" + name.substr(0, 40) + "...' has a name of " +
        std::to_string(name.size()) + " bytes, and a checkpoint takes names of at most " +
        std::to_string(MAX_PARAM_NAME) + ": it is an .npz archive, a zip file, whose member "
        "names hold at most 65535 bytes, and a parameter's longest is "
        "'optimizer/second/NAME.npy'. Nothing was written");
  }
}

// What a checkpoint of this model holds, as copies (taken under the model's lock).
template <class T>
py::dict checkpoint_arrays(const ModelSpec<T>& spec, const State<T>& state,
                           const Optimizer<T>& opt) {
  auto copy = [&](const ParamSpec& p, const T* data) {
    return copy_of(p, data, spec.device, state.device);
  };
  py::dict out;
  out["format"] = py::array(py::str(CHECKPOINT_FORMAT));
  out["model"] = py::array(py::str(spec.name));
  for (int i = 0; i < spec.n_params; ++i)
    out[py::str("param/" + std::string(spec.params[i].name))] =
        copy(spec.params[i], state.param[i]);
  const OptimizerConfig& c = opt.config;
  out["optimizer/name"] = py::array(py::str(optimizer_name(c.kind)));
  if (c.kind != OptimizerConfig::NONE) {
    out["optimizer/steps"] = py::array_t<int64_t>({}, {}, &opt.steps);
    for (const OptionField& f : OPTION_FIELDS)
      out[py::str("optimizer/" + std::string(f.name))] = py::array_t<double>({}, {}, &(c.*f.value));
    out["optimizer/nesterov"] = py::array(py::bool_(c.nesterov));
    out["optimizer/decoupled"] = py::array(py::bool_(c.decoupled));
    for (int i = 0; i < spec.n_params; ++i) {
      const ParamSpec& p = spec.params[i];
      if (p.grad < 0) continue;
      out[py::str("optimizer/first/" + std::string(p.name))] = copy(p, opt.first.data() + p.offset);
      if (c.kind == OptimizerConfig::ADAM)
        out[py::str("optimizer/second/" + std::string(p.name))] =
            copy(p, opt.second.data() + p.offset);
    }
  }
  out["rng/seed"] = py::array_t<uint64_t>({}, {}, &state.seed);
  out["rng/calls"] = py::array_t<uint64_t>({}, {}, &state.calls);
  return out;
}

// The dtype an entry must have: NumPy's kind character, item size (0: any) and name.
struct EntryType {
  char kind;
  int itemsize;
  const char* name;
};
constexpr EntryType F64{'f', 8, "float64"}, I64{'i', 8, "int64"}, U64{'u', 8, "uint64"},
    BOOL{'b', 1, "bool"}, STR{'U', 0, "str"};

template <class T>
constexpr EntryType VALUES{'f', int(sizeof(T)), sizeof(T) == 4 ? "float32" : "float64"};

// A checkpoint read and checked against a model: what `restore` writes into it.
template <class T>
struct Checkpoint {
  using Values = py::array_t<T, py::array::c_style | py::array::forcecast>;
  std::vector<Values> params, first, second;  // by parameter index; first, second: may be empty
  OptimizerConfig config;
  int64_t steps = 0;
  uint64_t seed = 0, calls = 0;
};

// Checks every entry of `arrays` (read from `file`) against the model, in a fixed order,
// and raises a ValueError naming the file and the first problem; nothing is written.
template <class T>
Checkpoint<T> check_checkpoint(const ModelSpec<T>& spec, const py::dict& arrays,
                               const std::string& file) {
  auto fail = [&](const std::string& what) {
    return py::value_error(file + ": " + what);
  };
  std::vector<std::string> expected;
  auto get = [&](const std::string& key, const EntryType& type,
                 const std::vector<int64_t>& shape = {}) -> py::array {
    expected.push_back(key);
    if (!arrays.contains(key)) throw fail("no '" + key + "' in the checkpoint");
    py::array a = arrays[py::str(key)];
    bool ok = a.dtype().kind() == type.kind &&
              (!type.itemsize || a.dtype().itemsize() == type.itemsize) &&
              a.ndim() == py::ssize_t(shape.size());
    for (size_t d = 0; ok && d < shape.size(); ++d) ok = a.shape(d) == shape[d];
    if (!ok) {
      std::string want, got;
      for (size_t d = 0; d < shape.size(); ++d) want += (d ? ", " : "") + std::to_string(shape[d]);
      for (py::ssize_t d = 0; d < a.ndim(); ++d) got += (d ? ", " : "") + std::to_string(a.shape(d));
      throw fail("'" + key + "' should be " + type.name + "[" + want + "], the file has " +
                 std::string(py::str(a.dtype())) + "[" + got + "]");
    }
    return a;
  };
  auto scalar = [&](const std::string& key, const EntryType& type) {
    return get(key, type).attr("item")();
  };
  auto text = [&](const std::string& key) { return py::cast<std::string>(scalar(key, STR)); };
  auto param_shape = [](const ParamSpec& p) {
    return std::vector<int64_t>(p.shape, p.shape + p.rank);
  };

  Checkpoint<T> out;
  if (!arrays.contains("format")) throw fail("not an mdl checkpoint (it has no 'format' entry)");
  std::string format = text("format");
  if (format != CHECKPOINT_FORMAT)
    throw fail("format '" + format + "' is not '" + CHECKPOINT_FORMAT + "'");
  get("model", STR);
  for (int i = 0; i < spec.n_params; ++i) {
    const ParamSpec& p = spec.params[i];
    out.params.push_back(get("param/" + std::string(p.name), VALUES<T>, param_shape(p)));
  }
  std::string name = text("optimizer/name");
  if (name == "sgd") out.config.kind = OptimizerConfig::SGD;
  else if (name == "adam") out.config.kind = OptimizerConfig::ADAM;
  else if (name != "none") throw fail("unknown optimizer '" + name + "'");
  // a model that cannot train (no `minimize`, as a generation step; a vjp build) takes a
  // training model's checkpoint: its parameters and dropout stream, not the optimizer it
  // could never step (it refused the file for its first optimizer entry)
  const bool trains = spec.variants[0].train && spec.n_cotangents == 0;
  if (!trains && out.config.kind != OptimizerConfig::NONE) {
    for (auto item : arrays) {
      std::string key = text_of(item.first);
      if (key.rfind("optimizer/", 0) == 0) expected.push_back(key);
    }
    out.config.kind = OptimizerConfig::NONE;
  }
  if (out.config.kind != OptimizerConfig::NONE) {
    out.steps = py::cast<int64_t>(scalar("optimizer/steps", I64));
    if (out.steps < 0) throw fail("'optimizer/steps' is negative");
    for (const OptionField& f : OPTION_FIELDS)
      out.config.*f.value = py::cast<double>(scalar("optimizer/" + std::string(f.name), F64));
    out.config.nesterov = py::cast<bool>(scalar("optimizer/nesterov", BOOL));
    out.config.decoupled = py::cast<bool>(scalar("optimizer/decoupled", BOOL));
    out.first.resize(spec.n_params);
    out.second.resize(spec.n_params);
    for (int i = 0; i < spec.n_params; ++i) {
      const ParamSpec& p = spec.params[i];
      if (p.grad < 0) continue;
      out.first[i] = get("optimizer/first/" + std::string(p.name), VALUES<T>, param_shape(p));
      if (out.config.kind == OptimizerConfig::ADAM) {
        const std::string key = "optimizer/second/" + std::string(p.name);
        out.second[i] = get(key, VALUES<T>, param_shape(p));
        // averages of squares: a negative one (a file edited or made elsewhere) would make
        // the next step's square root NaN, and the parameter with it
        py::array_t<T, py::array::c_style | py::array::forcecast> v(out.second[i]);
        for (py::ssize_t k = 0; k < v.size(); ++k)
          if (v.data()[k] < T(0))
            throw fail("'" + key + "' holds " + std::string(py::str(py::float_(v.data()[k]))) +
                       " (element " + std::to_string(k) + "): Adam's second moments are "
                       "averages of squares, never negative");
      }
    }
  }
  out.seed = py::cast<uint64_t>(scalar("rng/seed", U64));
  out.calls = py::cast<uint64_t>(scalar("rng/calls", U64));
  for (auto item : arrays) {
    std::string key = text_of(item.first);
    bool known = false;
    for (const std::string& e : expected) known |= e == key;
    if (!known)
      throw fail("'" + key + "' is not part of a checkpoint of model " + spec.name +
                 (key.rfind("param/", 0) == 0 ? " (it has no such parameter)" : ""));
  }
  return out;
}

// Writes a checked checkpoint into the model (under its lock).
template <class T>
void restore(const ModelSpec<T>& spec, const Checkpoint<T>& ck, State<T>& state,
             Optimizer<T>& opt) {
  auto copy = [&](T* to, const typename Checkpoint<T>::Values& from, const ParamSpec& p) {
    upload(spec.device, state.device, to, from.data(), numel(p) * sizeof(T));
  };
  // the optimizer's buffers first: where the device has no room for them, the
  // MemoryError leaves the parameters and the optimizer as they were
  opt.reset(ck.config, spec.param_count, spec.device);
  for (int i = 0; i < spec.n_params; ++i) copy(state.param[i], ck.params[i], spec.params[i]);
  opt.steps = ck.steps;
  for (int i = 0; i < int(ck.first.size()); ++i) {
    const ParamSpec& p = spec.params[i];
    if (p.grad < 0) continue;
    copy(opt.first.data() + p.offset, ck.first[i], p);
    if (ck.config.kind == OptimizerConfig::ADAM)
      copy(opt.second.data() + p.offset, ck.second[i], p);
  }
  state.seed = ck.seed;
  state.calls = ck.calls;
}

}  // namespace mdl
