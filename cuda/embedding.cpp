// CUDA kernel of the embedding family (kernel/embedding.h): embedding_backward, with the checks
// (shared, kernel/checks.h) and semantics of cpu/embedding.cpp. It needs no kernel of its own:
// its work is the sorted accumulation of index_launch.h.
//
// Dims: T tokens (indices.numel()), D the embedding width.
#include <algorithm>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/index_launch.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cuda {

namespace {

using detail::make_walk;
using detail::Walk;

// Row-major strides of a dense tensor of `sizes`.
Shape dense_strides(const Shape& sizes) {
  Shape strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  return strides;
}

// ---- embedding ---------------------------------------------------------------------------

// The sorted accumulation of index_add (NOTE [Sorted accumulation on CUDA]) into zeros: key =
// the token's row (padding_idx and bad rows get the sentinel, which is skipped), value = the
// token. Every row of dweight sums its tokens' gradients in token order in float and rounds
// once, as the CPU kernel does.
Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                          int64_t padding_idx) {
  const char* op = "embedding_backward";
  kernel::check_input(op, "grad_output", dy, kCUDA);
  kernel::check_embedding_indices(op, indices);
  kernel::check_same_device(op, "indices", indices, dy.device(), "grad_output's");
  kernel::check_embedding_sizes(op, dy, indices, num_embeddings, padding_idx);
  const int64_t D = dy.dim() > 0 ? dy.size(-1) : 1;
  const int64_t T = indices.numel();

  DeviceGuard guard(dy.device().index);
  const cudaStream_t stream = current_stream();
  Tensor dw = empty({num_embeddings, D}, dy.options());
  if (dw.numel() > 0) {  // all-zero bytes are 0.0 in every floating dtype
    HG_CUDA_CHECK(cudaMemsetAsync(dw.data_ptr(), 0, dw.nbytes(), stream), op);
  }
  if (T == 0) return dw;
  const Walk keys_walk = make_walk(
      op, indices.sizes(),
      {indices.strides(), Shape(indices.sizes().size(), 0), dense_strides(indices.sizes())});
  const uint64_t sentinel = uint64_t(num_embeddings);
  const bool int32 = indices.dtype() == kInt32;
  if (dw.numel() == 0) {  // nothing to add; the indices are still checked, as on the CPU
    HG_CUDA_CHECK(detail::launch_scatter_keys(
                      keys_walk, indices.data_ptr(), int32, 1, num_embeddings, padding_idx >= 0,
                      padding_idx, sentinel, nullptr, nullptr, detail::device_error_slot(),
                      detail::DeviceError::EmbeddingBackward, 0, stream),
                  op);
    return dw;
  }
  const TensorOptions index_options{.dtype = kInt64, .device = dy.device()};
  Tensor keys = empty({T}, index_options), values = empty({T}, index_options);
  Tensor sorted_keys = empty({T}, index_options), sorted_values = empty({T}, index_options);
  const auto key_data = [](const Tensor& t) { return reinterpret_cast<uint64_t*>(t.data_ptr()); };
  const auto value_data = [](const Tensor& t) { return static_cast<int64_t*>(t.data_ptr()); };
  HG_CUDA_CHECK(detail::launch_scatter_keys(keys_walk, indices.data_ptr(), int32, 1, num_embeddings,
                                            padding_idx >= 0, padding_idx, sentinel, key_data(keys),
                                            value_data(values), detail::device_error_slot(),
                                            detail::DeviceError::EmbeddingBackward, 0, stream),
                op);
  const int end_bit = detail::key_bits(sentinel);
  size_t temp_bytes = 0;
  HG_CUDA_CHECK(detail::sort_pairs_temp_bytes(T, end_bit, &temp_bytes), op);
  // Freed on return while the sort may still run: the caching allocator hands it out again
  // only to work ordered after it on this stream.
  const Tensor temp = empty({std::max<int64_t>(1, int64_t((temp_bytes + 7) / 8))}, index_options);
  HG_CUDA_CHECK(
      detail::launch_sort_pairs(temp.data_ptr(), temp_bytes, key_data(keys), key_data(sorted_keys),
                                value_data(values), value_data(sorted_values), T, end_bit, stream),
      op);
  Tensor rows = dy;  // [T, D] dense
  if (!dy.is_contiguous()) {
    rows = empty(dy.sizes(), dy.options());
    const Walk copy_walk = make_walk(op, dy.sizes(), {rows.strides(), dy.strides()});
    HG_CUDA_CHECK(detail::launch_copy(copy_walk, rows.data_ptr(), dy.data_ptr(),
                                      int(dy.element_size()), stream),
                  op);
  }
  HG_CUDA_CHECK(detail::launch_segment_rows(dy.dtype(), dw.data_ptr(), rows.data_ptr(),
                                            key_data(sorted_keys), value_data(sorted_values), T,
                                            sentinel, /*O=*/1, /*S=*/num_embeddings, /*R=*/D,
                                            /*rows_o_stride=*/0, /*accumulate=*/true, stream),
                op);
  return dw;
}

}  // namespace

const kernel::EmbeddingKernels embedding_kernels = HG_EMBEDDING_KERNELS;

}  // namespace hg::cuda
