// The kernel lookup of docs/design.md §2 step 3: each op's forward and backward get their
// family's kernel table from here, and the tensor they pass picks the backend: the CPU table
// (cpu/kernel_tables.h) or, for a tensor on a CUDA device, the CUDA table (cuda/kernel_tables.h),
// which has the same functions and semantics (kernel/<family>.h declares both).
//
//   Tensor forward(OpContext& ctx, const Tensor& x) {
//     return kernel_for::elementwise(x).unary(Unary::Exp, x);   // the CPU or the CUDA table
//   }
//
// The op layer has already checked that every tensor input is on one device (dispatch step 1),
// so any tensor argument decides. A build without the CUDA backend cannot make a CUDA tensor
// (its allocator refuses), and here has the CPU tables only.
#pragma once

#include <span>

#include "halfgrad/config.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/kernel/attention.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/kernel_tables.h"
#endif

// HG_KERNEL_TABLE(on_cuda, family): the CUDA backend's table of that family when on_cuda,
// else the CPU backend's.
#if HALFGRAD_HAS_CUDA
#define HG_KERNEL_TABLE(on_cuda, family) \
  ((on_cuda) ? ::hg::cuda::family##_kernels : ::hg::cpu::family##_kernels)
#else
#define HG_KERNEL_TABLE(on_cuda, family) (::hg::cpu::family##_kernels)
#endif

namespace hg::kernel_for {

using kernel::Binary;
using kernel::Compare;
using kernel::Reduction;
using kernel::Unary;

// ---- elementwise -------------------------------------------------------------------------
inline const kernel::ElementwiseKernels& elementwise(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), elementwise);
}

// ---- reductions --------------------------------------------------------------------------
inline const kernel::ReduceKernels& reduce(const Tensor& x) {
  return HG_KERNEL_TABLE(x.is_cuda(), reduce);
}

// ---- linear algebra ----------------------------------------------------------------------
inline const kernel::LinalgKernels& linalg(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), linalg);
}

// ---- indexing ----------------------------------------------------------------------------
inline const kernel::IndexKernels& index(const Tensor& x) {
  return HG_KERNEL_TABLE(x.is_cuda(), index);
}
// cat and stack: the first tensor picks (an empty list gets the CPU kernels, whose error names
// the op).
inline const kernel::IndexKernels& index(std::span<const Tensor> tensors) {
  return HG_KERNEL_TABLE(!tensors.empty() && tensors[0].defined() && tensors[0].is_cuda(), index);
}

// ---- the nn families ---------------------------------------------------------------------
inline const kernel::NormKernels& norm(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), norm);
}
inline const kernel::ConvKernels& conv(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), conv);
}
inline const kernel::PoolKernels& pool(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), pool);
}
inline const kernel::EmbeddingKernels& embedding(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), embedding);
}
inline const kernel::DropoutKernels& dropout(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), dropout);
}

// ---- losses --------------------------------------------------------------------------------
inline const kernel::LossKernels& loss(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), loss);
}

// ---- attention -----------------------------------------------------------------------------
// The fused attention kernels of t's backend (their fits() says whether they take a call;
// where they do not, the op computes the same math with halfgrad's ops).
inline const kernel::AttentionKernels* attention(const Tensor& t) {
  return &HG_KERNEL_TABLE(t.is_cuda(), attention);
}

// ---- the training step's multi-tensor kernels ----------------------------------------------
// Called by amp, optim, nn and autograd (not by ops), with one device's tensors: the device
// picks (kernel/multi_tensor.h).
inline const kernel::MultiTensorKernels& multi_tensor(Device device) {
  return HG_KERNEL_TABLE(device.is_cuda(), multi_tensor);
}
inline const kernel::MultiTensorKernels& multi_tensor(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), multi_tensor);
}

}  // namespace hg::kernel_for

#undef HG_KERNEL_TABLE
