// Private to GradScaler's sources (grad_scaler.cpp, grad_scaler_device.cpp,
// grad_scaler_alarms.cpp): what more than one of them uses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "halfgrad/amp/grad_scaler.h"
#include "halfgrad/config.h"
#include "halfgrad/core/tensor.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/scaler_state.h"
#endif

namespace hg::amp {

// The CUDA half of the scaler: the device's counters and the alarm monitor (NOTE [Scale update
// on the device] in grad_scaler_device.cpp). Defined here because grad_scaler.cpp's constructor
// and destructor, which destroy device_, need the complete type too.
#if HALFGRAD_HAS_CUDA
struct GradScaler::DeviceState {
  Tensor counters;  // [cuda::detail::kScalerCounters] int32 on the scale's device
  std::unique_ptr<cuda::ScalerMonitorSlot> monitor;
  int32_t alarms_reported = 0;
};
#else
struct GradScaler::DeviceState {};
#endif

namespace detail {

// The scale collapse alarms' messages (NOTE [Scale collapse alarm] in grad_scaler.h), raised
// by the host's check and by the device's monitor alike.
std::string skips_alarm(int64_t skips, double scale);
std::string floor_alarm(double scale, double floor);

// The default warning handler: "halfgrad warning: <message>" on stderr.
void print_to_stderr(std::string_view message);

}  // namespace detail

}  // namespace hg::amp
