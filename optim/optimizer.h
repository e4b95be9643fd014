// Optimizer: the base of SGD, Adam, AdamW, RMSprop, Adagrad, Adamax, Adadelta, RAdam, NAdam and
// LBFGS (PyTorch's torch.optim.Optimizer).
//
//   optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
//   opt.zero_grad();  loss.backward();  opt.step();
//
// Parameters live in param groups, each with its own options (lr, weight_decay, ...), as in
// PyTorch. GradScaler (amp/) reaches every parameter's gradient through param_groups().
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::optim {

// A group of parameters and the options that apply to them ("lr", "momentum", ...). The
// option names are PyTorch's; values are doubles (booleans as 0/1).
struct ParamGroup {
  std::vector<Tensor> params;
  std::map<std::string, double> options;
  // The lr the first LR scheduler made on this optimizer found (torch's "initial_lr"): every
  // later scheduler takes it as its base lr, so schedulers made one after another (for
  // SequentialLR) start from the same lr, not from the lr the previous one set.
  std::optional<double> initial_lr = std::nullopt;
};

// What an optimizer keeps for one parameter: the number of steps taken (Adam, AdamW) and
// named buffers of the parameter's shape ("momentum_buffer", "exp_avg", ...) or 0-dim float32
// ones (NAdam's "mu_product"). Empty until the parameter's first step.
//
// NOTE [Step counts on the device] For a parameter on a CUDA device the count lives in
// device_step (a one-element float32 tensor on the parameter's device, as torch's fused
// optimizers keep "step"): the fused step reads it for the bias corrections and advances it on
// the device, only when the step is not skipped by found_inf, so the host never reads it.
// `step` then holds the count device_step started from (0, or what load_state_dict loaded).
// SGD keeps one too, to tell its first step (torch's "no momentum buffer yet") on the device.
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;
  Tensor device_step;  // CUDA parameters only
  bool empty() const { return step == 0 && buffers.empty(); }
  // The steps taken: `step`, or device_step read on the host for a CUDA parameter (that read
  // waits for the device).
  int64_t step_count() const;
};

// PyTorch's optimizer.state_dict() layout as a plain struct (no file format):
//   state:        parameter index -> {"step" (a 0-dim float32 tensor, as torch), "exp_avg",
//                 "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"}; only parameters that
//                 have state appear. Indices count the parameters of all groups in order.
//                 A CUDA parameter whose step count is still 0 (its steps were all skipped)
//                 has no state here, as on the CPU; state_dict() reads the device step counts
//                 for that (it waits for the device).
//   param_groups: each group's options and the indices of its parameters.
// state_dict() returns copies of the buffers; load_state_dict() copies them in.
struct OptimizerStateDict {
  struct Group {
    std::map<std::string, double> options;
    std::vector<int64_t> params;
  };
  std::map<int64_t, std::map<std::string, Tensor>> state;
  std::vector<Group> param_groups;
};

// NOTE [One check per option]'s table: every option name torch's optimizers use has one range
// wherever it appears (lr, eps, weight_decay, momentum, alpha, lr_decay,
// initial_accumulator_value, momentum_decay, tolerance_grad, tolerance_change >= 0; beta1 and
// beta2 in [0, 1); rho in [0, 1]; dampening finite; max_iter, max_eval, history_size whole
// numbers >= 1; amsgrad, nesterov, centered, maximize, decoupled_weight_decay and
// line_search_fn 0 or 1). check_option_ranges checks each option of `options` the table names,
// in name order, with the message "<optimizer>: expected <name> >= 0, got <value>" (in [0, 1) /
// in [0, 1] / a finite <name> / to be 0 or 1 (a bool); "<optimizer>: <name>: expected a whole
// number in [1, ...]"). NaN fails every range; a name the table lacks is not checked.
void check_option_ranges(const char* optimizer, const std::map<std::string, double>& options);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (no gradient: no update).
  virtual void step() = 0;

  // NOTE [Scaled step] The fused step GradScaler uses (torch's `grad_scale` / `found_inf`
  // arguments of the fused optimizers):
  //   step_scaled(grad_scale, found_inf)
  // - grad_scale: the loss scale S (NOT its inverse), a one-element floating tensor. Every
  //   gradient is divided by S inside the update pass (the stored .grad is left as it is).
  //   An undefined Tensor means "the gradients are already unscaled" (GradScaler's
  //   UNSCALED stage, where torch passes grad_scale=None).
  // - found_inf: a one-element floating tensor; nonzero skips the whole step: parameters
  //   and optimizer state (step counts included) stay bit-identical. An undefined Tensor
  //   means "no check".
  // step_scaled(Tensor(), Tensor()) is step(). Optimizers that implement it answer true to
  // supports_scaled_step(); the base throws.
  virtual bool supports_scaled_step() const { return false; }
  virtual void step_scaled(const Tensor& grad_scale, const Tensor& found_inf);

  // Clears the gradients: undefined (set_to_none, PyTorch's default) or zero-filled. A range of
  // its own in a profile, "Optimizer.zero_grad#<name()>.zero_grad" as torch names it (NOTE
  // [Recorded ranges]).
  void zero_grad(bool set_to_none = true);

  // The optimizer's class name, as torch's __class__.__name__ ("SGD", "AdamW"); the base's is
  // "Optimizer".
  virtual const char* name() const { return "Optimizer"; }

  // NOTE [The lr on the device] The fused CUDA step reads each group's lr from a float64
  // tensor on the device, which every eager step writes from the group's "lr" option. A step
  // captured into a CUDA graph reads that tensor when replayed, so an lr changed later reaches
  // the replays once written there: the LR schedulers write it (they call this), and so does
  // this call for a change made by hand. Call it outside a capture. Nothing to do without
  // CUDA parameters.
  void sync_device_options();

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Adds a group; options it does not set take the optimizer's defaults. The group's options
  // are checked as the constructor checks them (hg::Error, nothing added, when one is out of
  // range).
  void add_param_group(ParamGroup group);

  // The state of parameter `index` of group `group` (empty before its first step).
  const ParamState& state(size_t group, size_t index) const;

  // PyTorch's state_dict / load_state_dict (see OptimizerStateDict). load_state_dict checks
  // the number of groups and of parameters per group, the option names and values (the
  // constructor's checks: NOTE [One check per option]), the state keys, every buffer's shape
  // and every "step" (a whole number in [0, 2^63)), and changes nothing when a check fails;
  // buffers are converted to the dtype this optimizer keeps them in. Group options are
  // replaced by the loaded ones.
  // LBFGS, whose state is the optimizer's and not a parameter's, has its own.
  virtual OptimizerStateDict state_dict() const;
  virtual void load_state_dict(const OptimizerStateDict& state_dict);

 protected:
  // `defaults`: every option the optimizer knows, with its default value. The derived
  // constructor checks them and the groups (check_options).
  Optimizer(std::vector<ParamGroup> groups, std::map<std::string, double> defaults);

  // NOTE [One check per option] Each optimizer checks its options (a complete set: every
  // option of the defaults) in one function, which its constructor (defaults and groups),
  // add_param_group, load_state_dict (the loaded options over the group's own) and its step
  // all call, so a value rejected when constructed is rejected when loaded, with the same
  // message naming the option, the value and the allowed range. Booleans, kept as doubles, must
  // be exactly 0 or 1. The base's is the table's (check_option_ranges under name()); an
  // optimizer whose options constrain one another (SGD's Nesterov) adds its own after it. It
  // is never called while the base is constructed (the derived constructor checks its groups
  // itself).
  virtual void check_options(const std::map<std::string, double>& options) const;

  // The state of a parameter, created empty on first use.
  ParamState& mutable_state(size_t group, size_t index);
  // The buffer names a parameter of `group` may hold, and whether "step" is kept.
  // Defaults for an optimizer without per-parameter state (no buffers, no step count).
  virtual std::vector<std::string> state_buffer_names(const ParamGroup& /*group*/) const {
    return {};
  }
  virtual bool keeps_step() const { return false; }
  // Whether the constructor gives every parameter its state (Adagrad's "sum": NOTE [Adagrad
  // state from construction] in adagrad.h), so that buffers with a step count of 0 are state.
  virtual bool makes_state_when_constructed() const { return false; }
  // The dtype the buffers of `param` are kept in (the param's dtype unless overridden).
  virtual DType state_dtype(const Tensor& param) const { return param.dtype(); }
  // Whether buffer `name` is a 0-dim float32 tensor on the parameter's device (NAdam's
  // "mu_product") rather than a tensor of the parameter's shape in state_dtype.
  virtual bool is_scalar_state(const std::string& /*name*/) const { return false; }

  // For step_scaled: the scale as a double (1 for an undefined tensor) and whether found_inf
  // is set (false for an undefined tensor); both check for a one-element floating tensor.
  static double read_grad_scale(const Tensor& grad_scale);
  static bool read_found_inf(const Tensor& found_inf);
  // The same checks of grad_scale and found_inf without reading them (the CUDA step).
  static void check_scaled_step_args(const Tensor& grad_scale, const Tensor& found_inf);
  // NOTE [One fused step] Each optimizer's step_scaled makes the state its parameters lack,
  // then hands each device's parameters to the multi_tensor family's fused kernel
  // (kernel/multi_tensor.h), one call per group and device. For CPU parameters the host reads
  // grad_scale and found_inf first (here), so a skipped step makes no state and draws no
  // rounding words, and a zero grad_scale is an error naming `optimizer`; for CUDA parameters
  // only their kinds are checked and the kernels read them on the device (NOTE [No host sync in
  // the step] in cuda/multi_tensor.cpp). True when the step is skipped.
  bool skipped_on_host(const char* optimizer, const Tensor& grad_scale,
                       const Tensor& found_inf) const;
  // The step count a fused kernel reads and advances for `param`: on a CUDA device the state's
  // device_step (made from `step` the first time); on the CPU a new one-element int64 tensor
  // holding `step`, which the optimizer advances itself once the kernel has run.
  static Tensor fused_step_count(ParamState& state, const Tensor& param);
  // Checks a parameter and its gradient for a fused update: contiguous parameter, gradient of
  // the same dtype, shape and device. Returns the gradient, made contiguous.
  static Tensor checked_grad(const char* optimizer, const Tensor& param);
  // True when a parameter is on a CUDA device: the step then runs the CUDA multi_tensor
  // kernels, which need every parameter with a gradient on a CUDA device.
  bool has_cuda_params() const;
  // For the CUDA path: t (grad_scale or found_inf; undefined stays undefined) as a float32
  // tensor on `device`, copied there when it is elsewhere.
  static Tensor scalar_on(const Tensor& t, Device device);
  // Throws unless `param` (index `index` of group `group`) is on a CUDA device.
  static void check_cuda_param(const char* optimizer, const Tensor& param, size_t group,
                               size_t index);
  // For the CUDA path, before a step of `group` makes any state: throws when the step would be
  // the first of one of its parameters with a gradient (no state yet) on a device whose
  // current stream is capturing a graph (`optimizer` names the caller).
  void check_warmed_up(const char* optimizer, size_t group) const;
  // For the CUDA path: group `group`'s lr on `device` (NOTE [The lr on the device]), written
  // from its option unless the device's current stream is capturing a graph.
  const double* device_lr(size_t group, Device device);

  std::map<std::string, double> defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;
  // (group, CUDA device index) -> the group's lr there, float64 [1].
  std::map<std::pair<size_t, int>, Tensor> device_lrs_;

 private:
  // add_param_group without the option check (the constructor's, before the derived one
  // exists): fills in the defaults, checks the option names and the parameters, appends the
  // group and returns it.
  const ParamGroup& append_param_group(ParamGroup group);
};

}  // namespace hg::optim
