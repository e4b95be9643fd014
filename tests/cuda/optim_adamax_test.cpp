// The fused CUDA steps of Adamax, Adadelta and RAdam (cuda::multi_tensor_kernels' fused_adamax_,
// fused_adadelta_ and fused_radam_) against the CPU optimizers over eight steps (RAdam's
// rectification switches on at the fourth), for every dtype and for bf16_params; a skipped step
// leaving everything bit-identical; a scaled step read on the device. Lists are long (more
// tensors than one kernel-argument table holds) and one tensor spans more than two chunks.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "cuda/cuda_test_util.h"
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
  };
  return all;
}

// `count` odd sizes; the middle one spans two chunks and a tail.
std::vector<int64_t> odd_sizes(int count) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < count; ++i) sizes.push_back(1 + (int64_t(i) * 41) % 293);
  sizes[size_t(count / 2)] = 2 * cuda::detail::kChunkSize + 29;
  return sizes;
}

struct Twins {
  std::vector<Tensor> cpu, gpu;
};

Twins make_twins(const std::vector<int64_t>& sizes, DType dtype) {
  manual_seed(10);
  Twins twins;
  for (int64_t n : sizes) {
    const Tensor t = (randn({n}) * 0.5).to(dtype);
    twins.cpu.push_back(t.clone().requires_grad_());
    twins.gpu.push_back(t.to(kGpu).requires_grad_());
  }
  return twins;
}

// The same gradients for both, the GPU's times 4 (exact), which its grad_scale divides.
void set_grads(Twins& twins, uint64_t seed) {
  manual_seed(seed);
  for (size_t i = 0; i < twins.cpu.size(); ++i) {
    const Tensor grad = randn({twins.cpu[i].numel()}).to(twins.cpu[i].dtype());
    twins.cpu[i].mutable_grad() = grad;
    twins.gpu[i].mutable_grad() = (grad.to(kFloat64) * 4.0).to(grad.dtype()).to(kGpu);
  }
}

}  // namespace

TEST_CASE("fused Adamax Adadelta and RAdam on CUDA match the CPU optimizers", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(80);  // more than one table of 4 lists
  for (const auto& [name, make] : optimizers()) {
    for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      for (bool bf16 : {false, true}) {
        if (bf16 && dtype != kBFloat16) continue;
        INFO(name << " " << dtype_name(dtype) << " bf16_params " << bf16);
        Twins twins = make_twins(sizes, dtype);
        Generator cpu_words(3), gpu_words(3);  // bf16_params: the same words on both
        auto cpu = make(twins.cpu, bf16 ? &cpu_words : nullptr);
        auto gpu = make(twins.gpu, bf16 ? &gpu_words : nullptr);
        for (int step = 0; step < 8; ++step) {
          set_grads(twins, 100 + uint64_t(step));
          cpu->step();
          gpu->step_scaled(scalar_tensor(4.0, kFloat32).to(kGpu),
                           scalar_tensor(0.0, kFloat32).to(kGpu));
        }
        const Tolerance tolerance =
            dtype == kFloat32 ? Tolerance{2e-6, 1e-7} : tolerance_for(dtype);
        for (size_t i = 0; i < twins.cpu.size(); ++i) {
          INFO("parameter " << i);
          CHECK(mismatch(twins.gpu[i], twins.cpu[i].to(kFloat64), tolerance).empty());
          CHECK(gpu->state(0, i).step_count() == 8);
          for (const auto& [key, buffer] : cpu->state(0, i).buffers) {
            INFO(key);
            CHECK(
                mismatch(gpu->state(0, i).buffers.at(key), buffer.to(kFloat64), tolerance).empty());
          }
        }
        // A skipped step changes nothing, step counts included.
        std::vector<Tensor> before;
        for (const Tensor& p : twins.gpu) before.push_back(p.detach().clone());
        gpu->step_scaled(Tensor(), scalar_tensor(1.0, kFloat32).to(kGpu));
        for (size_t i = 0; i < before.size(); ++i) {
          CHECK(mismatch(twins.gpu[i], before[i].to(kFloat64), Tolerance{0, 0}).empty());
        }
        CHECK(gpu->state(0, 0).step_count() == 8);
      }
    }
  }
}
