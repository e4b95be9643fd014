// amp::initialize (amp/initialize.h): Apex's opt levels resolved into properties (NOTE [Apex opt
// levels]), the model converted and hooked, and the handle that scales, unscales and steps.
#include "halfgrad/amp/initialize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "halfgrad/amp/autocast.h"
#include "halfgrad/amp/master_params.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/ops/ops.h"

namespace hg::amp {

namespace {

// Apex's amp defaults for a dynamic scale.
constexpr double kDynamicInitScale = 65536.0;
constexpr double kDynamicScaleFactor = 2.0;
constexpr int64_t kDynamicScaleWindow = 2000;

std::string optional_dtype_name(const std::optional<DType>& dtype) {
  return dtype ? std::string(dtype_name(*dtype)) : std::string("None");
}

// A floating tensor, or a tuple of values holding some, cast to dtype; anything else as it is.
nn::Value cast_value(const nn::Value& value, DType dtype) {
  if (value.is_tensor()) {
    const Tensor& t = value.tensor();
    return t.defined() && t.is_floating_point() ? nn::Value(t.to(dtype)) : value;
  }
  if (value.is_tuple()) {
    nn::Value::Tuple out;
    for (const nn::Value& element : value.tuple()) out.push_back(cast_value(element, dtype));
    return nn::Value(std::move(out));
  }
  return value;
}

std::vector<Tensor> params_with_grads(const optim::Optimizer& optimizer) {
  std::vector<Tensor> out;
  for (const optim::ParamGroup& group : optimizer.param_groups()) {
    for (const Tensor& p : group.params) {
      if (p.grad().defined()) out.push_back(p);
    }
  }
  return out;
}

}  // namespace

OptLevel opt_level_from_string(std::string_view text) {
  if (text == "O0") return OptLevel::O0;
  if (text == "O1") return OptLevel::O1;
  if (text == "O2") return OptLevel::O2;
  if (text == "O3") return OptLevel::O3;
  const bool digit_zero = text.size() == 2 && text[0] == '0';
  HG_ERROR("amp::initialize: expected an opt level \"O0\", \"O1\", \"O2\" or \"O3\", got \"{}\"{}",
           text, digit_zero ? " (the first character is the letter O, not the digit zero)" : "");
}

std::string_view opt_level_name(OptLevel level) {
  switch (level) {
    case OptLevel::O0:
      return "O0";
    case OptLevel::O1:
      return "O1";
    case OptLevel::O2:
      return "O2";
    case OptLevel::O3:
      return "O3";
  }
  return "?";
}

LossScale::LossScale(double value) : value_(value) {
  HG_CHECK(std::isfinite(value) && value > 0,
           "amp::initialize: expected loss_scale finite and > 0 or \"dynamic\", got {}", value);
}

LossScale::LossScale(const char* name) : dynamic_(true) {
  HG_CHECK(name != nullptr && std::strcmp(name, "dynamic") == 0,
           "amp::initialize: expected loss_scale \"dynamic\" or a number, got \"{}\"",
           name == nullptr ? "" : name);
}

AmpProperties resolve_opt_level(OptLevel level, const InitializeOptions& options) {
  const DType half = options.half_dtype;
  HG_CHECK(half == kFloat16 || half == kBFloat16,
           "amp::initialize: expected half_dtype float16 or bfloat16, got {}", half);
  AmpProperties p;
  p.opt_level = level;
  p.half_dtype = half;
  switch (level) {
    case OptLevel::O0:
      p.cast_model_type = kFloat32;
      p.loss_scale = 1.0;
      break;
    case OptLevel::O1:
      p.patch_torch_functions = true;
      p.loss_scale = LossScale::dynamic();
      break;
    case OptLevel::O2:
      p.cast_model_type = half;
      p.keep_batchnorm_fp32 = true;
      p.master_weights = true;
      p.loss_scale = LossScale::dynamic();
      break;
    case OptLevel::O3:
      p.cast_model_type = half;
      p.keep_batchnorm_fp32 = false;
      p.loss_scale = 1.0;
      break;
  }
  if (options.cast_model_type) p.cast_model_type = options.cast_model_type;
  if (options.patch_torch_functions) p.patch_torch_functions = *options.patch_torch_functions;
  if (options.keep_batchnorm_fp32) p.keep_batchnorm_fp32 = options.keep_batchnorm_fp32;
  if (options.master_weights) p.master_weights = *options.master_weights;
  if (options.loss_scale) p.loss_scale = *options.loss_scale;
  if (options.cast_model_outputs) p.cast_model_outputs = options.cast_model_outputs;
  p.max_loss_scale = options.max_loss_scale;

  const bool cast_to_half = p.cast_model_type && *p.cast_model_type != kFloat32;
  if (cast_to_half && !p.cast_model_outputs) p.cast_model_outputs = kFloat32;
  HG_CHECK(!p.cast_model_type || *p.cast_model_type == kFloat32 || *p.cast_model_type == kFloat16 ||
               *p.cast_model_type == kBFloat16,
           "amp::initialize({}): expected cast_model_type float32, float16 or bfloat16, got {}",
           opt_level_name(level), optional_dtype_name(p.cast_model_type));
  HG_CHECK(!(p.patch_torch_functions && cast_to_half),
           "amp::initialize({}): expected either patch_torch_functions (autocast over a float32 "
           "model) or a 16-bit cast_model_type, got both (cast_model_type {})",
           opt_level_name(level), optional_dtype_name(p.cast_model_type));
  HG_CHECK(!p.master_weights || cast_to_half,
           "amp::initialize({}): expected master_weights only with a 16-bit cast_model_type, got "
           "master_weights with cast_model_type {}",
           opt_level_name(level), optional_dtype_name(p.cast_model_type));
  HG_CHECK(!p.keep_batchnorm_fp32 || !*p.keep_batchnorm_fp32 || cast_to_half,
           "amp::initialize({}): expected keep_batchnorm_fp32 only with a 16-bit cast_model_type, "
           "got it with cast_model_type {}",
           opt_level_name(level), optional_dtype_name(p.cast_model_type));
  HG_CHECK(p.max_loss_scale > 0, "amp::initialize({}): expected max_loss_scale > 0, got {}",
           opt_level_name(level), p.max_loss_scale);
  return p;
}

AmpHandle::AmpHandle(nn::Module& model, optim::Optimizer& optimizer, AmpProperties properties)
    : properties_(std::move(properties)), optimizer_(&optimizer) {
  // Every check before anything changes: the optimizer has not stepped, the model is floating.
  check_optimizer_not_stepped(optimizer, "amp::initialize");
  const std::vector<Tensor> params = model.parameters();
  std::optional<DeviceType> device_type;
  if (!params.empty()) device_type = params.front().device().type;

  const AmpProperties& p = properties_;
  const bool cast_to_half = p.cast_model_type && *p.cast_model_type != kFloat32;
  if (p.cast_model_type) {
    if (cast_to_half && p.keep_batchnorm_fp32.value_or(false)) {
      convert_network(model, *p.cast_model_type);
    } else {
      model.to(*p.cast_model_type);
    }
  }
  if (cast_to_half) {
    const DType input_dtype = *p.cast_model_type;
    hooks_.push_back(model.register_forward_pre_hook(
        [input_dtype](nn::Module&, const nn::Args& args) -> std::optional<nn::Args> {
          nn::Args cast;
          cast.reserve(args.size());
          for (const nn::Value& arg : args) cast.push_back(cast_value(arg, input_dtype));
          return cast;
        }));
  }
  if (p.cast_model_outputs) {
    const DType output_dtype = *p.cast_model_outputs;
    hooks_.push_back(model.register_forward_hook(
        [output_dtype](nn::Module&, const nn::Args&,
                       const nn::Value& output) -> std::optional<nn::Value> {
          return cast_value(output, output_dtype);
        }));
  }

  // Apex's amp starts a dynamic scale at min(2^16, max_loss_scale).
  const double init_scale = std::min(kDynamicInitScale, p.max_loss_scale);
  if (p.master_weights) {
    FP16OptimizerOptions scaling;
    if (p.loss_scale.is_dynamic()) {
      scaling.dynamic_loss_scale = true;
      scaling.dynamic_loss_args = {.init_scale = init_scale,
                                   .scale_factor = kDynamicScaleFactor,
                                   .scale_window = kDynamicScaleWindow,
                                   .max_scale = p.max_loss_scale};
    } else {
      scaling.static_loss_scale = p.loss_scale.value();
    }
    masters_ = std::make_unique<FP16Optimizer>(optimizer, scaling);
  } else if (p.loss_scale.is_dynamic()) {
    loss_scaler_ = std::make_unique<DynamicLossScaler>(init_scale, kDynamicScaleFactor,
                                                       kDynamicScaleWindow, p.max_loss_scale);
  } else {
    loss_scaler_ = std::make_unique<LossScaler>(p.loss_scale.value());
  }

  // O1's autocast is an amp::Autocast region that lasts as long as the handle: the guard saves
  // the thread's state and puts it back, as it does for any region.
  if (p.patch_torch_functions && device_type) autocast_.emplace(*device_type, p.half_dtype);
}

AmpHandle::~AmpHandle() {
  for (nn::RemovableHandle& hook : hooks_) hook.remove();
  autocast_.reset();
}

void AmpHandle::backward(const Tensor& loss) {
  if (masters_) {
    masters_->backward(loss);
  } else {
    loss_scaler_->scale_loss(loss).backward();
  }
  // O1 keeps one autocast region open for the handle's life: the weights' cached casts belong to
  // this iteration's forward and go before the step changes the weights.
  if (autocast_) clear_cache();
}

bool AmpHandle::step() {
  if (autocast_) clear_cache();
  if (masters_) return masters_->step();
  const std::vector<Tensor> params = params_with_grads(*optimizer_);
  const bool overflow = loss_scaler_->has_overflow(params);
  const double scale = loss_scaler_->loss_scale();
  loss_scaler_->update_scale(overflow);
  if (overflow) return false;
  if (scale != 1.0) {
    const ops::RecordFunction range("AmpHandle.unscale", ops::RangeKind::kLossScaling);
    NoGradGuard no_grad;
    for (const Tensor& p : params) {
      Tensor grad = p.grad();
      grad.mul_(1.0 / scale);
    }
  }
  optimizer_->step();
  return true;
}

void AmpHandle::zero_grad(bool set_to_none) {
  if (masters_) {
    masters_->zero_grad(set_to_none);
  } else {
    optimizer_->zero_grad(set_to_none);
  }
}

double AmpHandle::loss_scale() const {
  return masters_ ? masters_->loss_scale() : loss_scaler_->loss_scale();
}

std::map<std::string, double> AmpHandle::state_dict() const {
  return masters_ ? masters_->loss_scaler().state_dict() : loss_scaler_->state_dict();
}

void AmpHandle::load_state_dict(const std::map<std::string, double>& state) {
  if (masters_) {
    FP16OptimizerStateDict whole = masters_->state_dict();
    whole.loss_scaler = state;
    masters_->load_state_dict(whole);
  } else {
    loss_scaler_->load_state_dict(state);
  }
}

AmpHandleState AmpHandle::checkpoint_state() const {
  AmpHandleState out;
  out.opt_level = properties_.opt_level;
  out.loss_scaler = state_dict();
  if (masters_) {
    FP16OptimizerStateDict whole = masters_->state_dict();
    out.master_weights = std::move(whole.fp32_from_fp16);
    out.overflow = whole.overflow;
  }
  return out;
}

std::vector<size_t> AmpHandle::master_weight_counts() const {
  return masters_ ? masters_->master_counts() : std::vector<size_t>{};
}

void AmpHandle::check_checkpoint_state(const AmpHandleState& state) const {
  HG_CHECK(state.opt_level == properties_.opt_level,
           "AmpHandle: expected the state of an {} handle, got one saved at {}",
           opt_level_name(properties_.opt_level), opt_level_name(state.opt_level));
  const bool dynamic = masters_ ? masters_->dynamic_loss_scale() : loss_scaler_->is_dynamic();
  // A dynamic scaler's state has the keys a static one's lacks: a static state given to a
  // dynamic handle fails its scaler's check below; the other way round is caught here.
  HG_CHECK(dynamic || state.loss_scaler.count("scale_window") == 0,
           "AmpHandle: expected a static loss scaler's state, got a dynamic one's");
  if (masters_) {
    masters_->check_scaler_and_masters(dynamic, state.loss_scaler, state.master_weights);
  } else {
    HG_CHECK(state.master_weights.empty() && !state.overflow,
             "AmpHandle: expected no master weights (the handle has none), got {} param groups "
             "of them",
             state.master_weights.size());
    std::unique_ptr<LossScaler> scratch;
    if (dynamic) {
      scratch = std::make_unique<DynamicLossScaler>();
    } else {
      scratch = std::make_unique<LossScaler>();
    }
    scratch->load_state_dict(state.loss_scaler);  // its checks; the handle's scaler is untouched
  }
}

void AmpHandle::load_checkpoint_state(const AmpHandleState& state) {
  check_checkpoint_state(state);
  if (masters_) {
    masters_->load_scaler_and_masters(masters_->dynamic_loss_scale(), state.loss_scaler,
                                      state.master_weights, state.overflow);
  } else {
    loss_scaler_->load_state_dict(state.loss_scaler);
  }
}

AmpHandle initialize(nn::Module& model, optim::Optimizer& optimizer, OptLevel opt_level,
                     const InitializeOptions& options) {
  return AmpHandle(model, optimizer, resolve_opt_level(opt_level, options));
}

AmpHandle initialize(nn::Module& model, optim::Optimizer& optimizer, std::string_view opt_level,
                     const InitializeOptions& options) {
  return initialize(model, optimizer, opt_level_from_string(opt_level), options);
}

}  // namespace hg::amp
