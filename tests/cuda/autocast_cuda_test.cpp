// Autocast on CUDA tensors: torch.amp's CUDA policy table applied to real GPU work (lower
// precision for matmul and linear, float32 for softmax, sum and the losses, promote for cat,
// banned binary_cross_entropy), the weight-cast cache, and gradients reaching float32 leaves.
#include <catch2/catch.hpp>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {
const TensorOptions kOnGpu{.dtype = kFloat32, .device = kCUDA};
}  // namespace

TEST_CASE("CUDA autocast follows torch's CUDA policies", "[cuda][autocast]") {
  HG_REQUIRE_CUDA();
  for (DType low : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(low));
    const Tensor a = randn({8, 16}, kOnGpu), b = randn({16, 4}, kOnGpu);
    amp::Autocast autocast(kCUDA, low);
    const Tensor product = matmul(a, b);
    CHECK(product.dtype() == low);  // lower precision
    CHECK(product.is_cuda());
    CHECK(softmax(product, -1).dtype() == kFloat32);                  // fp32
    CHECK(sum(product).dtype() == kFloat32);                          // fp32
    CHECK(add(product, a.narrow(1, 0, 4)).dtype() == kFloat32);       // unlisted: promotion
    CHECK(cat({product, a.narrow(1, 0, 4)}, 0).dtype() == kFloat32);  // promote
    CHECK(exp(product).dtype() == kFloat32);                          // fp32
    CHECK(relu(product).dtype() == low);                              // unlisted: as given
    const Tensor p = sigmoid(randn({4}, kOnGpu)), t = rand({4}, kOnGpu);
    CHECK_THROWS_WITH(binary_cross_entropy(p, t), Contains("unsafe to autocast"));
    {
      amp::Autocast cpu_only(kCPU, kBFloat16);  // a CPU region leaves CUDA tensors alone
      amp::Autocast off(kCUDA, std::nullopt, false);
      CHECK(matmul(a, b).dtype() == kFloat32);
    }
  }
}

TEST_CASE("CUDA autocast matches the explicit casts in value", "[cuda][autocast]") {
  HG_REQUIRE_CUDA();
  const Tensor a = randn({32, 64}, kOnGpu), b = randn({64, 16}, kOnGpu);
  Tensor got;
  {
    amp::Autocast autocast(kCUDA, kFloat16);
    got = matmul(a, b);
  }
  const Tensor want = matmul(a.to(kFloat16), b.to(kFloat16));
  CHECK(testing::mismatch(got, want.to(Device(kCPU)).to(kFloat64), {0.0, 0.0}) == "");
}

TEST_CASE("the weight-cast cache works on CUDA and gradients reach float32 weights",
          "[cuda][autocast]") {
  HG_REQUIRE_CUDA();
  nn::Linear linear(16, 8);
  linear.to(Device(kCUDA));
  const Tensor x = randn({4, 16}, kOnGpu);
  {
    amp::Autocast autocast(kCUDA, kFloat16);
    const Tensor y1 = linear.forward(x);
    const Tensor y2 = linear.forward(x);
    CHECK(y1.dtype() == kFloat16);
    CHECK(amp::weight_cast_cache_size() == 2);  // weight and bias, cast once each
    sum(add(y1, y2).to(kFloat32)).backward();
  }
  CHECK(amp::weight_cast_cache_size() == 0);
  REQUIRE(linear.weight.grad().defined());
  CHECK(linear.weight.grad().dtype() == kFloat32);
  CHECK(linear.weight.grad().is_cuda());
  // d/dW sum(2 (x W^T + b)) = 2 * column sums of x, for every output row.
  const Tensor want = mul(sum(x.to(kFloat16).to(kFloat32), {0}, true), 2.0).expand({8, 16});
  CHECK(testing::mismatch(linear.weight.grad(), want.to(Device(kCPU)).to(kFloat64),
                          testing::tolerance_for(kFloat16)) == "");
}
