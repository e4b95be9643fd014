// The embedding op (ops/embedding.cpp); torch.nn.functional's conventions (ops/norm.h).
#pragma once

#include <cstdint>

#include "halfgrad/core/tensor.h"

namespace hg {

// The rows of weight [num_embeddings, D] picked by indices (int64 or int32) -> [*indices, D].
// Row padding_idx (-1: none) gets no gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);

}  // namespace hg
