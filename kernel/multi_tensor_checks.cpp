// The multi_tensor family's argument checks (multi_tensor_checks.h).
#include "halfgrad/kernel/multi_tensor_checks.h"

#include <cstddef>

#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"

namespace hg::kernel {

namespace {

const char* backend_name(DeviceType backend) {
  return backend == kCUDA ? "a CUDA device" : "the CPU";
}

// A parameter and its gradient: contiguous, same dtype and shape, on `device`.
void check_param(const Tensor& param, const Tensor& grad, Device device, const char* op, size_t i) {
  HG_CHECK(param.is_contiguous(),
           "{}: expected contiguous parameters, got a non-contiguous one (parameter {}, shape {})",
           op, i, param.sizes());
  HG_CHECK(grad.defined() && grad.dtype() == param.dtype() && grad.sizes() == param.sizes(),
           "{}: expected a gradient of the parameter's dtype {} and shape {}, got {}", op,
           param.dtype(), param.sizes(),
           grad.defined() ? fmt::format("{} {}", grad.dtype(), grad.sizes()) : "none");
  HG_CHECK(grad.device() == device && grad.is_contiguous(),
           "{}: expected a contiguous gradient on {}, got a{} one on {} (parameter {})", op, device,
           grad.is_contiguous() ? "" : " non-contiguous", grad.device(), i);
}

void check_buffer(const Tensor& buffer, const Tensor& param, DType dtype, const char* op,
                  const char* name, size_t i) {
  HG_CHECK(buffer.defined() && buffer.device() == param.device() && buffer.dtype() == dtype &&
               buffer.sizes() == param.sizes() && buffer.is_contiguous(),
           "{}: expected {} of parameter {} to be a contiguous {} tensor of shape {} on {}, got "
           "{}",
           op, name, i, dtype, param.sizes(), param.device(), describe_tensor(buffer));
}

void check_step(const Tensor& step, Device device, bool int64_steps, const char* op, size_t i) {
  HG_CHECK(step.defined() && step.device() == device && step.numel() == 1 &&
               (step.dtype() == kFloat32 || (int64_steps && step.dtype() == kInt64)),
           "{}: expected the step count of parameter {} to be a one-element float32{} tensor on "
           "{}, got {}",
           op, i, int64_steps ? " or int64" : "", device, describe_tensor(step));
}

// What every fused step checks first: one of each per parameter, the Philox blocks of
// bf16_params, the parameters' device; then the scalars. Returns the device.
Device check_lists(std::span<const Tensor> params, std::span<const Tensor> grads, bool bf16_params,
                   size_t first_blocks, const Tensor& grad_scale, const Tensor& found_inf,
                   DeviceType backend, const char* op) {
  const size_t n = params.size();
  HG_CHECK(!bf16_params || first_blocks == n,
           "{}: bf16_params expects a first Philox block per parameter ({}), got {}", op, n,
           first_blocks);
  const Device device = common_device(params, backend, op, "parameters");
  for (size_t i = 0; i < n; ++i) check_param(params[i], grads[i], device, op, i);
  if (n == 0) return device;  // nothing runs: the scalars may be anywhere
  if (grad_scale.defined()) check_scalar(grad_scale, device, op, "grad_scale");
  if (found_inf.defined()) check_scalar(found_inf, device, op, "found_inf");
  return device;
}

void check_bf16_param(bool bf16_params, const Tensor& param, const char* op, size_t i) {
  HG_CHECK(!bf16_params || param.dtype() == kBFloat16,
           "{}: bf16_params expects bfloat16 parameters, got {} (parameter {})", op, param.dtype(),
           i);
}

// The fused steps whose state is two buffers (named first and second) and a step count per
// parameter, of the parameter's dtype (float32 with bf16_params).
struct TwoBuffers {
  const std::vector<Tensor>& params;
  const std::vector<Tensor>& grads;
  const std::vector<Tensor>& first;
  const std::vector<Tensor>& second;
  const std::vector<Tensor>& steps;
  size_t first_blocks;
};
Device check_two_buffers(const TwoBuffers& t, const char* first_name, const char* second_name,
                         bool bf16_params, const Tensor& grad_scale, const Tensor& found_inf,
                         DeviceType backend, bool int64_steps, const char* op) {
  const size_t n = t.params.size();
  HG_CHECK(
      t.grads.size() == n && t.first.size() == n && t.second.size() == n && t.steps.size() == n,
      "{}: expected one gradient, {}, {} and step per parameter ({}), got {}, {}, {} and {}", op,
      first_name, second_name, n, t.grads.size(), t.first.size(), t.second.size(), t.steps.size());
  const Device device = check_lists(t.params, t.grads, bf16_params, t.first_blocks, grad_scale,
                                    found_inf, backend, op);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    check_bf16_param(bf16_params, param, op, i);
    const DType state_dtype = bf16_params ? kFloat32 : param.dtype();
    check_buffer(t.first[i], param, state_dtype, op, first_name, i);
    check_buffer(t.second[i], param, state_dtype, op, second_name, i);
    check_step(t.steps[i], device, int64_steps, op, i);
  }
  return device;
}

}  // namespace

std::string describe_tensor(const Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  return fmt::format("{} element(s) of {} on {}", t.numel(), t.dtype(), t.device());
}

Device common_device(std::span<const Tensor> tensors, DeviceType backend, const char* op,
                     const char* what) {
  Device device(backend, 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    HG_CHECK(t.defined(), "{}: expected defined {}, got an undefined one (index {})", op, what, i);
    HG_CHECK(t.device().type == backend, "{}: expected {} on {}, got one on {} (index {})", op,
             what, backend_name(backend), t.device(), i);
    HG_CHECK(t.is_floating_point(), "{}: expected floating {}, got one of {} (index {})", op, what,
             t.dtype(), i);
    if (i == 0) {
      device = t.device();
    } else {
      HG_CHECK(t.device() == device, "{}: expected all {} on {}, got one on {} (index {})", op,
               what, device, t.device(), i);
    }
  }
  return device;
}

void check_scalar(const Tensor& t, Device device, const char* op, const char* what, DType dtype) {
  HG_CHECK(t.defined() && t.device() == device && t.numel() == 1 && t.dtype() == dtype,
           "{}: expected {} to be a one-element {} tensor on {}, got {}", op, what, dtype, device,
           describe_tensor(t));
}

Device check_adam_tensors(const AdamTensors& t, const AdamArgs& args, const Tensor& grad_scale,
                          const Tensor& found_inf, DeviceType backend, bool int64_steps) {
  constexpr const char* kOp = "fused_adam_";
  const size_t n = t.params.size();
  HG_CHECK(t.grads.size() == n && t.exp_avgs.size() == n && t.exp_avg_sqs.size() == n &&
               t.steps.size() == n && t.max_exp_avg_sqs.size() == (args.amsgrad ? n : 0),
           "{}: expected one gradient, exp_avg, exp_avg_sq{} and step per parameter ({}), got "
           "{}, {}, {}, {} and {}",
           kOp, args.amsgrad ? ", max_exp_avg_sq" : "", n, t.grads.size(), t.exp_avgs.size(),
           t.exp_avg_sqs.size(), t.max_exp_avg_sqs.size(), t.steps.size());
  const Device device = check_lists(t.params, t.grads, args.bf16_params, t.first_blocks.size(),
                                    grad_scale, found_inf, backend, kOp);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    const DType state_dtype = t.exp_avgs[i].defined() ? t.exp_avgs[i].dtype() : param.dtype();
    HG_CHECK(!args.bf16_params || (param.dtype() == kBFloat16 && state_dtype == kFloat32),
             "{}: bf16_params expects bfloat16 parameters with float32 state, got {} with {} "
             "(parameter {})",
             kOp, param.dtype(), state_dtype, i);
    HG_CHECK(state_dtype == param.dtype() ||
                 (state_dtype == kFloat32 && is_reduced_precision(param.dtype())),
             "{}: expected the state of a {} parameter in {}{}, got {} (parameter {})", kOp,
             param.dtype(), param.dtype(), is_reduced_precision(param.dtype()) ? " or float32" : "",
             state_dtype, i);
    check_buffer(t.exp_avgs[i], param, state_dtype, kOp, "exp_avg", i);
    check_buffer(t.exp_avg_sqs[i], param, state_dtype, kOp, "exp_avg_sq", i);
    if (args.amsgrad) {
      check_buffer(t.max_exp_avg_sqs[i], param, state_dtype, kOp, "max_exp_avg_sq", i);
    }
    check_step(t.steps[i], device, int64_steps, kOp, i);
  }
  return device;
}

Device check_sgd_tensors(const SGDTensors& t, const SGDArgs& args, const Tensor& grad_scale,
                         const Tensor& found_inf, DeviceType backend, bool int64_steps) {
  constexpr const char* kOp = "fused_sgd_";
  const size_t n = t.params.size();
  const size_t buffers = args.momentum != 0 ? n : 0;
  HG_CHECK(t.grads.size() == n && t.momentum_buffers.size() == buffers && t.steps.size() == buffers,
           "{}: expected one gradient per parameter ({}) and {} momentum buffers and step counts, "
           "got {}, {} and {}",
           kOp, n, buffers, t.grads.size(), t.momentum_buffers.size(), t.steps.size());
  const Device device = check_lists(t.params, t.grads, args.bf16_params, t.first_blocks.size(),
                                    grad_scale, found_inf, backend, kOp);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    check_bf16_param(args.bf16_params, param, kOp, i);
    if (buffers == 0) continue;
    check_buffer(t.momentum_buffers[i], param, args.bf16_params ? kFloat32 : param.dtype(), kOp,
                 "momentum_buffer", i);
    check_step(t.steps[i], device, int64_steps, kOp, i);
  }
  return device;
}

Device check_rmsprop_tensors(const RMSpropTensors& t, const RMSpropArgs& args,
                             const Tensor& grad_scale, const Tensor& found_inf, DeviceType backend,
                             bool int64_steps) {
  constexpr const char* kOp = "fused_rmsprop_";
  const size_t n = t.params.size();
  const bool momentum = args.momentum > 0;
  HG_CHECK(t.grads.size() == n && t.square_avgs.size() == n && t.steps.size() == n &&
               t.grad_avgs.size() == (args.centered ? n : 0) &&
               t.momentum_buffers.size() == (momentum ? n : 0),
           "{}: expected one gradient, square_avg{}{} and step per parameter ({}), got {}, {}, "
           "{}, {} and {}",
           kOp, args.centered ? ", grad_avg" : "", momentum ? ", momentum_buffer" : "", n,
           t.grads.size(), t.square_avgs.size(), t.grad_avgs.size(), t.momentum_buffers.size(),
           t.steps.size());
  const Device device = check_lists(t.params, t.grads, args.bf16_params, t.first_blocks.size(),
                                    grad_scale, found_inf, backend, kOp);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    check_bf16_param(args.bf16_params, param, kOp, i);
    const DType state_dtype = args.bf16_params ? kFloat32 : param.dtype();
    check_buffer(t.square_avgs[i], param, state_dtype, kOp, "square_avg", i);
    if (args.centered) check_buffer(t.grad_avgs[i], param, state_dtype, kOp, "grad_avg", i);
    if (momentum) {
      check_buffer(t.momentum_buffers[i], param, state_dtype, kOp, "momentum_buffer", i);
    }
    check_step(t.steps[i], device, int64_steps, kOp, i);
  }
  return device;
}

Device check_adagrad_tensors(const AdagradTensors& t, const AdagradArgs& args,
                             const Tensor& grad_scale, const Tensor& found_inf, DeviceType backend,
                             bool int64_steps) {
  constexpr const char* kOp = "fused_adagrad_";
  const size_t n = t.params.size();
  HG_CHECK(t.grads.size() == n && t.sums.size() == n && t.steps.size() == n,
           "{}: expected one gradient, sum and step per parameter ({}), got {}, {} and {}", kOp, n,
           t.grads.size(), t.sums.size(), t.steps.size());
  const Device device = check_lists(t.params, t.grads, args.bf16_params, t.first_blocks.size(),
                                    grad_scale, found_inf, backend, kOp);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    check_bf16_param(args.bf16_params, param, kOp, i);
    check_buffer(t.sums[i], param, args.bf16_params ? kFloat32 : param.dtype(), kOp, "sum", i);
    check_step(t.steps[i], device, int64_steps, kOp, i);
  }
  return device;
}

Device check_adamax_tensors(const AdamaxTensors& t, const AdamaxArgs& args,
                            const Tensor& grad_scale, const Tensor& found_inf, DeviceType backend,
                            bool int64_steps) {
  return check_two_buffers(
      {t.params, t.grads, t.exp_avgs, t.exp_infs, t.steps, t.first_blocks.size()}, "exp_avg",
      "exp_inf", args.bf16_params, grad_scale, found_inf, backend, int64_steps, "fused_adamax_");
}

Device check_adadelta_tensors(const AdadeltaTensors& t, const AdadeltaArgs& args,
                              const Tensor& grad_scale, const Tensor& found_inf, DeviceType backend,
                              bool int64_steps) {
  return check_two_buffers(
      {t.params, t.grads, t.square_avgs, t.acc_deltas, t.steps, t.first_blocks.size()},
      "square_avg", "acc_delta", args.bf16_params, grad_scale, found_inf, backend, int64_steps,
      "fused_adadelta_");
}

Device check_radam_tensors(const RAdamTensors& t, const RAdamArgs& args, const Tensor& grad_scale,
                           const Tensor& found_inf, DeviceType backend, bool int64_steps) {
  return check_two_buffers(
      {t.params, t.grads, t.exp_avgs, t.exp_avg_sqs, t.steps, t.first_blocks.size()}, "exp_avg",
      "exp_avg_sq", args.bf16_params, grad_scale, found_inf, backend, int64_steps, "fused_radam_");
}

Device check_nadam_tensors(const NAdamTensors& t, const NAdamArgs& args, const Tensor& grad_scale,
                           const Tensor& found_inf, DeviceType backend, bool int64_steps) {
  const char* op = "fused_nadam_";
  HG_CHECK(t.mu_products.size() == t.params.size(),
           "{}: expected one mu_product per parameter ({}), got {}", op, t.params.size(),
           t.mu_products.size());
  const Device device = check_two_buffers(
      {t.params, t.grads, t.exp_avgs, t.exp_avg_sqs, t.steps, t.first_blocks.size()}, "exp_avg",
      "exp_avg_sq", args.bf16_params, grad_scale, found_inf, backend, int64_steps, op);
  for (size_t i = 0; i < t.mu_products.size(); ++i) {
    check_scalar(t.mu_products[i], device, op, fmt::format("mu_product {}", i).c_str());
  }
  return device;
}

}  // namespace hg::kernel
