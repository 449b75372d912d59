// SIMD versions of libm's functions for the loops of generated code. glibc's libmvec has
// them (expf on 16 floats at once with AVX-512, ...), but math.h declares them only under
// -ffast-math, which would also license reassociation and ignore NaN and infinity. Declared
// here, GCC vectorizes a loop that calls std::exp, std::tanh, ... and calls the libmvec
// variant; results stay within libmvec's documented error (4 ulp at most). codegen/compile/flags.py
// defines MDL_LIBMVEC and links -lmvec where the compiler finds libmvec.
#pragma once

#include <cmath>

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
