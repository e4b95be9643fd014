// CUDA indexing ops, the table cuda::index_kernels (kernel/index.h): the checks of
// kernel/index_checks.h on the host, the work on the device (index.cu). Index values are checked
// by the kernels (NOTE [Index checks on the device] below), and accumulation is sorted, never
// atomic (NOTE [Sorted accumulation on CUDA] in index_launch.h).
//
// NOTE [Index checks on the device] The CPU kernels check every index before writing. Here a
// check on the host would need the indices on the host (a sync per op), so the kernels check
// on the device: an index out of range sets a device flag and the kernel writes nothing for
// it; the flag is read, and turned into hg::Error naming the op, when the host next waits
// (item(), to(kCPU), synchronize()), like PyTorch's device-side asserts but recoverable.
//
// Shapes in comments: along the dim an op works on, a tensor is viewed as [O, S, I] (outer,
// size at dim, inner); N indices; M index tuples of index_put, each addressing a row of R
// elements among P rows; C classes of one_hot.
#include <algorithm>
#include <span>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/index_launch.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/index.h"
#include "halfgrad/kernel/index_checks.h"

namespace hg::cuda {

namespace {

using detail::DeviceError;
using detail::make_walk;
using detail::Walk;
using kernel::index_checks::at_least_1d;
using kernel::index_checks::product;

// ---- helpers -------------------------------------------------------------------------------

char* bytes(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

TensorOptions options_on(DType dtype, Device device) { return {.dtype = dtype, .device = device}; }

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

// ---- cat, stack ----------------------------------------------------------------------------

Tensor cat(std::span<const Tensor> tensors, int64_t dim) {
  const auto [dtype, d, out_sizes] = kernel::index_checks::check_cat(tensors, dim, kCUDA);
  const Device device = tensors[0].device();
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) {
    if (!kernel::index_checks::cat_skips(t)) parts.push_back(t);
  }
  Tensor out = empty(out_sizes, options_on(dtype, device));
  if (out.numel() == 0) return out;
  DeviceGuard guard(device.index);
  cat_into(out, parts, d, current_stream(), "cat");
  return out;
}

Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  const auto [d, out_sizes] = kernel::index_checks::check_stack(tensors, dim, kCUDA);
  const Tensor& ref = tensors[0];
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
  const int64_t d = kernel::index_checks::check_gather(x, dim, index, kCUDA);
  const Tensor x1 = at_least_1d(x), index1 = at_least_1d(index);

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
  const int64_t d = kernel::index_checks::check_scatter_add(self, dim, index, src, kCUDA);
  const Tensor self1 = at_least_1d(self), index1 = at_least_1d(index), src1 = at_least_1d(src);

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

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const auto [d, out_sizes] = kernel::index_checks::check_index_select(x, dim, index, kCUDA);
  const Tensor x1 = at_least_1d(x);
  const int64_t N = index.numel();
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
  const int64_t d = kernel::index_checks::check_index_add(self, dim, index, source, kCUDA);
  const Tensor self1 = at_least_1d(self), source1 = at_least_1d(source);
  const int64_t N = index.numel();

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
  const auto [B, indexed] = kernel::index_checks::check_index_put(self, indices, values, kCUDA);
  const int64_t K = int64_t(indices.size());
  HG_CHECK(K <= detail::kMaxDims,
           "index_put: expected at most {} index tensors on CUDA, got {} (for self of shape {})",
           detail::kMaxDims, K, self.sizes());

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
  kernel::index_checks::check_one_hot(x, num_classes, kCUDA);
  DeviceGuard guard(x.device().index);
  const int64_t M = x.numel();
  if (num_classes == -1) {
    // The output's shape depends on the data: the host waits for max(x) here, as PyTorch's
    // one_hot does on CUDA. Pass num_classes to avoid the sync.
    const int64_t largest =
        reduce_kernels.reduce(kernel::Reduction::Amax, x, {}, /*keepdim=*/false, kInt64, /*p=*/2.0)
            .item<int64_t>();
    if (largest < 0) {  // every class is negative: name the first, as the CPU kernel does
      Tensor first = x;
      while (first.dim() > 0) first = first.select(0, 0);
      kernel::index_checks::one_hot_class_error(first.item<int64_t>(), x.dim(), largest + 1);
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

// ---- argsort ------------------------------------------------------------------------------
//
// NOTE [Sorting rows on CUDA] The rows along dim are sorted by two stable radix sorts of the
// whole tensor, least significant first: the (position, sort key) pairs by key (NOTE [Sort
// keys] in kernel/formulas.h), then the sorted positions by their row. The second sort keeps
// the first's order within a row, so each row ends in its own sorted order; equal elements
// keep their order (the sort is stable, as torch's stable=True). Two passes over every element
// whatever the row length, through the radix sort the sorted accumulation already uses.

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  kernel::index_checks::check_argsort(x, dim);
  DeviceGuard guard(x.device().index);
  if (x.dim() == 0) return zeros({}, options_on(kInt64, x.device()));
  const int64_t d = wrap_dim(dim, x.dim(), "argsort");
  const cudaStream_t stream = current_stream();
  // The rows contiguous: dim d last.
  const Tensor rows = contiguous_on_stream(x.transpose(d, -1), stream, "argsort");
  const int64_t count = rows.numel(), length = x.size(d);
  Tensor out = empty(rows.sizes(), options_on(kInt64, x.device()));
  if (count == 0) return out.transpose(d, -1).contiguous();
  Pairs by_value = make_pairs(count, x.device());
  HG_CUDA_CHECK(detail::launch_sort_keys(x.dtype(), rows.data_ptr(), count, descending,
                                         by_value.key_data(), by_value.value_data(), stream),
                "argsort");
  const uint64_t widest_key = element_size(x.dtype()) == 8
                                  ? ~uint64_t(0)
                                  : (uint64_t(1) << (8 * element_size(x.dtype()))) - 1;
  const Pairs value_order = sorted(by_value, widest_key, x.device(), stream, "argsort");
  Pairs by_row = {empty({count}, options_on(kInt64, x.device())), value_order.values};
  HG_CUDA_CHECK(
      detail::launch_row_keys(value_order.value_data(), count, length, by_row.key_data(), stream),
      "argsort");
  const Pairs row_order =
      sorted(by_row, uint64_t(count / length - 1), x.device(), stream, "argsort");
  HG_CUDA_CHECK(detail::launch_positions_in_row(row_order.value_data(), count, length,
                                                static_cast<int64_t*>(out.data_ptr()), stream),
                "argsort");
  return out.transpose(d, -1).contiguous();
}

}  // namespace

const kernel::IndexKernels index_kernels = HG_INDEX_KERNELS;

}  // namespace hg::cuda
