// Dispatch observers: code above ops/ that wants to see every op as it runs (amp's autocast trace
// and overflow watch, the profiler) derives from DispatchObserver; while it lives, the dispatcher
// tells it when each op call of its thread begins and hands it the call after the op ran (step 6
// of ops/dispatch.h).
//
// NOTE [Dispatch observers] The dispatcher knows nothing of what observes it: amp::AutocastTrace
// and amp::OverflowWatch register here, so ops/ does not include amp/ (docs/design.md §1). The
// observers of a thread form a list, innermost (most recently made) first; with none alive the
// dispatcher's cost is one thread-local load per op. An observer sees the calls of its own
// thread only, and must not be moved (the list holds its address).
//
// NOTE [Op reruns] An observer that calls request_reruns() (amp::PrecisionAudit) gets, with each
// call, OpCall::rerun: the op's forward once more on inputs it chooses (float64 copies, say),
// from a copy of the op struct made before the forward ran. The rerun runs with grad mode off,
// below autocast and hidden from every observer, so it records no node, casts nothing and is not
// itself observed; an op that draws random numbers (a `generator` member) draws the same numbers
// again (its generator is set back to the state the real call started from, then returned to
// the state the real call left). The dispatcher builds the callable only while such an observer
// lives on the thread: other calls, observed or not, cost nothing new.
//
// NOTE [Node reruns] Backward nodes are seen too: after the backward of a node that dispatch()
// recorded has run, on_node hands an observer the gradients the node was given and the ones it
// returned (nodes made elsewhere, such as a leaf's AccumulateGrad or an autograd::Function, are
// not seen). An observer that requested reruns also gets NodeCall::rerun: the same backward run
// once more, from a copy of the op struct made before the backward ran, on float64 copies of the
// node's saved tensors and of the gradients it chooses to give. Like an op rerun it is hidden
// from every observer, below autocast, with grad mode off (the first-order path), and it writes
// nothing the node holds. Float8 ops get no node rerun (their backward advances the recipe's
// scaling history, which a second run would advance again).
//
// NOTE [Recorded ranges] RecordFunction marks a stretch of host code as one named range, as
// torch.profiler.record_function does: the optimizer's step ("Optimizer.step#AdamW.step") and
// GradScaler's scale/unscale_/step/update open one. Observers hear where each range begins and
// ends (the profiler records it as an event, with the ops inside as its children), and the
// ranges of a thread form a stack whose innermost kind any code can read: kLossScaling marks the
// ops a loss scaler runs on the step's values for its own bookkeeping (scaling the loss,
// unscaling and checking the gradients, updating the scale), which overflow on purpose and which
// amp::OverflowWatch therefore ignores. A range opened inside a loss-scaling one (the optimizer's
// step inside GradScaler.step) is the user's again. The ranges live here, below optim/ and amp/,
// so that the code that opens them includes no profiler. With no observer alive a range costs two
// thread-local writes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/ops/op.h"

namespace hg {
class Tensor;
}
namespace hg::autograd {
class Node;
}

namespace hg::ops {

// The op's forward run again on the given tensor inputs (as many as the call had); returns its
// tensor outputs in OpCall::outputs' order. NOTE [Op reruns].
using RerunFn = std::function<std::vector<Tensor>(std::span<const Tensor>)>;

// One op call, as an observer sees it once the op has run.
struct OpCall {
  OpId op;
  DeviceType device_type;
  // Not called from inside another op's kernel (the call autocast applies to, and the one a
  // user wrote; a composite op's inner calls are not outermost).
  bool outermost;
  // The cast policy autocast applied, or nullopt when it applied none (autocast off for this
  // device type, an inner call, or a call that opted out).
  std::optional<CastPolicy> policy;
  // The op ran in float8: an fp8 op inside an amp::Fp8Autocast region (NOTE [Fp8 ops]); its
  // outputs have the region's dtype, its GEMM read float8 operands.
  bool fp8 = false;
  // The dtypes of the defined tensor inputs as the caller gave them (before autocast's casts).
  std::span<const DType> given_dtypes;
  // The tensor inputs as the kernel received them (after the casts), and the outputs.
  std::span<const Tensor> inputs;
  std::span<Tensor* const> outputs;
  // Set only while an observer that requested reruns lives (NOTE [Op reruns]), and only for ops
  // whose struct can be copied; valid during on_op.
  const RerunFn* rerun = nullptr;
};

// One op call as it begins: validated, not yet autocast.
struct OpBegin {
  OpId op;
  DeviceType device_type;
  bool outermost;  // as in OpCall
  // The tensor inputs as the caller gave them (shapes and dtypes before autocast's casts).
  std::span<const Tensor> inputs;
};

// One backward node dispatch() recorded, as an observer sees it once the node's backward ran
// (NOTE [Node reruns]).
struct NodeCall {
  OpId op;  // the op whose node it is
  const autograd::Node* node;
  // The gradients the node was given (of the op's outputs), and the ones it returned (of the
  // op's inputs, undefined where an input needs none).
  std::span<const Tensor> grad_outputs;
  std::span<const Tensor> grad_inputs;
  // Set only while an observer that requested reruns lives: the backward again on float64
  // copies of the saved tensors and on the given gradients (as many as grad_outputs); returns
  // its gradients in grad_inputs' order. Valid during on_node.
  const RerunFn* rerun = nullptr;
};

// What a range marks (NOTE [Recorded ranges]).
enum class RangeKind : uint8_t {
  kUser,         // the user's work: an optimizer's step, a record_function of their own
  kLossScaling,  // a loss scaler's bookkeeping, which overflows on purpose
};

class DispatchObserver {
 public:
  DispatchObserver(const DispatchObserver&) = delete;
  DispatchObserver& operator=(const DispatchObserver&) = delete;

  // Called after every op of this thread while this observer lives.
  virtual void on_op(const OpCall& call) = 0;
  // Called before every op of this thread (before autocast casts its inputs).
  virtual void on_op_begin(const OpBegin& /*call*/) {}
  // Called instead of on_op when the op threw; when an observer's on_op threw, every observer
  // hears it, also those whose on_op had already run. Must not throw.
  virtual void on_op_failed(OpId /*op*/) noexcept {}
  // Called after the backward of a node recorded by dispatch() ran on this thread (NOTE [Node
  // reruns]).
  virtual void on_node(const NodeCall& /*call*/) {}
  // Called where a RecordFunction of this thread begins and ends; `range` identifies it (the
  // same address at both ends).
  virtual void on_range_begin(const void* /*range*/, std::string_view /*name*/,
                              RangeKind /*kind*/) {}
  virtual void on_range_end(const void* /*range*/) noexcept {}

 protected:
  DispatchObserver();  // joins this thread's list, first
  virtual ~DispatchObserver();  // leaves it
  // Asks the dispatcher for OpCall::rerun from now on, or no longer (NOTE [Op reruns]).
  void request_reruns(bool wanted = true) { wants_reruns_ = wanted; }

 private:
  friend bool reruns_requested();
  friend void notify_observers(const OpCall& call);
  friend void notify_op_begin(const OpBegin& call);
  friend void notify_op_failed(OpId op) noexcept;
  friend void notify_node(const NodeCall& call);
  friend class RecordFunction;
  DispatchObserver* next_ = nullptr;
  bool wants_reruns_ = false;
};

namespace detail {
extern thread_local constinit DispatchObserver* first_observer;
}  // namespace detail

// True while some observer lives on this thread (read inline by every op).
inline bool has_observers() { return detail::first_observer != nullptr; }
// Hands `call` to each observer of this thread, innermost first.
void notify_observers(const OpCall& call);
void notify_op_begin(const OpBegin& call);
void notify_op_failed(OpId op) noexcept;
void notify_node(const NodeCall& call);
// True while an observer of this thread wants OpCall::rerun (asked only for observed calls).
bool reruns_requested();

// A named range of this thread's host code, from construction to destruction (NOTE [Recorded
// ranges]), as torch.profiler.record_function:
//   { ops::RecordFunction range("Optimizer.step#AdamW.step"); ... }
// Ranges nest as scopes do and are neither copied nor moved.
class RecordFunction {
 public:
  explicit RecordFunction(std::string_view name, RangeKind kind = RangeKind::kUser);
  ~RecordFunction();
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

 private:
  RecordFunction* enclosing_;
  RangeKind kind_;
  bool observed_;
  friend bool in_loss_scaling();
};

namespace detail {
extern thread_local constinit RecordFunction* innermost_range;
}  // namespace detail

// True while this thread's innermost range is a loss scaler's bookkeeping
// (RangeKind::kLossScaling).
inline bool in_loss_scaling() {
  return detail::innermost_range != nullptr &&
         detail::innermost_range->kind_ == RangeKind::kLossScaling;
}

namespace detail {
// How many rerun callables this thread's dispatcher has built: tests check that none is built
// unless an observer asked.
extern thread_local constinit int64_t reruns_built;

// Hides this thread's observers while alive: a rerun is not an op call anyone should see.
class HiddenObservers {
 public:
  HiddenObservers() : hidden_(first_observer) { first_observer = nullptr; }
  ~HiddenObservers() { first_observer = hidden_; }
  HiddenObservers(const HiddenObservers&) = delete;
  HiddenObservers& operator=(const HiddenObservers&) = delete;

 private:
  DispatchObserver* hidden_;
};

// Tells the observers that an op they saw begin has thrown, unless finish() was called first.
class ObservedCallGuard {
 public:
  ObservedCallGuard(OpId op, bool active) : op_(op), active_(active) {}
  ~ObservedCallGuard() {
    if (active_) notify_op_failed(op_);
  }
  ObservedCallGuard(const ObservedCallGuard&) = delete;
  ObservedCallGuard& operator=(const ObservedCallGuard&) = delete;
  void finish() { active_ = false; }

 private:
  OpId op_;
  bool active_;
};
}  // namespace detail

}  // namespace hg::ops
