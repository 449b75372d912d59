// Parameter initializers, deterministic from (seed, parameter index).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mdl/error.h"
#include "mdl/rng.h"

namespace mdl {

struct InitSpec {
  const char* kind;          // zeros ones constant uniform normal xavier orthogonal
  double a = 0, b = 0;       // the initializer's numbers
};

// A weight of rank 2 or more is initialized as the matrix x @ W multiplies by: its last
// dim is the outputs, all others together the inputs ([..., in, out] as [n / out, out]),
// the same rule as the reference interpreter (codegen/reference/interpreter.py).
inline void fans(const std::vector<int64_t>& shape, int64_t n, double& fan_in,
                 double& fan_out) {
  fan_out = double(shape.back());
  fan_in = double(n) / fan_out;
}

// Rows (or columns, whichever are fewer) made orthonormal by modified Gram-Schmidt.
template <class T>
void orthogonalize(T* w, int64_t rows, int64_t cols) {
  bool by_rows = rows <= cols;
  int64_t count = by_rows ? rows : cols, len = by_rows ? cols : rows;
  auto at = [&](int64_t v, int64_t i) -> T& { return by_rows ? w[v * cols + i] : w[i * cols + v]; };
  for (int64_t v = 0; v < count; ++v) {
    for (int64_t u = 0; u < v; ++u) {
      double dot = 0;
      for (int64_t i = 0; i < len; ++i) dot += double(at(v, i)) * at(u, i);
      for (int64_t i = 0; i < len; ++i) at(v, i) -= T(dot * at(u, i));
    }
    double norm = 0;
    for (int64_t i = 0; i < len; ++i) norm += double(at(v, i)) * at(v, i);
    norm = std::sqrt(norm);
    if (norm == 0) throw Error("orthogonal initialization met a degenerate matrix");
    for (int64_t i = 0; i < len; ++i) at(v, i) = T(at(v, i) / norm);
  }
}

template <class T>
void initialize(T* w, const std::vector<int64_t>& shape, const InitSpec& spec, uint64_t seed,
                uint64_t index) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  uint64_t key = derive(seed, index);
  const std::string k = spec.kind;
  if (k == "zeros" || k == "ones" || k == "constant") {
    T value = k == "zeros" ? T(0) : k == "ones" ? T(1) : T(spec.a);
    for (int64_t i = 0; i < n; ++i) w[i] = value;
  } else if (k == "uniform" || k == "xavier") {
    double lo = spec.a, hi = spec.b;
    if (k == "xavier") {
      double fan_in, fan_out;
      fans(shape, n, fan_in, fan_out);
      hi = std::sqrt(6.0 / (fan_in + fan_out));
      lo = -hi;
    }
    for (int64_t i = 0; i < n; ++i) w[i] = T(lo + (hi - lo) * uniform01(key, i));
  } else if (k == "normal" || k == "orthogonal") {
    double mean = k == "normal" ? spec.a : 0, std = k == "normal" ? spec.b : 1;
    for (int64_t i = 0; i < n; ++i) w[i] = T(mean + std * normal01(key, i));
    if (k == "orthogonal") orthogonalize(w, n / shape.back(), shape.back());
  } else {
    throw Error("unknown initializer " + k);
  }
}

}  // namespace mdl
