// Anomaly mode (anomaly.h): the checks of forward outputs and backward gradients for
// non-finite values, and the descriptions of the op calls they name.
#include "halfgrad/autograd/anomaly.h"

#include "halfgrad/autograd/node.h"
#include "halfgrad/config.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cpu/kernel_tables.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/kernel_tables.h"
#endif

namespace hg::autograd {

namespace {

// kernel_for::multi_tensor(t) (ops/kernel_lookup.h), which autograd, a layer below ops, cannot
// include: the multi_tensor table of t's backend.
const kernel::MultiTensorKernels& multi_tensor_kernels_of(const Tensor& t) {
#if HALFGRAD_HAS_CUDA
  if (t.is_cuda()) return cuda::multi_tensor_kernels;
#endif
  return cpu::multi_tensor_kernels;
}

}  // namespace

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
  if (!t.defined() || !t.is_floating_point() || t.numel() == 0) return true;
  // Checked where t lives: on CUDA the host reads one flag, not the tensor (anomaly mode waits
  // for every output either way). The ops the check calls are not checked in turn.
  SuspendForwardChecks suspend;
  return multi_tensor_kernels_of(t).non_finite_flag(std::span<const Tensor>(&t, 1)).item<float>() ==
         0.0f;
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
