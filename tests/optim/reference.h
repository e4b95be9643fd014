// Shared by the optimizer tests: seeded inputs, rounding to a storage dtype, and float64
// references of PyTorch's SGD, Adam/AdamW, RMSprop and Adagrad formulas written out element by
// element.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "halfgrad/halfgrad.h"
#include "halfgrad/optim/optim.h"

namespace optim_test {

using Values = std::vector<double>;

// x rounded to the nearest value of `dtype` (what storing it in a tensor of that dtype does).
inline double round_to(hg::DType dtype, double x) {
  switch (dtype) {
    case hg::kFloat32:
      return double(float(x));
    case hg::kFloat16:
      return double(hg::Half(x));
    case hg::kBFloat16:
      return double(hg::BFloat16(x));
    default:
      return x;
  }
}

// n values uniform in [low, high), from a seed, rounded to dtype.
inline Values random_values(uint32_t seed, int64_t n, hg::DType dtype, double low = -1,
                            double high = 1) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<double> uniform(low, high);
  Values values(static_cast<size_t>(n));
  for (double& v : values) v = round_to(dtype, uniform(engine));
  return values;
}

inline hg::Tensor make_tensor(const Values& values, hg::DType dtype) {
  return hg::tensor(values, hg::Shape{int64_t(values.size())}, dtype);
}

inline hg::Tensor make_param(const Values& values, hg::DType dtype) {
  hg::Tensor p = make_tensor(values, dtype);
  p.requires_grad_();
  return p;
}

inline void set_grad(const hg::Tensor& p, const Values& grad) {
  p.mutable_grad() = make_tensor(grad, p.dtype());
}

inline Values values_of(const hg::Tensor& t) { return t.to_vector<double>(); }

// The bytes of a tensor, for bit-identical comparisons.
inline std::vector<unsigned char> bytes_of(const hg::Tensor& t) {
  hg::Tensor c = t.contiguous();
  std::vector<unsigned char> bytes(c.nbytes());
  std::memcpy(bytes.data(), c.data_ptr(), bytes.size());
  return bytes;
}

struct SGDConfig {
  double lr = 0.1, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};

// PyTorch's SGD on one parameter; values are rounded to `dtype` where torch stores them.
struct ReferenceSGD {
  SGDConfig c;
  hg::DType dtype;
  Values p, buffer;
  bool first = true;

  void step(const Values& grad) {
    if (buffer.empty()) buffer.assign(p.size(), 0);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = c.maximize ? -grad[i] : grad[i];
      g += c.weight_decay * p[i];
      if (c.momentum != 0) {
        buffer[i] = round_to(dtype, first ? g : c.momentum * buffer[i] + (1 - c.dampening) * g);
        g = c.nesterov ? g + c.momentum * buffer[i] : buffer[i];
      }
      p[i] = round_to(dtype, p[i] - c.lr * g);
    }
    first = false;
  }
};

struct AdamConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool amsgrad = false, maximize = false, decoupled = false;
};

// PyTorch's Adam (decoupled = false) or AdamW (true) on one parameter; `state_dtype` is the
// dtype exp_avg, exp_avg_sq and max_exp_avg_sq are stored in.
struct ReferenceAdam {
  AdamConfig c;
  hg::DType dtype, state_dtype;
  Values p, exp_avg, exp_avg_sq, max_exp_avg_sq;
  int64_t t = 0;

  void step(const Values& grad) {
    if (exp_avg.empty()) {
      exp_avg.assign(p.size(), 0);
      exp_avg_sq.assign(p.size(), 0);
      max_exp_avg_sq.assign(p.size(), 0);
    }
    ++t;
    const double bias_correction1 = 1 - std::pow(c.beta1, double(t));
    const double bias_correction2 = 1 - std::pow(c.beta2, double(t));
    for (size_t i = 0; i < p.size(); ++i) {
      double g = c.maximize ? -grad[i] : grad[i];
      double w = p[i];
      if (c.decoupled) {
        w *= 1 - c.lr * c.weight_decay;
      } else {
        g += c.weight_decay * w;
      }
      exp_avg[i] = round_to(state_dtype, exp_avg[i] + (1 - c.beta1) * (g - exp_avg[i]));
      exp_avg_sq[i] = round_to(state_dtype, c.beta2 * exp_avg_sq[i] + (1 - c.beta2) * g * g);
      double v = exp_avg_sq[i];
      if (c.amsgrad) {
        max_exp_avg_sq[i] = std::max(max_exp_avg_sq[i], v);
        v = max_exp_avg_sq[i];
      }
      const double denom = std::sqrt(v) / std::sqrt(bias_correction2) + c.eps;
      p[i] = round_to(dtype, w - c.lr / bias_correction1 * exp_avg[i] / denom);
    }
  }
};

// PyTorch's RMSprop on one parameter: the parameter rounded to `dtype`, square_avg, grad_avg and
// momentum_buffer to `state_dtype`, where torch stores them.
struct ReferenceRMSprop {
  hg::optim::RMSpropOptions c;
  hg::DType dtype, state_dtype;
  Values p, square_avg, grad_avg, buffer;

  void step(const Values& grad) {
    if (square_avg.empty()) {
      square_avg.assign(p.size(), 0);
      grad_avg.assign(p.size(), 0);
      buffer.assign(p.size(), 0);
    }
    for (size_t i = 0; i < p.size(); ++i) {
      double g = c.maximize ? -grad[i] : grad[i];
      g += c.weight_decay * p[i];
      square_avg[i] = round_to(state_dtype, c.alpha * square_avg[i] + (1 - c.alpha) * g * g);
      double avg = 0;
      if (c.centered) {
        grad_avg[i] = round_to(state_dtype, c.alpha * grad_avg[i] + (1 - c.alpha) * g);
        avg = std::sqrt(square_avg[i] - grad_avg[i] * grad_avg[i]) + c.eps;
      } else {
        avg = std::sqrt(square_avg[i]) + c.eps;
      }
      if (c.momentum > 0) {
        buffer[i] = round_to(state_dtype, c.momentum * buffer[i] + g / avg);
        p[i] = round_to(dtype, p[i] - c.lr * buffer[i]);
      } else {
        p[i] = round_to(dtype, p[i] - c.lr * g / avg);
      }
    }
  }
};

// PyTorch's Adagrad on one parameter: the parameter rounded to `dtype`, "sum" to `state_dtype`.
struct ReferenceAdagrad {
  hg::optim::AdagradOptions c;
  hg::DType dtype, state_dtype;
  Values p, sum;
  int64_t t = 0;

  void step(const Values& grad) {
    if (sum.empty()) sum.assign(p.size(), round_to(state_dtype, c.initial_accumulator_value));
    ++t;
    const double clr = c.lr / (1 + double(t - 1) * c.lr_decay);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = c.maximize ? -grad[i] : grad[i];
      g += c.weight_decay * p[i];
      sum[i] = round_to(state_dtype, sum[i] + g * g);
      p[i] = round_to(dtype, p[i] - clr * g / (std::sqrt(sum[i]) + c.eps));
    }
  }
};

// |actual - expected| <= tolerance * max(1, |expected|), element by element.
inline bool close(const Values& actual, const Values& expected, double tolerance) {
  if (actual.size() != expected.size()) return false;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!(std::abs(actual[i] - expected[i]) <= tolerance * std::max(1.0, std::abs(expected[i]))))
      return false;
  }
  return true;
}

// The tolerance of a parameter after a few steps against the float64 reference that rounds
// where the storage does: float64 is exact up to summation order; float32 and bfloat16 may
// round the other way where the float computation and the float64 one straddle a rounding
// boundary (an ulp of the dtype now and then).
inline double tolerance(hg::DType dtype) {
  switch (dtype) {
    case hg::kFloat64:
      return 1e-12;
    case hg::kFloat32:
      return 1e-5;
    default:
      return 2e-2;
  }
}

}  // namespace optim_test
