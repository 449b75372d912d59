// The optimizer's settings as Python gives and reads them: set_optimizer's name and
// keywords made an OptimizerConfig (every option checked), and the settings described
// back as a dict.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "arguments.h"
#include "mdl/optimizer.h"

namespace mdl {

namespace py = pybind11;

// The configuration set_optimizer(name, **kwargs) asks for, for a model whose numbers are
// T: a ValueError or TypeError says what is wrong with it.
template <class T>
OptimizerConfig configure(const std::string& name, const py::kwargs& kwargs) {
  OptimizerConfig c;
  if (name == "sgd") c.kind = OptimizerConfig::SGD;
  else if (name == "adam") c.kind = OptimizerConfig::ADAM;
  else throw py::value_error("unknown optimizer '" + name + "' (optimizers are sgd, adam)");
  bool sgd = c.kind == OptimizerConfig::SGD;
  const char* known = sgd ? "lr, momentum, nesterov, weight_decay, clip_norm"
                          : "lr, beta1, beta2, eps, weight_decay, decoupled, clip_norm";
  // every unknown option named at once (one at a time, a caller fixed them one by one)
  std::string unknown;
  int unknowns = 0;
  for (auto item : kwargs) {
    std::string key = text_of(item.first), list = std::string(", ") + known + ", ";
    if (list.find(", " + key + ", ") == std::string::npos) {
      unknown += (unknowns++ ? ", '" : "'") + key + "'";
    }
  }
  if (unknowns)
    throw py::type_error("set_optimizer(\"" + name + "\") got " +
                         (unknowns > 1 ? "unknown options " : "an unknown option ") +
                         unknown + " (options are " + known + ")");
  for (auto item : kwargs) {
    std::string key = text_of(item.first);
    py::handle value = item.second;
    std::string what = "set_optimizer(\"" + name + "\"): " + key;
    auto number = [&] { return number_argument(value, what); };
    if (key == "lr") c.lr = number();
    else if (key == "weight_decay") c.weight_decay = number();
    else if (key == "clip_norm") c.clip_norm = value.is_none() ? 0 : number();
    else if (sgd && key == "momentum") c.momentum = number();
    else if (sgd && key == "nesterov") c.nesterov = bool_argument(value, what);
    else if (!sgd && key == "beta1") c.beta1 = number();
    else if (!sgd && key == "beta2") c.beta2 = number();
    else if (!sgd && key == "eps") c.eps = number();
    else if (!sgd && key == "decoupled") c.decoupled = bool_argument(value, what);
    else throw py::type_error("set_optimizer(\"" + name + "\") got an unknown option '" +
                              key + "' (options are " + known + ")");
  }
  std::string problem = invalid<T>(c);
  if (!kwargs.contains("lr")) problem = "lr is required";
  if (kwargs.contains("clip_norm") && !kwargs["clip_norm"].is_none() && c.clip_norm == 0)
    problem = "clip_norm must be > 0 (or None)";
  if (!problem.empty()) throw py::value_error("set_optimizer(\"" + name + "\"): " + problem);
  return c;
}

// The optimizer's settings and steps so far, as `Model.optimizer` reads them (None: no
// optimizer is set).
template <class T>
py::object describe(const Optimizer<T>& opt) {
  const OptimizerConfig& c = opt.config;
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
  out["steps"] = opt.steps;
  return out;
}

}  // namespace mdl
