// More of torch.nn's layers: Identity, Flatten, Unflatten, Softmax, Softmin, LogSoftmax,
// Sigmoid, LeakyReLU, ELU, Mish, Hardswish, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Conv1d,
// ConvTranspose2d, BatchNorm1d, Bilinear, PairwiseDistance. Arguments, defaults, parameter names,
// shapes and initialisation follow torch.nn, so state dicts map one to one.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "halfgrad/core/expanding_array.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/nn/modules.h"

namespace hg::nn {

class Identity : public Module {
 public:
  std::string name() const override { return "Identity"; }
  Tensor forward(const Tensor& input) override { return input; }
};

// Flattens dims start_dim..end_dim into one (torch's default start_dim 1 keeps the batch).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim(start_dim), end_dim(end_dim) {}
  std::string name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override { return input.flatten(start_dim, end_dim); }
  int64_t start_dim, end_dim;
};

// Splits dim into `sizes` (their product must be the dim's size).
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, Shape sizes) : dim(dim), sizes(std::move(sizes)) {}
  std::string name() const override { return "Unflatten"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override { return input.unflatten(dim, sizes); }
  int64_t dim;
  Shape sizes;
};

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  std::string name() const override { return "Softmax"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  int64_t dim;
};

class Softmin : public Module {
 public:
  explicit Softmin(int64_t dim) : dim(dim) {}
  std::string name() const override { return "Softmin"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  int64_t dim;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  std::string name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  int64_t dim;
};

class Sigmoid : public Module {
 public:
  std::string name() const override { return "Sigmoid"; }
  Tensor forward(const Tensor& input) override;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  std::string name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  double negative_slope;
};

class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}
  std::string name() const override { return "ELU"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  double alpha;
};

class Mish : public Module {
 public:
  std::string name() const override { return "Mish"; }
  Tensor forward(const Tensor& input) override;
};

class Hardswish : public Module {
 public:
  std::string name() const override { return "Hardswish"; }
  Tensor forward(const Tensor& input) override;
};

// One number stands for both dims: {.stride = 1} is stride (1, 1) (NOTE [Expanding sizes]).
struct Pool2dOptions {
  std::optional<ExpandingArray<2>> stride = std::nullopt;  // none: the kernel size, as torch's
  ExpandingArray<2> padding = 0;
  ExpandingArray<2> dilation = 1;  // MaxPool2d only
  bool ceil_mode = false;
  bool count_include_pad = true;                           // AvgPool2d only
  std::optional<int64_t> divisor_override = std::nullopt;  // AvgPool2d only
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(ExpandingArray<2> kernel_size, Pool2dOptions options = {});
  std::string name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  std::array<int64_t, 2> kernel_size;
  Pool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(ExpandingArray<2> kernel_size, Pool2dOptions options = {});
  std::string name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  std::array<int64_t, 2> kernel_size;
  Pool2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(ExpandingArray<2> output_size) : output_size(*output_size) {}
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  std::array<int64_t, 2> output_size;
};

struct Conv1dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

// x [N, C, L]. weight [out_channels, in_channels / groups, kernel_size] ~ kaiming_uniform(a =
// sqrt(5)); bias [out_channels] ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as Conv2d.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
         Conv1dOptions options = {});
  std::string name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  int64_t in_channels, out_channels, kernel_size;
  Conv1dOptions options;
  Tensor weight, bias;
};

// One number stands for both dims (NOTE [Expanding sizes]).
struct ConvTranspose2dOptions {
  ExpandingArray<2> stride = 1;
  ExpandingArray<2> padding = 0;
  ExpandingArray<2> output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  ExpandingArray<2> dilation = 1;
};

// weight [in_channels, out_channels / groups, kH, kW] (torch's transposed layout), initialised
// as Conv2d's from that weight's fans.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
                  ConvTranspose2dOptions options = {});
  std::string name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  int64_t in_channels, out_channels;
  std::array<int64_t, 2> kernel_size;
  ConvTranspose2dOptions options;
  Tensor weight, bias;
};

// x [N, C] or [N, C, L]: per feature C, as BatchNorm2d.
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {}
  std::string name() const override { return "BatchNorm1d"; }

 protected:
  void check_input(const Tensor& input) const override;
};

// y = x1^T A x2 + b per output feature (bilinear): weight [out_features, in1_features,
// in2_features] and bias [out_features], both ~ U(-1/sqrt(in1), 1/sqrt(in1)) as torch's.
class Bilinear : public CustomForward<Bilinear> {
 public:
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias = true);
  std::string name() const override { return "Bilinear"; }
  std::string extra_repr() const override;
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  Tensor forward(const Tensor& input1, const Tensor& input2);
#pragma GCC diagnostic pop
  void reset_parameters();

  int64_t in1_features, in2_features, out_features;
  Tensor weight, bias;  // bias undefined when bias = false
};

// pairwise_distance(x1, x2, p, eps, keepdim) of the rows.
class PairwiseDistance : public CustomForward<PairwiseDistance> {
 public:
  explicit PairwiseDistance(double p = 2.0, double eps = 1e-6, bool keepdim = false)
      : p(p), eps(eps), keepdim(keepdim) {}
  std::string name() const override { return "PairwiseDistance"; }
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  Tensor forward(const Tensor& x1, const Tensor& x2);
#pragma GCC diagnostic pop
  double p, eps;
  bool keepdim;
};

}  // namespace hg::nn
