#include "halfgrad/optim/optimizer.h"

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/format.h"

namespace hg::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::map<std::string, double> defaults)
    : defaults_(std::move(defaults)) {
  for (ParamGroup& group : groups) add_param_group(std::move(group));
}

void Optimizer::add_param_group(ParamGroup group) {
  for (const auto& [name, value] : group.options) {
    HG_CHECK(defaults_.count(name) == 1, "optimizer: unknown option \"{}\" in a param group",
             name);
  }
  for (const auto& [name, value] : defaults_) group.options.emplace(name, value);
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    HG_CHECK(p.defined() && p.is_leaf() && p.is_floating_point(),
             "optimizer: parameter {} of a group must be a floating leaf tensor", i);
  }
  groups_.push_back(std::move(group));
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_) {
    for (Tensor& p : group.params) {
      Tensor& grad = p.mutable_grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        grad = Tensor();
      } else {
        grad.zero_();
      }
    }
  }
}

}  // namespace hg::optim
