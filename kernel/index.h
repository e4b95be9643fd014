// The index family: cat, stack, gather, scatter_add, index_select, index_add, index_put and
// one_hot, the kernels of the shape and indexing ops.
//
//   Tensor x = hg::randn({4, 3});
//   Tensor i = hg::tensor(std::vector<int64_t>{3, 0, 3});
//   const kernel::IndexKernels& K = cpu::index_kernels;
//   Tensor rows = K.index_select(x, 0, i);                    // [3, 3]: rows 3, 0, 3
//   Tensor grad = K.index_add(hg::zeros({4, 3}), 0, i, rows); // row 3 gets two adds
//
// These are raw kernels: no autograd, no autocast, no type promotion (the op layer does those
// first, so operands that must share a dtype are checked, not converted). Inputs may have any
// strides and are never written; every result is a new contiguous tensor. The semantics are
// PyTorch's, function by function, including which indices are legal: index_select, gather,
// scatter_add and index_add reject negative indices; index_put wraps them like Python.
//
// Both backends check the arguments alike (kernel/index_checks.h). The CPU kernels check every
// index before anything is written, and a bad one throws an hg::Error naming the op, the index
// value, the dim and its size; the CUDA kernels check indices on the device and report a bad one
// at the next wait for the GPU (NOTE [Index checks on the device] in cuda/index.cpp).
//
// NOTE [Accumulation of duplicates] scatter_add, index_add and index_put(accumulate=true)
// sum everything that lands on one element in the compute type (float32 for float16 and
// bfloat16, cast.h), starting from self's value and adding in the order the contributions
// appear in the index (row-major), then round once. The result is deterministic, the same
// on any number of threads, and for 16-bit floats more accurate than PyTorch's CPU kernels
// (which round after every addition). Threads split the work by destination, never by
// contribution, so no two threads write the same element.
#pragma once

#include <cstdint>
#include <span>

#include "halfgrad/core/tensor.h"

namespace hg::kernel {

// The index kernels of one backend (cpu::index_kernels, cuda::index_kernels).
struct IndexKernels {
  // Concatenation along dim. All tensors have one dtype and the same shape except at dim;
  // 1-D tensors of shape [0] are skipped (PyTorch's legacy rule), and if every tensor is
  // skipped the result has shape [0]. 0-d tensors cannot be concatenated.
  Tensor (*cat)(std::span<const Tensor> tensors, int64_t dim);

  // Stacks tensors of one shape and dtype along a new dim (dim in [-(D+1), D] for D-dim
  // inputs).
  Tensor (*stack)(std::span<const Tensor> tensors, int64_t dim);

  // out[i][j][k] = x[i][index[i][j][k]][k] for dim = 1 (likewise for other dims).
  // index: int64, as many dims as x, index.size(d) <= x.size(d) for d != dim, values in
  // [0, x.size(dim)). The result has index's shape and x's dtype. A 0-d tensor counts as 1-D
  // of size 1, as in PyTorch.
  Tensor (*gather)(const Tensor& x, int64_t dim, const Tensor& index);

  // A copy of self with src[i][j][k] added at [i][index[i][j][k]][k] (dim = 1), the backward
  // of gather. index: int64, as many dims as self and src, index.size(d) <= src.size(d) for
  // all d and <= self.size(d) for d != dim; src has self's dtype. Duplicates accumulate as in
  // NOTE [Accumulation of duplicates].
  Tensor (*scatter_add)(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

  // The slices of x along dim picked by index (1-D or 0-d, int64 or int32, values in
  // [0, x.size(dim))): the result is x's shape with size index.numel() at dim.
  Tensor (*index_select)(const Tensor& x, int64_t dim, const Tensor& index);

  // A copy of self with source's slices added at the index positions along dim, the backward
  // of index_select: out.select(dim, index[n]) += source.select(dim, n). index: 1-D or 0-d,
  // int64 or int32, in [0, self.size(dim)); source: self's dtype and dims, size index.numel()
  // at dim and self's sizes elsewhere. Duplicates accumulate (NOTE [Accumulation of
  // duplicates]).
  Tensor (*index_add)(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);

  // A copy of self with self[indices[0], indices[1], ...] = values (+= when accumulate), as
  // torch.index_put. The K index tensors (int64 or int32, 1 <= K <= self.dim()) broadcast
  // together to a shape B and index self's leading K dims; negative values wrap like Python
  // indexing. The indexed shape is B followed by self.sizes()[K:]; values (self's dtype)
  // broadcast to it. With accumulate=false and a position indexed more than once, the last
  // write in row-major order of B wins; with accumulate=true they sum.
  Tensor (*index_put)(const Tensor& self, std::span<const Tensor> indices, const Tensor& values,
                      bool accumulate);

  // int64 x of any shape with values in [0, C) -> int64 of shape x.shape + [C] with a 1 at
  // each value. num_classes = -1 takes C = max(x) + 1 (then x must not be empty).
  Tensor (*one_hot)(const Tensor& x, int64_t num_classes);

  // The positions (int64, x's shape) that sort x along dim, ascending or descending, in the
  // order of NOTE [Sort keys] (kernel/formulas.h: NaN the largest); equal elements keep their
  // order (stable). Any dtype; a 0-d x gives 0.
  Tensor (*argsort)(const Tensor& x, int64_t dim, bool descending);
};

// A backend's table, from its functions of these names (cpu/index.cpp and cuda/index.cpp):
//   const kernel::IndexKernels index_kernels = HG_INDEX_KERNELS;
#define HG_INDEX_KERNELS                                                          \
  {                                                                               \
    .cat = cat, .stack = stack, .gather = gather, .scatter_add = scatter_add,     \
    .index_select = index_select, .index_add = index_add, .index_put = index_put, \
    .one_hot = one_hot, .argsort = argsort                                        \
  }

}  // namespace hg::kernel
