// The CUDA backend's kernel tables, one per family: kernel/<family>.h declares each table's
// functions with their contracts (the CPU backend's semantics and errors, on tensors of one
// CUDA device), cuda/<family>.cpp defines them. ops/kernels.h picks these or the CPU backend's
// tables (cpu/kernels.h) by the device of a tensor argument.
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
#include "halfgrad/kernel/attention.h"

namespace hg::cuda {

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
extern const kernel::AttentionKernels attention_kernels;

}  // namespace hg::cuda
