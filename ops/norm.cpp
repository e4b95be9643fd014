// The norm family's ops: softmax, log_softmax, layer_norm, group_norm and batch_norm, forward
// (the kernels of kernel/norm.h) and backward of each, in op_list.def's order.
//
// Dims: N batch, C channels, G groups; M the count of values one norm statistic covers.
//
// NOTE [Differentiable nn backwards] A first-order backward runs the fused kernel of its
// family's table (kernel/norm.h, conv.h, pool.h, embedding.h). When the backward pass is
// itself recorded (create_graph: a gradient penalty, a Hessian-vector product) a kernel's
// result would be a constant to autograd, so:
//  - softmax, log_softmax and the three norms switch to formulas written with halfgrad ops (as
//    Gelu does), the norms recomputing their statistics from x so that those depend on x too;
//  - dropout and prelu are op formulas always;
//  - embedding, avg_pool2d and conv2d record their backward as ops of their own
//    (embedding_backward, avg_pool2d_backward, conv2d_input_backward, conv2d_weight_backward).
//    Each is linear in the incoming gradient, and the backward of a linear map's adjoint is the
//    map itself, so their backwards are embedding, avg_pool2d and conv2d again: every order of
//    derivative is available;
//  - max_pool2d's backward scatters dy onto the argmax positions, which is embedding_backward
//    over the flattened (plane, position) rows, so it records that.
// The norms' part is here; the others' in ops/embedding.cpp, conv.cpp, pool.cpp, dropout.cpp
// and activation.cpp.
#include <optional>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/nn_helpers.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

using ops::all_but_channels;

// The dtype the op formulas compute in (as the kernels): float32 for 16-bit floats.
DType acc_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// t in dtype; undefined stays undefined.
Tensor as_dtype(const Tensor& t, DType dtype) {
  return !t.defined() || t.dtype() == dtype ? t : t.to(dtype);
}

// sum over dims, where an empty list means no dim (sum() itself reads {} as every dim).
Tensor sum_over(const Tensor& t, const Shape& dims) { return dims.empty() ? t : sum(t, dims); }

// The dims [first, last) as a list.
Shape dim_range(int64_t first, int64_t last) {
  Shape dims{};
  for (int64_t d = first; d < last; ++d) dims.push_back(d);
  return dims;
}

// The shape [1, C, 1, ...] that broadcasts a per-channel [C] tensor against an [N, C, *] one.
Shape channel_shape(int64_t C, int64_t ndim) {
  Shape shape(size_t(ndim), 1);
  shape[1] = C;
  return shape;
}

// ---- op formulas for the norms' backward (create_graph) ------------------------------------
//
// out = xhat * w + b with xhat = (x - mean) * rstd over a set of M values. With g = dy * w:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw = sum(dy * xhat),  db = sum(dy).

struct Normalized {
  Tensor xhat;
  Tensor rstd;  // keepdim: broadcasts against x
};

// The statistics over dims, recomputed with ops so that they depend on x (biased variance).
Normalized standardize(const Tensor& x, const Shape& dims, double eps) {
  const Tensor centered = sub(x, mean(x, dims, /*keepdim=*/true));
  const Tensor rstd = rsqrt(add(mean(mul(centered, centered), dims, /*keepdim=*/true), eps));
  return {mul(centered, rstd), rstd};
}

Tensor normalized_input_grad(const Tensor& g, const Normalized& n, const Shape& dims) {
  const Tensor mean_g = mean(g, dims, /*keepdim=*/true);
  const Tensor mean_gx = mean(mul(g, n.xhat), dims, /*keepdim=*/true);
  return mul(n.rstd, sub(sub(g, mean_g), mul(n.xhat, mean_gx)));
}

// The gradients of one norm call, each in its input's dtype.
struct NormGrads {
  Tensor dx, dweight, dbias;
};

// Puts a norm's gradients where the inputs that need them are: x, then weight and bias at
// weight_input and weight_input + 1.
Grads norm_grads(OpContext& ctx, size_t inputs, size_t weight_input, NormGrads g) {
  Grads out(inputs);
  if (ctx.needs_input_grad(0)) out[0] = std::move(g.dx);
  if (ctx.needs_input_grad(weight_input)) out[weight_input] = std::move(g.dweight);
  if (ctx.needs_input_grad(weight_input + 1)) out[weight_input + 1] = std::move(g.dbias);
  return out;
}

// The dtypes a norm's parameter gradients come back in.
struct ParamDtypes {
  DType weight = kFloat32;
  DType bias = kFloat32;
  bool has_bias = false;
  void remember(const Tensor& weight_tensor, const Tensor& bias_tensor) {
    if (weight_tensor.defined()) weight = weight_tensor.dtype();
    has_bias = bias_tensor.defined();
    if (has_bias) bias = bias_tensor.dtype();
  }
};

// ---- softmax / log_softmax --------------------------------------------------------------------

template <OpId Id>
struct Softmax {
  static constexpr OpId id = Id;
  static constexpr bool kLog = Id == OpId::log_softmax;
  int64_t dim = 0;
  std::optional<DType> dtype{};
  DType input_dtype = kFloat32;

  bool autocast_eligible() const { return !dtype.has_value(); }
  Tensor forward(OpContext& ctx, const Tensor& x) {
    const char* name = kLog ? "log_softmax" : "softmax";
    HG_CHECK(!dtype || is_floating_point(*dtype),
             "{}: expected a floating dtype argument (float32, float16, bfloat16 or float64), got "
             "dtype={}",
             name, *dtype);
    dim = wrap_dim(dim, x.dim(), name);
    input_dtype = x.dtype();
    const Tensor in = dtype ? x.to(*dtype) : x;
    Tensor y =
        kLog ? kernel_for::norm(in).log_softmax(in, dim) : kernel_for::norm(in).softmax(in, dim);
    ctx.save_output(y);
    return y;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor y = ctx.saved(0);
    const Tensor& dy = grads[0];
    if (!autograd::is_grad_enabled()) {
      const Tensor dx = kLog ? kernel_for::norm(dy).log_softmax_backward(dy, y, dim)
                             : kernel_for::norm(dy).softmax_backward(dy, y, dim);
      return {as_dtype(dx, input_dtype)};
    }
    // softmax: y (dy - sum(dy y)); log_softmax: dy - exp(y) sum(dy); sums along dim.
    const DType acc = acc_dtype(y.dtype());
    const Tensor g = dy.to(acc), out = y.to(acc);
    const Tensor dx = kLog ? sub(g, mul(exp(out), sum(g, {dim}, /*keepdim=*/true)))
                           : mul(out, sub(g, sum(mul(g, out), {dim}, /*keepdim=*/true)));
    return {as_dtype(dx, input_dtype)};
  }
};

// ---- layer_norm: x [*, normalized_shape], statistics per leading index ----------------------

struct LayerNorm {
  static constexpr OpId id = OpId::layer_norm;
  Shape normalized_shape{};
  double eps = 1e-5;
  ParamDtypes params{};

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    kernel::NormForward r = kernel_for::norm(x).layer_norm(x, normalized_shape, weight, bias, eps);
    params.remember(weight, bias);
    ctx.save({x, weight, r.mean, r.rstd});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), weight = ctx.saved(1);
    const bool bias_grad = params.has_bias && ctx.needs_input_grad(2);
    if (!autograd::is_grad_enabled()) {
      kernel::NormBackward r = kernel_for::norm(grads[0]).layer_norm_backward(
          grads[0], x, ctx.saved(2), ctx.saved(3), normalized_shape, weight, bias_grad);
      return norm_grads(ctx, 3, 1, {r.dx, r.dweight, as_dtype(r.dbias, params.bias)});
    }
    const int64_t leading = x.dim() - int64_t(normalized_shape.size());
    const Shape norm_dims = dim_range(leading, x.dim()), batch_dims = dim_range(0, leading);
    const DType acc = acc_dtype(x.dtype());
    const Tensor xa = x.to(acc), dy = grads[0].to(acc);
    const Normalized n = standardize(xa, norm_dims, eps);
    const Tensor g = weight.defined() ? mul(dy, weight.to(acc)) : dy;  // weight: trailing dims
    NormGrads out;
    if (ctx.needs_input_grad(0)) out.dx = normalized_input_grad(g, n, norm_dims).to(x.dtype());
    if (weight.defined()) out.dweight = sum_over(mul(dy, n.xhat), batch_dims).to(params.weight);
    if (bias_grad) out.dbias = sum_over(dy, batch_dims).to(params.bias);
    return norm_grads(ctx, 3, 1, std::move(out));
  }
};

// ---- group_norm: x [N, C, *], statistics per (sample, group of C / G channels) ---------------

struct GroupNorm {
  static constexpr OpId id = OpId::group_norm;
  int64_t num_groups = 1;
  double eps = 1e-5;
  ParamDtypes params{};

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    kernel::NormForward r = kernel_for::norm(x).group_norm(x, num_groups, weight, bias, eps);
    params.remember(weight, bias);
    ctx.save({x, weight, r.mean, r.rstd});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), weight = ctx.saved(1);
    const bool bias_grad = params.has_bias && ctx.needs_input_grad(2);
    if (!autograd::is_grad_enabled()) {
      kernel::NormBackward r = kernel_for::norm(grads[0]).group_norm_backward(
          grads[0], x, ctx.saved(2), ctx.saved(3), num_groups, weight, bias_grad);
      return norm_grads(ctx, 3, 1, {r.dx, r.dweight, as_dtype(r.dbias, params.bias)});
    }
    // Groups as rows: x [N, C, *] -> [N, G, M], M = C / G * prod(*).
    const int64_t N = x.size(0), C = x.size(1);
    const Shape grouped{N, num_groups, N * num_groups == 0 ? 0 : x.numel() / (N * num_groups)};
    const DType acc = acc_dtype(x.dtype());
    const Tensor xa = x.to(acc), dy = grads[0].to(acc);
    const Normalized n = standardize(xa.reshape(grouped), {2}, eps);
    const Tensor g =
        weight.defined() ? mul(dy, weight.to(acc).reshape(channel_shape(C, x.dim()))) : dy;
    NormGrads out;
    if (ctx.needs_input_grad(0)) {
      out.dx = normalized_input_grad(g.reshape(grouped), n, {2}).reshape(x.sizes()).to(x.dtype());
    }
    const Shape reduced = all_but_channels(x.dim());
    if (weight.defined()) {
      out.dweight = sum(mul(dy, n.xhat.reshape(x.sizes())), reduced).to(params.weight);
    }
    if (bias_grad) out.dbias = sum(dy, reduced).to(params.bias);
    return norm_grads(ctx, 3, 1, std::move(out));
  }
};

// ---- batch_norm: x [N, C, *], statistics per channel ------------------------------------------
// Inputs: x, running_mean, running_var, weight, bias. The running statistics get no gradient.

struct BatchNorm {
  static constexpr OpId id = OpId::batch_norm;
  bool training = false;
  double momentum = 0.1;
  double eps = 1e-5;
  ParamDtypes params{};

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& running_mean,
                 const Tensor& running_var, const Tensor& weight, const Tensor& bias) {
    kernel::NormForward r = kernel_for::norm(x).batch_norm(x, running_mean, running_var, weight,
                                                           bias, training, momentum, eps);
    params.remember(weight, bias);
    ctx.save({x, weight, r.mean, r.rstd});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), weight = ctx.saved(1);
    const Tensor mean_used = ctx.saved(2), rstd_used = ctx.saved(3);
    const bool bias_grad = params.has_bias && ctx.needs_input_grad(4);
    if (!autograd::is_grad_enabled()) {
      kernel::NormBackward r = kernel_for::norm(grads[0]).batch_norm_backward(
          grads[0], x, mean_used, rstd_used, weight, bias_grad, training);
      return norm_grads(ctx, 5, 3, {r.dx, r.dweight, as_dtype(r.dbias, params.bias)});
    }
    const int64_t C = x.size(1);
    const Shape reduced = all_but_channels(x.dim()), per_channel = channel_shape(C, x.dim());
    const DType acc = acc_dtype(x.dtype());
    const Tensor xa = x.to(acc), dy = grads[0].to(acc);
    const Tensor g = weight.defined() ? mul(dy, weight.to(acc).reshape(per_channel)) : dy;
    NormGrads out;
    Tensor xhat;
    if (training) {
      const Normalized n = standardize(xa, reduced, eps);
      if (ctx.needs_input_grad(0)) out.dx = normalized_input_grad(g, n, reduced).to(x.dtype());
      xhat = n.xhat;
    } else {  // the running statistics are constants
      const Tensor rstd = rstd_used.to(acc).reshape(per_channel);
      out.dx = mul(g, rstd).to(x.dtype());
      xhat = mul(sub(xa, mean_used.to(acc).reshape(per_channel)), rstd);
    }
    if (weight.defined()) out.dweight = sum(mul(dy, xhat), reduced).to(params.weight);
    if (bias_grad) out.dbias = sum(dy, reduced).to(params.bias);
    return norm_grads(ctx, 5, 3, std::move(out));
  }
};

}  // namespace

// ---- the public functions -------------------------------------------------------------------

namespace {

// softmax(-x): torch's softmin, float32 under autocast unless the caller passes a dtype, as
// softmax.
struct Softmin {
  static constexpr OpId id = OpId::softmin;
  static constexpr bool kComposite = true;
  int64_t dim = -1;
  std::optional<DType> dtype{};
  bool autocast_eligible() const { return !dtype.has_value(); }
  Tensor forward(OpContext&, const Tensor& x) {
    HG_CHECK(x.is_floating_point() || dtype.has_value(),
             "softmin: expected a floating tensor or a dtype argument, got {}", x.dtype());
    return softmax(neg(dtype ? x.to(*dtype) : x), wrap_dim(dim, x.dim(), "softmin"));
  }
};

}  // namespace

Tensor softmin(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return dispatch(Softmin{.dim = dim, .dtype = dtype}, x);
}

Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return dispatch(Softmax<OpId::softmax>{.dim = dim, .dtype = dtype}, x);
}
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return dispatch(Softmax<OpId::log_softmax>{.dim = dim, .dtype = dtype}, x);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  return dispatch(LayerNorm{.normalized_shape = normalized_shape, .eps = eps}, x, weight, bias);
}
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  return dispatch(GroupNorm{.num_groups = num_groups, .eps = eps}, x, weight, bias);
}
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  return dispatch(BatchNorm{.training = training, .momentum = momentum, .eps = eps}, x,
                  running_mean, running_var, weight, bias);
}

}  // namespace hg
