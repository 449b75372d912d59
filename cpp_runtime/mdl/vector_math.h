// SIMD versions of libm's functions for the loops of generated code. glibc's libmvec has
// them (expf on 16 floats at once with AVX-512, ...), but math.h declares them only under
// -ffast-math, which would also license reassociation and ignore NaN and infinity. Declared
// here, GCC vectorizes a loop that calls std::exp, std::tanh, ... and calls the libmvec
// variant; results stay within libmvec's documented error (4 ulp at most). codegen/compile/flags.py
// defines MDL_LIBMVEC and links -lmvec where the compiler finds libmvec.
#pragma once

#include <cmath>
#include <limits>

#include "mdl/scalar.h"  // softplus

// What the cpu target's code puts before an innermost loop whose iterations it knows to be
// independent (codegen/targets/cpu.py): each compiler's way to vectorize it without
// checking its pointers for overlap at run time. Clang ignores GCC's `ivdep`, and its cost
// model judged the checks of a loop that reads and writes many arrays (an LSTM step's
// backward: 13 pointers) not worth it, so that loop stayed scalar.
#if defined(__clang__)
#define MDL_VECTORIZE _Pragma("clang loop vectorize(assume_safety)")
#else
#define MDL_VECTORIZE _Pragma("GCC ivdep")
#endif

#if defined(MDL_LIBMVEC) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MDL_SIMD_DECLARE(type, fn) type fn(type) noexcept __attribute__((simd("notinbranch")));
extern "C" {
MDL_SIMD_DECLARE(float, expf)
MDL_SIMD_DECLARE(double, exp)
MDL_SIMD_DECLARE(float, logf)
MDL_SIMD_DECLARE(double, log)
MDL_SIMD_DECLARE(float, tanhf)
MDL_SIMD_DECLARE(double, tanh)
MDL_SIMD_DECLARE(float, sinf)
MDL_SIMD_DECLARE(double, sin)
MDL_SIMD_DECLARE(float, cosf)
MDL_SIMD_DECLARE(double, cos)
MDL_SIMD_DECLARE(float, log1pf)
MDL_SIMD_DECLARE(double, log1p)
MDL_SIMD_DECLARE(float, expm1f)
MDL_SIMD_DECLARE(double, expm1)
MDL_SIMD_DECLARE(float, erff)
MDL_SIMD_DECLARE(double, erf)
MDL_SIMD_DECLARE(float, erfcf)
MDL_SIMD_DECLARE(double, erfc)
// pow, of two arguments: a loop of `x ** 1.5` over [256, 1024] f32 took 0.69 ms with
// scalar powf and 0.20 with libmvec's (Intel Xeon, AVX-512); over 200,000 random and
// every pair of 23 special arguments (0, -0, +-1, +-inf, NaN, ...) its results were
// libm's, but for 1 ulp in finite ones
float powf(float, float) noexcept __attribute__((simd("notinbranch")));
double pow(double, double) noexcept __attribute__((simd("notinbranch")));
}
#undef MDL_SIMD_DECLARE
#endif

// tanh, expm1 and log1p as the cpu target's loops call them (codegen/backend/op_lowering.py,
// Target.simd_math). Under GCC, std::'s, whose libmvec variants are declared above. Clang 14's -fveclib=libmvec
// maps exp and log but not these three, so a loop calling one stayed scalar: a char LM's
// forward at B=32 (T=35, H=256) took 10.0 ms with Clang against 3.3 with GCC, its LSTM
// gates calling scalar tanhf. Under Clang they are built here from exp and log, which
// vectorize:
// - expm1(x) = (u - 1) * x / log(u) with u = exp(x) (Kahan's trick: the rounding error of
//   u cancels between u - 1 and log(u)); x itself where u is 1, -1 where u - 1 is, inf
//   where u is;
// - log1p(x) = log(u) * x / (u - 1) with u = 1 + x (the same trick); x where u is 1, inf
//   where u is;
// - tanh(x) = e / (e + 2) with e = expm1(2|x|), of x's sign; 1 past |x| = 9 (f32) or 19.5
//   (f64), where tanh rounds to 1 and e would overflow.
// Against glibc's functions over every 7th f32 in [-20, 20] (315M arguments) and 2M random
// f64 ones from 1e-40 to 1e5, both signs, with 0, -0, +-inf, NaN, -1 and overflowing ones:
// the same special values, and finite ones within 6 ulp (f32: tanh 6, expm1 6, log1p 5) and
// 5 ulp (f64: tanh 5, expm1 3, log1p 3); 286,720 tanhf in one loop took 0.33 ms, 2.42 scalar.
namespace mdl {
#if defined(MDL_LIBMVEC) && defined(__x86_64__) && defined(__clang__)
template <class T>
inline T simd_expm1(T x) {
  const T u = std::exp(x);
  const T um1 = u - T(1);
  T r = um1 * (x / std::log(u));
  r = u == T(1) ? x : r;
  r = um1 == T(-1) ? T(-1) : r;
  return u == std::numeric_limits<T>::infinity() ? u : r;
}

template <class T>
inline T simd_log1p(T x) {
  const T u = T(1) + x;
  const T r = u == T(1) ? x : std::log(u) * (x / (u - T(1)));
  return u == std::numeric_limits<T>::infinity() ? u : r;
}

template <class T>
inline T simd_tanh(T x) {
  const T a = std::fabs(x);
  const T e = simd_expm1(T(2) * a);
  const T t = a > T(sizeof(T) == 4 ? 9.0 : 19.5) ? T(1) : e / (e + T(2));
  return std::copysign(t, x);
}
#else
template <class T>
inline T simd_expm1(T x) {
  return std::expm1(x);
}

template <class T>
inline T simd_log1p(T x) {
  return std::log1p(x);
}

template <class T>
inline T simd_tanh(T x) {
  return std::tanh(x);
}
#endif

// softplus as the cpu target's loops call it: mdl::softplus (scalar.h, which CUDA kernels
// share) with simd_log1p, so that Clang vectorizes it too (std::log1p kept it scalar).
template <class T>
inline T simd_softplus(T x) {
  return softplus(x, [](T y) { return simd_log1p(y); });
}
}  // namespace mdl
