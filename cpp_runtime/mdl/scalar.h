// The scalar functions both targets' code calls, on the host and in CUDA kernels alike
// (MDL_HOST_DEVICE): NaN-aware max and min, softplus, pow, `where`, i32 casts and wrapping
// arithmetic, NumPy's integer `//` and `%`, and the sum's add. Generated elementwise code calls them
// (backend/op_lowering.py), as the runtime's kernels do (mdl/kernels.h, mdl/cuda/rows.h);
// a cuda module's kernels.cu reaches them through mdl/cuda/device.h, which includes this
// small header rather than mdl/kernels.h, so that nvcc parses little.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "mdl/device.h"  // MDL_HOST_DEVICE

namespace mdl {

// What a max starts from, and the max of nothing, on either target (cuda/rows.h): -inf, or
// i32's lowest value (an integer's numeric_limits infinity() is 0, which made 0 the max of
// all-negative i32 values).
template <class T>
MDL_HOST_DEVICE constexpr T max_identity() {
  if constexpr (std::is_floating_point<T>::value) {
    return -T(INFINITY);
  } else {
    static_assert(std::is_same<T, int32_t>::value, "max over floats and i32 only");
    return INT32_MIN;
  }
}

// The larger (smaller) of a and b, and NaN if either is, as NumPy's and PyTorch's: a NaN
// among a model's values shows in a max of them instead of vanishing (std::max(a, b) drops
// a NaN b). Every max of the runtime's, on either target (cuda/rows.h), and generated
// code's `maximum`, `minimum` and `relu` (backend/op_lowering.py) are these.
template <class T>
MDL_HOST_DEVICE inline T larger(T a, T b) {
  return (b > a || b != b) ? b : a;
}

template <class T>
MDL_HOST_DEVICE inline T smaller(T a, T b) {
  return (b < a || b != b) ? b : a;
}

// libm's log1p, for softplus below (the cpu target's loops pass mdl/vector_math.h's
// simd_log1p instead).
struct Log1p {
  template <class T>
  MDL_HOST_DEVICE T operator()(T x) const {
    using std::log1p;
    return log1p(x);
  }
};

// softplus(x) = log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): exp never overflows, and
// a large negative x keeps its tiny value exp(x) (log(1 + exp(x)) rounds it to 0). NaN
// stays NaN. Generated code's `softplus` (backend/op_lowering.py), with the log1p `log1p`.
template <class T, class L = Log1p>
MDL_HOST_DEVICE inline T softplus(T x, L log1p = {}) {
  using std::exp;
  using std::fabs;
  return (x > T(0) ? x : T(0)) + log1p(exp(-fabs(x)));
}

// x ** y, C's pow (IEEE 754's) on every target, also where the exponent is 0.5: GCC's
// vectorizer makes a loop's pow(x, 0.5) a square root (vsqrtps), NaN at -inf and -0.0 at
// -0.0 where pow gives inf and 0.0, so that a model whose exponent a pass folds to 0.5
// (`x ** (zeros[N] + 0.5)`) answered otherwise at 40 elements than at 6. Here an exponent
// of 0.5 is that root with pow's two answers set (the test folds where the exponent is a
// constant, and the root still vectorizes). Generated code's `**` (backend/op_lowering.py).
template <class T>
MDL_HOST_DEVICE inline T power(T x, T y) {
  using std::pow;
  using std::sqrt;
  if (y == T(0.5)) return x == -T(INFINITY) ? T(INFINITY) : sqrt(x) + T(0);  // +0.0 at -0.0
  return pow(x, y);
}

// i32(x) of a float: its integer part; 0 for NaN, and past i32's range the nearer end (as a
// GPU converts, and Java and Rust): a static_cast is undefined there, and x86 gave
// INT32_MIN for +inf as for NaN. Generated code's casts call it (backend/op_lowering.py).
template <class T>
MDL_HOST_DEVICE inline int32_t to_i32(T x) {
  return x != x ? 0
         : x >= T(2147483648.0) ? INT32_MAX
         : x < T(-2147483648.0) ? INT32_MIN
                                : int32_t(x);
}

// where(c, a, b): a if c, else b, with both read. On the host as bits masked by c: GCC turned
// `c ? a : 0.0f`, where `a` was a load only that arm read and `c` the same for the whole
// loop (a step's flag), into a masked load it would not vectorize ("data ref analysis
// failed"), which left `recompute`'s backward step loop of an LSTM scalar (T = 1000, B =
// 16, H = 256: 122 us a step against 15 for the stored loop's; docs/build.md). In a CUDA
// kernel, the select. Generated code's `where` (backend/op_lowering.py).
template <class T>
MDL_HOST_DEVICE inline T select(bool c, T a, T b) {
#if defined(__CUDA_ARCH__)
  return c ? a : b;
#else
  using Bits = std::conditional_t<
      sizeof(T) == 8, uint64_t,
      std::conditional_t<sizeof(T) == 4, uint32_t,
                         std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
  static_assert(sizeof(Bits) == sizeof(T), "where of 1, 2, 4 or 8-byte values");
  Bits x, y;
  std::memcpy(&x, &a, sizeof(T));
  std::memcpy(&y, &b, sizeof(T));
  const Bits mask = Bits(Bits(0) - Bits(c));  // every bit set where c
  const Bits r = Bits((x & mask) | (y & Bits(~mask)));
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
#endif
}

// i32 arithmetic wraps around, as NumPy's and the reference's do: a signed overflow is
// undefined in C++, and GCC folded `(a + 1) > a` to true at INT32_MAX. The sums of i32
// values here and on a GPU (cuda/rows.h), and generated code's i32 `+ - *`, unary `-` and
// `abs` (backend/op_lowering.py), compute in uint32_t, whose overflow is defined.
MDL_HOST_DEVICE inline int32_t wrap_add(int32_t a, int32_t b) {
  return int32_t(uint32_t(a) + uint32_t(b));
}
MDL_HOST_DEVICE inline int32_t wrap_sub(int32_t a, int32_t b) {
  return int32_t(uint32_t(a) - uint32_t(b));
}
MDL_HOST_DEVICE inline int32_t wrap_mul(int32_t a, int32_t b) {
  return int32_t(uint32_t(a) * uint32_t(b));
}
MDL_HOST_DEVICE inline int32_t wrap_neg(int32_t a) { return int32_t(0u - uint32_t(a)); }
MDL_HOST_DEVICE inline int32_t wrap_abs(int32_t a) { return a < 0 ? wrap_neg(a) : a; }

// i32 `//` and `%` as NumPy's: the quotient rounds down, the remainder has the divisor's
// sign; a 0 divisor gives 0, and i32's lowest value // -1 wraps to itself (C's `/` and `%`
// leave both undefined, and x86 ends the process with a signal).
MDL_HOST_DEVICE inline int32_t floor_div(int32_t a, int32_t b) {
  if (b == 0) return 0;
  if (b == -1) return wrap_neg(a);
  const int32_t q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
MDL_HOST_DEVICE inline int32_t floor_mod(int32_t a, int32_t b) {
  if (b == 0 || b == -1) return 0;
  const int32_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// a + b, wrapping for i32: what a sum of either type adds with.
template <class T>
MDL_HOST_DEVICE inline T plus(T a, T b) {
  if constexpr (std::is_integral<T>::value)
    return wrap_add(a, b);
  else
    return a + b;
}

}  // namespace mdl
