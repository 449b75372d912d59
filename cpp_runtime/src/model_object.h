// The object behind every generated model class (src/python_module.cpp binds it): its
// calls (forward, backward, training steps) with their argument checks, the arenas, the
// optimizer, checkpoints, and the lock that serializes calls. Its parameters are
// parameters.h's, a vjp backward's cotangents cotangents.h's, the optimizer's settings
// optimizer_options.h's.
// A model keeps its parameters, optimizer state and inputs in the memory of its spec's
// `Device` (the host's for the cpu target, the GPU's for the cuda target) and moves data
// only through that table, so this file, compiled by the host compiler for every target,
// includes no CUDA header.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "arguments.h"
#include "checkpoint.h"
#include "cotangents.h"
#include "device_array.h"
#include "dlpack.h"
#include "mdl/arena.h"  // huge_pages_setting
#include "mdl/device.h"
#include "mdl/faults.h"  // refuse_dims
#include "mdl/optimizer.h"
#include "optimizer_options.h"
#include "parameters.h"
#include "model_lock.h"
#include "released_gil.h"

namespace mdl {

namespace py = pybind11;

// A model's context on its device (Device::open; the host's is null), closed when the
// model goes. Making it is where a model without a usable device fails (Device::require).
class DeviceContext {
 public:
  explicit DeviceContext(const Device* device) : device_(device) {
    huge_pages_setting();  // a bad MDL_HUGE_PAGES is an error here, where a model is made
    device->require();
    handle_ = device->open();
  }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  ~DeviceContext() { device_->close(handle_); }

  void* get() const { return handle_; }

 private:
  const Device* device_;
  void* handle_ = nullptr;
};

// What models that share parameters (`params=`) share besides them: the lock they take
// turns under, and a count of the changes any of them made to the parameters (an update,
// set_params, a checkpoint), by which each knows that its saved forward and its pending
// gradients belong to weights that are gone.
struct Sharing {
  CallLock lock;
  uint64_t changes = 0;
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
      : spec_(spec),
        context_(spec->device),
        sharing_(share ? share->sharing_ : std::make_shared<Sharing>()),  // sharers take turns
        params_(*spec, state_, context_.get(), seed, share ? &share->params_ : nullptr),
        cotangents_(*spec),
        inputs_py_(spec->inputs, spec->n_inputs),
        outputs_py_(spec->outputs, spec->n_outputs),
        grads_py_(spec->grads, spec->n_grads),
        training_py_(interned("training")) {
    state_.device = context_.get();
    state_.seed = seed;
    state_.saved.assign(spec->saved, nullptr);
    state_.tapes.resize(spec->tapes);
    state_.packs = std::vector<Arena>(spec->packs);
    state_.arenas = std::vector<Arena>(spec->arenas);
    state_.scratch = std::vector<Arena>(spec->scratch);
    state_.dyn.assign(spec->dynamic, 0);
    state_.profile.assign(spec->n_profile_sites, ProfileCount{});
  }

  // {name: array}: on the host views of the live weights; a device model's are read-only
  // copies (writing to them would change nothing).
  py::dict params(py::object self) {
    if (spec_->device->in_place)
      return params_dict(params_.views(self),
                         "a model's params cannot be changed: its arrays are views of "
                         "the weights; write into one (params[name][...] = values) or call "
                         "set_params({name: values})");
    Holding guard = hold_lock("params()", Use::READS);
    return params_dict(params_.copies(),
                       "a model's params cannot be changed: its arrays are read-only "
                       "copies of the weights on the device; call set_params({name: values})");
  }

  // {name: DeviceArray} viewing the live weights in the device's memory (a device model's;
  // a CPU model's `params` are views already), read and written in place through DLPack:
  // the PyTorch bridge's parameters. Once they are out, any stream may write them, so every
  // later call of the model first waits for the whole device (settle).
  py::dict device_params(py::object self) {
    if (spec_->device->in_place)
      throw py::value_error("device_params: model " + std::string(spec_->name) +
                            " runs on the CPU, whose params are views of its weights already");
    Holding guard = hold_lock("device_params()", Use::CALL);
    params_shared_ = true;
    py::dict out;
    for (int i = 0; i < spec_->n_params; ++i) {
      const ParamSpec& p = spec_->params[i];
      out[py::str(p.name)] = DeviceArray(spec_->device, reinterpret_cast<char*>(state_.param[i]),
                                         self, std::vector<int64_t>(p.shape, p.shape + p.rank),
                                         spec_->dtype);
    }
    return params_dict(out, "a model's device_params cannot be changed: they are views of the "
                            "weights in the device's memory; write into one "
                            "(torch.from_dlpack(device_params[name]).copy_(values)) or call "
                            "set_params({name: values})");
  }

  // Copies `values` ({name: array of the parameter's shape}) into those parameters, on
  // either target: the way to change a device model's weights (its `params` are copies).
  // Every name and shape is checked before anything changes.
  void set_params(py::handle values) {
    if (!PyDict_Check(values.ptr()))
      throw py::type_error("set_params(values) takes a dict {parameter full name: array}, got " +
                           type_name(values));
    typename Parameters<T>::Values given = params_.checked(values.cast<py::dict>());
    Holding guard = hold_lock("set_params()", Use::CALL);
    params_.write(given);
    parameters_changed();
  }

  // Whether calls hand back outputs and gradients as DeviceArrays (DLPack) in the device's
  // memory instead of NumPy arrays: a device model's choice.
  bool outputs_on_device() const { return outputs_on_device_; }
  void set_outputs_on_device(py::handle value) {
    bool on = bool_argument(value, "outputs_on_device");
    if (on && spec_->device->in_place)
      throw py::value_error("outputs_on_device: model " + std::string(spec_->name) +
                            " runs on the CPU, whose outputs are NumPy arrays already");
    outputs_on_device_ = on;
  }

  // A copy of `array` in the device's memory, as a DeviceArray of the dtype of one of the
  // model's inputs: an input that stays on the device across calls, read there in place
  // (a device model's).
  DeviceArray to_device(py::handle array) {
    if (spec_->device->in_place)
      throw py::value_error("to_device: model " + std::string(spec_->name) +
                            " runs on the CPU, which reads NumPy arrays where they are");
    // one in the device's memory already (a DeviceArray, or the emulated device's DLPack
    // view of one) is copied there: uploaded as host memory, the emulator refused it
    const Device& device = *spec_->device;
    if (device.check_process) device.check_process();
    const DeviceArray* on = DeviceArray::of(array, spec_->device);
    py::array a;
    if (!on) {
      py::array given = as_array(array, "to_device(array)");
      a = py::array::ensure(given, py::array::c_style);
      if (!a) throw OutOfMemory(std::size_t(given.nbytes()));
    }
    const void* there = on ? on->data() : device.holds && a.nbytes() && device.holds(a.data())
                                              ? a.data() : nullptr;
    std::string dtypes;  // the inputs' dtypes, the ones an array on the device may have
    for (int i = 0; i < spec_->n_inputs; ++i) {
      const DTypeSpec& d = spec_->inputs[i].dtype;
      if (on ? std::strcmp(on->dtype.numpy, d.numpy) == 0 : has_dtype(a, d)) {
        Holding guard = hold_lock("to_device()", Use::CALL);
        if (!there) return DeviceArray::from_host(spec_->device, state_.device, a, d);
        DeviceArray out(spec_->device, state_.device, there,
                        on ? on->shape : std::vector<int64_t>(a.shape(), a.shape() + a.ndim()),
                        d);
        device.finish(state_.device);
        return out;
      }
      if (dtypes.find(d.numpy) == std::string::npos)
        dtypes += (dtypes.empty() ? "" : ", ") + std::string(d.numpy);
    }
    throw py::value_error("to_device: expected an array of a dtype of model " +
                          std::string(spec_->name) + "'s inputs (" + dtypes + "), got " +
                          (on ? std::string(on->dtype.numpy) : std::string(py::str(a.dtype()))));
  }

  // How many calls were captured as CUDA graphs and replayed from them (a device's).
  py::dict cuda_graphs() const {
    int64_t captured = 0, replayed = 0;
    if (spec_->device->graph_counts)
      spec_->device->graph_counts(state_.device, &captured, &replayed);
    py::dict out;
    out["captured"] = captured;
    out["replayed"] = replayed;
    return out;
  }

  // Where the model's memory lives and its code runs: its device's name ("cpu", "cuda",
  // "cuda-emulated").
  std::string device() const { return spec_->device->name; }

  // The parameter names this model takes from `share`, the model given as params= (none
  // without it; a model that would share no name is refused when it is made).
  py::list shared() const { return params_.shared(); }

  // The declared inputs, in order: {name: type as written, e.g. f32[T, B, 16]}.
  py::dict input_types() const {
    py::dict out;
    for (int i = 0; i < spec_->n_inputs; ++i)
      out[py::str(spec_->inputs[i].name)] = type_text(spec_->inputs[i], spec_->dim_names);
    return out;
  }

  // The input whose sum counts the tokens the minimized loss is a mean over (a
  // cross_entropy's lengths), else None.
  py::object loss_tokens() const {
    return spec_->loss_tokens ? py::object(py::str(spec_->loss_tokens)) : py::object(py::none());
  }

  // The declared dims the minimized loss is a mean over (("B",) for a mean of rows), else
  // None.
  py::object loss_mean_dims() const {
    if (!spec_->loss_mean_dims) return py::none();
    py::list dims;
    for (const char *at = spec_->loss_mean_dims; *at;) {
      const char* end = std::strchr(at, ',');
      std::size_t n = end ? static_cast<std::size_t>(end - at) : std::strlen(at);
      dims.append(py::str(at, n));
      at += n + (end ? 1 : 0);
    }
    return py::tuple(dims);
  }

  // The outputs whose cotangents backward takes (a vjp build: every float output), in order.
  py::list cotangents() const { return cotangents_.names(); }

  // What a call given positional arguments is told: `method` takes them by name, as
  // `forward(tokens=..., lengths=...)` (the inputs; backward's: the cotangents).
  [[noreturn]] void positional(const std::string& method) const {
    std::vector<std::string> names;
    if (method == "backward") {
      for (py::handle n : cotangents_.names()) names.push_back(py::str(n));
    } else {
      for (int i = 0; i < spec_->n_inputs; ++i) names.push_back(spec_->inputs[i].name);
    }
    std::string call = method + "(";
    for (std::size_t i = 0; i < names.size(); ++i) call += (i ? ", " : "") + names[i] + "=...";
    throw py::type_error(method + "() of model " + spec_->name + " takes " +
                         (names.empty() ? "no positional arguments: call " + call + ")"
                                        : "its arguments by name: " + call + ")"));
  }

  py::dict forward(py::kwargs kwargs) {
    PyObject* flag = lookup(kwargs, training_py_);
    bool training = flag && bool_argument(flag, "forward(): training");
    std::optional<Inputs> checked;
    try {
      checked.emplace(inputs(kwargs, true));
    } catch (...) {
      if (training) no_backward_after_refused_forward();
      throw;
    }
    Inputs& in = *checked;
    in.call.fresh = true;  // its results go to Python
    const Variant<T>& v = choose(in.call.dims);
    // The lock is taken without the GIL and kept until the results are copied out of the
    // arena, so another thread's call cannot overwrite them first.
    Holding guard(sharing_->lock);
    {
      ReleasedGil release;
      guard.lock("forward()", spec_->name, Use::CALL);
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
    return results(outputs_py_, spec_->output_shape, in.call);
  }

  // The gradients of the last training forward: of its minimized output, or in a vjp build
  // the vector-Jacobian product of `kwargs`, a cotangent per float output of that forward.
  py::dict backward(py::kwargs kwargs) {
    std::vector<Cotangent> given = cotangents_.read(kwargs);
    Arguments args;
    Call call;
    call.fresh = true;  // its results go to Python
    for (const Cotangent& c : given) args.add(c.arg, call.inputs);
    Holding guard(sharing_->lock);
    {
      ReleasedGil release;
      guard.lock("backward()", spec_->name, Use::CALL);
      if (!spec_->variants[0].train)  // it said to run a forward that is refused too
        throw std::runtime_error(std::string("backward(): model ") + spec_->name +
                                 " has no backward pass: it minimizes no output and was "
                                 "built without vjp (add `minimize NAME`, or build with "
                                 "vjp=True, mdlc build --vjp, for its outputs' gradients)");
      if (!trained_)
        throw std::runtime_error(
            stale_forward_ ? "backward(): this model's parameters changed (set_params, load, "
                             "an optimizer's step) since its forward(..., training=True); "
                             "run that forward again"
                           : "backward() needs a forward(..., training=True) first");
      if (changed_by_sharer())
        throw std::runtime_error(
            "backward(): a model that shares this one's parameters (params=) changed them "
            "since its forward(..., training=True); run that forward again");
      cotangents_.check(given, dims_.data(), state_.dyn.data());
      place(args, call.inputs, cotangent_args_);
      gradients(call);
    }
    return results(grads_py_, spec_->grad_shape, call);
  }

  // Forward, backward and the optimizer's update in one call; the outputs of the forward.
  py::dict train_step(py::kwargs kwargs) {
    Inputs in = training_inputs(kwargs);
    in.call.fresh = true;  // its outputs go to Python (its gradients do not)
    const Variant<T>& v = choose(in.call.dims);
    Holding guard(sharing_->lock);
    {
      ReleasedGil release;
      guard.lock("train_step()", spec_->name, Use::CALL);
      need_training("train_step()");  // before the optimizer, which such a model cannot set
      if (opt_.config.kind == OptimizerConfig::NONE)
        throw std::runtime_error("train_step() needs an optimizer: call set_optimizer(\"sgd\" "
                                 "or \"adam\", lr=...) first");
      place(in.args, in.call.inputs, train_args_);
      Call grads;
      train_and_differentiate(v, in.call, grads);
      update(grads.outputs.data());
    }
    return results(outputs_py_, spec_->output_shape, in.call);
  }

  // Data-parallel training in pieces: a training forward and the backward, whose gradients
  // land in one flat buffer (`gradient_buffer`, at each parameter's offset) that a caller
  // may combine with other processes' before `apply_gradients` updates the parameters.
  py::dict forward_backward(py::kwargs kwargs) {
    Inputs in = training_inputs(kwargs);
    in.call.fresh = true;  // its outputs go to Python (its gradients do not)
    const Variant<T>& v = choose(in.call.dims);
    Holding guard(sharing_->lock);
    {
      ReleasedGil release;
      guard.lock("forward_backward()", spec_->name, Use::CALL);
      need_training("forward_backward()");
      place(in.args, in.call.inputs, train_args_);
      Call grads;
      train_and_differentiate(v, in.call, grads);
      if (grads_shared_) {  // into the device's buffer, which went out (NCCL reduces it)
        device_flat();
        for (int i = 0; i < spec_->n_params; ++i) {
          const ParamSpec& p = spec_->params[i];
          if (p.grad >= 0)
            spec_->device->copy(state_.device, flat_device_.data() + p.offset,
                                grads.outputs[p.grad], numel(p) * sizeof(T));
        }
        spec_->device->finish(state_.device);  // done before any stream reads it
        grads_on_host_ = false;
      } else {
        flat_.assign(spec_->param_count, T(0));
        for (int i = 0; i < spec_->n_params; ++i) {
          const ParamSpec& p = spec_->params[i];
          if (p.grad >= 0)
            download(spec_->device, state_.device, flat_.data() + p.offset,
                     grads.outputs[p.grad], numel(p) * sizeof(T));
        }
        grads_on_host_ = true;
      }
      pending_ = true;
    }
    trained_inputs_ = std::move(in.args.keep);  // a backward() may still follow (see forward)
    return results(outputs_py_, spec_->output_shape, in.call);
  }

  // The flat gradient buffer, as a writable view (every parameter at its offset; zeros for
  // frozen ones): empty until the first forward_backward. Where the gradients are in the
  // device's buffer (device_gradient_buffer went out), they are copied here first, and
  // apply_gradients steps from here again.
  py::array_t<T> gradient_buffer(py::object self) {
    if (!grads_on_host_) {
      Holding guard = hold_lock("gradient_buffer()", Use::CALL);
      flat_.resize(std::size_t(spec_->param_count));
      download(spec_->device, state_.device, flat_.data(), flat_device_.data(),
               flat_.size() * sizeof(T));
      grads_on_host_ = true;
    }
    return py::array_t<T>({py::ssize_t(flat_.size())}, {py::ssize_t(sizeof(T))}, flat_.data(),
                          self);
  }

  // A device model's flat gradient buffer in the device's memory, a DeviceArray view that
  // PyTorch reads and writes in place through DLPack (DataParallel reduces it with NCCL):
  // from now on forward_backward leaves its gradients there, not in gradient_buffer, and
  // apply_gradients steps from there. Once it is out, any stream may write it, so every
  // later call of the model first waits for the whole device (settle).
  py::object device_gradient_buffer(py::object self) {
    if (spec_->device->in_place)
      throw py::value_error("device_gradient_buffer: model " + std::string(spec_->name) +
                            " runs on the CPU: its gradient_buffer is in its memory already");
    Holding guard = hold_lock("device_gradient_buffer()", Use::CALL);
    device_flat();
    if (pending_ && grads_on_host_)  // the gradients of the last forward_backward, here too
      upload(spec_->device, state_.device, flat_device_.data(), flat_.data(),
             flat_.size() * sizeof(T));
    grads_on_host_ = false;
    grads_shared_ = true;
    return py::cast(DeviceArray(spec_->device, reinterpret_cast<char*>(flat_device_.data()),
                                self, {spec_->param_count}, spec_->dtype));
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

  // The scope regularizers of the trainable parameters that have one: {name: (l1, l2)},
  // each penalty's strength (the PyTorch bridge adds them to the gradients it hands on).
  py::dict regularizers() const {
    py::dict out;
    for (int i = 0; i < spec_->n_params; ++i) {
      const ParamSpec& p = spec_->params[i];
      if (p.grad >= 0 && (p.l1 != 0 || p.l2 != 0))
        out[py::str(p.name)] = py::make_tuple(p.l1, p.l2);
    }
    return out;
  }

  // The optimizer's update from the flat buffer, as train_step would make it.
  void apply_gradients() {
    Holding guard(sharing_->lock);
    ReleasedGil release;
    guard.lock("apply_gradients()", spec_->name, Use::CALL);
    settle();
    need_training("apply_gradients()");
    if (opt_.config.kind == OptimizerConfig::NONE)
      throw std::runtime_error("apply_gradients() needs an optimizer: call set_optimizer(...) first");
    if (!pending_)
      throw std::runtime_error("apply_gradients() needs a forward_backward(...) first, since "
                               "the parameters last changed: it holds no gradients to apply "
                               "(a new model or a copy holds none)");
    if (changed_by_sharer())
      throw std::runtime_error(
          "apply_gradients(): a model that shares this one's parameters (params=) changed "
          "them since its forward_backward(...); run that again");
    T* flat = flat_.data();
    if (!spec_->device->in_place) {  // the optimizer reads the gradients where the parameters are
      device_flat();
      if (grads_on_host_)
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

  void set_optimizer(py::handle name, py::kwargs kwargs) {
    if (!PyUnicode_Check(name.ptr()))
      throw py::type_error("set_optimizer(name): name must be \"sgd\" or \"adam\", got " +
                           type_name(name));
    need_training("set_optimizer()");
    OptimizerConfig c = configure<T>(text_of(name), kwargs);
    // the lock is taken without the GIL, as every call takes it: a call holding it may be
    // waiting for the GIL to hand back its results
    Holding guard = hold_lock("set_optimizer()", Use::CALL);
    opt_.reset(c, spec_->param_count, spec_->device);
  }

  py::object optimizer() const { return describe(opt_); }

  double lr() const {
    if (opt_.config.kind == OptimizerConfig::NONE)
      throw std::runtime_error("no optimizer is set: call set_optimizer(...) first");
    return opt_.config.lr;
  }

  void set_lr(py::handle value) {
    double lr = number_argument(value, "lr");
    if (opt_.config.kind == OptimizerConfig::NONE)
      throw std::runtime_error("no optimizer is set: call set_optimizer(...) first");
    OptimizerConfig c = opt_.config;
    c.lr = lr;
    if (std::string problem = invalid<T>(c); !problem.empty())
      throw py::value_error(problem);
    Holding guard = hold_lock("set_lr()", Use::CALL);
    opt_.config.lr = lr;
  }

  // <module.Name: where, dtype, parameters, seed; optimizer>, for people (`named`: the
  // instance's class, module.Name, or a subclass's own).
  std::string repr(const std::string& named) const {
    std::string count = std::to_string(spec_->param_count);
    for (int at = int(count.size()) - 3; at > 0; at -= 3) count.insert(size_t(at), ",");
    std::string out = "<" + named + ": " + spec_->device->name + ", " +
                      spec_->dtype.name + ", " + std::to_string(spec_->n_params) +
                      (spec_->n_params == 1 ? " parameter (" : " parameters (") + count +
                      (spec_->param_count == 1 ? " number), seed " : " numbers), seed ") +
                      std::to_string(state_.seed);
    const OptimizerConfig& c = opt_.config;
    if (c.kind == OptimizerConfig::NONE) return out + ", no optimizer>";
    std::ostringstream lr;
    lr << c.lr;
    return out + "; " + optimizer_name(c.kind) + ", lr " + lr.str() + ", " +
           std::to_string(opt_.steps) + (opt_.steps == 1 ? " step>" : " steps>");
  }

  // Training calls so far that succeeded: the next one draws dropout masks from stream
  // calls + 1.
  uint64_t rng_calls() const { return state_.calls; }
  // Training forwards begun, or refused, so far: which one the saved values (a backward's)
  // belong to, as the PyTorch bridge tells whether to replay its own (rng_calls, which a
  // caller may set back and a refused call does not move, cannot say).
  uint64_t training_forwards() const { return forwards_; }
  void set_rng_calls(py::handle n) {
    uint64_t calls = count_argument(n, "rng_calls");
    Holding guard = hold_lock("set_rng_calls()", Use::CALL);  // a training call may be counting
    state_.calls = calls;
  }

  // The dropout stream's seed (the class's seed=, a checkpoint's rng/seed): with rng_calls,
  // where the stream stands. The PyTorch bridge's state_dict carries both, so that a run
  // resumed from it into a model made with another seed draws the saved run's masks.
  uint64_t rng_seed() const { return state_.seed; }
  void set_rng_seed(py::handle n) {
    uint64_t seed = count_argument(n, "rng_seed");
    Holding guard = hold_lock("set_rng_seed()", Use::CALL);  // a training call may be drawing
    state_.seed = seed;
  }

  // Parameters, optimizer state and the dropout stream's place into `path` (checkpoint.h).
  void save(py::handle path) {
    path_argument(path, "save(path): path");
    check_param_names_fit(*spec_);
    Holding guard = hold_lock("save()", Use::READS);
    py::dict arrays = checkpoint_arrays(*spec_, state_, opt_);
    guard.unlock();
    write_npz(path, arrays);
  }

  // Everything `save` wrote, checked in full before anything is changed.
  void load(py::handle path) {
    path_argument(path, "load(path): path");
    restore_from(read_npz(path), shown_path(path));
  }

  // What pickle and copy keep of a model (python_module.cpp's __reduce__): its checkpoint's
  // arrays and where its outputs go. The seed comes first: the class called with it makes
  // the instance that __setstate__ then fills.
  py::tuple reduced() {
    Holding guard = hold_lock("a copy of the model", Use::READS);
    py::dict arrays = checkpoint_arrays(*spec_, state_, opt_);
    return py::make_tuple(state_.seed, arrays, outputs_on_device_);
  }

  // Takes what `reduced` gave (checked as a checkpoint file is, before anything changes).
  void set_state(py::handle state) {
    std::string what = "__setstate__ of model " + std::string(spec_->name);
    if (!PyTuple_Check(state.ptr()) || py::len(state) != 2 ||
        !PyDict_Check(PyTuple_GET_ITEM(state.ptr(), 0)))
      throw py::type_error(what + " takes (checkpoint arrays: dict, outputs_on_device: bool[, attributes: dict]), "
                           "what __reduce__ gives; got " + type_name(state));
    py::tuple given = py::reinterpret_borrow<py::tuple>(state);
    bool on_device = bool_argument(given[1], what + ": outputs_on_device");
    if (on_device && spec_->device->in_place)
      throw py::value_error(what + ": outputs_on_device is True, but the model runs on the CPU");
    restore_from(given[0].cast<py::dict>(), what);
    outputs_on_device_ = on_device;
  }

  // A profiled build's sites (mdl/model.h's ProfileSite), each with what it took in this
  // model's calls since it was made or reset_profile(): [{"function", "site", "parent",
  // "where", "what", "runs", "seconds"}], in the order of the code (codegen/profile.py
  // makes a table of them).
  py::list profile() {
    profiled("profile");
    Holding guard = hold_lock("profile()", Use::READS);
    py::list rows;
    for (int i = 0; i < spec_->n_profile_sites; ++i) {
      const ProfileSite& site = spec_->profile_sites[i];
      py::dict row;
      row["function"] = site.function;
      row["site"] = i;
      row["parent"] = site.parent;
      row["where"] = site.where;
      row["what"] = site.what;
      row["runs"] = state_.profile[i].runs;
      row["seconds"] = double(state_.profile[i].nanoseconds) * 1e-9;
      rows.append(row);
    }
    return rows;
  }

  void reset_profile() {
    profiled("reset_profile");
    Holding guard = hold_lock("reset_profile()", Use::CALL);
    state_.profile.assign(spec_->n_profile_sites, ProfileCount{});
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
  // A RuntimeError from `method` of a model built without --profile.
  void profiled(const char* method) const {
    if (spec_->n_profile_sites > 0) return;
    const std::string what = std::string(method) + "(): model " + spec_->name;
    throw std::runtime_error(what + " was built without profiling: build it with `mdlc "
                             "build --profile` or load(..., profile=True)");
  }

  // A checkpoint's arrays (read from `where`) checked in full, then written into the model.
  void restore_from(const py::dict& arrays, const std::string& where) {
    Checkpoint<T> ck = check_checkpoint(*spec_, arrays, where);
    if (ck.config.kind != OptimizerConfig::NONE)
      if (std::string problem = invalid<T>(ck.config); !problem.empty())
        throw py::value_error(where + ": the optimizer's options are invalid: " + problem);
    Holding guard = hold_lock("load()", Use::CALL);
    restore(*spec_, ck, state_, opt_);
    parameters_changed();
  }

  struct Inputs {
    Arguments args;  // owns converted inputs during the call
    Call call;
  };

  // The call's inputs, checked and converted; `training` is a flag, not an input, where
  // `training_flag` allows it.
  Inputs inputs(const py::kwargs& kwargs, bool training_flag) {
    Inputs in;
    in.call.dims.assign(spec_->n_dims, -1);
    in.call.inputs.reserve(spec_->n_inputs);
    in.args.reserve(spec_->n_inputs);
    py::ssize_t known = training_flag && lookup(kwargs, training_py_) ? 1 : 0;
    for (int i = 0; i < spec_->n_inputs; ++i) {
      PyObject* given = lookup(kwargs, inputs_py_.names[i]);
      if (!given) {
        unknown_inputs(kwargs, training_flag);  // a misspelt name is the likelier mistake
        throw py::type_error("missing input '" + std::string(spec_->inputs[i].name) + "' (" +
                             input_list() + ")");
      }
      ++known;
      in.args.add(convert(i, given, in.call.dims), in.call.inputs);
    }
    if (py::len(kwargs) != std::size_t(known)) unknown_inputs(kwargs, training_flag);
    check_sizes(in.call.dims);
    return in;
  }

  // Refuses dims that make a size of the model's values negative (`zeros[T - 30]` at
  // T = 4), which no memory plan can hold, or put a slice outside its axis (`[:, 5]` of
  // an axis of length B at B = 3): codegen/ops/entry.py, call_bounds. Each one's text
  // has `{}` where its value goes.
  void check_sizes(const std::vector<int64_t>& dims) const {
    for (int k = 0; k < spec_->n_sizes; ++k) {
      const int64_t size = spec_->size_value(k, dims.data());
      if (size < 0)
        refuse_dims(spec_->dim_names, dims.data(), spec_->n_dims, spec_->size_names[k], size);
    }
  }

  // Throws naming the first of `kwargs` that is no input (nor the `training` flag where
  // `training_flag` allows it), if any.
  void unknown_inputs(const py::kwargs& kwargs, bool training_flag) const {
    for (auto item : kwargs) {
      std::string key = text_of(item.first);
      if (training_flag && key == "training") continue;
      bool known = false;
      for (int i = 0; i < spec_->n_inputs; ++i) known |= spec_->inputs[i].name == key;
      if (!known) throw py::type_error("unknown input '" + key + "' (" + input_list() + ")");
    }
  }

  // Under the lock: `pointers` in the device's memory (arguments.h); `buffers` are the
  // model's copies for this kind of call (none where the arguments are its memory).
  void place(const Arguments& args, std::vector<void*>& pointers,
             std::vector<Buffer<char>>& buffers) {
    if (spec_->device->in_place) return;
    settle();
    // the last training forward's inputs are about to be overwritten: no backward of it
    if (&buffers == &train_args_) trained_ = nullptr;
    mdl::place(spec_->device, state_.device, args, pointers, buffers, params_shared_);
  }

  // Under the lock: one of the model's functions; the device reports what its code found
  // wrong with the inputs once the call's work is done.
  void run(Function<T> function, Call& call) {
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
    spec_->device->finish(state_.device);
    parameters_changed();
  }

  // A training forward whose arguments were refused leaves no backward, as one whose run
  // failed leaves none (docs/native.md): backward() gave the gradients of the forward
  // before it, whose inputs a training loop skipping bad batches had moved past. Where the
  // lock cannot be had (a call on this thread that a signal handler interrupted), the
  // refusal is raised alone.
  void no_backward_after_refused_forward() {
    try {
      Holding guard(sharing_->lock);
      {
        ReleasedGil release;
        guard.lock("forward()", spec_->name, Use::CALL);
      }
      trained_ = nullptr;
      stale_forward_ = false;
      ++forwards_;
    } catch (...) {
    }
  }

  // train_step's and forward_backward's inputs: refused, they leave no backward() of an
  // earlier training forward either, as a refused forward(..., training=True) does.
  Inputs training_inputs(py::kwargs kwargs) {
    try {
      return inputs(kwargs, false);
    } catch (...) {
      no_backward_after_refused_forward();
      throw;
    }
  }

  // Under the lock, after the parameters changed (an update, set_params, a checkpoint):
  // the saved forward values and forward_backward's gradients belong to the old ones, so
  // neither backward() nor apply_gradients() may use them.
  void parameters_changed() {
    stale_forward_ = stale_forward_ || trained_ != nullptr;
    trained_ = nullptr;
    pending_ = false;
    seen_changes_ = ++sharing_->changes;  // the sharers' saved forwards are stale now
  }

  // Under the lock: whether a model sharing the parameters changed them since this one's
  // last training forward (whose saved values and gradients are then of the old weights).
  bool changed_by_sharer() const { return seen_changes_ != sharing_->changes; }

  // The model's lock, taken without the GIL (a thread holding the lock may need the GIL).
  Holding hold_lock(const char* what, Use use) {
    if (spec_->device->check_process) spec_->device->check_process();
    Holding guard(sharing_->lock);
    ReleasedGil release;
    guard.lock(what, spec_->name, use);
    settle();
    return guard;
  }

  // Under the lock: where the weights went out as device_params, or the gradients as
  // device_gradient_buffer, the work of whoever may have written them (an optimizer, or a
  // collective, on a stream of its own) ends before the model's.
  void settle() {
    if (params_shared_ || grads_shared_) spec_->device->synchronize();
  }

  // Under the lock: a device model's flat gradient buffer, made once (zeroed: frozen
  // parameters' gradients stay 0), so that a view handed out stays valid.
  void device_flat() {
    if (flat_device_.size() != spec_->param_count)
      flat_device_ = Buffer<T>(spec_->device, spec_->param_count);
  }

  [[noreturn]] void no_minimized(const char* what) const {
    throw std::runtime_error(std::string(what) + ": model " + spec_->name + " minimizes no "
                             "output, so there is nothing to train: training needs "
                             "`minimize NAME`");
  }

  // `what` trains natively, from the gradients of the minimized output: a model without
  // `minimize` has none, and a vjp build's backward takes cotangents instead.
  void need_training(const char* what) const {
    if (!spec_->variants[0].train)
      no_minimized(what);
    cotangents_.need_minimized(what);
  }

  // Under the lock: a training forward, keeping what the backward needs.
  void train(const Variant<T>& v, Call& call) {
    if (!v.train)
      no_minimized("forward(..., training=True)");
    call.outputs.assign(spec_->n_outputs + spec_->saved, nullptr);
    // the run overwrites what the last training forward saved (and, failing, may leave it
    // half written, or in memory it grew into): no backward until one succeeds
    trained_ = nullptr;
    stale_forward_ = false;
    ++forwards_;
    // call k draws from the stream (seed, k); a call that fails (an index its run finds out
    // of range) counts no more than one its arguments' checks refused: the next one draws
    // what it would have drawn had the failed one not been made
    const uint64_t number = next_call();
    state_.dropout_key = derive(state_.seed, number);
    state_.drawn.clear();
    run(v.train, call);
    state_.calls = number;
    trained_ = &v;
    seen_changes_ = sharing_->changes;
    dims_ = call.dims;
  }

  // The number of the training call about to run, rng_calls + 1. Past 2**64 - 1 it wrapped
  // round to 0 unnoticed, and the calls after it drew the first calls' dropout masks again:
  // an OverflowError instead, refused as a call whose arguments are (one compare a call).
  uint64_t next_call() const {
    if (state_.calls == std::numeric_limits<uint64_t>::max())
      throw std::overflow_error(
          std::string("model ") + spec_->name + " has made 2**64 - 1 training calls "
          "(rng_calls), as many as its count of dropout streams holds: another would wrap it "
          "round to 0 and draw earlier calls' masks again; set rng_calls lower to train on");
    return state_.calls + 1;
  }

  // Under the lock: train_step's and forward_backward's training forward and its
  // gradients (left in `grads.outputs`), one call: it counts (rng_calls) once both are
  // made, so that a handler of a Ctrl-C in the backward reads rng_calls as before the call
  // (a checkpoint it saves resumes with the same dropout masks); a backward that fails
  // (interrupted, out of memory) leaves no backward() of that forward, whose inputs Python
  // keeps no longer (on the CPU it read freed memory).
  void train_and_differentiate(const Variant<T>& v, Call& call, Call& grads) {
    const uint64_t calls = state_.calls;
    train(v, call);
    state_.calls = calls;  // the forward's draws are made: the key of call calls + 1 is set
    try {
      gradients(grads);
    } catch (...) {
      trained_ = nullptr;
      throw;
    }
    state_.calls = calls + 1;
  }

  // Under the lock, after `train`: the gradients, left in `call.outputs`.
  void gradients(Call& call) {
    call.dims = dims_;
    call.outputs.assign(spec_->n_grads, nullptr);
    run(trained_->backward, call);
  }


  std::string input_list() const {
    std::string out = "inputs are ";
    for (int i = 0; i < spec_->n_inputs; ++i)
      out += (i ? ", " : "") + std::string(spec_->inputs[i].name);
    return out;
  }

  // Input `which` of the declared dtype, rank and dims, C-contiguous; binds user dims.
  Argument convert(int which, py::handle obj, std::vector<int64_t>& dims) {
    const TensorSpec& s = spec_->inputs[which];
    const DeviceArray* d = spec_->device->in_place ? nullptr  // a CPU model makes none
                                                   : DeviceArray::of(obj, spec_->device);
    if (d) {
      check_type(s, spec_->dim_names,
                 d->dtype.kind == s.dtype.kind && d->dtype.itemsize == s.dtype.itemsize,
                 int64_t(d->shape.size()), d->shape.data(),
                 [&] { return shape_text(d->dtype.numpy, d->shape.size(), d->shape.data()); },
                 dims, spec_->input_shape, which);
      return {py::reinterpret_borrow<py::object>(obj), d->data(), std::size_t(d->bytes()), true,
              d->may_be_written()};
    }
    if (on_cuda(obj, "input", s.name, *spec_)) {
      DLPackTensor t = take_dlpack(obj);
      check_type(s, spec_->dim_names, has_dtype(*t.tensor, s.dtype), t.tensor->ndim,
                 t.tensor->shape, [&] { return shape_text(t); }, dims, spec_->input_shape,
                 which);
      return in_place(t, "input", s.name);
    }
    if (obj.is_none())  // NumPy reads None as an object scalar: "got object[]"
      throw py::type_error("input '" + std::string(s.name) + "': expected " +
                           type_text(s, spec_->dim_names) + ", got None");
    py::array a = as_array(obj, "input", s.name);
    a = as_declared(obj, a, s.dtype, "input", s.name);
    check_type(s, spec_->dim_names, has_dtype(a, s.dtype), a.ndim(), a.shape(),
               [&] { return shape_text(a); }, dims, spec_->input_shape, which);
    Argument view;
    if (device_view(*spec_->device, a, "input", s.name, view)) return view;
    Argument host = on_host(a);
    if (s.dtype.kind == 'b') bools_as_0_1(host);
    return host;
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

  // The arrays a function left in `call.outputs`, by name: a result in memory allocated
  // for this call alone (Call::result_memory) as it lies, the first to reach any of its
  // bytes (two results in the same bytes would be one array twice), others copied.
  py::dict results(const PyTensorTable& table, ShapeFunction shape_of, const Call& call) const {
    const TensorSpec* specs = table.specs;
    py::dict out;
    std::vector<std::pair<const char*, const char*>> handed;  // byte ranges given uncopied
    std::size_t on_device = 0;  // bytes of DeviceArrays handed out
    for (int k = 0; k < table.count; ++k) {
      std::vector<int64_t> shape(specs[k].rank);
      shape_of(k, call.dims.data(), state_.dyn.data(), shape.data());
      if (outputs_on_device_) {
        DeviceArray a(spec_->device, state_.device, call.outputs[k], shape, specs[k].dtype);
        on_device += std::size_t(a.bytes());
        out[table.names[k]] = std::move(a);
        continue;
      }
      std::vector<py::ssize_t> dims(shape.begin(), shape.end());
      const py::dtype& dtype = table.dtypes[k];
      std::size_t bytes = dtype.itemsize();
      for (int64_t d : shape) bytes *= std::size_t(d);
      const char* first = static_cast<const char*>(call.outputs[k]);
      std::shared_ptr<Arena> owner = call.owner_of(first, bytes);
      for (const auto& [lo, hi] : handed)
        if (first < hi && lo < first + bytes) owner = nullptr;
      if (owner) {
        handed.emplace_back(first, first + bytes);
        auto* keep = new std::shared_ptr<Arena>(std::move(owner));
        py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<Arena>*>(p); });
        out[table.names[k]] = py::array(dtype, dims, call.outputs[k], base);
        continue;
      }
      py::array a(dtype, dims);
      download(spec_->device, state_.device, a.mutable_data(), call.outputs[k], a.nbytes());
      out[table.names[k]] = a;
    }
    if (on_device) {  // the DeviceArrays' copies, queued: one wait for them all
      device_pool().handed(on_device);
      spec_->device->finish(state_.device);
    }
    return out;
  }


  const ModelSpec<T>* spec_;
  DeviceContext context_;  // first made, last closed: everything below may use it
  State<T> state_;
  Optimizer<T> opt_;
  std::shared_ptr<Sharing> sharing_;  // with the models it shares parameters with
  uint64_t seen_changes_ = 0;  // sharing_->changes at its last training forward
  Parameters<T> params_;  // fills state_.param
  Cotangents<T> cotangents_;
  bool outputs_on_device_ = false;
  bool params_shared_ = false;  // device_params handed out (settle)
  std::vector<T> flat_;   // forward_backward's gradients, at each parameter's offset
  Buffer<T> flat_device_;  // a device model's flat gradients, which apply_gradients steps from
  bool grads_on_host_ = true;  // the pending gradients are in flat_ (else in flat_device_)
  bool grads_shared_ = false;  // device_gradient_buffer handed out (settle)
  bool pending_ = false;  // forward_backward's gradients not applied yet
  const Variant<T>* trained_ = nullptr;
  bool stale_forward_ = false;  // the parameters changed since the last training forward
  uint64_t forwards_ = 0;  // training forwards begun or refused (training_forwards())
  std::vector<py::object> trained_inputs_;  // what the last forward(training=True) read
  // A device model's copies of host arguments, by position: a training forward's inputs
  // (which its backward reads later), an inference's, and a vjp backward's cotangents.
  std::vector<Buffer<char>> train_args_, infer_args_, cotangent_args_;
  std::vector<int64_t> dims_;
  // The spec's tables and the `training` flag's name as Python objects (PyTensorTable).
  PyTensorTable inputs_py_, outputs_py_, grads_py_;
  py::object training_py_;
};

}  // namespace mdl
