// More of torch.nn's layers (layers.h).
#include "halfgrad/nn/layers.h"

#include <cmath>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/nn/init.h"
#include "halfgrad/ops/activation.h"
#include "halfgrad/ops/conv.h"
#include "halfgrad/ops/norm.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/pool.h"

namespace hg::nn {

using detail::py_bool;

namespace {

// A pair as torch prints a size argument: (2, 3).
std::string pair(std::array<int64_t, 2> v) { return fmt::format("({}, {})", v[0], v[1]); }
// A pooling size as torch prints the usual int argument: 2 for (2, 2), else the pair.
std::string pool_size(std::array<int64_t, 2> v) {
  return v[0] == v[1] ? std::to_string(v[0]) : pair(v);
}

}  // namespace

std::string Flatten::extra_repr() const {
  return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim);
}

std::string Unflatten::extra_repr() const {
  std::string sizes_text = "(";
  for (size_t i = 0; i < sizes.size(); ++i) {
    sizes_text += std::to_string(sizes[i]) + (i + 1 < sizes.size() ? ", " : "");
  }
  if (sizes.size() == 1) sizes_text += ",";
  return fmt::format("dim={}, unflattened_size={})", dim, sizes_text);
}

std::string Softmax::extra_repr() const { return fmt::format("dim={}", dim); }
Tensor Softmax::forward(const Tensor& input) { return softmax(input, dim); }
std::string Softmin::extra_repr() const { return fmt::format("dim={}", dim); }
Tensor Softmin::forward(const Tensor& input) { return softmin(input, dim); }
std::string LogSoftmax::extra_repr() const { return fmt::format("dim={}", dim); }
Tensor LogSoftmax::forward(const Tensor& input) { return log_softmax(input, dim); }

Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }

std::string LeakyReLU::extra_repr() const {
  return fmt::format("negative_slope={}", negative_slope);
}
Tensor LeakyReLU::forward(const Tensor& input) { return leaky_relu(input, negative_slope); }

std::string ELU::extra_repr() const { return fmt::format("alpha={}", alpha); }
Tensor ELU::forward(const Tensor& input) { return elu(input, alpha); }

Tensor Mish::forward(const Tensor& input) { return mish(input); }
Tensor Hardswish::forward(const Tensor& input) { return hardswish(input); }

// ---- pooling --------------------------------------------------------------------------------

MaxPool2d::MaxPool2d(ExpandingArray<2> kernel_size_, Pool2dOptions options_)
    : kernel_size(*kernel_size_), options(options_) {}

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}",
                     pool_size(kernel_size), pool_size(options.stride.value_or(kernel_size)),
                     pool_size(options.padding), pool_size(options.dilation),
                     py_bool(options.ceil_mode));
}

Tensor MaxPool2d::forward(const Tensor& input) {
  return max_pool2d(input, kernel_size, options.stride.value_or(kernel_size), options.padding,
                    options.dilation, options.ceil_mode);
}

AvgPool2d::AvgPool2d(ExpandingArray<2> kernel_size_, Pool2dOptions options_)
    : kernel_size(*kernel_size_), options(options_) {}

std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", pool_size(kernel_size),
                     pool_size(options.stride.value_or(kernel_size)), pool_size(options.padding));
}

Tensor AvgPool2d::forward(const Tensor& input) {
  return avg_pool2d(input, kernel_size, options.stride.value_or(kernel_size), options.padding,
                    options.ceil_mode, options.count_include_pad, options.divisor_override);
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return fmt::format("output_size={}", pool_size(output_size));
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& input) {
  return adaptive_avg_pool2d(input, output_size);
}

// ---- convolutions ---------------------------------------------------------------------------

namespace {

void check_groups(const char* layer, int64_t in_channels, int64_t out_channels, int64_t groups) {
  HG_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0,
           "{}: expected in_channels ({}) and out_channels ({}) divisible by groups ({})", layer,
           in_channels, out_channels, groups);
}

}  // namespace

Conv1d::Conv1d(int64_t in_channels_, int64_t out_channels_, int64_t kernel_size_,
               Conv1dOptions options_)
    : in_channels(in_channels_),
      out_channels(out_channels_),
      kernel_size(kernel_size_),
      options(options_) {
  check_groups("Conv1d", in_channels, out_channels, options.groups);
  weight = register_parameter("weight",
                              empty({out_channels, in_channels / options.groups, kernel_size}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  detail::reset_conv_parameters(weight, bias);
}

std::string Conv1d::extra_repr() const {
  std::string out = fmt::format("{}, {}, kernel_size=({},), stride=({},)", in_channels,
                                out_channels, kernel_size, options.stride);
  if (options.padding != 0) out += fmt::format(", padding=({},)", options.padding);
  if (options.dilation != 1) out += fmt::format(", dilation=({},)", options.dilation);
  if (options.groups != 1) out += fmt::format(", groups={}", options.groups);
  if (!options.bias) out += ", bias=False";
  return out;
}

Tensor Conv1d::forward(const Tensor& input) {
  return conv1d(input, weight, bias, options.stride, options.padding, options.dilation,
                options.groups);
}

ConvTranspose2d::ConvTranspose2d(int64_t in_channels_, int64_t out_channels_,
                                 ExpandingArray<2> kernel_size_,
                                 ConvTranspose2dOptions options_)
    : in_channels(in_channels_),
      out_channels(out_channels_),
      kernel_size(*kernel_size_),
      options(options_) {
  check_groups("ConvTranspose2d", in_channels, out_channels, options.groups);
  weight = register_parameter("weight", empty({in_channels, out_channels / options.groups,
                                               kernel_size[0], kernel_size[1]}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  detail::reset_conv_parameters(weight, bias);
}

std::string ConvTranspose2d::extra_repr() const {
  std::string out = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels,
                                pair(kernel_size), pair(options.stride));
  if (options.padding != 0) {
    out += ", padding=" + pair(options.padding);
  }
  if (options.output_padding != 0) {
    out += ", output_padding=" + pair(options.output_padding);
  }
  if (options.dilation != 1) {
    out += ", dilation=" + pair(options.dilation);
  }
  if (options.groups != 1) out += fmt::format(", groups={}", options.groups);
  if (!options.bias) out += ", bias=False";
  return out;
}

Tensor ConvTranspose2d::forward(const Tensor& input) {
  return conv_transpose2d(input, weight, bias, options.stride, options.padding,
                          options.output_padding, options.groups, options.dilation);
}

void BatchNorm1d::check_input(const Tensor& input) const {
  HG_CHECK(input.dim() == 2 || input.dim() == 3,
           "BatchNorm1d: expected a 2-D [N, C] or 3-D [N, C, L] input, got shape {}",
           input.sizes());
}

Bilinear::Bilinear(int64_t in1, int64_t in2, int64_t out, bool with_bias)
    : in1_features(in1), in2_features(in2), out_features(out) {
  HG_CHECK(in1 > 0 && in2 > 0 && out >= 0,
           "Bilinear: expected positive in1_features and in2_features and out_features >= 0, "
           "got {}, {} and {}",
           in1, in2, out);
  weight = register_parameter("weight", empty({out, in1, in2}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Bilinear::reset_parameters() {
  const double bound = 1.0 / std::sqrt(double(in1_features));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

std::string Bilinear::extra_repr() const {
  return fmt::format("in1_features={}, in2_features={}, out_features={}, bias={}", in1_features,
                     in2_features, out_features, py_bool(bias.defined()));
}

Tensor Bilinear::forward(const Tensor& input1, const Tensor& input2) {
  return bilinear(input1, input2, weight, bias);
}

Tensor PairwiseDistance::forward(const Tensor& x1, const Tensor& x2) {
  return pairwise_distance(x1, x2, p, eps, keepdim);
}

}  // namespace hg::nn
