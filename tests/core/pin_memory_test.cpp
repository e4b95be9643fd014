// Pinned (page-locked) host memory where no CUDA device is usable, as on a machine without a
// GPU or a build without the CUDA backend: pin_memory() and the factories' pin_memory option
// are errors that say why, nothing is pinned, and the user's tensor is left as it was. (The
// pinned behaviour itself is checked by tests/cuda/pinned_test.cpp.)
#include <catch2/catch.hpp>

#include <vector>

#include "halfgrad/cuda/cuda.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

TEST_CASE("pin_memory without a usable CUDA device is an error naming why", "[core]") {
  if (cuda::is_available()) {
    WARN("skipped: a CUDA device is usable here, so memory can be pinned");
    return;
  }
  const Tensor x = arange(6.0).reshape({2, 3});
  CHECK_FALSE(x.is_pinned());
  CHECK_THROWS_WITH(x.pin_memory(), Contains("pin_memory") && Contains("usable CUDA device"));
  CHECK_THROWS_WITH(empty({4}, {.pin_memory = true}),
                    Contains("pin_memory") && Contains("usable CUDA device"));
  CHECK_THROWS_WITH(zeros({2, 2}, {.dtype = kFloat16, .pin_memory = true}),
                    Contains("usable CUDA device"));
  // The source is untouched and still usable.
  CHECK(x.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK_FALSE(x.is_pinned());
}

TEST_CASE("pin_memory applies only to CPU tensors", "[core]") {
  CHECK_THROWS_WITH(empty({3}, {.device = kCUDA, .pin_memory = true}),
                    Contains("pin_memory applies to CPU tensors") && Contains("cuda:0"));
}

TEST_CASE("tensors are not pinned by default and options do not carry pinning", "[core]") {
  const Tensor x = ones({3}, kInt32);
  CHECK_FALSE(x.is_pinned());
  CHECK_FALSE(x.options().pin_memory);
  CHECK_FALSE(empty_like(x).is_pinned());
  CHECK_FALSE(x.narrow(0, 1, 2).is_pinned());
}

TEST_CASE("to with non_blocking on the same device returns the tensor itself", "[core]") {
  const Tensor x = arange(4.0);
  CHECK(x.to(Device(kCPU), /*non_blocking=*/true).is_same(x));
  if (!cuda::is_available()) {
    CHECK_THROWS_WITH(x.to(Device(kCUDA, 0), /*non_blocking=*/true),
                      Contains("cannot move a tensor from cpu to cuda:0"));
  }
}
