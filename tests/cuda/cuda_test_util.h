// Helpers for the [cuda] tests: they run wherever a CUDA device is, and elsewhere (CI has no
// GPU) pass with a "no CUDA device" warning after checking nothing.
//
//   TEST_CASE("softmax on CUDA matches float64", "[cuda]") {
//     HG_REQUIRE_CUDA();
//     Tensor x = hg::randn({4, 7}).to(hg::kCUDA);
//     ...
//   }
//
// The test files say `using namespace hg::testing;` and use the helpers below unqualified.
#pragma once

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/cuda/cuda.h"
#include "test_util.h"

// Ends the test case early, with Catch's WARN naming why, when no CUDA device is usable.
#define HG_REQUIRE_CUDA()                                                 \
  do {                                                                    \
    if (!::hg::cuda::is_available()) {                                    \
      WARN("skipped: no CUDA device (" << ::hg::cuda::describe() << ")"); \
      return;                                                             \
    }                                                                     \
  } while (false)

namespace hg::testing {

// The device the tests run on.
inline constexpr Device kGpu{kCUDA, 0};

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- moving values ---------------------------------------------------------------------------

// t on the GPU (undefined stays undefined).
inline Tensor to_cuda(const Tensor& t) { return t.defined() ? t.to(kGpu) : Tensor(); }
inline Tensor host(const Tensor& t) { return t.to(Device(kCPU)); }

// The same values as a float64 CPU tensor, without t's autograd history (undefined stays
// undefined).
inline Tensor f64(const Tensor& t) {
  return t.defined() ? t.detach().to(Device(kCPU)).to(kFloat64) : Tensor();
}

// Every element of t (any device, any dtype) as a double, in row-major order.
inline std::vector<double> values_of(const Tensor& t) {
  return f64(t).contiguous().to_vector<double>();
}

// The host bytes of t's values, contiguous.
inline std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor values = host(t.detach()).contiguous();
  std::vector<unsigned char> bytes(values.nbytes());
  std::memcpy(bytes.data(), values.data_ptr(), bytes.size());
  return bytes;
}

// ---- inputs ----------------------------------------------------------------------------------

// N(0, 1) values drawn in float32 from the global generator, rounded to dtype, on the CPU.
inline Tensor normal(const Shape& shape, DType dtype) { return randn(shape, kFloat32).to(dtype); }

// Seeded N(0, 1) values drawn in dtype (so already rounded to it), on the CPU.
inline Tensor random_input(const Shape& shape, DType dtype, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, dtype);
}

// N(0, 1) values drawn on the CPU in dtype (so already rounded to it), moved to the GPU.
inline Tensor gpu_randn(const Shape& shape, DType dtype) { return randn(shape, dtype).to(kGpu); }

// ---- tolerances and comparisons --------------------------------------------------------------

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

// A sum of `terms` products of N(0, 1) values (times scale) is of size sqrt(terms), and so is
// the float32 accumulation error against float64: the dtype's tolerance, with that much more
// absolute room.
inline Tolerance sum_tolerance(DType dtype, int64_t terms, double scale = 1.0) {
  Tolerance tol = tolerance_for(dtype);
  tol.atol += tol.rtol * scale * std::sqrt(double(std::max<int64_t>(terms, 1)));
  return tol;
}

// Gradients go through rounded forward results (statistics, outputs) and subtract means of
// the incoming gradient (cancellation between order-one terms): a wider bound than forward
// results.
inline Tolerance backward_tolerance(DType dtype) {
  const Tolerance t = tolerance_for(dtype);
  const double factor = dtype == kFloat32 ? 2.0 : 4.0;
  return {t.rtol * factor, t.atol * factor};
}

// The comparison behind the mismatch functions: element i passes when |got - want| <= atol +
// rtol * max(|want|, scale[i]) (no scale: |want|), or when both are the same infinity, or
// (nan_equal) both NaN.
inline std::string first_mismatch(const Tensor& got, const Tensor& want, const Tensor* scale,
                                  Tolerance tol, bool nan_equal) {
  if (got.sizes() != want.sizes()) {
    return fmt::format("shape {} != reference shape {}", fmt::join(got.sizes(), ","),
                       fmt::join(want.sizes(), ","));
  }
  const std::vector<double> g = values_of(got), w = values_of(want);
  const std::vector<double> s = scale ? values_of(*scale) : std::vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (nan_equal && std::isnan(g[i]) && std::isnan(w[i])) continue;
    if (std::isinf(g[i]) && g[i] == w[i]) continue;
    const double size = scale ? std::max(std::abs(w[i]), s[i]) : std::abs(w[i]);
    const double allowed = tol.atol + tol.rtol * size;
    if (!(std::abs(g[i] - w[i]) <= allowed)) {
      return fmt::format("element {}: got {}, want {} (allowed {}: rtol {}, atol {})", i, g[i],
                         w[i], allowed, tol.rtol, tol.atol);
    }
  }
  return {};
}

// Empty when every element of `got` (any device, any dtype) is within tol of `want` (CPU
// float64 reference of the same shape); otherwise the first offender. NaN never passes.
inline std::string mismatch(const Tensor& got, const Tensor& want, Tolerance tol) {
  return first_mismatch(got, want, nullptr, tol, false);
}

// As mismatch, except that NaN matches NaN (for the NaN rules).
inline std::string mismatch_nan(const Tensor& got, const Tensor& want, Tolerance tol) {
  return first_mismatch(got, want, nullptr, tol, true);
}

// As mismatch, but element i may be off by rtol * max(|want|, scale[i]): `scale` is the same
// sum over |terms| (a float sum's rounding grows with its terms, not its result: a sum near
// zero of terms near one is exact only to about the terms' rounding).
inline std::string mismatch_scaled(const Tensor& got, const Tensor& want, const Tensor& scale,
                                   Tolerance tol) {
  return first_mismatch(got, want, &scale, tol, false);
}

// got (any device) within dtype's tolerance of want (computed in float64).
inline void require_close(const Tensor& got, const Tensor& want, DType dtype) {
  const std::string bad = mismatch(got, want, tolerance_for(dtype));
  INFO(bad);
  REQUIRE(bad.empty());
}

// got, a CUDA tensor of dtype, within tol of want; `what` names the check.
inline void check_close(const Tensor& got, const Tensor& want, DType dtype, Tolerance tol,
                        std::string_view what) {
  INFO(what);
  REQUIRE(got.defined());
  CHECK(got.is_cuda());
  CHECK(got.dtype() == dtype);
  const std::string why = mismatch(got, want, tol);
  INFO(why);
  CHECK(why.empty());
}

// got (any device) bit for bit want (any device).
inline void require_same_bits(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(bit_identical(host(got), host(want)));
}

// f on CUDA copies of the (rounded) inputs against f on float64 CPU copies of them, every
// input a new leaf requiring grad: the forward (of dtype), then every input's gradient for
// one upstream gradient, draw_upstream(y's shape) (a CPU tensor of dtype). f's second argument
// says which run it is (true: the float64 reference), for the tensors f makes itself.
using OpOnInputs = std::function<Tensor(const std::vector<Tensor>& inputs, bool reference)>;
inline void check_forward_backward(const OpOnInputs& f, const std::vector<Tensor>& cpu_inputs,
                                   DType dtype,
                                   const std::function<Tensor(const Shape&)>& draw_upstream) {
  std::vector<Tensor> on_gpu, reference;
  for (const Tensor& t : cpu_inputs) {
    on_gpu.push_back(to_cuda(t).requires_grad_());
    reference.push_back(t.to(kFloat64).clone().requires_grad_());  // a new leaf, also for float64
  }
  Tensor y = f(on_gpu, false);
  Tensor want = f(reference, true);
  REQUIRE(y.is_cuda());
  REQUIRE(y.dtype() == dtype);
  require_close(y, want, dtype);
  const Tensor upstream = draw_upstream(y.sizes());
  y.backward(to_cuda(upstream));
  want.backward(upstream.to(kFloat64));
  for (size_t i = 0; i < on_gpu.size(); ++i) {
    CAPTURE(i);
    const Tensor& grad = on_gpu[i].grad();
    REQUIRE(grad.defined());
    REQUIRE(grad.is_cuda());
    REQUIRE(grad.dtype() == cpu_inputs[i].dtype());
    require_close(grad, reference[i].grad(), cpu_inputs[i].dtype());
  }
}

// The message of the hg::Error f throws ("" when it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
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
