// Tensor metadata. (Views are in view.cpp; the differentiable methods in ops/.)
#include "halfgrad/core/tensor.h"

#include <algorithm>

#include "halfgrad/core/format.h"

namespace hg {

TensorImpl::TensorImpl(Storage storage, DType dtype, Shape sizes, Shape strides,
                       int64_t storage_offset)
    : storage_(std::move(storage)),
      dtype_(dtype),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      storage_offset_(storage_offset),
      numel_(shape_numel(sizes_)),
      is_contiguous_(is_contiguous_layout(sizes_, strides_)) {}

TensorImpl::TensorImpl(Storage storage, DType dtype, const Shape& sizes, int64_t numel)
    : storage_(std::move(storage)),
      dtype_(dtype),
      sizes_(sizes),
      strides_(contiguous_strides(sizes)),
      storage_offset_(0),
      numel_(numel),
      is_contiguous_(true) {}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage() == other.impl_->storage();
}

}  // namespace hg
