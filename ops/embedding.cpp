// The embedding family's ops: embedding (index_select's kernel) and its backward,
// embedding_backward (the kernel of kernel/embedding.h), each the other's backward
// (NOTE [Differentiable nn backwards] in ops/norm.cpp).
//
// Dims: D the embedding width.
#include <string>
#include <vector>

#include "halfgrad/core/format.h"
#include "halfgrad/core/view.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/nn_helpers.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

// A fresh contiguous kernel result given another shape of the same numel, as a tensor of its
// own (not a view of an internal temporary).
Tensor reshaped_result(const Tensor& fresh, const Shape& sizes) {
  return Tensor(make_pooled<TensorImpl>(fresh.impl()->storage(), fresh.dtype(), sizes,
                                        contiguous_strides(sizes), fresh.storage_offset()));
}

// ---- embedding: weight [num_embeddings, D], indices [*] -> [*, D] ----------------------------

struct Embedding {
  static constexpr OpId id = OpId::embedding;
  int64_t padding_idx = -1;
  int64_t num_embeddings = 0;

  Tensor forward(OpContext& ctx, const Tensor& weight, const Tensor& indices) {
    HG_CHECK(weight.defined() && weight.dim() == 2,
             "embedding: expected a 2-D weight [num_embeddings, D], got {}",
             weight.defined() ? fmt::format("{}-D (shape {})", weight.dim(), weight.sizes())
                              : std::string("an undefined tensor"));
    HG_CHECK(indices.defined() && (indices.dtype() == kInt64 || indices.dtype() == kInt32),
             "embedding: expected indices of dtype int64 or int32, got {}",
             indices.defined() ? std::string(dtype_name(indices.dtype())) : "an undefined tensor");
    num_embeddings = weight.size(0);
    HG_CHECK(padding_idx >= -1 && padding_idx < num_embeddings,
             "embedding: expected padding_idx in [-1, {}) (-1 for none), got {}", num_embeddings,
             padding_idx);
    const Tensor flat = core::reshape(indices, {indices.numel()});
    if (indices.is_cpu()) {
      const std::vector<int64_t> rows = flat.to_vector<int64_t>();
      for (size_t t = 0; t < rows.size(); ++t) {
        HG_CHECK(rows[t] >= 0 && rows[t] < num_embeddings,
                 "embedding: expected indices in [0, {}) (num_embeddings), got {} at element {}",
                 num_embeddings, rows[t], t);
      }
    }  // (on CUDA, index_select checks them on the device: NOTE [Index checks on the device])
    Shape out_sizes = indices.sizes();
    out_sizes.push_back(weight.size(1));
    ctx.save({indices});
    return reshaped_result(kernel_for::index(weight).index_select(weight, 0, flat), out_sizes);
  }
  Grads backward(OpContext& ctx, const Grads& grads);
};

// The weight's gradient: dy [*, D]'s rows added into the rows they were gathered from.
struct EmbeddingBackward {
  static constexpr OpId id = OpId::embedding_backward;
  int64_t num_embeddings = 0;
  int64_t padding_idx = -1;

  Tensor forward(OpContext& ctx, const Tensor& dy, const Tensor& indices) {
    ctx.save({indices});
    return kernel_for::embedding(dy).embedding_backward(dy, indices, num_embeddings, padding_idx);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    // The adjoint: the rows gathered again, none for tokens of padding_idx.
    const Tensor indices = ctx.saved(0);
    Tensor g = dispatch(Embedding{.padding_idx = padding_idx}, grads[0], indices);
    if (padding_idx >= 0) g = mul(g, ne(indices, padding_idx).to(g.dtype()).unsqueeze(-1));
    return {g, Tensor()};
  }
};

Grads Embedding::backward(OpContext& ctx, const Grads& grads) {
  const Tensor indices = ctx.saved(0);
  return {dispatch(EmbeddingBackward{num_embeddings, padding_idx}, grads[0], indices), Tensor()};
}

}  // namespace

// ---- the public functions -------------------------------------------------------------------

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  return dispatch(Embedding{.padding_idx = padding_idx}, weight, indices);
}

Tensor ops::embedding_backward(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                               int64_t padding_idx) {
  return dispatch(EmbeddingBackward{num_embeddings, padding_idx}, dy, indices);
}

}  // namespace hg
