// Helpers for the [cuda] tests: they run wherever a CUDA device is, and elsewhere (CI has no
// GPU) pass with a "no CUDA device" warning after checking nothing.
//
//   TEST_CASE("softmax on CUDA matches float64", "[cuda]") {
//     HG_REQUIRE_CUDA();
//     Tensor x = hg::randn({4, 7}).to(hg::kCUDA);
//     ...
//   }
#pragma once

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/cuda/cuda.h"

// Ends the test case early, with Catch's WARN naming why, when no CUDA device is usable.
#define HG_REQUIRE_CUDA()                                                 \
  do {                                                                    \
    if (!::hg::cuda::is_available()) {                                    \
      WARN("skipped: no CUDA device (" << ::hg::cuda::describe() << ")"); \
      return;                                                             \
    }                                                                     \
  } while (false)

namespace hg::testing {

// The tolerance a dtype's result is held to against a float64 reference: |got - want| <=
// atol + rtol * |want| (fp32 ~1e-5 relative, fp16 ~1e-3, bf16 ~1e-2).
struct Tolerance {
  double rtol;
  double atol;
};
inline Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case kFloat16:
      return {2e-3, 1e-3};
    case kBFloat16:
      return {1.6e-2, 1e-2};
    case kFloat64:
      return {1e-12, 1e-12};
    default:
      return {2e-5, 1e-6};
  }
}

// Empty when every element of `got` (any device, any dtype) is within tol of `want` (CPU
// float64 reference of the same shape); otherwise the first offender. NaN never passes.
inline std::string mismatch(const Tensor& got, const Tensor& want, Tolerance tol) {
  if (got.sizes() != want.sizes()) {
    return fmt::format("shape {} != reference shape {}", fmt::join(got.sizes(), ","),
                       fmt::join(want.sizes(), ","));
  }
  const std::vector<double> g = got.to(Device(kCPU)).to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> w = want.to(kFloat64).contiguous().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    const bool both_inf = std::isinf(g[i]) && g[i] == w[i];
    if (both_inf) continue;
    if (!(std::abs(g[i] - w[i]) <= tol.atol + tol.rtol * std::abs(w[i]))) {
      return fmt::format("element {}: got {}, want {} (rtol {}, atol {})", i, g[i], w[i], tol.rtol,
                         tol.atol);
    }
  }
  return {};
}

// While alive, every new CUDA allocation starts as 0xFF bytes (NaN in every floating dtype,
// -1 in the integers): an output element a kernel fails to write shows in the result.
struct PoisonCudaAllocations {
  bool previous = ::hg::cuda::detail::set_allocation_poison(true);
  ~PoisonCudaAllocations() { ::hg::cuda::detail::set_allocation_poison(previous); }
};

}  // namespace hg::testing
