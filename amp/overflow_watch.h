// OverflowWatch: which op overflowed. While a watch lives, every op dispatched on this thread
// has its floating outputs checked, and the first one to hold an inf or a NaN is recorded with
// the op, the module it ran in and the ranges of its inputs:
//
//   amp::OverflowWatch watch(model.get());      // the model names the modules (hooks)
//   { amp::Autocast autocast(kCPU, kFloat16); loss = loss_fn(model->forward(x), y); }
//   if (watch.found()) fmt::print("{}", watch.report());
//   // first non-finite output: linear in module "2" (Linear) (op #3), output float16 [8, 8]:
//   //   64 inf/NaN, max finite |x| = 0
//   //   input 0: float16 [8, 8]: finite, max |x| = 3.1
//   //   input 1: float16 [8, 8]: finite, max |x| = 2000
//   //   input 2: float16 [8]: finite, max |x| = 0.5
//
// Ops run in order, so the first op whose output is not finite while its inputs were is where
// the overflow began (inside a composite op, the innermost op that produced it); later ops only
// pass it on. The watch follows the backward pass too (NOTE [Overflow watch in backward]). It
// also records the first op whose output is finite but beyond float16's range (|x| > 65504): in
// a float32 or bfloat16 run, the op that would overflow in float16.
//
// NOTE [Overflow watch in backward] A gradient overflows inside a backward node: in the fused
// kernel of a first-order backward (which dispatches no op), or in an op the node's formula
// dispatches (the cast of a float32 product down to the gradient's float16). Either way the
// finding names the node ("LinearBackward", the backward of linear, in the module that ran the
// forward op), with the inner op when it was one: a node's outputs are checked against the
// gradients it was given (ops/observer.h, NOTE [Node reruns]), and an op the node dispatched is
// attributed to the node. Only a non-finite value made from finite ones counts: an op or node
// whose inputs already held an inf or a NaN passes it on and is not named. The ops a loss scaler
// runs for its own bookkeeping (GradScaler's scale, unscale_ and inf checks, update: ranges of
// kind kLossScaling, NOTE [Recorded ranges]) overflow on purpose and are not checked, nor are the
// backward nodes of ops recorded there (the scaling multiply's MulBackward).
//
// NOTE [Overflow watch cost] Off by default. Each checked output is read once more (a pass
// over its elements on the host), so a watched step runs slower; hg-bench-train prints the
// measured overhead. Nothing is checked unless a watch is alive on the thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "halfgrad/autograd/engine.h"
#include "halfgrad/core/shape.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/ops/op.h"

namespace hg::nn {
class Module;
}

namespace hg::amp {

// What a tensor held when the watch looked at it.
struct TensorRange {
  DType dtype;
  Shape shape;
  bool all_finite = true;
  int64_t non_finite = 0;  // inf and NaN elements
  double max_abs = 0;      // over the finite elements
};

struct OverflowFinding {
  // The op whose output held it; in backward, the op whose node it is (OpId::linear for
  // LinearBackward) when the watch saw that op run, else the op the node dispatched.
  OpId op;
  std::string module;       // dotted name of the innermost module running ("" for the root)
  std::string module_type;  // its name(), e.g. "Linear"; empty when no module was running
  int64_t op_index = 0;     // how many ops and nodes the watch had checked before this one
  bool backward = false;    // found while a backward pass ran
  // backward: the node being applied ("LinearBackward"; "" between nodes, where the engine
  // sums two gradients of one tensor), and the op it dispatched that produced the value
  // (nullopt when the node's own kernel did).
  std::string node;
  std::optional<OpId> inner_op;
  // The floating tensor inputs of what produced it: an op's, as it received them, or the
  // gradients a node was given.
  std::vector<TensorRange> inputs;
  TensorRange output;  // the first offending output
};

// A dispatch observer (ops/observer.h) and an autograd node observer (for the node running);
// only the innermost live watch of a thread checks.
class OverflowWatch final : public ops::DispatchObserver, public autograd::NodeObserver {
 public:
  // With a model, forward hooks on each of its modules keep the module path; they are
  // removed when the watch ends.
  explicit OverflowWatch(nn::Module* model = nullptr);
  ~OverflowWatch() override;

  // The first op whose output held an inf or a NaN.
  bool found() const { return first_non_finite_.has_value(); }
  const std::optional<OverflowFinding>& first_non_finite() const { return first_non_finite_; }
  // The first op whose output was finite but beyond float16's range.
  const std::optional<OverflowFinding>& first_beyond_float16() const {
    return first_beyond_float16_;
  }
  int64_t ops_checked() const { return ops_checked_; }
  // The findings in words.
  std::string report() const;
  // Forgets the findings (the watch keeps running), e.g. at the start of each step.
  void reset();

  // Checks the outputs of every op of this thread (inner calls included) while this is the
  // thread's innermost watch; the inputs are the ones the kernel received.
  void on_op(const ops::OpCall& call) override;
  // Checks a backward node's gradients against the ones it was given.
  void on_node(const ops::NodeCall& call) override;
  void on_node_begin(const autograd::Node& node) override;
  void on_node_end(const autograd::Node& node) noexcept override;

 private:
  // Where a node came from: its op and module, remembered when the op ran.
  struct NodeOrigin {
    std::weak_ptr<autograd::Node> node;  // expired: the address may now be another node's
    OpId op;
    std::string module, module_type;
    bool loss_scaling = false;  // recorded inside a loss scaler's bookkeeping
  };
  const NodeOrigin* origin_of(const autograd::Node* node) const;
  // Records the findings `outputs` make, given what produced them.
  void check(std::span<const Tensor> inputs, std::span<const Tensor* const> outputs,
             OverflowFinding context);

  OverflowWatch* previous_;
  std::map<const autograd::Node*, NodeOrigin> node_origins_;
  size_t origins_kept_ = 0;  // the origins left by the last sweep of the expired ones
  std::vector<const autograd::Node*> running_nodes_;
  std::vector<std::function<void()>> remove_hooks_;
  std::vector<std::pair<std::string, std::string>> module_stack_;  // (path, type)
  std::optional<OverflowFinding> first_non_finite_;
  std::optional<OverflowFinding> first_beyond_float16_;
  int64_t ops_checked_ = 0;
  bool checking_ = false;  // the checks' own conversions are not checked
};

namespace detail {
extern thread_local constinit OverflowWatch* active_watch;
}  // namespace detail

// The innermost live watch of this thread, or null (read inline by every op).
inline OverflowWatch* active_overflow_watch() { return detail::active_watch; }

}  // namespace hg::amp
