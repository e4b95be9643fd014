// Optimizer: the base of SGD, Adam, AdamW (PyTorch's torch.optim.Optimizer).
//
//   optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
//   opt.zero_grad();  loss.backward();  opt.step();
//
// Parameters live in param groups, each with its own options (lr, weight_decay, ...), as in
// PyTorch. GradScaler (amp/) reaches every parameter's gradient through param_groups().
#pragma once

#include <map>
#include <string>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::optim {

// A group of parameters and the options that apply to them ("lr", "momentum", ...). The
// option names are PyTorch's; values are doubles (booleans as 0/1).
struct ParamGroup {
  std::vector<Tensor> params;
  std::map<std::string, double> options;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (no gradient: no update).
  virtual void step() = 0;

  // Clears the gradients: undefined (set_to_none, PyTorch's default) or zero-filled.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Adds a group; options it does not set take the optimizer's defaults.
  void add_param_group(ParamGroup group);

 protected:
  // `defaults`: every option the optimizer knows, with its default value.
  Optimizer(std::vector<ParamGroup> groups, std::map<std::string, double> defaults);
  std::map<std::string, double> defaults_;
  std::vector<ParamGroup> groups_;
};

}  // namespace hg::optim
