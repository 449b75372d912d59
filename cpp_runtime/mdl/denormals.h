// Denormal (subnormal) floats, below 1.2e-38 in f32 and 2.2e-308 in f64, flushed to zero
// while the cpu target's code runs. An x86 core takes a slow path for an operation that
// reads or makes one: a [512, 512] product with such inputs took 237 ms instead of 2.2 on
// an Intel Xeon (NumPy's and PyTorch's alike), and a recurrent backward whose cotangents
// fade over the steps (an RNN's vanishing gradient) reaches them: the training step of a
// `while` in an `if` in a `for` (T=35, B=32, H=128) took 71-74 ms instead of 6.0-6.4
// (docs/native.md). XLA's CPU code (JAX) flushes them too. MXCSR's FTZ bit makes such a
// result 0 and its DAZ bit reads such an input as 0; the mode is the thread's own.
#pragma once

#include <cmath>
#include <limits>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace mdl {

#if defined(__SSE__)
inline constexpr unsigned kFlushDenormalsMode = 0x8040;  // FTZ (bit 15) | DAZ (bit 6)

// The calling thread flushes denormals from now on: the first statement of every parallel
// region the runtime and generated code open, so OpenMP's threads, which also run MKL's
// and OpenBLAS's parts of a product (blas.h), keep the mode between regions.
inline void flush_denormals() {
  const unsigned mode = _mm_getcsr();
  if ((mode & kFlushDenormalsMode) != kFlushDenormalsMode)
    _mm_setcsr(mode | kFlushDenormalsMode);
}

// Declared first in every function of the cpu target and around the optimizer's step: the
// calling thread (the user's, which NumPy's code runs on too) flushes denormals until the
// function returns or throws, and then has the mode it had.
class FlushDenormals {
 public:
  FlushDenormals() : saved_(_mm_getcsr() & kFlushDenormalsMode) { flush_denormals(); }
  ~FlushDenormals() {
    const unsigned mode = _mm_getcsr();
    if ((mode & kFlushDenormalsMode) != saved_)
      _mm_setcsr((mode & ~kFlushDenormalsMode) | saved_);
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_;
};

// The argument of log and pow as the flushed arithmetic reads it: a denormal is 0 of its
// sign. glibc's log and pow (and libmvec's) take a denormal apart by its bits, which DAZ
// does not reach: under it, log(1e-310) was -745.1 (neither log(0) = -inf nor NumPy's
// -713.8), log(-1e-310) NaN and pow(1e-310, 0.5) 1.6e-162 instead of 0. A comparison and
// a select, vectorized with the call (codegen/backend/op_lowering.py).
template <class T>
inline T flushed(T x) {
  return std::fabs(x) < std::numeric_limits<T>::min() ? std::copysign(T(0), x) : x;
}
#else
// Elsewhere (no SSE control register) denormals are kept, as IEEE 754 has them.
inline void flush_denormals() {}
class FlushDenormals {
 public:
  FlushDenormals() {}  // (a constructor of its own: no unused-variable warning)
};

template <class T>
inline T flushed(T x) {
  return x;
}
#endif

}  // namespace mdl
