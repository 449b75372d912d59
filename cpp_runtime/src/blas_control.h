// What the Python face (python_module.cpp) asks of the BLAS, out of line: defined in
// products.cpp, which is compiled with the BLAS's flags and headers, so that the face
// includes no BLAS header and one object of it serves every BLAS the runtime is built for
// (codegen/compile/runtime.py's glue).
#pragma once

namespace mdl::blas_control {

void init();                  // mdl::blas_init: once, before any product
int threads();                // mdl::blas_threads
void set_threads(int n);      // mdl::set_blas_threads
bool forked_after_threads();  // mdl::forked_after_threads

}  // namespace mdl::blas_control
