#include "halfgrad/nn/utils.h"

#include <cmath>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/ops/ops.h"

namespace hg::nn::utils {

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  HG_CHECK(norm_type > 0, "clip_grad_norm_: expected norm_type > 0 (or infinity), got {}",
           norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters) {
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return zeros({});

  // Each gradient's norm in float32 (a float16 gradient's sum of squares would overflow),
  // then the norm of those norms: the norm of the concatenation.
  std::vector<Tensor> norms;
  for (const Tensor& g : grads) {
    Tensor g32 = g.to(kFloat32);
    norms.push_back(std::isinf(norm_type) ? amax(abs(g32)) : norm(g32, norm_type));
  }
  Tensor stacked = stack(norms);
  Tensor total = std::isinf(norm_type) ? amax(stacked) : norm(stacked, norm_type);

  const double total_value = total.item<double>();
  HG_CHECK(!(error_if_nonfinite && !std::isfinite(total_value)),
           "clip_grad_norm_: expected a finite total norm of order {} of the gradients, got {} "
           "(set error_if_nonfinite=false to clip anyway)",
           norm_type, total_value);
  // torch: clip_coef = max_norm / (total + 1e-6), clamped to at most 1 (NaN stays NaN).
  const double clip_coef = max_norm / (total_value + 1e-6);
  if (clip_coef < 1.0 || std::isnan(clip_coef)) {
    for (Tensor& g : grads) g.mul_(clip_coef);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  HG_CHECK(clip_value >= 0, "clip_grad_value_: expected clip_value >= 0, got {}", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& p : parameters) {
    if (!p.defined() || !p.grad().defined()) continue;
    Tensor g = p.grad();
    g.copy_(clamp(g, -clip_value, clip_value));
  }
}

}  // namespace hg::nn::utils
