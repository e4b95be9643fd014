// amp::Autocast: the guard that opens an autocast region. Inside it, each op runs in the dtype
// its cast policy names (ops/op_list.def): matmul-like ops in float16/bfloat16, reductions and
// losses in float32, the rest in the dtype of their inputs.
//
//   {
//     amp::Autocast autocast(kCUDA, kFloat16);
//     loss = cross_entropy(model(x), y);         // linear in fp16, cross_entropy in fp32
//   }
//   loss.backward();                             // backward never runs under autocast
//
// The guard sets the thread's autocast mode (core/autocast_mode.h); the dispatcher applies the
// policies (ops/autocast.h), whose functions this header also names in amp::. The mode is per
// thread: a new thread starts with autocast off.
#pragma once

#include <optional>

#include "halfgrad/core/autocast_mode.h"
#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/ops/autocast.h"

namespace hg::amp {

using hg::get_autocast_dtype;
using hg::is_autocast_cache_enabled;
using hg::is_autocast_enabled;

// An autocast region for one device type. Guards nest; leaving one restores the state
// before it exactly (also when an exception unwinds). Without a dtype the region keeps the
// current one (torch's rule): the enclosing region's, else the default (bfloat16 on the CPU,
// float16 on CUDA). `enabled = false` opens a region of
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
  AutocastOff() : guard_(autocast_mode().all_off()) {}

 private:
  AutocastModeGuard guard_;
};

// ---- cast policies (ops/autocast.h) ------------------------------------------------------------
// cast_policy(op, device_type): the policy autocast applies, op_list.def's unless overridden;
// set_cast_policy(op, device_type, policy) overrides it for every thread; reset_cast_policies()
// restores op_list.def's.
using ops::cast_policy;
using ops::reset_cast_policies;
using ops::set_cast_policy;

// Casts in the weight-cast cache of this thread (NOTE [Weight-cast cache] in ops/autocast.h).
using ops::weight_cast_cache_size;

}  // namespace hg::amp
