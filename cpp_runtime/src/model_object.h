// The object behind every generated model class (src/python_module.cpp binds it): argument
// checks, the parameter store (shared between models where asked), the arenas, the
// optimizer, checkpoints, and the lock that serializes calls.
// A model whose spec names a device (the cuda target) keeps its parameters, optimizer state
// and inputs in the device's memory and moves data only through the spec's `Device` table,
// so this file, compiled by the host compiler for every target, includes no CUDA header.
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

#include "arguments.h"
#include "checkpoint.h"
#include "device_array.h"
#include "dlpack.h"
#include "mdl/device.h"
#include "mdl/optimizer.h"

namespace mdl {

namespace py = pybind11;

// A model's context on its device (Device::open), closed when the model goes; none on the
// host. Making it is where a model without a usable device fails (Device::require).
class DeviceContext {
 public:
  explicit DeviceContext(const Device* device) : device_(device) {
    if (!device) return;
    device->require();
    handle_ = device->open();
  }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  ~DeviceContext() {
    if (handle_) device_->close(handle_);
  }

  void* get() const { return handle_; }

 private:
  const Device* device_;
  void* handle_ = nullptr;
};

// One instance of a model: its parameters (its own, and those it shares with the model it
// was made from), arenas, optimizer and the saved forward a backward needs.
template <class T>
class Model {
 public:
  // `share`: a model of the same module whose parameters this one uses wherever a name is
  // in both (null: none); they must have the same shapes. Its other parameters are its own,
  // initialized from `seed` as they would be unshared.
  Model(const ModelSpec<T>* spec, uint64_t seed, const Model* share)
      : spec_(spec), context_(spec->device) {
    state_.device = context_.get();
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
    auto store = std::make_shared<Buffer<T>>(spec->device, own);
    stores_.push_back(store);
    // a device's store is initialized on the host, as the host's is, then copied over
    std::vector<T> staged(spec->device ? own : 0);
    T* values = spec->device ? staged.data() : store->data();
    own = 0;
    for (int i = 0; i < spec->n_params; ++i) {
      if (state_.param[i]) continue;
      const ParamSpec& p = spec->params[i];
      state_.param[i] = store->data() + own;
      initialize(values + own, std::vector<int64_t>(p.shape, p.shape + p.rank), p.init, seed,
                 i);
      own += numel(p);
    }
    if (spec->device) upload(spec->device, state_.device, store->data(), values, own * sizeof(T));
  }

  // {name: array}: on the host views of the live weights; a device model's are read-only
  // copies (writing to them would change nothing).
  py::dict params(py::object self) {
    py::dict out;
    if (spec_->device) {
      std::unique_lock<std::mutex> guard = hold_lock();
      for (int i = 0; i < spec_->n_params; ++i) {
        py::array copy = copy_of(spec_->params[i], state_.param[i], spec_->device, state_.device);
        copy.attr("flags").attr("writeable") = false;
        out[py::str(spec_->params[i].name)] = copy;
      }
      return out;
    }
    for (int i = 0; i < spec_->n_params; ++i) {
      const ParamSpec& p = spec_->params[i];
      std::vector<py::ssize_t> shape(p.shape, p.shape + p.rank);
      out[py::str(p.name)] = py::array_t<T>(shape, state_.param[i], self);
    }
    return out;
  }

  // Copies `values` ({name: array of the parameter's shape}) into those parameters, on
  // either target: the way to change a device model's weights (its `params` are copies).
  // Every name and shape is checked before anything changes.
  void set_params(const py::dict& values) {
    std::vector<std::pair<int, py::array_t<T>>> given;
    for (auto item : values) {
      std::string name = py::str(item.first);
      int index = -1;
      for (int i = 0; i < spec_->n_params; ++i)
        if (name == spec_->params[i].name) index = i;
      if (index < 0)
        throw py::key_error("set_params: model " + std::string(spec_->name) +
                            " has no parameter '" + name + "'");
      const ParamSpec& p = spec_->params[index];
      auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(item.second);
      if (!a) throw py::value_error("set_params: '" + name + "' is not a numeric array");
      bool same = a.ndim() == p.rank;
      for (int d = 0; same && d < p.rank; ++d) same = a.shape(d) == p.shape[d];
      if (!same)
        throw py::value_error("set_params: '" + name + "' is " + shape_of(p) + ", got " +
                              shape_text(a));
      given.emplace_back(index, std::move(a));
    }
    std::unique_lock<std::mutex> guard = hold_lock();
    for (const auto& [index, a] : given)
      upload(spec_->device, state_.device, state_.param[index], a.data(),
             numel(spec_->params[index]) * sizeof(T));
    trained_ = nullptr;  // the saved forward values belong to the old parameters
  }

  // Whether calls hand back outputs and gradients as DeviceArrays (DLPack) in the device's
  // memory instead of NumPy arrays: a device model's choice.
  bool outputs_on_device() const { return outputs_on_device_; }
  void set_outputs_on_device(bool on) {
    if (on && !spec_->device)
      throw py::value_error("outputs_on_device: model " + std::string(spec_->name) +
                            " runs on the CPU, whose outputs are NumPy arrays already");
    outputs_on_device_ = on;
  }

  // Where the model's memory lives and its code runs: "cpu", or the device's name ("cuda").
  std::string device() const { return spec_->device ? spec_->device->name : "cpu"; }

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
        place(in.args, in.call.inputs, train_args_);
        train(v, in.call);
      } else {
        place(in.args, in.call.inputs, infer_args_);
        in.call.outputs.assign(spec_->n_outputs, nullptr);
        run(v.infer, in.call);
      }
    }
    // The backward reads a training forward's inputs where they are: they stay alive
    // until the next training forward (under the lock and the GIL).
    if (training) trained_inputs_ = std::move(in.args.keep);
    return results(spec_->outputs, spec_->n_outputs, spec_->output_shape, in.call);
  }

  // The gradients of the last training forward: of its minimized output, or in a vjp build
  // the vector-Jacobian product of `kwargs`, a cotangent per float output of that forward.
  py::dict backward(py::kwargs kwargs) {
    std::vector<Cotangent> given = cotangent_arrays(kwargs);
    Arguments args;
    Call call;
    for (const Cotangent& c : given) args.add(c.arg, call.inputs);
    std::unique_lock<std::mutex> guard(*lock_, std::defer_lock);
    {
      py::gil_scoped_release release;
      guard.lock();
      if (!trained_)
        throw std::runtime_error("backward() needs a forward(..., training=True) first");
      check_cotangents(given);
      place(args, call.inputs, cotangent_args_);
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
      place(in.args, in.call.inputs, train_args_);
      train(v, in.call);
      Call grads;
      gradients(grads);
      update(grads.outputs.data());
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
      place(in.args, in.call.inputs, train_args_);
      train(v, in.call);
      Call grads;
      gradients(grads);
      flat_.assign(spec_->param_count, T(0));
      for (int i = 0; i < spec_->n_params; ++i) {
        const ParamSpec& p = spec_->params[i];
        if (p.grad >= 0)
          download(spec_->device, state_.device, flat_.data() + p.offset, grads.outputs[p.grad],
                   numel(p) * sizeof(T));
      }
      pending_ = true;
    }
    trained_inputs_ = std::move(in.args.keep);  // a backward() may still follow (see forward)
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
    T* flat = flat_.data();
    if (spec_->device) {  // the optimizer reads the gradients where the parameters are
      if (flat_device_.size() != spec_->param_count)
        flat_device_ = Buffer<T>(spec_->device, spec_->param_count);
      upload(spec_->device, state_.device, flat_device_.data(), flat, flat_.size() * sizeof(T));
      flat = flat_device_.data();
    }
    std::vector<void*> grads(spec_->n_grads, nullptr);
    for (int i = 0; i < spec_->n_params; ++i)
      if (spec_->params[i].grad >= 0)
        grads[spec_->params[i].grad] = flat + spec_->params[i].offset;
    update(grads.data());
    pending_ = false;
  }

  void set_optimizer(const std::string& name, py::kwargs kwargs) {
    OptimizerConfig c = configure(name, kwargs);
    std::lock_guard<std::mutex> guard(*lock_);
    opt_.reset(c, spec_->param_count, spec_->device);
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
    std::unique_lock<std::mutex> guard = hold_lock();
    py::dict arrays = checkpoint_arrays(*spec_, state_, opt_);
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
    std::unique_lock<std::mutex> guard = hold_lock();
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
    Arguments args;  // owns converted inputs during the call
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
      in.args.add(convert(s, kwargs[s.name], in.call.dims), in.call.inputs);
    }
    return in;
  }

  // Under the lock: `pointers` in the device's memory (arguments.h); `buffers` are the
  // model's copies for this kind of call.
  void place(const Arguments& args, std::vector<void*>& pointers,
             std::vector<Buffer<char>>& buffers) {
    if (!spec_->device) return;
    // the last training forward's inputs are about to be overwritten: no backward of it
    if (&buffers == &train_args_) trained_ = nullptr;
    mdl::place(spec_->device, state_.device, args, pointers, buffers);
  }

  // Under the lock: one of the model's functions; a device's reports what its code found
  // wrong with the inputs once the call's work is done.
  void run(Function<T> function, Call& call) {
    if (!spec_->device) return function(state_, call);
    try {
      function(state_, call);
    } catch (...) {
      // work already queued must end before the memory it reads may go (a tensor's owner)
      try {
        spec_->device->finish(state_.device);
      } catch (...) {
      }
      throw;
    }
    spec_->device->finish(state_.device);
  }

  // Under the lock: the optimizer's step from the gradients `grads` (where the parameters are).
  void update(void* const* grads) {
    opt_.step(*spec_, state_.device, state_.param.data(), grads);
    if (spec_->device) spec_->device->finish(state_.device);
    trained_ = nullptr;  // the saved forward values belong to the old parameters
  }

  // The model's lock, taken without the GIL (a thread holding the lock may need the GIL).
  std::unique_lock<std::mutex> hold_lock() {
    std::unique_lock<std::mutex> guard(*lock_, std::defer_lock);
    py::gil_scoped_release release;
    guard.lock();
    return guard;
  }

  // A vjp backward's cotangent, read under the GIL: the argument, its shape, what it was.
  struct Cotangent {
    Argument arg;
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
      py::handle obj = kwargs[s.name];
      if (on_cuda(obj, "cotangent", s.name, *spec_)) {
        DLPackTensor t = take_dlpack(obj);
        out.push_back({in_place(t, "cotangent", s.name), t.shape(),
                       has_dtype(*t.tensor, s.dtype), shape_text(t)});
        continue;
      }
      py::array a = as_array(obj);
      out.push_back({on_host(a), std::vector<int64_t>(a.shape(), a.shape() + a.ndim()),
                     has_dtype(a, s.dtype), shape_text(a)});
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
    run(v.train, call);
    trained_ = &v;
    dims_ = call.dims;
  }

  // Under the lock, after `train`: the gradients, left in `call.outputs`.
  void gradients(Call& call) {
    call.dims = dims_;
    call.outputs.assign(spec_->n_grads, nullptr);
    run(trained_->backward, call);
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

  // Input `s` of the declared dtype, rank and dims, C-contiguous; binds user dims.
  Argument convert(const TensorSpec& s, py::handle obj, std::vector<int64_t>& dims) {
    if (on_cuda(obj, "input", s.name, *spec_)) {
      DLPackTensor t = take_dlpack(obj);
      check_type(s, spec_->dim_names, has_dtype(*t.tensor, s.dtype), t.tensor->ndim,
                 t.tensor->shape, [&] { return shape_text(t); }, dims);
      return in_place(t, "input", s.name);
    }
    py::array a = as_array(obj);
    check_type(s, spec_->dim_names, has_dtype(a, s.dtype), a.ndim(), a.shape(),
               [&] { return shape_text(a); }, dims);
    return on_host(a);
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
      if (outputs_on_device_) {
        out[py::str(specs[k].name)] = DeviceArray(spec_->device, state_.device,
                                                  call.outputs[k], shape, specs[k].dtype);
        continue;
      }
      py::array a(py::dtype(specs[k].dtype.numpy),
                  std::vector<py::ssize_t>(shape.begin(), shape.end()));
      download(spec_->device, state_.device, a.mutable_data(), call.outputs[k], a.nbytes());
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
  DeviceContext context_;  // first made, last closed: everything below may use it
  State<T> state_;
  Optimizer<T> opt_;
  std::shared_ptr<std::mutex> lock_;
  // Every store this model's parameters live in: its own and those of the models it shares
  // with, kept alive as long as it is.
  std::vector<std::shared_ptr<Buffer<T>>> stores_;
  std::vector<std::string> shared_;
  std::vector<int> cotangents_;  // the outputs a vjp backward takes cotangents of
  bool outputs_on_device_ = false;
  std::vector<T> flat_;   // forward_backward's gradients, at each parameter's offset
  Buffer<T> flat_device_;  // a device model's copy of flat_, which apply_gradients steps from
  bool pending_ = false;  // flat_ holds gradients not applied yet
  const Variant<T>* trained_ = nullptr;
  std::vector<py::object> trained_inputs_;  // what the last forward(training=True) read
  // A device model's copies of host arguments, by position: a training forward's inputs
  // (which its backward reads later), an inference's, and a vjp backward's cotangents.
  std::vector<Buffer<char>> train_args_, infer_args_, cotangent_args_;
  std::vector<int64_t> dims_;
};

}  // namespace mdl
