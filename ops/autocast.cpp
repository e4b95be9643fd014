// The cast-policy table, the weight-cast cache and the "below autocast" flag
// (ops/autocast.h).
#include "halfgrad/ops/autocast.h"

#include <array>
#include <atomic>
#include <memory>
#include <unordered_map>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/ops/autocast_nesting.h"

namespace hg::ops {

namespace detail {
thread_local constinit bool below_autocast = false;
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

// The thread's weight-cast cache and the number of amp::Autocast guards open around it.
struct WeightCastCache {
  int regions = 0;
  std::unordered_map<CacheKey, CachedCast, CacheKeyHash> casts;
};

thread_local WeightCastCache weight_casts;

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

}  // namespace

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
  // Not under no_grad: a cast made there has no autograd edge to the weight, and a later
  // training forward in the same region would get it from the cache and leave the weight
  // without a gradient (PyTorch issues 65766 and 112583).
  const bool cacheable = weight_casts.regions > 0 && is_autocast_cache_enabled() &&
                         autograd::is_grad_enabled() && target == get_autocast_dtype(device_type) &&
                         input.dtype() == kFloat32 && input.requires_grad() && input.is_leaf() &&
                         !input.is_view();
  if (!cacheable) return input.to(target);
  const CacheKey key{input.impl(), target};
  if (auto it = weight_casts.casts.find(key); it != weight_casts.casts.end()) {
    if (it->second.source.lock().get() == input.impl()) return it->second.cast;
  }
  Tensor cast = input.to(target);
  weight_casts.casts[key] = {input.impl_ptr(), cast};
  return cast;
}

size_t weight_cast_cache_size() { return weight_casts.casts.size(); }

int autocast_nesting() { return weight_casts.regions; }

int increment_autocast_nesting() { return ++weight_casts.regions; }

int decrement_autocast_nesting() {
  HG_CHECK(weight_casts.regions > 0,
           "decrement_nesting: expected an open autocast region on this thread (a nesting count "
           "above 0), got a count of 0: every decrement_nesting needs an increment_nesting or an "
           "amp::Autocast guard before it");
  return --weight_casts.regions;
}

void clear_autocast_cache() { weight_casts.casts.clear(); }

void enter_autocast_region() { increment_autocast_nesting(); }

// Called by amp::Autocast's destructor, so it never throws: a count already at 0 (the user
// decremented it by hand inside the guard) stays 0.
void leave_autocast_region() {
  if (weight_casts.regions == 0) return;
  if (--weight_casts.regions == 0) clear_autocast_cache();
}

}  // namespace hg::ops
