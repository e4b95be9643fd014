// amp::initialize: Apex's amp.initialize(model, optimizer, opt_level) for programs migrating
// from Apex, with each opt level mapped onto halfgrad's own machinery:
//
//   auto handle = amp::initialize(*model, opt, "O2");   // apex: model, opt = amp.initialize(...)
//   for (...) {
//     handle.zero_grad();
//     Tensor loss = cross_entropy((*model)(x), y);      // call the model: its hooks cast
//     handle.backward(loss);       // apex: with amp.scale_loss(loss, opt) as s: s.backward()
//     handle.step();               // apex: opt.step(), skipped after an overflow
//   }
//
// NOTE [Apex opt levels] Apex's four levels and what each is here:
//   O0  float32 training: nothing is cast; loss scale 1.
//   O1  Apex patches torch's functions to cast per a whitelist and blacklist; here autocast is
//       on for the model's device type in `half_dtype` on the calling thread while the handle
//       lives (torch.amp's lists are Apex O1's lists' successor); the model stays float32;
//       dynamic loss scaling.
//   O2  The model in half_dtype except its normalization layers (convert_network), float32
//       master weights in the optimizer (FP16Optimizer's masters), inputs cast to half_dtype and
//       outputs to float32 by hooks on the model; dynamic loss scaling.
//   O3  The whole model in half_dtype, the optimizer steps the 16-bit weights; loss scale 1.
// Apex's keyword overrides are InitializeOptions' fields. Dynamic scaling starts at
// min(2^16, max_loss_scale) and grows by 2 after 2000 clean steps up to max_loss_scale (2^24 by
// default), as Apex's amp does (apex.fp16_utils' scaler and GradScaler have none by default).
// The handle is the scaler and the step: backward scales the loss, step checks for an overflow,
// unscales and steps (or skips and backs off).
// For new code torch.amp's form (amp::Autocast, amp::GradScaler) is the one to write; the
// README's migration section puts the two side by side.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "halfgrad/amp/autocast.h"
#include "halfgrad/amp/fp16_optimizer.h"
#include "halfgrad/amp/loss_scaler.h"
#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/optim/optimizer.h"

namespace hg::amp {

enum class OptLevel { O0, O1, O2, O3 };

// "O0", "O1", "O2", "O3" (hg::Error naming the text for anything else; Apex's letter O, not
// the digit zero).
OptLevel opt_level_from_string(std::string_view text);
std::string_view opt_level_name(OptLevel level);

// Apex's loss_scale argument: a number (a static scale) or "dynamic".
class LossScale {
 public:
  LossScale(double value);       // NOLINT(google-explicit-constructor): {.loss_scale = 128.0}
  LossScale(const char* name);   // NOLINT(google-explicit-constructor): {.loss_scale = "dynamic"}
  static LossScale dynamic() { return LossScale("dynamic"); }
  bool is_dynamic() const { return dynamic_; }
  double value() const { return value_; }  // the static scale

 private:
  bool dynamic_ = false;
  double value_ = 1.0;
};

// Apex's keyword overrides of an opt level; nullopt keeps the level's value.
struct InitializeOptions {
  std::optional<DType> cast_model_type = std::nullopt;        // the model's dtype (O2, O3: half_dtype)
  std::optional<bool> patch_torch_functions = std::nullopt;   // O1: autocast while the handle lives
  std::optional<bool> keep_batchnorm_fp32 = std::nullopt;     // O2: true, O3: false
  std::optional<bool> master_weights = std::nullopt;          // O2: true
  std::optional<LossScale> loss_scale = std::nullopt;         // O1, O2: "dynamic"; O0, O3: 1.0
  std::optional<DType> cast_model_outputs = std::nullopt;     // with a cast model: float32
  // Dynamic scaling's ceiling (Apex's max_loss_scale, 2^24); ignored with a static scale.
  double max_loss_scale = 16777216.0;
  // Beyond Apex: the 16-bit type of O1, O2 and O3 (bfloat16 trains without loss scaling, but
  // the levels keep theirs unless loss_scale says otherwise).
  DType half_dtype = kFloat16;
};

// What an opt level with its overrides comes to (Apex's amp._amp_state.opt_properties).
struct AmpProperties {
  OptLevel opt_level = OptLevel::O0;
  std::optional<DType> cast_model_type;
  bool patch_torch_functions = false;
  std::optional<bool> keep_batchnorm_fp32;
  bool master_weights = false;
  LossScale loss_scale = 1.0;
  std::optional<DType> cast_model_outputs;
  double max_loss_scale = 16777216.0;
  DType half_dtype = kFloat16;
};

// The opt level's properties with the overrides applied, checked: a cast_model_type other than
// float32/float16/bfloat16, master_weights without a 16-bit model, keep_batchnorm_fp32 without a
// cast model, patch_torch_functions together with a cast model, a static loss_scale that is
// not finite and > 0, or a max_loss_scale that is not > 0 are errors naming the option.
AmpProperties resolve_opt_level(OptLevel level, const InitializeOptions& options = {});

// What a checkpoint keeps of an AmpHandle (io::NamedState adapts it to the state protocol,
// NOTE [Checkpoint state protocol] in io/stateful.h): what a resumed run needs beyond the
// model's and the optimizer's states to continue bit for bit.
struct AmpHandleState {
  OptLevel opt_level = OptLevel::O0;
  // The loss scaler's state (AmpHandle::state_dict).
  std::map<std::string, double> loss_scaler;
  // With master weights: the float32 masters of the 16-bit parameters, per param group (copies;
  // the model holds them rounded to 16 bits and the optimizer's state does not hold them), and
  // whether the last backward overflowed. Empty and false without.
  std::vector<std::vector<Tensor>> master_weights;
  bool overflow = false;
};

class AmpHandle {
 public:
  // Use amp::initialize.
  AmpHandle(nn::Module& model, optim::Optimizer& optimizer, AmpProperties properties);
  // Removes the model's hooks and, for O1, puts the thread's autocast state back.
  ~AmpHandle();
  AmpHandle(const AmpHandle&) = delete;
  AmpHandle& operator=(const AmpHandle&) = delete;

  const AmpProperties& properties() const { return properties_; }

  // loss (as float32) times the loss scale, backward; with master weights the 16-bit
  // gradients then go to the float32 masters (FP16Optimizer::backward).
  void backward(const Tensor& loss);
  // Apex's patched optimizer.step(): with a dynamic scale, an inf/NaN gradient skips the step
  // and halves the scale (returns false); otherwise the gradients are divided by the scale and
  // the optimizer steps (returns true). With master weights the masters are copied back.
  bool step();
  // The gradients of the optimizer's parameters (and, with master weights, of the model's).
  void zero_grad(bool set_to_none = true);

  double loss_scale() const;
  // The optimizer that steps: the one given (with master weights its 16-bit parameters were
  // replaced by float32 masters, as Apex does), e.g. for an LR scheduler.
  optim::Optimizer& optimizer() { return *optimizer_; }

  // The loss scaler's state (LossScaler::state_dict's keys: "cur_scale", "cur_iter", and the
  // dynamic scaler's), what Apex's amp.state_dict() keeps for its one loss scaler.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

  // The checkpoint's state (AmpHandleState; io::save_checkpoint with {"amp", &handle}). The check
  // is an hg::Error naming what does not fit (another opt level, a static scaler's state for a
  // dynamic one, masters of other counts or shapes) and changes nothing; load takes a state that
  // passed it.
  AmpHandleState checkpoint_state() const;
  // The number of float32 masters in each param group (empty without master weights): the
  // layout checkpoint_state's master_weights has, without its copies.
  std::vector<size_t> master_weight_counts() const;
  void check_checkpoint_state(const AmpHandleState& state) const;
  void load_checkpoint_state(const AmpHandleState& state);

 private:
  AmpProperties properties_;
  optim::Optimizer* optimizer_;
  std::unique_ptr<FP16Optimizer> masters_;   // master weights
  std::unique_ptr<LossScaler> loss_scaler_;  // without master weights
  std::vector<nn::RemovableHandle> hooks_;
  // O1: the autocast region open on the handle's thread while it lives (the guard restores the
  // state it replaced).
  std::optional<Autocast> autocast_;
};

// Apex's amp.initialize: converts the model in place (O2, O3), hooks its calls (casts of
// inputs and outputs), wraps the optimizer's parameters with float32 masters (O2) and returns
// the handle through which the loss goes backward and the optimizer steps. The optimizer must
// have been built over the model's parameters and not have stepped; both must outlive the
// handle. opt_level is "O0" ... "O3" or an OptLevel.
AmpHandle initialize(nn::Module& model, optim::Optimizer& optimizer, OptLevel opt_level,
                     const InitializeOptions& options = {});
AmpHandle initialize(nn::Module& model, optim::Optimizer& optimizer, std::string_view opt_level,
                     const InitializeOptions& options = {});

}  // namespace hg::amp
