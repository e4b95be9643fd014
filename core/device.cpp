// Device names and parsing, and the table of device hooks (core/device_hooks.h).
#include "halfgrad/core/device.h"

#include <charconv>

#include "halfgrad/core/device_hooks.h"
#include "halfgrad/core/error.h"

namespace hg {

namespace {
// By DeviceType; the CPU's slot stays empty. Constant-initialised, so a backend that registers
// while the program starts finds it ready whatever the order of static initialisation.
constinit DeviceHooks registered_hooks[2] = {};
constinit bool has_hooks[2] = {false, false};
}  // namespace

void register_device_hooks(DeviceType type, const DeviceHooks& hooks) {
  HG_CHECK(type != kCPU, "register_device_hooks: expected a device type other than the CPU, got {}",
           device_type_name(type));
  registered_hooks[size_t(type)] = hooks;
  has_hooks[size_t(type)] = true;
}

const DeviceHooks* device_hooks(DeviceType type) {
  return has_hooks[size_t(type)] ? &registered_hooks[size_t(type)] : nullptr;
}

std::string_view device_type_name(DeviceType type) { return type == kCPU ? "cpu" : "cuda"; }

Device Device::parse(std::string_view text) {
  if (text == "cpu") return Device(kCPU);
  if (text == "cuda") return Device(kCUDA, 0);
  if (text.starts_with("cuda:")) {
    const std::string_view digits = text.substr(5);
    int index = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0 && index < 128) {
      return Device(kCUDA, index);
    }
  }
  HG_ERROR("expected a device like \"cpu\", \"cuda\" or \"cuda:1\", got \"{}\"", text);
}

}  // namespace hg
