// The CPU backend's kernel tables, one per family: kernel/<family>.h declares each table's
// functions with their contracts, cpu/<family>.cpp defines them. ops/kernels.h picks these or
// the CUDA backend's tables (cuda/kernels.h) by the device of a tensor argument.
#pragma once

#include "halfgrad/kernel/conv.h"
#include "halfgrad/kernel/dropout.h"
#include "halfgrad/kernel/embedding.h"
#include "halfgrad/kernel/norm.h"
#include "halfgrad/kernel/pool.h"

namespace hg::cpu {

extern const kernel::ConvKernels conv_kernels;
extern const kernel::DropoutKernels dropout_kernels;
extern const kernel::EmbeddingKernels embedding_kernels;
extern const kernel::NormKernels norm_kernels;
extern const kernel::PoolKernels pool_kernels;

}  // namespace hg::cpu
