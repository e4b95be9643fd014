// Indexing and shape ops: where, masked_fill, cat, stack, split, chunk, gather, scatter_add,
// index_select, index_add, index_put, index_copy, one_hot, and max/min along a dim (ops/index.cpp).
//
//   Tensor x = hg::randn({4, 3});
//   Tensor rows = hg::index_select(x, 0, hg::tensor(std::vector<int64_t>{3, 0}));  // [2, 3]
//   auto [values, indices] = hg::max(x, /*dim=*/1);                               // [4], [4]
//   Tensor both = hg::cat({x, rows}, 0);                                          // [6, 3]
//
// Names, argument order and defaults are PyTorch's. Index tensors are int64 (index_select,
// index_add and index_put also take int32); they never get a gradient, nor do bool masks.
#pragma once

#include <initializer_list>
#include <span>
#include <tuple>
#include <vector>

#include "halfgrad/core/scalar.h"
#include "halfgrad/core/tensor.h"

namespace hg {

// condition ? input : other elementwise over the broadcast shape of all three; condition is
// bool, input and other promote together (result_type).
Tensor where(const Tensor& condition, const Tensor& input, const Tensor& other);
// where with a number on one side; the number does not promote the tensor (result_type).
Tensor where(const Tensor& condition, const Tensor& input, Scalar other);
Tensor where(const Tensor& condition, Scalar input, const Tensor& other);

// A copy of input with value where mask (bool, broadcast with input) is true; the result has
// the broadcast shape of input and mask, and input's dtype.
Tensor masked_fill(const Tensor& input, const Tensor& mask, Scalar value);
// masked_fill with a 0-d tensor value, which gets a gradient (the sum over masked positions).
Tensor masked_fill(const Tensor& input, const Tensor& mask, const Tensor& value);

// Concatenation along dim of tensors that match except at dim (dtypes promote together;
// 1-D tensors of shape [0] are skipped, as in PyTorch).
Tensor cat(std::span<const Tensor> tensors, int64_t dim = 0);
Tensor cat(std::initializer_list<Tensor> tensors, int64_t dim = 0);
// Tensors of one shape joined along a new dim (dtypes promote together).
Tensor stack(std::span<const Tensor> tensors, int64_t dim = 0);
Tensor stack(std::initializer_list<Tensor> tensors, int64_t dim = 0);

// Views of input cut along dim every split_size elements (the last one may be shorter).
// Note that split(x, {n}) picks this overload, as a one-element braced list converts to a
// number first; pass std::vector<int64_t>{n} for a single explicit size.
std::vector<Tensor> split(const Tensor& input, int64_t split_size, int64_t dim = 0);
// Views of input along dim with the given sizes, which must sum to input.size(dim).
std::vector<Tensor> split(const Tensor& input, const std::vector<int64_t>& split_sizes,
                          int64_t dim = 0);
// At most `chunks` views of input along dim, each ceil(size / chunks) long but the last.
std::vector<Tensor> chunk(const Tensor& input, int64_t chunks, int64_t dim = 0);

// out[i][j] = input[i][index[i][j]] for dim = 1 (likewise for other dims); index is int64
// with input's number of dims and sizes <= input's except at dim; out has index's shape.
Tensor gather(const Tensor& input, int64_t dim, const Tensor& index);
// A copy of self with src[i][j] added at [i][index[i][j]] (dim = 1); src has self's dtype.
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// The slices of input along dim at the positions in index (1-D or 0-d).
Tensor index_select(const Tensor& input, int64_t dim, const Tensor& index);
// A copy of self with alpha * source's slices added at the index positions along dim
// (duplicates accumulate); source has self's dtype.
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                 Scalar alpha = 1);
// A copy of self with self[indices[0], indices[1], ...] = values (+= when accumulate). The
// index tensors (int64 or int32, no bool masks) broadcast together and index self's leading
// dims; negative indices wrap; values (self's dtype) broadcast to the indexed shape. With a
// position written twice and accumulate = false the last write (row-major) wins.
Tensor index_put(const Tensor& self, std::span<const Tensor> indices, const Tensor& values,
                 bool accumulate = false);
Tensor index_put(const Tensor& self, std::initializer_list<Tensor> indices, const Tensor& values,
                 bool accumulate = false);

// A copy of input with its slices along dim at the positions in index (int64, 1-D) replaced by
// source's (input's shape with index.numel() at dim, input's dtype); a position given twice
// keeps its last slice.
Tensor index_copy(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& source);

// int64 class indices -> int64 tensor of shape input.shape + [num_classes] with one 1 per
// row; num_classes = -1 takes max(input) + 1. Not differentiable.
Tensor one_hot(const Tensor& input, int64_t num_classes = -1);

// The largest / smallest values along dim and their (first) int64 indices. The gradient goes
// to the element at the returned index only.
std::tuple<Tensor, Tensor> max(const Tensor& input, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& input, int64_t dim, bool keepdim = false);

}  // namespace hg
