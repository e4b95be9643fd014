// Views: a new TensorImpl over the same storage with other sizes, strides and offset;
// nothing is copied. No autograd here (NOTE [Tensor methods are ops] in view.h).
#include "halfgrad/core/view.h"

#include <algorithm>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"

namespace hg::core {

Tensor make_view(const Tensor& self, Shape sizes, Shape strides, int64_t storage_offset) {
  const std::shared_ptr<TensorImpl>& impl = self.impl_ptr();
  auto view = make_pooled<TensorImpl>(impl->storage(), self.dtype(), std::move(sizes),
                                      std::move(strides), storage_offset);
  view->set_view_base(impl->is_view() ? impl->view_base() : impl);
  return Tensor(std::move(view));
}

Tensor view(const Tensor& self, const Shape& sizes) {
  const Shape inferred = infer_size(sizes, self.numel(), "view");
  const std::optional<Shape> strides = view_strides(self.sizes(), self.strides(), inferred);
  HG_CHECK(strides.has_value(),
           "view: shape {} is not compatible with the layout of the input (sizes {}, strides {}): "
           "at least one new dim spans non-contiguous memory; use reshape(), which copies when "
           "it must",
           sizes, self.sizes(), self.strides());
  return make_view(self, inferred, *strides, self.storage_offset());
}

Tensor as_strided(const Tensor& self, const Shape& sizes, const Shape& strides,
                  std::optional<int64_t> storage_offset) {
  HG_CHECK(sizes.size() == strides.size(),
           "as_strided: expected as many strides as sizes, got sizes {} and strides {}", sizes,
           strides);
  const int64_t offset = storage_offset.value_or(self.storage_offset());
  HG_CHECK(offset >= 0, "as_strided: expected a storage offset >= 0, got {}", offset);
  // The largest element index reached must lie inside the storage.
  int64_t last = offset;
  const bool empty = shape_numel(sizes) == 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    HG_CHECK(strides[d] >= 0, "as_strided: expected strides >= 0, got {}", strides);
    last += (sizes[d] - 1) * strides[d];
  }
  const int64_t capacity = int64_t(self.impl()->storage()->nbytes() / self.element_size());
  HG_CHECK(empty || last < capacity,
           "as_strided: sizes {}, strides {} and offset {} reach element {}, but the storage "
           "holds {} elements",
           sizes, strides, offset, last, capacity);
  return make_view(self, sizes, strides, offset);
}

Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1) {
  const int64_t d0 = wrap_dim(dim0, self.dim(), "transpose");
  const int64_t d1 = wrap_dim(dim1, self.dim(), "transpose");
  Shape sizes = self.sizes(), strides = self.strides();
  if (self.dim() > 0) {
    std::swap(sizes[d0], sizes[d1]);
    std::swap(strides[d0], strides[d1]);
  }
  return make_view(self, std::move(sizes), std::move(strides), self.storage_offset());
}

Tensor permute(const Tensor& self, const Shape& dims) {
  HG_CHECK(int64_t(dims.size()) == self.dim(),
           "permute: expected {} dims for a tensor of shape {}, got {} ({})", self.dim(),
           self.sizes(), dims.size(), dims);
  Shape sizes(dims.size(), 0), strides(dims.size(), 0);
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], self.dim(), "permute");
    HG_CHECK(!seen[d], "permute: dim {} appears more than once in {}", d, dims);
    seen[d] = true;
    sizes[i] = self.sizes()[d];
    strides[i] = self.strides()[d];
  }
  return make_view(self, std::move(sizes), std::move(strides), self.storage_offset());
}

Tensor slice(const Tensor& self, int64_t dim, std::optional<int64_t> start,
             std::optional<int64_t> end, int64_t step) {
  HG_CHECK(self.dim() > 0, "slice: expected a tensor with at least 1 dim, got a 0-d tensor");
  HG_CHECK(step > 0, "slice: expected step > 0, got {}", step);
  const int64_t d = wrap_dim(dim, self.dim(), "slice");
  const auto [first, last] = slice_bounds(self.sizes()[d], start, end);
  Shape sizes = self.sizes(), strides = self.strides();
  sizes[d] = (last - first + step - 1) / step;
  strides[d] *= step;
  return make_view(self, std::move(sizes), std::move(strides),
                   self.storage_offset() + first * self.strides()[d]);
}

std::pair<int64_t, int64_t> slice_bounds(int64_t size, std::optional<int64_t> start,
                                         std::optional<int64_t> end) {
  const auto clamp_bound = [size](int64_t bound) {
    if (bound < 0) bound += size;
    return std::clamp<int64_t>(bound, 0, size);
  };
  const int64_t first = clamp_bound(start.value_or(0));
  return {first, std::max(first, clamp_bound(end.value_or(size)))};
}

Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length) {
  HG_CHECK(self.dim() > 0, "narrow: expected a tensor with at least 1 dim, got a 0-d tensor");
  const int64_t d = wrap_dim(dim, self.dim(), "narrow");
  const int64_t size = self.sizes()[d];
  if (start < 0 && start >= -size) start += size;
  HG_CHECK(start >= 0 && start <= size,
           "narrow: start {} is out of range for dim {} of size {} (shape {})", start, d, size,
           self.sizes());
  HG_CHECK(length >= 0 && start + length <= size,
           "narrow: start {} + length {} exceeds dim {} of size {} (shape {})", start, length, d,
           size, self.sizes());
  return slice(self, d, start, start + length, 1);
}

Tensor select(const Tensor& self, int64_t dim, int64_t index) {
  HG_CHECK(self.dim() > 0, "select: expected a tensor with at least 1 dim, got a 0-d tensor");
  const int64_t d = wrap_dim(dim, self.dim(), "select");
  const int64_t size = self.sizes()[d];
  HG_CHECK(index >= -size && index < size,
           "select: index {} is out of range for dim {} of size {} (shape {})", index, d, size,
           self.sizes());
  if (index < 0) index += size;
  Shape sizes = self.sizes(), strides = self.strides();
  sizes.erase(d);
  strides.erase(d);
  return make_view(self, std::move(sizes), std::move(strides),
                   self.storage_offset() + index * self.strides()[d]);
}

Tensor expand(const Tensor& self, const Shape& sizes) {
  HG_CHECK(int64_t(sizes.size()) >= self.dim(),
           "expand: the target shape {} has fewer dims than the tensor's shape {}", sizes,
           self.sizes());
  const size_t lead = sizes.size() - size_t(self.dim());
  Shape out_sizes(sizes.size(), 0), out_strides(sizes.size(), 0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < lead) {  // new leading dims
      HG_CHECK(sizes[i] >= 0, "expand: size {} is not allowed for a new leading dim in {}",
               sizes[i], sizes);
      out_sizes[i] = sizes[i];
      continue;
    }
    const int64_t own = self.sizes()[i - lead];
    const int64_t want = sizes[i] == -1 ? own : sizes[i];
    HG_CHECK(want == own || own == 1,
             "expand: cannot expand shape {} to {}: dim {} has size {}, expected it to be {} or 1",
             self.sizes(), sizes, i, own, want);
    out_sizes[i] = want;
    out_strides[i] = want == own ? self.strides()[i - lead] : 0;
  }
  return make_view(self, std::move(out_sizes), std::move(out_strides), self.storage_offset());
}

Tensor squeeze(const Tensor& self, std::optional<int64_t> dim) {
  Shape sizes, strides;
  const int64_t only = dim ? wrap_dim(*dim, self.dim(), "squeeze") : -1;  // -1: every dim
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (self.sizes()[d] == 1 && (only == -1 || only == d)) continue;
    sizes.push_back(self.sizes()[d]);
    strides.push_back(self.strides()[d]);
  }
  return make_view(self, std::move(sizes), std::move(strides), self.storage_offset());
}

Tensor unsqueeze(const Tensor& self, int64_t dim) {
  const int64_t d = wrap_dim(dim, self.dim() + 1, "unsqueeze");
  Shape sizes = self.sizes(), strides = self.strides();
  const int64_t stride = d < self.dim() ? self.strides()[d] * self.sizes()[d] : 1;
  sizes.insert(d, 1);
  strides.insert(d, stride);
  return make_view(self, std::move(sizes), std::move(strides), self.storage_offset());
}

Tensor reshape(const Tensor& self, const Shape& sizes) {
  const Shape inferred = infer_size(sizes, self.numel(), "reshape");
  if (std::optional<Shape> strides = view_strides(self.sizes(), self.strides(), inferred)) {
    return make_view(self, inferred, *strides, self.storage_offset());
  }
  // No view exists: copy, and give the copy the new shape. The result is not a view of
  // anything (as in PyTorch), so it can be a leaf for the weight-cast cache.
  const Tensor copy = clone(self);
  return Tensor(make_pooled<TensorImpl>(copy.impl()->storage(), self.dtype(), inferred,
                                        contiguous_strides(inferred), 0));
}

}  // namespace hg::core
