// The mdl runtime: the small hand-written C++ that generated model code includes.
// Header-only; everything lives in namespace mdl.
#pragma once

#include "mdl/arena.h"
#include "mdl/blas.h"
#include "mdl/concurrent.h"
#include "mdl/error.h"
#include "mdl/init.h"
#include "mdl/interrupts.h"
#include "mdl/kernels.h"
#include "mdl/rng.h"
#include "mdl/vector_math.h"
