// Included last by f64 modules (templates/module.cpp.j2): their code's auto-vectorized
// loops use vectors of 256 bits, not AVX-512's 512. GCC 12.2 at -O3 miscompiles some
// permutations of eight doubles: a vector of them stored by a vectorized loop and read
// back in a strided pattern (a concatenation's or split's parts, copied out row by row)
// became one vpermilpd, which cannot move a double across the vector's 128-bit lanes,
// so a row read its neighbour's element (the fuzzer's Large751_6: a gradient element
// 8.6x off at B = 3, f64, specialized; tests/test_fuzz.py, FIXED). 18 of 1,020 such copy
// shapes of doubles came out wrong at 512 bits, none at 256, and none of 3,189 of floats
// (docs/build.md). f32 modules, the ones that train, keep 512-bit vectors.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && defined(__AVX512F__)
#pragma GCC target("prefer-vector-width=256")
#endif
