// CUDA kernels of the pool family (kernel/pool.h): max_pool2d, avg_pool2d and their backward
// passes, with the checks and error messages of cpu/pool.cpp; the kernels are pool.cu's.
//
// Dims: N batch (1 for a 3-D [C, H, W] input), C channels, H/W input height/width, Hout/Wout
// output height/width.
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/pool_launch.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cuda {

namespace {

using detail::PoolShape;
using detail::Strides4;

// Defined, on a CUDA device, floating.
void check_input(const char* op, const char* what, const Tensor& t) {
  kernel::check_input(op, what, t, kCUDA);
}

// The CPU's checks and output shape (kernel/checks.h) and the kernels' view of the problem.
struct PoolProblem {
  PoolShape shape;
  Shape out_shape;
};

PoolProblem pool_problem(const char* op, const Shape& input_shape, const kernel::Pool2dParams& p) {
  const kernel::PoolGeometry g = kernel::pool_geometry(op, input_shape, p);
  return {{g.N, g.C, g.H, g.W, g.Hout, g.Wout, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH, g.dW,
           g.divisor_override, p.count_include_pad},
          g.out_shape};
}

// t's strides as a [N, C, H, W] view (t 3-D or 4-D; a 3-D t has N == 1).
Strides4 strides4(const Tensor& t) {
  const int64_t d = t.dim();
  return {d == 4 ? t.stride(0) : 0, t.stride(d - 3), t.stride(d - 2), t.stride(d - 1)};
}

kernel::MaxPoolForward max_pool2d(const Tensor& x, const kernel::Pool2dParams& p) {
  const char* op = "max_pool2d";
  check_input(op, "input", x);
  const PoolProblem g = pool_problem(op, x.sizes(), p);
  DeviceGuard guard(x.device().index);
  kernel::MaxPoolForward result{empty(g.out_shape, x.options()),
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
  kernel::check_max_pool2d_backward(op, dy, indices, input_shape);
  kernel::check_same_device(op, "indices", indices, dy.device(), "grad_output's");
  const int64_t dims = int64_t(input_shape.size());
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
  const DType accumulator = kernel::acc_dtype(dy.dtype());
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

Tensor avg_pool2d(const Tensor& x, const kernel::Pool2dParams& p) {
  const char* op = "avg_pool2d";
  check_input(op, "input", x);
  const PoolProblem g = pool_problem(op, x.sizes(), p);
  DeviceGuard guard(x.device().index);
  Tensor out = empty(g.out_shape, x.options());
  HG_CUDA_CHECK(detail::launch_avg_pool2d(x.data_ptr(), strides4(x), out.data_ptr(), x.dtype(),
                                          g.shape, current_stream(x.device().index)),
                op);
  return out;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& input_shape,
                           const kernel::Pool2dParams& p) {
  const char* op = "avg_pool2d_backward";
  check_input(op, "grad_output", dy);
  const PoolProblem g = pool_problem(op, input_shape, p);
  kernel::check_shape(op, "grad_output (avg_pool2d's output shape)", dy, g.out_shape);
  DeviceGuard guard(dy.device().index);
  Tensor dx = empty(input_shape, dy.options());
  HG_CUDA_CHECK(
      detail::launch_avg_pool2d_backward(dy.data_ptr(), strides4(dy), dx.data_ptr(), dy.dtype(),
                                         g.shape, current_stream(dy.device().index)),
      op);
  return dx;
}

}  // namespace

const kernel::PoolKernels pool_kernels = HG_POOL_KERNELS;

}  // namespace hg::cuda
