// The fused CUDA steps of Adamax, Adadelta, RAdam and NAdam (cuda::multi_tensor_kernels'
// fused_adamax_, fused_adadelta_, fused_radam_ and fused_nadam_) against the CPU optimizers over
// eight steps (RAdam's rectification switches on at the fourth; NAdam's mu_product advanced on
// the device), for every dtype and for bf16_params; a skipped step leaving everything
// bit-identical; a scaled step read on the device. Lists are long (more tensors than one
// kernel-argument table holds) and one tensor spans more than two chunks. LBFGS, made of tensor
// ops, on CUDA parameters against the CPU.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/optimizer_twins.h"
#include "halfgrad/cuda/multi_tensor_launch.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;

namespace {

// bf16_params with its words from `generator` when that is not null.
using Make = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&,
                                                             Generator* generator)>;

const std::vector<std::pair<const char*, Make>>& optimizers() {
  static const std::vector<std::pair<const char*, Make>> all = {
      {"Adamax",
       [](const std::vector<Tensor>& p, Generator* g) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::Adamax>(p, optim::AdamaxOptions{.lr = 0.02,
                                                                        .beta1 = 0.8,
                                                                        .weight_decay = 0.05,
                                                                        .maximize = true,
                                                                        .bf16_params = g != nullptr,
                                                                        .generator = g});
       }},
      {"Adadelta",
       [](const std::vector<Tensor>& p, Generator* g) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::Adadelta>(
             p, optim::AdadeltaOptions{.lr = 0.5,
                                       .rho = 0.7,
                                       .weight_decay = 0.05,
                                       .bf16_params = g != nullptr,
                                       .generator = g});
       }},
      {"RAdam",
       [](const std::vector<Tensor>& p, Generator* g) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::RAdam>(
             p, optim::RAdamOptions{
                    .lr = 0.02, .weight_decay = 0.05, .bf16_params = g != nullptr, .generator = g});
       }},
      {"NAdam",
       [](const std::vector<Tensor>& p, Generator* g) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::NAdam>(p,
                                               optim::NAdamOptions{.lr = 0.02,
                                                                   .weight_decay = 0.05,
                                                                   .momentum_decay = 0.05,
                                                                   .decoupled_weight_decay = true,
                                                                   .bf16_params = g != nullptr,
                                                                   .generator = g});
       }},
  };
  return all;
}

}  // namespace

TEST_CASE("fused Adamax Adadelta RAdam and NAdam on CUDA match the CPU optimizers", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(80);  // more than one table of 4 lists
  for (const auto& [name, make] : optimizers()) {
    for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      for (bool bf16 : {false, true}) {
        if (bf16 && dtype != kBFloat16) continue;
        INFO(name << " " << dtype_name(dtype) << " bf16_params " << bf16);
        Twins twins = make_twins(sizes, dtype, 10);
        Generator cpu_words(3), gpu_words(3);  // bf16_params: the same words on both
        auto cpu = make(twins.cpu, bf16 ? &cpu_words : nullptr);
        auto gpu = make(twins.gpu, bf16 ? &gpu_words : nullptr);
        for (int step = 0; step < 8; ++step) {
          // The GPU's gradients times 4, which its grad_scale divides.
          set_grads(twins, 100 + uint64_t(step), 1.0, /*without=*/sizes.size(), 4.0);
          cpu->step();
          gpu->step_scaled(scalar_tensor(4.0, kFloat32).to(kGpu),
                           scalar_tensor(0.0, kFloat32).to(kGpu));
        }
        check_same(twins, *cpu, *gpu, dtype);
        CHECK(gpu->state(0, 0).step_count() == 8);
        // A skipped step changes nothing, step counts included.
        std::vector<Tensor> before;
        for (const Tensor& p : twins.gpu) before.push_back(p.detach().clone());
        std::map<std::string, Tensor> buffers_before;
        for (const auto& [key, buffer] : gpu->state(0, 0).buffers) {
          buffers_before[key] = buffer.clone();
        }
        gpu->step_scaled(Tensor(), scalar_tensor(1.0, kFloat32).to(kGpu));
        for (size_t i = 0; i < before.size(); ++i) {
          CHECK(mismatch(twins.gpu[i], before[i].to(kFloat64), Tolerance{0, 0}).empty());
        }
        for (const auto& [key, buffer] : buffers_before) {
          INFO(key << " after a skipped step");
          CHECK(mismatch(gpu->state(0, 0).buffers.at(key), buffer.to(kFloat64), Tolerance{0, 0})
                    .empty());
        }
        CHECK(gpu->state(0, 0).step_count() == 8);
      }
    }
  }
}

TEST_CASE("LBFGS on CUDA parameters follows the CPU run", "[cuda]") {
  HG_REQUIRE_CUDA();
  // A Rosenbrock valley in float64, stepped with the strong-Wolfe search on both devices; the
  // sums' orders differ, so the two agree to rounding, not bits.
  auto run = [](Device device) {
    Tensor x = tensor(std::vector<double>{-1.2, 1.0, -0.5, 0.8, 0.3}, kFloat64).to(device);
    x.requires_grad_();
    optim::LBFGS opt({x}, {.history_size = 4, .line_search_fn = "strong_wolfe"});
    auto closure = [&] {
      opt.zero_grad();
      const Tensor head = x.narrow(0, 0, 4), tail = x.narrow(0, 1, 4);
      const Tensor valley = sub(tail, mul(head, head)), one_minus = add(neg(head), 1.0);
      Tensor loss = sum(add(mul(mul(valley, valley), 10.0), mul(one_minus, one_minus)));
      loss.backward();
      return loss;
    };
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) losses.push_back(opt.step(closure).item<double>());
    return std::pair{x.detach().to(kCPU), losses};
  };
  const auto [cpu_x, cpu_losses] = run(kCPU);
  const auto [gpu_x, gpu_losses] = run(kGpu);
  CHECK(mismatch(gpu_x, cpu_x, Tolerance{1e-9, 1e-9}).empty());
  REQUIRE(gpu_losses.size() == cpu_losses.size());
  for (size_t i = 0; i < cpu_losses.size(); ++i) {
    CHECK(gpu_losses[i] == Approx(cpu_losses[i]).epsilon(1e-9).margin(1e-12));
  }
}
