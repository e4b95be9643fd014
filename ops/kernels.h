// The kernel table of DESIGN §2 step 3: each op's forward and backward call these, and the
// tensor they are given picks the backend: the CPU kernels (cpu/) or, for a tensor on a CUDA
// device, the CUDA kernels (cuda/), which have the same signatures and semantics.
//
//   Tensor forward(OpContext& ctx, const Tensor& x) {
//     return kernels::elementwise(x).unary(Unary::Exp, x);   // the CPU or the CUDA table
//   }
//
// The op layer has already checked that every tensor input is on one device (dispatch step 1),
// so the first tensor argument decides. A build without the CUDA backend cannot make a CUDA
// tensor (its allocator refuses), and here calls the CPU kernels only.
#pragma once

#include <optional>
#include <span>

#include "halfgrad/config.h"
#include "halfgrad/cpu/kernels.h"
#include "halfgrad/cpu/index.h"
#include "halfgrad/cpu/reduce.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/kernels.h"
#include "halfgrad/cuda/index.h"
#include "halfgrad/cuda/reduce.h"
#endif

// HG_KERNEL_TABLE(on_cuda, family): the CUDA backend's table of that family when on_cuda,
// else the CPU backend's (cpu/kernels.h, cuda/kernels.h).
#if HALFGRAD_HAS_CUDA
#define HG_KERNEL_TABLE(on_cuda, family) \
  ((on_cuda) ? ::hg::cuda::family##_kernels : ::hg::cpu::family##_kernels)
#else
#define HG_KERNEL_TABLE(on_cuda, family) (::hg::cpu::family##_kernels)
#endif

// `return backend::call` with backend cuda when `tensor` is on a CUDA device, else cpu.
#if HALFGRAD_HAS_CUDA
#define HG_KERNEL_IF(on_cuda, call) return (on_cuda) ? ::hg::cuda::call : ::hg::cpu::call
#else
#define HG_KERNEL_IF(on_cuda, call) return ::hg::cpu::call
#endif
#define HG_KERNEL(tensor, call) HG_KERNEL_IF((tensor).is_cuda(), call)

namespace hg::kernels {

using kernel::Binary;
using kernel::Compare;
using kernel::Reduction;
using kernel::Unary;

// ---- elementwise -------------------------------------------------------------------------
inline const kernel::ElementwiseKernels& elementwise(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), elementwise);
}

// ---- reductions --------------------------------------------------------------------------
inline Tensor reduce(Reduction op, const Tensor& x, const Shape& dims, bool keepdim,
                     DType out_dtype, double p = 2.0) {
  HG_KERNEL(x, reduce(op, x, dims, keepdim, out_dtype, p));
}
inline cpu::ValuesIndices max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  HG_KERNEL(x, max_dim(x, dim, keepdim));
}
inline cpu::ValuesIndices min_dim(const Tensor& x, int64_t dim, bool keepdim) {
  HG_KERNEL(x, min_dim(x, dim, keepdim));
}
inline Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  HG_KERNEL(x, argmax(x, dim, keepdim));
}
inline Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim,
                  DType out_dtype) {
  HG_KERNEL(x, var(x, dims, correction, keepdim, out_dtype));
}
inline Tensor cumsum(const Tensor& x, int64_t dim, DType out_dtype) {
  HG_KERNEL(x, cumsum(x, dim, out_dtype));
}
inline Tensor sum_to(const Tensor& x, const Shape& target) { HG_KERNEL(x, sum_to(x, target)); }

// ---- linear algebra ----------------------------------------------------------------------
inline const kernel::LinalgKernels& linalg(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), linalg);
}

// ---- kernel tables -----------------------------------------------------------------------
// kernels::norm(x).softmax(x, dim): the table of the family on x's backend (kernel/<family>.h).
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

// ---- indexing ----------------------------------------------------------------------------
// (An empty list goes to the CPU kernel, whose error names the op.)
inline bool on_cuda(std::span<const Tensor> tensors) {
  return !tensors.empty() && tensors[0].defined() && tensors[0].is_cuda();
}
inline Tensor cat(std::span<const Tensor> tensors, int64_t dim) {
  HG_KERNEL_IF(on_cuda(tensors), cat(tensors, dim));
}
inline Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  HG_KERNEL_IF(on_cuda(tensors), stack(tensors, dim));
}
inline Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  HG_KERNEL(x, gather(x, dim, index));
}
inline Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  HG_KERNEL(self, scatter_add(self, dim, index, src));
}
inline Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  HG_KERNEL(x, index_select(x, dim, index));
}
inline Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index,
                        const Tensor& source) {
  HG_KERNEL(self, index_add(self, dim, index, source));
}
inline Tensor index_put(const Tensor& self, std::span<const Tensor> indices, const Tensor& values,
                        bool accumulate) {
  HG_KERNEL(self, index_put(self, indices, values, accumulate));
}
inline Tensor one_hot(const Tensor& x, int64_t num_classes) {
  HG_KERNEL(x, one_hot(x, num_classes));
}

}  // namespace hg::kernels

#undef HG_KERNEL
#undef HG_KERNEL_IF
#undef HG_KERNEL_TABLE
