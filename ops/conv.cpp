// The conv family's ops: conv2d, forward (the kernel of kernel/conv.h) and backward, and
// the recorded backwards conv2d_input_backward and conv2d_weight_backward (NOTE
// [Differentiable nn backwards] in ops/norm.cpp).
//
// Dims: N batch, C channels, O output channels, H/W height/width.
#include <array>
#include <string>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/view.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

// ---- conv2d: x [N, C, H, W], weight [O, C / groups, kH, kW], bias [O] -> [N, O, Hout, Wout] ---

// Stands in for a tensor the kernel needs only the shape and dtype of (no memory).
Tensor shape_only(const Shape& sizes, DType dtype, Device device) {
  return core::expand(full({}, 0, {.dtype = dtype, .device = device}), sizes);
}

struct Conv2d {
  static constexpr OpId id = OpId::conv2d;
  kernel::Conv2dParams params{};
  bool has_bias = false;

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    has_bias = bias.defined();
    Tensor y = kernel_for::conv(x).conv2d(x, weight, bias, params);
    ctx.save({x, weight});
    return y;
  }
  Grads backward(OpContext& ctx, const Grads& grads);
};

// dx from dy [N, O, Hout, Wout] and the weight: bilinear in both. Its backward, from
// <G, dx(dy, w)> = <dy, conv2d(G, w)> = <w, dweight(dy, G)>, is conv2d and the weight's one.
struct Conv2dInputBackward {
  static constexpr OpId id = OpId::conv2d_input_backward;
  kernel::Conv2dParams params{};
  Shape input_sizes{};

  Tensor forward(OpContext& ctx, const Tensor& dy, const Tensor& weight) {
    ctx.save({dy, weight});
    return kernel_for::conv(dy)
        .conv2d_backward(dy, shape_only(input_sizes, dy.dtype(), dy.device()), weight, false,
                         params, {true, false, false})
        .dx;
  }
  Grads backward(OpContext& ctx, const Grads& grads);
};

// dweight from dy and x: bilinear in both. Its backward, from
// <H, dweight(dy, x)> = <dy, conv2d(x, H)> = <x, dx(dy, H)>, is conv2d and the input's one.
struct Conv2dWeightBackward {
  static constexpr OpId id = OpId::conv2d_weight_backward;
  kernel::Conv2dParams params{};
  Shape weight_sizes{};

  Tensor forward(OpContext& ctx, const Tensor& dy, const Tensor& x) {
    ctx.save({dy, x});
    return kernel_for::conv(dy)
        .conv2d_backward(dy, x, shape_only(weight_sizes, dy.dtype(), dy.device()), false, params,
                         {false, true, false})
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
    kernel::Conv2dBackward r = kernel_for::conv(dy).conv2d_backward(
        dy, x, weight, has_bias, params,
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

// ---- conv1d: x [N, C, L] or [C, L], weight [O, C / groups, K], as conv2d over a height of 1 --

struct Conv1d {
  static constexpr OpId id = OpId::conv1d;
  static constexpr bool kComposite = true;
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  Tensor forward(OpContext&, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    HG_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3),
             "conv1d: expected a 2-D [C, L] or 3-D [N, C, L] input, got {}",
             x.defined() ? fmt::format("{}-D (shape {})", x.dim(), x.sizes())
                         : std::string("an undefined tensor"));
    HG_CHECK(weight.defined() && weight.dim() == 3,
             "conv1d: expected a 3-D weight [O, C / groups, K], got {}",
             weight.defined() ? fmt::format("{}-D (shape {})", weight.dim(), weight.sizes())
                              : std::string("an undefined tensor"));
    return conv2d(x.unsqueeze(-2), weight.unsqueeze(-2), bias, {1, stride}, {0, padding},
                  {1, dilation}, groups)
        .squeeze(-2);
  }
};

// ---- conv_transpose2d: the adjoint of conv2d -------------------------------------------------
//
// x [N, Cin, H, W] with weight [Cin, Cout / groups, kH, kW] is conv2d's input gradient for a
// conv2d from Cout to Cin channels with that weight: each output size is (H - 1) stride - 2
// padding + dilation (k - 1) + output_padding + 1, as torch's.
struct ConvTranspose2d {
  static constexpr OpId id = OpId::conv_transpose2d;
  static constexpr bool kComposite = true;
  kernel::Conv2dParams params{};
  std::array<int64_t, 2> output_padding{0, 0};
  Tensor forward(OpContext&, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    HG_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4),
             "conv_transpose2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got {}",
             x.defined() ? fmt::format("{}-D (shape {})", x.dim(), x.sizes())
                         : std::string("an undefined tensor"));
    if (x.dim() == 3) return forward_batched(x.unsqueeze(0), weight, bias).squeeze(0);
    return forward_batched(x, weight, bias);
  }
  Tensor forward_batched(const Tensor& x, const Tensor& weight, const Tensor& bias) const {
    HG_CHECK(weight.defined() && weight.dim() == 4 && weight.size(0) == x.size(1),
             "conv_transpose2d: expected a weight [Cin = {}, Cout / groups, kH, kW], got {}",
             x.size(1),
             weight.defined() ? fmt::format("shape {}", weight.sizes())
                              : std::string("an undefined tensor"));
    Shape out_sizes{x.size(0), weight.size(1) * params.groups};
    for (int i = 0; i < 2; ++i) {
      HG_CHECK(output_padding[i] >= 0 &&
                   (output_padding[i] < params.stride[i] || output_padding[i] < params.dilation[i]),
               "conv_transpose2d: expected output_padding smaller than stride or dilation, got "
               "output_padding {} with stride {} and dilation {}",
               output_padding[i], params.stride[i], params.dilation[i]);
      const int64_t size = (x.size(2 + i) - 1) * params.stride[i] - 2 * params.padding[i] +
                           params.dilation[i] * (weight.size(2 + i) - 1) + output_padding[i] + 1;
      HG_CHECK(size > 0, "conv_transpose2d: the output would have size {} along dim {}", size,
               2 + i);
      out_sizes.push_back(size);
    }
    Tensor y = dispatch(Conv2dInputBackward{params, out_sizes}, x, weight);
    if (bias.defined()) y = add(y, bias.view({1, -1, 1, 1}));
    return y;
  }
};

}  // namespace

// ---- the public functions -------------------------------------------------------------------

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              ExpandingArray<2> stride, ExpandingArray<2> padding, ExpandingArray<2> dilation,
              int64_t groups) {
  HG_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4),
           "conv2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got {}",
           x.defined() ? fmt::format("{}-D (shape {})", x.dim(), x.sizes())
                       : std::string("an undefined tensor"));
  const Conv2d op{.params = {stride, padding, dilation, groups}};
  if (x.dim() == 3) return dispatch(op, x.unsqueeze(0), weight, bias).squeeze(0);  // unbatched
  return dispatch(op, x, weight, bias);
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  return dispatch(
      Conv1d{.stride = stride, .padding = padding, .dilation = dilation, .groups = groups}, x,
      weight, bias);
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        ExpandingArray<2> stride, ExpandingArray<2> padding,
                        ExpandingArray<2> output_padding, int64_t groups,
                        ExpandingArray<2> dilation) {
  return dispatch(ConvTranspose2d{.params = {stride, padding, dilation, groups},
                                  .output_padding = output_padding},
                  x, weight, bias);
}

}  // namespace hg
