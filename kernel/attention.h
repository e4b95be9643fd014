// The attention family's kernel table: fused scaled-dot-product attention, what
// ops/attention.cpp runs for scaled_dot_product_flash_attention where the operands fit: on CUDA
// flash kernels that never write the scores (cuda/attention.cpp, NOTE [Fused attention] in
// cuda/attention.cu), on the CPU batched GEMMs around one pass over the score rows
// (NOTE [CPU attention] in cpu/attention.cpp), or for bfloat16 on AVX512-BF16 one head at a
// time (NOTE [Attention by heads] in cpu/attention_heads_avx512.cpp). Elsewhere the op computes the
// same math with halfgrad's ops.
//
//   q [N..., L, E], k and v [N..., S, E] (one batch shape N..., no broadcasting).
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg::kernel {

struct FlashForward {
  Tensor out;  // [N..., L, E], q's dtype
  Tensor lse;  // [N..., L] float32 (float64 for float64 inputs): log(sum(exp(scores))) per row
  // The softmax weights P, when the forward was asked to keep them and did (the CPU kernels,
  // where P holds no more values than q, k and v together: NOTE [CPU attention keeps P]), for
  // the backward to use instead of computing them again; undefined otherwise.
  Tensor probs;
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
  // softmax(q k^T * scale, the future masked when causal) v, and each query row's logsumexp;
  // keep_probs: a backward will follow, and the kernels may keep P for it (FlashForward::probs).
  FlashForward (*forward)(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                          double scale, bool keep_probs);
  // dq, dk, dv from the output's gradient dout and the forward's out, lse and probs (undefined
  // when the forward kept none: P is then computed again from q, k and lse).
  FlashBackward (*backward)(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& out, const Tensor& lse, const Tensor& probs, bool causal,
                            double scale);
};

}  // namespace hg::kernel
