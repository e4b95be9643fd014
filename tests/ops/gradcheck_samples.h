// Gradcheck samples: for each differentiable op, a function of float64 inputs that uses it.
// The sweep (gradcheck_sweep_test.cpp) runs every registered sample and fails for any
// differentiable op in the registry that has none. Each op family registers its samples from
// its own file in gradcheck_samples/.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "halfgrad/autograd/gradcheck.h"
#include "halfgrad/halfgrad.h"

namespace hg::testing {

using Inputs = std::vector<Tensor>;

struct Sample {
  std::function<Tensor(const Inputs&)> fn;
  std::function<Inputs()> inputs;  // float64, requires grad where the gradient is checked
  autograd::GradcheckOptions options{};
};

// The samples registered so far, by op.
std::map<OpId, Sample>& gradcheck_samples();

// Registers samples at static initialisation:
//   static const bool registered = register_samples([](auto& s) { s[OpId::add] = ...; });
bool register_samples(const std::function<void(std::map<OpId, Sample>&)>& add);

// Where, and in which floating dtype, samples make the constant tensors their functions use
// (indices, masks, weights): the CPU and float64 for gradcheck; the CUDA sweep
// (tests/cuda/op_sweep_test.cpp) moves them with the inputs.
struct SamplePlacement {
  Device device = kCPU;
  DType dtype = kFloat64;
};
SamplePlacement& sample_placement();
// A sample's constant, placed there (a floating constant also takes the placement's dtype).
Tensor placed(const Tensor& constant);

// Seeded float64 inputs that require grad, uniform in [low, high).
Tensor input(const Shape& sizes, double low = -2.0, double high = 2.0);
// Kept away from 0 (for division, log, reciprocal ...).
Tensor positive(const Shape& sizes);
// The domains of op_list.def's HG_UNARY_OP lines: input(), positive(), and (-0.9, 0.9).
inline Tensor Real(const Shape& sizes) { return input(sizes); }
inline Tensor Positive(const Shape& sizes) { return positive(sizes); }
inline Tensor Unit(const Shape& sizes) { return input(sizes, -0.9, 0.9); }
// Samples of one or two inputs.
Sample one(std::function<Tensor(const Tensor&)> f, std::function<Tensor()> make);
Sample two(std::function<Tensor(const Tensor&, const Tensor&)> f, std::function<Inputs()> make);

}  // namespace hg::testing
