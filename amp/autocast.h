// Autocast: inside an amp::Autocast region, each op runs in the dtype its cast policy names
// (ops/op_list.def): matmul-like ops in float16/bfloat16, reductions and losses in float32,
// the rest in the dtype of their inputs. ops/dispatch reads this state; nothing here runs an
// op. (The one exception to the layering of DESIGN §1: ops depend on amp's state.)
//
//   {
//     amp::Autocast autocast(kCUDA, kFloat16);
//     loss = cross_entropy(model(x), y);         // linear in fp16, cross_entropy in fp32
//   }
//   loss.backward();                             // backward never runs under autocast
//
// The state is per thread: a new thread starts with autocast off.
#pragma once

#include <optional>

#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/ops/op.h"

namespace hg {
class Tensor;
}

namespace hg::amp {

namespace detail {
// The thread's autocast flags, which every op reads: constinit, so read inline as plain
// thread-local loads. The rest of the state (dtypes, the weight-cast cache) is
// autocast_state.cpp's.
struct AutocastFlags {
  bool enabled[2] = {false, false};  // by DeviceType (CPU, CUDA)
  bool below_autocast = false;
};
extern thread_local constinit AutocastFlags autocast_flags;
}  // namespace detail

inline bool is_autocast_enabled(DeviceType device_type) {
  return detail::autocast_flags.enabled[static_cast<size_t>(device_type)];
}
// The lower-precision dtype of the region (float16 on CUDA, bfloat16 on CPU by default).
DType get_autocast_dtype(DeviceType device_type);
bool is_autocast_cache_enabled();

// An autocast region for one device type. Guards nest; leaving one restores the state
// before it exactly (also when an exception unwinds). `enabled = false` opens a region of
// full precision inside an autocast region. The dtype must be float16 or bfloat16 (CPU
// accepts both, unlike PyTorch 1.13's bfloat16-only CPU autocast).
class Autocast {
 public:
  explicit Autocast(DeviceType device_type, std::optional<DType> dtype = std::nullopt,
                    bool enabled = true, std::optional<bool> cache_enabled = std::nullopt);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DeviceType device_type_;
  bool previous_enabled_;
  DType previous_dtype_;
  bool previous_cache_enabled_;
};

// Autocast off for every device type while it lives (the engine runs backward under one).
class AutocastOff {
 public:
  AutocastOff();
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  bool previous_[2];
};

// ---- cast policies ------------------------------------------------------------------------

// The policy autocast applies to `op` on `device_type`: op_list.def's, unless overridden.
CastPolicy cast_policy(OpId op, DeviceType device_type);
// Overrides the policy for every thread (e.g. run layer_norm in lower precision on CUDA).
void set_cast_policy(OpId op, DeviceType device_type, CastPolicy policy);
// Restores op_list.def's policies.
void reset_cast_policies();

// ---- for ops/dispatch -----------------------------------------------------------------------

// NOTE [Autocast once] While an op's kernel runs, the ops it calls are "below autocast": they
// run as called. So a composite op (linear calling matmul) is cast once, at the outermost call.
inline bool is_below_autocast() { return detail::autocast_flags.below_autocast; }
class BelowAutocastGuard {
 public:
  BelowAutocastGuard() : previous_(detail::autocast_flags.below_autocast) {
    detail::autocast_flags.below_autocast = true;
  }
  ~BelowAutocastGuard() { detail::autocast_flags.below_autocast = previous_; }
  BelowAutocastGuard(const BelowAutocastGuard&) = delete;
  BelowAutocastGuard& operator=(const BelowAutocastGuard&) = delete;

 private:
  bool previous_;
};

// Casts a floating input of an autocast op to `target` (integer and float64 inputs, and
// inputs already of `target`, are returned as they are). The cast is the differentiable
// to_dtype op, so the gradient flows back to the input in its own dtype.
//
// NOTE [Weight-cast cache] A float32 leaf that requires grad and is not a view (a weight) is
// cast to the lower-precision dtype once per autocast region: the cast is kept until the
// outermost Autocast guard ends, so a weight used by many ops is converted once. The cached
// cast carries the autograd edge back to the float32 weight.
Tensor autocast_input(const Tensor& input, DType target, DeviceType device_type);

// Casts in the weight-cast cache of this thread (for tests and teaching).
size_t weight_cast_cache_size();

}  // namespace hg::amp
