// The kernel table of DESIGN §2 step 3: each op's forward and backward call these, and the
// tensor they are given picks the backend: the CPU kernels (cpu/) or, for a tensor on a CUDA
// device, the CUDA kernels (cuda/), which have the same signatures and semantics.
//
//   Tensor forward(OpContext& ctx, const Tensor& x) {
//     return kernels::unary(Unary::Exp, x);   // cpu::unary or cuda::unary, by x's device
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
#include "halfgrad/cpu/elementwise.h"
#include "halfgrad/cpu/gemm.h"
#include "halfgrad/cpu/index.h"
#include "halfgrad/cpu/nn_kernels.h"
#include "halfgrad/cpu/reduce.h"
#include "halfgrad/kernel/attention.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/kernels.h"
#include "halfgrad/cuda/elementwise.h"
#include "halfgrad/cuda/gemm.h"
#include "halfgrad/cuda/index.h"
#include "halfgrad/cuda/nn_kernels.h"
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
inline Tensor unary(Unary op, const Tensor& x) { HG_KERNEL(x, unary(op, x)); }
inline Tensor binary(Binary op, const Tensor& a, const Tensor& b, DType dtype, double alpha = 1.0) {
  HG_KERNEL(a, binary(op, a, b, dtype, alpha));
}
inline void binary_(Binary op, const Tensor& self, const Tensor& other, double alpha = 1.0) {
  HG_KERNEL(self, binary_(op, self, other, alpha));
}
inline Tensor compare(Compare op, const Tensor& a, const Tensor& b, DType dtype) {
  HG_KERNEL(a, compare(op, a, b, dtype));
}
inline Tensor threshold_backward(const Tensor& grad, const Tensor& x, double threshold) {
  HG_KERNEL(grad, threshold_backward(grad, x, threshold));
}
inline Tensor clamp(const Tensor& x, std::optional<double> low, std::optional<double> high) {
  HG_KERNEL(x, clamp(x, low, high));
}
inline Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value,
                      DType dtype) {
  HG_KERNEL(self, addcmul(self, t1, t2, value, dtype));
}
inline Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value,
                      DType dtype) {
  HG_KERNEL(self, addcdiv(self, t1, t2, value, dtype));
}
inline Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  HG_KERNEL(a, where(condition, a, b));
}
inline Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  HG_KERNEL(x, masked_fill(x, mask, value));
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
inline void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha = 1.0,
                 double beta = 0.0) {
  HG_KERNEL(a, gemm(a, b, out, alpha, beta));
}
inline void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  HG_KERNEL(a, gemm_bias(a, b, bias, out));
}
inline void gemm_2d(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                    const Tensor& out, const Tensor& bias = {}) {
  HG_KERNEL(a, gemm_2d(a, transpose_a, b, transpose_b, out, bias));
}
inline Tensor gemm_2d_gelu(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                           const Tensor& bias, const Tensor& pre) {
  HG_KERNEL(a, gemm_2d_gelu(a, transpose_a, b, transpose_b, bias, pre));
}

// ---- neural-network ops ------------------------------------------------------------------
inline Tensor softmax(const Tensor& x, int64_t dim) { HG_KERNEL(x, softmax(x, dim)); }
inline Tensor log_softmax(const Tensor& x, int64_t dim) { HG_KERNEL(x, log_softmax(x, dim)); }
inline Tensor softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim) {
  HG_KERNEL(dy, softmax_backward(dy, y, dim));
}
inline Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim) {
  HG_KERNEL(dy, log_softmax_backward(dy, y, dim));
}
inline cpu::NormForward layer_norm(const Tensor& x, const Shape& normalized_shape,
                                   const Tensor& weight, const Tensor& bias, double eps) {
  HG_KERNEL(x, layer_norm(x, normalized_shape, weight, bias, eps));
}
inline cpu::NormBackward layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                             const Tensor& rstd, const Shape& normalized_shape,
                                             const Tensor& weight, bool has_bias) {
  HG_KERNEL(dy, layer_norm_backward(dy, x, mean, rstd, normalized_shape, weight, has_bias));
}
inline cpu::NormForward group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight,
                                   const Tensor& bias, double eps) {
  HG_KERNEL(x, group_norm(x, num_groups, weight, bias, eps));
}
inline cpu::NormBackward group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                             const Tensor& rstd, int64_t num_groups,
                                             const Tensor& weight, bool has_bias) {
  HG_KERNEL(dy, group_norm_backward(dy, x, mean, rstd, num_groups, weight, has_bias));
}
inline cpu::NormForward batch_norm(const Tensor& x, const Tensor& running_mean,
                                   const Tensor& running_var, const Tensor& weight,
                                   const Tensor& bias, bool training, double momentum, double eps) {
  HG_KERNEL(x, batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps));
}
inline cpu::NormBackward batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                             const Tensor& rstd, const Tensor& weight,
                                             bool has_bias, bool training) {
  HG_KERNEL(dy, batch_norm_backward(dy, x, mean, rstd, weight, has_bias, training));
}
inline Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const cpu::Conv2dParams& p) {
  HG_KERNEL(x, conv2d(x, weight, bias, p));
}
inline cpu::Conv2dBackward conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                           bool has_bias, const cpu::Conv2dParams& p,
                                           std::array<bool, 3> needed) {
  HG_KERNEL(dy, conv2d_backward(dy, x, weight, has_bias, p, needed));
}
inline cpu::MaxPoolForward max_pool2d(const Tensor& x, const cpu::Pool2dParams& p) {
  HG_KERNEL(x, max_pool2d(x, p));
}
inline Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices,
                                  const Shape& input_shape) {
  HG_KERNEL(dy, max_pool2d_backward(dy, indices, input_shape));
}
inline Tensor avg_pool2d(const Tensor& x, const cpu::Pool2dParams& p) {
  HG_KERNEL(x, avg_pool2d(x, p));
}
inline Tensor avg_pool2d_backward(const Tensor& dy, const Shape& input_shape,
                                  const cpu::Pool2dParams& p) {
  HG_KERNEL(dy, avg_pool2d_backward(dy, input_shape, p));
}
inline Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                                 int64_t padding_idx) {
  HG_KERNEL(dy, embedding_backward(dy, indices, num_embeddings, padding_idx));
}
inline cpu::DropoutForward dropout(const Tensor& x, double p, Generator& gen) {
  HG_KERNEL(x, dropout(x, p, gen));
}

// ---- losses --------------------------------------------------------------------------------
inline const kernel::LossKernels& loss(const Tensor& t) {
  return HG_KERNEL_TABLE(t.is_cuda(), loss);
}

// ---- attention -----------------------------------------------------------------------------
// The fused attention kernels of t's backend; null where it has none (the CPU, and every build
// without CUDA): the op computes the same math with halfgrad's ops.
inline const kernel::AttentionKernels* attention(const Tensor& t) {
#if HALFGRAD_HAS_CUDA
  if (t.is_cuda()) return &::hg::cuda::attention_kernels;
#endif
  (void)t;
  return nullptr;
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
