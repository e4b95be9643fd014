// The argument checks of the index kernels (index_checks.h).
#include "halfgrad/kernel/index_checks.h"

#include <algorithm>

#include "halfgrad/core/format.h"

namespace hg::kernel::index_checks {

namespace {

// The checks index_select and index_add share: a 1-D or 0-d integer index.
void check_index_vector(const Tensor& index, const char* op, DeviceType backend,
                        const Tensor& like) {
  check_tensor(index, op, "index", backend, like);
  check_index_dtype(index, op, /*int32_allowed=*/true);
  HG_CHECK(index.dim() <= 1, "{}: expected a 1-D or 0-d index, got a {}-D index of shape {}", op,
           index.dim(), index.sizes());
}

}  // namespace

// ---- helpers ---------------------------------------------------------------------------------

void check_tensor(const Tensor& t, const char* op, const char* what, DeviceType backend,
                  const Tensor& like) {
  HG_CHECK(t.defined(), "{}: expected a defined {}, got an undefined tensor", op, what);
  HG_CHECK(t.device().type == backend, "{}: expected {} on {}, got a tensor on {}", op, what,
           backend == kCUDA ? "a CUDA device" : "cpu", t.device());
  HG_CHECK(!like.defined() || t.device() == like.device(),
           "{}: expected {} on {} (like the op's first tensor), got a tensor on {}", op, what,
           like.device(), t.device());
}

void check_same_dtype(const Tensor& t, DType expected, const char* op, const char* what,
                      const char* like) {
  HG_CHECK(t.dtype() == expected,
           "{}: expected {} of dtype {} (that of {}), got {}; the op layer promotes before "
           "calling this kernel",
           op, what, expected, like, t.dtype());
}

void check_index_dtype(const Tensor& index, const char* op, bool int32_allowed) {
  const bool ok = index.dtype() == kInt64 || (int32_allowed && index.dtype() == kInt32);
  HG_CHECK(ok, "{}: expected an index of dtype {}, got {}", op,
           int32_allowed ? "int64 or int32" : "int64", index.dtype());
}

Shape broadcast_for(const char* op, const Shape& a, const std::string& a_name, const Shape& b,
                    const std::string& b_name) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {  // i counts from the last dim
    const int64_t sa = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t sb = i < b.size() ? b[b.size() - 1 - i] : 1;
    HG_CHECK(sa == sb || sa == 1 || sb == 1,
             "{}: {} of shape {} and {} of shape {} cannot be broadcast together: at dim {} "
             "(counting from the end) sizes {} and {} differ and neither is 1",
             op, a_name, a, b_name, b, -int64_t(i) - 1, sa, sb);
  }
  return broadcast_shapes(a, b);
}

// ---- cat, stack ------------------------------------------------------------------------------

CatShape check_cat(std::span<const Tensor> tensors, int64_t dim, DeviceType backend) {
  HG_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors, got an empty one");
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(tensors[i], "cat", "tensor", backend, tensors[0]);
  }
  const DType dtype = tensors[0].dtype();
  for (size_t i = 1; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].dtype() == dtype,
             "cat: expected every tensor to have dtype {} (that of tensor 0), got {} for tensor "
             "{}; the op layer promotes before calling this kernel",
             dtype, tensors[i].dtype(), i);
  }
  int64_t first = -1;
  for (size_t i = 0; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].dim() > 0,
             "cat: tensor {} is 0-d; expected tensors with at least 1 dim (unsqueeze 0-d tensors "
             "first)",
             i);
    if (first < 0 && !cat_skips(tensors[i])) first = int64_t(i);
  }
  if (first < 0) return {dtype, 0, {0}};

  const Shape& ref = tensors[first].sizes();
  const int64_t d = wrap_dim(dim, int64_t(ref.size()), "cat");
  Shape out_sizes = ref;
  out_sizes[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (cat_skips(t)) continue;
    HG_CHECK(t.dim() == int64_t(ref.size()),
             "cat: expected tensors of {} dims (like tensor {}, shape {}), got {} dims for tensor "
             "{} (shape {})",
             ref.size(), first, ref, t.dim(), i, t.sizes());
    for (int64_t k = 0; k < t.dim(); ++k) {
      HG_CHECK(k == d || t.size(k) == ref[k],
               "cat: expected size {} at dim {} (like tensor {}, shape {}), got size {} for tensor "
               "{} (shape {}); sizes must match except at the cat dim {}",
               ref[k], k, first, ref, t.size(k), i, t.sizes(), d);
    }
    out_sizes[d] += t.size(d);
  }
  return {dtype, d, std::move(out_sizes)};
}

DimShape check_stack(std::span<const Tensor> tensors, int64_t dim, DeviceType backend) {
  HG_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors, got an empty one");
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(tensors[i], "stack", "tensor", backend, tensors[0]);
  }
  const Tensor& ref = tensors[0];
  for (size_t i = 1; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].dtype() == ref.dtype(),
             "stack: expected every tensor to have dtype {} (that of tensor 0), got {} for tensor "
             "{}; the op layer promotes before calling this kernel",
             ref.dtype(), tensors[i].dtype(), i);
    HG_CHECK(tensors[i].sizes() == ref.sizes(),
             "stack: expected every tensor to have shape {} (that of tensor 0), got {} for tensor "
             "{}",
             ref.sizes(), tensors[i].sizes(), i);
  }
  const int64_t d = wrap_dim(dim, ref.dim() + 1, "stack");
  Shape out_sizes = ref.sizes();
  out_sizes.insert(size_t(d), int64_t(tensors.size()));
  return {d, std::move(out_sizes)};
}

// ---- gather, scatter_add ---------------------------------------------------------------------

int64_t check_gather(const Tensor& x, int64_t dim, const Tensor& index, DeviceType backend) {
  check_tensor(x, "gather", "input", backend);
  check_tensor(index, "gather", "index", backend, x);
  check_index_dtype(index, "gather", /*int32_allowed=*/false);
  const Tensor x1 = at_least_1d(x), index1 = at_least_1d(index);
  const int64_t d = wrap_dim(dim, x1.dim(), "gather");
  HG_CHECK(index1.dim() == x1.dim(),
           "gather: expected an index with as many dims as the input ({}), got {} (input shape {}, "
           "index shape {})",
           x1.dim(), index1.dim(), x.sizes(), index.sizes());
  for (int64_t k = 0; k < x1.dim(); ++k) {
    HG_CHECK(k == d || index1.size(k) <= x1.size(k),
             "gather: expected index.size({}) <= input.size({}) = {} (every dim but dim {}), got "
             "{} (input shape {}, index shape {})",
             k, k, x1.size(k), d, index1.size(k), x.sizes(), index.sizes());
  }
  return d;
}

int64_t check_scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                          DeviceType backend) {
  check_tensor(self, "scatter_add", "self", backend);
  check_tensor(index, "scatter_add", "index", backend, self);
  check_tensor(src, "scatter_add", "src", backend, self);
  check_index_dtype(index, "scatter_add", /*int32_allowed=*/false);
  check_same_dtype(src, self.dtype(), "scatter_add", "src", "self");
  const Tensor self1 = at_least_1d(self), index1 = at_least_1d(index), src1 = at_least_1d(src);
  const int64_t d = wrap_dim(dim, self1.dim(), "scatter_add");
  HG_CHECK(index1.dim() == self1.dim(),
           "scatter_add: expected an index with as many dims as self ({}), got {} (self shape {}, "
           "index shape {})",
           self1.dim(), index1.dim(), self.sizes(), index.sizes());
  HG_CHECK(src1.dim() == self1.dim(),
           "scatter_add: expected src with as many dims as self ({}), got {} (self shape {}, src "
           "shape {})",
           self1.dim(), src1.dim(), self.sizes(), src.sizes());
  for (int64_t k = 0; k < self1.dim(); ++k) {
    HG_CHECK(index1.size(k) <= src1.size(k),
             "scatter_add: expected index.size({}) <= src.size({}) = {}, got {} (index shape {}, "
             "src shape {})",
             k, k, src1.size(k), index1.size(k), index.sizes(), src.sizes());
    HG_CHECK(k == d || index1.size(k) <= self1.size(k),
             "scatter_add: expected index.size({}) <= self.size({}) = {} (every dim but dim {}), "
             "got {} (self shape {}, index shape {})",
             k, k, self1.size(k), d, index1.size(k), self.sizes(), index.sizes());
  }
  return d;
}

// ---- index_select, index_add -----------------------------------------------------------------

DimShape check_index_select(const Tensor& x, int64_t dim, const Tensor& index, DeviceType backend) {
  check_tensor(x, "index_select", "input", backend);
  check_index_vector(index, "index_select", backend, x);
  const int64_t d = wrap_dim(dim, at_least_1d(x).dim(), "index_select");
  const int64_t N = index.numel();
  HG_CHECK(x.dim() > 0 || N == 1,
           "index_select: a 0-d input takes exactly one index, got {} (index shape {})", N,
           index.sizes());
  Shape out_sizes = x.sizes();
  if (x.dim() > 0) out_sizes[d] = N;
  return {d, std::move(out_sizes)};
}

int64_t check_index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                        DeviceType backend) {
  check_tensor(self, "index_add", "self", backend);
  check_tensor(source, "index_add", "source", backend, self);
  check_index_vector(index, "index_add", backend, self);
  check_same_dtype(source, self.dtype(), "index_add", "source", "self");
  const Tensor self1 = at_least_1d(self), source1 = at_least_1d(source);
  const int64_t d = wrap_dim(dim, self1.dim(), "index_add");
  const int64_t N = index.numel();
  HG_CHECK(source1.dim() == self1.dim(),
           "index_add: expected source with as many dims as self ({}), got {} (self shape {}, "
           "source shape {})",
           self1.dim(), source1.dim(), self.sizes(), source.sizes());
  for (int64_t k = 0; k < self1.dim(); ++k) {
    const int64_t expected = k == d ? N : self1.size(k);
    HG_CHECK(source1.size(k) == expected,
             "index_add: expected source.size({}) == {} ({}), got {} (self shape {}, source shape "
             "{}, {} indices)",
             k, expected, k == d ? "the number of indices" : "self's size there", source1.size(k),
             self.sizes(), source.sizes(), N);
  }
  return d;
}

// ---- index_put, one_hot ----------------------------------------------------------------------

IndexPutShape check_index_put(const Tensor& self, std::span<const Tensor> indices,
                              const Tensor& values, DeviceType backend) {
  check_tensor(self, "index_put", "self", backend);
  check_tensor(values, "index_put", "values", backend, self);
  check_same_dtype(values, self.dtype(), "index_put", "values", "self");
  const int64_t K = int64_t(indices.size());
  HG_CHECK(K >= 1 && K <= self.dim(),
           "index_put: expected between 1 and self.dim() = {} index tensors (self shape {}), got "
           "{}",
           self.dim(), self.sizes(), K);
  Shape B;
  for (int64_t i = 0; i < K; ++i) {
    const Tensor& index = indices[i];
    check_tensor(index, "index_put", "index", backend, self);
    HG_CHECK(index.dtype() != kBool,
             "index_put: index {} is a bool mask; expected int64 or int32 indices (turn masks "
             "into indices with nonzero first)",
             i);
    check_index_dtype(index, "index_put", /*int32_allowed=*/true);
    B = i == 0 ? index.sizes()
               : broadcast_for("index_put", B, fmt::format("indices 0..{}", i - 1), index.sizes(),
                               fmt::format("index {}", i));
  }
  Shape indexed = B;
  for (int64_t k = K; k < self.dim(); ++k) indexed.push_back(self.size(k));
  HG_CHECK(broadcasts_to(values.sizes(), indexed),
           "index_put: values of shape {} cannot be broadcast to the indexed shape {} (indices of "
           "shape {}, then self's sizes after dim {})",
           values.sizes(), indexed, B, K - 1);
  return {std::move(B), std::move(indexed)};
}

void check_argsort(const Tensor& x, int64_t dim) {
  HG_CHECK(x.defined(), "argsort: expected a defined tensor, got an undefined one");
  wrap_dim(dim, x.dim(), "argsort");
}

void check_one_hot(const Tensor& x, int64_t num_classes, DeviceType backend) {
  check_tensor(x, "one_hot", "input", backend);
  HG_CHECK(x.dtype() == kInt64, "one_hot: expected an int64 tensor of class indices, got {}",
           x.dtype());
  HG_CHECK(num_classes >= -1,
           "one_hot: expected num_classes >= 0, or -1 to infer it, got num_classes = {}",
           num_classes);
  HG_CHECK(num_classes != -1 || x.numel() > 0,
           "one_hot: cannot infer num_classes from an empty tensor (shape {}); pass it", x.sizes());
}

void one_hot_class_error(int64_t c, int64_t dim, int64_t num_classes) {
  HG_ERROR(
      "one_hot: class index {} is out of range for the new last dim {} of size num_classes = {}", c,
      dim, num_classes);
}

// ---- where, masked_fill ----------------------------------------------------------------------

Shape where_shape(const Tensor& condition, const Tensor& a, const Tensor& b) {
  HG_CHECK(condition.dtype() == kBool, "where: expected a condition of dtype bool, got {}",
           condition.dtype());
  check_same_dtype(b, a.dtype(), "where", "b", "a");
  const Shape ab = broadcast_for("where", a.sizes(), "a", b.sizes(), "b");
  return broadcast_for("where", condition.sizes(), "the condition", ab, "a and b");
}

Shape masked_fill_shape(const Tensor& x, const Tensor& mask) {
  HG_CHECK(mask.dtype() == kBool, "masked_fill: expected a mask of dtype bool, got {}",
           mask.dtype());
  return broadcast_for("masked_fill", x.sizes(), "the input", mask.sizes(), "the mask");
}

}  // namespace hg::kernel::index_checks
