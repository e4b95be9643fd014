// The optimizers' update rules, written once: the arithmetic of one element of SGD, Adam/AdamW,
// RMSprop, Adagrad, Adamax, Adadelta, RAdam and NAdam (and the unscale), which the CPU loops
// (cpu/multi_tensor.cpp), the CPU's AVX-512 passes (cpu/multi_tensor_avx512.cpp: SGD and Adam)
// and the CUDA kernels (cuda/multi_tensor.cu) all instantiate.
//
// NOTE [Update rules written once] A rule is a template over the value type V it computes in:
// the compute type C (float; double for float64 parameters) in the scalar loops and the CUDA
// kernels, 16 float lanes in the AVX-512 passes. It reads the operations it needs unqualified:
// + - / and unary minus, mul (a product rounded on its own: nvcc would otherwise fuse it with an
// add into a multiply-add, which the CPU loops never do, so every product goes through it),
// square_root and max_of; this header defines them for float and double, a vector type brings
// its own beside it (found by argument-dependent lookup). The per-step constants are computed
// once, in double as torch computes them on the host, by the *_constants functions here on both
// backends. The rule takes the state already loaded and leaves the new state in its reference
// arguments after `round_state` (the rounding to the state's storage dtype and back: the CPU
// and CUDA passes use the stored, rounded state, as torch does); the caller stores it and the
// returned parameter value (rounded to nearest, or stochastically with bf16_params: core's
// stochastic_round_bfloat16 on both backends). The operation order is torch's; float32 and
// float64 follow its formulas term by term (NOTE [Fused optimizer pass] in
// cpu/multi_tensor.cpp).
#pragma once

#include <cmath>

#include "halfgrad/core/host_device.h"
#include "halfgrad/kernel/multi_tensor_args.h"

namespace hg::kernel::rules {

// ---- the operations, for scalars -------------------------------------------------------------

HG_HOST_DEVICE inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
HG_HOST_DEVICE inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
HG_HOST_DEVICE inline float square_root(float x) {
#if defined(__CUDA_ARCH__)
  return ::sqrtf(x);
#else
  return std::sqrt(x);
#endif
}
HG_HOST_DEVICE inline double square_root(double x) { return ::sqrt(x); }
HG_HOST_DEVICE inline float absolute(float x) { return x < 0 ? -x : (x == 0 ? 0.0f : x); }
HG_HOST_DEVICE inline double absolute(double x) { return x < 0 ? -x : (x == 0 ? 0.0 : x); }
// torch.amax of two values: NaN when either is.
template <class C>
HG_HOST_DEVICE inline C max_propagating_nan(C a, C b) {
  return (a != a || a > b) ? a : b;
}
// std::max(previous, v): previous unless previous < v (so previous when either is NaN).
template <class C>
HG_HOST_DEVICE inline C max_of(C previous, C v) {
  return previous < v ? v : previous;
}

// round_state for state kept in the compute type: nothing to round.
struct KeepState {
  template <class V>
  HG_HOST_DEVICE V operator()(V x) const {
    return x;
  }
};

// ---- the unscale -----------------------------------------------------------------------------

// GradScaler's unscale of one value: x * inv_scale, in the compute type.
template <class V>
HG_HOST_DEVICE inline V unscale(V x, V inv_scale) {
  return mul(x, inv_scale);
}

// ---- the gradient every rule starts from -----------------------------------------------------

// What each rule does to the gradient first: GradScaler's unscale (grad_scale given), the sign
// (maximize), and torch's L2 weight decay g + weight_decay * p (not the decoupled decay of AdamW
// and NAdam's decoupled_weight_decay, which scales p instead).
template <class C>
struct GradTerms {
  C inv_scale, weight_decay;
  bool scaled, decay, maximize;
};
// decay: weight_decay != 0 as torch checks it on the host (a weight_decay that rounds to 0 in C
// still adds 0 * p, as torch's add does) and the decay is L2.
template <class C>
HG_HOST_DEVICE GradTerms<C> grad_terms(double weight_decay, bool l2_decay, bool maximize,
                                       bool scaled, double inv_scale) {
  GradTerms<C> t;
  t.inv_scale = C(inv_scale);
  t.weight_decay = C(weight_decay);
  t.scaled = scaled;
  t.decay = l2_decay && weight_decay != 0;
  t.maximize = maximize;
  return t;
}
// The gradient as the rule uses it. The unscale and the negation commute exactly (a product
// and a sign), so the rules whose torch code negates first (Adamax, Adadelta) get the same bits.
template <class V, class C>
HG_HOST_DEVICE inline V prepared_grad(V g, V p, const GradTerms<C>& t) {
  if (t.scaled) g = unscale(g, V(t.inv_scale));
  if (t.maximize) g = -g;
  if (t.decay) g = g + mul(V(t.weight_decay), p);
  return g;
}

// ---- SGD -------------------------------------------------------------------------------------

template <class C>
struct SGDConstants {
  C lr, momentum, damp;
  GradTerms<C> grad;
  bool nesterov;
  bool first;  // the momentum buffer holds no value yet: this step sets it to the gradient
};
// scaled: grad_scale given (inv_scale = 1 / grad_scale, in double); lr: the group's lr (on
// CUDA possibly read from the device); first: as above.
template <class C>
HG_HOST_DEVICE SGDConstants<C> sgd_constants(const SGDArgs& a, double lr, bool scaled,
                                             double inv_scale, bool first) {
  SGDConstants<C> k;
  k.lr = C(lr);
  k.momentum = C(a.momentum);
  k.damp = C(1 - a.dampening);
  k.grad = grad_terms<C>(a.weight_decay, true, a.maximize, scaled, inv_scale);
  k.nesterov = a.nesterov;
  k.first = first;
  return k;
}

// torch.optim.SGD: the new parameter value; buffer (null without momentum) holds the momentum
// buffer's value and receives its new one.
template <class V, class C, class RoundState>
HG_HOST_DEVICE inline V sgd_rule(V p, V g, V* buffer, const SGDConstants<C>& k,
                                 RoundState round_state) {
  g = prepared_grad(g, p, k.grad);
  if (buffer != nullptr) {
    *buffer = round_state(k.first ? g : mul(V(k.momentum), *buffer) + mul(V(k.damp), g));
    g = k.nesterov ? g + mul(V(k.momentum), *buffer) : *buffer;
  }
  return p - mul(V(k.lr), g);
}

// ---- Adam and AdamW --------------------------------------------------------------------------

template <class C>
struct AdamConstants {
  C step_size, bias_correction2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps, decay_factor;
  GradTerms<C> grad;
  bool decoupled, amsgrad;  // decoupled: AdamW's p *= decay_factor (weight_decay != 0)
};
// step: the step this update takes (1 on the first).
template <class C>
HG_HOST_DEVICE AdamConstants<C> adam_constants(const AdamArgs& a, double lr, bool scaled,
                                               double inv_scale, double step) {
  AdamConstants<C> k;
  k.step_size = C(lr / (1 - ::pow(a.beta1, step)));
  k.bias_correction2_sqrt = C(::sqrt(1 - ::pow(a.beta2, step)));
  k.one_minus_beta1 = C(1 - a.beta1);
  k.beta2 = C(a.beta2);
  k.one_minus_beta2 = C(1 - a.beta2);
  k.eps = C(a.eps);
  k.decay_factor = C(1 - mul(lr, a.weight_decay));
  k.grad = grad_terms<C>(a.weight_decay, !a.decoupled_weight_decay, a.maximize, scaled, inv_scale);
  k.decoupled = a.decoupled_weight_decay && a.weight_decay != 0;
  k.amsgrad = a.amsgrad;
  return k;
}

// torch.optim.Adam (AdamW with decoupled weight decay): the new parameter value; m, v and (with
// amsgrad) *vmax hold exp_avg, exp_avg_sq and max_exp_avg_sq and receive their new values.
template <class V, class C, class RoundState>
HG_HOST_DEVICE inline V adam_rule(V p, V g, V& m, V& v, V* vmax, const AdamConstants<C>& k,
                                  RoundState round_state) {
  if (k.decoupled) p = mul(p, V(k.decay_factor));
  g = prepared_grad(g, p, k.grad);
  m = round_state(m + mul(V(k.one_minus_beta1), g - m));  // torch's lerp
  v = round_state(mul(V(k.beta2), v) + mul(mul(V(k.one_minus_beta2), g), g));
  if (k.amsgrad) *vmax = round_state(max_of(*vmax, v));  // the denominator's v with amsgrad
  const V denom = square_root(k.amsgrad ? *vmax : v) / V(k.bias_correction2_sqrt) + V(k.eps);
  return p - mul(V(k.step_size), m / denom);
}

// ---- RMSprop ---------------------------------------------------------------------------------

template <class C>
struct RMSpropConstants {
  C lr, alpha, one_minus_alpha, eps, momentum;
  GradTerms<C> grad;
};
template <class C>
HG_HOST_DEVICE RMSpropConstants<C> rmsprop_constants(const RMSpropArgs& a, double lr, bool scaled,
                                                     double inv_scale) {
  RMSpropConstants<C> k;
  k.lr = C(lr);
  k.alpha = C(a.alpha);
  k.one_minus_alpha = C(1 - a.alpha);
  k.eps = C(a.eps);
  k.momentum = C(a.momentum);
  k.grad = grad_terms<C>(a.weight_decay, true, a.maximize, scaled, inv_scale);
  return k;
}

// torch.optim.RMSprop (addcmul's value * a * b, addcdiv's value * a / b): the new parameter
// value; square_avg, and *grad_avg (centered only) and *buffer (momentum > 0 only) when not
// null, hold the state and receive its new values.
template <class V, class C, class RoundState>
HG_HOST_DEVICE inline V rmsprop_rule(V p, V g, V& square_avg, V* grad_avg, V* buffer,
                                     const RMSpropConstants<C>& k, RoundState round_state) {
  g = prepared_grad(g, p, k.grad);
  square_avg = round_state(mul(square_avg, V(k.alpha)) + mul(mul(V(k.one_minus_alpha), g), g));
  V avg;
  if (grad_avg != nullptr) {
    *grad_avg = round_state(mul(*grad_avg, V(k.alpha)) + mul(V(k.one_minus_alpha), g));
    avg = square_root(square_avg - mul(*grad_avg, *grad_avg)) + V(k.eps);
  } else {
    avg = square_root(square_avg) + V(k.eps);
  }
  if (buffer != nullptr) {
    *buffer = round_state(mul(*buffer, V(k.momentum)) + g / avg);
    return p - mul(V(k.lr), *buffer);
  }
  return p - mul(V(k.lr), g) / avg;
}

// ---- Adagrad ---------------------------------------------------------------------------------

template <class C>
struct AdagradConstants {
  C clr, eps;  // clr: the lr decayed for this step
  GradTerms<C> grad;
};
// step: the step this update takes (1 on the first).
template <class C>
HG_HOST_DEVICE AdagradConstants<C> adagrad_constants(const AdagradArgs& a, double lr, bool scaled,
                                                     double inv_scale, double step) {
  AdagradConstants<C> k;
  k.clr = C(lr / (1 + mul(step - 1, a.lr_decay)));
  k.eps = C(a.eps);
  k.grad = grad_terms<C>(a.weight_decay, true, a.maximize, scaled, inv_scale);
  return k;
}

// torch.optim.Adagrad: the new parameter value; sum holds the state and receives its new value.
template <class V, class C, class RoundState>
HG_HOST_DEVICE inline V adagrad_rule(V p, V g, V& sum, const AdagradConstants<C>& k,
                                     RoundState round_state) {
  g = prepared_grad(g, p, k.grad);
  sum = round_state(sum + mul(g, g));
  const V std_dev = square_root(sum) + V(k.eps);
  return p - mul(V(k.clr), g) / std_dev;
}

// ---- Adamax ----------------------------------------------------------------------------------

template <class C>
struct AdamaxConstants {
  C clr, beta1, one_minus_beta1, beta2, eps;  // clr: lr / (1 - beta1^t)
  GradTerms<C> grad;
};
// step: the step this update takes (1 on the first).
template <class C>
HG_HOST_DEVICE AdamaxConstants<C> adamax_constants(const AdamaxArgs& a, double lr, bool scaled,
                                                   double inv_scale, double step) {
  AdamaxConstants<C> k;
  k.clr = C(lr / (1 - ::pow(a.beta1, step)));
  k.beta1 = C(a.beta1);
  k.one_minus_beta1 = C(1 - a.beta1);
  k.beta2 = C(a.beta2);
  k.eps = C(a.eps);
  k.grad = grad_terms<C>(a.weight_decay, true, a.maximize, scaled, inv_scale);
  return k;
}

// torch.optim.Adamax (add_'s self + alpha * other, amax of the decayed norm and |g| + eps,
// addcdiv's value * a / b): the new parameter value; m and u hold exp_avg and exp_inf and
// receive their new values.
template <class V, class C, class RoundState>
HG_HOST_DEVICE inline V adamax_rule(V p, V g, V& m, V& u, const AdamaxConstants<C>& k,
                                    RoundState round_state) {
  g = prepared_grad(g, p, k.grad);
  m = round_state(mul(m, V(k.beta1)) + mul(V(k.one_minus_beta1), g));
  u = round_state(max_propagating_nan(mul(u, V(k.beta2)), absolute(g) + V(k.eps)));
  return p - mul(V(k.clr), m) / u;
}

// ---- Adadelta --------------------------------------------------------------------------------

template <class C>
struct AdadeltaConstants {
  C lr, rho, one_minus_rho, eps;
  GradTerms<C> grad;
};
template <class C>
HG_HOST_DEVICE AdadeltaConstants<C> adadelta_constants(const AdadeltaArgs& a, double lr,
                                                       bool scaled, double inv_scale) {
  AdadeltaConstants<C> k;
  k.lr = C(lr);
  k.rho = C(a.rho);
  k.one_minus_rho = C(1 - a.rho);
  k.eps = C(a.eps);
  k.grad = grad_terms<C>(a.weight_decay, true, a.maximize, scaled, inv_scale);
  return k;
}

// torch.optim.Adadelta: the new parameter value; square_avg and acc_delta hold the state and
// receive its new values.
template <class V, class C, class RoundState>
HG_HOST_DEVICE inline V adadelta_rule(V p, V g, V& square_avg, V& acc_delta,
                                      const AdadeltaConstants<C>& k, RoundState round_state) {
  g = prepared_grad(g, p, k.grad);
  square_avg = round_state(mul(square_avg, V(k.rho)) + mul(mul(V(k.one_minus_rho), g), g));
  const V std_dev = square_root(square_avg + V(k.eps));
  const V delta = mul(square_root(acc_delta + V(k.eps)) / std_dev, g);
  acc_delta = round_state(mul(acc_delta, V(k.rho)) + mul(mul(V(k.one_minus_rho), delta), delta));
  return p - mul(V(k.lr), delta);
}

// ---- RAdam -----------------------------------------------------------------------------------

template <class C>
struct RAdamConstants {
  C lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  C bias_correction1, bias_correction2_sqrt, rect;
  GradTerms<C> grad;  // no maximize: torch's RAdam has none
  bool rectified;     // rectified: the variance is tractable (rho_t > 5)
};
// step: the step this update takes (1 on the first). The rectification in double, as torch
// computes it on the host.
template <class C>
HG_HOST_DEVICE RAdamConstants<C> radam_constants(const RAdamArgs& a, double lr, bool scaled,
                                                 double inv_scale, double step) {
  RAdamConstants<C> k;
  const double bias_correction1 = 1 - ::pow(a.beta1, step);
  const double bias_correction2 = 1 - ::pow(a.beta2, step);
  const double rho_inf = 2 / (1 - a.beta2) - 1;
  const double rho_t = rho_inf - mul(mul(2.0, step), ::pow(a.beta2, step)) / bias_correction2;
  k.rectified = rho_t > 5.0;
  k.rect = k.rectified ? C(::sqrt(mul(mul(rho_t - 4, rho_t - 2), rho_inf) /
                                  mul(mul(rho_inf - 4, rho_inf - 2), rho_t)))
                       : C(1);
  k.lr = C(lr);
  k.beta1 = C(a.beta1);
  k.one_minus_beta1 = C(1 - a.beta1);
  k.beta2 = C(a.beta2);
  k.one_minus_beta2 = C(1 - a.beta2);
  k.eps = C(a.eps);
  k.bias_correction1 = C(bias_correction1);
  k.bias_correction2_sqrt = C(::sqrt(bias_correction2));
  k.grad = grad_terms<C>(a.weight_decay, true, false, scaled, inv_scale);
  return k;
}

// torch.optim.RAdam (number / tensor as torch computes it: the reciprocal, times the number):
// the new parameter value; m and v hold exp_avg and exp_avg_sq and receive their new values.
template <class V, class C, class RoundState>
HG_HOST_DEVICE inline V radam_rule(V p, V g, V& m, V& v, const RAdamConstants<C>& k,
                                   RoundState round_state) {
  g = prepared_grad(g, p, k.grad);
  m = round_state(mul(m, V(k.beta1)) + mul(V(k.one_minus_beta1), g));
  v = round_state(mul(v, V(k.beta2)) + mul(mul(V(k.one_minus_beta2), g), g));
  const V corrected = m / V(k.bias_correction1);
  if (!k.rectified) return p - mul(corrected, V(k.lr));
  const V adaptive_lr = mul(V(C(1)) / (square_root(v) + V(k.eps)), V(k.bias_correction2_sqrt));
  return p - mul(mul(mul(corrected, V(k.lr)), adaptive_lr), V(k.rect));
}

// ---- NAdam ----------------------------------------------------------------------------------

template <class C>
struct NAdamConstants {
  C one_minus_beta1, beta2, one_minus_beta2, eps, decay_factor;
  C bias_correction2;
  GradTerms<C> grad;
  // The two addcdiv values: -lr (1 - mu) / (1 - mu_product) for the gradient and
  // -lr mu_next / (1 - mu_product mu_next) for the average.
  C grad_step, avg_step;
  float mu_product;  // the product of the momentum coefficients after this step, as stored
  bool decoupled;    // p *= decay_factor (decoupled_weight_decay, weight_decay != 0)
};
// step: the step this update takes (1 on the first); mu_product: the stored product of the
// earlier steps' momentum coefficients (1 before the first). The momentum schedule in double,
// as torch computes it on the host; the product in float32, as torch keeps it (a float32 tensor
// times a number rounded to float32).
template <class C>
HG_HOST_DEVICE NAdamConstants<C> nadam_constants(const NAdamArgs& a, double lr, bool scaled,
                                                 double inv_scale, double step, float mu_product) {
  NAdamConstants<C> k;
  const double mu = mul(a.beta1, 1 - mul(0.5, ::pow(0.96, mul(step, a.momentum_decay))));
  const double mu_next = mul(a.beta1, 1 - mul(0.5, ::pow(0.96, mul(step + 1, a.momentum_decay))));
  k.mu_product = mul(mu_product, float(mu));
  const double product = k.mu_product;
  k.grad_step = C(mul(-lr, 1 - mu) / (1 - product));
  k.avg_step = C(mul(-lr, mu_next) / (1 - mul(product, mu_next)));
  k.one_minus_beta1 = C(1 - a.beta1);
  k.beta2 = C(a.beta2);
  k.one_minus_beta2 = C(1 - a.beta2);
  k.eps = C(a.eps);
  k.decay_factor = C(1 - mul(lr, a.weight_decay));
  k.bias_correction2 = C(1 - ::pow(a.beta2, step));
  k.grad = grad_terms<C>(a.weight_decay, !a.decoupled_weight_decay, a.maximize, scaled, inv_scale);
  k.decoupled = a.decoupled_weight_decay && a.weight_decay != 0;
  return k;
}

// torch.optim.NAdam (lerp for the average, addcdiv's value * a / b twice): the new parameter
// value; m and v hold exp_avg and exp_avg_sq and receive their new values.
template <class V, class C, class RoundState>
HG_HOST_DEVICE inline V nadam_rule(V p, V g, V& m, V& v, const NAdamConstants<C>& k,
                                   RoundState round_state) {
  if (k.decoupled) p = mul(p, V(k.decay_factor));
  g = prepared_grad(g, p, k.grad);
  m = round_state(m + mul(V(k.one_minus_beta1), g - m));
  v = round_state(mul(v, V(k.beta2)) + mul(mul(V(k.one_minus_beta2), g), g));
  const V denom = square_root(v / V(k.bias_correction2)) + V(k.eps);
  p = p + mul(V(k.grad_step), g) / denom;
  return p + mul(V(k.avg_step), m) / denom;
}

}  // namespace hg::kernel::rules
