// Private to GradScaler's sources (grad_scaler.cpp, grad_scaler_device.cpp,
// grad_scaler_alarms.cpp): what more than one of them uses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hg::amp::detail {

// The scale collapse alarms' messages (NOTE [Scale collapse alarm] in grad_scaler.h), raised
// by the host's check and by the device's monitor alike.
std::string skips_alarm(int64_t skips, double scale);
std::string floor_alarm(double scale, double floor);

// The default warning handler: "halfgrad warning: <message>" on stderr.
void print_to_stderr(std::string_view message);

}  // namespace hg::amp::detail
