// Neural-network ops: forward (cpu/nn_kernels.h) and backward of each, in op_list.def's order.
//
// Dims: N batch, C channels, G groups, O output channels, H/W height/width, D the embedding
// width; M the count of values one norm statistic covers.
//
// NOTE [Differentiable nn backwards] A first-order backward runs the fused kernel of
// cpu/nn_kernels.h. When the backward pass is itself recorded (create_graph: a gradient
// penalty, a Hessian-vector product) a kernel's result would be a constant to autograd, so:
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
#include <cmath>
#include <string>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/view.h"
#include "halfgrad/cpu/elementwise.h"
#include "halfgrad/cpu/index.h"
#include "halfgrad/cpu/nn_kernels.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernels.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

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

// Every dim of an [N, C, *] tensor but the channels: [0, 2, 3, ...].
Shape all_but_channels(int64_t ndim) {
  Shape dims{0};
  for (int64_t d = 2; d < ndim; ++d) dims.push_back(d);
  return dims;
}

// The shape [1, C, 1, ...] that broadcasts a per-channel [C] tensor against an [N, C, *] one.
Shape channel_shape(int64_t C, int64_t ndim) {
  Shape shape(size_t(ndim), 1);
  shape[1] = C;
  return shape;
}

// A fresh contiguous kernel result given another shape of the same numel, as a tensor of its
// own (not a view of an internal temporary).
Tensor reshaped_result(const Tensor& fresh, const Shape& sizes) {
  return Tensor(make_pooled<TensorImpl>(fresh.impl()->storage(), fresh.dtype(), sizes,
                                        contiguous_strides(sizes), fresh.storage_offset()));
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
Normalized normalize(const Tensor& x, const Shape& dims, double eps) {
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
    Tensor y = kLog ? kernels::log_softmax(in, dim) : kernels::softmax(in, dim);
    ctx.save_output(y);
    return y;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor y = ctx.saved(0);
    const Tensor& dy = grads[0];
    if (!autograd::is_grad_enabled()) {
      const Tensor dx =
          kLog ? kernels::log_softmax_backward(dy, y, dim) : kernels::softmax_backward(dy, y, dim);
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
    cpu::NormForward r = kernels::layer_norm(x, normalized_shape, weight, bias, eps);
    params.remember(weight, bias);
    ctx.save({x, weight, r.mean, r.rstd});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), weight = ctx.saved(1);
    const bool bias_grad = params.has_bias && ctx.needs_input_grad(2);
    if (!autograd::is_grad_enabled()) {
      cpu::NormBackward r = kernels::layer_norm_backward(grads[0], x, ctx.saved(2), ctx.saved(3),
                                                         normalized_shape, weight, bias_grad);
      return norm_grads(ctx, 3, 1, {r.dx, r.dweight, as_dtype(r.dbias, params.bias)});
    }
    const int64_t leading = x.dim() - int64_t(normalized_shape.size());
    const Shape norm_dims = dim_range(leading, x.dim()), batch_dims = dim_range(0, leading);
    const DType acc = acc_dtype(x.dtype());
    const Tensor xa = x.to(acc), dy = grads[0].to(acc);
    const Normalized n = normalize(xa, norm_dims, eps);
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
    cpu::NormForward r = kernels::group_norm(x, num_groups, weight, bias, eps);
    params.remember(weight, bias);
    ctx.save({x, weight, r.mean, r.rstd});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), weight = ctx.saved(1);
    const bool bias_grad = params.has_bias && ctx.needs_input_grad(2);
    if (!autograd::is_grad_enabled()) {
      cpu::NormBackward r = kernels::group_norm_backward(grads[0], x, ctx.saved(2), ctx.saved(3),
                                                         num_groups, weight, bias_grad);
      return norm_grads(ctx, 3, 1, {r.dx, r.dweight, as_dtype(r.dbias, params.bias)});
    }
    // Groups as rows: x [N, C, *] -> [N, G, M], M = C / G * prod(*).
    const int64_t N = x.size(0), C = x.size(1);
    const Shape grouped{N, num_groups, N * num_groups == 0 ? 0 : x.numel() / (N * num_groups)};
    const DType acc = acc_dtype(x.dtype());
    const Tensor xa = x.to(acc), dy = grads[0].to(acc);
    const Normalized n = normalize(xa.reshape(grouped), {2}, eps);
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
    cpu::NormForward r =
        kernels::batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps);
    params.remember(weight, bias);
    ctx.save({x, weight, r.mean, r.rstd});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), weight = ctx.saved(1);
    const Tensor mean_used = ctx.saved(2), rstd_used = ctx.saved(3);
    const bool bias_grad = params.has_bias && ctx.needs_input_grad(4);
    if (!autograd::is_grad_enabled()) {
      cpu::NormBackward r = kernels::batch_norm_backward(grads[0], x, mean_used, rstd_used, weight,
                                                         bias_grad, training);
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
      const Normalized n = normalize(xa, reduced, eps);
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

// ---- embedding: weight [num_embeddings, D], indices [*] -> [*, D] ----------------------------

struct Embedding {
  static constexpr OpId id = OpId::embedding;
  int64_t padding_idx = -1;
  int64_t num_embeddings = 0;

  Tensor forward(OpContext& ctx, const Tensor& weight, const Tensor& indices) {
    HG_CHECK(weight.defined() && weight.dim() == 2,
             "embedding: expected a 2-D weight [num_embeddings, D], got {}",
             weight.defined() ? fmt::format("{}-D (shape {})", weight.dim(), weight.sizes())
                              : std::string("an undefined tensor"));
    HG_CHECK(indices.defined() && (indices.dtype() == kInt64 || indices.dtype() == kInt32),
             "embedding: expected indices of dtype int64 or int32, got {}",
             indices.defined() ? std::string(dtype_name(indices.dtype())) : "an undefined tensor");
    num_embeddings = weight.size(0);
    HG_CHECK(padding_idx >= -1 && padding_idx < num_embeddings,
             "embedding: expected padding_idx in [-1, {}) (-1 for none), got {}", num_embeddings,
             padding_idx);
    const Tensor flat = core::reshape(indices, {indices.numel()});
    if (indices.is_cpu()) {
      const std::vector<int64_t> rows = flat.to_vector<int64_t>();
      for (size_t t = 0; t < rows.size(); ++t) {
        HG_CHECK(rows[t] >= 0 && rows[t] < num_embeddings,
                 "embedding: expected indices in [0, {}) (num_embeddings), got {} at element {}",
                 num_embeddings, rows[t], t);
      }
    }  // (on CUDA, index_select checks them on the device: NOTE [Index checks on the device])
    Shape out_sizes = indices.sizes();
    out_sizes.push_back(weight.size(1));
    ctx.save({indices});
    return reshaped_result(kernels::index(weight).index_select(weight, 0, flat), out_sizes);
  }
  Grads backward(OpContext& ctx, const Grads& grads);
};

// The weight's gradient: dy [*, D]'s rows added into the rows they were gathered from.
struct EmbeddingBackward {
  static constexpr OpId id = OpId::embedding_backward;
  int64_t num_embeddings = 0;
  int64_t padding_idx = -1;

  Tensor forward(OpContext& ctx, const Tensor& dy, const Tensor& indices) {
    ctx.save({indices});
    return kernels::embedding_backward(dy, indices, num_embeddings, padding_idx);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    // The adjoint: the rows gathered again, none for tokens of padding_idx.
    const Tensor indices = ctx.saved(0);
    Tensor g = dispatch(Embedding{.padding_idx = padding_idx}, grads[0], indices);
    if (padding_idx >= 0) g = mul(g, ne(indices, padding_idx).to(g.dtype()).unsqueeze(-1));
    return {g, Tensor()};
  }
};

Grads Embedding::backward(OpContext& ctx, const Grads& grads) {
  const Tensor indices = ctx.saved(0);
  return {dispatch(EmbeddingBackward{num_embeddings, padding_idx}, grads[0], indices), Tensor()};
}

// ---- dropout ----------------------------------------------------------------------------------

struct Dropout {
  static constexpr OpId id = OpId::dropout;
  double p = 0.5;
  Generator* generator = nullptr;

  Tensor forward(OpContext& ctx, const Tensor& x) {
    cpu::DropoutForward r = kernels::dropout(x, p, generator ? *generator : default_generator());
    ctx.save({r.mask});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) { return {mul(grads[0], ctx.saved(0))}; }
};

// ---- conv2d: x [N, C, H, W], weight [O, C / groups, kH, kW], bias [O] -> [N, O, Hout, Wout] ---

// Stands in for a tensor the kernel needs only the shape and dtype of (no memory).
Tensor shape_only(const Shape& sizes, DType dtype, Device device) {
  return core::expand(full({}, 0, {.dtype = dtype, .device = device}), sizes);
}

struct Conv2d {
  static constexpr OpId id = OpId::conv2d;
  cpu::Conv2dParams params{};
  bool has_bias = false;

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    has_bias = bias.defined();
    Tensor y = kernels::conv2d(x, weight, bias, params);
    ctx.save({x, weight});
    return y;
  }
  Grads backward(OpContext& ctx, const Grads& grads);
};

// dx from dy [N, O, Hout, Wout] and the weight: bilinear in both. Its backward, from
// <G, dx(dy, w)> = <dy, conv2d(G, w)> = <w, dweight(dy, G)>, is conv2d and the weight's one.
struct Conv2dInputBackward {
  static constexpr OpId id = OpId::conv2d_input_backward;
  cpu::Conv2dParams params{};
  Shape input_sizes{};

  Tensor forward(OpContext& ctx, const Tensor& dy, const Tensor& weight) {
    ctx.save({dy, weight});
    return kernels::conv2d_backward(dy, shape_only(input_sizes, dy.dtype(), dy.device()), weight,
                                    false, params, {true, false, false})
        .dx;
  }
  Grads backward(OpContext& ctx, const Grads& grads);
};

// dweight from dy and x: bilinear in both. Its backward, from
// <H, dweight(dy, x)> = <dy, conv2d(x, H)> = <x, dx(dy, H)>, is conv2d and the input's one.
struct Conv2dWeightBackward {
  static constexpr OpId id = OpId::conv2d_weight_backward;
  cpu::Conv2dParams params{};
  Shape weight_sizes{};

  Tensor forward(OpContext& ctx, const Tensor& dy, const Tensor& x) {
    ctx.save({dy, x});
    return kernels::conv2d_backward(dy, x, shape_only(weight_sizes, dy.dtype(), dy.device()), false,
                                    params, {false, true, false})
        .dweight;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor dy = ctx.saved(0), x = ctx.saved(1);
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = dispatch(Conv2d{.params = params}, x, grads[0], Tensor());
    if (ctx.needs_input_grad(1)) {
      out[1] = dispatch(Conv2dInputBackward{params, x.sizes()}, dy, grads[0]);
    }
    return out;
  }
};

Grads Conv2dInputBackward::backward(OpContext& ctx, const Grads& grads) {
  const Tensor dy = ctx.saved(0), weight = ctx.saved(1);
  Grads out(2);
  if (ctx.needs_input_grad(0)) {
    out[0] = dispatch(Conv2d{.params = params}, grads[0], weight, Tensor());
  }
  if (ctx.needs_input_grad(1)) {
    out[1] = dispatch(Conv2dWeightBackward{params, weight.sizes()}, dy, grads[0]);
  }
  return out;
}

Grads Conv2d::backward(OpContext& ctx, const Grads& grads) {
  const Tensor x = ctx.saved(0), weight = ctx.saved(1);
  const Tensor& dy = grads[0];
  const bool bias_grad = has_bias && ctx.needs_input_grad(2);
  if (!autograd::is_grad_enabled()) {
    cpu::Conv2dBackward r =
        kernels::conv2d_backward(dy, x, weight, has_bias, params,
                                 {ctx.needs_input_grad(0), ctx.needs_input_grad(1), bias_grad});
    return {r.dx, r.dweight, r.dbias};
  }
  Grads out(3);
  if (ctx.needs_input_grad(0)) {
    out[0] = dispatch(Conv2dInputBackward{params, x.sizes()}, dy, weight);
  }
  if (ctx.needs_input_grad(1)) {
    out[1] = dispatch(Conv2dWeightBackward{params, weight.sizes()}, dy, x);
  }
  if (bias_grad) out[2] = sum(dy, {0, 2, 3});
  return out;
}

// ---- max_pool2d: x [N, C, H, W] or [C, H, W] ---------------------------------------------------

struct MaxPool2d {
  static constexpr OpId id = OpId::max_pool2d;
  cpu::Pool2dParams params{};
  Shape input_sizes{};

  Tensor forward(OpContext& ctx, const Tensor& x) {
    cpu::MaxPoolForward r = kernels::max_pool2d(x, params);
    input_sizes = x.sizes();
    ctx.save({r.indices});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor indices = ctx.saved(0);
    const Tensor& dy = grads[0];
    if (!autograd::is_grad_enabled()) {
      return {kernels::max_pool2d_backward(dy, indices, input_sizes)};
    }
    // Row plane * H * W + index of the flattened input takes each dy value.
    const size_t dims = input_sizes.size();
    const int64_t plane_size = input_sizes[dims - 2] * input_sizes[dims - 1];
    const int64_t per_plane = dy.size(-2) * dy.size(-1);
    std::vector<int64_t> rows = indices.to_vector<int64_t>();
    for (size_t i = 0; i < rows.size(); ++i) rows[i] += int64_t(i) / per_plane * plane_size;
    const int64_t input_numel = shape_numel(input_sizes);
    const Tensor dx = dispatch(EmbeddingBackward{input_numel, -1}, dy.reshape({dy.numel(), 1}),
                               tensor(rows, kInt64).to(dy.device()));
    return {dx.reshape(input_sizes)};
  }
};

// ---- avg_pool2d: x [N, C, H, W] or [C, H, W] ---------------------------------------------------

struct AvgPool2d {
  static constexpr OpId id = OpId::avg_pool2d;
  cpu::Pool2dParams params{};
  Shape input_sizes{};

  Tensor forward(OpContext&, const Tensor& x) {
    input_sizes = x.sizes();
    return kernels::avg_pool2d(x, params);
  }
  Grads backward(OpContext& ctx, const Grads& grads);
};

// Each dy value shared out over its window: the adjoint of avg_pool2d (same windows and
// divisors), whose backward is therefore avg_pool2d.
struct AvgPool2dBackward {
  static constexpr OpId id = OpId::avg_pool2d_backward;
  cpu::Pool2dParams params{};
  Shape input_sizes{};

  Tensor forward(OpContext&, const Tensor& dy) {
    return kernels::avg_pool2d_backward(dy, input_sizes, params);
  }
  Grads backward(OpContext&, const Grads& grads) {
    return {dispatch(AvgPool2d{.params = params}, grads[0])};
  }
};

Grads AvgPool2d::backward(OpContext&, const Grads& grads) {
  return {dispatch(AvgPool2dBackward{params, input_sizes}, grads[0])};
}

// ---- prelu: x [N, C, *] (or any shape with one weight), weight [C] or one element -----------

// The shape weight takes to broadcast against x: [C, 1, ...] lined up with x's dim 1, or 0-d.
Shape prelu_weight_shape(const Tensor& x, const Tensor& weight) {
  if (weight.numel() == 1) return {};
  Shape shape(size_t(x.dim() - 1), 1);
  shape[0] = weight.numel();
  return shape;
}

struct Prelu {
  static constexpr OpId id = OpId::prelu;

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight) {
    HG_CHECK(x.defined() && weight.defined(), "prelu: expected an input and a weight, got {}",
             x.defined() ? "no weight" : "no input");
    HG_CHECK(x.is_floating_point(),
             "prelu: expected an input of a floating dtype (float32, float16, bfloat16 or "
             "float64), got {}",
             x.dtype());
    HG_CHECK(weight.dtype() == x.dtype(),
             "prelu: expected a weight of the input's dtype {}, got {}", x.dtype(), weight.dtype());
    HG_CHECK(weight.dim() <= 1, "prelu: expected a 0-D or 1-D weight, got {}-D (shape {})",
             weight.dim(), weight.sizes());
    if (weight.numel() != 1) {
      const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
      HG_CHECK(x.dim() > 0 && weight.numel() == channels,
               "prelu: expected a weight of 1 element or one per channel (C={}, input shape {}), "
               "got {} elements",
               channels, x.sizes(), weight.numel());
    }
    ctx.save({x, weight});
    const Tensor w = core::reshape(weight, prelu_weight_shape(x, weight));
    const Tensor scaled = kernels::binary(cpu::Binary::Mul, x, w, x.dtype());
    const Tensor positive =
        kernels::compare(cpu::Compare::Gt, x, full({}, 0, x.options()), x.dtype());
    return kernels::where(positive, x, scaled);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), weight = ctx.saved(1);
    const Tensor& g = grads[0];
    Grads out(2);
    if (ctx.needs_input_grad(0)) {  // 1 where x > 0, weight elsewhere
      const Tensor positive = gt(x, 0).to(x.dtype());
      const Tensor w = weight.reshape(prelu_weight_shape(x, weight));
      out[0] = mul(g, add(positive, mul(1.0 - positive, w)));
    }
    if (ctx.needs_input_grad(1)) {  // min(x, 0), summed over all but the channels
      const Tensor per_element = mul(g, minimum(x, full({}, 0, x.options())));
      const Tensor reduced =
          weight.numel() == 1 ? sum(per_element) : sum(per_element, all_but_channels(x.dim()));
      out[1] = reduced.reshape(weight.sizes());
    }
    return out;
  }
};

}  // namespace

// ---- the public functions -------------------------------------------------------------------

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

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  return dispatch(Embedding{.padding_idx = padding_idx}, weight, indices);
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  HG_CHECK(p >= 0.0 && p <= 1.0, "dropout: expected a probability p in [0, 1], got p={}", p);
  if (!training) return x;  // as torch: the input itself
  return dispatch(Dropout{.p = p, .generator = generator}, x);
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
              std::array<int64_t, 2> dilation, int64_t groups) {
  HG_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4),
           "conv2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got {}",
           x.defined() ? fmt::format("{}-D (shape {})", x.dim(), x.sizes())
                       : std::string("an undefined tensor"));
  const Conv2d op{.params = {stride, padding, dilation, groups}};
  if (x.dim() == 3) return dispatch(op, x.unsqueeze(0), weight, bias).squeeze(0);  // unbatched
  return dispatch(op, x, weight, bias);
}

Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride, std::array<int64_t, 2> padding) {
  return dispatch(MaxPool2d{.params = {kernel_size, stride, padding}}, x);
}
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                  bool count_include_pad) {
  return dispatch(AvgPool2d{.params = {kernel_size, stride, padding, count_include_pad}}, x);
}

Tensor prelu(const Tensor& x, const Tensor& weight) { return dispatch(Prelu{}, x, weight); }

}  // namespace hg
