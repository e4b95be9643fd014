// The standard layers (modules.h): Linear, LayerNorm, Embedding, Dropout, the activations,
// Sequential, Conv2d, GroupNorm, BatchNorm2d.
#include "halfgrad/nn/modules.h"

#include <cmath>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/nn/init.h"
#include "halfgrad/ops/ops.h"

namespace hg::nn {

using detail::py_bool;

// ---- Linear ---------------------------------------------------------------------------------

Linear::Linear(int64_t in_features_, int64_t out_features_, bool with_bias)
    : in_features(in_features_), out_features(out_features_) {
  HG_CHECK(in_features >= 0 && out_features >= 0,
           "Linear: expected non-negative in_features and out_features, got {} and {}", in_features,
           out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", empty({out_features}));
  reset_parameters();
}

void Linear::reset_parameters() {
  // kaiming_uniform(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / in_features)
  // = 1 / sqrt(in_features); PyTorch's default, kept so that statistics match.
  if (in_features > 0) {
    init::kaiming_uniform_(weight, std::sqrt(5.0));
  } else {
    init::zeros_(weight);
  }
  if (bias.defined()) {
    if (in_features > 0) {
      const double bound = 1.0 / std::sqrt(double(in_features));
      init::uniform_(bias, -bound, bound);
    } else {
      init::zeros_(bias);
    }
  }
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features,
                     py_bool(bias.defined()));
}

Tensor Linear::forward(const Tensor& input) { return linear(input, weight, bias); }

// ---- LayerNorm ------------------------------------------------------------------------------

LayerNorm::LayerNorm(Shape normalized_shape_, double eps_, bool elementwise_affine, bool with_bias)
    : normalized_shape(std::move(normalized_shape_)), eps(eps_) {
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    if (with_bias) bias = register_parameter("bias", zeros(normalized_shape));
  }
}

std::string LayerNorm::extra_repr() const {
  std::string shape = "(";
  for (size_t i = 0; i < normalized_shape.size(); ++i) {
    shape += std::to_string(normalized_shape[i]) + (normalized_shape.size() == 1 ? "," : "");
    if (i + 1 < normalized_shape.size()) shape += ", ";
  }
  return fmt::format("{}), eps={}, elementwise_affine={}", shape, eps, py_bool(weight.defined()));
}

Tensor LayerNorm::forward(const Tensor& input) {
  return layer_norm(input, normalized_shape, weight, bias, eps);
}

// ---- Embedding ------------------------------------------------------------------------------

Embedding::Embedding(int64_t num_embeddings_, int64_t embedding_dim_,
                     std::optional<int64_t> padding_idx_)
    : num_embeddings(num_embeddings_), embedding_dim(embedding_dim_) {
  if (padding_idx_) {
    const int64_t index = *padding_idx_ < 0 ? *padding_idx_ + num_embeddings : *padding_idx_;
    HG_CHECK(index >= 0 && index < num_embeddings,
             "Embedding: expected padding_idx in [-{}, {}), got {}", num_embeddings, num_embeddings,
             *padding_idx_);
    padding_idx = index;
  }
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight);
  if (padding_idx) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx).zero_();
  }
}

std::string Embedding::extra_repr() const {
  std::string out = fmt::format("{}, {}", num_embeddings, embedding_dim);
  if (padding_idx) out += fmt::format(", padding_idx={}", *padding_idx);
  return out;
}

Tensor Embedding::forward(const Tensor& indices) {
  return embedding(weight, indices, padding_idx.value_or(-1));
}

// ---- Dropout and activations ----------------------------------------------------------------

Dropout::Dropout(double p_) : p(p_) {
  HG_CHECK(p >= 0.0 && p <= 1.0, "Dropout: expected p in [0, 1], got {}", p);
}
std::string Dropout::extra_repr() const { return fmt::format("p={}, inplace=False", p); }
Tensor Dropout::forward(const Tensor& input) { return dropout(input, p, is_training()); }

Tensor ReLU::forward(const Tensor& input) { return relu(input); }

GELU::GELU(std::string approximate_) : approximate(std::move(approximate_)) {
  HG_CHECK(approximate == "none" || approximate == "tanh",
           "GELU: expected approximate \"none\" or \"tanh\", got \"{}\"", approximate);
}
std::string GELU::extra_repr() const { return fmt::format("approximate='{}'", approximate); }
Tensor GELU::forward(const Tensor& input) { return gelu(input, approximate); }

Tensor SiLU::forward(const Tensor& input) { return silu(input); }
Tensor Tanh::forward(const Tensor& input) { return tanh(input); }

// ---- Sequential -----------------------------------------------------------------------------

Tensor Sequential::forward(const Tensor& input) {
  return forward_args(Args{input}).tensor("Sequential output");
}

Value Sequential::forward_args(const Args& args) {
  if (child_entries().empty()) {
    HG_CHECK(args.size() == 1,
             "Sequential.forward: an empty Sequential expected one argument, "
             "got {} {}",
             args.size(), describe(args));
    return args[0];
  }
  Args next = args;
  for (const auto& entry : child_entries()) next = Args{entry.second->call(std::move(next))};
  return std::move(next[0]);
}

// ---- Conv2d ---------------------------------------------------------------------------------

Conv2d::Conv2d(int64_t in_channels_, int64_t out_channels_, ExpandingArray<2> kernel_size_,
               Conv2dOptions options_)
    : in_channels(in_channels_),
      out_channels(out_channels_),
      kernel_size(*kernel_size_),
      options(options_) {
  HG_CHECK(
      options.groups > 0 && in_channels % options.groups == 0 && out_channels % options.groups == 0,
      "Conv2d: expected in_channels ({}) and out_channels ({}) divisible by groups ({})",
      in_channels, out_channels, options.groups);
  weight = register_parameter("weight", empty({out_channels, in_channels / options.groups,
                                               kernel_size[0], kernel_size[1]}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  detail::reset_conv_parameters(weight, bias);
}

void detail::reset_conv_parameters(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (!bias.defined()) return;
  const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).fan_in;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
  if (bound > 0) {
    init::uniform_(bias, -bound, bound);
  } else {
    init::zeros_(bias);
  }
}

std::string Conv2d::extra_repr() const {
  std::string out =
      fmt::format("{}, {}, kernel_size=({}, {}), stride=({}, {})", in_channels, out_channels,
                  kernel_size[0], kernel_size[1], options.stride[0], options.stride[1]);
  if (options.padding != 0) {
    out += fmt::format(", padding=({}, {})", options.padding[0], options.padding[1]);
  }
  if (options.dilation != 1) {
    out += fmt::format(", dilation=({}, {})", options.dilation[0], options.dilation[1]);
  }
  if (options.groups != 1) out += fmt::format(", groups={}", options.groups);
  if (!options.bias) out += ", bias=False";
  return out;
}

Tensor Conv2d::forward(const Tensor& input) {
  return conv2d(input, weight, bias, options.stride, options.padding, options.dilation,
                options.groups);
}

// ---- GroupNorm ------------------------------------------------------------------------------

GroupNorm::GroupNorm(int64_t num_groups_, int64_t num_channels_, double eps_, bool affine)
    : num_groups(num_groups_), num_channels(num_channels_), eps(eps_) {
  HG_CHECK(num_groups > 0 && num_channels % num_groups == 0,
           "GroupNorm: expected num_channels ({}) divisible by num_groups ({})", num_channels,
           num_groups);
  if (affine) {
    weight = register_parameter("weight", ones({num_channels}));
    bias = register_parameter("bias", zeros({num_channels}));
  }
}

std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups, num_channels, eps,
                     py_bool(weight.defined()));
}

Tensor GroupNorm::forward(const Tensor& input) {
  return group_norm(input, num_groups, weight, bias, eps);
}

// ---- BatchNorm2d ----------------------------------------------------------------------------

BatchNormBase::BatchNormBase(int64_t num_features_, double eps_, double momentum_, bool affine,
                             bool track_running_stats_)
    : num_features(num_features_),
      eps(eps_),
      momentum(momentum_),
      track_running_stats(track_running_stats_) {
  if (affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

std::string BatchNormBase::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features,
                     eps, momentum, py_bool(weight.defined()), py_bool(track_running_stats));
}

Tensor BatchNormBase::forward(const Tensor& input) {
  check_input(input);
  // Batch statistics while training, or always when there are no running statistics.
  const bool use_batch_stats = is_training() || !track_running_stats;
  if (is_training() && track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return batch_norm(input, running_mean, running_var, weight, bias, use_batch_stats, momentum, eps);
}

void BatchNorm2d::check_input(const Tensor& input) const {
  HG_CHECK(input.dim() == 4, "BatchNorm2d: expected a 4-D input [B, C, H, W], got shape {}",
           input.sizes());
}

}  // namespace hg::nn
