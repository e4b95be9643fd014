// The CPU backend's kernel tables, one per family: kernel/<family>.h declares each table's
// functions with their contracts, cpu/<family>.cpp defines them. ops/kernels.h picks these or
// the CUDA backend's tables (cuda/kernels.h) by the device of a tensor argument. (Fused
// attention has no CPU table: the op computes it with other ops there.)
#pragma once

#include "halfgrad/kernel/elementwise.h"
#include "halfgrad/kernel/reduce.h"
#include "halfgrad/kernel/linalg.h"
#include "halfgrad/kernel/index.h"
#include "halfgrad/kernel/norm.h"
#include "halfgrad/kernel/conv.h"
#include "halfgrad/kernel/pool.h"
#include "halfgrad/kernel/embedding.h"
#include "halfgrad/kernel/dropout.h"
#include "halfgrad/kernel/loss.h"

namespace hg::cpu {

extern const kernel::ElementwiseKernels elementwise_kernels;
extern const kernel::ReduceKernels reduce_kernels;
extern const kernel::LinalgKernels linalg_kernels;
extern const kernel::IndexKernels index_kernels;
extern const kernel::NormKernels norm_kernels;
extern const kernel::ConvKernels conv_kernels;
extern const kernel::PoolKernels pool_kernels;
extern const kernel::EmbeddingKernels embedding_kernels;
extern const kernel::DropoutKernels dropout_kernels;
extern const kernel::LossKernels loss_kernels;

}  // namespace hg::cpu
