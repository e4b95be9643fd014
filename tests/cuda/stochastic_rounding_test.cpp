// Stochastic rounding on CUDA: the cast gives the CPU's bits for every (source, destination)
// pair and overflow mode from the same generator state, and advances the generator as the CPU
// does; the bf16_params steps of SGD, Adam, AdamW, RMSprop and Adagrad give the CPU's parameters
// (the CPU's are
// checked against the definitions in tests/core/stochastic_rounding_test.cpp and
// tests/optim/bf16_params_test.cpp).
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;

namespace {

constexpr DType kTargets[] = {kFloat16, kBFloat16, kFloat8_e4m3fn, kFloat8_e5m2};
constexpr DType kSources[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

// Seeded normals over several scales (subnormals, the float8 overflow region), with specials.
Tensor inputs() {
  manual_seed(12);
  const Tensor scales = tensor({1e-6, 1e-3, 1.0, 300.0, 6e4, 1e6});
  const Tensor values = mul(randn({6, 5000}), scales.reshape({6, 1})).reshape({-1});
  const double inf = std::numeric_limits<double>::infinity();
  return cat({values, tensor({std::nan(""), inf, -inf, 0.0, -0.0}, kFloat32)});
}

}  // namespace

TEST_CASE("cuda stochastic rounding gives the CPU's bits", "[cuda][stochastic_rounding]") {
  HG_REQUIRE_CUDA();
  const Tensor base = inputs();
  for (const DType from : kSources) {
    const Tensor x = base.to(from);
    for (const DType to : kTargets) {
      if (from == to) continue;
      for (const bool saturate : {false, true}) {
        if (saturate && !is_float8(to)) continue;
        INFO(dtype_name(from) << " -> " << dtype_name(to) << (saturate ? " saturating" : ""));
        Generator cpu_gen(40), gpu_gen(40);
        const CastOptions cpu{.saturate = saturate,
                              .rounding = Rounding::Stochastic,
                              .generator = &cpu_gen};
        const CastOptions gpu{.saturate = saturate,
                              .rounding = Rounding::Stochastic,
                              .generator = &gpu_gen};
        CHECK(bit_identical(host(to_cuda(x).to(to, gpu)), x.to(to, cpu)));
        CHECK(gpu_gen.offset() == cpu_gen.offset());
        // A strided source: row-major order, as on the CPU.
        const Tensor columns = x.slice(0, 0, 3000).reshape({60, 50}).t();
        CHECK(bit_identical(host(to_cuda(columns).to(to, gpu)), columns.to(to, cpu)));
      }
    }
  }
}

TEST_CASE("cuda bf16_params steps give the CPU's parameters", "[cuda][stochastic_rounding]") {
  HG_REQUIRE_CUDA();
  manual_seed(13);
  const Tensor initial = mul(randn({3, 70000}), 0.5).to(kBFloat16);
  const Tensor grad = randn({3, 70000}).to(kBFloat16);
  const Tensor small = randn({77}).to(kBFloat16);
  const Tensor small_grad = randn({77}).to(kBFloat16);
  // which: 0 SGD with momentum, 1 plain SGD, 2 Adam, 3 AdamW with amsgrad, 4 RMSprop centered
  // with momentum, 5 plain RMSprop, 6 Adagrad.
  auto run = [&](int which, bool on_gpu) {
    Tensor p = (on_gpu ? to_cuda(initial) : initial.clone()).requires_grad_();
    Tensor q = (on_gpu ? to_cuda(small) : small.clone()).requires_grad_();
    Generator gen(50);
    std::unique_ptr<optim::Optimizer> opt;
    if (which == 0) {
      opt = std::make_unique<optim::SGD>(
          std::vector<Tensor>{p, q},
          optim::SGDOptions{.lr = 1e-3, .momentum = 0.9, .bf16_params = true, .generator = &gen});
    } else if (which == 1) {
      opt = std::make_unique<optim::SGD>(
          std::vector<Tensor>{p, q},
          optim::SGDOptions{.lr = 1e-3, .bf16_params = true, .generator = &gen});
    } else if (which == 2) {
      opt = std::make_unique<optim::Adam>(
          std::vector<Tensor>{p, q},
          optim::AdamOptions{.lr = 1e-3, .bf16_params = true, .generator = &gen});
    } else if (which == 3) {
      opt = std::make_unique<optim::AdamW>(
          std::vector<Tensor>{p, q},
          optim::AdamWOptions{.lr = 1e-3, .amsgrad = true, .bf16_params = true, .generator = &gen});
    } else if (which == 4) {
      opt = std::make_unique<optim::RMSprop>(std::vector<Tensor>{p, q},
                                             optim::RMSpropOptions{.lr = 1e-4,
                                                                   .momentum = 0.9,
                                                                   .centered = true,
                                                                   .bf16_params = true,
                                                                   .generator = &gen});
    } else if (which == 5) {
      opt = std::make_unique<optim::RMSprop>(
          std::vector<Tensor>{p, q},
          optim::RMSpropOptions{.lr = 1e-4, .bf16_params = true, .generator = &gen});
    } else {
      opt = std::make_unique<optim::Adagrad>(
          std::vector<Tensor>{p, q},
          optim::AdagradOptions{
              .lr = 1e-3, .lr_decay = 0.1, .bf16_params = true, .generator = &gen});
    }
    for (int s = 0; s < 3; ++s) {
      p.mutable_grad() = on_gpu ? to_cuda(grad) : grad.clone();
      q.mutable_grad() = on_gpu ? to_cuda(small_grad) : small_grad.clone();
      opt->step();
    }
    CHECK(gen.offset() == 3 * ((210000 + 3) / 4 + (77 + 3) / 4));
    return std::vector<Tensor>{host(p), host(q)};
  };
  for (int which = 0; which < 7; ++which) {
    INFO("optimizer " << which);
    const std::vector<Tensor> cpu = run(which, false), gpu = run(which, true);
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (which < 2) {
        // SGD's kernel rounds each product as the CPU pass does: the same floats, the same bits.
        CHECK(bit_identical(gpu[i], cpu[i]));
      } else {
        // Adam's kernel may fuse a multiply-add, and RMSprop's and Adagrad's are not held to the
        // CPU's bits either (tests/cuda/optim_rmsprop_adagrad_test.cpp allows a tolerance), so
        // a float can differ in the last bit and, rarely, the same word then rounds it to the
        // other neighbour: at most one bfloat16 spacing apart, and almost everywhere equal.
        const std::vector<double> a = values_of(gpu[i]), b = values_of(cpu[i]);
        int64_t different = 0;
        for (size_t j = 0; j < a.size(); ++j) {
          CHECK(std::abs(a[j] - b[j]) <= std::ldexp(std::abs(b[j]), -7) + 1e-30);
          different += a[j] != b[j] ? 1 : 0;
        }
        CHECK(different <= int64_t(a.size()) / 1000 + 1);
      }
    }
  }
}
