// The cuda target's kernel primitives as the host code of a module sees them: declarations
// only. Their kernels (mdl/cuda/kernels.h, rows.h, gemm.h) are compiled once per cache, into
// the cuda runtime object (src/cuda_device.cu instantiates every one for each element type
// listed here), so that a module's host code compiles as plain C++ and its kernels.cu
// holds its own kernels alone (docs/build.md, "The cuda target's two halves"). Each has the
// CPU's version's arguments (mdl/kernels.h) after the model's context `g`, and queues its
// work on the model's stream.
#pragma once

#include <cstdint>

#include "mdl/cuda/context.h"
#include "mdl/kernels.h"  // Reduction

namespace mdl {
namespace cuda {

// ---- data movement, indexing, sequences, dropout: mdl/cuda/kernels.h --------------------
template <class T>
void fill(Context& g, T* out, int64_t n, T value);
// A fused kernel's f32 totals, added up in doubles: out[i] = float(wide[i]).
void round_wide(Context& g, const double* wide, int64_t n, float* out);
template <class T>
void gather(Context& g, const T* table, int64_t rows, int64_t row_size, const int32_t* ids,
            int64_t count, T* out, const char* what);
template <class T>
void scatter_add(Context& g, const T* grad, int64_t row_size, const int32_t* ids, int64_t count,
                 int64_t rows, T* out, const char* what);
template <class T>
void cumsum(Context& g, bool reverse, const T* x, int64_t outer, int64_t n, int64_t inner,
            T* out);
template <class T>
void one_hot(Context& g, const int32_t* ids, int64_t count, int64_t classes, T* out);
void range(Context& g, int64_t n, int64_t start, int64_t step, int32_t* out);
template <class T>
void seq_order(Context& g, bool reversed, const T* x, const int32_t* lengths, int64_t steps,
               int64_t batch, int64_t row, T* out, const char* name);
void seq_mask(Context& g, const int32_t* lengths, int64_t steps, int64_t batch, uint8_t* out);
template <class T>
void dropout(Context& g, bool mask_only, const T* x, int64_t n, double p, uint64_t key,
             uint64_t first, T* out);
void rng_position(Context& g, uint64_t counter, uint64_t key, int32_t* out);
template <class T>
void dropout_replay(Context& g, const int32_t* position, int64_t n, double p, T* out);
void rng_skip(Context& g, const int32_t* position, int64_t n, int32_t* out);

// ---- rows: mdl/cuda/rows.h ---------------------------------------------------------------
template <class T>
void reduce(Context& g, Reduction kind, const T* x, const int64_t* shape, int rank,
            uint32_t mask, T* out);
template <class T>
void softmax(Context& g, bool log, const T* x, int64_t outer, int64_t n, int64_t inner, T* out);
template <class T>
void argmax(Context& g, const T* x, int64_t outer, int64_t n, int64_t inner, int32_t* out);
template <class T>
void topk(Context& g, const T* x, int64_t outer, int64_t n, int64_t inner, int64_t k,
          T* values, int32_t* indices);
template <class T>
void cross_entropy(Context& g, const T* logits, const int32_t* targets, const int32_t* lengths,
                   int64_t rows, int64_t classes, int64_t batch, const char* what,
                   const char* lengths_what, T* out);
void check_all(Context& g, const uint8_t* cond, int64_t n, const char* what, uint8_t* out);
void check_all_at(Context& g, const uint8_t* cond, int64_t n, const char* what, uint8_t* out,
                  const int32_t* step, int64_t rows, int levels = 1);

// ---- products: mdl/cuda/gemm.h -----------------------------------------------------------
template <class T>
void gemm(Context& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// mdl/blas.h's batched_gemm: c[i] = a[i] @ b[i], one product a matrix, on the stream.
template <class T>
inline void batched_gemm(Context& g, int64_t batch, int64_t m, int64_t n, int64_t k,
                         const T* a, const T* b, T* c) {
  for (int64_t i = 0; i < batch; ++i)
    gemm(g, false, false, m, n, k, T(1), a + i * m * k, k > 1 ? k : 1, b + i * k * n,
         n > 1 ? n : 1, T(0), c + i * m * n, n > 1 ? n : 1);
}

// The element types each is compiled for (`X template` with X `extern` here, empty in
// src/cuda_device.cu): every type a program can give it. A call for another type fails to
// link, where it would have failed to compile, so each list is every type that compiles.
#define MDL_CUDA_ANY_OF(X, T)                                                               \
  X template void fill<T>(Context&, T*, int64_t, T);                                       \
  X template void gather<T>(Context&, const T*, int64_t, int64_t, const int32_t*, int64_t, \
                            T*, const char*);                                             \
  X template void seq_order<T>(Context&, bool, const T*, const int32_t*, int64_t, int64_t, \
                               int64_t, T*, const char*);                                 \
  X template void one_hot<T>(Context&, const int32_t*, int64_t, int64_t, T*);
#define MDL_CUDA_NUMBERS_OF(X, T)                                                           \
  X template void cumsum<T>(Context&, bool, const T*, int64_t, int64_t, int64_t, T*);      \
  X template void scatter_add<T>(Context&, const T*, int64_t, const int32_t*, int64_t,     \
                                 int64_t, T*, const char*);                               \
  X template void reduce<T>(Context&, Reduction, const T*, const int64_t*, int, uint32_t,  \
                            T*);                                                          \
  X template void argmax<T>(Context&, const T*, int64_t, int64_t, int64_t, int32_t*);      \
  X template void topk<T>(Context&, const T*, int64_t, int64_t, int64_t, int64_t, T*,      \
                          int32_t*);
#define MDL_CUDA_FLOATS_OF(X, T)                                                            \
  X template void dropout<T>(Context&, bool, const T*, int64_t, double, uint64_t, uint64_t,\
                             T*);                                                         \
  X template void dropout_replay<T>(Context&, const int32_t*, int64_t, double, T*);        \
  X template void softmax<T>(Context&, bool, const T*, int64_t, int64_t, int64_t, T*);     \
  X template void cross_entropy<T>(Context&, const T*, const int32_t*, const int32_t*,     \
                                   int64_t, int64_t, int64_t, const char*, const char*,   \
                                   T*);                                                   \
  X template void gemm<T>(Context&, bool, bool, int64_t, int64_t, int64_t, T, const T*,    \
                          int64_t, const T*, int64_t, T, T*, int64_t);
// Every list for every type it is compiled for.
#define MDL_CUDA_PRIMITIVES(X)   \
  MDL_CUDA_ANY_OF(X, float)      \
  MDL_CUDA_ANY_OF(X, double)     \
  MDL_CUDA_ANY_OF(X, int32_t)    \
  MDL_CUDA_ANY_OF(X, uint8_t)    \
  MDL_CUDA_NUMBERS_OF(X, float)  \
  MDL_CUDA_NUMBERS_OF(X, double) \
  MDL_CUDA_NUMBERS_OF(X, int32_t) \
  MDL_CUDA_FLOATS_OF(X, float)   \
  MDL_CUDA_FLOATS_OF(X, double)
MDL_CUDA_PRIMITIVES(extern)

}  // namespace cuda
}  // namespace mdl
