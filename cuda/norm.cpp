// CUDA kernels of the norm family (kernel/norm.h), host side: softmax, log_softmax, layer_norm,
// group_norm and batch_norm, forward and backward. The checks of cpu/norm.cpp (shared through
// kernel/checks.h: same errors, with "on a CUDA device" for "on the CPU"), the outputs and their
// dtypes (NOTE [Norm kernels' dtypes] in kernel/norm.h), and the launches of norm.cu. Nothing here
// waits for the GPU: batch_norm's running statistics are updated on the stream too.
//
// Dims: N batch, C channels, G groups, S the flattened spatial size, M a normalized row's
// length, D the softmax dim.
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/norm_launch.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cuda {

namespace {

using kernel::acc_dtype;

// Defined, on a CUDA device, floating.
void check_input(const char* op, const char* what, const Tensor& t) {
  kernel::check_input(op, what, t, kCUDA);
}

// ---- buffers --------------------------------------------------------------------------------

// An optional parameter or statistic as a contiguous tensor of dtype (undefined stays so).
Tensor contiguous_as(const Tensor& t, DType dtype) {
  return t.defined() ? t.to(dtype).contiguous() : Tensor();
}

const void* pointer(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
void* mutable_pointer(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// Scratch memory on x's device (kept alive by the caller until the launches are enqueued; the
// allocator's stream order makes reuse safe).
Tensor workspace(int64_t bytes, const Tensor& x) {
  return bytes > 0 ? empty({(bytes + 7) / 8}, {.dtype = kInt64, .device = x.device()}) : Tensor();
}

// A norm forward's outputs: out like x, mean and rstd [stat_shape] in the accumulation dtype.
kernel::NormForward forward_outputs(const Tensor& x, const Shape& stat_shape) {
  const TensorOptions stat_options{.dtype = acc_dtype(x.dtype()), .device = x.device()};
  return {empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()}),
          empty(stat_shape, stat_options), empty(stat_shape, stat_options)};
}

// A norm backward's buffers: what the kernel reads (contiguous; the statistics and weight in the
// accumulation dtype) and writes (dx in x's dtype; dweight and dbias [param_shape] in the
// accumulation dtype, undefined unless wanted).
struct BackwardBuffers {
  Tensor x, dy, mean, rstd, weight;
  Tensor dx, dweight, dbias;
};

BackwardBuffers backward_buffers(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& weight, const Shape& param_shape,
                                 bool want_dweight, bool want_dbias) {
  const DType acc = acc_dtype(x.dtype());
  const TensorOptions acc_options{.dtype = acc, .device = x.device()};
  BackwardBuffers b;
  b.x = x.contiguous(), b.dy = dy.contiguous();
  b.mean = contiguous_as(mean, acc), b.rstd = contiguous_as(rstd, acc);
  b.weight = contiguous_as(weight, acc);
  b.dx = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  if (want_dweight) b.dweight = empty(param_shape, acc_options);
  if (want_dbias) b.dbias = empty(param_shape, acc_options);
  return b;
}

// dx, and dweight and dbias in their dtypes (NOTE [Norm kernels' dtypes] in kernel/norm.h).
kernel::NormBackward backward_result(const BackwardBuffers& b, const Tensor& x,
                                     const Tensor& weight, bool has_bias) {
  kernel::NormBackward result{b.dx, Tensor(), Tensor()};
  if (weight.defined()) result.dweight = b.dweight.to(weight.dtype());
  if (has_bias) result.dbias = b.dbias.to(weight.defined() ? weight.dtype() : x.dtype());
  return result;
}

// ---- softmax --------------------------------------------------------------------------------

detail::SoftmaxGeometry softmax_geometry(const Tensor& x, int64_t dim, const char* op) {
  const kernel::DimSplit s = kernel::split_at(x, dim, op);
  return {s.outer, s.size, s.inner};
}

template <bool kLog>
Tensor softmax_forward(const Tensor& x, int64_t dim, const char* op) {
  check_input(op, "input", x);
  const detail::SoftmaxGeometry g = softmax_geometry(x, dim, op);
  DeviceGuard guard(x.device().index);
  const Tensor xc = x.contiguous();
  Tensor y = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  HG_CUDA_CHECK(
      detail::launch_softmax(kLog, xc.data_ptr(), y.data_ptr(), x.dtype(), g, current_stream()),
      op);
  return y;
}

template <bool kLog>
Tensor softmax_backward_impl(const Tensor& dy, const Tensor& y, int64_t dim, const char* op) {
  kernel::check_softmax_backward(op, dy, y, kCUDA);
  const detail::SoftmaxGeometry g = softmax_geometry(y, dim, op);
  DeviceGuard guard(y.device().index);
  const Tensor dyc = dy.contiguous(), yc = y.contiguous();
  Tensor dx = empty(y.sizes(), {.dtype = y.dtype(), .device = y.device()});
  HG_CUDA_CHECK(detail::launch_softmax_backward(kLog, dyc.data_ptr(), yc.data_ptr(), dx.data_ptr(),
                                                y.dtype(), g, current_stream()),
                op);
  return dx;
}

// ---- layer_norm and group_norm --------------------------------------------------------------

// Normalises rows of x (checked) as g says, with weight and bias (checked; optional); mean and
// rstd have stat_shape.
kernel::NormForward row_norm_forward(const char* op, const Tensor& x, const Tensor& weight,
                                     const Tensor& bias, const Shape& stat_shape,
                                     const detail::RowNormGeometry& g, double eps) {
  DeviceGuard guard(x.device().index);
  const DType acc = acc_dtype(x.dtype());
  kernel::NormForward result = forward_outputs(x, stat_shape);
  const Tensor xc = x.contiguous();
  const Tensor w = contiguous_as(weight, acc), b = contiguous_as(bias, acc);
  HG_CUDA_CHECK(detail::launch_row_norm_forward(xc.data_ptr(), result.out.data_ptr(), x.dtype(),
                                                pointer(w), pointer(b), result.mean.data_ptr(),
                                                result.rstd.data_ptr(), g, eps, current_stream()),
                op);
  return result;
}

// ---- softmax --------------------------------------------------------------------------------

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_forward<false>(x, dim, "softmax"); }

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_forward<true>(x, dim, "log_softmax");
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim) {
  return softmax_backward_impl<false>(dy, y, dim, "softmax_backward");
}

Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim) {
  return softmax_backward_impl<true>(dy, y, dim, "log_softmax_backward");
}

// ---- layer_norm -----------------------------------------------------------------------------

kernel::NormForward layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                               const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  const kernel::LayerNormGeometry ln = kernel::layer_norm_geometry(op, x, normalized_shape, kCUDA);
  kernel::check_optional_param(op, "weight (of normalized_shape)", weight, normalized_shape, x);
  kernel::check_optional_param(op, "bias (of normalized_shape)", bias, normalized_shape, x);
  const detail::RowNormGeometry g{.rows = ln.rows, .M = ln.M, .groups = 1, .spatial = 1};
  return row_norm_forward(op, x, weight, bias, {ln.rows}, g, eps);
}

kernel::NormBackward layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                         const Tensor& rstd, const Shape& normalized_shape,
                                         const Tensor& weight, bool has_bias) {
  const char* op = "layer_norm_backward";
  const kernel::LayerNormGeometry ln = kernel::layer_norm_geometry(op, x, normalized_shape, kCUDA);
  kernel::check_grad_output(op, dy, x);
  kernel::check_optional_param(op, "weight (of normalized_shape)", weight, normalized_shape, x);
  kernel::check_saved_stat(op, "mean", mean, {ln.rows}, x);
  kernel::check_saved_stat(op, "rstd", rstd, {ln.rows}, x);
  DeviceGuard guard(x.device().index);
  const BackwardBuffers b =
      backward_buffers(dy, x, mean, rstd, weight, normalized_shape, weight.defined(), has_bias);
  const Tensor scratch =
      b.dweight.defined() || b.dbias.defined()
          ? workspace(detail::layer_norm_backward_workspace_bytes(ln.rows, ln.M, x.dtype()), x)
          : Tensor();
  HG_CUDA_CHECK(
      detail::launch_layer_norm_backward(
          b.dy.data_ptr(), b.x.data_ptr(), b.mean.data_ptr(), b.rstd.data_ptr(), pointer(b.weight),
          b.dx.data_ptr(), mutable_pointer(b.dweight), mutable_pointer(b.dbias),
          mutable_pointer(scratch), x.dtype(), ln.rows, ln.M, current_stream()),
      op);
  return backward_result(b, x, weight, has_bias);
}

// ---- group_norm -----------------------------------------------------------------------------

kernel::NormForward group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight,
                               const Tensor& bias, double eps) {
  const char* op = "group_norm";
  const kernel::GroupNormGeometry gn = kernel::group_norm_geometry(op, x, num_groups, kCUDA);
  kernel::check_optional_param(op, "weight ([C])", weight, {gn.C}, x);
  kernel::check_optional_param(op, "bias ([C])", bias, {gn.C}, x);
  // Group g of sample n is one contiguous row of Cg S values (a layer_norm row with a
  // per-channel weight).
  const detail::RowNormGeometry g{
      .rows = gn.N * gn.G, .M = gn.Cg * gn.S, .groups = gn.G, .spatial = gn.S};
  return row_norm_forward(op, x, weight, bias, {gn.N, gn.G}, g, eps);
}

kernel::NormBackward group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                         const Tensor& rstd, int64_t num_groups,
                                         const Tensor& weight, bool has_bias) {
  const char* op = "group_norm_backward";
  const kernel::GroupNormGeometry gn = kernel::group_norm_geometry(op, x, num_groups, kCUDA);
  kernel::check_grad_output(op, dy, x);
  kernel::check_optional_param(op, "weight ([C])", weight, {gn.C}, x);
  kernel::check_saved_stat(op, "mean", mean, {gn.N, gn.G}, x);
  kernel::check_saved_stat(op, "rstd", rstd, {gn.N, gn.G}, x);
  DeviceGuard guard(x.device().index);
  const BackwardBuffers b =
      backward_buffers(dy, x, mean, rstd, weight, {gn.C}, weight.defined(), has_bias);
  const Tensor scratch =
      workspace(detail::group_norm_backward_workspace_bytes(gn.N, gn.C, gn.G, x.dtype()), x);
  HG_CUDA_CHECK(
      detail::launch_group_norm_backward(
          b.dy.data_ptr(), b.x.data_ptr(), b.mean.data_ptr(), b.rstd.data_ptr(), pointer(b.weight),
          b.dx.data_ptr(), mutable_pointer(b.dweight), mutable_pointer(b.dbias),
          mutable_pointer(scratch), x.dtype(), gn.N, gn.C, gn.S, gn.G, current_stream()),
      op);
  return backward_result(b, x, weight, has_bias);
}

// ---- batch_norm -----------------------------------------------------------------------------

kernel::NormForward batch_norm(const Tensor& x, const Tensor& running_mean,
                               const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                               bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  const kernel::BatchNormGeometry shape = kernel::batch_norm_geometry(op, x, kCUDA);
  kernel::check_batch_norm(op, x, shape, running_mean, running_var, weight, bias, training);
  const detail::BatchNormGeometry bn{shape.N, shape.C, shape.S};
  DeviceGuard guard(x.device().index);
  const DType acc = acc_dtype(x.dtype());
  kernel::NormForward result = forward_outputs(x, {bn.C});
  const Tensor xc = x.contiguous();
  const Tensor w = contiguous_as(weight, acc), b = contiguous_as(bias, acc);
  // The running statistics in float64, as the CPU kernel reads them; the new values come back
  // in float64 and are copied into the running tensors (their own dtype and layout).
  const Tensor old_mean = contiguous_as(running_mean, kFloat64);
  const Tensor old_var = contiguous_as(running_var, kFloat64);
  const bool update = training && running_mean.defined();
  const TensorOptions double_options{.dtype = kFloat64, .device = x.device()};
  const Tensor new_mean = update ? empty({bn.C}, double_options) : Tensor();
  const Tensor new_var = update ? empty({bn.C}, double_options) : Tensor();
  const Tensor scratch =
      training ? workspace(detail::batch_norm_workspace_bytes(bn, x.dtype()), x) : Tensor();
  HG_CUDA_CHECK(detail::launch_batch_norm_forward(
                    xc.data_ptr(), result.out.data_ptr(), x.dtype(), pointer(w), pointer(b),
                    result.mean.data_ptr(), result.rstd.data_ptr(),
                    static_cast<const double*>(pointer(old_mean)),
                    static_cast<const double*>(pointer(old_var)),
                    static_cast<double*>(mutable_pointer(new_mean)),
                    static_cast<double*>(mutable_pointer(new_var)), training, momentum, eps,
                    mutable_pointer(scratch), bn, current_stream()),
                op);
  if (update) {
    Tensor running_mean_handle = running_mean, running_var_handle = running_var;
    running_mean_handle.copy_(new_mean);
    running_var_handle.copy_(new_var);
  }
  return result;
}

kernel::NormBackward batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                         const Tensor& rstd, const Tensor& weight, bool has_bias,
                                         bool training) {
  const char* op = "batch_norm_backward";
  const kernel::BatchNormGeometry shape = kernel::batch_norm_geometry(op, x, kCUDA);
  kernel::check_grad_output(op, dy, x);
  kernel::check_optional_param(op, "weight ([C])", weight, {shape.C}, x);
  kernel::check_saved_stat(op, "mean", mean, {shape.C}, x);
  kernel::check_saved_stat(op, "rstd", rstd, {shape.C}, x);
  const detail::BatchNormGeometry bn{shape.N, shape.C, shape.S};
  DeviceGuard guard(x.device().index);
  // The kernel writes dweight and dbias whether or not they are wanted.
  const BackwardBuffers b = backward_buffers(dy, x, mean, rstd, weight, {bn.C}, true, true);
  const Tensor scratch = workspace(detail::batch_norm_workspace_bytes(bn, x.dtype()), x);
  HG_CUDA_CHECK(detail::launch_batch_norm_backward(
                    b.dy.data_ptr(), b.x.data_ptr(), b.mean.data_ptr(), b.rstd.data_ptr(),
                    pointer(b.weight), b.dx.data_ptr(), b.dweight.data_ptr(), b.dbias.data_ptr(),
                    training, mutable_pointer(scratch), x.dtype(), bn, current_stream()),
                op);
  return backward_result(b, x, weight, has_bias);
}

}  // namespace

const kernel::NormKernels norm_kernels = HG_NORM_KERNELS;

}  // namespace hg::cuda
