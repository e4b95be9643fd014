// nn::init: in-place parameter initialisation, as torch.nn.init.
//
//   nn::init::kaiming_uniform_(linear.weight, std::sqrt(5.0));
//   nn::init::normal_(embedding.weight, 0.0, 0.02);
//
// Every function fills the tensor in place under NoGradGuard (so a parameter that requires
// grad can be initialised), draws from `generator` (nullptr: default_generator()), and returns
// the tensor. Fans follow torch.nn.init._calculate_fan_in_and_fan_out: for a weight of shape
// [O, I, k...], fan_in = I * prod(k), fan_out = O * prod(k).
#pragma once

#include <optional>
#include <string_view>

#include "halfgrad/core/random.h"
#include "halfgrad/core/tensor.h"

namespace hg::nn::init {

// The recommended gain for a nonlinearity: linear, conv*, sigmoid -> 1; tanh -> 5/3;
// relu -> sqrt(2); leaky_relu -> sqrt(2 / (1 + slope^2)) (slope: param, default 0.01);
// selu -> 3/4.
double calculate_gain(std::string_view nonlinearity, std::optional<double> param = std::nullopt);

struct Fans {
  int64_t fan_in;
  int64_t fan_out;
};
// Needs a tensor of at least 2 dims.
Fans calculate_fan_in_and_fan_out(const Tensor& tensor);

Tensor& uniform_(Tensor& tensor, double a = 0.0, double b = 1.0, Generator* generator = nullptr);
Tensor& normal_(Tensor& tensor, double mean = 0.0, double std = 1.0,
                Generator* generator = nullptr);
Tensor& constant_(Tensor& tensor, double value);
Tensor& zeros_(Tensor& tensor);
Tensor& ones_(Tensor& tensor);

// U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& tensor, double gain = 1.0, Generator* generator = nullptr);
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& tensor, double gain = 1.0, Generator* generator = nullptr);
// U(-b, b), b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a); mode "fan_in"
// or "fan_out".
Tensor& kaiming_uniform_(Tensor& tensor, double a = 0.0, std::string_view mode = "fan_in",
                         std::string_view nonlinearity = "leaky_relu",
                         Generator* generator = nullptr);
// N(0, std^2), std = gain / sqrt(fan).
Tensor& kaiming_normal_(Tensor& tensor, double a = 0.0, std::string_view mode = "fan_in",
                        std::string_view nonlinearity = "leaky_relu",
                        Generator* generator = nullptr);

// N(mean, std^2) truncated to [a, b], by torch's method: a uniform draw between the normal CDF's
// values at a and b, mapped back through the inverse CDF (computed in float64, rounded once to
// the tensor's dtype), then clamped to [a, b]. Expects std > 0 and a < b.
Tensor& trunc_normal_(Tensor& tensor, double mean = 0.0, double std = 1.0, double a = -2.0,
                      double b = 2.0, Generator* generator = nullptr);
// A (semi-)orthogonal matrix times gain, as torch's orthogonal_: the tensor viewed as
// [size(0), numel / size(0)] gets orthonormal rows or columns (whichever are fewer), from the
// QR factorisation of a standard normal draw with R's diagonal made positive (in float64).
// Needs at least 2 dims.
Tensor& orthogonal_(Tensor& tensor, double gain = 1.0, Generator* generator = nullptr);

}  // namespace hg::nn::init
