// The CPU backend's kernel tables, one per family: kernel/<family>.h declares each table's
// functions with their contracts, cpu/<family>.cpp defines them. ops/kernels.h picks these or
// the CUDA backend's tables (cuda/kernels.h) by the device of a tensor argument.
#pragma once

#include "halfgrad/kernel/loss.h"

namespace hg::cpu {

extern const kernel::LossKernels loss_kernels;

}  // namespace hg::cpu
