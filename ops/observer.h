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
#pragma once

#include <optional>
#include <span>

#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/ops/op.h"

namespace hg {
class Tensor;
}

namespace hg::ops {

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
};

// One op call as it begins: validated, not yet autocast.
struct OpBegin {
  OpId op;
  DeviceType device_type;
  bool outermost;  // as in OpCall
  // The tensor inputs as the caller gave them (shapes and dtypes before autocast's casts).
  std::span<const Tensor> inputs;
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

 protected:
  DispatchObserver();  // joins this thread's list, first
  virtual ~DispatchObserver();  // leaves it

 private:
  friend void notify_observers(const OpCall& call);
  friend void notify_op_begin(const OpBegin& call);
  friend void notify_op_failed(OpId op) noexcept;
  DispatchObserver* next_ = nullptr;
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

namespace detail {
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
