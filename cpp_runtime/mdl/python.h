// The header every generated file includes first, and the one codegen/compile/runtime.py
// precompiles: the call that makes the module (mdl/module.h) and the runtime the model's
// code runs on (mdl/runtime.h: the BLAS, kernels, threads). The Python face
// (src/python_module.cpp) includes mdl/module.h alone: no BLAS header, so one object of it
// serves every BLAS.
#pragma once

#include "mdl/module.h"
#include "mdl/runtime.h"
