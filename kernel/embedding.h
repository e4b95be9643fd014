// The embedding family: embedding's backward (the forward is index_select), as a table of
// kernels every backend fills (cpu/embedding.cpp, cuda/embedding.cpp).
//
// Conventions shared by the nn kernel families (the opening of kernel/norm.h): inputs of any
// strides, never modified; floating dtypes only, float16/bfloat16 accumulated in float and
// rounded once; bad arguments throw hg::Error naming the op, what was expected and what was
// given.
//
// Dims: D the embedding width.
#pragma once

#include <cstdint>

#include "halfgrad/core/tensor.h"

namespace hg::kernel {

struct EmbeddingKernels {
  // dy: [*, D], indices (int64 or int32): [*] with values in [0, num_embeddings).
  // Returns dweight [num_embeddings, D] in dy's dtype: dy's rows added into the rows they were
  // gathered from. Row padding_idx gets no gradient; padding_idx = -1 means none.
  Tensor (*embedding_backward)(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                               int64_t padding_idx);
};

// A backend's table, from its functions of these names (cpu/embedding.cpp and cuda/embedding.cpp):
//   const kernel::EmbeddingKernels embedding_kernels = HG_EMBEDDING_KERNELS;
#define HG_EMBEDDING_KERNELS \
  { .embedding_backward = embedding_backward }

}  // namespace hg::kernel
