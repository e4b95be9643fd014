// The dropout family: dropout's forward (its backward is dy * mask), as a table of kernels
// every backend fills (cpu/dropout.cpp, cuda/dropout.cpp).
//
// Conventions shared by the nn kernel families (the opening of kernel/norm.h): inputs of any
// strides, never modified; floating dtypes only; bad arguments throw hg::Error naming the op,
// what was expected and what was given.
#pragma once

#include "halfgrad/core/random.h"
#include "halfgrad/core/tensor.h"

namespace hg::kernel {

struct DropoutForward {
  Tensor out;
  Tensor mask;
};

struct DropoutKernels {
  // Keeps each element with probability 1 - p: mask is 1 / (1 - p) (rounded to x's dtype)
  // where kept and 0 elsewhere, out = x * mask (computed in float, rounded once), both in x's
  // dtype. The keep decision for element i (row-major) is u_i < 1 - p, u_i the i-th float32
  // uniform of one random::fill_uniform draw of numel elements from gen, so a seed gives the
  // same mask for every dtype. p == 0 returns a copy of x and a mask of ones, p == 1 zeros;
  // neither draws.
  DropoutForward (*dropout)(const Tensor& x, double p, Generator& gen);
};

// A backend's table, from its functions of these names (cpu/dropout.cpp and cuda/dropout.cpp):
//   const kernel::DropoutKernels dropout_kernels = HG_DROPOUT_KERNELS;
#define HG_DROPOUT_KERNELS \
  { .dropout = dropout }

}  // namespace hg::kernel
