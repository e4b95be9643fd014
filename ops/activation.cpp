// prelu, the activation with a per-channel weight: forward and backward (op formulas, NOTE
// [Differentiable nn backwards] in ops/norm.cpp); leaky_relu, elu and glu, composites of the
// elementwise ops.
//
// Dims: N batch, C channels.
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/view.h"
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
    const kernel::ElementwiseKernels& k = kernel_for::elementwise(x);
    const Tensor scaled = k.binary(kernel::Binary::Mul, x, w, x.dtype(), 1.0);
    const Tensor positive = k.compare(kernel::Compare::Gt, x, full({}, 0, x.options()), x.dtype());
    return k.where(positive, x, scaled);
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

// ---- leaky_relu, elu, glu: composites ---------------------------------------------------------

void check_floating(const Tensor& x, OpId id) {
  HG_CHECK(x.defined(), "{}: expected a defined tensor, got an undefined one", op_name(id));
  HG_CHECK(x.is_floating_point(), "{}: expected a floating tensor, got {}", op_name(id), x.dtype());
}

// x where x > 0, else negative_slope x (the slope's side at 0, as torch's gradient).
struct LeakyRelu {
  static constexpr OpId id = OpId::leaky_relu;
  static constexpr bool kComposite = true;
  double negative_slope = 0.01;
  Tensor forward(OpContext&, const Tensor& x) {
    check_floating(x, id);
    return where(gt(x.detach(), 0), x, mul(x, negative_slope));
  }
};

// x where x > 0, else alpha (e^x - 1). The exponential reads min(x, 0), so that the side where
// does not take never overflows into a NaN gradient.
struct Elu {
  static constexpr OpId id = OpId::elu;
  static constexpr bool kComposite = true;
  double alpha = 1.0;
  Tensor forward(OpContext&, const Tensor& x) {
    check_floating(x, id);
    const Tensor negative_side = mul(expm1(clamp(x, std::nullopt, Scalar(0))), alpha);
    return where(gt(x.detach(), 0), x, negative_side);
  }
};

// a sigmoid(b), a and b the two halves of x along dim.
struct Glu {
  static constexpr OpId id = OpId::glu;
  static constexpr bool kComposite = true;
  int64_t dim = -1;
  Tensor forward(OpContext&, const Tensor& x) {
    check_floating(x, id);
    HG_CHECK(x.dim() > 0, "glu: expected a tensor of at least 1 dim, got a 0-d tensor");
    const int64_t d = wrap_dim(dim, x.dim(), "glu");
    HG_CHECK(x.size(d) % 2 == 0, "glu: expected an even size along dim {}, got {}", dim, x.size(d));
    const int64_t half = x.size(d) / 2;
    return mul(x.narrow(d, 0, half), sigmoid(x.narrow(d, half, half)));
  }
};

}  // namespace

// ---- the public functions -------------------------------------------------------------------

Tensor prelu(const Tensor& x, const Tensor& weight) { return dispatch(Prelu{}, x, weight); }
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return dispatch(LeakyRelu{.negative_slope = negative_slope}, x);
}
Tensor elu(const Tensor& x, double alpha) { return dispatch(Elu{.alpha = alpha}, x); }
Tensor glu(const Tensor& x, int64_t dim) { return dispatch(Glu{.dim = dim}, x); }

}  // namespace hg
