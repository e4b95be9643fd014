// gradcheck: compares the gradients autograd computes with central finite differences, in
// float64, over the whole Jacobian (every output element against every input element).
//
//   auto f = [](const std::vector<Tensor>& in) { return mul(in[0], sin(in[1])); };
//   autograd::gradcheck(f, {randn({3}, kFloat64).requires_grad_(), ...});  // throws on mismatch
#pragma once

#include <functional>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::autograd {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
};

// fn maps the inputs to one tensor. Inputs that require grad are checked; they must be
// float64 (finite differences in lower precision are meaningless). Returns true, or throws
// hg::Error naming the input, the element and both values at the first mismatch.
bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
               const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace hg::autograd
