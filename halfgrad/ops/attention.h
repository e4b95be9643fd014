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

}  // namespace hg
