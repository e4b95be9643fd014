#include "halfgrad/core/device.h"

#include <charconv>

#include "halfgrad/core/error.h"

namespace hg {

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
