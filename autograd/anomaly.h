// Anomaly mode: the first op, forward or backward, that makes a non-finite value raises an
// hg::Error naming it (and, for backward, the forward op that created the node).
//
//   { autograd::DetectAnomalyGuard anomaly; loss = model(x); loss.backward(); }
//
// Off by default: it reads every output of every op.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::autograd {

class Node;

namespace detail {
// The thread's anomaly flags, read inline by every op (constinit: plain thread-local loads).
extern thread_local constinit bool anomaly_enabled;
extern thread_local constinit bool checks_suspended;
}  // namespace detail

inline bool is_anomaly_enabled() { return detail::anomaly_enabled; }

class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard();
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// While a node's backward runs, the ops it calls are not checked one by one: the engine
// checks the node's outputs and names the node (NOTE [Anomaly in backward]).
inline bool forward_checks_suspended() { return detail::checks_suspended; }
class SuspendForwardChecks {
 public:
  SuspendForwardChecks() : previous_(detail::checks_suspended) { detail::checks_suspended = true; }
  ~SuspendForwardChecks() { detail::checks_suspended = previous_; }
  SuspendForwardChecks(const SuspendForwardChecks&) = delete;
  SuspendForwardChecks& operator=(const SuspendForwardChecks&) = delete;

 private:
  bool previous_;
};

// "mul(float16 [2, 3], float16 [3])": an op and its inputs, for messages.
std::string describe_call(std::string_view op, std::span<const Tensor> inputs);
// True when every element of a floating tensor is finite (integer tensors always are).
bool all_finite(const Tensor& t);
// Throws naming the op when an output holds inf or NaN.
void check_forward_outputs(std::string_view op, std::span<const Tensor> inputs,
                           std::span<const Tensor> outputs);
// Throws naming the node and its forward op when a gradient it produced holds inf or NaN.
void check_backward_outputs(const Node& node, std::span<const Tensor> grads);

}  // namespace hg::autograd
