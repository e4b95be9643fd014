// Views, copies and conversions as ops: Tensor's methods (NOTE [Tensor methods are ops] in
// core/view.h). Each forward is a core:: layout function; each backward maps the gradient
// back to the input's layout.
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/view.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

// view and reshape: the gradient takes the input's shape back.
template <OpId Id>
struct Reshape {
  static constexpr OpId id = Id;
  Shape sizes{};
  Shape input_sizes{};
  Tensor forward(OpContext&, const Tensor& x) {
    input_sizes = x.sizes();
    return Id == OpId::view ? core::view(x, sizes) : core::reshape(x, sizes);
  }
  Grads backward(OpContext&, const Grads& grads) { return {grads[0].reshape(input_sizes)}; }
};

struct Expand {
  static constexpr OpId id = OpId::expand;
  Shape sizes{};
  Shape input_sizes{};
  Tensor forward(OpContext&, const Tensor& x) {
    input_sizes = x.sizes();
    return core::expand(x, sizes);
  }
  Grads backward(OpContext&, const Grads& grads) { return {sum_to_size(grads[0], input_sizes)}; }
};

struct Transpose {
  static constexpr OpId id = OpId::transpose;
  int64_t dim0 = 0, dim1 = 0;
  Tensor forward(OpContext&, const Tensor& x) { return core::transpose(x, dim0, dim1); }
  Grads backward(OpContext&, const Grads& grads) { return {grads[0].transpose(dim0, dim1)}; }
};

struct Permute {
  static constexpr OpId id = OpId::permute;
  Shape dims{};
  Tensor forward(OpContext&, const Tensor& x) {
    Tensor out = core::permute(x, dims);
    for (int64_t& d : dims) d = wrap_dim(d, x.dim(), "permute");
    return out;
  }
  Grads backward(OpContext&, const Grads& grads) {
    Shape inverse(dims.size(), 0);
    for (size_t i = 0; i < dims.size(); ++i) inverse[dims[i]] = int64_t(i);
    return {grads[0].permute(inverse)};
  }
};

// slice's backward: a zero tensor of the input's shape with the gradient in the slice.
struct SliceBackward {
  static constexpr OpId id = OpId::slice_backward;
  Shape input_sizes{};
  int64_t dim = 0, start = 0, end = 0, step = 0;
  Tensor forward(OpContext&, const Tensor& grad) {
    Tensor out = zeros(input_sizes, grad.options());
    core::slice(out, dim, start, end, step).copy_(grad);
    return out;
  }
  Grads backward(OpContext&, const Grads& grads) { return {grads[0].slice(dim, start, end, step)}; }
};

struct Slice {
  static constexpr OpId id = OpId::slice;
  int64_t dim = 0;
  std::optional<int64_t> start{}, end{};
  int64_t step;
  Shape input_sizes{};
  Tensor forward(OpContext&, const Tensor& x) {
    input_sizes = x.sizes();
    Tensor out = core::slice(x, dim, start, end, step);
    dim = wrap_dim(dim, x.dim(), "slice");  // resolved for backward
    std::tie(start, end) = core::slice_bounds(x.sizes()[dim], start, end);
    return out;
  }
  Grads backward(OpContext&, const Grads& grads) {
    return {dispatch(SliceBackward{input_sizes, dim, *start, *end, step}, grads[0])};
  }
};

// select's backward: a zero tensor of the input's shape with the gradient at `index`.
struct SelectBackward {
  static constexpr OpId id = OpId::select_backward;
  Shape input_sizes{};
  int64_t dim = 0, index = 0;
  Tensor forward(OpContext&, const Tensor& grad) {
    Tensor out = zeros(input_sizes, grad.options());
    core::select(out, dim, index).copy_(grad);
    return out;
  }
  Grads backward(OpContext&, const Grads& grads) { return {grads[0].select(dim, index)}; }
};

struct Select {
  static constexpr OpId id = OpId::select;
  int64_t dim = 0, index = 0;
  Shape input_sizes{};
  Tensor forward(OpContext&, const Tensor& x) {
    Tensor out = core::select(x, dim, index);
    input_sizes = x.sizes();
    dim = wrap_dim(dim, x.dim(), "select");
    if (index < 0) index += x.sizes()[dim];
    return out;
  }
  Grads backward(OpContext&, const Grads& grads) {
    return {dispatch(SelectBackward{input_sizes, dim, index}, grads[0])};
  }
};

template <OpId Id>
struct SqueezeUnsqueeze {
  static constexpr OpId id = Id;
  std::optional<int64_t> dim{};
  Shape input_sizes{};
  Tensor forward(OpContext&, const Tensor& x) {
    input_sizes = x.sizes();
    return Id == OpId::squeeze ? core::squeeze(x, dim) : core::unsqueeze(x, *dim);
  }
  Grads backward(OpContext&, const Grads& grads) { return {grads[0].reshape(input_sizes)}; }
};

struct Clone {
  static constexpr OpId id = OpId::clone;
  Tensor forward(OpContext&, const Tensor& x) { return core::clone(x); }
  Grads backward(OpContext&, const Grads& grads) { return {grads[0]}; }
};

// to(dtype): the gradient goes back in the input's dtype. It is the cast autocast inserts.
struct ToDtype {
  static constexpr OpId id = OpId::to_dtype;
  DType dtype;
  CastOptions options = {};
  DType input_dtype = kFloat32;
  Tensor forward(OpContext&, const Tensor& x) {
    input_dtype = x.dtype();
    return core::to_dtype(x, dtype, options);
  }
  Grads backward(OpContext&, const Grads& grads) { return {grads[0].to(input_dtype)}; }
};

}  // namespace

Tensor Tensor::view(const Shape& sizes) const {
  return dispatch(Reshape<OpId::view>{.sizes = sizes}, *this);
}
Tensor Tensor::reshape(const Shape& sizes) const {
  return dispatch(Reshape<OpId::reshape>{.sizes = sizes}, *this);
}
Tensor Tensor::expand(const Shape& sizes) const { return dispatch(Expand{.sizes = sizes}, *this); }
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  return dispatch(Transpose{dim0, dim1}, *this);
}
Tensor Tensor::t() const {
  HG_CHECK(dim() <= 2, "t: expected a tensor of at most 2 dims, got {} dims (shape {})", dim(),
           sizes());
  return dim() < 2 ? transpose(0, 0) : transpose(0, 1);
}
Tensor Tensor::permute(const Shape& dims) const { return dispatch(Permute{.dims = dims}, *this); }
Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                     int64_t step) const {
  return dispatch(Slice{.dim = dim, .start = start, .end = end, .step = step}, *this);
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  // Validates like core::narrow (its messages), then records a slice.
  const Tensor checked = core::narrow(*this, dim, start, length);
  const int64_t d = wrap_dim(dim, this->dim(), "narrow");
  const int64_t first = start < 0 ? start + sizes()[d] : start;
  (void)checked;
  return slice(d, first, first + length, 1);
}
Tensor Tensor::select(int64_t dim, int64_t index) const {
  return dispatch(Select{.dim = dim, .index = index}, *this);
}
Tensor Tensor::squeeze() const {
  return dispatch(SqueezeUnsqueeze<OpId::squeeze>{.dim = std::nullopt}, *this);
}
Tensor Tensor::squeeze(int64_t dim) const {
  return dispatch(SqueezeUnsqueeze<OpId::squeeze>{.dim = dim}, *this);
}
Tensor Tensor::unsqueeze(int64_t dim) const {
  return dispatch(SqueezeUnsqueeze<OpId::unsqueeze>{.dim = dim}, *this);
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t start = wrap_dim(start_dim, dim(), "flatten");
  const int64_t end = wrap_dim(end_dim, dim(), "flatten");
  HG_CHECK(start <= end, "flatten: start_dim {} must not come after end_dim {}", start_dim,
           end_dim);
  Shape sizes{};
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
  Shape out{};
  for (int64_t i = 0; i < d; ++i) out.push_back(this->sizes()[i]);
  for (int64_t s : inner) out.push_back(s);
  for (int64_t i = d + 1; i < this->dim(); ++i) out.push_back(this->sizes()[i]);
  return view(out);
}
Tensor Tensor::as_strided(const Shape& sizes, const Shape& strides,
                          std::optional<int64_t> storage_offset) const {
  HG_CHECK(!(requires_grad() && autograd::is_grad_enabled()),
           "as_strided: not differentiable; call it on a tensor that does not require grad, or "
           "under NoGradGuard");
  return core::as_strided(*this, sizes, strides, storage_offset);
}
Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }
Tensor Tensor::clone() const { return dispatch(Clone{}, *this); }
Tensor Tensor::to(DType dtype, CastOptions options) const {
  // A saturating or stochastic call goes through, for to_dtype to check the dtypes it takes.
  return dtype == this->dtype() && !options.saturate &&
                 options.rounding == Rounding::NearestEven
             ? *this
             : dispatch(ToDtype{.dtype = dtype, .options = options}, *this);
}
Tensor Tensor::to(DType dtype, Rounding rounding, Generator* generator) const {
  return to(dtype, CastOptions{.rounding = rounding, .generator = generator});
}
Tensor Tensor::to(Device device, DType dtype) const { return to(device).to(dtype); }

Tensor sum_to_size(const Tensor& x, const Shape& sizes) {
  HG_CHECK(broadcasts_to(sizes, x.sizes()),
           "sum_to_size: shape {} does not broadcast to the tensor's shape {}", sizes, x.sizes());
  const size_t lead = x.sizes().size() - sizes.size();
  Shape dims{};
  bool only_leading = true;  // all summed dims are leading ones that `sizes` does not have
  for (size_t d = 0; d < x.sizes().size(); ++d) {
    if (d < lead || (sizes[d - lead] == 1 && x.sizes()[d] != 1)) {
      dims.push_back(int64_t(d));
      only_leading = only_leading && d < lead;
    }
  }
  if (dims.empty()) return x.reshape(sizes);
  // The sum in `sizes` directly where it can be (a tensor of its own, not a view: a leaf can
  // take it as its gradient without a copy, NOTE [Gradient accumulation]).
  if (lead == 0) return sum(x, dims, /*keepdim=*/true);
  if (only_leading) return sum(x, dims, /*keepdim=*/false);
  return sum(x, dims, /*keepdim=*/true).reshape(sizes);
}

}  // namespace hg
