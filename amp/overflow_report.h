// Which parameters overflowed: after GradScaler skipped a step, the gradients that held an
// inf or a NaN, by name, with counts.
//
//   if (!scaler.step(opt)) fmt::print("{}", scaler.overflow_report(opt, model.get()).table());
//   // 2 of 6 parameters have non-finite gradients
//   // parameter   shape     nan  +inf  -inf
//   // 3.weight    [10, 64]    0    12     0
//   // 3.bias      [10]        0     1     0
//
// The report reads every gradient once more (a host copy each), so it is computed only when
// asked; the normal step stays one fused unscale + inf-check pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "halfgrad/core/shape.h"

namespace hg::nn {
class Module;
}
namespace hg::optim {
class Optimizer;
}

namespace hg::amp {

struct NonFiniteGrad {
  std::string name;  // the model's dotted name, or "group G param I" without a model
  Shape shape;
  int64_t nan = 0;
  int64_t positive_inf = 0;
  int64_t negative_inf = 0;
};

struct OverflowReport {
  int64_t params_checked = 0;         // parameters with a gradient
  std::vector<NonFiniteGrad> params;  // those whose gradient holds an inf or a NaN
  bool found_inf() const { return !params.empty(); }
  std::string table() const;
};

// The optimizer's parameters whose gradients are not all finite, in param-group order. With a
// model, each is named by model.named_parameters(); a parameter the model does not hold keeps
// the "group G param I" name.
OverflowReport overflow_report(const optim::Optimizer& optimizer,
                               const nn::Module* model = nullptr);

}  // namespace hg::amp
