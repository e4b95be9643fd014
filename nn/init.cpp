// nn::init (init.h): in-place initialisers, fans and gains, as torch.nn.init.
#include "halfgrad/nn/init.h"

#include <cmath>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"

namespace hg::nn::init {

namespace {

void check_floating(const Tensor& tensor, const char* what) {
  HG_CHECK(tensor.defined(), "nn::init::{}: expected a defined tensor, got an undefined one", what);
  HG_CHECK(tensor.is_floating_point(), "nn::init::{}: expected a floating tensor, got {}", what,
           dtype_name(tensor.dtype()));
}

// Draws into a contiguous CPU tensor of the same dtype and copies it in, so that strided
// tensors (and, later, CUDA ones) get the same numbers as a contiguous CPU tensor would.
template <class Fill>
Tensor& fill_from(Tensor& tensor, Fill fill) {
  Tensor drawn = empty(tensor.sizes(), TensorOptions{.dtype = tensor.dtype()});
  fill(drawn.data_ptr(), drawn.numel());
  NoGradGuard no_grad;
  tensor.copy_(drawn);
  return tensor;
}

int64_t fan_for_mode(const Tensor& tensor, std::string_view mode) {
  const Fans fans = calculate_fan_in_and_fan_out(tensor);
  HG_CHECK(mode == "fan_in" || mode == "fan_out",
           "nn::init: expected mode \"fan_in\" or \"fan_out\", got \"{}\"", mode);
  const int64_t fan = mode == "fan_in" ? fans.fan_in : fans.fan_out;
  HG_CHECK(fan > 0, "nn::init: expected a tensor with {} > 0, got shape {}", mode, tensor.sizes());
  return fan;
}

}  // namespace

double calculate_gain(std::string_view nonlinearity, std::optional<double> param) {
  if (nonlinearity == "linear" || nonlinearity == "conv1d" || nonlinearity == "conv2d" ||
      nonlinearity == "conv3d" || nonlinearity == "conv_transpose1d" ||
      nonlinearity == "conv_transpose2d" || nonlinearity == "conv_transpose3d" ||
      nonlinearity == "sigmoid") {
    return 1.0;
  }
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 3.0 / 4.0;
  HG_ERROR(
      "nn::init::calculate_gain: expected linear, conv1d/2d/3d, conv_transpose1d/2d/3d, "
      "sigmoid, tanh, relu, leaky_relu or selu, got \"{}\"",
      nonlinearity);
}

Fans calculate_fan_in_and_fan_out(const Tensor& tensor) {
  HG_CHECK(tensor.dim() >= 2,
           "nn::init: fan in and fan out need a tensor of at least 2 dims, got shape {}",
           tensor.sizes());
  int64_t receptive_field = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive_field *= tensor.size(d);
  return Fans{tensor.size(1) * receptive_field, tensor.size(0) * receptive_field};
}

Tensor& uniform_(Tensor& tensor, double a, double b, Generator* generator) {
  check_floating(tensor, "uniform_");
  HG_CHECK(a < b, "nn::init::uniform_: expected a < b, got a = {}, b = {}", a, b);
  Generator& gen = generator ? *generator : default_generator();
  return fill_from(tensor, [&](void* data, int64_t n) {
    random::fill_uniform(tensor.dtype(), data, n, a, b, gen);
  });
}

Tensor& normal_(Tensor& tensor, double mean, double std, Generator* generator) {
  check_floating(tensor, "normal_");
  HG_CHECK(std >= 0, "nn::init::normal_: expected std >= 0, got {}", std);
  Generator& gen = generator ? *generator : default_generator();
  return fill_from(tensor, [&](void* data, int64_t n) {
    random::fill_normal(tensor.dtype(), data, n, mean, std, gen);
  });
}

Tensor& constant_(Tensor& tensor, double value) {
  HG_CHECK(tensor.defined(), "nn::init::constant_: expected a defined tensor");
  NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}

Tensor& zeros_(Tensor& tensor) { return constant_(tensor, 0.0); }
Tensor& ones_(Tensor& tensor) { return constant_(tensor, 1.0); }

Tensor& xavier_uniform_(Tensor& tensor, double gain, Generator* generator) {
  const Fans fans = calculate_fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / double(fans.fan_in + fans.fan_out));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(tensor, -bound, bound, generator);
}

Tensor& xavier_normal_(Tensor& tensor, double gain, Generator* generator) {
  const Fans fans = calculate_fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / double(fans.fan_in + fans.fan_out));
  return normal_(tensor, 0.0, std, generator);
}

Tensor& kaiming_uniform_(Tensor& tensor, double a, std::string_view mode,
                         std::string_view nonlinearity, Generator* generator) {
  const int64_t fan = fan_for_mode(tensor, mode);
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(double(fan));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(tensor, -bound, bound, generator);
}

Tensor& kaiming_normal_(Tensor& tensor, double a, std::string_view mode,
                        std::string_view nonlinearity, Generator* generator) {
  const int64_t fan = fan_for_mode(tensor, mode);
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(double(fan));
  return normal_(tensor, 0.0, std, generator);
}

}  // namespace hg::nn::init
