// Losses: forward and backward of each, in op_list.def's order.
//
// Dims: N batch, C classes, S positions per sample. nll_loss and cross_entropy take input
// [N, C, d1, d2, ...] with S = d1 d2 ... (1 without trailing dims), or [C] for one sample
// (N = S = 1). A row is one position (n, s): its C values lie S apart, at (n C + c) S + s.
//
// NOTE [Loss kernels] A forward converts its floating inputs to the accumulation dtype (float32,
// or float64 for float64 inputs), computes one loss per element (per row for nll_loss and
// cross_entropy) there, and rounds once to the result dtype: "none" rounds each loss, "sum" and
// "mean" round the reduction. A float16 loss is thus not a sum of float16-rounded terms, and
// cross_entropy's log-probabilities are never rounded to the input's 16-bit dtype.
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
//
// NOTE [Losses on CUDA] For CUDA inputs each forward, and each first-order backward, runs the
// kernels of cuda/loss.h instead of the host loops here: nothing reads tensor memory on the
// host and nothing waits for the GPU. "mean" divides on the device; the mean of nll_loss and
// cross_entropy over class indices divides by the total weight of the targets not ignored,
// summed on the device and kept there (cuda_divisor) for the backward. Class indices are
// checked on the device: a bad one is an hg::Error at the next synchronize, naming the op. A
// backward that is itself recorded (create_graph), or that needs a weight's gradient, takes the
// op formulas, which run on any device. binary_cross_entropy's input must lie in [0, 1]: the
// CPU checks before computing (the error gives the range found); the CUDA kernel checks each
// element as it reads it and the error (with the first value found outside) comes at the next
// synchronize, as for class indices.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/config.h"
#include "halfgrad/core/cast.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/strided_loop.h"
#include "halfgrad/core/view.h"
#include "halfgrad/cpu/kernels.h"
#include "halfgrad/cpu/reduce.h"
#include "halfgrad/cuda/loss_kinds.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernels.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/type_promotion.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/loss.h"
#endif

namespace hg {

namespace {

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

DType acc_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// Calls f(TypeTag<A>{}) with A the C++ type of the accumulation dtype `acc`.
template <class F>
void visit_acc(DType acc, F&& f) {
  if (acc == kFloat64) {
    f(TypeTag<double>{});
  } else {
    f(TypeTag<float>{});
  }
}

// t broadcast to `sizes`, converted to `dtype`, contiguous: what the loops read.
Tensor dense(const Tensor& t, DType dtype, const Shape& sizes) {
  const Tensor converted = core::to_dtype(t.sizes() == sizes ? t : core::expand(t, sizes), dtype);
  return converted.is_contiguous() ? converted : core::clone(converted);
}
Tensor dense(const Tensor& t, DType dtype) { return dense(t, dtype, t.sizes()); }

template <class A>
const A* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<A>() : nullptr;
}

// out[i] = f(i) for i in [0, n), on OpenMP threads when n is large (f must not throw).
template <class A, class F>
void fill_elements(A* out, int64_t n, F&& f) {
  parallel_for(n, n, [&](int64_t i) { out[i] = f(i); });
}

// Losses of at most this many elements are summed on the calling thread from a buffer.
constexpr int64_t kSmallLoss = 4096;

// Per-element losses (in the accumulation dtype) reduced and rounded once to `dtype`. Mean and
// batchmean divide the sum by `divisor`.
Tensor reduce_losses(const Tensor& losses, Reduction reduction, DType dtype, double divisor) {
  switch (reduction) {
    case Reduction::None:
      return core::to_dtype(losses, dtype);
    case Reduction::Sum:
      return cpu::reduce_kernels.reduce(kernel::Reduction::Sum, losses, {}, /*keepdim=*/false,
                                        dtype, /*p=*/2.0);
    default: {
      const double total =
          cpu::reduce_kernels
              .reduce(kernel::Reduction::Sum, losses, {}, /*keepdim=*/false, kFloat64, /*p=*/2.0)
              .item<double>();
      return scalar_tensor(total / divisor, dtype);
    }
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
DType check_pair(const Tensor& input, const Tensor& target, const char* op) {
  HG_CHECK(input.is_floating_point(), "{}: expected a floating input, got {}", op, input.dtype());
  HG_CHECK(target.is_floating_point(), "{}: expected a floating target, got {}", op,
           target.dtype());
  HG_CHECK(input.sizes() == target.sizes(), "{}: expected target of input's shape {}, got {}", op,
           input.sizes(), target.sizes());
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

// binary_cross_entropy's input: probabilities, every element in [0, 1]; NaN fails the check
// too, as in torch. The CUDA kernel checks on the device instead (NOTE [Losses on CUDA]).
void check_probabilities(const Tensor& input) {
  if (input.numel() == 0 || input.is_cuda()) return;
  const double low = kernels::reduce(input)
                         .reduce(kernel::Reduction::Amin, input, {}, false, kFloat64, 2.0)
                         .item<double>();
  const double high = kernels::reduce(input)
                          .reduce(kernel::Reduction::Amax, input, {}, false, kFloat64, 2.0)
                          .item<double>();
  HG_CHECK(low >= 0.0 && high <= 1.0,
           "binary_cross_entropy: expected every element of input in [0, 1] (probabilities), "
           "got values from {} to {}",
           low, high);
}

// The losses f(x, y, w, p) of each element, reduced: x, y, w, p are input, target, weight and
// pos_weight (1 where absent) in the accumulation type.
template <class F>
Tensor elementwise_forward(const Tensor& input, const Tensor& target, const Tensor& weight,
                           const Tensor& pos_weight, Reduction reduction, DType dtype,
                           double divisor, F&& f) {
  const DType acc = acc_dtype(dtype);
  const Tensor x = dense(input, acc), y = dense(target, acc);
  const Tensor w = weight.defined() ? dense(weight, acc, input.sizes()) : Tensor();
  const Tensor p = pos_weight.defined() ? dense(pos_weight, acc, input.sizes()) : Tensor();
  // out[i] = f(x, y, w, p) at element i, in the accumulation type A of out.
  const auto fill_terms = [&](auto* out) {
    using A = std::remove_pointer_t<decltype(out)>;
    const A *xp = x.data_ptr<A>(), *yp = y.data_ptr<A>();
    const A *wp = data_or_null<A>(w), *pp = data_or_null<A>(p);
    fill_elements(out, x.numel(),
                  [&](int64_t i) { return f(xp[i], yp[i], wp ? wp[i] : A(1), pp ? pp[i] : A(1)); });
  };
  if (acc == kFloat32 && reduction != Reduction::None && x.numel() <= kSmallLoss) {
    // A small float loss: the terms in a per-thread buffer, summed in reduce's order
    // (cpu::sum_floats), without a tensor for them or the reduction's set-up.
    thread_local std::vector<float> terms;
    terms.resize(size_t(x.numel()));
    fill_terms(terms.data());
    const float sum = cpu::sum_floats(terms.data(), int64_t(terms.size()));
    // (double(sum) is the float exactly: rounding it to dtype rounds the float, as reduce does.)
    return scalar_tensor(reduction == Reduction::Sum ? double(sum) : double(sum) / divisor, dtype);
  }
  Tensor losses = empty(input.sizes(), acc);
  visit_acc(acc, [&](auto tag) { fill_terms(losses.data_ptr<typename decltype(tag)::type>()); });
  return reduce_losses(losses, reduction, dtype, divisor);
}

// ---- CUDA paths (NOTE [Losses on CUDA]) -----------------------------------------------------

#if HALFGRAD_HAS_CUDA
cuda::LossReduction cuda_reduction(Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return cuda::LossReduction::None;
    case Reduction::Sum:
      return cuda::LossReduction::Sum;
    default:
      return cuda::LossReduction::Mean;
  }
}
#endif

// The fused CUDA backward of a pointwise loss whose inputs are (input, target, then weights):
// d_input and d_target in one pass. Empty where it does not apply: an input not on a CUDA
// device, a recorded backward, or a weight (input 2 or later) that needs its gradient.
Grads cuda_pointwise_backward(const OpContext& ctx, cuda::PointwiseLoss kind, const Tensor& grad,
                              const Tensor& input, const Tensor& target, const Tensor& weight,
                              const Tensor& pos_weight, Reduction reduction, double divisor,
                              size_t input_count, double beta = 1.0) {
#if HALFGRAD_HAS_CUDA
  if (!input.is_cuda() || autograd::is_grad_enabled()) return {};
  for (size_t i = 2; i < input_count; ++i) {
    if (ctx.needs_input_grad(i)) return {};
  }
  const double scale_divisor =
      reduction == Reduction::Mean || reduction == Reduction::BatchMean ? divisor : 1.0;
  cuda::LossGrads g =
      cuda::pointwise_loss_backward(kind, grad, input, target, weight, pos_weight, scale_divisor,
                                    ctx.needs_input_grad(0), ctx.needs_input_grad(1), beta);
  Grads out(input_count);
  out[0] = std::move(g.input);
  out[1] = std::move(g.target);
  return out;
#else
  return {};
#endif
}

// ---- mse_loss --------------------------------------------------------------------------------

struct MseLoss {
  static constexpr OpId id = OpId::mse_loss;
  Reduction reduction = Reduction::Mean;
  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& target) {
    const DType dtype = check_pair(input, target, "mse_loss");
    ctx.save({input, target});
#if HALFGRAD_HAS_CUDA
    if (input.is_cuda()) {
      return cuda::pointwise_loss(cuda::PointwiseLoss::Mse, input, target, {}, {},
                                  cuda_reduction(reduction), double(input.numel()), dtype);
    }
#endif
    return elementwise_forward(input, target, {}, {}, reduction, dtype, double(input.numel()),
                               [](auto x, auto y, auto, auto) { return (x - y) * (x - y); });
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1);
    if (Grads fused = cuda_pointwise_backward(ctx, cuda::PointwiseLoss::Mse, grads[0], input,
                                              target, {}, {}, reduction, double(input.numel()), 2);
        !fused.empty()) {
      return fused;
    }
    if (Grads fused = fused_backward(ctx, grads[0], input, target); !fused.empty()) return fused;
    const Tensor g = loss_grad(grads[0], reduction, double(input.numel()), input.sizes());
    const Tensor d_input = mul(mul(g, sub(input, target)), 2.0);  // 2 (x - y)
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = grad_for(d_input, input);
    if (ctx.needs_input_grad(1)) out[1] = grad_for(neg(d_input), target);
    return out;
  }

  // NOTE [Fused mse_loss backward] Unless the backward pass is recorded (create_graph), a
  // "mean" or "sum" mse_loss over contiguous input and target of the gradient's dtype runs its
  // backward as one pass that computes, element by element, what the formula's ops compute,
  // rounding to the dtype where each op rounds: 2 ((g / N) (x - y)), and its negation for the
  // target. No temporaries, one tensor per input. Returns nothing where it does not apply.
  Grads fused_backward(const OpContext& ctx, const Tensor& grad, const Tensor& input,
                       const Tensor& target) const {
    if (autograd::is_grad_enabled() || reduction == Reduction::None || !input.is_cpu()) return {};
    const DType dtype = input.dtype();
    if (target.dtype() != dtype || grad.dtype() != dtype || grad.numel() != 1 ||
        !input.is_contiguous() || !target.is_contiguous()) {
      return {};
    }
    const bool wants_input = ctx.needs_input_grad(0), wants_target = ctx.needs_input_grad(1);
    Grads out(2);
    if (wants_input) out[0] = empty(input.sizes(), input.options());
    if (wants_target) out[1] = empty(target.sizes(), target.options());
    visit_dtype(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_floating_v<T>) {
        using C = compute_t<T>;
        const auto rounded = [](C v) {
          return cast_value<C>(cast_value<T>(v));
        };  // as an op stores it
        C g = cast_value<C>(*grad.data_ptr<T>());
        if (reduction == Reduction::Mean) {
          g = rounded(g / cast_value<C>(cast_value<T>(double(input.numel()))));
        }
        const T* x = input.data_ptr<T>();
        const T* y = target.data_ptr<T>();
        T* dx = wants_input ? out[0].data_ptr<T>() : nullptr;
        T* dy = wants_target ? out[1].data_ptr<T>() : nullptr;
        parallel_for(input.numel(), input.numel(), [&](int64_t i) {
          const C diff = rounded(cast_value<C>(x[i]) - cast_value<C>(y[i]));
          const C d = rounded(rounded(g * diff) * C(2));
          if (dx) dx[i] = cast_value<T>(d);
          if (dy) dy[i] = cast_value<T>(-d);
        });
      }
    });
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
#if HALFGRAD_HAS_CUDA
    if (input.is_cuda()) {
      return cuda::pointwise_loss(cuda::PointwiseLoss::L1, input, target, {}, {},
                                  cuda_reduction(reduction), double(input.numel()), dtype);
    }
#endif
    return elementwise_forward(input, target, {}, {}, reduction, dtype, double(input.numel()),
                               [](auto x, auto y, auto, auto) { return std::abs(x - y); });
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1);
    if (Grads fused = cuda_pointwise_backward(ctx, cuda::PointwiseLoss::L1, grads[0], input, target,
                                              {}, {}, reduction, double(input.numel()), 2);
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
#if HALFGRAD_HAS_CUDA
    if (input.is_cuda()) {
      return cuda::pointwise_loss(cuda::PointwiseLoss::SmoothL1, input, target, {}, {},
                                  cuda_reduction(reduction), double(input.numel()), dtype, beta);
    }
#endif
    const double b = beta;
    return elementwise_forward(input, target, {}, {}, reduction, dtype, double(input.numel()),
                               [b](auto x, auto y, auto, auto) {
                                 using A = decltype(x);
                                 const A d = std::abs(x - y), beta_a = A(b);
                                 // beta = 0 never takes the quadratic branch: l1_loss.
                                 return d < beta_a ? A(0.5) * d * d / beta_a : d - A(0.5) * beta_a;
                               });
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1);
    if (Grads fused =
            cuda_pointwise_backward(ctx, cuda::PointwiseLoss::SmoothL1, grads[0], input, target, {},
                                    {}, reduction, double(input.numel()), 2, beta);
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

struct ClassLayout {
  int64_t N = 1, C = 1, S = 1;
  int64_t class_dim = 0;
};

ClassLayout class_layout(const Tensor& input, const char* op) {
  HG_CHECK(input.is_floating_point(), "{}: expected a floating input, got {}", op, input.dtype());
  HG_CHECK(input.dim() >= 1,
           "{}: expected input of shape [C], [N, C] or [N, C, d1, ...], got a 0-d tensor", op);
  if (input.dim() == 1) return {.N = 1, .C = input.size(0), .S = 1, .class_dim = 0};
  int64_t S = 1;
  for (int64_t d = 2; d < input.dim(); ++d) S *= input.size(d);
  return {.N = input.size(0), .C = input.size(1), .S = S, .class_dim = 1};
}

// One loss per row: input's shape without the class dim.
Shape row_shape(const Tensor& input, const ClassLayout& layout) {
  Shape out{};
  for (int64_t d = 0; d < input.dim(); ++d) {
    if (d != layout.class_dim) out.push_back(input.size(d));
  }
  return out;
}

void check_class_target(const Tensor& input, const Tensor& target, const ClassLayout& layout,
                        const char* op) {
  HG_CHECK(target.dtype() == kInt64, "{}: expected an int64 target of class indices, got {}", op,
           target.dtype());
  const Shape expected = row_shape(input, layout);
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

// Checks every class index (in [0, C) or ignore_index) and returns what "mean" divides by: the
// total weight of the targets not ignored (their count without a weight).
double check_class_indices(const Tensor& target, const Tensor& weight, int64_t C,
                           int64_t ignore_index, const char* op) {
  const Tensor t = dense(target, kInt64);
  const Tensor w = weight.defined() ? dense(weight, kFloat64) : Tensor();
  const int64_t* tp = t.data_ptr<int64_t>();
  const double* wp = data_or_null<double>(w);
  double total = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t k = tp[i];
    if (k == ignore_index) continue;
    HG_CHECK(k >= 0 && k < C,
             "{}: expected class indices in [0, C) with C = {} (or ignore_index {}), got {} at "
             "target element {}",
             op, C, ignore_index, k, i);
    total += wp ? wp[k] : 1.0;
  }
  return total;
}

// The gradient of each row's loss, shaped to broadcast against input (class dim of size 1).
Tensor row_grad(const Tensor& grad, Reduction reduction, double divisor,
                const ClassLayout& layout) {
  switch (reduction) {
    case Reduction::None:
      return layout.class_dim == 1 ? grad.unsqueeze(1) : grad;
    case Reduction::Sum:
      return grad;
    default:
      return div(grad, divisor);
  }
}

#if HALFGRAD_HAS_CUDA
// row_grad with the divisor of "mean" a 0-d tensor on the device (NOTE [Losses on CUDA]).
Tensor cuda_row_grad(const Tensor& grad, Reduction reduction, const Tensor& divisor,
                     const ClassLayout& layout) {
  if (reduction == Reduction::Mean) return div(grad, divisor);
  return row_grad(grad, reduction, 1.0, layout);
}
#endif

// a[n, c, s], of input's shape: the weight of log-probability c in the loss of row (n, s), so
// that the row's loss is -sum_c a[n, c, s] logp[n, c, s]: (1 - eps) w[t] at the target class t
// plus (eps / C) w[c] for label smoothing eps; 0 in ignored rows. A constant (class indices have
// no gradient).
Tensor class_coefficients(const Tensor& target, const Tensor& weight, const Shape& input_sizes,
                          const ClassLayout& layout, int64_t ignore_index, double eps,
                          DType dtype) {
  const DType acc = acc_dtype(dtype);
  const Tensor t = dense(target, kInt64);
  const Tensor w = weight.defined() ? dense(weight, acc) : Tensor();
  Tensor a = zeros(input_sizes, acc);
  visit_acc(acc, [&](auto tag) {
    using A = typename decltype(tag)::type;
    const int64_t* tp = t.data_ptr<int64_t>();
    const A* wp = data_or_null<A>(w);
    A* ap = a.data_ptr<A>();
    const int64_t N = layout.N, C = layout.C, S = layout.S;
    const A uniform = A(eps / double(C)), target_share = A(1.0 - eps);
    parallel_for(N * S, N * C * S, [&](int64_t r) {
      const int64_t k = tp[r];
      if (k == ignore_index) return;
      A* row = ap + (r / S) * C * S + r % S;
      if (eps > 0) {
        for (int64_t c = 0; c < C; ++c) row[c * S] = uniform * (wp ? wp[c] : A(1));
      }
      row[k * S] += target_share * (wp ? wp[k] : A(1));
    });
  });
  return core::to_dtype(a, dtype);
}

// ---- nll_loss --------------------------------------------------------------------------------

struct NllLoss {
  static constexpr OpId id = OpId::nll_loss;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  ClassLayout layout{};
  double total_weight = 0.0;  // what "mean" divides by
  Shape input_sizes{};
  DType input_dtype = kFloat32;
  Tensor cuda_divisor{};  // on CUDA: what "mean" divides by, on the device (1 if it was 0)

  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& target, const Tensor& weight) {
    layout = class_layout(input, "nll_loss");
    check_class_target(input, target, layout, "nll_loss");
    check_class_weight(weight, layout.C, "nll_loss");
#if HALFGRAD_HAS_CUDA
    if (input.is_cuda()) {
      input_sizes = input.sizes();
      input_dtype = input.dtype();
      ctx.save({target, weight});
      cuda::ClassLossForward r =
          cuda::nll_loss(input, target, weight, ignore_index, cuda_reduction(reduction));
      cuda_divisor = std::move(r.divisor);
      return r.loss;
    }
#endif
    total_weight = check_class_indices(target, weight, layout.C, ignore_index, "nll_loss");
    input_sizes = input.sizes();
    input_dtype = input.dtype();
    ctx.save({target, weight});

    const DType acc = acc_dtype(input.dtype());
    const Tensor x = dense(input, acc), t = dense(target, kInt64);
    const Tensor w = weight.defined() ? dense(weight, acc) : Tensor();
    Tensor losses = empty(row_shape(input, layout), acc);
    visit_acc(acc, [&](auto tag) {
      using A = typename decltype(tag)::type;
      const A *xp = x.data_ptr<A>(), *wp = data_or_null<A>(w);
      const int64_t* tp = t.data_ptr<int64_t>();
      const int64_t N = layout.N, C = layout.C, S = layout.S;
      fill_elements(losses.data_ptr<A>(), N * S, [&](int64_t r) {
        const int64_t k = tp[r];
        if (k == ignore_index) return A(0);
        return -(wp ? wp[k] : A(1)) * xp[((r / S) * C + k) * S + r % S];
      });
    });
    return reduce_losses(losses, reduction, input.dtype(), total_weight);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    HG_CHECK(!ctx.needs_input_grad(2),
             "nll_loss: expected a weight that does not require grad (its gradient is not "
             "implemented, as in torch), got one that does; pass weight.detach()");
    const Tensor target = ctx.saved(0), weight = ctx.saved(1);
    Grads out(3);
#if HALFGRAD_HAS_CUDA
    if (target.is_cuda()) {
      if (!ctx.needs_input_grad(0)) return out;
      if (!autograd::is_grad_enabled()) {
        out[0] = cuda::nll_loss_backward(grads[0], target, weight, input_sizes, input_dtype,
                                         cuda_divisor, ignore_index, cuda_reduction(reduction));
        return out;
      }
      const Tensor a =
          cuda::class_coefficients(target, weight, input_sizes, ignore_index, 0.0, input_dtype);
      out[0] =
          neg(mul(cuda_row_grad(grads[0], reduction, cuda_divisor, layout), a)).to(input_dtype);
      return out;
    }
#endif
    if (ctx.needs_input_grad(0)) {
      // Every target ignored: the coefficients are all zero and so is the gradient (torch
      // gives zeros there, not 0 * inf).
      const double divisor = total_weight != 0.0 ? total_weight : 1.0;
      const Tensor a =
          class_coefficients(target, weight, input_sizes, layout, ignore_index, 0.0, input_dtype);
      out[0] = neg(mul(row_grad(grads[0], reduction, divisor, layout), a)).to(input_dtype);
    }
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

// The losses of rows [0, N S) of log-probabilities logp; y (class probabilities) or t (class
// indices) is given, w may be null.
template <class A>
void cross_entropy_rows(const A* logp, const int64_t* t, const A* y, const A* w,
                        const ClassLayout& layout, int64_t ignore_index, double eps, A* losses) {
  const int64_t N = layout.N, C = layout.C, S = layout.S;
  const A uniform = A(eps / double(C)), target_share = A(1.0 - eps);
  fill_elements(losses, N * S, [&](int64_t r) {
    const int64_t base = (r / S) * C * S + r % S;
    A total = 0;
    if (y) {
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = base + c * S;
        total += (w ? w[c] : A(1)) * (target_share * y[i] + uniform) * logp[i];
      }
      return -total;
    }
    const int64_t k = t[r];
    if (k == ignore_index) return A(0);
    if (eps > 0) {
      for (int64_t c = 0; c < C; ++c) total += (w ? w[c] : A(1)) * logp[base + c * S];
    }
    return -target_share * (w ? w[k] : A(1)) * logp[base + k * S] - uniform * total;
  });
}

// The first-order backward in one pass: dx (and dy for probabilities, when dy is not null) of
// rows [0, N S), g the gradient of each row's loss.
template <class A>
void cross_entropy_backward_rows(const A* logp, const int64_t* t, const A* y, const A* w,
                                 const A* g, const ClassLayout& layout, int64_t ignore_index,
                                 double eps, A* dx, A* dy) {
  const int64_t N = layout.N, C = layout.C, S = layout.S;
  const A uniform = A(eps / double(C)), target_share = A(1.0 - eps);
  A weight_sum = A(C);  // sum_c w[c]
  if (w) weight_sum = std::accumulate(w, w + C, A(0));
  parallel_for(N * S, N * C * S, [&](int64_t r) {
    const int64_t base = (r / S) * C * S + r % S;
    const A grad = g[r];
    if (y) {
      A a_sum = 0;
      for (int64_t c = 0; c < C; ++c) {
        a_sum += (w ? w[c] : A(1)) * (target_share * y[base + c * S] + uniform);
      }
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = base + c * S;
        const A w_c = w ? w[c] : A(1);
        if (dx) dx[i] = grad * (a_sum * std::exp(logp[i]) - w_c * (target_share * y[i] + uniform));
        if (dy) dy[i] = -grad * target_share * w_c * logp[i];
      }
      return;
    }
    const int64_t k = t[r];
    if (k == ignore_index) {
      for (int64_t c = 0; c < C; ++c) dx[base + c * S] = A(0);
      return;
    }
    const A w_k = w ? w[k] : A(1);
    const A a_sum = target_share * w_k + uniform * weight_sum;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = base + c * S;
      const A a_c = uniform * (w ? w[c] : A(1)) + (c == k ? target_share * w_k : A(0));
      dx[i] = grad * (a_sum * std::exp(logp[i]) - a_c);
    }
  });
}

struct CrossEntropy {
  static constexpr OpId id = OpId::cross_entropy;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;
  ClassLayout layout{};
  double divisor = 1.0;   // what "mean" divides by
  Tensor cuda_divisor{};  // on CUDA: the same, on the device (1 if it was 0)
  Tensor cuda_stats{};    // on CUDA: each row's statistics for the fused backward

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
#if HALFGRAD_HAS_CUDA
    if (input.is_cuda()) {
      ctx.save({input, target, weight});
      const DType dtype = probabilities ? result_type({input, target}) : input.dtype();
      cuda::ClassLossForward r = cuda::cross_entropy(
          input, target, weight, ignore_index, cuda_reduction(reduction), label_smoothing, dtype);
      cuda_divisor = std::move(r.divisor);
      cuda_stats = std::move(r.stats);
      return r.loss;
    }
#endif
    divisor = probabilities
                  ? double(layout.N * layout.S)
                  : check_class_indices(target, weight, layout.C, ignore_index, "cross_entropy");
    ctx.save({input, target, weight});

    const DType dtype = probabilities ? result_type({input, target}) : input.dtype();
    const DType acc = acc_dtype(dtype);
    const Tensor logp = cpu::norm_kernels.log_softmax(dense(input, acc), layout.class_dim);
    const Tensor y = probabilities ? dense(target, acc) : Tensor();
    const Tensor t = probabilities ? Tensor() : dense(target, kInt64);
    const Tensor w = weight.defined() ? dense(weight, acc) : Tensor();
    Tensor losses = empty(row_shape(input, layout), acc);
    visit_acc(acc, [&](auto tag) {
      using A = typename decltype(tag)::type;
      cross_entropy_rows<A>(logp.data_ptr<A>(), data_or_null<int64_t>(t), data_or_null<A>(y),
                            data_or_null<A>(w), layout, ignore_index, label_smoothing,
                            losses.data_ptr<A>());
    });
    return reduce_losses(losses, reduction, dtype, divisor);
  }

  Grads backward(OpContext& ctx, const Grads& grads) {
    HG_CHECK(!ctx.needs_input_grad(2),
             "cross_entropy: expected a weight that does not require grad (its gradient is not "
             "implemented, as in torch), got one that does; pass weight.detach()");
    const Tensor input = ctx.saved(0), target = ctx.saved(1), weight = ctx.saved(2);
#if HALFGRAD_HAS_CUDA
    if (input.is_cuda()) {
      if (!autograd::is_grad_enabled()) {
        cuda::LossGrads g =
            cuda::cross_entropy_backward(grads[0], input, target, weight, cuda_stats, cuda_divisor,
                                         ignore_index, cuda_reduction(reduction), label_smoothing,
                                         ctx.needs_input_grad(0), ctx.needs_input_grad(1));
        Grads out(3);
        out[0] = std::move(g.input);
        out[1] = std::move(g.target);
        return out;
      }
      const Tensor g = cuda_row_grad(grads[0], reduction, cuda_divisor, layout);
      const Tensor a = target.is_floating_point()
                           ? Tensor()
                           : cuda::class_coefficients(target, weight, input.sizes(), ignore_index,
                                                      label_smoothing, input.dtype());
      return backward_with_ops(ctx, g, a, input, target, weight);
    }
#endif
    // Every target ignored: the coefficients are all zero and so is the gradient.
    const double mean_divisor = divisor != 0.0 ? divisor : 1.0;
    if (!autograd::is_grad_enabled()) {
      return backward_fused(ctx, grads[0], input, target, weight, mean_divisor);
    }
    const Tensor g = row_grad(grads[0], reduction, mean_divisor, layout);
    const Tensor a = target.is_floating_point()
                         ? Tensor()
                         : class_coefficients(target, weight, input.sizes(), layout, ignore_index,
                                              label_smoothing, input.dtype());
    return backward_with_ops(ctx, g, a, input, target, weight);
  }

  Grads backward_fused(OpContext& ctx, const Tensor& grad, const Tensor& input,
                       const Tensor& target, const Tensor& weight, double mean_divisor) const {
    const bool probabilities = target.is_floating_point();
    const bool need_dx = ctx.needs_input_grad(0);
    const bool need_dy = probabilities && ctx.needs_input_grad(1);
    const DType acc = acc_dtype(probabilities ? result_type({input, target}) : input.dtype());
    const Tensor logp = cpu::norm_kernels.log_softmax(dense(input, acc), layout.class_dim);
    const Tensor y = probabilities ? dense(target, acc) : Tensor();
    const Tensor t = probabilities ? Tensor() : dense(target, kInt64);
    const Tensor w = weight.defined() ? dense(weight, acc) : Tensor();
    const Tensor g =
        reduction == Reduction::None
            ? dense(grad, acc)
            : full({layout.N * layout.S},
                   grad.item<double>() / (reduction == Reduction::Mean ? mean_divisor : 1.0), acc);
    // dx is needed to compute dy's rows anyway when only dy is asked for: cheap, and simpler.
    Tensor dx = empty(input.sizes(), acc);
    Tensor dy = need_dy ? empty(input.sizes(), acc) : Tensor();
    visit_acc(acc, [&](auto tag) {
      using A = typename decltype(tag)::type;
      cross_entropy_backward_rows<A>(logp.data_ptr<A>(), data_or_null<int64_t>(t),
                                     data_or_null<A>(y), data_or_null<A>(w), g.data_ptr<A>(),
                                     layout, ignore_index, label_smoothing, dx.data_ptr<A>(),
                                     need_dy ? dy.data_ptr<A>() : nullptr);
    });
    Grads out(3);
    if (need_dx) out[0] = core::to_dtype(dx, input.dtype());
    if (need_dy) out[1] = core::to_dtype(dy, target.dtype());
    return out;
  }

  // The same with ops, for create_graph. g: each row's gradient (row_grad);
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
    check_probabilities(input);
    ctx.save({input, target, weight});
#if HALFGRAD_HAS_CUDA
    if (input.is_cuda()) {
      return cuda::pointwise_loss(cuda::PointwiseLoss::BinaryCrossEntropy, input, target, weight,
                                  {}, cuda_reduction(reduction), double(input.numel()), dtype);
    }
#endif
    return elementwise_forward(input, target, weight, {}, reduction, dtype, double(input.numel()),
                               [](auto x, auto y, auto w, auto) {
                                 using A = decltype(x);
                                 // torch clamps each log at -100: x = 0 or 1 gives a finite loss.
                                 const A log_x = std::max(std::log(x), A(-100));
                                 const A log_1mx = std::max(std::log1p(-x), A(-100));
                                 return -w * (y * log_x + (A(1) - y) * log_1mx);
                               });
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1), weight = ctx.saved(2);
    if (Grads fused =
            cuda_pointwise_backward(ctx, cuda::PointwiseLoss::BinaryCrossEntropy, grads[0], input,
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
#if HALFGRAD_HAS_CUDA
    if (input.is_cuda()) {
      return cuda::pointwise_loss(cuda::PointwiseLoss::BinaryCrossEntropyWithLogits, input, target,
                                  weight, pos_weight, cuda_reduction(reduction),
                                  double(input.numel()), dtype);
    }
#endif
    return elementwise_forward(
        input, target, weight, pos_weight, reduction, dtype, double(input.numel()),
        [](auto x, auto y, auto w, auto p) {
          using A = decltype(x);
          // softplus(-x) = max(-x, 0) + log1p(exp(-|x|)): no overflow.
          const A softplus_neg_x = std::max(-x, A(0)) + std::log1p(std::exp(-std::abs(x)));
          return w * ((A(1) - y) * x + (A(1) + (p - A(1)) * y) * softplus_neg_x);
        });
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1);
    const Tensor weight = ctx.saved(2), pos_weight = ctx.saved(3);
    if (Grads fused = cuda_pointwise_backward(
            ctx, cuda::PointwiseLoss::BinaryCrossEntropyWithLogits, grads[0], input, target, weight,
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
#if HALFGRAD_HAS_CUDA
    if (input.is_cuda()) {
      return cuda::pointwise_loss(
          log_target ? cuda::PointwiseLoss::KlDivLogTarget : cuda::PointwiseLoss::KlDiv, input,
          target, {}, {}, cuda_reduction(reduction), divisor, dtype);
    }
#endif
    if (log_target) {
      return elementwise_forward(input, target, {}, {}, reduction, dtype, divisor,
                                 [](auto x, auto y, auto, auto) { return std::exp(y) * (y - x); });
    }
    // y log y is taken as 0 where y == 0 (torch's xlogy), so a zero target adds nothing.
    return elementwise_forward(input, target, {}, {}, reduction, dtype, divisor,
                               [](auto x, auto y, auto, auto) {
                                 using A = decltype(x);
                                 return (y == A(0) ? A(0) : y * std::log(y)) - y * x;
                               });
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor input = ctx.saved(0), target = ctx.saved(1);
    if (Grads fused = cuda_pointwise_backward(
            ctx, log_target ? cuda::PointwiseLoss::KlDivLogTarget : cuda::PointwiseLoss::KlDiv,
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

}  // namespace

// ---- the public functions -------------------------------------------------------------------

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
