// max_pool2d, avg_pool2d and their backward passes on CUDA (cuda/nn_kernels.h): the checks
// and error messages of cpu/nn_kernels.cpp, the kernels of pool.cu.
//
// Dims: N batch (1 for a 3-D [C, H, W] input), C channels, H/W input height/width, Hout/Wout
// output height/width.
#include <string>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/nn_kernels.h"
#include "halfgrad/cuda/pool_launch.h"
#include "halfgrad/cuda/stream.h"

namespace hg::cuda {

namespace {

using detail::PoolShape;
using detail::Strides4;

void check_input(const char* op, const char* what, const Tensor& t) {
  HG_CHECK(t.defined(), "{}: expected a tensor for {}, got an undefined tensor", op, what);
  HG_CHECK(t.is_cuda(), "{}: expected {} on a CUDA device, got a tensor on {}", op, what,
           t.device());
  HG_CHECK(t.is_floating_point(),
           "{}: expected {} of a floating dtype (float32, float16, bfloat16 or float64), got {}",
           op, what, t.dtype());
}

void check_shape(const char* op, const char* what, const Tensor& t, const Shape& expected) {
  HG_CHECK(t.sizes() == expected, "{}: expected {} of shape {}, got shape {}", op, what, expected,
           t.sizes());
}

// The CPU's pool_geometry: the checks, the output shape and the kernel's view of the problem.
struct PoolGeometry {
  PoolShape shape;
  Shape out_shape;
};

PoolGeometry pool_geometry(const char* op, const Shape& input_shape, const cpu::Pool2dParams& p) {
  const int64_t dims = int64_t(input_shape.size());
  HG_CHECK(dims == 3 || dims == 4,
           "{}: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got {}-D (shape {})", op, dims,
           input_shape);
  HG_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0, "{}: expected a kernel > 0, got kernel {}x{}", op,
           p.kernel[0], p.kernel[1]);
  HG_CHECK(p.stride[0] >= 0 && p.stride[1] >= 0,
           "{}: expected a stride > 0 (or 0 for stride = kernel), got stride {}x{}", op,
           p.stride[0], p.stride[1]);
  HG_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0 && 2 * p.padding[0] <= p.kernel[0] &&
               2 * p.padding[1] <= p.kernel[1],
           "{}: expected a padding between 0 and half the kernel {}x{}, got padding {}x{}", op,
           p.kernel[0], p.kernel[1], p.padding[0], p.padding[1]);
  PoolGeometry g;
  PoolShape& s = g.shape;
  s.N = dims == 4 ? input_shape[0] : 1;
  s.C = input_shape[size_t(dims - 3)];
  s.H = input_shape[size_t(dims - 2)], s.W = input_shape[size_t(dims - 1)];
  s.kH = p.kernel[0], s.kW = p.kernel[1];
  s.sH = p.stride[0] == 0 ? s.kH : p.stride[0];
  s.sW = p.stride[1] == 0 ? s.kW : p.stride[1];
  s.pH = p.padding[0], s.pW = p.padding[1];
  s.count_include_pad = p.count_include_pad;
  const int64_t padded_h = s.H + 2 * s.pH, padded_w = s.W + 2 * s.pW;
  HG_CHECK(s.kH <= padded_h && s.kW <= padded_w,
           "{}: expected a kernel no larger than the padded input {}x{}, got kernel {}x{}", op,
           padded_h, padded_w, s.kH, s.kW);
  s.Hout = (padded_h - s.kH) / s.sH + 1;
  s.Wout = (padded_w - s.kW) / s.sW + 1;
  g.out_shape = input_shape;
  g.out_shape[size_t(dims - 2)] = s.Hout;
  g.out_shape[size_t(dims - 1)] = s.Wout;
  return g;
}

// t's strides as a [N, C, H, W] view (t 3-D or 4-D; a 3-D t has N == 1).
Strides4 strides4(const Tensor& t) {
  const int64_t d = t.dim();
  return {d == 4 ? t.stride(0) : 0, t.stride(d - 3), t.stride(d - 2), t.stride(d - 1)};
}

}  // namespace

cpu::MaxPoolForward max_pool2d(const Tensor& x, const cpu::Pool2dParams& p) {
  const char* op = "max_pool2d";
  check_input(op, "input", x);
  const PoolGeometry g = pool_geometry(op, x.sizes(), p);
  DeviceGuard guard(x.device().index);
  cpu::MaxPoolForward result{empty(g.out_shape, x.options()),
                             empty(g.out_shape, {.dtype = kInt64, .device = x.device()})};
  HG_CUDA_CHECK(detail::launch_max_pool2d(x.data_ptr(), strides4(x), result.out.data_ptr(),
                                          result.indices.data_ptr<int64_t>(), x.dtype(), g.shape,
                                          current_stream(x.device().index)),
                op);
  return result;
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape) {
  const char* op = "max_pool2d_backward";
  check_input(op, "grad_output", dy);
  const int64_t dims = int64_t(input_shape.size());
  HG_CHECK(dims == 3 || dims == 4,
           "{}: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input_shape, got {}-D ({})", op, dims,
           input_shape);
  HG_CHECK(dy.dim() == dims, "{}: expected a {}-D grad_output for input_shape {}, got shape {}", op,
           dims, input_shape, dy.sizes());
  for (int64_t d = 0; d + 2 < dims; ++d) {
    HG_CHECK(dy.size(d) == input_shape[size_t(d)],
             "{}: expected grad_output's leading dims to match input_shape {}, got shape {}", op,
             input_shape, dy.sizes());
  }
  HG_CHECK(indices.defined() && indices.dtype() == kInt64,
           "{}: expected int64 indices (from max_pool2d), got {}", op,
           indices.defined() ? std::string(dtype_name(indices.dtype())) : "an undefined tensor");
  check_shape(op, "indices (grad_output's shape)", indices, dy.sizes());
  HG_CHECK(indices.device() == dy.device(),
           "{}: expected indices on {} (grad_output's device), got a tensor on {}", op, dy.device(),
           indices.device());
  const Device device = dy.device();
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  PoolShape s{};
  s.N = dims == 4 ? input_shape[0] : 1;
  s.C = input_shape[size_t(dims - 3)];
  s.H = input_shape[size_t(dims - 2)], s.W = input_shape[size_t(dims - 1)];
  s.Hout = dy.size(-2), s.Wout = dy.size(-1);
  Tensor dx = empty(input_shape, dy.options());
  // NOTE [Deterministic max_pool2d backward] in pool.cu: a sort of dy's elements by the input
  // position they go to, then one sum per position.
  const int64_t count = dy.numel();
  const int key_bits = detail::max_pool2d_backward_key_bits(dx.numel());
  size_t sort_bytes = 0;
  if (count > 0) {
    HG_CUDA_CHECK(detail::max_pool2d_backward_sort_bytes(count, key_bits, dy.dtype(), &sort_bytes),
                  op);
  }
  const DType accumulator = dy.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const TensorOptions keys{.dtype = kInt64, .device = device};
  const TensorOptions values{.dtype = accumulator, .device = device};
  const Tensor keys_in = empty({count}, keys), keys_out = empty({count}, keys);
  const Tensor values_in = empty({count}, values), values_out = empty({count}, values);
  // At least one element: a null storage pointer would ask the sort for its size instead.
  const Tensor sort_storage = empty({int64_t(sort_bytes / 8) + 1}, keys);
  const detail::MaxPoolBackwardScratch scratch{keys_in.data_ptr(),      keys_out.data_ptr(),
                                               values_in.data_ptr(),    values_out.data_ptr(),
                                               sort_storage.data_ptr(), sort_bytes};
  // A bad index is reported against the H dim, with the plane's size H * W as its bound.
  HG_CUDA_CHECK(
      detail::launch_max_pool2d_backward(
          dy.data_ptr(), strides4(dy), indices.data_ptr<int64_t>(), strides4(indices),
          dx.data_ptr(), dy.dtype(), s, key_bits, scratch, detail::device_error_slot(device.index),
          detail::DeviceError::MaxPool2dBackward, int32_t(dims - 2), stream),
      op);
  return dx;
}

Tensor avg_pool2d(const Tensor& x, const cpu::Pool2dParams& p) {
  const char* op = "avg_pool2d";
  check_input(op, "input", x);
  const PoolGeometry g = pool_geometry(op, x.sizes(), p);
  DeviceGuard guard(x.device().index);
  Tensor out = empty(g.out_shape, x.options());
  HG_CUDA_CHECK(detail::launch_avg_pool2d(x.data_ptr(), strides4(x), out.data_ptr(), x.dtype(),
                                          g.shape, current_stream(x.device().index)),
                op);
  return out;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& input_shape, const cpu::Pool2dParams& p) {
  const char* op = "avg_pool2d_backward";
  check_input(op, "grad_output", dy);
  const PoolGeometry g = pool_geometry(op, input_shape, p);
  check_shape(op, "grad_output (avg_pool2d's output shape)", dy, g.out_shape);
  DeviceGuard guard(dy.device().index);
  Tensor dx = empty(input_shape, dy.options());
  HG_CUDA_CHECK(
      detail::launch_avg_pool2d_backward(dy.data_ptr(), strides4(dy), dx.data_ptr(), dy.dtype(),
                                         g.shape, current_stream(dy.device().index)),
      op);
  return dx;
}

}  // namespace hg::cuda
