// halfgrad: tensors, define-by-run autograd and mixed precision in C++20.
//
//   #include <halfgrad/halfgrad.h>
//   using namespace hg;
//
// This umbrella header brings in the whole public API.
#pragma once

#include "halfgrad/config.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/half.h"
#include "halfgrad/cuda/cuda.h"
