// CPU kernel of the embedding family (kernel/embedding.h): embedding's backward, the rows of
// dy added into the rows of dweight they were gathered from.
//
// Dims: D the embedding width.
#include <algorithm>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/nn_common.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cpu {

namespace {

using kernel::acc_dtype;
using nn_common::acc_t;
using nn_common::check_input;
using nn_common::load;
using nn_common::parallel_for;

// ---- embedding ----------------------------------------------------------------------------

Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                          int64_t padding_idx) {
  const char* op = "embedding_backward";
  check_input(op, "grad_output", dy);
  kernel::check_embedding_indices(op, indices);
  kernel::check_embedding_sizes(op, dy, indices, num_embeddings, padding_idx);
  const int64_t D = dy.dim() > 0 ? dy.size(-1) : 1;
  const std::vector<int64_t> rows = indices.to_vector<int64_t>();
  for (size_t t = 0; t < rows.size(); ++t) {
    HG_CHECK(rows[t] >= 0 && rows[t] < num_embeddings,
             "{}: expected indices in [0, {}) (num_embeddings), got {} at element {}", op,
             num_embeddings, rows[t], t);
  }
  const Tensor dyc = dy.contiguous();
  const DType acc = acc_dtype(dy.dtype());
  Tensor dwa = zeros({num_embeddings, D}, acc);
  visit_floating_dtype(op, dy.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* g = dyc.data_ptr<T>();
    A* dw = dwa.data_ptr<A>();
    // Column blocks on threads, tokens in order inside: no two threads touch one value.
    constexpr int64_t kColumns = 64;
    const int64_t tokens = int64_t(rows.size());
    parallel_for((D + kColumns - 1) / kColumns, tokens * kColumns, [&](int64_t block) {
      const int64_t begin = block * kColumns, end = std::min(D, begin + kColumns);
      for (int64_t t = 0; t < tokens; ++t) {
        const int64_t row = rows[size_t(t)];
        if (row == padding_idx) continue;
        for (int64_t j = begin; j < end; ++j) dw[row * D + j] += load(g[t * D + j]);
      }
    });
  });
  return dwa.to(dy.dtype());
}

}  // namespace

const kernel::EmbeddingKernels embedding_kernels = HG_EMBEDDING_KERNELS;

}  // namespace hg::cpu
