// optim::Optimizer (optimizer.h): param groups, per-parameter state, zero_grad, state dicts and
// the checks shared by the optimizers.
#include "halfgrad/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string_view>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/whole_number.h"
#include "halfgrad/cuda/cuda.h"
#include "halfgrad/ops/observer.h"

#include <fmt/ranges.h>

namespace hg::optim {

namespace {

enum class Range { kNonNegative, kUnitInterval, kClosedUnitInterval, kFinite, kCount, kBool };

// The table of NOTE [One check per option] in optimizer.h.
const std::map<std::string_view, Range>& option_ranges() {
  static const std::map<std::string_view, Range> ranges = [] {
    std::map<std::string_view, Range> table;
    for (const char* name :
         {"lr", "eps", "weight_decay", "momentum", "alpha", "lr_decay", "initial_accumulator_value",
          "momentum_decay", "tolerance_grad", "tolerance_change"}) {
      table[name] = Range::kNonNegative;
    }
    for (const char* name : {"amsgrad", "nesterov", "centered", "maximize",
                             "decoupled_weight_decay", "line_search_fn"}) {
      table[name] = Range::kBool;
    }
    for (const char* name : {"max_iter", "max_eval", "history_size"}) table[name] = Range::kCount;
    table["beta1"] = table["beta2"] = Range::kUnitInterval;
    table["rho"] = Range::kClosedUnitInterval;
    table["dampening"] = Range::kFinite;
    return table;
  }();
  return ranges;
}

}  // namespace

void check_option_ranges(const char* optimizer, const std::map<std::string, double>& options) {
  for (const auto& [name, value] : options) {
    const auto found = option_ranges().find(name);
    if (found == option_ranges().end()) continue;
    switch (found->second) {
      case Range::kNonNegative:
        HG_CHECK(value >= 0, "{}: expected {} >= 0, got {}", optimizer, name, value);
        break;
      case Range::kUnitInterval:
        HG_CHECK(value >= 0 && value < 1, "{}: expected {} in [0, 1), got {}", optimizer, name,
                 value);
        break;
      case Range::kClosedUnitInterval:
        HG_CHECK(value >= 0 && value <= 1, "{}: expected {} in [0, 1], got {}", optimizer, name,
                 value);
        break;
      case Range::kFinite:
        HG_CHECK(std::isfinite(value), "{}: expected a finite {}, got {}", optimizer, name, value);
        break;
      case Range::kCount:
        checked_whole_number(value, 1, INT64_MAX, fmt::format("{}: {}", optimizer, name));
        break;
      case Range::kBool:
        HG_CHECK(value == 0 || value == 1, "{}: expected {} to be 0 or 1 (a bool), got {}",
                 optimizer, name, value);
        break;
    }
  }
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::map<std::string, double> defaults)
    : defaults_(std::move(defaults)) {
  for (ParamGroup& group : groups) append_param_group(std::move(group));
}

void Optimizer::add_param_group(ParamGroup group) {
  // The group as it will be held (defaults filled in, names and parameters checked), then its
  // values; a group they refuse is taken out again.
  const ParamGroup& added = append_param_group(std::move(group));
  try {
    check_options(added.options);
  } catch (...) {
    groups_.pop_back();
    throw;
  }
}

const ParamGroup& Optimizer::append_param_group(ParamGroup group) {
  for (const auto& [name, value] : group.options) {
    HG_CHECK(defaults_.count(name) == 1, "optimizer: unknown option \"{}\" in a param group", name);
  }
  for (const auto& [name, value] : defaults_) group.options.emplace(name, value);
  // A parameter in two groups (torch: "some parameters appear in more than one parameter
  // group"), or twice in one (torch warns, and says it will refuse it), would be stepped
  // twice per step, and GradScaler.unscale_ would divide its gradient twice.
  std::set<const TensorImpl*> earlier, seen;
  for (const ParamGroup& other : groups_) {
    for (const Tensor& p : other.params) earlier.insert(p.impl_ptr().get());
  }
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    HG_CHECK(p.defined() && p.is_leaf() && p.is_floating_point(),
             "optimizer: parameter {} of a group must be a floating leaf tensor", i);
    HG_CHECK(earlier.count(p.impl_ptr().get()) == 0,
             "optimizer: some parameters appear in more than one parameter group (parameter {} "
             "of the group being added, of shape {}, is in an earlier group)",
             i, p.sizes());
    HG_CHECK(seen.insert(p.impl_ptr().get()).second,
             "optimizer: a parameter group holds a parameter twice (parameter {}, of shape {}): "
             "each step would update it twice",
             i, p.sizes());
  }
  return groups_.emplace_back(std::move(group));
}

void Optimizer::zero_grad(bool set_to_none) {
  // A range of its own in a profile, as torch names it (NOTE [Recorded ranges]); the name is
  // made only when an observer will hear it.
  const std::string range_name =
      ops::has_observers() ? fmt::format("Optimizer.zero_grad#{}.zero_grad", name()) : "";
  const ops::RecordFunction range(range_name);
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

void Optimizer::check_options(const std::map<std::string, double>& options) const {
  check_option_ranges(name(), options);
}

void Optimizer::step_scaled(const Tensor& /*grad_scale*/, const Tensor& /*found_inf*/) {
  HG_CHECK(false,
           "step_scaled: expected an optimizer that supports the scaled step (SGD, Adam, "
           "AdamW, RMSprop, Adagrad, Adamax, Adadelta, RAdam, NAdam), got {}",
           name());
}

const ParamState& Optimizer::state(size_t group, size_t index) const {
  HG_CHECK(group < groups_.size() && index < groups_[group].params.size(),
           "optimizer state: expected a group below {} and a parameter index in it, got group "
           "{} index {}",
           groups_.size(), group, index);
  static const ParamState kEmpty;
  if (group >= state_.size() || index >= state_[group].size()) return kEmpty;
  return state_[group][index];
}

ParamState& Optimizer::mutable_state(size_t group, size_t index) {
  if (state_.size() < groups_.size()) state_.resize(groups_.size());
  std::vector<ParamState>& states = state_[group];
  if (states.size() < groups_[group].params.size()) states.resize(groups_[group].params.size());
  return states[index];
}

double Optimizer::read_grad_scale(const Tensor& grad_scale) {
  if (!grad_scale.defined()) return 1.0;
  HG_CHECK(grad_scale.numel() == 1 && grad_scale.is_floating_point(),
           "step_scaled: expected grad_scale to be a one-element floating tensor, got {} "
           "elements of {}",
           grad_scale.numel(), grad_scale.dtype());
  return grad_scale.item<double>();
}

bool Optimizer::read_found_inf(const Tensor& found_inf) {
  if (!found_inf.defined()) return false;
  HG_CHECK(found_inf.numel() == 1 && found_inf.is_floating_point(),
           "step_scaled: expected found_inf to be a one-element floating tensor, got {} "
           "elements of {}",
           found_inf.numel(), found_inf.dtype());
  return found_inf.item<double>() != 0.0;
}

void Optimizer::check_scaled_step_args(const Tensor& grad_scale, const Tensor& found_inf) {
  HG_CHECK(!grad_scale.defined() || (grad_scale.numel() == 1 && grad_scale.is_floating_point()),
           "step_scaled: expected grad_scale to be a one-element floating tensor, got {} "
           "elements of {}",
           grad_scale.numel(), grad_scale.dtype());
  HG_CHECK(!found_inf.defined() || (found_inf.numel() == 1 && found_inf.is_floating_point()),
           "step_scaled: expected found_inf to be a one-element floating tensor, got {} "
           "elements of {}",
           found_inf.numel(), found_inf.dtype());
}

bool Optimizer::skipped_on_host(const char* optimizer, const Tensor& grad_scale,
                                const Tensor& found_inf) const {
  if (has_cuda_params()) {
    check_scaled_step_args(grad_scale, found_inf);
    return false;
  }
  const double scale = read_grad_scale(grad_scale);
  if (read_found_inf(found_inf)) return true;
  HG_CHECK(scale != 0, "{}: expected a nonzero grad_scale, got 0", optimizer);
  return false;
}

Tensor Optimizer::fused_step_count(ParamState& state, const Tensor& param) {
  if (param.is_cuda()) {
    if (!state.device_step.defined()) {
      state.device_step =
          full({1}, double(state.step), {.dtype = kFloat32, .device = param.device()});
    }
    return state.device_step;
  }
  Tensor count = empty({1}, kInt64);
  count.data_ptr<int64_t>()[0] = state.step;
  return count;
}

Tensor Optimizer::checked_grad(const char* optimizer, const Tensor& param) {
  const Tensor& grad = param.grad();
  HG_CHECK(param.is_contiguous(), "{}: expected a contiguous parameter, got a non-contiguous one",
           optimizer);
  HG_CHECK(grad.dtype() == param.dtype() && grad.sizes() == param.sizes(),
           "{}: expected a gradient of the parameter's dtype {} and shape {}, got {} {}", optimizer,
           param.dtype(), param.sizes(), grad.dtype(), grad.sizes());
  HG_CHECK(grad.device() == param.device(),
           "{}: expected the gradient on the parameter's device {}, got a {} one", optimizer,
           param.device(), grad.device());
  return grad.is_contiguous() ? grad : grad.contiguous();
}

bool Optimizer::has_cuda_params() const {
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) {
      if (p.is_cuda()) return true;
    }
  }
  return false;
}

Tensor Optimizer::scalar_on(const Tensor& t, Device device) {
  if (!t.defined() || (t.device() == device && t.dtype() == kFloat32)) return t;
  NoGradGuard no_grad;
  return t.to(device, kFloat32);
}

void Optimizer::check_warmed_up(const char* optimizer, size_t group) const {
  const ParamGroup& g = groups_.at(group);
  // Only a capture needs the state to exist: asked once per device, so that an eager step
  // does no more than that.
  std::map<int, bool> capturing;
  auto is_capturing = [&](int device) {
    auto [it, added] = capturing.try_emplace(device, false);
    if (added) it->second = cuda::is_current_stream_capturing(device);
    return it->second;
  };
  const std::vector<std::string> names = state_buffer_names(g);
  const bool counts = keeps_step() || !names.empty();  // SGD counts for its momentum buffer
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Tensor& param = g.params[i];
    if (!param.is_cuda() || !param.grad().defined() || !is_capturing(param.device().index)) {
      continue;
    }
    // The state (buffers, step counts, the lr on the device) is made by a parameter's first
    // step: made inside a capture, its initial values would be recorded, not written, and
    // written again by every replay.
    bool ready = device_lrs_.count({group, param.device().index}) == 1;
    const ParamState* s =
        group < state_.size() && i < state_[group].size() ? &state_[group][i] : nullptr;
    for (const std::string& name : names) ready = ready && s && s->buffers.count(name) == 1;
    if (counts) ready = ready && s && s->device_step.defined();
    HG_CHECK(ready,
             "{}: the first step of parameter {} of param group {} on {} is being captured into "
             "a CUDA graph; take one step eagerly first (a warm-up) in which it has a gradient, "
             "which makes its optimizer state",
             optimizer, i, group, param.device());
  }
}

const double* Optimizer::device_lr(size_t group, Device device) {
  auto it = device_lrs_.find({group, device.index});
  if (it == device_lrs_.end()) {
    it = device_lrs_
             .emplace(std::pair{group, device.index},
                      empty({1}, {.dtype = kFloat64, .device = device}))
             .first;
  }
  if (!cuda::is_current_stream_capturing(device.index)) {
    it->second.fill_(groups_.at(group).options.at("lr"));
  }
  return it->second.data_ptr<double>();
}

void Optimizer::sync_device_options() {
  for (auto& [key, lr] : device_lrs_) {
    HG_CHECK(!cuda::is_current_stream_capturing(key.second),
             "sync_device_options: cuda:{}'s current stream is capturing a CUDA graph; call it "
             "between replays, outside the capture",
             key.second);
    lr.fill_(groups_.at(key.first).options.at("lr"));
  }
}

void Optimizer::check_cuda_param(const char* optimizer, const Tensor& param, size_t group,
                                 size_t index) {
  HG_CHECK(param.is_cuda(),
           "{}: expected every parameter with a gradient on a CUDA device once one is (the "
           "fused CUDA step), got a {} parameter (group {}, index {})",
           optimizer, param.device(), group, index);
}

int64_t ParamState::step_count() const {
  if (!device_step.defined()) return step;
  // float32 rounds a count near 2^63 up to 2^63 (NOTE [Loaded integers]).
  return checked_whole_number(device_step.item<float>(), 0, INT64_MAX, "the device step count");
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict result;
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    OptimizerStateDict::Group group{groups_[g].options, {}};
    for (size_t i = 0; i < groups_[g].params.size(); ++i, ++index) {
      group.params.push_back(index);
      const ParamState& s = state(g, i);
      if (s.empty()) continue;
      // NOTE [Step counts on the device]: a host read, and no state before a step taken.
      const int64_t steps = s.step_count();
      if (s.device_step.defined() && steps == 0 && !makes_state_when_constructed()) continue;
      std::map<std::string, Tensor>& entry = result.state[index];
      for (const auto& [name, buffer] : s.buffers) entry[name] = buffer.clone();
      if (keeps_step()) entry["step"] = scalar_tensor(double(steps), kFloat32);
    }
    result.param_groups.push_back(std::move(group));
  }
  return result;
}

void Optimizer::load_state_dict(const OptimizerStateDict& state_dict) {
  // Checks everything first, so that a bad state dict changes nothing.
  HG_CHECK(state_dict.param_groups.size() == groups_.size(),
           "load_state_dict: expected {} param groups, got {}", groups_.size(),
           state_dict.param_groups.size());
  std::vector<std::pair<size_t, size_t>> location;  // parameter index -> (group, index)
  for (size_t g = 0; g < groups_.size(); ++g) {
    const OptimizerStateDict::Group& loaded = state_dict.param_groups[g];
    HG_CHECK(loaded.params.size() == groups_[g].params.size(),
             "load_state_dict: expected group {} to hold {} parameters, got {}", g,
             groups_[g].params.size(), loaded.params.size());
    for (const auto& [name, value] : loaded.options) {
      HG_CHECK(defaults_.count(name) == 1,
               "load_state_dict: unknown option \"{}\" in param group {}", name, g);
    }
    // NOTE [One check per option]: the options the group would have once loaded.
    std::map<std::string, double> options = loaded.options;
    for (const auto& [name, value] : groups_[g].options) options.emplace(name, value);
    try {
      check_options(options);
    } catch (const Error& e) {
      HG_ERROR("load_state_dict: param group {}: {}", g, e.what());
    }
    for (size_t i = 0; i < loaded.params.size(); ++i) location.emplace_back(g, i);
  }
  std::map<int64_t, std::pair<size_t, size_t>> index_of;  // loaded index -> (group, index)
  {
    size_t flat = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (int64_t loaded_index : state_dict.param_groups[g].params) {
        HG_CHECK(index_of.count(loaded_index) == 0,
                 "load_state_dict: expected each parameter index once, got {} twice", loaded_index);
        index_of[loaded_index] = location[flat++];
      }
    }
  }
  std::vector<std::vector<ParamState>> new_state(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) new_state[g].resize(groups_[g].params.size());
  for (const auto& [loaded_index, entries] : state_dict.state) {
    auto found = index_of.find(loaded_index);
    HG_CHECK(found != index_of.end(),
             "load_state_dict: expected state only for the parameters of the param groups, "
             "got state for index {}",
             loaded_index);
    const auto [g, i] = found->second;
    const Tensor& param = groups_[g].params[i];
    // Options as loaded decide which buffers are allowed (amsgrad, momentum).
    ParamGroup probe{{}, state_dict.param_groups[g].options};
    for (const auto& [name, value] : groups_[g].options) probe.options.emplace(name, value);
    const std::vector<std::string> names = state_buffer_names(probe);
    ParamState& s = new_state[g][i];
    for (const auto& [name, tensor] : entries) {
      HG_CHECK(tensor.defined(), "load_state_dict: state \"{}\" of parameter {} is undefined", name,
               loaded_index);
      if (name == "step" && keeps_step()) {
        HG_CHECK(tensor.numel() == 1,
                 "load_state_dict: expected \"step\" of parameter {} to hold one element, got "
                 "{}",
                 loaded_index, tensor.numel());
        // NOTE [Loaded integers]: a step of 1e20 or NaN is an error, not a conversion.
        s.step = checked_whole_number(
            tensor.item<double>(), 0, INT64_MAX,
            fmt::format("load_state_dict: \"step\" of parameter {}", loaded_index));
        continue;
      }
      HG_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
               "load_state_dict: expected state keys {}{} for parameter {}, got \"{}\"",
               fmt::join(names, ", "), keeps_step() ? ", step" : "", loaded_index, name);
      const bool scalar = is_scalar_state(name);
      const Shape shape = scalar ? Shape{} : param.sizes();
      HG_CHECK((scalar ? tensor.numel() == 1 : tensor.sizes() == param.sizes()) &&
                   tensor.is_floating_point(),
               "load_state_dict: expected \"{}\" of parameter {} to be a floating tensor of "
               "shape {}, got {} {}",
               name, loaded_index, shape, tensor.dtype(), tensor.sizes());
      Tensor copy =
          empty(shape, {.dtype = scalar ? kFloat32 : state_dtype(param), .device = param.device()});
      {
        NoGradGuard no_grad;
        copy.copy_(scalar ? tensor.reshape({}) : tensor);
      }
      s.buffers[name] = copy;
    }
    if (keeps_step()) {
      HG_CHECK(s.buffers.empty() || s.step > 0 || makes_state_when_constructed(),
               "load_state_dict: expected a \"step\" with the buffers of parameter {}, got none",
               loaded_index);
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [name, value] : state_dict.param_groups[g].options) {
      groups_[g].options[name] = value;
    }
  }
  state_ = std::move(new_state);
  sync_device_options();  // a loaded lr reaches captured steps too
}

}  // namespace hg::optim
