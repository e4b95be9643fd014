// Copies between the CPU and CUDA devices, and between CUDA devices (Tensor::to(Device) and
// copy_ across devices call these). Copies within one CUDA device are in elementwise.h.
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg::cuda {

// A contiguous copy of src on `device`, same dtype and shape; src on another device than
// `device`, at least one of the two a CUDA device.
// - to the CPU: the host waits for src's stream (the only waits halfgrad makes, with item()
//   and synchronize()), then reports any device-side error (NOTE [Index checks on the device]);
// - from the CPU: enqueued on the target's current stream; copies of 1 MiB or more, and copies
//   from pinned memory, go through a pinned staging buffer, so the host does not wait for
//   them; with non_blocking, a contiguous pinned src is read in place, after this returns
//   (NOTE [Pinned host memory]);
// - between CUDA devices: a peer copy ordered after both devices' current streams.
// non_blocking changes only copies from pinned memory (a copy to the CPU always waits).
Tensor copy_to_device(const Tensor& src, Device device, bool non_blocking);

}  // namespace hg::cuda
