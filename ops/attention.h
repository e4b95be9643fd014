// Scaled dot-product attention (ops/attention.cpp).
//
//   N batch (any leading dims), L query length, S key length, E query/key width, V value width.
#pragma once

#include <optional>

#include "halfgrad/core/tensor.h"

namespace hg {

class Generator;

// softmax(q k^T * scale + mask) v, as torch.nn.functional.scaled_dot_product_attention:
//   q [N..., L, E], k [N..., S, E], v [N..., S, V] -> [N..., L, V].
// attn_mask: bool (true = may attend) or floating (added to the scores), broadcasting to
// [N..., L, S]; is_causal masks the future (key j > query i) and excludes attn_mask.
// scale defaults to 1 / sqrt(E). dropout_p applies to the attention weights.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    Generator* generator = nullptr);

// The fused form scaled_dot_product_attention takes on a GPU when it can (as torch's
// _scaled_dot_product_flash_attention): softmax(q k^T * scale, causal) v with q [N..., L, E],
// k and v [N..., S, E] (one batch shape, no broadcasting, one head width), one autograd node.
// On a CUDA device, float16/bfloat16 with E a multiple of 8 up to 128 runs fused kernels that
// never store the [L, S] weights; anything else computes the same math with halfgrad ops in
// float32 (float64 for float64). Callable directly; autocast treats it as attention.
Tensor scaled_dot_product_flash_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                          bool is_causal = false,
                                          std::optional<double> scale = std::nullopt);

}  // namespace hg
