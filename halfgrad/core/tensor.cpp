// Tensor metadata and views. A view is a new TensorImpl over the same storage with other
// sizes, strides and offset; nothing is copied.
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

int64_t Tensor::size(int64_t dim) const { return sizes()[wrap_dim(dim, this->dim(), "size")]; }

int64_t Tensor::stride(int64_t dim) const {
  return strides()[wrap_dim(dim, this->dim(), "stride")];
}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage() == other.impl_->storage();
}

Tensor Tensor::make_view(Shape sizes, Shape strides, int64_t storage_offset) const {
  auto view = std::make_shared<TensorImpl>(impl_->storage(), dtype(), std::move(sizes),
                                           std::move(strides), storage_offset);
  view->set_view_base(impl_->is_view() ? impl_->view_base() : impl_);
  return Tensor(std::move(view));
}

// ---- views ----------------------------------------------------------------------------------

Tensor Tensor::view(const Shape& sizes) const {
  const Shape inferred = infer_size(sizes, numel(), "view");
  const std::optional<Shape> strides = view_strides(this->sizes(), this->strides(), inferred);
  HG_CHECK(strides.has_value(),
           "view: shape {} is not compatible with the layout of the input (sizes {}, strides {}): "
           "at least one new dim spans non-contiguous memory; use reshape(), which copies when "
           "it must",
           sizes, this->sizes(), this->strides());
  return make_view(inferred, *strides, storage_offset());
}

Tensor Tensor::as_strided(const Shape& sizes, const Shape& strides,
                          std::optional<int64_t> storage_offset) const {
  HG_CHECK(sizes.size() == strides.size(),
           "as_strided: expected as many strides as sizes, got sizes {} and strides {}", sizes,
           strides);
  const int64_t offset = storage_offset.value_or(this->storage_offset());
  HG_CHECK(offset >= 0, "as_strided: expected a storage offset >= 0, got {}", offset);
  // The largest element index reached must lie inside the storage.
  int64_t last = offset;
  const bool empty = shape_numel(sizes) == 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    HG_CHECK(strides[d] >= 0, "as_strided: expected strides >= 0, got {}", strides);
    last += (sizes[d] - 1) * strides[d];
  }
  const int64_t capacity = int64_t(impl_->storage()->nbytes() / element_size());
  HG_CHECK(empty || last < capacity,
           "as_strided: sizes {}, strides {} and offset {} reach element {}, but the storage "
           "holds {} elements",
           sizes, strides, offset, last, capacity);
  return make_view(sizes, strides, offset);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  const int64_t d0 = wrap_dim(dim0, dim(), "transpose");
  const int64_t d1 = wrap_dim(dim1, dim(), "transpose");
  if (dim() == 0) return make_view(sizes(), strides(), storage_offset());
  Shape sizes = this->sizes(), strides = this->strides();
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return make_view(std::move(sizes), std::move(strides), storage_offset());
}

Tensor Tensor::t() const {
  HG_CHECK(dim() <= 2, "t: expected a tensor of at most 2 dims, got {} dims (shape {})", dim(),
           sizes());
  return dim() < 2 ? transpose(0, 0) : transpose(0, 1);
}

Tensor Tensor::permute(const Shape& dims) const {
  HG_CHECK(int64_t(dims.size()) == dim(),
           "permute: expected {} dims for a tensor of shape {}, got {} ({})", dim(), sizes(),
           dims.size(), dims);
  Shape sizes(dims.size(), 0), strides(dims.size(), 0);
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    HG_CHECK(!seen[d], "permute: dim {} appears more than once in {}", d, dims);
    seen[d] = true;
    sizes[i] = this->sizes()[d];
    strides[i] = this->strides()[d];
  }
  return make_view(std::move(sizes), std::move(strides), storage_offset());
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  HG_CHECK(this->dim() > 0, "narrow: expected a tensor with at least 1 dim, got a 0-d tensor");
  const int64_t d = wrap_dim(dim, this->dim(), "narrow");
  const int64_t size = sizes()[d];
  if (start < 0 && start >= -size) start += size;
  HG_CHECK(start >= 0 && start <= size,
           "narrow: start {} is out of range for dim {} of size {} (shape {})", start, d, size,
           sizes());
  HG_CHECK(length >= 0 && start + length <= size,
           "narrow: start {} + length {} exceeds dim {} of size {} (shape {})", start, length, d,
           size, sizes());
  Shape sizes = this->sizes();
  sizes[d] = length;
  return make_view(std::move(sizes), strides(), storage_offset() + start * strides()[d]);
}

Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                     int64_t step) const {
  HG_CHECK(this->dim() > 0, "slice: expected a tensor with at least 1 dim, got a 0-d tensor");
  HG_CHECK(step > 0, "slice: expected step > 0, got {}", step);
  const int64_t d = wrap_dim(dim, this->dim(), "slice");
  const int64_t size = sizes()[d];
  // Python slicing: negative bounds count from the end, then clamp to [0, size].
  const auto clamp_bound = [size](int64_t bound) {
    if (bound < 0) bound += size;
    return std::clamp<int64_t>(bound, 0, size);
  };
  const int64_t first = clamp_bound(start.value_or(0));
  const int64_t last = std::max(first, clamp_bound(end.value_or(size)));
  Shape sizes = this->sizes(), strides = this->strides();
  sizes[d] = (last - first + step - 1) / step;
  strides[d] *= step;
  return make_view(std::move(sizes), std::move(strides),
                   storage_offset() + first * this->strides()[d]);
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  HG_CHECK(this->dim() > 0, "select: expected a tensor with at least 1 dim, got a 0-d tensor");
  const int64_t d = wrap_dim(dim, this->dim(), "select");
  const int64_t size = sizes()[d];
  HG_CHECK(index >= -size && index < size,
           "select: index {} is out of range for dim {} of size {} (shape {})", index, d, size,
           sizes());
  if (index < 0) index += size;
  Shape sizes = this->sizes(), strides = this->strides();
  sizes.erase(d);
  strides.erase(d);
  return make_view(std::move(sizes), std::move(strides),
                   storage_offset() + index * this->strides()[d]);
}

Tensor Tensor::expand(const Shape& sizes) const {
  HG_CHECK(int64_t(sizes.size()) >= dim(),
           "expand: the target shape {} has fewer dims than the tensor's shape {}", sizes,
           this->sizes());
  const size_t lead = sizes.size() - size_t(dim());
  Shape out_sizes(sizes.size(), 0), out_strides(sizes.size(), 0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < lead) {  // new leading dims
      HG_CHECK(sizes[i] >= 0, "expand: size -1 is not allowed for a new leading dim ({} in {})",
               sizes[i], sizes);
      out_sizes[i] = sizes[i];
      continue;
    }
    const int64_t own = this->sizes()[i - lead];
    const int64_t want = sizes[i] == -1 ? own : sizes[i];
    HG_CHECK(want == own || own == 1,
             "expand: cannot expand shape {} to {}: dim {} has size {}, expected it to be {} or 1",
             this->sizes(), sizes, i, own, want);
    out_sizes[i] = want;
    out_strides[i] = want == own ? this->strides()[i - lead] : 0;
  }
  return make_view(std::move(out_sizes), std::move(out_strides), storage_offset());
}

Tensor Tensor::squeeze() const {
  Shape sizes, strides;
  for (int64_t d = 0; d < dim(); ++d) {
    if (this->sizes()[d] == 1) continue;
    sizes.push_back(this->sizes()[d]);
    strides.push_back(this->strides()[d]);
  }
  return make_view(std::move(sizes), std::move(strides), storage_offset());
}

Tensor Tensor::squeeze(int64_t dim) const {
  const int64_t d = wrap_dim(dim, this->dim(), "squeeze");
  if (this->dim() == 0 || sizes()[d] != 1) return make_view(sizes(), strides(), storage_offset());
  Shape sizes = this->sizes(), strides = this->strides();
  sizes.erase(d);
  strides.erase(d);
  return make_view(std::move(sizes), std::move(strides), storage_offset());
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  const int64_t d = wrap_dim(dim, this->dim() + 1, "unsqueeze");
  Shape sizes = this->sizes(), strides = this->strides();
  const int64_t stride = d < this->dim() ? this->strides()[d] * this->sizes()[d] : 1;
  sizes.insert(d, 1);
  strides.insert(d, stride);
  return make_view(std::move(sizes), std::move(strides), storage_offset());
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t start = wrap_dim(start_dim, dim(), "flatten");
  const int64_t end = wrap_dim(end_dim, dim(), "flatten");
  HG_CHECK(start <= end, "flatten: start_dim {} must not come after end_dim {}", start_dim,
           end_dim);
  Shape sizes;
  for (int64_t d = 0; d < start; ++d) sizes.push_back(this->sizes()[d]);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= this->sizes()[d];
  sizes.push_back(merged);
  for (int64_t d = end + 1; d < dim(); ++d) sizes.push_back(this->sizes()[d]);
  return reshape(sizes);
}

Tensor Tensor::unflatten(int64_t dim, const Shape& sizes) const {
  const int64_t d = wrap_dim(dim, this->dim(), "unflatten");
  const Shape inner = infer_size(sizes, this->sizes()[d], "unflatten");
  Shape out;
  for (int64_t i = 0; i < d; ++i) out.push_back(this->sizes()[i]);
  for (int64_t s : inner) out.push_back(s);
  for (int64_t i = d + 1; i < this->dim(); ++i) out.push_back(this->sizes()[i]);
  return view(out);
}

// ---- views when possible ----------------------------------------------------------------------

Tensor Tensor::reshape(const Shape& sizes) const {
  const Shape inferred = infer_size(sizes, numel(), "reshape");
  if (std::optional<Shape> strides = view_strides(this->sizes(), this->strides(), inferred)) {
    return make_view(inferred, *strides, storage_offset());
  }
  // No view exists: copy, and give the copy the new shape. The result is not a view of
  // anything (as in PyTorch), so it can be a leaf for the weight-cast cache.
  const Tensor copy = clone();
  return Tensor(std::make_shared<TensorImpl>(copy.impl()->storage(), dtype(), inferred,
                                             contiguous_strides(inferred), 0));
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

}  // namespace hg
