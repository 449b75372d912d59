// The runtime of the cuda target's host code: what a module's module.cpp includes after
// mdl/python.h (codegen/targets/cuda.py). It queues the module's kernels (kernels.cu,
// mdl/cuda/device.h) and the runtime's primitives on the model's stream, and copies; the
// C++ compiler builds it, with the CPU target's precompiled header. The host-side pieces
// (align_up, checked_index, derive, the errors) are the CPU runtime's own.
#pragma once

#include "mdl/cuda/context.h"
#include "mdl/cuda/launch.h"
#include "mdl/cuda/primitives.h"
#include "mdl/cuda/transfers.h"
#include "mdl/runtime.h"
