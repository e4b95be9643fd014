// The fused CUDA steps of RMSprop and Adagrad (cuda::multi_tensor_kernels' fused_rmsprop_ and
// fused_adagrad_) against the CPU optimizers over several steps, for every option set and 16-bit
// dtype; skipped steps leaving everything bit-identical; grad_scale read on the device; the lr
// written to the device when changed. Lists are long (more tensors than one kernel-argument
// table holds) and one tensor spans more than two chunks.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "cuda/optimizer_twins.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/multi_tensor_launch.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

std::unique_ptr<optim::Optimizer> make(bool rmsprop, const std::vector<Tensor>& params,
                                       const optim::RMSpropOptions& rmsprop_options,
                                       const optim::AdagradOptions& adagrad_options) {
  if (rmsprop) return std::make_unique<optim::RMSprop>(params, rmsprop_options);
  return std::make_unique<optim::Adagrad>(params, adagrad_options);
}

}  // namespace

TEST_CASE("fused RMSprop on CUDA matches the CPU optimizer over several steps", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(80);  // more than one table for 3 to 5 lists
  const optim::RMSpropOptions configs[] = {
      {.lr = 0.01},
      {.lr = 0.01, .momentum = 0.9},
      {.lr = 0.01, .alpha = 0.9, .centered = true},
      {.lr = 0.02, .alpha = 0.95, .weight_decay = 0.05, .momentum = 0.5, .centered = true},
      {.lr = 0.01, .eps = 1e-3, .weight_decay = 0.1, .maximize = true},
  };
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (const optim::RMSpropOptions& config : configs) {
      INFO(dtype_name(dtype) << " momentum " << config.momentum << " centered " << config.centered
                             << " weight_decay " << config.weight_decay << " maximize "
                             << config.maximize);
      Twins twins = make_twins(sizes, dtype, 10);
      optim::RMSprop cpu(twins.cpu, config);
      optim::RMSprop gpu(twins.gpu, config);
      for (int step = 0; step < 4; ++step) {
        set_grads(twins, 100 + uint64_t(step), 1.0 + step, /*without=*/5);
        cpu.step();
        gpu.step();
      }
      check_same(twins, cpu, gpu, dtype);
      CHECK(gpu.state(0, 5).empty());  // never had a gradient
      CHECK(gpu.state_dict().state.at(0).at("step").item<double>() == 4.0);
    }
  }
}

TEST_CASE("fused Adagrad on CUDA matches the CPU optimizer over several steps", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(80);
  const optim::AdagradOptions configs[] = {
      {.lr = 0.1},
      {.lr = 0.1, .lr_decay = 0.2},
      {.lr = 0.1, .weight_decay = 0.1, .initial_accumulator_value = 0.5},
      {.lr = 0.05, .lr_decay = 0.1, .eps = 1e-6, .maximize = true},
  };
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (const optim::AdagradOptions& config : configs) {
      INFO(dtype_name(dtype) << " lr_decay " << config.lr_decay << " weight_decay "
                             << config.weight_decay << " initial_accumulator_value "
                             << config.initial_accumulator_value);
      Twins twins = make_twins(sizes, dtype, 20);
      optim::Adagrad cpu(twins.cpu, config);
      optim::Adagrad gpu(twins.gpu, config);
      for (int step = 0; step < 4; ++step) {
        set_grads(twins, 200 + uint64_t(step), 1.0 + step, /*without=*/7);
        cpu.step();
        gpu.step();
      }
      check_same(twins, cpu, gpu, dtype);
      CHECK(gpu.state(0, 7).step_count() == 0);  // its sum from construction, no step
    }
  }
}

TEST_CASE("fused RMSprop and Adagrad skip on the device leaving everything bit-identical",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(30);
  for (bool rmsprop : {true, false}) {
    INFO((rmsprop ? "RMSprop" : "Adagrad"));
    Twins twins = make_twins(sizes, kFloat32, 30);
    const optim::RMSpropOptions rmsprop_options{.momentum = 0.5, .centered = true};
    const optim::AdagradOptions adagrad_options{.lr = 0.1, .lr_decay = 0.5};
    auto cpu = make(rmsprop, twins.cpu, rmsprop_options, adagrad_options);
    auto gpu = make(rmsprop, twins.gpu, rmsprop_options, adagrad_options);
    const Tensor clean = cuda::multi_tensor_kernels.new_flag(kGpu);
    const Tensor skip = full({1}, 1.0, {.dtype = kFloat32, .device = kGpu});
    // The first step skipped: no state made on the CPU, and none listed on the GPU.
    set_grads(twins, 299, 1.0, /*without=*/sizes.size());
    gpu->step_scaled(Tensor(), skip);
    CHECK(gpu->state_dict().state.size() == cpu->state_dict().state.size());
    for (int step = 0; step < 5; ++step) {
      INFO("step " << step);
      set_grads(twins, 300 + uint64_t(step), 1.0, /*without=*/sizes.size());
      if (step == 2) {
        std::vector<std::vector<unsigned char>> before;
        for (size_t i = 0; i < sizes.size(); ++i) {
          before.push_back(bytes_of(twins.gpu[i]));
          for (const auto& [name, buffer] : gpu->state(0, i).buffers) {
            before.push_back(bytes_of(buffer));
          }
        }
        gpu->step_scaled(full({1}, 8.0, {.dtype = kFloat32, .device = kGpu}), skip);
        size_t k = 0;
        for (size_t i = 0; i < sizes.size(); ++i) {
          CHECK(bytes_of(twins.gpu[i]) == before[k++]);
          for (const auto& [name, buffer] : gpu->state(0, i).buffers) {
            CHECK(bytes_of(buffer) == before[k++]);
          }
        }
        CHECK(gpu->state(0, 0).step_count() == 2);
        continue;
      }
      cpu->step();
      gpu->step_scaled(Tensor(), clean);
    }
    // Adagrad's decayed lr used the device's step counts: the runs agree.
    check_same(twins, *cpu, *gpu, kFloat32);
    CHECK(gpu->state_dict().state.at(0).at("step").item<double>() == 4.0);
  }
}

TEST_CASE("fused RMSprop and Adagrad divide by a grad_scale read on the device", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(20);
  for (bool rmsprop : {true, false}) {
    INFO((rmsprop ? "RMSprop" : "Adagrad"));
    Twins twins = make_twins(sizes, kFloat32, 50);
    const optim::RMSpropOptions rmsprop_options{.weight_decay = 0.01, .momentum = 0.9};
    const optim::AdagradOptions adagrad_options{.lr = 0.1, .weight_decay = 0.01};
    auto cpu = make(rmsprop, twins.cpu, rmsprop_options, adagrad_options);
    auto gpu = make(rmsprop, twins.gpu, rmsprop_options, adagrad_options);
    for (int step = 0; step < 3; ++step) {
      set_grads(twins, 500 + uint64_t(step), 1024.0, /*without=*/sizes.size());
      cpu->step_scaled(scalar_tensor(1024.0), Tensor());
      gpu->step_scaled(full({1}, 1024.0, {.dtype = kFloat32, .device = kGpu}), Tensor());
    }
    check_same(twins, *cpu, *gpu, kFloat32);
  }
}

TEST_CASE("fused RMSprop and Adagrad read an lr changed between steps", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = {5, 70000};
  for (bool rmsprop : {true, false}) {
    INFO((rmsprop ? "RMSprop" : "Adagrad"));
    Twins twins = make_twins(sizes, kFloat32, 60);
    auto cpu = make(rmsprop, twins.cpu, {}, {});
    auto gpu = make(rmsprop, twins.gpu, {}, {});
    optim::ExponentialLR cpu_schedule(*cpu, 0.5);
    optim::ExponentialLR gpu_schedule(*gpu, 0.5);
    for (int step = 0; step < 3; ++step) {
      set_grads(twins, 600 + uint64_t(step), 1.0, /*without=*/sizes.size());
      cpu->step();
      gpu->step();
      cpu_schedule.step();
      gpu_schedule.step();
    }
    check_same(twins, *cpu, *gpu, kFloat32);
  }
}

TEST_CASE("fused RMSprop and Adagrad reject what the CPU optimizers reject", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  Tensor a = zeros({3}).to(kGpu).requires_grad_();
  Tensor b = zeros({3}).requires_grad_();
  a.mutable_grad() = ones({3}).to(kGpu);
  b.mutable_grad() = ones({3});
  optim::RMSprop mixed({a, b});
  CHECK_THROWS_WITH(mixed.step(), Contains("RMSprop") && Contains("on a CUDA device"));
  Tensor c = zeros({3}).to(kGpu).requires_grad_();
  c.mutable_grad() = ones({3}, kFloat16).to(kGpu);
  optim::Adagrad adagrad({c});
  CHECK_THROWS_WITH(adagrad.step(), Contains("expected a gradient of the parameter's dtype"));
  optim::RMSprop rmsprop({a});
  CHECK_THROWS_WITH(rmsprop.step_scaled(Tensor(), zeros({2}).to(kGpu)),
                    Contains("found_inf to be a one-element floating tensor"));
}
