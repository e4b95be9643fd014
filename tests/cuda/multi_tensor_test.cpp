// The multi-tensor CUDA kernels (kernel/multi_tensor.h) and what uses them: unscale + inf check
// against float64 references, the fused Adam/AdamW/SGD steps against the CPU optimizers over
// several steps, skipped steps leaving everything bit-identical, clip_grad_norm_ and
// clip_grad_value_ against the CPU. Lists are long (more tensors than one kernel-argument table
// holds), sizes odd, and one tensor spans more than two chunks.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <limits>
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

std::vector<Tensor> to_gpu(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(t.to(kGpu));
  return out;
}

// t (CPU) with element i set to value.
Tensor with_value(const Tensor& t, int64_t i, double value) {
  Tensor copy = t.clone();
  copy.narrow(0, i, 1).fill_(value);
  return copy;
}

}  // namespace

// ---- unscale + inf check ---------------------------------------------------------------------

TEST_CASE("unscale_and_check_ multiplies every tensor by inv_scale and flags nothing finite",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    INFO(dtype_name(dtype));
    const std::vector<Tensor> cpu = random_tensors(odd_sizes(130), dtype, 1);
    const std::vector<Tensor> gpu = to_gpu(cpu);
    const Tensor scale = full({1}, 3.0, {.dtype = kFloat32, .device = kGpu});
    const Tensor inv_scale = cuda::multi_tensor_kernels.reciprocal_scale(scale);
    const Tensor found_inf = cuda::multi_tensor_kernels.new_flag(kGpu);
    cuda::multi_tensor_kernels.unscale_and_check_(gpu, inv_scale, found_inf);
    CHECK(inv_scale.item<float>() == float(1.0 / 3.0));
    CHECK(found_inf.item<float>() == 0.0f);
    const double inv = double(float(1.0 / 3.0));
    for (size_t i = 0; i < cpu.size(); ++i) {
      INFO("tensor " << i << " of " << cpu[i].numel());
      CHECK(mismatch(gpu[i], cpu[i].to(kFloat64) * inv, tolerance_for(dtype)).empty());
    }
  }
}

TEST_CASE("unscale_and_check_ flags an inf or NaN wherever it is", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(130);
  const int64_t big = int64_t(sizes.size() / 2);
  struct Place {
    int64_t tensor, element;
    double value;
  };
  const Place places[] = {
      {0, 0, kInf},                                          // the first element
      {int64_t(sizes.size()) - 1, sizes.back() - 1, -kInf},  // the last one
      {big, cuda::detail::kChunkSize + 5, std::nan("")},     // in the second chunk
      {big, sizes[size_t(big)] - 1, kInf},                   // in the big one's tail
      {100, sizes[100] / 2, std::nan("")},                   // in the second table
  };
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (const Place& place : places) {
      INFO(dtype_name(dtype) << " tensor " << place.tensor << " element " << place.element);
      std::vector<Tensor> cpu = random_tensors(sizes, dtype, 2);
      cpu[size_t(place.tensor)] = with_value(cpu[size_t(place.tensor)], place.element, place.value);
      const std::vector<Tensor> gpu = to_gpu(cpu);
      const Tensor found_inf = cuda::multi_tensor_kernels.new_flag(kGpu);
      cuda::multi_tensor_kernels.unscale_and_check_(
          gpu, full({1}, 0.25, {.dtype = kFloat32, .device = kGpu}), found_inf);
      CHECK(found_inf.item<float>() == 1.0f);
      // The finite values are unscaled all the same.
      CHECK(mismatch(gpu[1], cpu[1].to(kFloat64) * 0.25, tolerance_for(dtype)).empty());
    }
  }
}

TEST_CASE("unscale_and_check_ flags a finite value that overflows when unscaled", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  // NOTE [Unscale checks input and result]: 60000 * 2 is beyond float16's range.
  const Tensor g = tensor({60000.0, 1.0}, kFloat16).to(kGpu);
  const Tensor found_inf = cuda::multi_tensor_kernels.new_flag(kGpu);
  cuda::multi_tensor_kernels.unscale_and_check_(
      std::vector<Tensor>{g}, full({1}, 2.0, {.dtype = kFloat32, .device = kGpu}), found_inf);
  CHECK(found_inf.item<float>() == 1.0f);
}

TEST_CASE("unscale_and_check_ takes strided tensors and float64 and mixed dtypes in one list",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(3);
  const Tensor a = randn({5, 7});
  const Tensor b = randn({300}, kFloat64);
  const Tensor c = randn({33}).to(kBFloat16);
  const Tensor a_gpu = a.to(kGpu).t();  // strided: written back through a dense copy
  const std::vector<Tensor> list = {a_gpu, b.to(kGpu), c.to(kGpu)};
  const Tensor found_inf = cuda::multi_tensor_kernels.new_flag(kGpu);
  cuda::multi_tensor_kernels.unscale_and_check_(
      list, full({1}, 0.5, {.dtype = kFloat32, .device = kGpu}), found_inf);
  CHECK(found_inf.item<float>() == 0.0f);
  CHECK(mismatch(list[0], a.t().to(kFloat64) * 0.5, tolerance_for(kFloat32)).empty());
  CHECK(mismatch(list[1], b * 0.5, tolerance_for(kFloat64)).empty());
  CHECK(mismatch(list[2], c.to(kFloat64) * 0.5, tolerance_for(kBFloat16)).empty());
}

TEST_CASE("unscale_and_check_ and sum_flags reject bad input", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const Tensor inv_scale = full({1}, 1.0, {.dtype = kFloat32, .device = kGpu});
  const Tensor found_inf = cuda::multi_tensor_kernels.new_flag(kGpu);
  const std::vector<Tensor> on_cpu = {zeros({3}).to(kGpu), zeros({3})};
  CHECK_THROWS_WITH(cuda::multi_tensor_kernels.unscale_and_check_(on_cpu, inv_scale, found_inf),
                    Contains("on a CUDA device") && Contains("cpu"));
  const std::vector<Tensor> ints = {zeros({3}, kInt64).to(kGpu)};
  CHECK_THROWS_WITH(cuda::multi_tensor_kernels.unscale_and_check_(ints, inv_scale, found_inf),
                    Contains("floating"));
  const std::vector<Tensor> good = {zeros({3}).to(kGpu)};
  CHECK_THROWS_WITH(cuda::multi_tensor_kernels.unscale_and_check_(
                        good, full({1}, 1.0, {.dtype = kFloat64, .device = kGpu}), found_inf),
                    Contains("inv_scale") && Contains("float32"));
  CHECK_THROWS_WITH(
      cuda::multi_tensor_kernels.unscale_and_check_(good, inv_scale, zeros({2}).to(kGpu)),
      Contains("found_inf"));
  CHECK_THROWS_WITH(cuda::multi_tensor_kernels.sum_flags({}), Contains("at least one flag"));
}

TEST_CASE("sum_flags adds flags in order across several launches", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  std::vector<Tensor> flags;
  for (int i = 0; i < 70; ++i) {
    flags.push_back(full({1}, i % 9 == 0 ? 1.0 : 0.0, {.dtype = kFloat32, .device = kGpu}));
  }
  CHECK(cuda::multi_tensor_kernels.sum_flags(flags).item<float>() == 8.0f);
}

// ---- fused optimizers ------------------------------------------------------------------------

namespace {

struct AdamConfig {
  bool decoupled = false;
  double lr = 1e-2, weight_decay = 0;
  bool amsgrad = false, maximize = false, float32_state = false;
};

// Adam (c.decoupled: AdamW) with c's settings.
template <class Optimizer, class Options>
std::unique_ptr<optim::Optimizer> make_optimizer(std::vector<Tensor> params, const AdamConfig& c) {
  return std::make_unique<Optimizer>(std::move(params), Options{.lr = c.lr,
                                                                .weight_decay = c.weight_decay,
                                                                .amsgrad = c.amsgrad,
                                                                .maximize = c.maximize,
                                                                .float32_state = c.float32_state});
}
std::unique_ptr<optim::Optimizer> make_adam(std::vector<Tensor> params, const AdamConfig& c) {
  if (c.decoupled) return make_optimizer<optim::AdamW, optim::AdamWOptions>(std::move(params), c);
  return make_optimizer<optim::Adam, optim::AdamOptions>(std::move(params), c);
}

}  // namespace

TEST_CASE("fused Adam and AdamW on CUDA match the CPU optimizers over several steps", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(80);  // more than one table for 4 and 5 lists
  const AdamConfig configs[] = {
      {.decoupled = false},
      {.decoupled = false, .weight_decay = 0.1, .amsgrad = true, .maximize = true},
      {.decoupled = true, .weight_decay = 0.01},
      {.decoupled = true, .weight_decay = 0.05, .amsgrad = true},
  };
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (bool float32_state : {false, true}) {
      if (float32_state && dtype == kFloat32) continue;
      for (AdamConfig config : configs) {
        config.float32_state = float32_state;
        INFO(dtype_name(dtype) << (config.decoupled ? " AdamW" : " Adam") << " weight_decay "
                               << config.weight_decay << " amsgrad " << config.amsgrad
                               << " maximize " << config.maximize << " float32_state "
                               << float32_state);
        Twins twins = make_twins(sizes, dtype, 10);
        auto cpu = make_adam(twins.cpu, config);
        auto gpu = make_adam(twins.gpu, config);
        for (int step = 0; step < 4; ++step) {
          set_grads(twins, 100 + uint64_t(step), 1.0 + step, /*without=*/5);
          cpu->step();
          gpu->step();
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
          INFO("parameter " << i);
          CHECK(mismatch(twins.gpu[i], twins.cpu[i].to(kFloat64), optimizer_tolerance(dtype))
                    .empty());
        }
        check_same_state(*cpu, *gpu, sizes.size(), dtype);
        CHECK(gpu->state(0, 5).empty());  // never had a gradient
      }
    }
  }
}

TEST_CASE("fused SGD on CUDA matches the CPU optimizer over several steps", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(80);
  const optim::SGDOptions configs[] = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01},
      {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true, .maximize = true},
  };
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (const optim::SGDOptions& config : configs) {
      INFO(dtype_name(dtype) << " momentum " << config.momentum << " dampening " << config.dampening
                             << " nesterov " << config.nesterov);
      Twins twins = make_twins(sizes, dtype, 20);
      optim::SGD cpu(twins.cpu, config);
      optim::SGD gpu(twins.gpu, config);
      for (int step = 0; step < 4; ++step) {
        set_grads(twins, 200 + uint64_t(step), 1.0, /*without=*/7);
        cpu.step();
        gpu.step();
      }
      for (size_t i = 0; i < sizes.size(); ++i) {
        INFO("parameter " << i);
        CHECK(
            mismatch(twins.gpu[i], twins.cpu[i].to(kFloat64), optimizer_tolerance(dtype)).empty());
      }
      for (size_t i = 0; i < sizes.size(); ++i) {
        const optim::ParamState& want = cpu.state(0, i);
        const optim::ParamState& got = gpu.state(0, i);
        REQUIRE(got.buffers.size() == want.buffers.size());
        if (want.buffers.count("momentum_buffer") == 1) {
          CHECK(mismatch(got.buffers.at("momentum_buffer"),
                         want.buffers.at("momentum_buffer").to(kFloat64),
                         optimizer_tolerance(dtype))
                    .empty());
        }
      }
    }
  }
}

TEST_CASE("a step skipped on the device leaves params and state and step counts bit-identical",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(60);
  Twins twins = make_twins(sizes, kFloat32, 30);
  auto cpu = make_adam(twins.cpu, {.decoupled = true, .weight_decay = 0.01, .amsgrad = true});
  auto gpu = make_adam(twins.gpu, {.decoupled = true, .weight_decay = 0.01, .amsgrad = true});
  const Tensor clean = cuda::multi_tensor_kernels.new_flag(kGpu);
  const Tensor skip = full({1}, 1.0, {.dtype = kFloat32, .device = kGpu});
  for (int step = 0; step < 5; ++step) {
    INFO("step " << step);
    set_grads(twins, 300 + uint64_t(step), 1.0, /*without=*/sizes.size());
    if (step == 2) {
      std::vector<std::vector<unsigned char>> before;
      for (const Tensor& p : twins.gpu) before.push_back(bytes_of(p));
      std::vector<std::vector<unsigned char>> state_before;
      for (size_t i = 0; i < sizes.size(); ++i) {
        for (const auto& [name, buffer] : gpu->state(0, i).buffers) {
          state_before.push_back(bytes_of(buffer));
        }
      }
      gpu->step_scaled(Tensor(), skip);  // the CPU skips this step too
      for (size_t i = 0; i < sizes.size(); ++i) CHECK(bytes_of(twins.gpu[i]) == before[i]);
      size_t k = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        for (const auto& [name, buffer] : gpu->state(0, i).buffers) {
          CHECK(bytes_of(buffer) == state_before[k++]);
        }
      }
      CHECK(gpu->state(0, 0).step_count() == 2);
      continue;
    }
    cpu->step();
    gpu->step_scaled(Tensor(), clean);
  }
  // The bias corrections used the device's step counts: the runs agree.
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK(mismatch(twins.gpu[i], twins.cpu[i].to(kFloat64), optimizer_tolerance(kFloat32)).empty());
  }
  check_same_state(*cpu, *gpu, sizes.size(), kFloat32);
  // state_dict reads the device's counts.
  const optim::OptimizerStateDict state = gpu->state_dict();
  CHECK(state.state.at(0).at("step").item<double>() == 4.0);
}

TEST_CASE("SGD whose first step is skipped on the device starts its momentum on the next",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = {5, 70000};
  Twins twins = make_twins(sizes, kFloat32, 40);
  const optim::SGDOptions options{.lr = 0.1, .momentum = 0.9, .dampening = 0.5};
  optim::SGD cpu(twins.cpu, options);
  optim::SGD gpu(twins.gpu, options);
  set_grads(twins, 400, 1.0, /*without=*/2);
  gpu.step_scaled(Tensor(), full({1}, 1.0, {.dtype = kFloat32, .device = kGpu}));
  // An empty state dict entry: no step was taken (as on the CPU, where the skip made none).
  CHECK(gpu.state_dict().state.empty());
  for (int step = 0; step < 3; ++step) {
    set_grads(twins, 401 + uint64_t(step), 1.0, /*without=*/2);
    cpu.step();
    gpu.step();
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK(mismatch(twins.gpu[i], twins.cpu[i].to(kFloat64), optimizer_tolerance(kFloat32)).empty());
  }
}

TEST_CASE("fused steps divide by a grad_scale read on the device", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(20);
  for (bool adam : {true, false}) {
    INFO((adam ? "AdamW" : "SGD"));
    Twins twins = make_twins(sizes, kFloat32, 50);
    std::unique_ptr<optim::Optimizer> cpu, gpu;
    if (adam) {
      cpu = make_adam(twins.cpu, {.decoupled = true});
      gpu = make_adam(twins.gpu, {.decoupled = true});
    } else {
      cpu = std::make_unique<optim::SGD>(twins.cpu, optim::SGDOptions{.lr = 0.1, .momentum = 0.5});
      gpu = std::make_unique<optim::SGD>(twins.gpu, optim::SGDOptions{.lr = 0.1, .momentum = 0.5});
    }
    for (int step = 0; step < 3; ++step) {
      set_grads(twins, 500 + uint64_t(step), 1024.0, /*without=*/sizes.size());
      cpu->step_scaled(scalar_tensor(1024.0), Tensor());
      gpu->step_scaled(full({1}, 1024.0, {.dtype = kFloat32, .device = kGpu}), Tensor());
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      CHECK(
          mismatch(twins.gpu[i], twins.cpu[i].to(kFloat64), optimizer_tolerance(kFloat32)).empty());
    }
  }
}

TEST_CASE("fused steps reject what the CPU optimizers reject", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  Tensor a = zeros({3}).to(kGpu).requires_grad_();
  Tensor b = zeros({3}).requires_grad_();
  a.mutable_grad() = ones({3}).to(kGpu);
  b.mutable_grad() = ones({3});
  optim::AdamW mixed({a, b});
  CHECK_THROWS_WITH(mixed.step(), Contains("on a CUDA device") && Contains("cpu"));
  Tensor c = zeros({3}).to(kGpu).requires_grad_();
  c.mutable_grad() = ones({3}, kFloat16).to(kGpu);
  optim::SGD sgd({c}, {.lr = 0.1});
  CHECK_THROWS_WITH(sgd.step(), Contains("expected a gradient of the parameter's dtype"));
  optim::AdamW adam({a});
  CHECK_THROWS_WITH(adam.step_scaled(Tensor(), zeros({2}).to(kGpu)),
                    Contains("found_inf to be a one-element floating tensor"));
}

// ---- clipping --------------------------------------------------------------------------------

TEST_CASE("clip_grad_norm_ on CUDA matches the CPU for each norm type and dtype", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(110);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (double norm_type : {1.0, 2.0, 3.0, kInf}) {
      for (double max_norm : {0.5, 1e12}) {
        INFO(dtype_name(dtype) << " norm_type " << norm_type << " max_norm " << max_norm);
        Twins twins = make_twins(sizes, dtype, 60);
        set_grads(twins, 600, 1.0, /*without=*/3);
        std::vector<std::vector<unsigned char>> before;
        for (const Tensor& p : twins.gpu) {
          if (p.grad().defined()) before.push_back(bytes_of(p.grad()));
        }
        const Tensor want = nn::utils::clip_grad_norm_(twins.cpu, max_norm, norm_type);
        const Tensor got = nn::utils::clip_grad_norm_(twins.gpu, max_norm, norm_type);
        CHECK(got.is_cuda());
        CHECK(got.dim() == 0);
        CHECK(got.dtype() == kFloat32);
        CHECK(mismatch(got, want.to(kFloat64), {1e-5, 1e-6}).empty());
        size_t k = 0;
        for (size_t i = 0; i < sizes.size(); ++i) {
          if (!twins.gpu[i].grad().defined()) continue;
          INFO("gradient " << i);
          CHECK(
              mismatch(twins.gpu[i].grad(), twins.cpu[i].grad().to(kFloat64), tolerance_for(dtype))
                  .empty());
          // Below max_norm nothing is written: the gradients keep their bits.
          if (max_norm > 1) CHECK(bytes_of(twins.gpu[i].grad()) == before[k]);
          ++k;
        }
      }
    }
  }
}

TEST_CASE("the total norm on CUDA is deterministic and matches a float64 reference", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<Tensor> cpu = random_tensors(odd_sizes(140), kFloat32, 70);
  const std::vector<Tensor> gpu = to_gpu(cpu);
  double sum_of_squares = 0;
  for (const Tensor& t : cpu) {
    for (double v : t.to_vector<double>()) sum_of_squares += v * v;
  }
  const Tensor first = cuda::multi_tensor_kernels.total_norm(gpu, 2.0);
  const Tensor second = cuda::multi_tensor_kernels.total_norm(gpu, 2.0);
  CHECK(bytes_of(first) == bytes_of(second));
  CHECK(mismatch(first.reshape({1}), tensor({std::sqrt(sum_of_squares)}, kFloat64),
                 tolerance_for(kFloat32))
            .empty());
}

TEST_CASE("clip_grad_norm_ on CUDA with a NaN gradient poisons or errors as on the CPU", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  Tensor a = zeros({2}).to(kGpu).requires_grad_();
  Tensor b = zeros({1}).to(kGpu).requires_grad_();
  a.mutable_grad() = tensor({std::nan(""), 1.0}).to(kGpu);
  b.mutable_grad() = tensor({12.0}).to(kGpu);
  CHECK_THROWS_WITH(nn::utils::clip_grad_norm_({a, b}, 1.0, 2.0, true),
                    Contains("finite total norm"));
  CHECK(b.grad().to_vector<double>() == std::vector<double>{12});  // untouched
  const Tensor total = nn::utils::clip_grad_norm_({a, b}, 1.0);
  CHECK(std::isnan(total.item<double>()));
  CHECK(std::isnan(b.grad().to_vector<double>()[0]));
}

TEST_CASE("clip_grad_value_ on CUDA clamps as the CPU does", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<int64_t> sizes = odd_sizes(100);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    INFO(dtype_name(dtype));
    Twins twins = make_twins(sizes, dtype, 80);
    set_grads(twins, 800, 2.0, /*without=*/1);
    nn::utils::clip_grad_value_(twins.cpu, 0.7);
    nn::utils::clip_grad_value_(twins.gpu, 0.7);
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (!twins.cpu[i].grad().defined()) continue;
      CHECK(bytes_of(twins.gpu[i].grad()) == bytes_of(twins.cpu[i].grad()));
    }
  }
}

// ---- checks ----------------------------------------------------------------------------------

TEST_CASE("non_finite_flag and value_range look at a tensor on the device", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  Tensor t = randn({3 * cuda::detail::kChunkSize + 3});
  t.narrow(0, 10, 1).fill_(-12345.0);
  const Tensor finite = t.to(kGpu);
  CHECK(cuda::multi_tensor_kernels.non_finite_flag(std::vector<Tensor>{finite}).item<float>() ==
        0.0f);
  std::vector<int64_t> range = cuda::multi_tensor_kernels.value_range(finite).to_vector<int64_t>();
  CHECK(std::bit_cast<double>(range[0]) == 12345.0);
  CHECK(range[1] == 0);
  Tensor bad = with_value(with_value(t, 7, kInf), 2 * cuda::detail::kChunkSize, std::nan(""));
  const Tensor bad_gpu = bad.to(kFloat16).to(kGpu);
  CHECK(cuda::multi_tensor_kernels.non_finite_flag(std::vector<Tensor>{bad_gpu}).item<float>() ==
        1.0f);
  range = cuda::multi_tensor_kernels.value_range(bad_gpu).to_vector<int64_t>();
  CHECK(std::bit_cast<double>(range[0]) == 12344.0);  // -12345 rounded to float16
  CHECK(range[1] == 2);
  // What anomaly mode and the overflow watch use.
  CHECK(autograd::all_finite(finite));
  CHECK_FALSE(autograd::all_finite(bad_gpu));
}
