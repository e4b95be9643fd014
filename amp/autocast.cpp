// amp::Autocast (amp/autocast.h): sets the thread's autocast mode for one device type and keeps
// the weight-cast cache alive while any guard is open; the imperative form of the same; the
// registry of custom Functions' policies (amp::register_autocast) and the policy table.
#include "halfgrad/amp/autocast.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <tuple>

#include "halfgrad/core/format.h"
#include "halfgrad/ops/autocast_nesting.h"
#include "halfgrad/ops/op.h"

namespace hg::amp {

Autocast::Autocast(DeviceType device_type, std::optional<DType> dtype, bool enabled,
                   std::optional<bool> cache_enabled)
    : device_type_(device_type),
      previous_enabled_(is_autocast_enabled(device_type)),
      previous_dtype_(get_autocast_dtype(device_type)),
      previous_cache_enabled_(is_autocast_cache_enabled()) {
  // No dtype: the current one, as torch.autocast takes get_autocast_{cpu,gpu}_dtype(), so a
  // region opened inside a float16 one stays float16 (outside every region it is the
  // default, bfloat16 on the CPU and float16 on CUDA).
  const DType chosen = dtype.value_or(get_autocast_dtype(device_type));
  HG_CHECK(chosen == kFloat16 || chosen == kBFloat16,
           "Autocast: expected float16 or bfloat16 as the autocast dtype for {}, got {}",
           device_type_name(device_type), chosen);
  AutocastMode& mode = hg::detail::autocast_mode;
  mode.enabled[size_t(device_type)] = enabled;
  mode.dtype[size_t(device_type)] = chosen;
  if (cache_enabled) mode.cache_enabled = *cache_enabled;
  ops::enter_autocast_region();
}

Autocast::~Autocast() {
  ops::leave_autocast_region();
  // Restores what this guard changed: its device type's flag and dtype, and the cache flag.
  AutocastMode& mode = hg::detail::autocast_mode;
  mode.enabled[size_t(device_type_)] = previous_enabled_;
  mode.dtype[size_t(device_type_)] = previous_dtype_;
  mode.cache_enabled = previous_cache_enabled_;
}

}  // namespace hg::amp

// ---- the imperative form ------------------------------------------------------------------------

namespace hg::amp {

namespace {

void check_autocast_dtype(std::string_view caller, DeviceType device_type, DType dtype) {
  HG_CHECK(dtype == kFloat16 || dtype == kBFloat16,
           "{}: expected float16 or bfloat16 as the autocast dtype for {}, got {}", caller,
           device_type_name(device_type), dtype);
}

}  // namespace

void set_autocast_enabled(DeviceType device_type, bool enabled) {
  hg::detail::autocast_mode.enabled[size_t(device_type)] = enabled;
}

void set_autocast_dtype(DeviceType device_type, DType dtype) {
  check_autocast_dtype("set_autocast_dtype", device_type, dtype);
  hg::detail::autocast_mode.dtype[size_t(device_type)] = dtype;
}

void set_autocast_cache_enabled(bool enabled) { hg::detail::autocast_mode.cache_enabled = enabled; }

bool is_autocast_available(DeviceType device_type) {
  return device_type == kCPU || device_type == kCUDA;
}

int increment_nesting() { return ops::increment_autocast_nesting(); }
int decrement_nesting() { return ops::decrement_autocast_nesting(); }
void clear_cache() { ops::clear_autocast_cache(); }

// ---- registrations of custom Functions ----------------------------------------------------------

namespace {

struct Registration {
  std::string name;
  std::array<std::optional<CastPolicy>, 2> policy;  // by DeviceType
};

// Written by register_autocast (rarely, usually at start-up), read by every registered
// Function's apply under autocast: a shared lock.
struct Registry {
  std::shared_mutex mutex;
  std::map<const void*, Registration> functions;
};

Registry& registry() {
  static Registry r;
  return r;
}

autograd::detail::FunctionCast lookup_function_cast(const void* function, DeviceType device_type,
                                                    const std::vector<Tensor>& inputs) {
  // Every apply of a registered Function under autocast comes here: the name is copied only to
  // build a Banned policy's error, under the lock (a registration may replace the entry after it).
  std::optional<CastPolicy> policy;
  std::string banned_name;
  {
    Registry& r = registry();
    std::shared_lock lock(r.mutex);
    const auto it = r.functions.find(function);
    if (it == r.functions.end()) return {};
    const Registration& entry = it->second;
    policy = entry.policy[size_t(device_type)];
    if (policy == CastPolicy::Banned) banned_name = entry.name;
  }
  if (!policy) return {};
  autograd::detail::FunctionCast cast{.registered = true, .cast_to = std::nullopt};
  switch (*policy) {
    case CastPolicy::LowerPrecision:
      cast.cast_to = get_autocast_dtype(device_type);
      break;
    case CastPolicy::Fp32:
      cast.cast_to = kFloat32;
      break;
    case CastPolicy::Promote: {
      // The widest floating input of the device type (the ones the cast applies to).
      for (const Tensor& t : inputs) {
        if (t.defined() && t.is_floating_point() && t.device().type == device_type) {
          cast.cast_to = cast.cast_to ? promote_types(*cast.cast_to, t.dtype()) : t.dtype();
        }
      }
      break;
    }
    case CastPolicy::Banned:
      HG_ERROR(
          "{} is registered as banned under autocast on {} (amp::register_autocast): call it "
          "outside the autocast region, or in one opened with enabled = false",
          banned_name, device_type_name(device_type));
    case CastPolicy::Unlisted:
      break;
  }
  return cast;
}

}  // namespace

void register_autocast(OpId op, DeviceType device_type, CastPolicy policy) {
  set_cast_policy(op, device_type, policy);
}

namespace detail {

void register_function_autocast(const void* function, const char* name, DeviceType device_type,
                                CastPolicy policy) {
  const std::string_view given = name == nullptr ? std::string_view() : std::string_view(name);
  HG_CHECK(!given.empty() && given != "CustomFunctionBackward",
           "register_autocast: expected a Function with a kName of its own (it names the "
           "Function in errors and in amp::policy_table()), got {}",
           given.empty() ? std::string("no name") : fmt::format("the default name {}", given));
  HG_CHECK(is_autocast_available(device_type),
           "register_autocast: expected the CPU or CUDA device type, got {}",
           device_type_name(device_type));
  Registry& r = registry();
  {
    std::unique_lock lock(r.mutex);
    Registration& entry = r.functions[function];
    entry.name = std::string(given);
    entry.policy[size_t(device_type)] = policy;
  }
  autograd::detail::function_cast_lookup.store(&lookup_function_cast, std::memory_order_release);
}

}  // namespace detail

std::vector<RegisteredAutocast> registered_autocasts() {
  std::vector<RegisteredAutocast> out;
  {
    Registry& r = registry();
    std::shared_lock lock(r.mutex);
    for (const auto& [function, entry] : r.functions) {
      for (DeviceType device_type : {kCPU, kCUDA}) {
        if (const auto policy = entry.policy[size_t(device_type)]) {
          out.push_back({entry.name, device_type, *policy});
        }
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const RegisteredAutocast& a, const RegisteredAutocast& b) {
    return std::tie(a.name, a.device_type) < std::tie(b.name, b.device_type);
  });
  return out;
}

void reset_autocast_registrations() {
  Registry& r = registry();
  std::unique_lock lock(r.mutex);
  r.functions.clear();
}

std::string policy_table(bool header) {
  std::string out;
  if (header) out += "name\tcuda_policy\tcpu_policy\tdifferentiable\tfp8\n";
  for (const OpInfo& op : all_ops()) {
    out += fmt::format("{}\t{}\t{}\t{}\t{}\n", op.name,
                       cast_policy_name(cast_policy(op.id, kCUDA)),
                       cast_policy_name(cast_policy(op.id, kCPU)),
                       op.differentiable ? "yes" : "no", op_runs_in_fp8(op.id) ? "yes" : "no");
  }
  // Custom Functions: one line each, "unlisted" where a device type has no registration.
  std::map<std::string, std::array<CastPolicy, 2>> functions;
  for (const RegisteredAutocast& entry : registered_autocasts()) {
    auto [it, added] = functions.try_emplace(
        entry.name, std::array<CastPolicy, 2>{CastPolicy::Unlisted, CastPolicy::Unlisted});
    it->second[size_t(entry.device_type)] = entry.policy;
  }
  for (const auto& [name, policies] : functions) {
    out += fmt::format("{}\t{}\t{}\tyes\tno\n", name,
                       cast_policy_name(policies[size_t(kCUDA)]),
                       cast_policy_name(policies[size_t(kCPU)]));
  }
  return out;
}

}  // namespace hg::amp
