// CUDA kernels for shape and indexing ops: the functions, semantics and errors of cpu/index.h
// on one CUDA device (where and masked_fill are in elementwise.h).
//
// NOTE [Index checks on the device] The CPU kernels check every index before writing. Here a
// check on the host would need the indices on the host (a sync per op), so the kernels check
// on the device: an index out of range sets a device flag and the kernel writes nothing for
// it; the flag is read, and turned into hg::Error naming the op, when the host next waits
// (item(), to(kCPU), synchronize()), like PyTorch's device-side asserts but recoverable.
#pragma once

#include <span>

#include "halfgrad/core/tensor.h"

namespace hg::cuda {

Tensor cat(std::span<const Tensor> tensors, int64_t dim);
Tensor stack(std::span<const Tensor> tensors, int64_t dim);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);
Tensor index_put(const Tensor& self, std::span<const Tensor> indices, const Tensor& values,
                 bool accumulate);
Tensor one_hot(const Tensor& x, int64_t num_classes);

}  // namespace hg::cuda
