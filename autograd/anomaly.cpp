// Anomaly mode (anomaly.h): the checks of forward outputs and backward gradients for
// non-finite values, and the descriptions of the op calls they name.
#include "halfgrad/autograd/anomaly.h"

#include <cmath>

#include "halfgrad/autograd/node.h"
#include "halfgrad/config.h"
#include "halfgrad/core/format.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/multi_tensor.h"
#endif

namespace hg::autograd {

namespace detail {
thread_local constinit bool anomaly_enabled = false;
thread_local constinit bool checks_suspended = false;
}  // namespace detail

using detail::anomaly_enabled;

// NOTE [Anomaly in backward] A node's backward is written with ops; a non-finite value made
// inside it is reported as the node's (with the forward call that created the node), which
// is what the user can act on, rather than as the inner op's.
DetectAnomalyGuard::DetectAnomalyGuard() : previous_(anomaly_enabled) { anomaly_enabled = true; }
DetectAnomalyGuard::~DetectAnomalyGuard() { anomaly_enabled = previous_; }

std::string describe_call(std::string_view op, std::span<const Tensor> inputs) {
  std::string text = fmt::format("{}(", op);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i > 0) text += ", ";
    text += inputs[i].defined() ? fmt::format("{} {}", inputs[i].dtype(), inputs[i].sizes())
                                : std::string("undefined");
  }
  return text + ")";
}

bool all_finite(const Tensor& t) {
  if (!t.defined() || !t.is_floating_point()) return true;
#if HALFGRAD_HAS_CUDA
  if (t.is_cuda()) {
    // Checked on the device: the host reads one flag, not the tensor (anomaly mode waits for
    // every output either way). The ops the check calls are not checked in turn.
    if (t.numel() == 0) return true;
    SuspendForwardChecks suspend;
    return cuda::non_finite_flag(std::span<const Tensor>(&t, 1)).item<float>() == 0.0f;
  }
#endif
  for (double value : t.to_vector<double>()) {
    if (!std::isfinite(value)) return false;
  }
  return true;
}

void check_forward_outputs(std::string_view op, std::span<const Tensor> inputs,
                           std::span<const Tensor> outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    HG_CHECK(all_finite(outputs[i]),
             "anomaly: {} produced a non-finite value (inf or NaN) in its output {} ({} {})",
             describe_call(op, inputs), i, outputs[i].dtype(), outputs[i].sizes());
  }
}

void check_backward_outputs(const Node& node, std::span<const Tensor> grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    HG_CHECK(all_finite(grads[i]),
             "anomaly: {} returned a non-finite gradient (inf or NaN) for its input {} ({} {}); "
             "the node was created by the forward call {}",
             node.name(), i, grads[i].dtype(), grads[i].sizes(),
             node.creation_context.empty() ? "(not recorded)" : node.creation_context);
  }
}

}  // namespace hg::autograd
