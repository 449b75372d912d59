// The runtime of the cuda target: what its generated module.cu includes after mdl/python.h
// (codegen/targets/cuda.py). The host-side pieces (align_up, checked_index, derive, the
// errors) are the CPU runtime's own.
#pragma once

#include "mdl/cuda/context.h"
#include "mdl/cuda/gemm.h"
#include "mdl/cuda/kernels.h"
#include "mdl/cuda/rows.h"
#include "mdl/runtime.h"
