// CUDA indexing ops (index.h): the checks of cpu/index.cpp on the host, the work on the device
// (index.cu). Index values are checked by the kernels (NOTE [Index checks on the device] in
// index.h), and accumulation is sorted, never atomic (NOTE [Sorted accumulation on CUDA] in
// index_launch.h).
//
// Shapes in comments: along the dim an op works on, a tensor is viewed as [O, S, I] (outer,
// size at dim, inner); N indices; M index tuples of index_put, each addressing a row of R
// elements among P rows; C classes of one_hot.
#include "halfgrad/cuda/index.h"

#include <algorithm>
#include <array>
#include <string>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/index_launch.h"
#include "halfgrad/cuda/reduce.h"
#include "halfgrad/cuda/stream.h"

namespace hg::cuda {

namespace {

using detail::DeviceError;
using detail::Walk;

// ---- helpers -------------------------------------------------------------------------------

int64_t product(const Shape& sizes, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= sizes[d];
  return n;
}

char* bytes(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

TensorOptions options_on(DType dtype, Device device) { return {.dtype = dtype, .device = device}; }

// A 0-d tensor as the 1-D tensor of size 1 it stands for (as in cpu/index.cpp).
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.unsqueeze(0) : t; }

// Defined, on a CUDA device, and on `device` (that of the op's first tensor) when given.
void check_tensor(const Tensor& t, const char* op, const char* what,
                  const Tensor& like = Tensor()) {
  HG_CHECK(t.defined(), "{}: expected a defined {}, got an undefined tensor", op, what);
  HG_CHECK(t.is_cuda(), "{}: expected {} on a CUDA device, got a tensor on {}", op, what,
           t.device());
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

// The broadcast shape of a and b, or an error that names the op and both operands.
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

// A walk over `sizes` with one stride list per operand (each of sizes' length).
Walk make_walk(const char* op, const Shape& sizes, std::initializer_list<Shape> strides) {
  std::array<const int64_t*, detail::kMaxWalkOperands> lists{};
  int operands = 0;
  for (const Shape& s : strides) lists[size_t(operands++)] = s.data();
  Walk walk;
  HG_CHECK(detail::build_walk(walk, int(sizes.size()), sizes.data(), operands, lists.data()),
           "{}: expected at most {} dims on CUDA once dims of size 1 are dropped and dims every "
           "operand walks as one are merged, got shape {}",
           op, detail::kMaxDims, sizes);
  return walk;
}

// dst = src elementwise: same dtype and shape, any strides, no overlap.
void copy_into(const Tensor& dst, const Tensor& src, cudaStream_t stream, const char* op) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous() && src.is_contiguous()) {
    const int64_t n = int64_t(dst.nbytes());
    HG_CUDA_CHECK(detail::launch_copy_rows(dst.data_ptr(), n, src.data_ptr(), n, n, 1, stream), op);
    return;
  }
  const Walk walk = make_walk(op, dst.sizes(), {dst.strides(), src.strides()});
  HG_CUDA_CHECK(
      detail::launch_copy(walk, dst.data_ptr(), src.data_ptr(), int(dst.element_size()), stream),
      op);
}

// A new contiguous tensor with t's values (t may be an expanded view).
Tensor dense_copy(const Tensor& t, cudaStream_t stream, const char* op) {
  Tensor out = empty(t.sizes(), t.options());
  copy_into(out, t, stream, op);
  return out;
}

Tensor contiguous_on_stream(const Tensor& t, cudaStream_t stream, const char* op) {
  return t.is_contiguous() ? t : dense_copy(t, stream, op);
}

// Keys and values of n contributions (NOTE [Sorted accumulation on CUDA]).
struct Pairs {
  Tensor keys;    // uint64 stored in an int64 tensor
  Tensor values;  // int64
  uint64_t* key_data() const { return reinterpret_cast<uint64_t*>(keys.data_ptr()); }
  int64_t* value_data() const { return static_cast<int64_t*>(values.data_ptr()); }
};

Pairs make_pairs(int64_t n, Device device) {
  return {empty({n}, options_on(kInt64, device)), empty({n}, options_on(kInt64, device))};
}

// The pairs sorted by key, stably; keys are at most sentinel.
Pairs sorted(const Pairs& pairs, uint64_t sentinel, Device device, cudaStream_t stream,
             const char* op) {
  const int64_t n = pairs.keys.numel();
  const int end_bit = detail::key_bits(sentinel);
  size_t temp_bytes = 0;
  HG_CUDA_CHECK(detail::sort_pairs_temp_bytes(n, end_bit, &temp_bytes), op);
  // The scratch is freed when this returns, while the sort may still run: the caching
  // allocator hands it out again only to work ordered after it on this stream.
  const Tensor temp =
      empty({std::max<int64_t>(1, int64_t((temp_bytes + 7) / 8))}, options_on(kInt64, device));
  Pairs out = make_pairs(n, device);
  HG_CUDA_CHECK(
      detail::launch_sort_pairs(temp.data_ptr(), temp_bytes, pairs.key_data(), out.key_data(),
                                pairs.value_data(), out.value_data(), n, end_bit, stream),
      op);
  return out;
}

// The walk of a 1-D (or 0-d) index of N values as contributions: value = n.
Walk index_vector_walk(const Tensor& index, const char* op) {
  const int64_t stride = index.dim() == 0 ? 0 : index.stride(0);
  return make_walk(op, {index.numel()}, {{stride}, {0}, {1}});
}

// Writes out [O, S_total, I] (contiguous) from tensors that share every size but the one at
// dim d, one after the other along d.
void cat_into(const Tensor& out, std::span<const Tensor> parts, int64_t d, cudaStream_t stream,
              const char* op) {
  const int64_t O = product(out.sizes(), 0, size_t(d));
  const int64_t inner_bytes =
      product(out.sizes(), size_t(d) + 1, out.sizes().size()) * int64_t(out.element_size());
  int64_t offset = 0;
  for (const Tensor& t : parts) {
    const int64_t size = t.size(d);
    if (t.numel() > 0) {
      if (t.is_contiguous()) {  // O rows of size I bytes each side
        HG_CUDA_CHECK(detail::launch_copy_rows(bytes(out) + offset * inner_bytes,
                                               out.size(d) * inner_bytes, t.data_ptr(),
                                               size * inner_bytes, size * inner_bytes, O, stream),
                      op);
      } else {
        copy_into(out.narrow(d, offset, size), t, stream, op);
      }
    }
    offset += size;
  }
}

}  // namespace

// ---- cat, stack ----------------------------------------------------------------------------

Tensor cat(std::span<const Tensor> tensors, int64_t dim) {
  HG_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors, got an empty one");
  for (size_t i = 0; i < tensors.size(); ++i) check_tensor(tensors[i], "cat", "tensor", tensors[0]);
  const DType dtype = tensors[0].dtype();
  const Device device = tensors[0].device();
  for (size_t i = 1; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].dtype() == dtype,
             "cat: expected every tensor to have dtype {} (that of tensor 0), got {} for tensor "
             "{}; the op layer promotes before calling this kernel",
             dtype, tensors[i].dtype(), i);
  }
  // PyTorch's legacy rule: 1-D tensors of shape [0] take no part in the shape checks.
  const auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; };
  int64_t first = -1;
  for (size_t i = 0; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].dim() > 0,
             "cat: tensor {} is 0-d; expected tensors with at least 1 dim (unsqueeze 0-d tensors "
             "first)",
             i);
    if (first < 0 && !skipped(tensors[i])) first = int64_t(i);
  }
  if (first < 0) return empty({0}, options_on(dtype, device));

  const Shape& ref = tensors[first].sizes();
  const int64_t d = wrap_dim(dim, int64_t(ref.size()), "cat");
  Shape out_sizes = ref;
  out_sizes[d] = 0;
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (skipped(t)) continue;
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
    parts.push_back(t);
  }
  Tensor out = empty(out_sizes, options_on(dtype, device));
  if (out.numel() == 0) return out;
  DeviceGuard guard(device.index);
  cat_into(out, parts, d, current_stream(), "cat");
  return out;
}

Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  HG_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors, got an empty one");
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(tensors[i], "stack", "tensor", tensors[0]);
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
  Tensor out = empty(out_sizes, ref.options());
  if (out.numel() == 0) return out;
  // Each tensor is a slice of size 1 at d: a cat of the tensors unsqueezed there.
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d));
  DeviceGuard guard(ref.device().index);
  cat_into(out, parts, d, current_stream(), "stack");
  return out;
}

// ---- gather, scatter_add -------------------------------------------------------------------

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_tensor(x, "gather", "input");
  check_tensor(index, "gather", "index", x);
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

  Tensor out = empty(index.sizes(), x.options());
  if (out.numel() == 0) return out;
  const Tensor out1 = at_least_1d(out);
  Shape x_strides = x1.strides();
  const int64_t dim_stride = x_strides[d];
  x_strides[d] = 0;
  DeviceGuard guard(x.device().index);
  const Walk walk =
      make_walk("gather", index1.sizes(), {out1.strides(), x_strides, index1.strides()});
  HG_CUDA_CHECK(detail::launch_gather(walk, out1.data_ptr(), x1.data_ptr(), index1.data_ptr(),
                                      /*index_int32=*/false, int(x.element_size()), dim_stride,
                                      x1.size(d), detail::device_error_slot(), DeviceError::Gather,
                                      int32_t(d), current_stream()),
                "gather");
  return out;
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  check_tensor(self, "scatter_add", "self");
  check_tensor(index, "scatter_add", "index", self);
  check_tensor(src, "scatter_add", "src", self);
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

  DeviceGuard guard(self.device().index);
  const cudaStream_t stream = current_stream();
  Tensor out = dense_copy(self, stream, "scatter_add");
  const int64_t n = index.numel();
  if (n == 0) return out;
  // Contribution p adds src[p] to out[p with coordinate d replaced by index[p]]: key = that
  // element's offset in out, value = src[p]'s offset.
  const Tensor out1 = at_least_1d(out);
  Shape base_strides = out1.strides();
  const int64_t dim_step = base_strides[d];
  base_strides[d] = 0;
  const Walk walk =
      make_walk("scatter_add", index1.sizes(), {index1.strides(), base_strides, src1.strides()});
  const uint64_t sentinel = uint64_t(out.numel());
  Pairs pairs = make_pairs(n, self.device());
  HG_CUDA_CHECK(detail::launch_scatter_keys(
                    walk, index1.data_ptr(), /*index_int32=*/false, dim_step, self1.size(d),
                    /*has_skip=*/false, 0, sentinel, pairs.key_data(), pairs.value_data(),
                    detail::device_error_slot(), DeviceError::ScatterAdd, int32_t(d), stream),
                "scatter_add");
  const Pairs order = sorted(pairs, sentinel, self.device(), stream, "scatter_add");
  HG_CUDA_CHECK(detail::launch_segment_rows(self.dtype(), out.data_ptr(), src1.data_ptr(),
                                            order.key_data(), order.value_data(), n, sentinel,
                                            /*O=*/1, /*S=*/out.numel(), /*R=*/1,
                                            /*rows_o_stride=*/0, /*accumulate=*/true, stream),
                "scatter_add");
  return out;
}

// ---- index_select, index_add ---------------------------------------------------------------

namespace {

// The checks index_select and index_add share: a 1-D or 0-d integer index.
void check_index_vector(const Tensor& index, const char* op, const Tensor& like) {
  check_tensor(index, op, "index", like);
  check_index_dtype(index, op, /*int32_allowed=*/true);
  HG_CHECK(index.dim() <= 1, "{}: expected a 1-D or 0-d index, got a {}-D index of shape {}", op,
           index.dim(), index.sizes());
}

// Checks the N values of a 1-D or 0-d index against [0, bound) on the device, nothing else.
void check_index_vector_values(const Tensor& index, int64_t bound, int64_t d, DeviceError code,
                               cudaStream_t stream, const char* op) {
  if (index.numel() == 0) return;
  HG_CUDA_CHECK(detail::launch_scatter_keys(index_vector_walk(index, op), index.data_ptr(),
                                            index.dtype() == kInt32, 1, bound, false, 0,
                                            uint64_t(bound), nullptr, nullptr,
                                            detail::device_error_slot(), code, int32_t(d), stream),
                op);
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_tensor(x, "index_select", "input");
  check_index_vector(index, "index_select", x);
  const Tensor x1 = at_least_1d(x);
  const int64_t d = wrap_dim(dim, x1.dim(), "index_select");
  const int64_t N = index.numel();
  HG_CHECK(x.dim() > 0 || N == 1,
           "index_select: a 0-d input takes exactly one index, got {} (index shape {})", N,
           index.sizes());

  Shape out_sizes = x.sizes();
  if (x.dim() > 0) out_sizes[d] = N;
  Tensor out = empty(out_sizes, x.options());
  DeviceGuard guard(x.device().index);
  const cudaStream_t stream = current_stream();
  const int64_t S = x1.size(d);
  if (out.numel() == 0) {  // nothing to copy; the indices are still checked, as on the CPU
    check_index_vector_values(index, S, d, DeviceError::IndexSelect, stream, "index_select");
    return out;
  }
  const Tensor out1 = at_least_1d(out);
  const int64_t index_stride = index.dim() == 0 ? 0 : index.stride(0);
  const bool int32 = index.dtype() == kInt32;
  if (x1.is_contiguous()) {  // x [O, S, I] -> out [O, N, I]: whole rows, 16-byte words
    const int64_t O = product(x1.sizes(), 0, size_t(d));
    const int64_t row_bytes =
        product(x1.sizes(), size_t(d) + 1, x1.sizes().size()) * int64_t(x.element_size());
    HG_CUDA_CHECK(
        detail::launch_gather_rows(out.data_ptr(), x1.data_ptr(), index.data_ptr(), int32,
                                   index_stride, O, N, S, row_bytes, detail::device_error_slot(),
                                   DeviceError::IndexSelect, int32_t(d), stream),
        "index_select");
    return out;
  }
  // Any strides: the gather walk over out with the index broadcast along every other dim.
  Shape x_strides = x1.strides();
  const int64_t dim_stride = x_strides[d];
  x_strides[d] = 0;
  Shape index_strides(size_t(out1.dim()), 0);
  index_strides[d] = index_stride;
  const Walk walk =
      make_walk("index_select", out1.sizes(), {out1.strides(), x_strides, index_strides});
  HG_CUDA_CHECK(
      detail::launch_gather(walk, out1.data_ptr(), x1.data_ptr(), index.data_ptr(), int32,
                            int(x.element_size()), dim_stride, S, detail::device_error_slot(),
                            DeviceError::IndexSelect, int32_t(d), stream),
      "index_select");
  return out;
}

Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  check_tensor(self, "index_add", "self");
  check_tensor(source, "index_add", "source", self);
  check_index_vector(index, "index_add", self);
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

  DeviceGuard guard(self.device().index);
  const cudaStream_t stream = current_stream();
  Tensor out = dense_copy(self, stream, "index_add");
  const int64_t S = self1.size(d);
  if (source.numel() == 0) {
    check_index_vector_values(index, S, d, DeviceError::IndexAdd, stream, "index_add");
    return out;
  }
  // out [O, S, I] += source [O, N, I] rows: key = index[n], value = n.
  const int64_t O = product(self1.sizes(), 0, size_t(d));
  const int64_t I = product(self1.sizes(), size_t(d) + 1, self1.sizes().size());
  const uint64_t sentinel = uint64_t(S);
  Pairs pairs = make_pairs(N, self.device());
  HG_CUDA_CHECK(
      detail::launch_scatter_keys(index_vector_walk(index, "index_add"), index.data_ptr(),
                                  index.dtype() == kInt32, 1, S, false, 0, sentinel,
                                  pairs.key_data(), pairs.value_data(), detail::device_error_slot(),
                                  DeviceError::IndexAdd, int32_t(d), stream),
      "index_add");
  const Pairs order = sorted(pairs, sentinel, self.device(), stream, "index_add");
  const Tensor rows = contiguous_on_stream(source1, stream, "index_add");
  HG_CUDA_CHECK(
      detail::launch_segment_rows(self.dtype(), out.data_ptr(), rows.data_ptr(), order.key_data(),
                                  order.value_data(), N, sentinel, O, S, I, /*rows_o_stride=*/N * I,
                                  /*accumulate=*/true, stream),
      "index_add");
  return out;
}

// ---- index_put -----------------------------------------------------------------------------

Tensor index_put(const Tensor& self, std::span<const Tensor> indices, const Tensor& values,
                 bool accumulate) {
  check_tensor(self, "index_put", "self");
  check_tensor(values, "index_put", "values", self);
  check_same_dtype(values, self.dtype(), "index_put", "values", "self");
  const int64_t K = int64_t(indices.size());
  HG_CHECK(K >= 1 && K <= self.dim(),
           "index_put: expected between 1 and self.dim() = {} index tensors (self shape {}), got "
           "{}",
           self.dim(), self.sizes(), K);
  Shape B;
  for (int64_t i = 0; i < K; ++i) {
    const Tensor& index = indices[i];
    check_tensor(index, "index_put", "index", self);
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

  DeviceGuard guard(self.device().index);
  const cudaStream_t stream = current_stream();
  Tensor out = dense_copy(self, stream, "index_put");
  const int64_t M = shape_numel(B);
  if (M == 0) return out;
  const int64_t P = product(self.sizes(), 0, size_t(K));
  const int64_t R = product(self.sizes(), size_t(K), self.sizes().size());

  // The index tuples over B (size-1 dims dropped); index k read through its broadcast strides.
  detail::IndexTuples tuples;
  tuples.count = int32_t(K);
  tuples.numel = M;
  std::vector<Tensor> spread;
  for (int64_t k = 0; k < K; ++k) {
    spread.push_back(indices[k].expand(B));
    tuples.data[k] = indices[k].data_ptr();
    tuples.int32[k] = indices[k].dtype() == kInt32;
    tuples.bounds[k] = self.size(k);
  }
  for (size_t b = 0; b < B.size(); ++b) {
    if (B[b] == 1) continue;
    HG_CHECK(tuples.dim < detail::kMaxDims,
             "index_put: expected indices that broadcast to at most {} dims of size other than 1 "
             "on CUDA, got shape {}",
             detail::kMaxDims, B);
    tuples.sizes[tuples.dim] = B[b];
    for (int64_t k = 0; k < K; ++k)
      tuples.strides[k][tuples.dim] = spread[size_t(k)].stride(int64_t(b));
    ++tuples.dim;
  }
  const uint64_t sentinel = uint64_t(P);
  Pairs pairs = make_pairs(M, self.device());
  HG_CUDA_CHECK(
      detail::launch_index_put_keys(tuples, sentinel, pairs.key_data(), pairs.value_data(),
                                    detail::device_error_slot(), stream),
      "index_put");
  if (R == 0) return out;
  // The values of every tuple's row, [M, R] contiguous.
  const Tensor rows = dense_copy(values.expand(indexed), stream, "index_put");
  const Pairs order = sorted(pairs, sentinel, self.device(), stream, "index_put");
  HG_CUDA_CHECK(
      detail::launch_segment_rows(self.dtype(), out.data_ptr(), rows.data_ptr(), order.key_data(),
                                  order.value_data(), M, sentinel,
                                  /*O=*/1, /*S=*/P, R, /*rows_o_stride=*/0, accumulate, stream),
      "index_put");
  return out;
}

// ---- one_hot -------------------------------------------------------------------------------

Tensor one_hot(const Tensor& x, int64_t num_classes) {
  check_tensor(x, "one_hot", "input");
  HG_CHECK(x.dtype() == kInt64, "one_hot: expected an int64 tensor of class indices, got {}",
           x.dtype());
  HG_CHECK(num_classes >= -1,
           "one_hot: expected num_classes >= 0, or -1 to infer it, got num_classes = {}",
           num_classes);
  DeviceGuard guard(x.device().index);
  const int64_t M = x.numel();
  if (num_classes == -1) {
    HG_CHECK(M > 0, "one_hot: cannot infer num_classes from an empty tensor (shape {}); pass it",
             x.sizes());
    // The output's shape depends on the data: the host waits for max(x) here, as PyTorch's
    // one_hot does on CUDA. Pass num_classes to avoid the sync.
    const int64_t largest =
        reduce(kernel::Reduction::Amax, x, {}, /*keepdim=*/false, kInt64).item<int64_t>();
    if (largest < 0) {  // every class is negative: name the first, as the CPU kernel does
      Tensor first = x;
      while (first.dim() > 0) first = first.select(0, 0);
      HG_ERROR(
          "one_hot: class index {} is out of range for the new last dim {} of size num_classes "
          "= {}",
          first.item<int64_t>(), x.dim(), largest + 1);
    }
    num_classes = largest + 1;
  }
  Shape out_sizes = x.sizes();
  out_sizes.push_back(num_classes);
  Tensor out = empty(out_sizes, options_on(kInt64, x.device()));
  if (M == 0) return out;
  const Walk walk = make_walk("one_hot", x.sizes(), {x.strides()});
  HG_CUDA_CHECK(
      detail::launch_one_hot(walk, static_cast<const int64_t*>(x.data_ptr()), M, num_classes,
                             static_cast<int64_t*>(out.data_ptr()), detail::device_error_slot(),
                             int32_t(x.dim()), current_stream()),
      "one_hot");
  return out;
}

}  // namespace hg::cuda
