// core/device_hooks.h: the CUDA backend registers its table with core in a build that has the
// backend, linked into every program (NOTE [Linking the device hooks]); without it, core
// reports the missing backend by name, and nothing else is reached.
#include <catch2/catch.hpp>

#include "halfgrad/core/device_hooks.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

TEST_CASE("the CPU has no device hooks, CUDA has them exactly when the build has its backend",
          "[device_hooks]") {
  CHECK(device_hooks(kCPU) == nullptr);
#if HALFGRAD_HAS_CUDA
  const DeviceHooks* hooks = device_hooks(kCUDA);
  REQUIRE(hooks != nullptr);
  CHECK(hooks->allocator != nullptr);
  CHECK(hooks->copy_elements != nullptr);
  CHECK(hooks->fill != nullptr);
  CHECK(hooks->fill_uniform != nullptr);
  CHECK(hooks->fill_normal != nullptr);
  CHECK(hooks->copy_to_device != nullptr);
  CHECK(hooks->pinned_allocator != nullptr);
#else
  CHECK(device_hooks(kCUDA) == nullptr);
  CHECK_THROWS_WITH(zeros({2}, {.device = Device(kCUDA, 0)}),
                    Contains("halfgrad was built without its CUDA backend"));
  CHECK_THROWS_WITH(ones({2}).to(Device(kCUDA, 0)),
                    Contains("halfgrad was built without its CUDA backend"));
  CHECK_THROWS_WITH(ones({2}).pin_memory(),
                    Contains("halfgrad was built without its CUDA backend"));
#endif
  CHECK_THROWS_WITH(register_device_hooks(kCPU, {}),
                    Contains("expected a device type other than the CPU, got cpu"));
}
