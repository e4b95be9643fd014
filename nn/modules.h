// The standard layers: Linear, LayerNorm, Embedding, Dropout, the activations, Sequential,
// Conv2d, GroupNorm, BatchNorm2d. Parameter names, layouts and initialisation follow
// torch.nn, so state dicts map one to one.
//
//   B batch, C channels / features, H, W image height and width.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "halfgrad/core/expanding_array.h"
#include "halfgrad/nn/containers.h"
#include "halfgrad/nn/module.h"

namespace hg::nn {

// y = x W^T + b. weight [out_features, in_features] ~ kaiming_uniform(a = sqrt(5)), i.e.
// U(-1/sqrt(in), 1/sqrt(in)); bias [out_features] ~ U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  void reset_parameters();

  int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined when bias = false
};

// Normalises over the trailing dims normalized_shape; weight ones, bias zeros.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, bias) {}
  std::string name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;

  Shape normalized_shape;
  double eps;
  Tensor weight, bias;
};

// A lookup table: weight [num_embeddings, embedding_dim] ~ N(0, 1); the row padding_idx (when
// given; negative counts from the end) starts at zero and gets no gradient.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt);
  std::string name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& indices) override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;
  Tensor weight;
};

// Zeroes elements with probability p while training (scaling the rest by 1/(1-p)); the
// identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  double p;
};

class ReLU : public Module {
 public:
  std::string name() const override { return "ReLU"; }
  Tensor forward(const Tensor& input) override;
};

// approximate: "none" (erf) or "tanh".
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  std::string name() const override { return "GELU"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  std::string approximate;
};

class SiLU : public Module {
 public:
  std::string name() const override { return "SiLU"; }
  Tensor forward(const Tensor& input) override;
};

class Tanh : public Module {
 public:
  std::string name() const override { return "Tanh"; }
  Tensor forward(const Tensor& input) override;
};

// A ModuleList that runs its children in order; they are named "0", "1", ... (so keys are
// "0.weight").
//
//   nn::Sequential mlp(nn::Linear(4, 8), nn::GELU(), std::make_shared<nn::Linear>(8, 2));
//
// Arguments are module values (moved into a new shared_ptr) or shared_ptrs to modules (held
// as they are).
// The modules given to one constructor call are made in the order the compiler evaluates
// arguments (GCC: last first), and so draw their random initial weights in that order; for the
// same weights with every compiler, write nn::Sequential{a, b, c} (a braced list is evaluated
// left to right) or append one module per statement.
class Sequential : public ModuleList {
 public:
  Sequential() = default;
  template <class... Modules>
  requires(sizeof...(Modules) > 0 &&
           !(sizeof...(Modules) == 1 && (std::is_same_v<std::remove_cvref_t<Modules>, Sequential> &&
                                         ...))) explicit Sequential(Modules&&... modules) {
    (append(std::forward<Modules>(modules)), ...);
  }

  std::string name() const override { return "Sequential"; }
  // Calls the modules in order, each with the previous one's result (the first with the
  // arguments), hooks included; a module may take or return anything (a tuple from an LSTM
  // goes on as one tuple argument, as torch's Sequential passes it). An empty Sequential
  // returns its one argument.
  Tensor forward(const Tensor& input) override;
  Value forward_args(const Args& args) override;

  // libtorch's name for append.
  template <class M>
  void push_back(M&& module) {
    append(std::forward<M>(module));
  }
};

namespace detail {
// torch's _ConvNd.reset_parameters: weight ~ kaiming_uniform(a = sqrt(5)); bias (when defined)
// ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the weight's fan_in.
void reset_conv_parameters(Tensor& weight, Tensor& bias);
}  // namespace detail

// One number stands for both dims: {.padding = 1} is padding (1, 1) (NOTE [Expanding sizes]).
struct Conv2dOptions {
  ExpandingArray<2> stride = 1;
  ExpandingArray<2> padding = 0;
  ExpandingArray<2> dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// weight [out_channels, in_channels / groups, kH, kW] ~ kaiming_uniform(a = sqrt(5)); bias
// [out_channels] ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_channels / groups * kH * kW.
// Padding is zeros.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
         Conv2dOptions options = {});
  std::string name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;

  int64_t in_channels, out_channels;
  std::array<int64_t, 2> kernel_size;
  Conv2dOptions options;
  Tensor weight, bias;
};

// weight ones, bias zeros, both [num_channels] (when affine).
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  std::string name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;

  int64_t num_groups, num_channels;
  double eps;
  Tensor weight, bias;
};

// The batch norms' parameters, buffers and forward (torch's _BatchNorm); a subclass names
// itself and checks its input's dims. Training: batch statistics, and (track_running_stats)
// the buffers running_mean / running_var move by momentum and num_batches_tracked counts the
// batches. Eval: the running statistics. Buffers: running_mean zeros, running_var ones
// (float32), num_batches_tracked int64 0.
class BatchNormBase : public Module {
 public:
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;

  int64_t num_features;
  double eps, momentum;
  bool track_running_stats;
  Tensor weight, bias;
  Tensor running_mean, running_var, num_batches_tracked;

 protected:
  BatchNormBase(int64_t num_features, double eps, double momentum, bool affine,
                bool track_running_stats);
  virtual void check_input(const Tensor& input) const = 0;
};

// x [B, C, H, W].
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {}
  std::string name() const override { return "BatchNorm2d"; }

 protected:
  void check_input(const Tensor& input) const override;
};

}  // namespace hg::nn
