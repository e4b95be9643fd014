// The calling thread's autocast mode: for each device type, whether autocast is on and the
// lower-precision dtype it casts to, and whether casts of weights are cached. Plain per-thread
// data, read by the op dispatcher (ops/autocast.h applies the policies), set by amp::Autocast,
// and switched off by the autograd engine while backward runs.
//
// NOTE [Autocast mode in core] The mode is a per-thread flag set, like grad mode, and it lives
// in core, as PyTorch keeps its per-thread dispatch flags in c10: the autograd engine (which
// runs backward with autocast off) and custom Functions (custom_fwd runs forward with autocast
// off, custom_bwd replays forward's mode in backward) sit below ops/ in the layer order and read
// or set it here. What autocast *does* (the policy table, the casts, the weight-cast cache) is
// dispatch's, in ops/autocast.h; the user's guard is amp::Autocast (amp/autocast.h).
#pragma once

#include <array>
#include <cstddef>

#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"

namespace hg {

struct AutocastMode {
  std::array<bool, 2> enabled{false, false};        // by DeviceType (CPU, CUDA)
  std::array<DType, 2> dtype{kBFloat16, kFloat16};  // torch's defaults: bfloat16 on the CPU
  bool cache_enabled = true;
  // The delayed-scaling recipe (ops::DelayedScaling, ops/fp8.h) of an open amp::Fp8Autocast,
  // or null. Part of the mode so that what replays a forward's mode (a checkpointed segment's
  // recomputation, custom_bwd) replays its fp8 too, and backward runs without it.
  void* fp8_recipe = nullptr;

  // The same mode with autocast (and fp8) off for every device type.
  AutocastMode all_off() const {
    AutocastMode off = *this;
    off.enabled = {false, false};
    off.fp8_recipe = nullptr;
    return off;
  }
};

namespace detail {
// constinit: every op reads it, inline, as a plain thread-local load.
extern thread_local constinit AutocastMode autocast_mode;
}  // namespace detail

// The calling thread's mode (a new thread starts with autocast off).
inline const AutocastMode& autocast_mode() { return detail::autocast_mode; }
inline bool is_autocast_enabled(DeviceType device_type) {
  return detail::autocast_mode.enabled[static_cast<size_t>(device_type)];
}
// The lower-precision dtype of the region (float16 on CUDA, bfloat16 on the CPU by default).
inline DType get_autocast_dtype(DeviceType device_type) {
  return detail::autocast_mode.dtype[static_cast<size_t>(device_type)];
}
inline bool is_autocast_cache_enabled() { return detail::autocast_mode.cache_enabled; }

// Sets the thread's whole mode while it lives and restores the previous one on exit (also when
// an exception unwinds).
class AutocastModeGuard {
 public:
  explicit AutocastModeGuard(const AutocastMode& mode) : previous_(detail::autocast_mode) {
    detail::autocast_mode = mode;
  }
  ~AutocastModeGuard() { detail::autocast_mode = previous_; }
  AutocastModeGuard(const AutocastModeGuard&) = delete;
  AutocastModeGuard& operator=(const AutocastModeGuard&) = delete;

 private:
  AutocastMode previous_;
};

}  // namespace hg
