// Host side of the CUDA elementwise kernels (the table cuda::elementwise_kernels of
// kernel/elementwise.h) and of core's copies and fills on CUDA (elementwise.h): the checks and
// errors of the CPU kernels (cpu/elementwise.cpp, kernel/index_checks.h, core/copy.cpp,
// core/random.cpp), the output,
// the operand description of NOTE [Elementwise iteration] (elementwise_launch.h), and one
// launch on the current stream. Nothing here waits for the GPU or reads its memory.
#include "halfgrad/cuda/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/scalar_value.h"
#include "halfgrad/core/small_vector.h"
#include "halfgrad/core/stochastic_rounding.h"
#include "halfgrad/cuda/elementwise_launch.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/stochastic_rounding_launch.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/elementwise.h"
#include "halfgrad/kernel/formulas.h"
#include "halfgrad/kernel/index_checks.h"

namespace hg::cuda {

namespace {

using detail::ElementwiseArgs;
using detail::kMaxDims;
using detail::kMaxOperands;
using kernel::Binary;
using kernel::Compare;
using kernel::Unary;

// ---- checks ------------------------------------------------------------------------------

// Throws unless t is defined and on `device` (the CUDA device of the op's first operand).
void check_on(const Tensor& t, Device device, const char* op, const char* what) {
  detail::check_cuda_tensor(t, op, what);
  HG_CHECK(t.device() == device,
           "{}: expected {} on {}, the device of the other operands, got a tensor on {}", op, what,
           device, t.device());
}

// True when some element of t is reached through two indices (core/copy.cpp).
bool has_internal_overlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.strides()[d] == 0 && t.sizes()[d] > 1) return true;
  }
  return false;
}

// The bytes of `value` converted to dtype as fill_ converts it (core/scalar_value.h).
uint64_t scalar_bits(Scalar value, DType dtype, const char* op) {
  return visit_any_dtype(dtype, [&](auto tag) {  // float8 included: zeros and full make them
    using T = typename decltype(tag)::type;
    const T converted = scalar_value_as<T>(value, op);
    uint64_t bits = 0;
    std::memcpy(&bits, &converted, sizeof(T));  // the low bytes on a little-endian host
    return bits;
  });
}

// ---- operands ----------------------------------------------------------------------------

// NOTE [Elementwise iteration] (elementwise_launch.h): the loop over `shape` for operands
// (the output first), each broadcast to shape. The caller has checked the shapes broadcast
// and that shape has elements.
ElementwiseArgs make_elementwise_args(const Shape& shape,
                                      std::initializer_list<const Tensor*> operands,
                                      const char* op) {
  struct Dim {
    int64_t size;
    int64_t strides[kMaxOperands];
  };
  ElementwiseArgs args;
  const int count = int(operands.size());
  HG_CHECK(count >= 1 && count <= kMaxOperands, "{}: expected 1 to {} operands, got {}", op,
           kMaxOperands, count);
  args.operands = count;
  args.numel = shape_numel(shape);
  {
    int k = 0;
    for (const Tensor* t : operands) args.data[k++] = t->data_ptr();
  }

  // 1. The dims that move an offset (size > 1), each operand's strides aligned to the right.
  const int64_t ndim = int64_t(shape.size());
  for (const Tensor* t : operands) {
    HG_CHECK(t->dim() <= ndim, "{}: an operand of shape {} has more dims than the shape {}", op,
             t->sizes(), shape);
  }
  SmallVector<Dim, kMaxDims> dims;  // outermost first
  for (int64_t d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    Dim dim{shape[d], {}};
    int k = 0;
    for (const Tensor* t : operands) {
      const int64_t lead = ndim - t->dim();
      if (d >= lead) {
        const int64_t size = t->sizes()[d - lead];
        HG_CHECK(size == shape[d] || size == 1,
                 "{}: operand {} of shape {} does not broadcast to the shape {}", op, k, t->sizes(),
                 shape);
        dim.strides[k] = size == 1 ? 0 : t->strides()[d - lead];
      }
      ++k;
    }
    dims.push_back(dim);
  }

  // 2. The output's fastest dim innermost: a stable insertion sort by the output's strides,
  //    largest first (a contiguous output keeps its order; there are only a few dims).
  for (size_t i = 1; i < dims.size(); ++i) {
    const Dim moving = dims[i];
    size_t j = i;
    for (; j > 0 && std::abs(dims[j - 1].strides[0]) < std::abs(moving.strides[0]); --j) {
      dims[j] = dims[j - 1];
    }
    dims[j] = moving;
  }

  // 3. Merge each dim into its inner neighbour where every operand steps over both evenly.
  SmallVector<Dim, kMaxDims> merged;  // innermost first
  for (size_t i = dims.size(); i-- > 0;) {
    const Dim& outer = dims[i];
    if (!merged.empty()) {
      Dim& inner = merged.back();
      bool mergeable = true;
      for (int k = 0; k < count; ++k) {
        mergeable = mergeable && outer.strides[k] == inner.strides[k] * inner.size;
      }
      if (mergeable) {
        inner.size *= outer.size;
        continue;
      }
    }
    merged.push_back(outer);
  }
  HG_CHECK(merged.size() <= size_t(kMaxDims),
           "{}: expected at most {} dims once contiguous dims are merged, got {} (shape {}); "
           "make an operand contiguous first",
           op, kMaxDims, merged.size(), shape);

  // 4. The loop's layout, outermost dim first.
  args.dim = int32_t(merged.size());
  bool contiguous = merged.size() <= 1;
  uint32_t scalars = 0;
  int64_t max_offset[kMaxOperands] = {};
  for (int32_t d = 0; d < args.dim; ++d) {
    const Dim& dim = merged[merged.size() - 1 - size_t(d)];
    args.sizes[d] = dim.size;
    for (int k = 0; k < count; ++k) {
      args.strides[k][d] = dim.strides[k];
      if (dim.strides[k] == 0 && k > 0) scalars |= 1u << k;  // an input broadcast from 0-d
      contiguous = contiguous && (dim.strides[k] == 1 || (dim.strides[k] == 0 && k > 0));
      max_offset[k] += (dim.size - 1) * std::abs(dim.strides[k]);
    }
  }
  args.contiguous = contiguous;
  args.scalars = contiguous ? scalars : 0;
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  args.index32 = args.numel <= kInt32Max;
  for (int k = 0; k < count; ++k) args.index32 = args.index32 && max_offset[k] <= kInt32Max;
  return args;
}

// t as dtype: t itself, or a new contiguous tensor on t's device (kernels compute in one
// dtype: NOTE [Which kernels are instantiated] in elementwise.cu).
Tensor as_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.sizes(), {.dtype = dtype, .device = t.device()});
  copy_elements(out, t);
  return out;
}

Tensor copy_of(const Tensor& t) {
  Tensor out = empty(t.sizes(), {.dtype = t.dtype(), .device = t.device()});
  copy_elements(out, t);
  return out;
}

// ---- random fills ------------------------------------------------------------------------

void check_random_destination(const Tensor& dst, const char* op) {
  detail::check_cuda_tensor(dst, op, "the destination");
  HG_CHECK(dst.is_contiguous(),
           "{}: expected a contiguous destination, got shape {} with strides {}", op, dst.sizes(),
           dst.strides());
}

// ---- elementwise ops ---------------------------------------------------------------------

Tensor unary(Unary op, const Tensor& x) {
  detail::check_cuda_tensor(x, "elementwise", "the input");
  const DType dtype = x.dtype();
  HG_CHECK(dtype != kBool, "elementwise: bool tensors are not supported here");
  HG_CHECK(is_floating_point(dtype) || kernel::unary_takes_integers(op),
           "elementwise: expected a floating tensor, got {}", dtype);
  DeviceGuard guard(x.device().index);
  Tensor out = empty(x.sizes(), {.dtype = dtype, .device = x.device()});
  if (out.numel() == 0) return out;
  const ElementwiseArgs args = make_elementwise_args(out.sizes(), {&out, &x}, "unary");
  HG_CUDA_CHECK(detail::launch_unary(op, dtype, args, current_stream()), "unary");
  return out;
}

Tensor binary(Binary op, const Tensor& a, const Tensor& b, DType dtype, double alpha) {
  detail::check_cuda_tensor(a, "binary", "a");
  check_on(b, a.device(), "binary", "b");
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes());
  HG_CHECK(dtype != kBool,
           "elementwise: arithmetic on bool tensors is not supported; convert them first");
  DeviceGuard guard(a.device().index);
  Tensor out = empty(shape, {.dtype = dtype, .device = a.device()});
  if (out.numel() == 0) return out;
  const Tensor x = as_dtype(a, dtype), y = as_dtype(b, dtype);
  const ElementwiseArgs args = make_elementwise_args(shape, {&out, &x, &y}, "binary");
  HG_CUDA_CHECK(detail::launch_binary(op, dtype, alpha, args, current_stream()), "binary");
  return out;
}

void binary_(Binary op, const Tensor& self, const Tensor& other, double alpha) {
  detail::check_cuda_tensor(self, "in-place op", "the tensor written to");
  check_on(other, self.device(), "in-place op", "the other operand");
  HG_CHECK(broadcasts_to(other.sizes(), self.sizes()),
           "in-place op: the other operand of shape {} cannot be broadcast to the shape {} of the "
           "tensor written to",
           other.sizes(), self.sizes());
  HG_CHECK(self.dtype() != kBool,
           "elementwise: arithmetic on bool tensors is not supported; convert them first");
  if (self.numel() > 0) {
    DeviceGuard guard(self.device().index);
    // Read `other` in full first when it shares memory with self (as the CPU kernel). self as
    // both output and input is safe: each element is read and written by one thread.
    Tensor y = as_dtype(other, self.dtype());
    if (y.shares_storage(self) && !y.is_same(self)) y = copy_of(y);
    const ElementwiseArgs args =
        make_elementwise_args(self.sizes(), {&self, &self, &y}, "in-place op");
    HG_CUDA_CHECK(detail::launch_binary(op, self.dtype(), alpha, args, current_stream()),
                  "in-place op");
  }
  self.bump_version();
}

Tensor compare(Compare op, const Tensor& a, const Tensor& b, DType dtype) {
  detail::check_cuda_tensor(a, "compare", "a");
  check_on(b, a.device(), "compare", "b");
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes());
  DeviceGuard guard(a.device().index);
  Tensor out = empty(shape, {.dtype = kBool, .device = a.device()});
  if (out.numel() == 0) return out;
  const Tensor x = as_dtype(a, dtype), y = as_dtype(b, dtype);
  const ElementwiseArgs args = make_elementwise_args(shape, {&out, &x, &y}, "compare");
  HG_CUDA_CHECK(detail::launch_compare(op, dtype, args, current_stream()), "compare");
  return out;
}

Tensor threshold_backward(const Tensor& grad, const Tensor& x, double threshold) {
  detail::check_cuda_tensor(grad, "threshold_backward", "the gradient");
  check_on(x, grad.device(), "threshold_backward", "the input");
  HG_CHECK(grad.sizes() == x.sizes() && grad.dtype() == x.dtype(),
           "threshold_backward: expected a gradient of the input's shape {} and dtype {}, got {} "
           "and {}",
           x.sizes(), x.dtype(), grad.sizes(), grad.dtype());
  HG_CHECK(x.dtype() != kBool, "threshold_backward: bool tensors are not supported");
  DeviceGuard guard(x.device().index);
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() == 0) return out;
  const ElementwiseArgs args =
      make_elementwise_args(out.sizes(), {&out, &grad, &x}, "threshold_backward");
  HG_CUDA_CHECK(detail::launch_threshold_backward(x.dtype(), threshold, args, current_stream()),
                "threshold_backward");
  return out;
}

Tensor clamp(const Tensor& x, std::optional<double> low, std::optional<double> high) {
  detail::check_cuda_tensor(x, "clamp", "the input");
  HG_CHECK(x.dtype() != kBool, "clamp: bool tensors are not supported");
  DeviceGuard guard(x.device().index);
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() == 0) return out;
  const ElementwiseArgs args = make_elementwise_args(out.sizes(), {&out, &x}, "clamp");
  HG_CUDA_CHECK(detail::launch_clamp(x.dtype(), low.has_value(), low.value_or(0.0),
                                     high.has_value(), high.value_or(0.0), args, current_stream()),
                "clamp");
  return out;
}

Tensor addc(bool divide, const Tensor& self, const Tensor& t1, const Tensor& t2, double value,
            DType dtype) {
  const char* const op = divide ? "addcdiv" : "addcmul";
  detail::check_cuda_tensor(self, op, "self");
  check_on(t1, self.device(), op, "tensor1");
  check_on(t2, self.device(), op, "tensor2");
  const Shape shape = broadcast_shapes(broadcast_shapes(self.sizes(), t1.sizes()), t2.sizes());
  HG_CHECK(dtype != kBool, "{}: bool tensors are not supported", op);
  DeviceGuard guard(self.device().index);
  Tensor out = empty(shape, {.dtype = dtype, .device = self.device()});
  if (out.numel() == 0) return out;
  const Tensor a = as_dtype(self, dtype), b = as_dtype(t1, dtype), c = as_dtype(t2, dtype);
  const ElementwiseArgs args = make_elementwise_args(shape, {&out, &a, &b, &c}, op);
  HG_CUDA_CHECK(detail::launch_addc(divide, dtype, value, args, current_stream()), op);
  return out;
}

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype) {
  return addc(/*divide=*/false, self, t1, t2, value, dtype);
}

Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype) {
  return addc(/*divide=*/true, self, t1, t2, value, dtype);
}

// ---- where, masked_fill ------------------------------------------------------------------

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  detail::check_cuda_tensor(a, "where", "a");
  check_on(condition, a.device(), "where", "condition");
  check_on(b, a.device(), "where", "b");
  const Shape shape = kernel::index_checks::where_shape(condition, a, b);
  DeviceGuard guard(a.device().index);
  Tensor out = empty(shape, {.dtype = a.dtype(), .device = a.device()});
  if (out.numel() == 0) return out;
  const ElementwiseArgs args = make_elementwise_args(shape, {&out, &condition, &a, &b}, "where");
  HG_CUDA_CHECK(detail::launch_where(a.element_size(), args, current_stream()), "where");
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  detail::check_cuda_tensor(x, "masked_fill", "input");
  check_on(mask, x.device(), "masked_fill", "mask");
  const Shape shape = kernel::index_checks::masked_fill_shape(x, mask);
  DeviceGuard guard(x.device().index);
  Tensor out = empty(shape, {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() == 0) return out;
  const uint64_t fill_bits = scalar_bits(value, x.dtype(), "masked_fill");
  const ElementwiseArgs args = make_elementwise_args(shape, {&out, &x, &mask}, "masked_fill");
  HG_CUDA_CHECK(detail::launch_masked_fill(x.element_size(), fill_bits, args, current_stream()),
                "masked_fill");
  return out;
}

}  // namespace

const kernel::ElementwiseKernels elementwise_kernels = HG_ELEMENTWISE_KERNELS;

// ---- copies and fills --------------------------------------------------------------------

namespace {

// True for the dtypes a float8 dtype converts to and from on CUDA.
bool converts_with_float8(DType dtype) {
  return dtype == kFloat32 || dtype == kFloat16 || dtype == kBFloat16;
}

}  // namespace

void copy_elements(const Tensor& dst, const Tensor& src, CastOptions options) {
  detail::check_cuda_tensor(dst, "copy_", "the destination");
  check_on(src, dst.device(), "copy_", "the source");
  HG_CHECK(src.sizes() == dst.sizes(),
           "copy_: expected a source of the destination's shape {} (expanded if needed), got {}",
           dst.sizes(), src.sizes());
  if (options.rounding == Rounding::Stochastic) {
    // core::to_dtype checked the dtypes and gives both dense. The draw reserves its blocks on
    // the host as the CPU cast does (NOTE [Stochastic rounding] in core/stochastic_rounding.h).
    HG_CHECK(dst.is_contiguous() && src.is_contiguous(),
             "to: the stochastic cast on CUDA expects contiguous tensors");
    const Generator::State draw = reserve_rounding_words(options.generator, dst.numel());
    if (dst.numel() == 0) return;
    DeviceGuard guard(dst.device().index);
    HG_CUDA_CHECK(detail::launch_stochastic_round(dst.dtype(), src.dtype(), dst.data_ptr(),
                                                  src.data_ptr(), dst.numel(), draw.seed,
                                                  draw.offset, options.saturate, current_stream()),
                  "to");
    return;
  }
  const bool float8_cast =
      dst.dtype() != src.dtype() && (is_float8(dst.dtype()) || is_float8(src.dtype()));
  if (float8_cast) {
    const DType other = is_float8(dst.dtype()) ? src.dtype() : dst.dtype();
    HG_CHECK(converts_with_float8(other),
             "copy_: on a CUDA device, a float8 dtype converts to and from float32, float16 and "
             "bfloat16 only, got {} to {}; convert through float32",
             dtype_name(src.dtype()), dtype_name(dst.dtype()));
  }
  HG_CHECK(!options.saturate || is_float8(dst.dtype()),
           "to: saturate applies to float8 destinations (float8_e4m3fn, float8_e5m2), got {}",
           dtype_name(dst.dtype()));
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst.device().index);
  const cudaStream_t stream = current_stream();
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    HG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                  cudaMemcpyDeviceToDevice, stream),
                  "copy_");
    return;
  }
  const ElementwiseArgs args = make_elementwise_args(dst.sizes(), {&dst, &src}, "copy_");
  // Both dense in one order (two .t()). Not a source of stride 0 (an expanded scalar: the walk
  // marks it in `scalars`), which holds one element for all of dst.
  if (args.contiguous && args.scalars == 0 && dst.dtype() == src.dtype()) {
    HG_CUDA_CHECK(
        cudaMemcpyAsync(args.data[0], args.data[1], dst.nbytes(), cudaMemcpyDeviceToDevice, stream),
        "copy_");
    return;
  }
  if (float8_cast) {
    HG_CUDA_CHECK(
        detail::launch_float8_copy(dst.dtype(), src.dtype(), options.saturate, args, stream),
        "copy_");
    return;
  }
  HG_CUDA_CHECK(detail::launch_copy(dst.dtype(), src.dtype(), args, stream), "copy_");
}

void fill(const Tensor& dst, Scalar value) {
  detail::check_cuda_tensor(dst, "fill_", "the tensor");
  HG_CHECK(dst.is_contiguous() || !has_internal_overlap(dst),
           "fill_: the tensor (shape {}, strides {}) has elements that share memory (an "
           "expanded tensor); clone() it before writing to it",
           dst.sizes(), dst.strides());
  const uint64_t bits = scalar_bits(value, dst.dtype(), "fill_");
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst.device().index);
  const cudaStream_t stream = current_stream();
  const ElementwiseArgs args = make_elementwise_args(dst.sizes(), {&dst}, "fill_");
  const size_t width = dst.element_size();
  if (args.contiguous) {
    // One byte repeated (zero, true, -1, ...): a memset.
    bool one_byte = true;
    for (size_t i = 1; i < width; ++i) {
      one_byte = one_byte && ((bits >> (8 * i)) & 0xFF) == (bits & 0xFF);
    }
    if (one_byte) {
      HG_CUDA_CHECK(cudaMemsetAsync(args.data[0], int(bits & 0xFF), dst.nbytes(), stream), "fill_");
      return;
    }
  }
  HG_CUDA_CHECK(detail::launch_fill(width, bits, args, stream), "fill_");
}

// NOTE [Random fills on CUDA] The checks are random.cpp's own: a CPU draw of zero elements
// runs every check on the bounds (same errors) and reserves no counter block. Then the draw
// reserves its blocks on the host, as the CPU draw does (the generator state is host memory:
// no wait), and a kernel computes each block's elements from (seed, first block) with the
// functions of core/random.h, so the CUDA and CPU draws are the same numbers.
void fill_uniform(const Tensor& dst, double low, double high, Generator& gen) {
  check_random_destination(dst, "uniform");
  random::fill_uniform(dst.dtype(), nullptr, 0, low, high, gen);
  const random::UniformRange range = random::uniform_range(dst.dtype(), low, high);
  const int64_t n = dst.numel();
  const Generator::State reserved = gen.reserve_with_seed(random::blocks_for(dst.dtype(), n));
  if (n == 0) return;
  DeviceGuard guard(dst.device().index);
  HG_CUDA_CHECK(
      detail::launch_fill_uniform(dst.dtype(), dst.data_ptr(), n, reserved.seed, reserved.offset,
                                  low, high - low, range.first_ok, range.last_ok, current_stream()),
      "uniform");
}

void fill_normal(const Tensor& dst, double mean, double stddev, Generator& gen) {
  check_random_destination(dst, "normal");
  random::fill_normal(dst.dtype(), nullptr, 0, mean, stddev, gen);
  const int64_t n = dst.numel();
  const Generator::State reserved = gen.reserve_with_seed(random::blocks_for(dst.dtype(), n));
  if (n == 0) return;
  DeviceGuard guard(dst.device().index);
  HG_CUDA_CHECK(detail::launch_fill_normal(dst.dtype(), dst.data_ptr(), n, reserved.seed,
                                           reserved.offset, mean, stddev, current_stream()),
                "normal");
}

}  // namespace hg::cuda
