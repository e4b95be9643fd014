// The AVX-512 passes of NOTE [Vectorized optimizer passes] (cpu/multi_tensor_avx512.cpp) for
// RMSprop, Adagrad, Adamax, Adadelta, RAdam and NAdam: float32 parameters stepped with the AVX-512
// passes and with the scalar loops end with the same bits in the parameters and every state buffer
// (a NaN matching any NaN: see the NOTE), for every option that changes the rule's arithmetic, odd
// sizes (a masked tail, blocks split over the threads), a scaled step, and gradients with an
// infinity and a NaN (Adamax's NaN-propagating max, the absolute value of -0). Adam and SGD are
// checked in their own tests. Where the CPU has no AVX-512 both runs take the scalar loops and the
// test checks only that they agree.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "halfgrad/cpu/multi_tensor.h"
#include "reference.h"

using namespace hg;
using namespace optim_test;

namespace {

// The same bits, or NaN in both (the sign and payload of a NaN are not specified).
bool same_bits_or_both_nan(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (std::bit_cast<uint32_t>(x[i]) != std::bit_cast<uint32_t>(y[i])) return false;
  }
  return true;
}

using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

template <class Opt, class Options>
Make maker(Options options) {
  return [options](std::vector<Tensor> params) {
    return std::make_unique<Opt>(std::move(params), options);
  };
}

const std::vector<std::pair<std::string, Make>>& optimizers() {
  static const std::vector<std::pair<std::string, Make>> all = {
      {"RMSprop", maker<optim::RMSprop>(optim::RMSpropOptions{.lr = 0.01})},
      {"RMSprop centered momentum", maker<optim::RMSprop>(optim::RMSpropOptions{.lr = 0.01,
                                                                                .alpha = 0.9,
                                                                                .eps = 1e-3,
                                                                                .weight_decay = 0.1,
                                                                                .momentum = 0.5,
                                                                                .centered = true,
                                                                                .maximize = true})},
      {"Adagrad", maker<optim::Adagrad>(optim::AdagradOptions{.lr = 0.1})},
      {"Adagrad every option",
       maker<optim::Adagrad>(optim::AdagradOptions{.lr = 0.1,
                                                   .lr_decay = 0.05,
                                                   .weight_decay = 0.1,
                                                   .initial_accumulator_value = 0.5,
                                                   .eps = 1e-3,
                                                   .maximize = true})},
      {"Adamax", maker<optim::Adamax>(optim::AdamaxOptions{.lr = 0.02})},
      {"Adamax every option", maker<optim::Adamax>(optim::AdamaxOptions{.lr = 0.02,
                                                                        .beta1 = 0.8,
                                                                        .beta2 = 0.99,
                                                                        .eps = 1e-3,
                                                                        .weight_decay = 0.1,
                                                                        .maximize = true})},
      {"Adadelta", maker<optim::Adadelta>(optim::AdadeltaOptions{})},
      {"Adadelta every option",
       maker<optim::Adadelta>(optim::AdadeltaOptions{
           .lr = 0.5, .rho = 0.7, .eps = 1e-3, .weight_decay = 0.1, .maximize = true})},
      // beta2 0.9: the rectification is off for the first steps and on from the fifth.
      {"RAdam", maker<optim::RAdam>(optim::RAdamOptions{.lr = 0.02, .beta2 = 0.9})},
      {"RAdam weight decay",
       maker<optim::RAdam>(optim::RAdamOptions{.lr = 0.02, .beta2 = 0.9, .weight_decay = 0.1})},
      {"NAdam", maker<optim::NAdam>(optim::NAdamOptions{.lr = 0.02})},
      {"NAdam every option",
       maker<optim::NAdam>(optim::NAdamOptions{.lr = 0.02,
                                               .beta1 = 0.8,
                                               .beta2 = 0.99,
                                               .eps = 1e-3,
                                               .weight_decay = 0.1,
                                               .momentum_decay = 0.05,
                                               .maximize = true})},
      {"NAdam decoupled", maker<optim::NAdam>(optim::NAdamOptions{
                              .lr = 0.02, .weight_decay = 0.1, .decoupled_weight_decay = true})},
  };
  return all;
}

}  // namespace

TEST_CASE("AVX-512 passes of the other rules give the scalar loops' bits") {
  for (int64_t n : {int64_t(5), int64_t(16 * 9 + 7), int64_t(40000 + 3)}) {
    for (const auto& [name, make] : optimizers()) {
      INFO(name << " n " << n);
      const Values initial = random_values(11, n, kFloat32);
      std::vector<std::vector<Tensor>> runs;  // [vector pass][tensor]
      for (bool vector_pass : {true, false}) {
        const bool previous = cpu::detail::set_vector_passes(vector_pass);
        Tensor p = make_param(initial, kFloat32);
        auto opt = make({p});
        for (uint32_t s = 0; s < 7; ++s) {
          Values grad = random_values(500 + s, n, kFloat32, -10.0 * (s + 1), 10.0 * (s + 1));
          grad[0] = -0.0;  // the absolute value of -0 (Adamax)
          if (s == 5 && n > 2) {
            grad[1] = std::numeric_limits<double>::infinity();
            grad[2] = std::nan("");
          }
          set_grad(p, grad);
          if (s == 2) {
            opt->step_scaled(scalar_tensor(4.0, kFloat32), scalar_tensor(0.0, kFloat32));
          } else {
            opt->step();
          }
        }
        cpu::detail::set_vector_passes(previous);
        std::vector<Tensor> tensors{p.detach()};
        for (const auto& [key, buffer] : opt->state(0, 0).buffers) tensors.push_back(buffer);
        runs.push_back(tensors);
      }
      REQUIRE(runs[0].size() == runs[1].size());
      for (size_t i = 0; i < runs[0].size(); ++i) {
        INFO("tensor " << i << " (0: the parameter, then the state buffers by name)");
        CHECK(same_bits_or_both_nan(runs[0][i], runs[1][i]));
      }
    }
  }
}
