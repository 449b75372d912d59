// The object behind every generated model class (src/python_module.cpp binds it): argument
// checks, the parameter store (shared between models where asked), the arenas, the
// optimizer, checkpoints, and the lock that serializes calls.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "mdl/optimizer.h"

namespace mdl {

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

// One instance of a model: its parameters (its own, and those it shares with the model it
// was made from), arenas, optimizer and the saved forward a backward needs.
template <class T>
class Model {
 public:
  // `share`: a model of the same module whose parameters this one uses wherever a name is
  // in both (null: none); they must have the same shapes. Its other parameters are its own,
  // initialized from `seed` as they would be unshared.
  Model(const ModelSpec<T>* spec, uint64_t seed, const Model* share) : spec_(spec) {
    state_.seed = seed;
    state_.param.assign(spec->n_params, nullptr);
    state_.saved.assign(spec->saved, nullptr);
    state_.tapes.resize(spec->tapes);
    state_.packs = std::vector<Arena>(spec->packs);
    state_.scratch = std::vector<Arena>(spec->scratch);
    state_.dyn.assign(spec->dynamic, 0);
    if (share) {
      lock_ = share->lock_;  // models sharing parameters take turns
      stores_ = share->stores_;
      link(*share);
    } else {
      lock_ = std::make_shared<std::mutex>();
    }
    cotangents_.assign(spec->cotangents, spec->cotangents + spec->n_cotangents);
    int64_t own = 0;
    for (int i = 0; i < spec->n_params; ++i)
      if (!state_.param[i]) own += numel(spec->params[i]);
    auto store = std::make_shared<std::vector<T>>(own, T(0));
    stores_.push_back(store);
    own = 0;
    for (int i = 0; i < spec->n_params; ++i) {
      if (state_.param[i]) continue;
      const ParamSpec& p = spec->params[i];
      state_.param[i] = store->data() + own;
      own += numel(p);
      initialize(state_.param[i], std::vector<int64_t>(p.shape, p.shape + p.rank), p.init,
                 seed, i);
    }
  }

  py::dict params(py::object self) {
    py::dict out;
    for (int i = 0; i < spec_->n_params; ++i) {
      const ParamSpec& p = spec_->params[i];
      std::vector<py::ssize_t> shape(p.shape, p.shape + p.rank);
      out[py::str(p.name)] = py::array_t<T>(shape, state_.param[i], self);
    }
    return out;
  }

  // The names this model takes from `share` (where it shares none, a ValueError).
  py::list shared() const {
    py::list out;
    for (const std::string& name : shared_) out.append(name);
    return out;
  }

  // The declared inputs, in order: {name: type as written, e.g. "f32[T, B, 16]"}.
  py::dict input_types() const {
    py::dict out;
    for (int i = 0; i < spec_->n_inputs; ++i)
      out[py::str(spec_->inputs[i].name)] = type_text(spec_->inputs[i], spec_->dim_names);
    return out;
  }

  // The outputs whose cotangents backward takes (a vjp build: every float output), in order.
  py::list cotangents() const {
    py::list out;
    for (int k : cotangents_) out.append(spec_->outputs[k].name);
    return out;
  }

  py::dict forward(py::kwargs kwargs) {
    bool training = kwargs.contains("training") && py::cast<bool>(kwargs["training"]);
    Inputs in = inputs(kwargs, true);
    const Variant<T>& v = choose(in.call.dims);
    // The lock is taken without the GIL and kept until the results are copied out of the
    // arena, so another thread's call cannot overwrite them first.
    std::unique_lock<std::mutex> guard(*lock_, std::defer_lock);
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
    // The backward reads a training forward's inputs where they are: they stay alive
    // until the next training forward (under the lock and the GIL).
    if (training) trained_inputs_ = std::move(in.keep);
    return results(spec_->outputs, spec_->n_outputs, spec_->output_shape, in.call);
  }

  // The gradients of the last training forward: of its minimized output, or in a vjp build
  // the vector-Jacobian product of `kwargs`, a cotangent per float output of that forward.
  py::dict backward(py::kwargs kwargs) {
    std::vector<Cotangent> given = cotangent_arrays(kwargs);
    Call call;
    std::unique_lock<std::mutex> guard(*lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
      if (!trained_)
        throw std::runtime_error("backward() needs a forward(..., training=True) first");
      check_cotangents(given);
      for (const Cotangent& c : given) call.inputs.push_back(const_cast<void*>(c.array.data()));
      gradients(call);
    }
    return results(spec_->grads, spec_->n_grads, spec_->grad_shape, call);
  }

  // Forward, backward and the optimizer's update in one call; the outputs of the forward.
  py::dict train_step(py::kwargs kwargs) {
    Inputs in = inputs(kwargs, false);
    const Variant<T>& v = choose(in.call.dims);
    std::unique_lock<std::mutex> guard(*lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
      if (opt_.config.kind == OptimizerConfig::NONE)
        throw std::runtime_error("train_step() needs an optimizer: call set_optimizer(\"sgd\" "
                                 "or \"adam\", lr=...) first");
      need_minimized("train_step()");
      train(v, in.call);
      Call grads;
      gradients(grads);
      opt_.step(*spec_, state_.param.data(), grads.outputs.data());
      trained_ = nullptr;  // the saved forward values belong to the old parameters
    }
    return results(spec_->outputs, spec_->n_outputs, spec_->output_shape, in.call);
  }

  // Data-parallel training in pieces: a training forward and the backward, whose gradients
  // land in one flat buffer (`gradient_buffer`, at each parameter's offset) that a caller
  // may combine with other processes' before `apply_gradients` updates the parameters.
  py::dict forward_backward(py::kwargs kwargs) {
    Inputs in = inputs(kwargs, false);
    const Variant<T>& v = choose(in.call.dims);
    std::unique_lock<std::mutex> guard(*lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
      need_minimized("forward_backward()");
      train(v, in.call);
      Call grads;
      gradients(grads);
      flat_.assign(spec_->param_count, T(0));
      for (int i = 0; i < spec_->n_params; ++i) {
        const ParamSpec& p = spec_->params[i];
        if (p.grad >= 0 && numel(p))
          std::memcpy(flat_.data() + p.offset, grads.outputs[p.grad], numel(p) * sizeof(T));
      }
      pending_ = true;
    }
    trained_inputs_ = std::move(in.keep);  // a backward() may still follow (see forward)
    return results(spec_->outputs, spec_->n_outputs, spec_->output_shape, in.call);
  }

  // The flat gradient buffer, as a writable view (every parameter at its offset; zeros for
  // frozen ones): empty until the first forward_backward.
  py::array_t<T> gradient_buffer(py::object self) {
    return py::array_t<T>({py::ssize_t(flat_.size())}, {py::ssize_t(sizeof(T))}, flat_.data(),
                          self);
  }

  // Where each parameter's gradient starts in the flat buffer: {name: (offset, shape)}.
  py::dict gradient_layout() const {
    py::dict out;
    for (int i = 0; i < spec_->n_params; ++i) {
      const ParamSpec& p = spec_->params[i];
      if (p.grad >= 0)
        out[py::str(p.name)] = py::make_tuple(p.offset, std::vector<int64_t>(p.shape, p.shape + p.rank));
    }
    return out;
  }

  // The optimizer's update from the flat buffer, as train_step would make it.
  void apply_gradients() {
    std::unique_lock<std::mutex> guard(*lock_, std::defer_lock);
    py::gil_scoped_release release;
    guard.lock();
    if (opt_.config.kind == OptimizerConfig::NONE)
      throw std::runtime_error("apply_gradients() needs an optimizer: call set_optimizer(...) first");
    if (!pending_)
      throw std::runtime_error("apply_gradients() needs a forward_backward(...) first");
    std::vector<void*> grads(spec_->n_grads, nullptr);
    for (int i = 0; i < spec_->n_params; ++i)
      if (spec_->params[i].grad >= 0)
        grads[spec_->params[i].grad] = flat_.data() + spec_->params[i].offset;
    opt_.step(*spec_, state_.param.data(), grads.data());
    pending_ = false;
    trained_ = nullptr;  // the saved forward values belong to the old parameters
  }

  void set_optimizer(const std::string& name, py::kwargs kwargs) {
    OptimizerConfig c = configure(name, kwargs);
    std::lock_guard<std::mutex> guard(*lock_);
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
    std::lock_guard<std::mutex> guard(*lock_);
    opt_.config.lr = lr;
  }

  // Training calls so far: the next one draws dropout masks from stream calls + 1.
  uint64_t rng_calls() const { return state_.calls; }
  void set_rng_calls(uint64_t n) { state_.calls = n; }

  // Parameters, optimizer state and the dropout stream's place into `path` (checkpoint.h).
  void save(py::handle path) {
    py::dict arrays;
    std::unique_lock<std::mutex> guard(*lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
    }
    arrays = checkpoint_arrays(*spec_, state_, opt_);
    guard.unlock();
    write_npz(path, arrays);
  }

  // Everything `save` wrote, checked in full before anything is changed.
  void load(py::handle path) {
    std::string file = py::str(path);
    Checkpoint<T> ck = check_checkpoint(*spec_, read_npz(path), file);
    if (ck.config.kind != OptimizerConfig::NONE)
      if (const char* problem = invalid(ck.config))
        throw py::value_error(file + ": the optimizer's options are invalid: " + problem);
    std::unique_lock<std::mutex> guard(*lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
    }
    restore(*spec_, ck, state_, opt_);
    trained_ = nullptr;  // the saved forward values belong to the old parameters
  }

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

  // A vjp backward's cotangent, read under the GIL: the array, its shape, what it was.
  struct Cotangent {
    py::array array;
    std::vector<int64_t> shape;
    bool dtype_ok;
    std::string text;
  };

  // The cotangents backward was given, by output (a TypeError for a missing or unknown
  // name; an ordinary build takes none), converted as inputs are.
  std::vector<Cotangent> cotangent_arrays(const py::kwargs& kwargs) const {
    std::vector<Cotangent> out;
    if (cotangents_.empty()) {
      if (kwargs.size())
        throw py::type_error("backward() of model " + std::string(spec_->name) +
                             " takes no cotangents: it was built without vjp and returns the "
                             "gradients of its minimized output (load(..., vjp=True) or "
                             "mdlc build --vjp builds a vector-Jacobian product)");
      return out;
    }
    std::string names = cotangent_list();
    for (auto item : kwargs) {
      std::string key = py::str(item.first);
      bool known = false;
      for (int k : cotangents_) known |= spec_->outputs[k].name == key;
      if (!known) throw py::type_error("unknown cotangent '" + key + "' (" + names + ")");
    }
    for (int k : cotangents_) {
      const TensorSpec& s = spec_->outputs[k];
      if (!kwargs.contains(s.name))
        throw py::type_error("missing cotangent '" + std::string(s.name) + "' (" + names + ")");
      py::array a = as_array(kwargs[s.name]);
      Cotangent c{a, std::vector<int64_t>(a.shape(), a.shape() + a.ndim()),
                  has_dtype(a, s.dtype), shape_text(a)};
      if (!(a.flags() & py::array::c_style)) c.array = py::array::ensure(a, py::array::c_style);
      if (!c.array) throw std::bad_alloc();
      out.push_back(std::move(c));
    }
    return out;
  }

  // Under the lock: each cotangent has the dtype and shape its output had in the last
  // training forward.
  void check_cotangents(const std::vector<Cotangent>& given) const {
    for (size_t i = 0; i < given.size(); ++i) {
      const TensorSpec& s = spec_->outputs[cotangents_[i]];
      std::vector<int64_t> want(s.rank);
      spec_->output_shape(cotangents_[i], dims_.data(), state_.dyn.data(), want.data());
      if (given[i].dtype_ok && given[i].shape == want) continue;
      std::string expected = std::string(s.dtype.name) + "[";
      for (int d = 0; d < s.rank; ++d) expected += (d ? ", " : "") + std::to_string(want[d]);
      throw py::value_error("cotangent '" + std::string(s.name) + "': expected " + expected +
                            "] (output '" + s.name + "' of the last training forward), got " +
                            given[i].text + (given[i].dtype_ok ? " (wrong shape)" : " (wrong dtype)"));
    }
  }

  // Under the lock: `what` runs the backward without cotangents, which a vjp build has not.
  void need_minimized(const char* what) const {
    if (!cotangents_.empty())
      throw std::runtime_error(std::string(what) + " differentiates the minimized output, but "
                               "model " + spec_->name + " was built with vjp: its backward "
                               "takes cotangents (backward(**cotangents)); build it without "
                               "vjp to train it natively");
  }

  std::string cotangent_list() const {
    std::string out = "backward() takes one per float output: ";
    for (size_t i = 0; i < cotangents_.size(); ++i)
      out += (i ? ", " : "") + std::string(spec_->outputs[cotangents_[i]].name);
    return out;
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
    const char* problem = invalid(c);
    if (!kwargs.contains("lr")) problem = "lr is required";
    if (kwargs.contains("clip_norm") && !kwargs["clip_norm"].is_none() && c.clip_norm == 0)
      problem = "clip_norm must be > 0 (or None)";
    if (problem) throw py::value_error("set_optimizer(\"" + name + "\"): " + problem);
    return c;
  }

  std::string input_list() const {
    std::string out = "inputs are ";
    for (int i = 0; i < spec_->n_inputs; ++i)
      out += (i ? ", " : "") + std::string(spec_->inputs[i].name);
    return out;
  }

  // A NumPy array of `obj`: itself, one over a `__dlpack__` object's memory, or a new one.
  static py::array as_array(py::handle obj) {
    py::object arr = py::reinterpret_borrow<py::object>(obj);
    if (!py::isinstance<py::array>(arr)) {
      py::module_ np = py::module_::import("numpy");
      arr = py::hasattr(arr, "__dlpack__") ? np.attr("from_dlpack")(arr)
                                           : np.attr("asarray")(arr);
    }
    return py::reinterpret_borrow<py::array>(arr);
  }

  // A NumPy array of the declared dtype, rank and dims, C-contiguous; binds user dims.
  py::array convert(const TensorSpec& s, py::handle obj, std::vector<int64_t>& dims) {
    py::array a = as_array(obj);
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

  // Points this model's parameters that `share` also has at its memory.
  void link(const Model& share) {
    for (int i = 0; i < spec_->n_params; ++i) {
      const ParamSpec& p = spec_->params[i];
      for (int j = 0; j < share.spec_->n_params; ++j) {
        const ParamSpec& q = share.spec_->params[j];
        if (std::strcmp(p.name, q.name)) continue;
        bool same = p.rank == q.rank;
        for (int d = 0; same && d < p.rank; ++d) same = p.shape[d] == q.shape[d];
        if (!same)
          throw py::value_error(std::string(spec_->name) + " cannot share parameters with " +
                                share.spec_->name + ": '" + p.name + "' is " +
                                shape_of(q) + " in " + share.spec_->name + " but " +
                                shape_of(p) + " in " + spec_->name);
        state_.param[i] = share.state_.param[j];
        shared_.push_back(p.name);
      }
    }
    if (shared_.empty())
      throw py::value_error(std::string(spec_->name) + " has no parameter name in common with " +
                            share.spec_->name + ": there is nothing to share");
  }

  static std::string shape_of(const ParamSpec& p) {
    std::string out = sizeof(T) == 4 ? "f32[" : "f64[";
    for (int d = 0; d < p.rank; ++d) out += (d ? ", " : "") + std::to_string(p.shape[d]);
    return out + "]";
  }

  const ModelSpec<T>* spec_;
  State<T> state_;
  Optimizer<T> opt_;
  std::shared_ptr<std::mutex> lock_;
  // Every store this model's parameters live in: its own and those of the models it shares
  // with, kept alive as long as it is.
  std::vector<std::shared_ptr<std::vector<T>>> stores_;
  std::vector<std::string> shared_;
  std::vector<int> cotangents_;  // the outputs a vjp backward takes cotangents of
  std::vector<T> flat_;   // forward_backward's gradients, at each parameter's offset
  bool pending_ = false;  // flat_ holds gradients not applied yet
  const Variant<T>* trained_ = nullptr;
  std::vector<py::array> trained_inputs_;  // what the last forward(training=True) read
  std::vector<int64_t> dims_;
};

}  // namespace mdl
