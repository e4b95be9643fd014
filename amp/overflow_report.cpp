// amp::overflow_report (overflow_report.h): which parameters' gradients held an inf or a NaN
// after a skipped step, by name, as a table.
#include "halfgrad/amp/overflow_report.h"

#include <algorithm>
#include <cmath>

#include "halfgrad/core/format.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/optim/optimizer.h"

namespace hg::amp {

OverflowReport overflow_report(const optim::Optimizer& optimizer, const nn::Module* model) {
  std::vector<std::pair<std::string, Tensor>> named;
  if (model) named = model->named_parameters();
  auto name_of = [&](const Tensor& param, size_t group, size_t index) {
    for (const auto& [name, candidate] : named) {
      if (candidate.is_same(param)) return name;
    }
    return fmt::format("group {} param {}", group, index);
  };

  OverflowReport report;
  const std::vector<optim::ParamGroup>& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& param = groups[g].params[i];
      const Tensor& grad = param.grad();
      if (!grad.defined()) continue;
      ++report.params_checked;
      NonFiniteGrad entry{.name = {}, .shape = grad.sizes()};
      for (double value : grad.to(kCPU).to_vector<double>()) {
        if (std::isnan(value)) {
          ++entry.nan;
        } else if (std::isinf(value)) {
          ++(value > 0 ? entry.positive_inf : entry.negative_inf);
        }
      }
      if (entry.nan + entry.positive_inf + entry.negative_inf == 0) continue;
      entry.name = name_of(param, g, i);
      report.params.push_back(std::move(entry));
    }
  }
  return report;
}

std::string OverflowReport::table() const {
  std::string out =
      fmt::format("{} of {} parameters have non-finite gradients\n", params.size(), params_checked);
  if (params.empty()) return out;
  size_t name_width = std::string_view("parameter").size();
  size_t shape_width = std::string_view("shape").size();
  for (const NonFiniteGrad& p : params) {
    name_width = std::max(name_width, p.name.size());
    shape_width = std::max(shape_width, fmt::format("{}", p.shape).size());
  }
  out += fmt::format("{:<{}}  {:<{}}  {:>8}  {:>8}  {:>8}\n", "parameter", name_width, "shape",
                     shape_width, "nan", "+inf", "-inf");
  for (const NonFiniteGrad& p : params) {
    out +=
        fmt::format("{:<{}}  {:<{}}  {:>8}  {:>8}  {:>8}\n", p.name, name_width,
                    fmt::format("{}", p.shape), shape_width, p.nan, p.positive_inf, p.negative_inf);
  }
  return out;
}

}  // namespace hg::amp
