// nn::init (init.h): in-place initialisers, fans and gains, as torch.nn.init.
#include "halfgrad/nn/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/ops.h"

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

// The n x m float64 matrix whose column j is q[j * n, (j + 1) * n).
Tensor tensor_from_columns(const std::vector<double>& q, int64_t n, int64_t m) {
  return tensor(q, {m, n}, kFloat64).t().contiguous();
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

Tensor& trunc_normal_(Tensor& tensor, double mean, double std, double a, double b,
                      Generator* generator) {
  check_floating(tensor, "trunc_normal_");
  HG_CHECK(std > 0 && a < b,
           "nn::init::trunc_normal_: expected std > 0 and a < b, got std = {}, a = {}, b = {}", std,
           a, b);
  const auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  const double low = 2.0 * cdf((a - mean) / std) - 1.0, high = 2.0 * cdf((b - mean) / std) - 1.0;
  Generator& gen = generator ? *generator : default_generator();
  Tensor u = empty(tensor.sizes(), kFloat64);
  random::fill_uniform(kFloat64, u.data_ptr(), u.numel(), low, high, gen);
  NoGradGuard no_grad;
  const Tensor drawn = clamp(add(mul(erfinv(u), std * std::sqrt(2.0)), mean), a, b);
  tensor.copy_(drawn);
  return tensor;
}

Tensor& orthogonal_(Tensor& tensor, double gain, Generator* generator) {
  check_floating(tensor, "orthogonal_");
  HG_CHECK(tensor.dim() >= 2, "nn::init::orthogonal_: expected at least 2 dims, got shape {}",
           tensor.sizes());
  if (tensor.numel() == 0) return tensor;
  const int64_t rows = tensor.size(0), cols = tensor.numel() / rows;
  // Orthonormalise the longer side's vectors: the n = max(rows, cols) long columns of an
  // n x m matrix (m = min), by modified Gram-Schmidt run twice (enough for float64 to stay
  // orthogonal to rounding), which gives R a positive diagonal as torch's sign fix does.
  const int64_t n = std::max(rows, cols), m = std::min(rows, cols);
  Generator& gen = generator ? *generator : default_generator();
  std::vector<double> q(size_t(n * m));  // column j at q[j * n ...]
  random::fill_normal(kFloat64, q.data(), n * m, 0.0, 1.0, gen);
  for (int64_t j = 0; j < m; ++j) {
    double* v = q.data() + j * n;
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t k = 0; k < j; ++k) {
        const double* e = q.data() + k * n;
        double dot = 0;
        for (int64_t i = 0; i < n; ++i) dot += e[i] * v[i];
        for (int64_t i = 0; i < n; ++i) v[i] -= dot * e[i];
      }
    }
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) norm += v[i] * v[i];
    norm = std::sqrt(norm);
    HG_CHECK(norm > 0, "nn::init::orthogonal_: the normal draw was rank deficient");
    for (int64_t i = 0; i < n; ++i) v[i] /= norm;
  }
  for (double& value : q) value *= gain;
  // The columns are the matrix's columns when rows >= cols, its rows otherwise.
  Tensor columns = tensor_from_columns(q, n, m);
  Tensor matrix = rows >= cols ? columns : columns.t();
  NoGradGuard no_grad;
  tensor.copy_(matrix.reshape(tensor.sizes()));
  return tensor;
}

}  // namespace hg::nn::init
