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
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "mdl/model.h"

namespace mdl {

struct OptimizerConfig {
  enum Kind { NONE, SGD, ADAM } kind = NONE;
  double lr = 0, momentum = 0, weight_decay = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip_norm = 0;  // 0: no clipping
  bool nesterov = false, decoupled = false;
};

// What is wrong with a configuration, or null: checked by set_optimizer and on load.
inline const char* invalid(const OptimizerConfig& c) {
  if (!(c.lr > 0)) return "lr must be > 0";
  if (!(c.weight_decay >= 0)) return "weight_decay must be >= 0";
  if (!(c.clip_norm >= 0)) return "clip_norm must be > 0 (or None)";
  if (!(c.momentum >= 0)) return "momentum must be >= 0";
  if (c.nesterov && c.momentum == 0) return "nesterov needs momentum > 0";
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    return "beta1 and beta2 must lie in [0, 1)";
  if (!(c.eps > 0)) return "eps must be > 0";
  return nullptr;
}

template <class T>
class Optimizer {
 public:
  OptimizerConfig config;
  int64_t steps = 0;
  std::vector<T> first, second;  // momentum buffer or Adam's m; Adam's v (at ParamSpec::offset)

  void reset(const OptimizerConfig& c, int64_t param_count) {
    config = c;
    steps = 0;
    first.assign(param_count, T(0));
    second.assign(c.kind == OptimizerConfig::ADAM ? param_count : 0, T(0));
  }

  // Update the parameters (`param[i]` holds parameter i) from the gradients `grads`
  // (grads[p.grad] for each trainable p).
  template <class ModelSpecT>
  void step(const ModelSpecT& spec, T* const* param, void* const* grads) {
    ++steps;
    double scale = clip_scale(spec, grads);
    for (int i = 0; i < spec.n_params; ++i) {
      const ParamSpec& p = spec.params[i];
      if (p.grad < 0) continue;
      int64_t n = 1;
      for (int d = 0; d < p.rank; ++d) n *= p.shape[d];
      update(p, param[i], static_cast<const T*>(grads[p.grad]), n, scale);
    }
  }

 private:
  template <class ModelSpecT>
  double clip_scale(const ModelSpecT& spec, void* const* grads) const {
    if (config.clip_norm <= 0) return 1;
    double total = 0;
    for (int i = 0; i < spec.n_params; ++i) {
      const ParamSpec& p = spec.params[i];
      if (p.grad < 0) continue;
      int64_t n = 1;
      for (int d = 0; d < p.rank; ++d) n *= p.shape[d];
      const T* g = static_cast<const T*>(grads[p.grad]);
      for (int64_t k = 0; k < n; ++k) total += double(g[k]) * g[k];
    }
    double coef = config.clip_norm / (std::sqrt(total) + 1e-6);
    return coef < 1 ? coef : 1;
  }

  // Branches that do not change along a parameter are taken out of its loop (selects on
  // loop-invariant flags stay), so the compiler can vectorize it.
  void update(const ParamSpec& p, T* w, const T* grad, int64_t n, double scale) {
    const OptimizerConfig& c = config;
    const double l2 = p.penalty == Penalty::L2 ? p.strength : 0;
    const double l1 = p.penalty == Penalty::L1 ? p.strength : 0;
    T* b = first.data() + p.offset;
    if (c.kind == OptimizerConfig::SGD) {
      const double mom = c.momentum, wd = c.weight_decay, lr = c.lr;
      const bool start = steps == 1, nesterov = c.nesterov;
      if (mom == 0) {
        for (int64_t k = 0; k < n; ++k) {
          double x = w[k];
          double g = scale * double(grad[k]) + l2 * x + l1 * double((x > 0) - (x < 0)) + wd * x;
          w[k] = T(x - lr * g);
        }
        return;
      }
      for (int64_t k = 0; k < n; ++k) {
        double x = w[k];
        double g = scale * double(grad[k]) + l2 * x + l1 * double((x > 0) - (x < 0)) + wd * x;
        double buf = start ? g : mom * double(b[k]) + g;
        b[k] = T(buf);
        w[k] = T(x - lr * (nesterov ? g + mom * buf : buf));
      }
      return;
    }
    T* v = second.data() + p.offset;
    const double b1 = c.beta1, b2 = c.beta2, eps = c.eps, lr = c.lr;
    const double c1 = 1 - std::pow(b1, double(steps)), c2 = 1 - std::pow(b2, double(steps));
    const double decay = c.decoupled ? lr * c.weight_decay : 0;  // AdamW: on the weights
    const double wd = c.decoupled ? 0 : c.weight_decay;          // Adam: on the gradient
    for (int64_t k = 0; k < n; ++k) {
      double x = w[k];
      double g = scale * double(grad[k]) + l2 * x + l1 * double((x > 0) - (x < 0)) + wd * x;
      x -= decay * x;
      double m = b1 * double(b[k]) + (1 - b1) * g;
      double s = b2 * double(v[k]) + (1 - b2) * g * g;
      b[k] = T(m);
      v[k] = T(s);
      w[k] = T(x - lr * (m / c1) / (std::sqrt(s / c2) + eps));
    }
  }
};

}  // namespace mdl
