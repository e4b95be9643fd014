// nn::utils (utils.h): clip_grad_norm_ and clip_grad_value_, with the norm kept on the device
// for CUDA parameters; parameters_to_vector and vector_to_parameters.
#include "halfgrad/nn/utils.h"

#include <cmath>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/config.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/ops.h"
#if HALFGRAD_HAS_CUDA
#include <map>

#include "halfgrad/cuda/multi_tensor.h"
#endif

namespace hg::nn::utils {

#if HALFGRAD_HAS_CUDA
namespace {

// CUDA gradients, grouped by device (index); a CPU gradient among them is an error.
std::map<int, std::vector<Tensor>> cuda_grads_by_device(const std::vector<Tensor>& grads,
                                                        const char* op) {
  std::map<int, std::vector<Tensor>> by_device;
  for (const Tensor& g : grads) {
    HG_CHECK(g.is_cuda(),
             "{}: expected every gradient on a CUDA device when one is, got one on {} (move "
             "the parameters to one device type)",
             op, g.device());
    by_device[g.device().index].push_back(g);
  }
  return by_device;
}

// NOTE [Clipping without a host sync] On CUDA the total norm is computed by the multi-tensor
// kernels (cuda::total_norm: deterministic) and stays on the device; the clip coefficient is
// computed from it inside the scaling kernel, so nothing waits for the device unless
// error_if_nonfinite asks the host to look at the norm (as in PyTorch). Gradients on several
// devices: each device's norm, combined on the first device with the norm ops (the norm of
// the per-device norms), then each device scaled by the combined norm.
Tensor clip_grad_norm_cuda(const std::vector<Tensor>& grads, double max_norm, double norm_type,
                           bool error_if_nonfinite) {
  const std::map<int, std::vector<Tensor>> by_device =
      cuda_grads_by_device(grads, "clip_grad_norm_");
  Tensor total;
  if (by_device.size() == 1) {
    total = cuda::total_norm(by_device.begin()->second, norm_type);
  } else {
    const Device first(kCUDA, by_device.begin()->first);
    std::vector<Tensor> norms;
    for (const auto& [index, list] : by_device) {
      norms.push_back(cuda::total_norm(list, norm_type).to(first));
    }
    Tensor stacked = stack(norms);
    total = std::isinf(norm_type) ? amax(stacked) : norm(stacked, norm_type);
  }
  if (error_if_nonfinite) {
    const double total_value = total.item<double>();  // the host looks: a wait for the device
    HG_CHECK(std::isfinite(total_value),
             "clip_grad_norm_: expected a finite total norm of order {} of the gradients, got "
             "{} (set error_if_nonfinite=false to clip anyway)",
             norm_type, total_value);
  }
  for (const auto& [index, list] : by_device) {
    const Device device(kCUDA, index);
    const Tensor on_device = total.device() == device ? total : total.to(device);
    cuda::clip_by_total_norm_(list, on_device, max_norm);
  }
  return total;
}

}  // namespace
#endif

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
#if HALFGRAD_HAS_CUDA
  if (grads.front().is_cuda()) {
    return clip_grad_norm_cuda(grads, max_norm, norm_type, error_if_nonfinite);
  }
#endif

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
#if HALFGRAD_HAS_CUDA
  // CUDA gradients: clamped in place, one multi-tensor launch per device and dtype.
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters) {
    if (p.defined() && p.grad().defined() && p.grad().is_cuda()) grads.push_back(p.grad());
  }
  for (const auto& [index, list] : cuda_grads_by_device(grads, "clip_grad_value_")) {
    cuda::clamp_(list, -clip_value, clip_value);
  }
#endif
  for (const Tensor& p : parameters) {
    if (!p.defined() || !p.grad().defined() || p.grad().is_cuda()) continue;
    Tensor g = p.grad();
    g.copy_(clamp(g, -clip_value, clip_value));
  }
}

Tensor parameters_to_vector(const std::vector<Tensor>& parameters) {
  std::vector<Tensor> flat;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& p = parameters[i];
    HG_CHECK(p.defined(), "parameters_to_vector: parameter {} is undefined", i);
    HG_CHECK(p.dtype() == parameters[0].dtype() && p.device() == parameters[0].device(),
             "parameters_to_vector: expected every parameter as {} on {} (parameter 0), got {} on "
             "{} for parameter {}",
             parameters[0].dtype(), parameters[0].device(), p.dtype(), p.device(), i);
    flat.push_back(p.reshape({-1}));
  }
  if (flat.empty()) return empty({0});
  return cat(flat, 0);
}

void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters) {
  HG_CHECK(vec.defined() && vec.dim() == 1, "vector_to_parameters: expected a 1-d vector, got {}",
           vec.defined() ? fmt::format("shape {}", vec.sizes()) : std::string("an undefined one"));
  int64_t total = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    HG_CHECK(parameters[i].defined(), "vector_to_parameters: parameter {} is undefined", i);
    HG_CHECK(parameters[i].device() == vec.device(),
             "vector_to_parameters: parameter {} is on {}, the vector on {}", i,
             parameters[i].device(), vec.device());
    total += parameters[i].numel();
  }
  HG_CHECK(total == vec.numel(),
           "vector_to_parameters: the parameters hold {} elements, the vector {}", total,
           vec.numel());
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (const Tensor& p : parameters) {
    Tensor target = p;
    target.copy_(vec.narrow(0, offset, p.numel()).reshape(p.sizes()));
    offset += p.numel();
  }
}

}  // namespace hg::nn::utils
