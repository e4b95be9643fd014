// amp::Autocast (amp/autocast.h): sets the thread's autocast mode for one device type and keeps
// the weight-cast cache alive while any guard is open.
#include "halfgrad/amp/autocast.h"

#include "halfgrad/core/format.h"

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
