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
#include <string>
#include <vector>

#include "halfgrad/autograd/function.h"
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

// ---- the imperative form (libtorch's at::autocast functions) -----------------------------------
// What amp::Autocast does, as separate calls, for code ported from libtorch:
//
//   amp::set_autocast_enabled(kCPU, true);       // the guard's constructor ...
//   amp::set_autocast_dtype(kCPU, kBFloat16);
//   amp::increment_nesting();
//   loss = cross_entropy(model(x), y);
//   if (amp::decrement_nesting() == 0) amp::clear_cache();   // ... and its destructor
//   amp::set_autocast_enabled(kCPU, false);
//
// They change the calling thread's mode only. Unlike the guard they restore nothing: a program
// that sets a flag sets it back. The weight-cast cache keeps casts only while the nesting count
// is above zero (NOTE [Weight-cast cache]), so autocast enabled without increment_nesting runs
// correctly, uncached, instead of keeping every weight's cast for the rest of the thread.
void set_autocast_enabled(DeviceType device_type, bool enabled);
// float16 or bfloat16 (hg::Error naming the dtype given, nothing changed, for any other).
void set_autocast_dtype(DeviceType device_type, DType dtype);
void set_autocast_cache_enabled(bool enabled);
// Whether autocast can run on the device type (both of halfgrad's can).
bool is_autocast_available(DeviceType device_type);
// The thread's nesting count: one more, one less (an hg::Error at 0); each returns the new count.
int increment_nesting();
int decrement_nesting();
// Drops the thread's cached weight casts.
void clear_cache();

// ---- cast policies (ops/autocast.h) ------------------------------------------------------------
// cast_policy(op, device_type): the policy autocast applies, op_list.def's unless overridden;
// set_cast_policy(op, device_type, policy) overrides it for every thread; reset_cast_policies()
// restores op_list.def's.
using ops::cast_policy;
using ops::reset_cast_policies;
using ops::set_cast_policy;

// Casts in the weight-cast cache of this thread (NOTE [Weight-cast cache] in ops/autocast.h).
using ops::weight_cast_cache_size;

// ---- registering a policy (torch.library.register_autocast) -----------------------------------
// A policy for a built-in op on a device type, for every thread: set_cast_policy by another name.
void register_autocast(OpId op, DeviceType device_type, CastPolicy policy);

// A policy for a custom autograd::Function on a device type, for every thread (NOTE [Autocast
// for custom functions] in autograd/function.h). Under autocast on that device type, F::apply
// casts its floating inputs as the policy says and runs forward with autocast off for it:
//
//   struct FusedGelu : autograd::Function<FusedGelu> {
//     static constexpr const char* kName = "FusedGelu";
//     ...
//   };
//   amp::register_autocast<FusedGelu>(kCUDA, CastPolicy::LowerPrecision);
//
// The registration takes precedence over F's kCastInputs; Unlisted runs F as called (its ops
// autocast one by one), Banned makes calling it under autocast an error. F needs a kName of its
// own: it names F in errors and in policy_table(). Registering again replaces the policy.
template <class F>
void register_autocast(DeviceType device_type, CastPolicy policy);

// One registration of a custom Function.
struct RegisteredAutocast {
  std::string name;
  DeviceType device_type;
  CastPolicy policy;
};
// The registrations, by name then device type.
std::vector<RegisteredAutocast> registered_autocasts();
// Drops every custom Function's registration (built-in ops: reset_cast_policies).
void reset_autocast_registrations();

// hg-ops's table: one line per op, tab-separated "name cuda_policy cpu_policy differentiable fp8",
// the policies in force (set_cast_policy's included), then one line per registered custom
// Function ("unlisted" on a device type it has no registration for). A program prints it to see
// the policies its own registrations made; hg-ops prints the library's.
std::string policy_table(bool header = false);

namespace detail {
void register_function_autocast(const void* function, const char* name, DeviceType device_type,
                                CastPolicy policy);
}  // namespace detail

template <class F>
void register_autocast(DeviceType device_type, CastPolicy policy) {
  detail::register_function_autocast(autograd::detail::function_id<F>(), F::kName, device_type,
                                     policy);
}

}  // namespace hg::amp
