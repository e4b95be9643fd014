// The attention family's kernel table: fused scaled-dot-product attention, what
// ops/attention.cpp runs for scaled_dot_product_flash_attention where the operands fit: on CUDA
// flash kernels that never write the scores (cuda/attention.cpp, NOTE [Fused attention] in
// cuda/attention.cu), on the CPU batched GEMMs around one pass over the score rows
// (NOTE [CPU attention] in cpu/attention.cpp). Elsewhere the op computes the same math with
// halfgrad's ops.
//
//   q [N..., L, E], k and v [N..., S, E] (one batch shape N..., no broadcasting).
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg::kernel {

struct FlashForward {
  Tensor out;  // [N..., L, E], q's dtype
  Tensor lse;  // [N..., L] float32 (float64 for float64 inputs): log(sum(exp(scores))) per row
};

struct FlashBackward {
  Tensor dq, dk, dv;
};

// The fused attention kernels of one backend.
struct AttentionKernels {
  // Whether the fused kernels take these operands: on CUDA, float16 or bfloat16 on one device
  // of compute capability 8.0 or newer (with the shared memory the kernels ask for), E a
  // multiple of 8 up to 128, the same E for v, L and S at least 1, one batch shape; on the
  // CPU, any floating dtype with the same E for v, L, S and E at least 1, one batch shape.
  // Otherwise the op computes the same math with halfgrad's ops.
  bool (*fits)(const Tensor& q, const Tensor& k, const Tensor& v);
  // softmax(q k^T * scale, the future masked when causal) v, and each query row's logsumexp.
  FlashForward (*forward)(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                          double scale);
  // dq, dk, dv from the output's gradient dout and the forward's out and lse.
  FlashBackward (*backward)(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& out, const Tensor& lse, bool causal, double scale);
};

}  // namespace hg::kernel
