// Tensor: a shared handle to a TensorImpl (sizes, strides, storage offset, dtype, storage).
// Copying a Tensor copies the handle, as in PyTorch; views share storage with their base.
//
//   Tensor x = hg::arange(6.0).reshape({2, 3}); // [[0, 1, 2], [3, 4, 5]], float32
//   Tensor y = x.transpose(0, 1);               // a view: writes to y show in x
//   Tensor h = x.to(kFloat16);                  // a copy, rounded to nearest even
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/scalar.h"
#include "halfgrad/core/shape.h"
#include "halfgrad/core/storage.h"

namespace hg {

namespace autograd {
struct AutogradMeta;  // defined by the autograd layer (autograd/node.h)
class Node;
}  // namespace autograd

class TensorIndex;  // core/tensor_index.h

struct TensorOptions {
  DType dtype = kFloat32;
  Device device = kCPU;
  // CPU tensors only: page-locked memory (torch's pin_memory=True; see Tensor::pin_memory).
  bool pin_memory = false;
};

class TensorImpl {
 public:
  TensorImpl(Storage storage, DType dtype, Shape sizes, Shape strides, int64_t storage_offset);
  // A contiguous tensor of `numel` (the product of sizes, already checked) at the start of
  // storage: what empty() makes, without recomputing what it knows.
  TensorImpl(Storage storage, DType dtype, const Shape& sizes, int64_t numel);

  const Storage& storage() const { return storage_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  const Shape& sizes() const { return sizes_; }
  const Shape& strides() const { return strides_; }
  int64_t storage_offset() const { return storage_offset_; }
  int64_t numel() const { return numel_; }
  bool is_contiguous() const { return is_contiguous_; }
  // The address of element [0, 0, ...].
  void* data() const {
    return static_cast<char*>(storage_->data()) + storage_offset_ * int64_t(element_size(dtype_));
  }

  // A view's base is the tensor that owns the layout it was made from (the root of a chain
  // of views); null for a tensor that is not a view.
  bool is_view() const { return view_base_ != nullptr; }
  const std::shared_ptr<TensorImpl>& view_base() const { return view_base_; }
  void set_view_base(std::shared_ptr<TensorImpl> base) { view_base_ = std::move(base); }

  // Reserved for the autograd layer (requires_grad, grad, grad_fn, version saved, ...).
  std::shared_ptr<autograd::AutogradMeta> autograd_meta;

 private:
  Storage storage_;
  DType dtype_;
  Shape sizes_;
  Shape strides_;
  int64_t storage_offset_;
  int64_t numel_;
  bool is_contiguous_;
  std::shared_ptr<TensorImpl> view_base_;
};

// The dims a reduction method takes, as libtorch's IntArrayRef: one dim (x.sum(1)), a list
// (x.sum({0, 2})), or none (x.sum({}) and the default: every dim). One type for all three, so
// that {} cannot pick an overload taking one int64_t dim (dim 0).
class DimList {
 public:
  DimList() = default;
  DimList(int64_t dim) : dims_{dim} {}  // NOLINT(google-explicit-constructor): as IntArrayRef
  DimList(std::initializer_list<int64_t> dims) : dims_(dims) {}
  DimList(const Shape& dims) : dims_(dims) {}  // NOLINT(google-explicit-constructor)
  const Shape& shape() const { return dims_; }

 private:
  Shape dims_;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor (defined() is false)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // True when both handles point to the same tensor (not merely equal values).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata ---------------------------------------------------------------------------
  DType dtype() const { return checked().dtype(); }
  Device device() const { return checked().device(); }
  // Not pinned, as torch's: empty_like and friends of a pinned tensor take pageable memory.
  TensorOptions options() const {
    return {.dtype = dtype(), .device = device(), .pin_memory = false};
  }
  const Shape& sizes() const { return checked().sizes(); }
  const Shape& strides() const { return checked().strides(); }
  Shape shape() const { return sizes(); }
  int64_t size(int64_t dim) const {  // negative dims count from the end
    const Shape& s = sizes();
    return s[wrap_dim(dim, int64_t(s.size()), "size")];
  }
  int64_t stride(int64_t dim) const {
    const Shape& s = strides();
    return s[wrap_dim(dim, int64_t(s.size()), "stride")];
  }
  int64_t dim() const { return int64_t(sizes().size()); }
  int64_t numel() const { return checked().numel(); }
  int64_t storage_offset() const { return checked().storage_offset(); }
  size_t element_size() const { return hg::element_size(dtype()); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  bool is_contiguous() const { return checked().is_contiguous(); }
  bool is_floating_point() const { return hg::is_floating_point(dtype()); }
  bool is_view() const { return checked().is_view(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  // True when the tensor's memory is page-locked host memory (pin_memory(), or a factory with
  // .pin_memory = true); always false without a usable CUDA device.
  bool is_pinned() const { return checked().storage()->is_pinned(); }
  // True when this tensor and other use the same storage (a view and its base, say).
  bool shares_storage(const Tensor& other) const;
  // The storage's version: bumped by every in-place write (NOTE [Version counter]).
  uint64_t version() const { return checked().storage()->version(); }
  void bump_version() const { checked().storage()->bump_version(); }

  // ---- data -------------------------------------------------------------------------------
  // The address of element [0, 0, ...]; T must match the dtype.
  void* data_ptr() const { return checked().data(); }
  template <class T>
  T* data_ptr() const {
    HG_CHECK(dtype_of<T> == dtype(), "data_ptr<{}>: the tensor's dtype is {}",
             dtype_name(dtype_of<T>), dtype_name(dtype()));
    return static_cast<T*>(data_ptr());
  }
  // The value of a one-element tensor, converted to T (a CPU round trip for CUDA tensors).
  template <class T>
  T item() const;
  // All elements in row-major order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  // ---- views (share storage with this tensor) ---------------------------------------------
  Tensor view(const Shape& sizes) const;  // one size may be -1
  Tensor as_strided(const Shape& sizes, const Shape& strides,
                    std::optional<int64_t> storage_offset = std::nullopt) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a tensor of at most 2 dims
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& sizes) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, const Shape& sizes) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  // x[indices...] with libtorch's indices (core/tensor_index.h; ops/tensor_index.cpp): a view
  // when every index is an integer, a slice, None, the ellipsis or a bool; a new tensor when
  // one is a tensor (advanced indexing, PyTorch's rules).
  Tensor index(std::initializer_list<TensorIndex> indices) const;
  Tensor index(const std::vector<TensorIndex>& indices) const;

  // ---- views when possible, copies otherwise ----------------------------------------------
  Tensor reshape(const Shape& sizes) const;
  Tensor contiguous() const;

  // ---- copies -----------------------------------------------------------------------------
  Tensor clone() const;
  // A tensor of another dtype and/or device; returns *this when nothing changes. Narrowing
  // rounds to nearest even; to a float8 dtype, options.saturate clamps what lies past its
  // range to its largest finite value instead of making it NaN or inf:
  //   Tensor w8 = w.to(kFloat8_e4m3fn, {.saturate = true});
  // Rounding::Stochastic rounds each value up or down at random so that its mean is exact,
  // with words of `generator` (nullptr: the default one); NOTE [Stochastic rounding]:
  //   Tensor w16 = w.to(kBFloat16, Rounding::Stochastic, &gen);
  // Either cast passes gradients straight through, back in this tensor's dtype.
  Tensor to(DType dtype, CastOptions options = {}) const;
  Tensor to(DType dtype, Rounding rounding, Generator* generator = nullptr) const;
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  // non_blocking (torch's): a copy from pinned memory to a CUDA device is enqueued on the
  // device's current stream and read from this tensor's memory while the host goes on, so
  // the caller must not write that memory until the stream got there (the pinned block
  // itself is not reused before: NOTE [Pinned host memory]). Otherwise the same as to(device).
  Tensor to(Device device, bool non_blocking) const;
  Tensor cpu() const { return to(Device(kCPU)); }
  // A copy in page-locked host memory, which a CUDA device reads directly, and to(device,
  // non_blocking = true) asynchronously (torch's pin_memory); *this when already pinned. CPU
  // tensors only; hg::Error without a usable CUDA device. The copy has no autograd history.
  Tensor pin_memory() const;

  // ---- autograd (autograd/variable.cpp) ---------------------------------------------------
  bool requires_grad() const;
  // Marks a leaf as needing gradients (or not). Only floating tensors can require grad.
  Tensor& requires_grad_(bool requires_grad = true);
  // The accumulated gradient: undefined until a backward pass reaches this tensor (a leaf,
  // or a tensor that called retain_grad()).
  const Tensor& grad() const;
  // The gradient slot, for optimizers and zero_grad (assigning undefined clears it).
  Tensor& mutable_grad() const;
  // The node that produced this tensor; null for leaves and tensors that need no gradient.
  std::shared_ptr<autograd::Node> grad_fn() const;
  bool is_leaf() const;
  uint32_t output_nr() const;
  // Computes the gradient of this tensor w.r.t. the graph's leaves and adds it into their
  // grad(). `gradient` may be omitted for a one-element tensor (it is then 1).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  // The same data with no autograd history; shares storage and the version counter.
  Tensor detach() const;
  Tensor& detach_();
  // Keeps grad() for a non-leaf tensor after backward.
  void retain_grad() const;
  // Runs hook on this tensor's gradient whenever one is computed; the hook may return a
  // replacement gradient (or an undefined tensor to keep it).
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Runs hook on this leaf (it sees the leaf) each time a backward pass has added a gradient
  // into its grad() (torch's register_post_accumulate_grad_hook). Leaves only.
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;

  // ---- ops as methods, as libtorch's Tensor has them (ops/tensor_methods.cpp) --------------
  // Each calls the free function of the same name (ops/ops.h and its headers) on *this, with
  // the same arguments and defaults: x.sum(1) is hg::sum(x, {1}), x.argmax(1) is
  // hg::argmax(x, 1). Dims are a DimList: one dim, a list ({0, 2}), or {} for every dim.
  // The comparison operators (==, !=, <, <=, >, >=) are free functions in ops/ops.h.
  Tensor sum(DimList dims = {}, bool keepdim = false,
             std::optional<DType> dtype = std::nullopt) const;
  Tensor sum(DType dtype) const { return sum({}, false, dtype); }  // every element, in dtype
  Tensor mean(DimList dims = {}, bool keepdim = false,
              std::optional<DType> dtype = std::nullopt) const;
  Tensor mean(DType dtype) const { return mean({}, false, dtype); }
  Tensor prod(DimList dims = {}, bool keepdim = false) const;
  // The largest / smallest element (0-d), or {values, indices} along dim.
  Tensor max() const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor amax(DimList dims = {}, bool keepdim = false) const;
  Tensor amin(DimList dims = {}, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  // correction 1: the unbiased estimate, torch's default.
  Tensor var(DimList dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(DimList dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor all(DimList dims = {}, bool keepdim = false) const;
  Tensor any(DimList dims = {}, bool keepdim = false) const;
  Tensor norm(double p = 2.0, DimList dims = {}, bool keepdim = false) const;
  Tensor logsumexp(DimList dims, bool keepdim = false) const;
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor softmax(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor log_softmax(int64_t dim, std::optional<DType> dtype = std::nullopt) const;

  // Elementwise arithmetic and comparisons (bool results).
  Tensor add(const Tensor& other, Scalar alpha = 1) const;
  Tensor add(Scalar other, Scalar alpha = 1) const;
  Tensor sub(const Tensor& other, Scalar alpha = 1) const;
  Tensor sub(Scalar other, Scalar alpha = 1) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(Scalar other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(Scalar other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(Scalar exponent) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max) const;
  Tensor clamp_min(Scalar min) const;
  Tensor clamp_max(Scalar max) const;
  Tensor eq(const Tensor& other) const;
  Tensor eq(Scalar other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(Scalar other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(Scalar other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(Scalar other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(Scalar other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(Scalar other) const;
  // One method per elementwise function of ops/op_list.def (tests/ops/tensor_methods_test.cpp
  // checks that none is missing).
  Tensor neg() const;
  Tensor exp() const;
  Tensor expm1() const;
  Tensor log() const;
  Tensor log1p() const;
  Tensor log2() const;
  Tensor log10() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor reciprocal() const;
  Tensor abs() const;
  Tensor square() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor trunc() const;
  Tensor round() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor tan() const;
  Tensor asin() const;
  Tensor acos() const;
  Tensor sinh() const;
  Tensor cosh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor silu() const;
  Tensor softplus() const;
  Tensor hardswish() const;
  Tensor mish() const;
  Tensor erfinv() const;
  Tensor erf() const;
  Tensor sign() const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;

  // Products, selection and rearranging.
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;
  Tensor bmm(const Tensor& other) const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  Tensor repeat(const Shape& repeats) const;
  Tensor flip(const Shape& dims) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true,
                                  bool sorted = true) const;
  Tensor type_as(const Tensor& other) const { return to(other.dtype()); }

  // ---- in-place writes (bump the version) -------------------------------------------------
  // Arithmetic in place (ops/inplace.cpp): the other operand broadcasts to this tensor's
  // shape and the result keeps this tensor's dtype (a float result into an integer tensor is
  // an error, as torch). With autograd: NOTE [In-place ops and autograd].
  Tensor& add_(const Tensor& other, Scalar alpha = 1);
  Tensor& add_(Scalar other, Scalar alpha = 1);
  Tensor& sub_(const Tensor& other, Scalar alpha = 1);
  Tensor& sub_(Scalar other, Scalar alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar other);
  // Copies src into this tensor, broadcasting src's shape and converting its dtype.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(Scalar value);
  Tensor& zero_() { return fill_(0); }
  // x[indices...] = values (broadcast to the indexed shape, converted to this dtype), in place
  // (ops/tensor_index.cpp); with autograd, NOTE [In-place ops and autograd].
  Tensor& index_put_(std::initializer_list<TensorIndex> indices, const Tensor& values);
  Tensor& index_put_(std::initializer_list<TensorIndex> indices, Scalar value);
  Tensor& index_put_(const std::vector<TensorIndex>& indices, const Tensor& values);

 private:
  TensorImpl& checked() const {
    HG_CHECK(impl_ != nullptr, "this operation needs a defined tensor, got an undefined one");
    return *impl_;
  }

  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace hg
