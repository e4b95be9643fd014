// The CPU loss kernels (kernel/loss.h): the host loops of each loss's forward, mse_loss's and
// cross_entropy's fused first-order backwards, and the class coefficients of the op formulas.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/strided_loop.h"
#include "halfgrad/core/view.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/reduce.h"
#include "halfgrad/kernel/checks.h"
#include "halfgrad/kernel/loss.h"

namespace hg::cpu {

namespace {

using kernel::acc_dtype;
using kernel::ClassLayout;
using kernel::ClassLossForward;
using kernel::LossGrads;
using kernel::LossReduction;
using kernel::PointwiseLoss;

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

// Per-element losses (in the accumulation dtype) reduced and rounded once to `dtype`. Mean
// divides the sum by `divisor`.
Tensor reduce_losses(const Tensor& losses, LossReduction reduction, DType dtype, double divisor) {
  switch (reduction) {
    case LossReduction::None:
      return core::to_dtype(losses, dtype);
    case LossReduction::Sum:
      return reduce_kernels.reduce(kernel::Reduction::Sum, losses, {}, /*keepdim=*/false, dtype,
                                   2.0);
    default: {
      const double total =
          reduce_kernels
              .reduce(kernel::Reduction::Sum, losses, {}, /*keepdim=*/false, kFloat64, 2.0)
              .item<double>();
      return scalar_tensor(total / divisor, dtype);
    }
  }
}

// binary_cross_entropy's input: probabilities, every element in [0, 1]; NaN fails the check
// too, as in torch. (The CUDA kernel checks on the device: NOTE [Losses on CUDA] in
// cuda/loss.cpp.)
void check_probabilities(const Tensor& input) {
  if (input.numel() == 0) return;
  const double low = reduce_kernels.reduce(kernel::Reduction::Amin, input, {}, false, kFloat64, 2.0)
                         .item<double>();
  const double high =
      reduce_kernels.reduce(kernel::Reduction::Amax, input, {}, false, kFloat64, 2.0)
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
                           const Tensor& pos_weight, LossReduction reduction, DType dtype,
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
  if (acc == kFloat32 && reduction != LossReduction::None && x.numel() <= kSmallLoss) {
    // A small float loss: the terms in a per-thread buffer, summed in reduce's order
    // (cpu::sum_floats), without a tensor for them or the reduction's set-up.
    thread_local std::vector<float> terms;
    terms.resize(size_t(x.numel()));
    fill_terms(terms.data());
    const float sum = cpu::sum_floats(terms.data(), int64_t(terms.size()));
    // (double(sum) is the float exactly: rounding it to dtype rounds the float, as reduce does.)
    return scalar_tensor(reduction == LossReduction::Sum ? double(sum) : double(sum) / divisor,
                         dtype);
  }
  Tensor losses = empty(input.sizes(), acc);
  visit_acc(acc, [&](auto tag) { fill_terms(losses.data_ptr<typename decltype(tag)::type>()); });
  return reduce_losses(losses, reduction, dtype, divisor);
}

// ---- pointwise losses ----------------------------------------------------------------------

Tensor pointwise_loss(PointwiseLoss kind, const Tensor& input, const Tensor& target,
                      const Tensor& weight, const Tensor& pos_weight, LossReduction reduction,
                      double divisor, DType dtype, double beta) {
  switch (kind) {
    case PointwiseLoss::Mse:
      return elementwise_forward(input, target, weight, pos_weight, reduction, dtype, divisor,
                                 [](auto x, auto y, auto, auto) { return (x - y) * (x - y); });
    case PointwiseLoss::L1:
      return elementwise_forward(input, target, weight, pos_weight, reduction, dtype, divisor,
                                 [](auto x, auto y, auto, auto) { return std::abs(x - y); });
    case PointwiseLoss::SmoothL1:
      return elementwise_forward(input, target, weight, pos_weight, reduction, dtype, divisor,
                                 [beta](auto x, auto y, auto, auto) {
                                   using A = decltype(x);
                                   const A d = std::abs(x - y), beta_a = A(beta);
                                   // beta = 0 never takes the quadratic branch: l1_loss.
                                   return d < beta_a ? A(0.5) * d * d / beta_a
                                                     : d - A(0.5) * beta_a;
                                 });
    case PointwiseLoss::BinaryCrossEntropy:
      check_probabilities(input);
      return elementwise_forward(input, target, weight, pos_weight, reduction, dtype, divisor,
                                 [](auto x, auto y, auto w, auto) {
                                   using A = decltype(x);
                                   // torch clamps each log at -100: x = 0 or 1 gives a finite
                                   // loss.
                                   const A log_x = std::max(std::log(x), A(-100));
                                   const A log_1mx = std::max(std::log1p(-x), A(-100));
                                   return -w * (y * log_x + (A(1) - y) * log_1mx);
                                 });
    case PointwiseLoss::BinaryCrossEntropyWithLogits:
      return elementwise_forward(
          input, target, weight, pos_weight, reduction, dtype, divisor,
          [](auto x, auto y, auto w, auto p) {
            using A = decltype(x);
            // softplus(-x) = max(-x, 0) + log1p(exp(-|x|)): no overflow.
            const A softplus_neg_x = std::max(-x, A(0)) + std::log1p(std::exp(-std::abs(x)));
            return w * ((A(1) - y) * x + (A(1) + (p - A(1)) * y) * softplus_neg_x);
          });
    case PointwiseLoss::KlDiv:
      // y log y is taken as 0 where y == 0 (torch's xlogy), so a zero target adds nothing.
      return elementwise_forward(input, target, weight, pos_weight, reduction, dtype, divisor,
                                 [](auto x, auto y, auto, auto) {
                                   using A = decltype(x);
                                   return (y == A(0) ? A(0) : y * std::log(y)) - y * x;
                                 });
    case PointwiseLoss::KlDivLogTarget:
      return elementwise_forward(input, target, weight, pos_weight, reduction, dtype, divisor,
                                 [](auto x, auto y, auto, auto) { return std::exp(y) * (y - x); });
  }
  HG_ERROR("pointwise_loss: unknown loss kind {}", int(kind));
}

// NOTE [Fused mse_loss backward] Unless the backward pass is recorded (create_graph), a
// "mean" or "sum" mse_loss over contiguous input and target of the gradient's dtype runs its
// backward as one pass that computes, element by element, what the formula's ops compute,
// rounding to the dtype where each op rounds: 2 ((g / N) (x - y)), and its negation for the
// target. No temporaries, one tensor per input. Returns nothing where it does not apply.
std::optional<LossGrads> mse_loss_backward(const Tensor& grad, const Tensor& input,
                                           const Tensor& target, LossReduction reduction,
                                           double divisor, bool need_input, bool need_target) {
  if (reduction == LossReduction::None) return std::nullopt;
  const DType dtype = input.dtype();
  if (target.dtype() != dtype || grad.dtype() != dtype || grad.numel() != 1 ||
      !input.is_contiguous() || !target.is_contiguous()) {
    return std::nullopt;
  }
  LossGrads out;
  if (need_input) out.input = empty(input.sizes(), input.options());
  if (need_target) out.target = empty(target.sizes(), target.options());
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating_v<T>) {
      using C = compute_t<T>;
      const auto rounded = [](C v) {
        return cast_value<C>(cast_value<T>(v));
      };  // as an op stores it
      C g = cast_value<C>(*grad.data_ptr<T>());
      if (reduction == LossReduction::Mean) {
        g = rounded(g / cast_value<C>(cast_value<T>(divisor)));
      }
      const T* x = input.data_ptr<T>();
      const T* y = target.data_ptr<T>();
      T* dx = need_input ? out.input.data_ptr<T>() : nullptr;
      T* dy = need_target ? out.target.data_ptr<T>() : nullptr;
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

std::optional<LossGrads> pointwise_loss_backward(
    PointwiseLoss kind, const Tensor& grad, const Tensor& input, const Tensor& target,
    const Tensor& /*weight*/, const Tensor& /*pos_weight*/, LossReduction reduction, double divisor,
    bool need_input, bool need_target, double /*beta*/) {
  if (kind != PointwiseLoss::Mse) return std::nullopt;  // the op formulas
  return mse_loss_backward(grad, input, target, reduction, divisor, need_input, need_target);
}

// ---- class-index losses: shared parts ---------------------------------------------------------

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

// What a forward returns: the backward's divisor of Mean is 1 when the forward's was 0 (every
// target ignored: the coefficients are all zero and so is the gradient, where torch gives
// zeros, not 0 * inf).
ClassLossForward class_forward(Tensor loss, double divisor) {
  ClassLossForward result;
  result.loss = std::move(loss);
  result.host_divisor = divisor != 0.0 ? divisor : 1.0;
  return result;
}

// a[n, c, s], of input's shape: the weight of log-probability c in the loss of row (n, s), so
// that the row's loss is -sum_c a[n, c, s] logp[n, c, s]: (1 - eps) w[t] at the target class t
// plus (eps / C) w[c] for label smoothing eps; 0 in ignored rows. A constant (class indices have
// no gradient).
Tensor class_coefficients(const Tensor& target, const Tensor& weight, const Shape& input_sizes,
                          int64_t ignore_index, double eps, DType dtype) {
  const ClassLayout layout = kernel::class_layout(input_sizes);
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

ClassLossForward nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                          int64_t ignore_index, LossReduction reduction) {
  const ClassLayout layout = kernel::class_layout(input.sizes());
  const double total_weight =
      check_class_indices(target, weight, layout.C, ignore_index, "nll_loss");
  const DType acc = acc_dtype(input.dtype());
  const Tensor x = dense(input, acc), t = dense(target, kInt64);
  const Tensor w = weight.defined() ? dense(weight, acc) : Tensor();
  Tensor losses = empty(kernel::row_shape(input.sizes(), layout), acc);
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
  return class_forward(reduce_losses(losses, reduction, input.dtype(), total_weight), total_weight);
}

// The CPU has no fused nll_loss backward: the op formula with class_coefficients.
std::optional<Tensor> nll_loss_backward(const Tensor&, const Tensor&, const Tensor&, const Shape&,
                                        DType, const ClassLossForward&, int64_t, LossReduction) {
  return std::nullopt;
}

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

ClassLossForward cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                               int64_t ignore_index, LossReduction reduction,
                               double label_smoothing, DType dtype) {
  const ClassLayout layout = kernel::class_layout(input.sizes());
  const bool probabilities = target.is_floating_point();
  const double divisor =
      probabilities ? double(layout.N * layout.S)
                    : check_class_indices(target, weight, layout.C, ignore_index, "cross_entropy");
  const DType acc = acc_dtype(dtype);
  const Tensor logp = norm_kernels.log_softmax(dense(input, acc), layout.class_dim);
  const Tensor y = probabilities ? dense(target, acc) : Tensor();
  const Tensor t = probabilities ? Tensor() : dense(target, kInt64);
  const Tensor w = weight.defined() ? dense(weight, acc) : Tensor();
  Tensor losses = empty(kernel::row_shape(input.sizes(), layout), acc);
  visit_acc(acc, [&](auto tag) {
    using A = typename decltype(tag)::type;
    cross_entropy_rows<A>(logp.data_ptr<A>(), data_or_null<int64_t>(t), data_or_null<A>(y),
                          data_or_null<A>(w), layout, ignore_index, label_smoothing,
                          losses.data_ptr<A>());
  });
  return class_forward(reduce_losses(losses, reduction, dtype, divisor), divisor);
}

LossGrads cross_entropy_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                                 const Tensor& weight, const ClassLossForward& forward,
                                 int64_t ignore_index, LossReduction reduction,
                                 double label_smoothing, bool need_input, bool need_target) {
  HG_CHECK(reduction != LossReduction::Mean || forward.host_divisor.has_value(),
           "cross_entropy: the fused backward of \"mean\" needs the forward's divisor");
  const ClassLayout layout = kernel::class_layout(input.sizes());
  const bool probabilities = target.is_floating_point();
  const bool need_dy = probabilities && need_target;
  // The forward's accumulation dtype: that of the promoted dtype for class probabilities (both
  // dimensioned tensors, so result_type's promotion is promote_types).
  const DType acc =
      acc_dtype(probabilities ? promote_types(input.dtype(), target.dtype()) : input.dtype());
  const Tensor logp = norm_kernels.log_softmax(dense(input, acc), layout.class_dim);
  const Tensor y = probabilities ? dense(target, acc) : Tensor();
  const Tensor t = probabilities ? Tensor() : dense(target, kInt64);
  const Tensor w = weight.defined() ? dense(weight, acc) : Tensor();
  const Tensor g = reduction == LossReduction::None
                       ? dense(grad, acc)
                       : full({layout.N * layout.S},
                              grad.item<double>() /
                                  (reduction == LossReduction::Mean ? *forward.host_divisor : 1.0),
                              acc);
  // dx is needed to compute dy's rows anyway when only dy is asked for: cheap, and simpler.
  Tensor dx = empty(input.sizes(), acc);
  Tensor dy = need_dy ? empty(input.sizes(), acc) : Tensor();
  visit_acc(acc, [&](auto tag) {
    using A = typename decltype(tag)::type;
    cross_entropy_backward_rows<A>(logp.data_ptr<A>(), data_or_null<int64_t>(t), data_or_null<A>(y),
                                   data_or_null<A>(w), g.data_ptr<A>(), layout, ignore_index,
                                   label_smoothing, dx.data_ptr<A>(),
                                   need_dy ? dy.data_ptr<A>() : nullptr);
  });
  LossGrads out;
  if (need_input) out.input = core::to_dtype(dx, input.dtype());
  if (need_dy) out.target = core::to_dtype(dy, target.dtype());
  return out;
}

}  // namespace

const kernel::LossKernels loss_kernels = HG_LOSS_KERNELS;

}  // namespace hg::cpu
