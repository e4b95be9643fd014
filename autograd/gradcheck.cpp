// gradcheck (gradcheck.h): the float64 central-difference Jacobian against autograd's, element
// by element.
#include "halfgrad/autograd/gradcheck.h"

#include <cmath>

#include "halfgrad/autograd/engine.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"

namespace hg::autograd {

namespace {

// fn's output as float64 values. Grad mode stays on: fn may itself differentiate (a
// gradient of a gradient is checked that way).
std::vector<double> evaluate(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                             const std::vector<Tensor>& inputs) {
  return fn(inputs).to_vector<double>();
}

}  // namespace

bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
               const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    HG_CHECK(inputs[i].dtype() == kFloat64,
             "gradcheck: input {} must be float64 to check by finite differences, got {}", i,
             inputs[i].dtype());
    checked.push_back(i);
  }
  HG_CHECK(!checked.empty(), "gradcheck: no input requires grad, so there is nothing to check");

  const Tensor output = fn(inputs);
  HG_CHECK(output.is_floating_point(), "gradcheck: the function returned a {} tensor",
           output.dtype());
  const int64_t n_out = output.numel();

  // Analytic Jacobian, one row (output element) at a time: the gradient of output[j].
  std::vector<std::vector<std::vector<double>>> analytic(checked.size());
  for (int64_t j = 0; j < n_out; ++j) {
    Tensor one_hot = zeros({n_out}, output.options());
    one_hot.narrow(0, j, 1).fill_(1);
    std::vector<Tensor> targets;
    for (size_t i : checked) targets.push_back(inputs[i]);
    const std::vector<Tensor> grads = grad({output}, targets, {one_hot.reshape(output.sizes())},
                                           /*retain_graph=*/true, false, /*allow_unused=*/true);
    for (size_t k = 0; k < checked.size(); ++k) {
      analytic[k].push_back(grads[k].defined()
                                ? grads[k].to_vector<double>()
                                : std::vector<double>(inputs[checked[k]].numel(), 0.0));
    }
  }

  // Numeric Jacobian, one column (input element) at a time, by central differences.
  for (size_t k = 0; k < checked.size(); ++k) {
    const Tensor& input = inputs[checked[k]];
    HG_CHECK(input.is_contiguous(), "gradcheck: input {} must be contiguous", checked[k]);
    double* data = input.data_ptr<double>();
    for (int64_t e = 0; e < input.numel(); ++e) {
      const double original = data[e];
      data[e] = original + options.eps;
      const std::vector<double> plus = evaluate(fn, inputs);
      data[e] = original - options.eps;
      const std::vector<double> minus = evaluate(fn, inputs);
      data[e] = original;
      for (int64_t j = 0; j < n_out; ++j) {
        const double numeric = (plus[j] - minus[j]) / (2 * options.eps);
        const double computed = analytic[k][j][e];
        HG_CHECK(std::abs(computed - numeric) <= options.atol + options.rtol * std::abs(numeric) &&
                     std::isfinite(computed) == std::isfinite(numeric),
                 "gradcheck: d output[{}] / d input {}[{}]: autograd gives {:.10g}, finite "
                 "differences give {:.10g}",
                 j, checked[k], e, computed, numeric);
      }
    }
  }
  return true;
}

}  // namespace hg::autograd
