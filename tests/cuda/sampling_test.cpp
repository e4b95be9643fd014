// Sampling on CUDA draws what the CPU draws from the same generator state: the float64
// uniforms are the same bits on both (NOTE [Philox stream layout]).
#include <catch2/catch.hpp>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;

TEST_CASE("CUDA bernoulli, randint, randperm and multinomial draw the CPU's samples",
          "[cuda][sampling]") {
  HG_REQUIRE_CUDA();
  const auto both = [](const std::function<Tensor(Device)>& draw) {
    manual_seed(31);
    const Tensor cpu = draw(kCPU);
    manual_seed(31);
    const Tensor gpu = draw(kCUDA);
    CHECK(gpu.is_cuda());
    return std::pair{cpu.to_vector<double>(), gpu.to(kCPU).to_vector<double>()};
  };
  const Tensor p = rand({1000});
  auto [b_cpu, b_gpu] = both([&](Device d) { return bernoulli(p.to(d)); });
  CHECK(b_cpu == b_gpu);
  auto [i_cpu, i_gpu] =
      both([](Device d) { return randint(-50, 70, {4000}, {.dtype = kInt64, .device = d}); });
  CHECK(i_cpu == i_gpu);
  auto [r_cpu, r_gpu] =
      both([](Device d) { return randperm(3000, {.dtype = kInt64, .device = d}); });
  CHECK(r_cpu == r_gpu);
  const Tensor weights = add(rand({4, 50}), 0.01);
  auto [m_cpu, m_gpu] = both([&](Device d) { return multinomial(weights.to(d), 10); });
  CHECK(m_cpu == m_gpu);
  auto [w_cpu, w_gpu] = both([&](Device d) { return multinomial(weights.to(d), 200, true); });
  CHECK(w_cpu == w_gpu);
}
