// Helpers shared by the nn op families (ops/norm.cpp, pool.cpp, embedding.cpp, activation.cpp),
// the composites that select by position (ops/rearrange.cpp, einsum.cpp), and linear's two forms
// (ops/linalg.cpp, ops/fp8.cpp).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "halfgrad/core/shape.h"
#include "halfgrad/core/tensor.h"

namespace hg::ops {

// ---- linear's arguments (ops/linalg.cpp), shared with its fp8 form (ops/fp8.cpp) ----------------

// The product of all but the last dim: the rows of linear's [*, K] input.
int64_t leading_rows(const Shape& sizes);
// linear's shape checks, for linear and linear_gelu (`op`): a 2-D weight [N, K], an input
// [*, K], a bias [N] or none. Their dtype checks are each form's own.
void check_linear_shapes(std::string_view op, const Tensor& x, const Tensor& weight,
                         const Tensor& bias);

// Every dim of an [N, C, *] tensor but the channels: [0, 2, 3, ...].
inline Shape all_but_channels(int64_t ndim) {
  Shape dims{0};
  for (int64_t d = 2; d < ndim; ++d) dims.push_back(d);
  return dims;
}

// Positions made on the host as an int64 index tensor on `device` (copied there unless it is
// the CPU), for index_select.
Tensor positions_on(const std::vector<int64_t>& positions, Device device);

// The recorded op embedding_backward (ops/embedding.cpp): dy [*, D]'s rows added into the rows
// of a [num_embeddings, D] gradient that indices [*] name, none into row padding_idx (-1:
// none). max_pool2d's backward under create_graph is this over the flattened input.
Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                          int64_t padding_idx);

}  // namespace hg::ops
