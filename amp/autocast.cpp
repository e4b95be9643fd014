#include "halfgrad/amp/autocast_state.h"

#include <array>
#include <atomic>
#include <memory>
#include <unordered_map>

#include "halfgrad/core/format.h"
#include "halfgrad/core/tensor.h"

namespace hg::amp {

namespace detail {
thread_local constinit AutocastFlags autocast_flags;
}  // namespace detail

namespace {

struct CachedCast {
  std::weak_ptr<TensorImpl> source;  // to tell a live weight from a reused address
  Tensor cast;
};

struct CacheKey {
  const TensorImpl* source;
  DType dtype;
  bool operator==(const CacheKey&) const = default;
};

struct CacheKeyHash {
  size_t operator()(const CacheKey& key) const {
    return std::hash<const void*>()(key.source) ^ (size_t(key.dtype) << 1);
  }
};

// The thread's autocast state, one slot per device type (indexed by DeviceType).
struct State {
  std::array<DType, 2> dtype{kBFloat16, kFloat16};  // CPU, CUDA
  bool cache_enabled = true;
  int nesting = 0;  // open Autocast guards; the cache is cleared when the last one ends
  std::unordered_map<CacheKey, CachedCast, CacheKeyHash> cache;
};

thread_local State state;

size_t slot(DeviceType type) { return static_cast<size_t>(type); }

// The policy table, shared by all threads: op_list.def's defaults plus user overrides.
struct PolicyTable {
  std::array<std::array<std::atomic<CastPolicy>, 2>, kNumOps> policies;
  PolicyTable() {
    for (const OpInfo& info : all_ops()) {
      policies[size_t(info.id)][slot(kCPU)] = info.cpu_policy;
      policies[size_t(info.id)][slot(kCUDA)] = info.cuda_policy;
    }
  }
};

std::array<std::array<std::atomic<CastPolicy>, 2>, kNumOps>& policy_table() {
  static PolicyTable table;
  return table.policies;
}

DType default_dtype(DeviceType type) { return type == kCUDA ? kFloat16 : kBFloat16; }

}  // namespace

DType get_autocast_dtype(DeviceType device_type) { return state.dtype[slot(device_type)]; }
bool is_autocast_cache_enabled() { return state.cache_enabled; }

Autocast::Autocast(DeviceType device_type, std::optional<DType> dtype, bool enabled,
                   std::optional<bool> cache_enabled)
    : device_type_(device_type),
      previous_enabled_(detail::autocast_flags.enabled[slot(device_type)]),
      previous_dtype_(state.dtype[slot(device_type)]),
      previous_cache_enabled_(state.cache_enabled) {
  const DType chosen = dtype.value_or(default_dtype(device_type));
  HG_CHECK(chosen == kFloat16 || chosen == kBFloat16,
           "Autocast: expected float16 or bfloat16 as the autocast dtype for {}, got {}",
           device_type_name(device_type), chosen);
  detail::autocast_flags.enabled[slot(device_type)] = enabled;
  state.dtype[slot(device_type)] = chosen;
  if (cache_enabled) state.cache_enabled = *cache_enabled;
  ++state.nesting;
}

Autocast::~Autocast() {
  if (--state.nesting == 0) state.cache.clear();
  detail::autocast_flags.enabled[slot(device_type_)] = previous_enabled_;
  state.dtype[slot(device_type_)] = previous_dtype_;
  state.cache_enabled = previous_cache_enabled_;
}

AutocastOff::AutocastOff()
    : previous_{detail::autocast_flags.enabled[0], detail::autocast_flags.enabled[1]} {
  detail::autocast_flags.enabled[0] = detail::autocast_flags.enabled[1] = false;
}

AutocastOff::~AutocastOff() {
  detail::autocast_flags.enabled[0] = previous_[0];
  detail::autocast_flags.enabled[1] = previous_[1];
}

CastPolicy cast_policy(OpId op, DeviceType device_type) {
  return policy_table()[size_t(op)][slot(device_type)].load(std::memory_order_relaxed);
}

void set_cast_policy(OpId op, DeviceType device_type, CastPolicy policy) {
  policy_table()[size_t(op)][slot(device_type)].store(policy, std::memory_order_relaxed);
}

void reset_cast_policies() {
  for (const OpInfo& info : all_ops()) {
    set_cast_policy(info.id, kCPU, info.cpu_policy);
    set_cast_policy(info.id, kCUDA, info.cuda_policy);
  }
}

Tensor autocast_input(const Tensor& input, DType target, DeviceType device_type) {
  if (!input.defined() || !input.is_floating_point() || input.dtype() == kFloat64 ||
      input.dtype() == target) {
    return input;
  }
  const bool cacheable = state.cache_enabled && target == state.dtype[slot(device_type)] &&
                         input.dtype() == kFloat32 && input.requires_grad() && input.is_leaf() &&
                         !input.is_view();
  if (!cacheable) return input.to(target);
  const CacheKey key{input.impl(), target};
  if (auto it = state.cache.find(key); it != state.cache.end()) {
    if (it->second.source.lock().get() == input.impl()) return it->second.cast;
  }
  Tensor cast = input.to(target);
  state.cache[key] = {input.impl_ptr(), cast};
  return cast;
}

size_t weight_cast_cache_size() { return state.cache.size(); }

}  // namespace hg::amp
