// The argument checks and result shapes of the index kernels (index.h), shared by the CPU
// kernels (cpu/index.cpp) and the CUDA ones (cuda/index.cpp, cuda/elementwise.cpp), so both
// accept the same arguments and throw the same hg::Error for bad ones. Index values are not
// checked here: the CPU kernels scan them on the host, the CUDA kernels on the device (NOTE
// [Index checks on the device] in cuda/index.cpp).
//
// `backend` is where the kernel runs (kCPU or kCUDA): every tensor must be there, and on a
// CUDA device on the device of the op's first tensor.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "halfgrad/core/tensor.h"

namespace hg::kernel::index_checks {

// ---- helpers ---------------------------------------------------------------------------------

// A 0-d tensor as the 1-D tensor of size 1 it stands for in gather, scatter_add, index_select
// and index_add (PyTorch's ensure_nonempty_dim).
inline Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.unsqueeze(0) : t; }

// The product of sizes[begin, end).
inline int64_t product(const Shape& sizes, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= sizes[d];
  return n;
}

// Throws unless t is defined and on `backend`; on a CUDA device also on like's device when
// like is defined (the op's first tensor).
void check_tensor(const Tensor& t, const char* op, const char* what, DeviceType backend,
                  const Tensor& like = Tensor());

void check_same_dtype(const Tensor& t, DType expected, const char* op, const char* what,
                      const char* like);

void check_index_dtype(const Tensor& index, const char* op, bool int32_allowed);

// The broadcast shape of a and b, or an error that names the op and both operands.
Shape broadcast_for(const char* op, const Shape& a, const std::string& a_name, const Shape& b,
                    const std::string& b_name);

// ---- the ops' checks -------------------------------------------------------------------------

// PyTorch's legacy rule: cat skips 1-D tensors of shape [0] (no part in the shape checks).
inline bool cat_skips(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

// cat's result: its dtype, the wrapped cat dim and its shape ([0] when every tensor is
// skipped; dim is then 0).
struct CatShape {
  DType dtype;
  int64_t dim;
  Shape sizes;
};
CatShape check_cat(std::span<const Tensor> tensors, int64_t dim, DeviceType backend);

// A wrapped dim and the result's shape.
struct DimShape {
  int64_t dim;
  Shape sizes;
};
DimShape check_stack(std::span<const Tensor> tensors, int64_t dim, DeviceType backend);

// Each returns the wrapped dim of its first tensor viewed at_least_1d.
int64_t check_gather(const Tensor& x, int64_t dim, const Tensor& index, DeviceType backend);
int64_t check_scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                          DeviceType backend);
int64_t check_index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                        DeviceType backend);

// The wrapped dim of x viewed at_least_1d, and the result's shape.
DimShape check_index_select(const Tensor& x, int64_t dim, const Tensor& index, DeviceType backend);

// index_put's shapes: B, the broadcast shape of the indices, and the indexed shape (B, then
// self's sizes after the K indexed dims), which values broadcast to.
struct IndexPutShape {
  Shape indices;
  Shape indexed;
};
IndexPutShape check_index_put(const Tensor& self, std::span<const Tensor> indices,
                              const Tensor& values, DeviceType backend);

// argsort's checks: a tensor on the backend, dim one of its dims (0 or -1 for a 0-d tensor).
void check_argsort(const Tensor& x, int64_t dim);

// one_hot's checks on x and num_classes (not on the class values).
void check_one_hot(const Tensor& x, int64_t num_classes, DeviceType backend);
// The error for class index c outside [0, num_classes) of an x with `dim` dims.
[[noreturn]] void one_hot_class_error(int64_t c, int64_t dim, int64_t num_classes);

// The checks of where and masked_fill once their tensors are on the device: the bool
// condition or mask, b of a's dtype; the broadcast shape of the result.
Shape where_shape(const Tensor& condition, const Tensor& a, const Tensor& b);
Shape masked_fill_shape(const Tensor& x, const Tensor& mask);

}  // namespace hg::kernel::index_checks
