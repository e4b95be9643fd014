// Every differentiable op of the registry on CUDA, forward and backward, against the same op
// in float64 on the CPU, for float64, float32, float16 and bfloat16. The cases are the
// gradcheck samples (tests/ops/gradcheck_samples/), so an op added to op_list.def with a
// sample is swept here too.
//
// The inputs are rounded to the dtype first and the reference runs on those rounded values, so
// the comparison measures the kernels' error, not the inputs' rounding. The upstream gradient
// is random (never ones, which would hide a transposed or summed-wrong backward).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"
#include "ops/gradcheck_samples.h"

using namespace hg;
using hg::testing::Inputs;

namespace {

// The tolerance for a whole sample: a sample chains several ops, each rounding its output in
// 16-bit dtypes, so those get four times the single-kernel tolerance; atol scales with the
// largest reference value.
testing::Tolerance sample_tolerance(DType dtype, const Tensor& want) {
  testing::Tolerance tol = testing::tolerance_for(dtype);
  if (is_reduced_precision(dtype)) {
    tol.rtol *= 4;
    tol.atol *= 4;
  }
  const double largest = want.numel() == 0 ? 0.0 : hg::amax(hg::abs(want.detach())).item<double>();
  tol.atol *= std::max(1.0, largest);
  return tol;
}

struct Placed {
  Inputs reference;  // float64 on the CPU, holding the dtype's rounded values
  Inputs device;     // the dtype on CUDA
};

Placed place(const Inputs& inputs, DType dtype) {
  Placed out;
  for (const Tensor& t : inputs) {
    const Tensor values = t.detach();
    Tensor reference = values.is_floating_point() ? values.to(dtype).to(kFloat64) : values;
    Tensor device = values.is_floating_point() ? values.to(Device(kCUDA), dtype) : values.to(kCUDA);
    if (t.requires_grad()) {
      reference = reference.clone().requires_grad_();
      device = device.clone().requires_grad_();
    }
    out.reference.push_back(reference);
    out.device.push_back(device);
  }
  return out;
}

std::vector<Tensor> requiring_grad(const Inputs& inputs) {
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) {
    if (t.requires_grad()) out.push_back(t);
  }
  return out;
}

}  // namespace

TEST_CASE("every differentiable op on CUDA matches float64 on the CPU, forward and backward",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  testing::PoisonCudaAllocations poison;
  const auto& samples = testing::gradcheck_samples();
  for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    for (const OpInfo& info : all_ops()) {
      if (!info.differentiable) continue;
      const auto it = samples.find(info.id);
      if (it == samples.end()) continue;  // the CPU gradcheck sweep fails for it already
      const testing::Sample& sample = it->second;
      CAPTURE(info.name, dtype_name(dtype));
      manual_seed(7);
      const Placed in = place(sample.inputs(), dtype);

      testing::sample_placement() = {Device(kCPU), kFloat64};
      const Tensor want = sample.fn(in.reference);
      testing::sample_placement() = {Device(kCUDA), dtype};
      Tensor got;
      try {
        got = sample.fn(in.device);
      } catch (const Error& e) {
        testing::sample_placement() = {};
        FAIL("forward threw: " << e.what());
      }
      testing::sample_placement() = {};
      REQUIRE(got.is_cuda());
      INFO("forward");
      CHECK(testing::mismatch(got, want, sample_tolerance(dtype, want)) == "");

      const std::vector<Tensor> ref_inputs = requiring_grad(in.reference);
      const std::vector<Tensor> dev_inputs = requiring_grad(in.device);
      if (ref_inputs.empty()) continue;
      const Tensor upstream = randn(want.sizes(), kFloat64).to(dtype).to(kFloat64);
      const std::vector<Tensor> want_grads = autograd::grad({want}, ref_inputs, {upstream});
      const std::vector<Tensor> got_grads =
          autograd::grad({got}, dev_inputs, {upstream.to(Device(kCUDA), dtype)});
      REQUIRE(got_grads.size() == want_grads.size());
      for (size_t i = 0; i < want_grads.size(); ++i) {
        INFO("gradient of input " << i);
        CHECK(testing::mismatch(got_grads[i], want_grads[i],
                                sample_tolerance(dtype, want_grads[i])) == "");
      }
    }
  }
}
