// The CUDA backend's kernel tables, one per family: kernel/<family>.h declares each table's
// functions with their contracts (the CPU backend's semantics and errors, on tensors of one
// CUDA device), cuda/<family>.cpp defines them. ops/kernels.h picks these or the CPU backend's
// tables (cpu/kernels.h) by the device of a tensor argument.
#pragma once

#include "halfgrad/kernel/attention.h"
#include "halfgrad/kernel/loss.h"

namespace hg::cuda {

extern const kernel::AttentionKernels attention_kernels;
extern const kernel::LossKernels loss_kernels;

}  // namespace hg::cuda
