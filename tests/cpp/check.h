// The runtime tests' only helper: checks that report every failure with its line and let
// main() return the number failed, so one run shows them all (no test framework to fetch).
#pragma once

#include <cmath>
#include <cstdio>

namespace check {
inline int failures = 0;

inline void fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
  ++failures;
}
}  // namespace check

#define CHECK(cond) \
  do { if (!(cond)) check::fail(__FILE__, __LINE__, #cond); } while (0)

#define CHECK_NEAR(a, b, tol) \
  do { if (!(std::fabs(double(a) - double(b)) <= (tol))) \
         check::fail(__FILE__, __LINE__, #a " == " #b " within " #tol); } while (0)

#define CHECK_THROWS(expr, type)                                                    \
  do {                                                                              \
    bool thrown = false;                                                            \
    try { expr; } catch (const type&) { thrown = true; }                            \
    if (!thrown) check::fail(__FILE__, __LINE__, #expr " throws " #type);           \
  } while (0)
