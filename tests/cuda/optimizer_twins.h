// Shared by the [cuda] tests of the fused optimizers (multi_tensor_test,
// optim_rmsprop_adagrad_test, optim_adamax_test): the same parameters on the CPU and on the GPU,
// the same gradients for both, and the comparison of the two optimizers' parameters and state after
// some steps.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cuda/multi_tensor_launch.h"
#include "halfgrad/halfgrad.h"

namespace hg::testing {

// `count` odd sizes (more than one kernel-argument table of tensors for count >= 80); the
// middle one spans two chunks and a tail.
inline std::vector<int64_t> odd_sizes(int count) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < count; ++i) sizes.push_back(1 + (int64_t(i) * 41) % 293);
  sizes[size_t(count / 2)] = 2 * cuda::detail::kChunkSize + 29;
  return sizes;
}

// Normal draws from a seed, scaled, rounded to dtype (CPU tensors).
inline std::vector<Tensor> random_tensors(const std::vector<int64_t>& sizes, DType dtype,
                                          uint64_t seed, double scale = 1.0) {
  manual_seed(seed);
  std::vector<Tensor> out;
  for (int64_t n : sizes) out.push_back((randn({n}) * scale).to(dtype));
  return out;
}

// The same parameters on the CPU and on the GPU.
struct Twins {
  std::vector<Tensor> cpu, gpu;
};

inline Twins make_twins(const std::vector<int64_t>& sizes, DType dtype, uint64_t seed) {
  Twins twins;
  for (const Tensor& t : random_tensors(sizes, dtype, seed, 0.5)) {
    twins.cpu.push_back(t.clone().requires_grad_());
    twins.gpu.push_back(t.to(kGpu).requires_grad_());
  }
  return twins;
}

// The same gradients (normal draws times `scale`) for both, the GPU's times `gpu_factor` (a
// power of two, exact, for a grad_scale to divide); parameter `without` gets none (it must
// not step; an index past the end: every parameter gets one).
inline void set_grads(Twins& twins, uint64_t seed, double scale, size_t without,
                      double gpu_factor = 1.0) {
  std::vector<int64_t> sizes;
  for (const Tensor& p : twins.cpu) sizes.push_back(p.numel());
  const std::vector<Tensor> grads = random_tensors(sizes, twins.cpu[0].dtype(), seed, scale);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (i == without) continue;
    twins.cpu[i].mutable_grad() = grads[i];
    twins.gpu[i].mutable_grad() =
        gpu_factor == 1.0 ? grads[i].to(kGpu)
                          : (grads[i].to(kFloat64) * gpu_factor).to(grads[i].dtype()).to(kGpu);
  }
}

// |gpu - cpu| within the dtype's tolerance, float32 held to about 1e-6 relative.
inline Tolerance optimizer_tolerance(DType dtype) {
  return dtype == kFloat32 ? Tolerance{2e-6, 1e-7} : tolerance_for(dtype);
}

// The state of the first `count` parameters of group 0: the same step counts, buffer names and
// dtypes, and values within optimizer_tolerance(dtype).
inline void check_same_state(const optim::Optimizer& cpu, const optim::Optimizer& gpu, size_t count,
                             DType dtype) {
  for (size_t i = 0; i < count; ++i) {
    INFO("state of parameter " << i);
    const optim::ParamState& want = cpu.state(0, i);
    const optim::ParamState& got = gpu.state(0, i);
    CHECK(got.step_count() == want.step_count());
    REQUIRE(got.buffers.size() == want.buffers.size());
    for (const auto& [name, buffer] : want.buffers) {
      INFO(name);
      REQUIRE(got.buffers.count(name) == 1);
      CHECK(got.buffers.at(name).dtype() == buffer.dtype());
      CHECK(
          mismatch(got.buffers.at(name), buffer.to(kFloat64), optimizer_tolerance(dtype)).empty());
    }
  }
}

// The twins' parameters within optimizer_tolerance(dtype), and their state (check_same_state).
inline void check_same(const Twins& twins, const optim::Optimizer& cpu, const optim::Optimizer& gpu,
                       DType dtype) {
  for (size_t i = 0; i < twins.cpu.size(); ++i) {
    INFO("parameter " << i);
    CHECK(mismatch(twins.gpu[i], twins.cpu[i].to(kFloat64), optimizer_tolerance(dtype)).empty());
  }
  check_same_state(cpu, gpu, twins.cpu.size(), dtype);
}

}  // namespace hg::testing
