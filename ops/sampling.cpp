// Random sampling (ops/sampling.h), built on float64 uniforms (rand) and the ops: each draw is
// a comparison, a sort or a count over those uniforms, so it runs on either device.
#include "halfgrad/ops/sampling.h"

#include <cmath>
#include <limits>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/sort.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;

// Uniforms in [0, 1), float64, of `sizes` on `device`.
Tensor uniforms(const Shape& sizes, Device device, Generator* generator) {
  return rand(sizes, {.dtype = kFloat64, .device = device}, generator);
}

struct Bernoulli {
  static constexpr OpId id = OpId::bernoulli;
  Generator* generator = nullptr;
  Tensor forward(OpContext&, const Tensor& p) {
    HG_CHECK(p.defined() && p.is_floating_point(),
             "bernoulli: expected a floating tensor of probabilities, got {}",
             p.defined() ? fmt::format("{}", p.dtype()) : std::string("an undefined tensor"));
    const Tensor p64 = p.to(kFloat64);
    HG_CHECK(all(logical_in_unit(p64)).item<bool>(),
             "bernoulli: expected probabilities in [0, 1], got a value outside (or NaN)");
    return lt(uniforms(p.sizes(), p.device(), generator), p64).to(p.dtype());
  }
  autograd::GradList backward(OpContext&, const autograd::GradList&) {
    return autograd::GradList(1);
  }
  // 0 <= p <= 1 (false for NaN).
  static Tensor logical_in_unit(const Tensor& p) { return where(ge(p, 0.0), le(p, 1.0), false); }
};

struct Multinomial {
  static constexpr OpId id = OpId::multinomial;
  int64_t num_samples = 1;
  bool replacement = false;
  Generator* generator = nullptr;

  Tensor forward(OpContext&, const Tensor& probs) {
    HG_CHECK(probs.defined() && probs.is_floating_point() && (probs.dim() == 1 || probs.dim() == 2),
             "multinomial: expected floating probabilities of 1 or 2 dims ([K] or [B, K]), got {}",
             probs.defined() ? fmt::format("{} {}", probs.dtype(), probs.sizes())
                             : std::string("an undefined tensor"));
    const int64_t categories = probs.size(-1);
    HG_CHECK(categories > 0, "multinomial: expected at least one category, got 0");
    HG_CHECK(num_samples > 0, "multinomial: expected num_samples > 0, got {}", num_samples);
    const Tensor rows = probs.to(kFloat64).reshape({-1, categories});  // [B, K]
    const Tensor finite_nonnegative = where(ge(rows, 0.0), lt(rows, INFINITY), false);
    HG_CHECK(all(finite_nonnegative).item<bool>(),
             "multinomial: expected finite probabilities >= 0, got a negative, infinite or NaN "
             "one");
    HG_CHECK(all(gt(sum(rows, {1}), 0.0)).item<bool>(),
             "multinomial: expected every row's probabilities to sum to more than 0");
    const int64_t batch = rows.size(0);
    Tensor samples;
    if (replacement) {
      // Inverse CDF: the number of running sums at or below u * total.
      const Tensor cdf = cumsum(rows, 1);                     // [B, K]
      const Tensor total = cdf.narrow(1, categories - 1, 1);  // [B, 1]
      const Tensor target = mul(uniforms({batch, num_samples}, probs.device(), generator), total);
      const Tensor below = le(cdf.unsqueeze(1), target.unsqueeze(2));  // [B, S, K]
      samples = clamp(sum(below, {2}, false, kInt64), Scalar(0), Scalar(categories - 1));
    } else {
      HG_CHECK(num_samples <= categories,
               "multinomial: expected num_samples <= the number of categories ({}) without "
               "replacement, got {}",
               categories, num_samples);
      HG_CHECK(all(ge(sum(gt(rows, 0.0), {1}, false, kInt64), num_samples)).item<bool>(),
               "multinomial: expected at least num_samples ({}) categories of nonzero "
               "probability in every row without replacement",
               num_samples);
      // The exponential race: category k finishes at E_k / p_k (E_k exponential); the first
      // num_samples to finish, in order, are a draw without replacement.
      const Tensor times =
          div(neg(log1p(neg(uniforms(rows.sizes(), probs.device(), generator)))), rows);
      samples = std::get<1>(topk(times, num_samples, 1, /*largest=*/false));
    }
    return probs.dim() == 1 ? samples.reshape({num_samples}) : samples;
  }
  autograd::GradList backward(OpContext&, const autograd::GradList&) {
    return autograd::GradList(1);
  }
};

}  // namespace

Tensor bernoulli(const Tensor& p, Generator* generator) {
  return dispatch(Bernoulli{.generator = generator}, p);
}
Tensor bernoulli(const Tensor& like, double p, Generator* generator) {
  HG_CHECK(like.defined(), "bernoulli: expected a defined tensor, got an undefined one");
  return bernoulli(
      full(like.sizes(), p,
           {.dtype = like.is_floating_point() ? like.dtype() : kFloat32, .device = like.device()}),
      generator);
}
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement,
                   Generator* generator) {
  return dispatch(
      Multinomial{.num_samples = num_samples, .replacement = replacement, .generator = generator},
      probs);
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions options,
               Generator* generator) {
  HG_CHECK(low < high, "randint: expected low < high, got low = {} and high = {}", low, high);
  HG_CHECK(options.dtype != kBool, "randint: expected a numeric dtype, got bool");
  const double range = double(high) - double(low);
  HG_CHECK(range <= 9007199254740992.0,
           "randint: expected high - low <= 2^53 (what a float64 uniform resolves), got {}", range);
  // floor(u * range): u < 1, so below range but for rounding, which the clamp takes back.
  const Tensor steps = floor(mul(uniforms(sizes, options.device, generator), range));
  const Tensor offsets = clamp(steps, Scalar(0.0), Scalar(range - 1)).to(kInt64);
  return add(offsets, low).to(options.dtype);
}
Tensor randint(int64_t high, const Shape& sizes, TensorOptions options, Generator* generator) {
  return randint(0, high, sizes, options, generator);
}
Tensor randperm(int64_t n, TensorOptions options, Generator* generator) {
  HG_CHECK(n >= 0, "randperm: expected n >= 0, got {}", n);
  HG_CHECK(options.dtype != kBool, "randperm: expected a numeric dtype, got bool");
  // The order of n float64 uniforms: every permutation equally likely (ties, at about n^2 /
  // 2^54, keep index order).
  return argsort(uniforms({n}, options.device, generator)).to(options.dtype);
}

}  // namespace hg
