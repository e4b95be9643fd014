// The fused attention kernels of the CUDA backend (attention.cu, NOTE [Fused attention]): what
// ops/attention.cpp runs for scaled_dot_product_flash_attention on a GPU, when they fit.
//
//   q [N..., L, E], k and v [N..., S, E] (one batch shape N..., no broadcasting).
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg::cuda {

// Whether the fused kernels take these operands: float16 or bfloat16 on one CUDA device of
// compute capability 8.0 or newer (with the shared memory the kernels ask for), E a multiple of
// 8 up to 128, the same E for v, L and S at least 1, one batch shape. Otherwise the op computes
// the same math with halfgrad's ops.
bool flash_attention_fits(const Tensor& q, const Tensor& k, const Tensor& v);

struct FlashForward {
  Tensor out;  // [N..., L, E], q's dtype
  Tensor lse;  // [N..., L] float32: log(sum(exp(scores))) per query row
};
FlashForward flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                     double scale);

struct FlashBackward {
  Tensor dq, dk, dv;
};
FlashBackward flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       bool causal, double scale);

}  // namespace hg::cuda
