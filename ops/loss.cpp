// Losses: forward and backward of each, in op_list.def's order.
//
// The forwards, and the fused first-order backwards where a backend has them, are the kernels of
// kernel/loss.h (NOTE [Loss kernels] there), which the input's device picks (kernel_for::loss);
// this file checks the arguments and writes the backward formulas as ops.
//
// Dims: N batch, C classes, S positions per sample. nll_loss and cross_entropy take input
// [N, C, d1, d2, ...] with S = d1 d2 ... (1 without trailing dims), or [C] for one sample
// (N = S = 1). A row is one position (n, s): its C values lie S apart, at (n C + c) S + s.
//
// NOTE [Loss shapes] torch broadcasts a target whose shape differs from input's for mse_loss,
// l1_loss, smooth_l1_loss and kl_div, with a warning (for the first three) because the result is
// rarely what was meant: a [N, 1] prediction against a [N] target gives a [N, N] loss. halfgrad
// has no warnings, so it asks for target of input's shape, as torch's binary cross entropies
// do. weight and pos_weight broadcast to input's shape.
//
// NOTE [Loss gradients] Backward formulas are halfgrad ops (create_graph works), except
// cross_entropy's first-order backward, one fused pass over the rows. Gradients flow to input;
// to target wherever torch differentiates it (every floating target: not class indices); and
// to the weights of the binary cross entropies, whose gradient is the unweighted loss. nll_loss
// and cross_entropy do not differentiate weight, as torch, and say so when asked to.
#include <numbers>
#include <optional>
#include <utility>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/format.h"
#include "halfgrad/kernel/loss.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/type_promotion.h"

namespace hg {

namespace {

using kernel::ClassLayout;
using kernel::ClassLossForward;
using kernel::LossReduction;
using kernel::PointwiseLoss;
using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

// ---- shared parts --------------------------------------------------------------------------

enum class Reduction : uint8_t { None, Mean, Sum, BatchMean };

Reduction parse_reduction(std::string_view reduction, const char* op) {
  const bool batchmean_allowed = std::string_view(op) == "kl_div";
  if (reduction == "none") return Reduction::None;
  if (reduction == "mean") return Reduction::Mean;
  if (reduction == "sum") return Reduction::Sum;
  if (batchmean_allowed && reduction == "batchmean") return Reduction::BatchMean;
  HG_ERROR("{}: expected reduction \"none\", \"mean\", {}\"sum\", got \"{}\"", op,
           batchmean_allowed ? "\"batchmean\" or " : "or ", reduction);
}

// The kernels' reduction: batchmean is a mean over the batch (mean_divisor).
LossReduction loss_reduction(Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return LossReduction::None;
    case Reduction::Sum:
      return LossReduction::Sum;
    default:
      return LossReduction::Mean;
  }
}

// What "mean" / "batchmean" divide by for a pointwise loss.
double mean_divisor(Reduction reduction, const Tensor& input) {
  if (reduction == Reduction::BatchMean) return input.dim() == 0 ? 1.0 : double(input.size(0));
  return double(input.numel());
}

// The gradient of each per-element loss, of shape `sizes`, from the gradient of the result.
Tensor loss_grad(const Tensor& grad, Reduction reduction, double divisor, const Shape& sizes) {
  switch (reduction) {
    case Reduction::None:
      return grad;
    case Reduction::Sum:
      return grad.expand(sizes);
    default:
      return div(grad, divisor).expand(sizes);
  }
}

// A gradient in the shape (summing broadcast dims) and dtype of `input`.
Tensor grad_for(const Tensor& grad, const Tensor& input) {
  const Tensor reduced = grad.sizes() == input.sizes() ? grad : sum_to_size(grad, input.sizes());
  return reduced.dtype() == input.dtype() ? reduced : reduced.to(input.dtype());
}

// input and target of a pointwise loss: floating, of one shape (NOTE [Loss shapes]). Returns
// the result dtype.
// A floating input, and another argument of its shape (NOTE [Loss shapes]).
void check_same_shapes(const char* op, const Tensor& input, const Tensor& other,
                       const char* other_name) {
  HG_CHECK(input.is_floating_point(), "{}: expected a floating input, got {}", op, input.dtype());
  HG_CHECK(other.sizes() == input.sizes(), "{}: expected {} of input's shape {}, got {}", op,
           other_name, input.sizes(), other.sizes());
}

DType check_pair(const Tensor& input, const Tensor& target, const char* op) {
  HG_CHECK(input.is_floating_point(), "{}: expected a floating input, got {}", op, input.dtype());
  HG_CHECK(target.is_floating_point(), "{}: expected a floating target, got {}", op,
           target.dtype());
  check_same_shapes(op, input, target, "target");
  return result_type({input, target});
}

// An optional elementwise weight: floating, broadcastable to input's shape.
void check_weight(const Tensor& weight, const Tensor& input, const char* op, const char* name) {
  if (!weight.defined()) return;
  HG_CHECK(weight.is_floating_point(), "{}: expected a floating {}, got {}", op, name,
           weight.dtype());
  HG_CHECK(broadcasts_to(weight.sizes(), input.sizes()),
           "{}: expected {} broadcastable to input's shape {}, got {}", op, name, input.sizes(),
           weight.sizes());
}

// The fused first-order backward of a pointwise loss whose inputs are (input, target, then
// weights): d_input and d_target in one pass, where input's backend has one. Empty where it
// does not apply: a recorded backward, a weight (input 2 or later) that needs its gradient, or
// none in the backend for these operands.
Grads fused_pointwise_backward(const OpContext& ctx, PointwiseLoss kind, const Tensor& grad,
                               const Tensor& input, const Tensor& target, const Tensor& weight,
                               const Tensor& pos_weight, Reduction reduction, double divisor,
                               size_t input_count, double beta = 1.0) {
  if (autograd::is_grad_enabled()) return {};
  for (size_t i = 2; i < input_count; ++i) {
    if (ctx.needs_input_grad(i)) return {};
  }
  std::optional<kernel::LossGrads> g = kernel_for::loss(input).pointwise_loss_backward(
      kind, grad, input, target, weight, pos_weight, loss_reduction(reduction), divisor,
      ctx.needs_input_grad(0), ctx.needs_input_grad(1), beta);
  if (!g) return {};
  Grads out(input_count);
  out[0] = std::move(g->input);
  out[1] = std::move(g->target);
  return out;
}

// The forward of a pointwise loss, on input's backend.
Tensor pointwise_forward(PointwiseLoss kind, const Tensor& input, const Tensor& target,
                         const Tensor& weight, const Tensor& pos_weight, Reduction reduction,
                         double divisor, DType dtype, double beta = 1.0) {
  return kernel_for::loss(input).pointwise_loss(kind, input, target, weight, pos_weight,
                                                loss_reduction(reduction), divisor, dtype, beta);
}

// ---- mse_loss --------------------------------------------------------------------------------

struct MseLoss {
  static constexpr OpId id = OpId::mse_loss;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& target) {
    const DType dtype = check_pair(input, target, "mse_loss");
    ctx.save({input, target});
    return pointwise_forward(PointwiseLoss::Mse, input, target, {}, {}, reduction,
                             double(input.numel()), dtype);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1);
    // (On the CPU: NOTE [Fused mse_loss backward] in cpu/loss.cpp.)
    if (Grads fused = fused_pointwise_backward(ctx, PointwiseLoss::Mse, grads[0], input, target, {},
                                               {}, reduction, double(input.numel()), 2);
        !fused.empty()) {
      return fused;
    }
    const Tensor g = loss_grad(grads[0], reduction, double(input.numel()), input.sizes());
    const Tensor d_input = mul(mul(g, sub(input, target)), 2.0);  // 2 (x - y)
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = grad_for(d_input, input);
    if (ctx.needs_input_grad(1)) out[1] = grad_for(neg(d_input), target);
    return out;
  }
};

// ---- l1_loss ---------------------------------------------------------------------------------

struct L1Loss {
  static constexpr OpId id = OpId::l1_loss;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& target) {
    const DType dtype = check_pair(input, target, "l1_loss");
    ctx.save({input, target});
    return pointwise_forward(PointwiseLoss::L1, input, target, {}, {}, reduction,
                             double(input.numel()), dtype);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1);
    if (Grads fused = fused_pointwise_backward(ctx, PointwiseLoss::L1, grads[0], input, target, {},
                                               {}, reduction, double(input.numel()), 2);
        !fused.empty()) {
      return fused;
    }
    const Tensor g = loss_grad(grads[0], reduction, double(input.numel()), input.sizes());
    const Tensor d_input = mul(g, sign(sub(input, target)));  // 0 where x == y, as torch
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = grad_for(d_input, input);
    if (ctx.needs_input_grad(1)) out[1] = grad_for(neg(d_input), target);
    return out;
  }
};

// ---- smooth_l1_loss --------------------------------------------------------------------------

struct SmoothL1Loss {
  static constexpr OpId id = OpId::smooth_l1_loss;
  Reduction reduction = Reduction::Mean;
  double beta = 1.0;
  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& target) {
    const DType dtype = check_pair(input, target, "smooth_l1_loss");
    ctx.save({input, target});
    return pointwise_forward(PointwiseLoss::SmoothL1, input, target, {}, {}, reduction,
                             double(input.numel()), dtype, beta);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1);
    if (Grads fused =
            fused_pointwise_backward(ctx, PointwiseLoss::SmoothL1, grads[0], input, target, {}, {},
                                     reduction, double(input.numel()), 2, beta);
        !fused.empty()) {
      return fused;
    }
    const Tensor g = loss_grad(grads[0], reduction, double(input.numel()), input.sizes());
    const Tensor d = sub(input, target);
    // d / beta inside (-beta, beta), sign(d) outside.
    Tensor slope = sign(d);
    if (beta > 0) {
      const Tensor inside = lt(abs(d), beta).to(d.dtype());
      slope = add(mul(inside, div(d, beta)), mul(1.0 - inside, slope));
    }
    const Tensor d_input = mul(g, slope);
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = grad_for(d_input, input);
    if (ctx.needs_input_grad(1)) out[1] = grad_for(neg(d_input), target);
    return out;
  }
};

// ---- class-index losses: shared parts ---------------------------------------------------------

ClassLayout class_layout(const Tensor& input, const char* op) {
  HG_CHECK(input.is_floating_point(), "{}: expected a floating input, got {}", op, input.dtype());
  HG_CHECK(input.dim() >= 1,
           "{}: expected input of shape [C], [N, C] or [N, C, d1, ...], got a 0-d tensor", op);
  return kernel::class_layout(input.sizes());
}

void check_class_target(const Tensor& input, const Tensor& target, const ClassLayout& layout,
                        const char* op) {
  HG_CHECK(target.dtype() == kInt64, "{}: expected an int64 target of class indices, got {}", op,
           target.dtype());
  const Shape expected = kernel::row_shape(input.sizes(), layout);
  HG_CHECK(target.sizes() == expected,
           "{}: expected a target of shape {} for input of shape {}, got {}", op, expected,
           input.sizes(), target.sizes());
}

void check_class_weight(const Tensor& weight, int64_t C, const char* op) {
  if (!weight.defined()) return;
  HG_CHECK(weight.is_floating_point(), "{}: expected a floating weight, got {}", op,
           weight.dtype());
  HG_CHECK(weight.dim() == 1 && weight.size(0) == C,
           "{}: expected a weight of shape [{}] (one per class), got {}", op, C, weight.sizes());
}

// The forward's result without its loss, for the backward: the node must not hold its own
// output. Returns the loss.
Tensor keep_for_backward(ClassLossForward result, ClassLossForward& kept) {
  Tensor loss = std::exchange(result.loss, Tensor());
  kept = std::move(result);
  return loss;
}

// The gradient of each row's loss, shaped to broadcast against input (class dim of size 1).
// "mean" divides by the forward's divisor, a number or a 0-d tensor as the backend gave it
// (kernel/loss.h).
Tensor row_grad(const Tensor& grad, Reduction reduction, const ClassLossForward& forward,
                const ClassLayout& layout) {
  switch (reduction) {
    case Reduction::None:
      return layout.class_dim == 1 ? grad.unsqueeze(1) : grad;
    case Reduction::Sum:
      return grad;
    default:
      return forward.host_divisor ? div(grad, *forward.host_divisor) : div(grad, forward.divisor);
  }
}

// ---- nll_loss --------------------------------------------------------------------------------

struct NllLoss {
  static constexpr OpId id = OpId::nll_loss;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  ClassLayout layout{};
  Shape input_sizes{};
  DType input_dtype = kFloat32;
  ClassLossForward kept{};  // the forward's divisor, for the backward

  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& target, const Tensor& weight) {
    layout = class_layout(input, "nll_loss");
    check_class_target(input, target, layout, "nll_loss");
    check_class_weight(weight, layout.C, "nll_loss");
    input_sizes = input.sizes();
    input_dtype = input.dtype();
    ctx.save({target, weight});
    return keep_for_backward(kernel_for::loss(input).nll_loss(input, target, weight, ignore_index,
                                                              loss_reduction(reduction)),
                             kept);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    HG_CHECK(!ctx.needs_input_grad(2),
             "nll_loss: expected a weight that does not require grad (its gradient is not "
             "implemented, as in torch), got one that does; pass weight.detach()");
    const Tensor target = ctx.saved(0), weight = ctx.saved(1);
    Grads out(3);
    if (!ctx.needs_input_grad(0)) return out;
    const kernel::LossKernels& loss_kernels = kernel_for::loss(target);
    if (!autograd::is_grad_enabled()) {
      if (std::optional<Tensor> d_input =
              loss_kernels.nll_loss_backward(grads[0], target, weight, input_sizes, input_dtype,
                                             kept, ignore_index, loss_reduction(reduction))) {
        out[0] = std::move(*d_input);
        return out;
      }
    }
    const Tensor a = loss_kernels.class_coefficients(target, weight, input_sizes, ignore_index, 0.0,
                                                     input_dtype);
    out[0] = neg(mul(row_grad(grads[0], reduction, kept, layout), a)).to(input_dtype);
    return out;
  }
};

// ---- cross_entropy ---------------------------------------------------------------------------
//
// With logp = log_softmax(input) along the class dim and a the coefficients of the target
// distribution (class_coefficients for class indices; w[c] ((1 - eps) y[c] + eps / C) for class
// probabilities y), a row's loss is -sum_c a[c] logp[c]; its gradient with respect to the
// logits is sum_c(a) softmax(input) - a (softmax - target with neither weight nor ignored
// rows), and with respect to probabilities y it is -(1 - eps) w[c] logp[c].

struct CrossEntropy {
  static constexpr OpId id = OpId::cross_entropy;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;
  ClassLayout layout{};
  ClassLossForward kept{};  // the forward's divisor and statistics, for the backward

  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& target, const Tensor& weight) {
    layout = class_layout(input, "cross_entropy");
    const bool probabilities = target.is_floating_point();
    if (probabilities) {
      HG_CHECK(target.sizes() == input.sizes(),
               "cross_entropy: expected a target of class probabilities of input's shape {}, got "
               "{}",
               input.sizes(), target.sizes());
    } else {
      check_class_target(input, target, layout, "cross_entropy");
    }
    check_class_weight(weight, layout.C, "cross_entropy");
    ctx.save({input, target, weight});
    const DType dtype = probabilities ? result_type({input, target}) : input.dtype();
    return keep_for_backward(
        kernel_for::loss(input).cross_entropy(input, target, weight, ignore_index,
                                              loss_reduction(reduction), label_smoothing, dtype),
        kept);
  }

  Grads backward(OpContext& ctx, const Grads& grads) {
    HG_CHECK(!ctx.needs_input_grad(2),
             "cross_entropy: expected a weight that does not require grad (its gradient is not "
             "implemented, as in torch), got one that does; pass weight.detach()");
    const Tensor input = ctx.saved(0), target = ctx.saved(1), weight = ctx.saved(2);
    const kernel::LossKernels& loss_kernels = kernel_for::loss(input);
    if (!autograd::is_grad_enabled()) {
      kernel::LossGrads g = loss_kernels.cross_entropy_backward(
          grads[0], input, target, weight, kept, ignore_index, loss_reduction(reduction),
          label_smoothing, ctx.needs_input_grad(0), ctx.needs_input_grad(1));
      Grads out(3);
      out[0] = std::move(g.input);
      out[1] = std::move(g.target);
      return out;
    }
    const Tensor g = row_grad(grads[0], reduction, kept, layout);
    const Tensor a = target.is_floating_point()
                         ? Tensor()
                         : loss_kernels.class_coefficients(target, weight, input.sizes(),
                                                           ignore_index, label_smoothing,
                                                           input.dtype());
    return backward_with_ops(ctx, g, a, input, target, weight);
  }

  // The backward with ops, for create_graph. g: each row's gradient (row_grad);
  // target_coefficients: class_coefficients of class-index targets (undefined for
  // probabilities).
  Grads backward_with_ops(OpContext& ctx, const Tensor& g, const Tensor& target_coefficients,
                          const Tensor& input, const Tensor& target, const Tensor& weight) const {
    const bool probabilities = target.is_floating_point();
    const int64_t class_dim = layout.class_dim;
    const double eps = label_smoothing;
    const Tensor logp = sub(input, logsumexp(input, {class_dim}, /*keepdim=*/true));
    Tensor w;  // weight, viewed to broadcast along the class dim
    if (weight.defined()) {
      Shape sizes(size_t(input.dim()), 1);
      sizes[size_t(class_dim)] = layout.C;
      w = weight.reshape(sizes);
    }
    Tensor a;
    if (probabilities) {
      a = eps > 0 ? add(mul(target, 1.0 - eps), eps / double(layout.C)) : target;
      if (w.defined()) a = mul(a, w);
    } else {
      a = target_coefficients;
    }
    Grads out(3);
    if (ctx.needs_input_grad(0)) {
      const Tensor a_sum = sum(a, {class_dim}, /*keepdim=*/true);
      out[0] = grad_for(mul(g, sub(mul(a_sum, exp(logp)), a)), input);
    }
    if (probabilities && ctx.needs_input_grad(1)) {
      Tensor d_target = mul(mul(g, logp), -(1.0 - eps));
      if (w.defined()) d_target = mul(d_target, w);
      out[1] = grad_for(d_target, target);
    }
    return out;
  }
};

// ---- binary_cross_entropy --------------------------------------------------------------------

struct BinaryCrossEntropy {
  static constexpr OpId id = OpId::binary_cross_entropy;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& target, const Tensor& weight) {
    const DType dtype = check_pair(input, target, "binary_cross_entropy");
    check_weight(weight, input, "binary_cross_entropy", "weight");
    ctx.save({input, target, weight});
    // (The kernels check that input lies in [0, 1]: kernel/loss.h.)
    return pointwise_forward(PointwiseLoss::BinaryCrossEntropy, input, target, weight, {},
                             reduction, double(input.numel()), dtype);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1), weight = ctx.saved(2);
    if (Grads fused =
            fused_pointwise_backward(ctx, PointwiseLoss::BinaryCrossEntropy, grads[0], input,
                                     target, weight, {}, reduction, double(input.numel()), 3);
        !fused.empty()) {
      return fused;
    }
    const Tensor g_unweighted =
        loss_grad(grads[0], reduction, double(input.numel()), input.sizes());
    const Tensor g = weight.defined() ? mul(g_unweighted, weight) : g_unweighted;
    Grads out(3);
    if (ctx.needs_input_grad(0)) {  // (x - y) / (x (1 - x)), the denominator at least 1e-12
      const Tensor denominator = clamp(mul(input, 1.0 - input), 1e-12, std::nullopt);
      out[0] = grad_for(div(mul(g, sub(input, target)), denominator), input);
    }
    if (ctx.needs_input_grad(1)) {  // -logit(x), unclamped as torch's
      out[1] = grad_for(mul(g, sub(log1p(neg(input)), log(input))), target);
    }
    if (ctx.needs_input_grad(2)) {
      const Tensor log_x = clamp(log(input), -100.0, std::nullopt);
      const Tensor log_1mx = clamp(log1p(neg(input)), -100.0, std::nullopt);
      const Tensor unweighted = neg(add(mul(target, log_x), mul(1.0 - target, log_1mx)));
      out[2] = grad_for(mul(g_unweighted, unweighted), weight);
    }
    return out;
  }
};

// ---- binary_cross_entropy_with_logits --------------------------------------------------------
//
// With p = pos_weight (1 without) and softplus(-x) = log(1 + exp(-x)) = -log sigmoid(x):
//   loss = w ((1 - y) x + (1 + (p - 1) y) softplus(-x))
// which is -w (p y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))) without computing sigmoid(x).

struct BinaryCrossEntropyWithLogits {
  static constexpr OpId id = OpId::binary_cross_entropy_with_logits;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& target, const Tensor& weight,
                 const Tensor& pos_weight) {
    const char* op = "binary_cross_entropy_with_logits";
    const DType dtype = check_pair(input, target, op);
    check_weight(weight, input, op, "weight");
    check_weight(pos_weight, input, op, "pos_weight");
    ctx.save({input, target, weight, pos_weight});
    return pointwise_forward(PointwiseLoss::BinaryCrossEntropyWithLogits, input, target, weight,
                             pos_weight, reduction, double(input.numel()), dtype);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1);
    const Tensor weight = ctx.saved(2), pos_weight = ctx.saved(3);
    if (Grads fused = fused_pointwise_backward(
            ctx, PointwiseLoss::BinaryCrossEntropyWithLogits, grads[0], input, target, weight,
            pos_weight, reduction, double(input.numel()), 4);
        !fused.empty()) {
      return fused;
    }
    const Tensor g_unweighted =
        loss_grad(grads[0], reduction, double(input.numel()), input.sizes());
    const Tensor g = weight.defined() ? mul(g_unweighted, weight) : g_unweighted;
    const bool has_pos_weight = pos_weight.defined();
    // 1 + (p - 1) y: the weight of the softplus term.
    const Tensor log_weight =
        has_pos_weight ? add(mul(sub(pos_weight, 1.0), target), 1.0) : Tensor();
    Grads out(4);
    if (ctx.needs_input_grad(0)) {  // (1 + (p - 1) y) sigmoid(x) - p y
      const Tensor s = sigmoid(input);
      const Tensor slope =
          has_pos_weight ? sub(mul(log_weight, s), mul(pos_weight, target)) : sub(s, target);
      out[0] = grad_for(mul(g, slope), input);
    }
    const bool need_softplus =
        ctx.needs_input_grad(1) || ctx.needs_input_grad(2) || ctx.needs_input_grad(3);
    const Tensor softplus_neg_x = need_softplus ? softplus(neg(input)) : Tensor();
    if (ctx.needs_input_grad(1)) {  // (p - 1) softplus(-x) - x
      const Tensor slope =
          has_pos_weight ? sub(mul(sub(pos_weight, 1.0), softplus_neg_x), input) : neg(input);
      out[1] = grad_for(mul(g, slope), target);
    }
    if (ctx.needs_input_grad(2)) {
      const Tensor softplus_term =
          has_pos_weight ? mul(log_weight, softplus_neg_x) : softplus_neg_x;
      const Tensor unweighted = add(mul(1.0 - target, input), softplus_term);
      out[2] = grad_for(mul(g_unweighted, unweighted), weight);
    }
    if (ctx.needs_input_grad(3)) {  // y softplus(-x)
      out[3] = grad_for(mul(g, mul(target, softplus_neg_x)), pos_weight);
    }
    return out;
  }
};

// ---- kl_div ----------------------------------------------------------------------------------

struct KlDiv {
  static constexpr OpId id = OpId::kl_div;
  Reduction reduction = Reduction::Mean;
  bool log_target = false;
  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& target) {
    const DType dtype = check_pair(input, target, "kl_div");
    ctx.save({input, target});
    const double divisor = mean_divisor(reduction, input);
    return pointwise_forward(log_target ? PointwiseLoss::KlDivLogTarget : PointwiseLoss::KlDiv,
                             input, target, {}, {}, reduction, divisor, dtype);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1);
    if (Grads fused = fused_pointwise_backward(
            ctx, log_target ? PointwiseLoss::KlDivLogTarget : PointwiseLoss::KlDiv,
            grads[0], input, target, {}, {}, reduction, mean_divisor(reduction, input), 2);
        !fused.empty()) {
      return fused;
    }
    const Tensor g = loss_grad(grads[0], reduction, mean_divisor(reduction, input), input.sizes());
    Grads out(2);
    if (log_target) {
      const Tensor g_p = mul(g, exp(target));  // p = exp(target), the target probabilities
      if (ctx.needs_input_grad(0)) out[0] = grad_for(neg(g_p), input);
      if (ctx.needs_input_grad(1))
        out[1] = grad_for(mul(g_p, add(sub(target, input), 1.0)), target);
      return out;
    }
    if (ctx.needs_input_grad(0)) out[0] = grad_for(neg(mul(g, target)), input);
    if (ctx.needs_input_grad(1)) {  // log y + 1 - x, and 0 where y == 0 (as torch)
      const Tensor nonzero = ne(target, 0).to(target.dtype());
      const Tensor safe_target = add(target, 1.0 - nonzero);  // 1 where y == 0: log gives 0
      const Tensor slope = mul(add(sub(log(safe_target), input), 1.0), nonzero);
      out[1] = grad_for(mul(g, slope), target);
    }
    return out;
  }
};

// ---- compositions ------------------------------------------------------------------------------

// NOTE [Composite losses] margin_ranking_loss, hinge_embedding_loss, soft_margin_loss,
// cosine_embedding_loss, poisson_nll_loss and triplet_margin_loss are compositions of other ops
// in torch's ATen code too; huber_loss is delta * smooth_l1_loss with beta = delta, and
// multi_margin_loss and multilabel_margin_loss, kernels in torch, are gathers, masks and sums
// here (the multi-label one over [N, C, C] pairs, the work torch's kernel does in loops).
// halfgrad writes them as composites: each autocasts once, at the outermost call, with torch's
// float32 policy, autograd runs through the ops it calls, and a 16-bit call rounds once per op
// it is made of. Shapes as NOTE [Loss shapes]: every tensor argument has input's shape (the
// embedding losses' target is one value a row); class indices are checked against C first.

// Every class index in target within [low, C), read back to say which is not (on CUDA, one
// synchronization: the composites have no kernel of their own to check them).
void check_class_range(const char* op, const Tensor& target, int64_t low, int64_t C) {
  if (target.numel() == 0) return;
  const int64_t lowest = amin(target).item<int64_t>(), highest = amax(target).item<int64_t>();
  HG_CHECK(lowest >= low && highest < C,
           "{}: expected class indices in [{}, {}) with C = {}, got values from {} to {}", op, low,
           C, C, lowest, highest);
}

Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return sum(loss);
    default:
      return mean(loss);
  }
}

// max(0, -target (input1 - input2) + margin).
struct MarginRankingLoss {
  static constexpr OpId id = OpId::margin_ranking_loss;
  static constexpr bool kComposite = true;
  double margin = 0.0;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext&, const Tensor& input1, const Tensor& input2, const Tensor& target) {
    check_same_shapes("margin_ranking_loss", input1, input2, "input2");
    check_same_shapes("margin_ranking_loss", input1, target, "target");
    const Tensor loss = add(mul(neg(target), sub(input1, input2)), margin);
    return reduce_loss(clamp(loss, Scalar(0), std::nullopt), reduction);
  }
};

// input where target == 1, max(0, margin - input) where target == -1 (their sum elsewhere).
struct HingeEmbeddingLoss {
  static constexpr OpId id = OpId::hinge_embedding_loss;
  static constexpr bool kComposite = true;
  double margin = 1.0;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& target) {
    check_same_shapes("hinge_embedding_loss", input, target, "target");
    const Tensor margin_side = clamp(add(neg(input), margin), Scalar(0), std::nullopt);
    const Tensor loss =
        add(where(ne(target, 1), margin_side, 0.0), where(ne(target, -1), input, 0.0));
    return reduce_loss(loss, reduction);
  }
};

// log(1 + exp(-target input)), as softplus(-target input): torch's formula, which overflows to
// inf past -target input = 89 in float32 (and its gradient to NaN), where softplus is the
// exact -target input there.
struct SoftMarginLoss {
  static constexpr OpId id = OpId::soft_margin_loss;
  static constexpr bool kComposite = true;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& target) {
    check_same_shapes("soft_margin_loss", input, target, "target");
    return reduce_loss(softplus(mul(neg(input), target)), reduction);
  }
};

// 0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) elsewhere: delta * smooth_l1_loss(beta =
// delta).
struct HuberLoss {
  static constexpr OpId id = OpId::huber_loss;
  static constexpr bool kComposite = true;
  std::string_view reduction = "mean";
  double delta = 1.0;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& target) {
    check_pair(input, target, "huber_loss");  // errors name huber_loss, not smooth_l1_loss
    const Tensor smooth = smooth_l1_loss(input, target, reduction, delta);
    return delta == 1.0 ? smooth : mul(smooth, delta);
  }
};

// 1 - cos(x1, x2) where target == 1, max(0, cos(x1, x2) - margin) where target == -1, 0
// elsewhere; the cosine over each row as torch computes it (1e-12 added to each squared norm).
struct CosineEmbeddingLoss {
  static constexpr OpId id = OpId::cosine_embedding_loss;
  static constexpr bool kComposite = true;
  double margin = 0.0;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext&, const Tensor& input1, const Tensor& input2, const Tensor& target) {
    check_same_shapes("cosine_embedding_loss", input1, input2, "input2");
    HG_CHECK(input1.dim() == 1 || input1.dim() == 2,
             "cosine_embedding_loss: expected inputs of shape [D] or [N, D], got {}",
             input1.sizes());
    const Shape target_shape = input1.dim() == 2 ? Shape{input1.size(0)} : Shape{};
    HG_CHECK(target.sizes() == target_shape,
             "cosine_embedding_loss: expected target of shape {} for inputs of shape {}, got {}",
             target_shape, input1.sizes(), target.sizes());
    const Shape row = {input1.dim() - 1};
    const Tensor dot_product = sum(mul(input1, input2), row);
    const Tensor squares1 = add(sum(mul(input1, input1), row), 1e-12);
    const Tensor squares2 = add(sum(mul(input2, input2), row), 1e-12);
    const Tensor cos = div(dot_product, sqrt(mul(squares1, squares2)));
    const Tensor similar = where(eq(target, 1), add(neg(cos), 1.0), 0.0);
    const Tensor dissimilar =
        where(eq(target, -1), clamp(sub(cos, margin), Scalar(0), std::nullopt), 0.0);
    return reduce_loss(add(similar, dissimilar), reduction);
  }
};

// exp(input) - target input (log_input), or input - target log(input + eps); with `full`, the
// Stirling term target log(target) - target + log(2 pi target) / 2 added where target > 1.
struct PoissonNllLoss {
  static constexpr OpId id = OpId::poisson_nll_loss;
  static constexpr bool kComposite = true;
  bool log_input = true;
  bool full = false;
  double eps = 1e-8;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& target) {
    check_pair(input, target, "poisson_nll_loss");
    Tensor loss = log_input ? sub(exp(input), mul(target, input))
                            : sub(input, mul(target, log(add(input, eps))));
    if (full) {
      // The term from target itself where it counts, so target <= 1 (zeros included) reaches
      // no log and its gradient stays finite.
      const Tensor counts = gt(target, 1);
      const Tensor t = where(counts, target, 2.0);
      const Tensor stirling =
          add(sub(mul(t, log(t)), t), mul(log(mul(t, 2.0 * std::numbers::pi)), 0.5));
      loss = add(loss, where(counts, stirling, 0.0));
    }
    return reduce_loss(loss, reduction);
  }
};

// max(0, margin + d(anchor, positive) - d(anchor, negative)), d the pairwise p-norm distance of
// the rows; with `swap`, d(anchor, negative) is replaced by d(positive, negative) where that is
// smaller.
struct TripletMarginLoss {
  static constexpr OpId id = OpId::triplet_margin_loss;
  static constexpr bool kComposite = true;
  double margin = 1.0;
  double p = 2.0;
  double eps = 1e-6;
  bool swap = false;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext&, const Tensor& anchor, const Tensor& positive, const Tensor& negative) {
    HG_CHECK(anchor.dim() == 1 || anchor.dim() == 2,
             "triplet_margin_loss: expected anchor of shape [D] or [N, D], got {}", anchor.sizes());
    check_same_shapes("triplet_margin_loss", anchor, positive, "positive");
    check_same_shapes("triplet_margin_loss", anchor, negative, "negative");
    const Tensor to_positive = pairwise_distance(anchor, positive, p, eps);
    Tensor to_negative = pairwise_distance(anchor, negative, p, eps);
    if (swap) to_negative = minimum(to_negative, pairwise_distance(positive, negative, p, eps));
    const Tensor loss = add(sub(to_positive, to_negative), margin);
    return reduce_loss(clamp(loss, Scalar(0), std::nullopt), reduction);
  }
};

// Row n of input [N, C] against its class y = target[n]: the sum over the other classes i of
// w[y] max(0, margin - x[y] + x[i])^p, divided by C.
struct MultiMarginLoss {
  static constexpr OpId id = OpId::multi_margin_loss;
  static constexpr bool kComposite = true;
  int64_t p = 1;
  double margin = 1.0;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& target, const Tensor& weight) {
    const char* op = "multi_margin_loss";
    HG_CHECK(input.is_floating_point(), "{}: expected a floating input, got {}", op, input.dtype());
    HG_CHECK((input.dim() == 1 || input.dim() == 2) && input.size(-1) > 0,
             "{}: expected input of shape [C] or [N, C] with C > 0, got {}", op, input.sizes());
    const int64_t N = input.dim() == 2 ? input.size(0) : 1, C = input.size(-1);
    HG_CHECK(target.dtype() == kInt64, "{}: expected int64 class indices as target, got {}", op,
             target.dtype());
    HG_CHECK(target.numel() == N && target.dim() <= 1,
             "{}: expected target of shape [{}]{}, got {}", op, N, input.dim() == 1 ? " or []" : "",
             target.sizes());
    check_class_range(op, target, 0, C);
    const Tensor x = input.reshape({N, C});
    const Tensor y = target.reshape({N});
    const Tensor x_y = gather(x, 1, y.reshape({N, 1}));
    Tensor terms = clamp(add(sub(x, x_y), margin), Scalar(0), std::nullopt);
    if (p == 2) terms = mul(terms, terms);
    if (weight.defined()) terms = mul(terms, index_select(weight, 0, y).reshape({N, 1}));
    const Tensor own_class = ne(one_hot(y, C), 0);
    const Tensor loss = div(sum(where(own_class, 0.0, terms), {1}), double(C));
    return reduce_loss(loss.reshape(target.sizes()), reduction);
  }
};

// Row n of input [N, C] with target classes y_0, ..., y_k (target[n]'s values up to its first
// -1): the sum over the target classes y_j and the classes i not among them of
// max(0, 1 - (x[y_j] - x[i])), divided by C. As pairs [N, C, C] of ops.
struct MultilabelMarginLoss {
  static constexpr OpId id = OpId::multilabel_margin_loss;
  static constexpr bool kComposite = true;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& target) {
    const char* op = "multilabel_margin_loss";
    HG_CHECK(input.is_floating_point(), "{}: expected a floating input, got {}", op, input.dtype());
    HG_CHECK((input.dim() == 1 || input.dim() == 2) && input.size(-1) > 0,
             "{}: expected input of shape [C] or [N, C] with C > 0, got {}", op, input.sizes());
    HG_CHECK(target.dtype() == kInt64, "{}: expected int64 class indices as target, got {}", op,
             target.dtype());
    HG_CHECK(target.sizes() == input.sizes(), "{}: expected target of input's shape {}, got {}", op,
             input.sizes(), target.sizes());
    const int64_t N = input.dim() == 2 ? input.size(0) : 1, C = input.size(-1);
    check_class_range(op, target, -1, C);
    const Tensor x = input.reshape({N, C});
    const Tensor t = target.reshape({N, C});
    // A target slot counts until the row's first -1.
    const Tensor counts = eq(cumsum(eq(t, -1), 1), 0);
    const Tensor classes = where(counts, t, Scalar(0));
    // other[n, i]: class i is none of row n's targets (the slots past the -1 go to class C).
    const Tensor slots = one_hot(where(counts, t, Scalar(C)), C + 1).slice(2, 0, C);
    const Tensor other = eq(sum(slots, {1}), 0);  // [N, C]
    const Tensor x_y = gather(x, 1, classes);
    // pairs[n, j, i] = max(0, 1 - x[y_j] + x[i]) for counted slots j and non-target classes i.
    const Tensor pairs =
        clamp(add(sub(x.unsqueeze(1), x_y.unsqueeze(2)), 1.0), Scalar(0), std::nullopt);
    const Tensor kept =
        mul(counts.to(input.dtype()).unsqueeze(2), other.to(input.dtype()).unsqueeze(1));
    const Tensor loss = div(sum(mul(pairs, kept), {1, 2}), double(C));
    return reduce_loss(input.dim() == 2 ? loss : loss.reshape({}), reduction);
  }
};

}  // namespace

// ---- the public functions -------------------------------------------------------------------

Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                           double margin, std::string_view reduction) {
  return dispatch(MarginRankingLoss{.margin = margin,
                                    .reduction = parse_reduction(reduction, "margin_ranking_loss")},
                  input1, input2, target);
}

Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin,
                            std::string_view reduction) {
  return dispatch(
      HingeEmbeddingLoss{.margin = margin,
                         .reduction = parse_reduction(reduction, "hinge_embedding_loss")},
      input, target);
}

Tensor soft_margin_loss(const Tensor& input, const Tensor& target, std::string_view reduction) {
  return dispatch(SoftMarginLoss{.reduction = parse_reduction(reduction, "soft_margin_loss")},
                  input, target);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, std::string_view reduction,
                  double delta) {
  HG_CHECK(delta > 0.0, "huber_loss: expected delta > 0, got {}", delta);
  parse_reduction(reduction, "huber_loss");
  return dispatch(HuberLoss{.reduction = reduction, .delta = delta}, input, target);
}

Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             double margin, std::string_view reduction) {
  return dispatch(
      CosineEmbeddingLoss{.margin = margin,
                          .reduction = parse_reduction(reduction, "cosine_embedding_loss")},
      input1, input2, target);
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input, bool full,
                        double eps, std::string_view reduction) {
  return dispatch(PoissonNllLoss{.log_input = log_input,
                                 .full = full,
                                 .eps = eps,
                                 .reduction = parse_reduction(reduction, "poisson_nll_loss")},
                  input, target);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           double margin, double p, double eps, bool swap,
                           std::string_view reduction) {
  return dispatch(TripletMarginLoss{.margin = margin,
                                    .p = p,
                                    .eps = eps,
                                    .swap = swap,
                                    .reduction = parse_reduction(reduction, "triplet_margin_loss")},
                  anchor, positive, negative);
}

Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p, double margin,
                         const Tensor& weight, std::string_view reduction) {
  HG_CHECK(p == 1 || p == 2, "multi_margin_loss: expected p 1 or 2, got {}", p);
  if (weight.defined()) {
    HG_CHECK(weight.is_floating_point() && weight.dim() == 1 && input.dim() >= 1 &&
                 weight.size(0) == input.size(-1),
             "multi_margin_loss: expected a floating weight of shape [{}], got {} of shape {}",
             input.dim() >= 1 ? input.size(-1) : 0, weight.dtype(), weight.sizes());
  }
  return dispatch(
      MultiMarginLoss{
          .p = p, .margin = margin, .reduction = parse_reduction(reduction, "multi_margin_loss")},
      input, target, weight);
}

Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target,
                              std::string_view reduction) {
  return dispatch(
      MultilabelMarginLoss{.reduction = parse_reduction(reduction, "multilabel_margin_loss")},
      input, target);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, std::string_view reduction) {
  return dispatch(MseLoss{.reduction = parse_reduction(reduction, "mse_loss")}, input, target);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, std::string_view reduction) {
  return dispatch(L1Loss{.reduction = parse_reduction(reduction, "l1_loss")}, input, target);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, std::string_view reduction,
                      double beta) {
  HG_CHECK(beta >= 0.0, "smooth_l1_loss: expected beta >= 0, got {}", beta);
  return dispatch(
      SmoothL1Loss{.reduction = parse_reduction(reduction, "smooth_l1_loss"), .beta = beta}, input,
      target);
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                int64_t ignore_index, std::string_view reduction) {
  return dispatch(
      NllLoss{.ignore_index = ignore_index, .reduction = parse_reduction(reduction, "nll_loss")},
      input, target, weight);
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                     int64_t ignore_index, std::string_view reduction, double label_smoothing) {
  HG_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
           "cross_entropy: expected label_smoothing in [0, 1], got {}", label_smoothing);
  return dispatch(CrossEntropy{.ignore_index = ignore_index,
                               .reduction = parse_reduction(reduction, "cross_entropy"),
                               .label_smoothing = label_smoothing},
                  input, target, weight);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                            std::string_view reduction) {
  return dispatch(
      BinaryCrossEntropy{.reduction = parse_reduction(reduction, "binary_cross_entropy")}, input,
      target, weight);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight, std::string_view reduction,
                                        const Tensor& pos_weight) {
  return dispatch(BinaryCrossEntropyWithLogits{.reduction = parse_reduction(
                                                   reduction, "binary_cross_entropy_with_logits")},
                  input, target, weight, pos_weight);
}

Tensor kl_div(const Tensor& input, const Tensor& target, std::string_view reduction,
              bool log_target) {
  return dispatch(
      KlDiv{.reduction = parse_reduction(reduction, "kl_div"), .log_target = log_target}, input,
      target);
}

}  // namespace hg
