// nn::utils (utils.h): clip_grad_norm_ and clip_grad_value_, through the multi_tensor kernels of
// the gradients' devices (the norm kept on the device for CUDA gradients);
// parameters_to_vector and vector_to_parameters.
#include "halfgrad/nn/utils.h"

#include <cmath>
#include <map>
#include <utility>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/ops.h"

namespace hg::nn::utils {

namespace {

// The defined gradients of the parameters, in order.
std::vector<Tensor> grads_of(const std::vector<Tensor>& parameters) {
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters) {
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

// Gradients grouped by device: the CPU first, then the CUDA devices by index.
std::map<std::pair<DeviceType, int>, std::vector<Tensor>> by_device(
    const std::vector<Tensor>& grads) {
  std::map<std::pair<DeviceType, int>, std::vector<Tensor>> groups;
  for (const Tensor& g : grads) groups[{g.device().type, g.device().index}].push_back(g);
  return groups;
}

}  // namespace

// NOTE [Clipping without a host sync] The total norm is computed by the multi-tensor kernels
// of the gradients' device (kernel::MultiTensorKernels::total_norm; on CUDA deterministic) and
// stays there; the clip coefficient is computed from it inside the scaling kernel, so on CUDA
// nothing waits for the device unless error_if_nonfinite asks the host to look at the norm (as
// in PyTorch). Gradients on several devices (of one type): each device's norm, combined on the
// first device with the norm ops (the norm of the per-device norms), then each device scaled
// by the combined norm.
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  HG_CHECK(norm_type > 0, "clip_grad_norm_: expected norm_type > 0 (or infinity), got {}",
           norm_type);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = grads_of(parameters);
  if (grads.empty()) return zeros({});
  for (const Tensor& g : grads) {
    HG_CHECK(g.device().type == grads.front().device().type,
             "clip_grad_norm_: expected every gradient on a {} device, as the first one is, got "
             "one on {} (move the parameters to one device type)",
             grads.front().device().type, g.device());
  }
  const auto groups = by_device(grads);
  const Device first = groups.begin()->second.front().device();
  Tensor total;
  if (groups.size() == 1) {
    total = kernel_for::multi_tensor(first).total_norm(grads, norm_type);
  } else {
    std::vector<Tensor> norms;
    for (const auto& [device, list] : groups) {
      norms.push_back(kernel_for::multi_tensor(list.front()).total_norm(list, norm_type).to(first));
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
  for (const auto& [key, list] : groups) {
    const Device device = list.front().device();
    const Tensor on_device = total.device() == device ? total : total.to(device);
    kernel_for::multi_tensor(device).clip_by_total_norm_(list, on_device, max_norm);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  HG_CHECK(clip_value >= 0, "clip_grad_value_: expected clip_value >= 0, got {}", clip_value);
  NoGradGuard no_grad;
  // Clamped in place, one multi-tensor call per device.
  for (const auto& [key, list] : by_device(grads_of(parameters))) {
    kernel_for::multi_tensor(list.front()).clamp_(list, -clip_value, clip_value);
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
