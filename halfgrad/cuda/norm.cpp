// CUDA softmax, log_softmax, layer_norm, group_norm and batch_norm (forward and backward), host
// side: the checks of cpu/nn_kernels.cpp (same errors, with "on a CUDA device" for "on the
// CPU"), the outputs and their dtypes (NOTE [Norm kernels' dtypes] in cpu/nn_kernels.h), and
// the launches of norm.cu. Nothing here waits for the GPU: batch_norm's running statistics are
// updated on the stream too.
//
// Dims: N batch, C channels, G groups, S the flattened spatial size, M a normalized row's
// length, D the softmax dim.
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/nn_kernels.h"
#include "halfgrad/cuda/norm_launch.h"
#include "halfgrad/cuda/stream.h"

namespace hg::cuda {

namespace {

// The dtype the kernels accumulate in, and in which norms save their statistics.
DType acc_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// ---- checks ---------------------------------------------------------------------------------

void check_input(const char* op, const char* what, const Tensor& t) {
  HG_CHECK(t.defined(), "{}: expected a tensor for {}, got an undefined tensor", op, what);
  HG_CHECK(t.is_cuda(), "{}: expected {} on a CUDA device, got a tensor on {}", op, what,
           t.device());
  HG_CHECK(t.is_floating_point(),
           "{}: expected {} of a floating dtype (float32, float16, bfloat16 or float64), got {}",
           op, what, t.dtype());
}

// Every tensor of a call on the input's device (the op layer checks this too; a direct call
// of a kernel may not have).
void check_device(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  HG_CHECK(t.device() == x.device(), "{}: expected {} on {} (the input's device), got one on {}",
           op, what, x.device(), t.device());
}

void check_shape(const char* op, const char* what, const Tensor& t, const Shape& expected) {
  HG_CHECK(t.sizes() == expected, "{}: expected {} of shape {}, got shape {}", op, what, expected,
           t.sizes());
}

void check_same_dtype(const char* op, const char* what, const Tensor& t, DType expected) {
  HG_CHECK(t.dtype() == expected, "{}: expected {} of dtype {} (the input's), got {}", op, what,
           expected, t.dtype());
}

// An optional per-channel (or per-feature) parameter: present, floating, of the given shape.
void check_optional_param(const char* op, const char* what, const Tensor& t, const Shape& shape,
                          const Tensor& x) {
  if (!t.defined()) return;
  check_input(op, what, t);
  check_device(op, what, t, x);
  check_shape(op, what, t, shape);
}

// Saved statistics: `shape`'s element count, any floating dtype (read in the accumulation type).
void check_saved_stat(const char* op, const char* what, const Tensor& t, const Shape& shape,
                      const Tensor& x) {
  check_input(op, what, t);
  check_device(op, what, t, x);
  HG_CHECK(t.numel() == shape_numel(shape),
           "{}: expected {} with {} elements (shape {}), got shape {}", op, what,
           shape_numel(shape), shape, t.sizes());
}

int64_t product(const Shape& sizes, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= sizes[d];
  return n;
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

// ---- softmax --------------------------------------------------------------------------------

detail::SoftmaxGeometry split_at(const Tensor& x, int64_t dim, const char* op) {
  const int64_t d = wrap_dim(dim, x.dim(), op);
  if (x.dim() == 0) return {1, 1, 1};
  const Shape& s = x.sizes();
  return {product(s, 0, size_t(d)), s[size_t(d)], product(s, size_t(d) + 1, s.size())};
}

template <bool kLog>
Tensor softmax_forward(const Tensor& x, int64_t dim, const char* op) {
  check_input(op, "input", x);
  const detail::SoftmaxGeometry g = split_at(x, dim, op);
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
  check_input(op, "grad_output", dy);
  check_input(op, "output", y);
  check_device(op, "grad_output", dy, y);
  check_shape(op, "grad_output (the output's shape)", dy, y.sizes());
  HG_CHECK(dy.dtype() == y.dtype(),
           "{}: expected grad_output of the output's dtype {}, got grad_output of dtype {}", op,
           y.dtype(), dy.dtype());
  const detail::SoftmaxGeometry g = split_at(y, dim, op);
  DeviceGuard guard(y.device().index);
  const Tensor dyc = dy.contiguous(), yc = y.contiguous();
  Tensor dx = empty(y.sizes(), {.dtype = y.dtype(), .device = y.device()});
  HG_CUDA_CHECK(detail::launch_softmax_backward(kLog, dyc.data_ptr(), yc.data_ptr(), dx.data_ptr(),
                                                y.dtype(), g, current_stream()),
                op);
  return dx;
}

// ---- geometries -----------------------------------------------------------------------------

struct LayerNormGeometry {
  int64_t rows;
  int64_t M;
};

LayerNormGeometry layer_norm_geometry(const char* op, const Tensor& x,
                                      const Shape& normalized_shape) {
  check_input(op, "input", x);
  const size_t k = normalized_shape.size();
  HG_CHECK(k > 0, "{}: expected a non-empty normalized_shape, got []", op);
  bool trailing_match = size_t(x.dim()) >= k;
  for (size_t i = 0; trailing_match && i < k; ++i) {
    trailing_match = x.sizes()[size_t(x.dim()) - k + i] == normalized_shape[i];
  }
  HG_CHECK(trailing_match,
           "{}: expected an input whose trailing dims are normalized_shape {}, got input shape {}",
           op, normalized_shape, x.sizes());
  const size_t leading = size_t(x.dim()) - k;
  return {product(x.sizes(), 0, leading), product(x.sizes(), leading, size_t(x.dim()))};
}

struct GroupNormGeometry {
  int64_t N, C, S, G, Cg;
};

GroupNormGeometry group_norm_geometry(const char* op, const Tensor& x, int64_t num_groups) {
  check_input(op, "input", x);
  HG_CHECK(x.dim() >= 2, "{}: expected an input [N, C, *] of at least 2 dims, got {}-D (shape {})",
           op, x.dim(), x.sizes());
  const int64_t C = x.size(1);
  HG_CHECK(num_groups > 0 && C % num_groups == 0,
           "{}: expected num_groups to divide the channels C={}, got num_groups={}", op, C,
           num_groups);
  return {x.size(0), C, product(x.sizes(), 2, size_t(x.dim())), num_groups, C / num_groups};
}

detail::BatchNormGeometry batch_norm_geometry(const char* op, const Tensor& x) {
  check_input(op, "input", x);
  HG_CHECK(x.dim() >= 2, "{}: expected an input [N, C, *] of at least 2 dims, got {}-D (shape {})",
           op, x.dim(), x.sizes());
  return {x.size(0), x.size(1), product(x.sizes(), 2, size_t(x.dim()))};
}

}  // namespace

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

cpu::NormForward layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                            const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  const LayerNormGeometry ln = layer_norm_geometry(op, x, normalized_shape);
  check_optional_param(op, "weight (of normalized_shape)", weight, normalized_shape, x);
  check_optional_param(op, "bias (of normalized_shape)", bias, normalized_shape, x);
  DeviceGuard guard(x.device().index);
  const DType acc = acc_dtype(x.dtype());
  const TensorOptions stat_options{.dtype = acc, .device = x.device()};
  cpu::NormForward result{empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()}),
                          empty({ln.rows}, stat_options), empty({ln.rows}, stat_options)};
  const Tensor xc = x.contiguous();
  const Tensor w = contiguous_as(weight, acc), b = contiguous_as(bias, acc);
  const detail::RowNormGeometry g{.rows = ln.rows, .M = ln.M, .groups = 1, .spatial = 1};
  HG_CUDA_CHECK(detail::launch_row_norm_forward(xc.data_ptr(), result.out.data_ptr(), x.dtype(),
                                                pointer(w), pointer(b), result.mean.data_ptr(),
                                                result.rstd.data_ptr(), g, eps, current_stream()),
                op);
  return result;
}

cpu::NormBackward layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Shape& normalized_shape,
                                      const Tensor& weight, bool has_bias) {
  const char* op = "layer_norm_backward";
  const LayerNormGeometry ln = layer_norm_geometry(op, x, normalized_shape);
  check_input(op, "grad_output", dy);
  check_device(op, "grad_output", dy, x);
  check_shape(op, "grad_output (the input's shape)", dy, x.sizes());
  check_same_dtype(op, "grad_output", dy, x.dtype());
  check_optional_param(op, "weight (of normalized_shape)", weight, normalized_shape, x);
  check_saved_stat(op, "mean", mean, {ln.rows}, x);
  check_saved_stat(op, "rstd", rstd, {ln.rows}, x);
  DeviceGuard guard(x.device().index);
  const DType acc = acc_dtype(x.dtype());
  const TensorOptions acc_options{.dtype = acc, .device = x.device()};
  const Tensor xc = x.contiguous(), dyc = dy.contiguous();
  const Tensor mu = contiguous_as(mean, acc), rs = contiguous_as(rstd, acc);
  const Tensor w = contiguous_as(weight, acc);
  cpu::NormBackward result{empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()}), Tensor(),
                           Tensor()};
  const Tensor dweight = weight.defined() ? empty(normalized_shape, acc_options) : Tensor();
  const Tensor dbias = has_bias ? empty(normalized_shape, acc_options) : Tensor();
  const Tensor scratch =
      dweight.defined() || dbias.defined()
          ? workspace(detail::layer_norm_backward_workspace_bytes(ln.rows, ln.M, x.dtype()), x)
          : Tensor();
  HG_CUDA_CHECK(detail::launch_layer_norm_backward(
                    dyc.data_ptr(), xc.data_ptr(), mu.data_ptr(), rs.data_ptr(), pointer(w),
                    result.dx.data_ptr(), mutable_pointer(dweight), mutable_pointer(dbias),
                    mutable_pointer(scratch), x.dtype(), ln.rows, ln.M, current_stream()),
                op);
  if (dweight.defined()) result.dweight = dweight.to(weight.dtype());
  if (dbias.defined()) result.dbias = dbias.to(weight.defined() ? weight.dtype() : x.dtype());
  return result;
}

// ---- group_norm -----------------------------------------------------------------------------

cpu::NormForward group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight,
                            const Tensor& bias, double eps) {
  const char* op = "group_norm";
  const GroupNormGeometry gn = group_norm_geometry(op, x, num_groups);
  check_optional_param(op, "weight ([C])", weight, {gn.C}, x);
  check_optional_param(op, "bias ([C])", bias, {gn.C}, x);
  DeviceGuard guard(x.device().index);
  const DType acc = acc_dtype(x.dtype());
  const TensorOptions stat_options{.dtype = acc, .device = x.device()};
  cpu::NormForward result{empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()}),
                          empty({gn.N, gn.G}, stat_options), empty({gn.N, gn.G}, stat_options)};
  const Tensor xc = x.contiguous();
  const Tensor w = contiguous_as(weight, acc), b = contiguous_as(bias, acc);
  // Group g of sample n is one contiguous row of Cg S values (a layer_norm row with a
  // per-channel weight).
  const detail::RowNormGeometry g{
      .rows = gn.N * gn.G, .M = gn.Cg * gn.S, .groups = gn.G, .spatial = gn.S};
  HG_CUDA_CHECK(detail::launch_row_norm_forward(xc.data_ptr(), result.out.data_ptr(), x.dtype(),
                                                pointer(w), pointer(b), result.mean.data_ptr(),
                                                result.rstd.data_ptr(), g, eps, current_stream()),
                op);
  return result;
}

cpu::NormBackward group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, int64_t num_groups, const Tensor& weight,
                                      bool has_bias) {
  const char* op = "group_norm_backward";
  const GroupNormGeometry gn = group_norm_geometry(op, x, num_groups);
  check_input(op, "grad_output", dy);
  check_device(op, "grad_output", dy, x);
  check_shape(op, "grad_output (the input's shape)", dy, x.sizes());
  check_same_dtype(op, "grad_output", dy, x.dtype());
  check_optional_param(op, "weight ([C])", weight, {gn.C}, x);
  check_saved_stat(op, "mean", mean, {gn.N, gn.G}, x);
  check_saved_stat(op, "rstd", rstd, {gn.N, gn.G}, x);
  DeviceGuard guard(x.device().index);
  const DType acc = acc_dtype(x.dtype());
  const TensorOptions acc_options{.dtype = acc, .device = x.device()};
  const Tensor xc = x.contiguous(), dyc = dy.contiguous();
  const Tensor mu = contiguous_as(mean, acc), rs = contiguous_as(rstd, acc);
  const Tensor w = contiguous_as(weight, acc);
  cpu::NormBackward result{empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()}), Tensor(),
                           Tensor()};
  const Tensor dweight = weight.defined() ? empty({gn.C}, acc_options) : Tensor();
  const Tensor dbias = has_bias ? empty({gn.C}, acc_options) : Tensor();
  const Tensor scratch =
      workspace(detail::group_norm_backward_workspace_bytes(gn.N, gn.C, gn.G, x.dtype()), x);
  HG_CUDA_CHECK(detail::launch_group_norm_backward(
                    dyc.data_ptr(), xc.data_ptr(), mu.data_ptr(), rs.data_ptr(), pointer(w),
                    result.dx.data_ptr(), mutable_pointer(dweight), mutable_pointer(dbias),
                    mutable_pointer(scratch), x.dtype(), gn.N, gn.C, gn.S, gn.G, current_stream()),
                op);
  if (dweight.defined()) result.dweight = dweight.to(weight.dtype());
  if (dbias.defined()) result.dbias = dbias.to(weight.defined() ? weight.dtype() : x.dtype());
  return result;
}

// ---- batch_norm -----------------------------------------------------------------------------

cpu::NormForward batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                            const Tensor& weight, const Tensor& bias, bool training,
                            double momentum, double eps) {
  const char* op = "batch_norm";
  const detail::BatchNormGeometry bn = batch_norm_geometry(op, x);
  check_optional_param(op, "weight ([C])", weight, {bn.C}, x);
  check_optional_param(op, "bias ([C])", bias, {bn.C}, x);
  check_optional_param(op, "running_mean ([C])", running_mean, {bn.C}, x);
  check_optional_param(op, "running_var ([C])", running_var, {bn.C}, x);
  HG_CHECK(running_mean.defined() == running_var.defined(),
           "{}: expected running_mean and running_var both given or both absent, got {} and {}", op,
           running_mean.defined() ? "running_mean" : "no running_mean",
           running_var.defined() ? "running_var" : "no running_var");
  const int64_t count = bn.N * bn.S;
  if (training) {
    HG_CHECK(count > 1,
             "{}: expected more than 1 value per channel when training, got input shape {}", op,
             x.sizes());
  } else {
    HG_CHECK(running_mean.defined(),
             "{}: expected running_mean and running_var in eval mode (training=false), got "
             "neither",
             op);
  }
  DeviceGuard guard(x.device().index);
  const DType acc = acc_dtype(x.dtype());
  const TensorOptions stat_options{.dtype = acc, .device = x.device()};
  cpu::NormForward result{empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()}),
                          empty({bn.C}, stat_options), empty({bn.C}, stat_options)};
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

cpu::NormBackward batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& weight, bool has_bias,
                                      bool training) {
  const char* op = "batch_norm_backward";
  const detail::BatchNormGeometry bn = batch_norm_geometry(op, x);
  check_input(op, "grad_output", dy);
  check_device(op, "grad_output", dy, x);
  check_shape(op, "grad_output (the input's shape)", dy, x.sizes());
  check_same_dtype(op, "grad_output", dy, x.dtype());
  check_optional_param(op, "weight ([C])", weight, {bn.C}, x);
  check_saved_stat(op, "mean", mean, {bn.C}, x);
  check_saved_stat(op, "rstd", rstd, {bn.C}, x);
  DeviceGuard guard(x.device().index);
  const DType acc = acc_dtype(x.dtype());
  const TensorOptions acc_options{.dtype = acc, .device = x.device()};
  const Tensor xc = x.contiguous(), dyc = dy.contiguous();
  const Tensor mu = contiguous_as(mean, acc), rs = contiguous_as(rstd, acc);
  const Tensor w = contiguous_as(weight, acc);
  cpu::NormBackward result{empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()}), Tensor(),
                           Tensor()};
  const Tensor dweight = empty({bn.C}, acc_options), dbias = empty({bn.C}, acc_options);
  const Tensor scratch = workspace(detail::batch_norm_workspace_bytes(bn, x.dtype()), x);
  HG_CUDA_CHECK(detail::launch_batch_norm_backward(
                    dyc.data_ptr(), xc.data_ptr(), mu.data_ptr(), rs.data_ptr(), pointer(w),
                    result.dx.data_ptr(), dweight.data_ptr(), dbias.data_ptr(), training,
                    mutable_pointer(scratch), x.dtype(), bn, current_stream()),
                op);
  if (weight.defined()) result.dweight = dweight.to(weight.dtype());
  if (has_bias) result.dbias = dbias.to(weight.defined() ? weight.dtype() : x.dtype());
  return result;
}

}  // namespace hg::cuda
