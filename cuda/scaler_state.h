// GradScaler's state on a CUDA device (amp/grad_scaler_device.cpp): the scale's update kernel
// and the mapped slot through which it reports collapse alarms. The CPU GradScaler keeps the
// same state on the host (GradScaler::apply_update_rule), so these have no CPU twin and are not
// part of the multi_tensor kernel family (kernel/multi_tensor.h), whose kernels both backends
// run.
#pragma once

#include "halfgrad/core/tensor.h"
#include "halfgrad/cuda/multi_tensor_launch.h"

namespace hg::cuda {

// GradScaler's update on the device (NOTE [Scale update on the device] in grad_scaler.cpp):
// scale ([1] float32), growth_tracker ([1] int32) and counters (detail::kScalerCounters int32)
// are updated in place from found_inf ([1] float32; undefined: no inf check, only with
// args.set_scale). monitor: a device pointer into a ScalerMonitorSlot, or null.
void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& counters,
                   const Tensor& found_inf, const detail::ScaleUpdateArgs& args,
                   detail::ScalerMonitor* monitor);

// A ScalerMonitor in mapped host memory: the update kernel writes it, the host reads it
// without waiting for the device.
class ScalerMonitorSlot {
 public:
  explicit ScalerMonitorSlot(int device);
  // Waits for the device first: a kernel still queued may write into the slot.
  ~ScalerMonitorSlot();
  ScalerMonitorSlot(const ScalerMonitorSlot&) = delete;
  ScalerMonitorSlot& operator=(const ScalerMonitorSlot&) = delete;

  // What the device has written so far (possibly some updates behind): the alarm count, read
  // first, then the fields of the last alarm.
  detail::ScalerMonitor read() const;
  detail::ScalerMonitor* device_pointer() const { return device_; }

 private:
  int device_index_;
  detail::ScalerMonitor* host_ = nullptr;
  detail::ScalerMonitor* device_ = nullptr;
};

}  // namespace hg::cuda
