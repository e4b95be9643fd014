// The layout functions behind Tensor's views and copies, without autograd: each makes a new
// TensorImpl over the same storage (or, for reshape and clone, a copy). The public,
// differentiable Tensor methods (t.transpose(0, 1), t.to(kFloat16), ...) are ops defined in
// ops/, which call these in their forward.
//
// NOTE [Tensor methods are ops] Tensor is declared in core/ but its view and conversion
// methods are defined in ops/shape.cpp, because they record autograd history. Code below ops/
// (core, the kernels) calls these functions instead.
#pragma once

#include <optional>
#include <utility>

#include "halfgrad/core/tensor.h"

namespace hg::core {

// A view of self's storage with the given layout (its base is self's base, or self).
Tensor make_view(const Tensor& self, Shape sizes, Shape strides, int64_t storage_offset);

Tensor view(const Tensor& self, const Shape& sizes);
Tensor as_strided(const Tensor& self, const Shape& sizes, const Shape& strides,
                  std::optional<int64_t> storage_offset);
Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& self, const Shape& dims);
Tensor slice(const Tensor& self, int64_t dim, std::optional<int64_t> start,
             std::optional<int64_t> end, int64_t step);
// Python slice bounds resolved for a dim of `size`: negative bounds count from the end, then
// both are clamped to [0, size] and end to at least start.
std::pair<int64_t, int64_t> slice_bounds(int64_t size, std::optional<int64_t> start,
                                         std::optional<int64_t> end);
Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& self, int64_t dim, int64_t index);
Tensor expand(const Tensor& self, const Shape& sizes);
Tensor squeeze(const Tensor& self, std::optional<int64_t> dim);
Tensor unsqueeze(const Tensor& self, int64_t dim);
// A view when the layout allows (view_strides), a copy otherwise.
Tensor reshape(const Tensor& self, const Shape& sizes);
// A contiguous copy.
Tensor clone(const Tensor& self);
// A copy converted to dtype (self itself when the dtype is already dtype). options.saturate
// needs a float8 dtype.
Tensor to_dtype(const Tensor& self, DType dtype, CastOptions options = {});

}  // namespace hg::core
