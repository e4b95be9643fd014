// The services core/ needs from the backend of a device type that is not the CPU: memory,
// copies, fills and random fills of its tensors. The CUDA backend fills in its table when it
// is part of the build; core calls through it and includes no backend.
//
// NOTE [Device hooks] core/ is the lowest layer (docs/design.md §1), yet a tensor on a GPU needs
// GPU memory from make_storage, GPU copies from copy_ and to(), GPU fills from fill_, zeros,
// rand and randn. Rather than include the backend, core keeps one table of function pointers
// per device type, as PyTorch's c10 keeps its device hooks: the CUDA backend registers its
// table while the program starts (cuda/device_hooks.cpp), and core finds a null table for a
// device type no backend serves, which it reports as "halfgrad was built without its CUDA
// backend". The CPU needs no table: its memory and loops are core's own.
#pragma once

#include <cstddef>

#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/scalar.h"
#include "halfgrad/core/storage.h"

namespace hg {

class Tensor;

struct DeviceHooks {
  // The allocator of device `index` of this type.
  Allocator* (*allocator)(int index);
  // dst = src converted to dst's dtype, element by element: both on one device of this type,
  // src already of dst's shape (expanded if needed), no overlap between them; options as
  // core::to_dtype takes them.
  void (*copy_elements)(const Tensor& dst, const Tensor& src, CastOptions options);
  // Every element of dst (no element twice) set to value in dst's dtype.
  void (*fill)(const Tensor& dst, Scalar value);
  // dst (contiguous, floating) filled with the numbers random::fill_uniform / fill_normal give a
  // host buffer for the same generator state, the generator advanced the same way.
  void (*fill_uniform)(const Tensor& dst, double low, double high, Generator& gen);
  void (*fill_normal)(const Tensor& dst, double mean, double stddev, Generator& gen);
  // A contiguous copy of src on `device`, where src or `device` (or both) is of this type and
  // the two differ. non_blocking: the caller allows the copy to read src after it returns
  // (the host does not wait for it) where src's memory is pinned (Tensor::to).
  Tensor (*copy_to_device)(const Tensor& src, Device device, bool non_blocking);
  // The page-locked host allocator of this backend; throws hg::Error, naming `op`, when no
  // device of this type is usable (pinned memory needs a device's driver).
  Allocator* (*pinned_allocator)(const char* op);
};

// Installs the hooks of a device type other than the CPU (once, while the program starts).
void register_device_hooks(DeviceType type, const DeviceHooks& hooks);

// The hooks of `type`, or null when this build has no backend for it.
const DeviceHooks* device_hooks(DeviceType type);

}  // namespace hg
