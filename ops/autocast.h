// What autocast does inside the dispatcher (docs/design.md §3): the cast-policy table, the casts
// it applies to an op's inputs, the weight-cast cache, and the "below autocast" flag that makes
// a composite op cast once. Whether autocast is on is the thread's mode (core/autocast_mode.h);
// users open regions with amp::Autocast (amp/autocast.h), which re-exports the policy functions
// as amp::cast_policy, amp::set_cast_policy, ...
#pragma once

#include <cstddef>

#include "halfgrad/core/autocast_mode.h"
#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/ops/op.h"

namespace hg {
class Tensor;
}

namespace hg::ops {

// ---- cast policies ------------------------------------------------------------------------
// The policy autocast applies to `op` on `device_type`: op_list.def's, unless overridden.
CastPolicy cast_policy(OpId op, DeviceType device_type);
// Overrides the policy for every thread (e.g. run layer_norm in lower precision on CUDA).
void set_cast_policy(OpId op, DeviceType device_type, CastPolicy policy);
// Restores op_list.def's policies.
void reset_cast_policies();

// ---- below autocast -----------------------------------------------------------------------
// NOTE [Autocast once] While an op's kernel runs, the ops it calls are "below autocast": they
// run as called. So a composite op (linear calling matmul) is cast once, at the outermost call.
namespace detail {
extern thread_local constinit bool below_autocast;
}  // namespace detail

inline bool is_below_autocast() { return detail::below_autocast; }

class BelowAutocastGuard {
 public:
  BelowAutocastGuard() : previous_(detail::below_autocast) { detail::below_autocast = true; }
  ~BelowAutocastGuard() { detail::below_autocast = previous_; }
  BelowAutocastGuard(const BelowAutocastGuard&) = delete;
  BelowAutocastGuard& operator=(const BelowAutocastGuard&) = delete;

 private:
  bool previous_;
};

// ---- casts and the weight-cast cache ------------------------------------------------------
// Casts a floating input of an autocast op to `target` (integer and float64 inputs, and
// inputs already of `target`, are returned as they are). The cast is the differentiable
// to_dtype op, so the gradient flows back to the input in its own dtype.
//
// NOTE [Weight-cast cache] A float32 leaf that requires grad and is not a view (a weight) is
// cast to the lower-precision dtype once per autocast region: the cast is kept until the
// outermost amp::Autocast guard ends, so a weight used by many ops is converted once. The
// cached cast carries the autograd edge back to the float32 weight. Casts made outside every
// amp::Autocast region (a custom_bwd backward replaying forward's mode) are not cached: no
// region's end would drop them. Nor are casts made with grad mode off: without the edge to the
// weight, a training forward later in the region would read a cast that gives the weight no
// gradient (a known PyTorch bug, issues 65766 and 112583: an evaluation forward under no_grad
// inside the training step's autocast region).
Tensor autocast_input(const Tensor& input, DType target, DeviceType device_type);
// Casts in the weight-cast cache of this thread (for tests and teaching).
size_t weight_cast_cache_size();

// amp::Autocast's constructor and destructor: the cache lives while any guard of the thread
// is open and is cleared when the last one ends.
void enter_autocast_region();
void leave_autocast_region();

}  // namespace hg::ops
