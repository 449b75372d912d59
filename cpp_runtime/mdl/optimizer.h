// Parameter updates inside the module: SGD (momentum, Nesterov) and Adam (AdamW when
// decoupled), weight decay, scope regularizers and global-norm clipping, with PyTorch's
// formulas. One step, for every trainable parameter:
//   g = clip * dL/dw + penalty(w)      (clip = min(1, clip_norm / (|dL/dw|_2 + 1e-6)),
//                                       the norm over every trainable parameter;
//                                       penalty: l2(s) -> s * w, l1(s) -> s * sign(w))
//   SGD:  g += wd * w; b = t == 1 ? g : momentum * b + g; g = nesterov ? g + momentum * b : b
//         (b only with momentum); w -= lr * g
//   Adam: decoupled ? w -= lr * wd * w : g += wd * w; m = b1 m + (1 - b1) g;
//         v = b2 v + (1 - b2) g^2; w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// The step's numbers are worked out here, on the host, once per parameter (`UpdateStep`);
// the model's mdl::Device applies them where its parameters are, with the per-element
// formula `update_element` (mdl/device.h): the host's loops (src/host_device.cpp), a
// device's kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "mdl/device.h"
#include "mdl/error.h"
#include "mdl/model.h"

namespace mdl {

struct OptimizerConfig {
  enum Kind { NONE, SGD, ADAM } kind = NONE;
  double lr = 0, momentum = 0, weight_decay = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip_norm = 0;  // 0: no clipping
  bool nesterov = false, decoupled = false;
};

// What is wrong with a configuration for a model whose numbers are T, or "": checked by
// set_optimizer, lr's setter and on load. Every value must be finite and, where it is not
// 0, a normal T: 1e300 is inf in an f32 model, and eps = 1e-40 a denormal its code flushes
// to zero (mdl/denormals.h), which would turn every parameter into inf or NaN at the
// first step.
template <class T>
std::string invalid(const OptimizerConfig& c) {
  // a NaN fails every comparison below: it was "lr must be > 0" (and "must be a number")
  const std::pair<const char*, double> all[] = {
      {"lr", c.lr}, {"weight_decay", c.weight_decay}, {"clip_norm", c.clip_norm},
      {"momentum", c.momentum}, {"beta1", c.beta1}, {"beta2", c.beta2}, {"eps", c.eps}};
  for (const auto& [name, value] : all)
    if (std::isnan(value)) return std::string(name) + " must be finite, got nan";
  if (!(c.lr > 0)) return "lr must be > 0";
  if (!(c.weight_decay >= 0)) return "weight_decay must be >= 0";
  if (!(c.clip_norm >= 0)) return "clip_norm must be > 0 (or None)";
  if (!(c.momentum >= 0)) return "momentum must be >= 0";
  if (c.nesterov && c.momentum == 0) return "nesterov needs momentum > 0";
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    return "beta1 and beta2 must lie in [0, 1)";
  if (!(c.eps > 0)) return "eps must be > 0";
  const std::pair<const char*, double> values[] = {
      {"lr", c.lr}, {"weight_decay", c.weight_decay}, {"clip_norm", c.clip_norm},
      {"momentum", c.momentum}, {"eps", c.eps}};
  const double largest = double(std::numeric_limits<T>::max());
  const double smallest = double(std::numeric_limits<T>::min());  // the smallest normal
  const char* model = sizeof(T) == 4 ? "an f32 model" : "an f64 model";
  char text[200];
  for (const auto& [name, value] : values) {
    if (value == 0 || (value >= smallest && value <= largest)) continue;
    if (!std::isfinite(value))
      std::snprintf(text, sizeof text, "%s must be finite, got %g", name, value);
    else if (value > largest)
      std::snprintf(text, sizeof text, "%s = %g is too large for %s (its largest number is "
                    "%.2g)", name, value, model, largest);
    else
      std::snprintf(text, sizeof text, "%s = %g is too small for %s: its code flushes "
                    "numbers below %.2g to zero", name, value, model, smallest);
    return text;
  }
  return "";
}

template <class T>
class Optimizer {
 public:
  OptimizerConfig config;
  int64_t steps = 0;
  // momentum buffer or Adam's m; Adam's v (at ParamSpec::offset), where the model's
  // parameters are (its device's memory)
  Buffer<T> first, second;

  // The optimizer `c`, from step 0: its buffers are made before anything changes, so
  // that one the device has no room for (a MemoryError) leaves the optimizer as it was.
  // (Set first, config and steps named an Adam whose buffers were null: the next step
  // crashed the process, or left an emulated device's sticky error.)
  void reset(const OptimizerConfig& c, int64_t param_count, const Device* device) {
    const bool adam = c.kind == OptimizerConfig::ADAM;
    Buffer<T> made, made2;
    try {
      made = Buffer<T>(device, param_count);
      made2 = Buffer<T>(device, adam ? param_count : 0);
    } catch (const OutOfMemory&) {  // it said "this call ... give smaller inputs"
      char text[200];
      std::snprintf(text, sizeof text, "the optimizer's %s of %lld values need %.3g GB more "
                    "memory than the model's device would give: free some first",
                    adam ? "two buffers" : "buffer", static_cast<long long>(param_count),
                    double(param_count) * sizeof(T) * (adam ? 2 : 1) / 1e9);
      throw OutOfMemory::saying(text);
    }
    first = std::move(made);
    second = std::move(made2);
    config = c;
    steps = 0;
  }

  // Update the parameters (`param[i]` holds parameter i) from the gradients `grads`
  // (grads[p.grad] for each trainable p), all in the memory of `spec.device` (`context`
  // its model's context there), by that device.
  template <class ModelSpecT>
  void step(const ModelSpecT& spec, void* context, T* const* param, void* const* grads) {
    // a count that cannot grow stays (a checkpoint may set it to 2**63 - 1): wrapped
    // around, it was negative, and the model's save, copy or pickle could not be read back
    if (steps < std::numeric_limits<int64_t>::max()) ++steps;
    double scale = clip_scale(spec, context, grads);
    for (int i = 0; i < spec.n_params; ++i) {
      const ParamSpec& p = spec.params[i];
      if (p.grad < 0) continue;
      int64_t n = size(p);
      UpdateStep s = plan(p, scale);
      const T* g = static_cast<const T*>(grads[p.grad]);
      T* b = first.data() + p.offset;
      T* v = config.kind == OptimizerConfig::ADAM ? second.data() + p.offset : nullptr;
      apply_update(*spec.device, context, s, param[i], g, b, v, n);
    }
  }

 private:
  static int64_t size(const ParamSpec& p) {
    int64_t n = 1;
    for (int d = 0; d < p.rank; ++d) n *= p.shape[d];
    return n;
  }

  template <class ModelSpecT>
  double clip_scale(const ModelSpecT& spec, void* context, void* const* grads) const {
    if (config.clip_norm <= 0) return 1;
    double total = 0;
    for (int i = 0; i < spec.n_params; ++i) {
      const ParamSpec& p = spec.params[i];
      if (p.grad < 0) continue;
      int64_t n = size(p);
      total += squared_norm(*spec.device, context, static_cast<const T*>(grads[p.grad]), n);
    }
    double coef = config.clip_norm / (std::sqrt(total) + 1e-6);
    // A NaN norm (a NaN in any gradient) scales every gradient by NaN, as PyTorch's
    // clip_grad_norm_ does: `coef < 1 ? coef : 1` made it 1, and every other parameter
    // took its whole step, unclipped, where clipping was asked for.
    return coef < 1 || coef != coef ? coef : 1;
  }

  // This step's numbers for parameter `p`.
  UpdateStep plan(const ParamSpec& p, double scale) const {
    const OptimizerConfig& c = config;
    UpdateStep s{};
    s.kind = c.kind;
    s.lr = c.lr;
    s.scale = scale;
    s.l2 = p.l2;
    s.l1 = p.l1;
    if (c.kind == OptimizerConfig::SGD) {
      s.wd = c.weight_decay;
      s.momentum = c.momentum;
      s.start = steps == 1;
      s.nesterov = c.nesterov;
      return s;
    }
    s.beta1 = c.beta1;
    s.beta2 = c.beta2;
    // the element's step multiplies by these rather than divide: two divisions of three,
    // the most of its time (update_element)
    s.step = c.lr / (1 - std::pow(c.beta1, double(steps)));
    s.inv_c2 = 1 / (1 - std::pow(c.beta2, double(steps)));
    s.eps = c.eps;
    s.decay = c.decoupled ? c.lr * c.weight_decay : 0;  // AdamW: on the weights
    s.wd = c.decoupled ? 0 : c.weight_decay;            // Adam: on the gradient
    return s;
  }
};

}  // namespace mdl
