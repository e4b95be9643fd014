// Checks every fused optimizer must pass, written once for the Adam, Adagrad, RMSprop, Adamax,
// Adadelta, RAdam and NAdam tests: a skipped step (found_inf) changes no bit, a scaled step
// equals a step on the divided gradients, GradScaler skips an overflow, a state_dict round trip
// reproduces the next step, and the bits do not depend on the thread count. Each takes the
// optimizer as a function that builds it, with every option away from its default, over the
// parameters it is given.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reference.h"

namespace optim_test {

// The optimizer over the parameters it is given.
using OptimizerOver =
    std::function<std::unique_ptr<hg::optim::Optimizer>(std::vector<hg::Tensor> params)>;

// Every state buffer's bytes, by name.
inline std::map<std::string, std::vector<unsigned char>> buffer_bytes(
    const hg::optim::ParamState& state) {
  std::map<std::string, std::vector<unsigned char>> bytes;
  for (const auto& [name, buffer] : state.buffers) bytes[name] = bytes_of(buffer);
  return bytes;
}

// A parameter of n values of dtype (seed 3) and its optimizer, stepped `steps` times on the
// gradients of seeds 30, 31, ...
struct Stepped {
  hg::Tensor param;
  std::unique_ptr<hg::optim::Optimizer> opt;
};
inline Stepped stepped(const OptimizerOver& make, hg::DType dtype, int64_t n, int steps) {
  Stepped out{make_param(random_values(3, n, dtype), dtype), nullptr};
  out.opt = make({out.param});
  for (int s = 0; s < steps; ++s) {
    set_grad(out.param, random_values(30 + uint32_t(s), n, dtype));
    out.opt->step();
  }
  return out;
}

// After `steps` steps, a scaled step told found_inf = 1 (and one without a scale, found_inf =
// 2) leaves the parameter, its step count and its state bit-identical.
inline void check_found_inf_skips(const OptimizerOver& make, hg::DType dtype, int steps) {
  Stepped run = stepped(make, dtype, 64, steps);
  const auto state_before = buffer_bytes(run.opt->state(0, 0));
  const auto param_before = bytes_of(run.param);
  set_grad(run.param, random_values(60, 64, dtype));
  run.opt->step_scaled(hg::scalar_tensor(8.0, hg::kFloat32), hg::scalar_tensor(1.0, hg::kFloat32));
  run.opt->step_scaled(hg::Tensor(), hg::scalar_tensor(2.0, hg::kFloat32));
  CHECK(bytes_of(run.param) == param_before);
  CHECK(run.opt->state(0, 0).step == steps);
  CHECK(buffer_bytes(run.opt->state(0, 0)) == state_before);
}

// `steps` scaled steps (grad_scale 1024, gradients times 1024, exact) give the bits of as many
// plain steps on the gradients, and leave the gradients scaled (not unscaled in place).
inline void check_scaled_step(const OptimizerOver& make, hg::DType dtype, int steps) {
  const Values initial = random_values(6, 48, dtype);
  hg::Tensor scaled_param = make_param(initial, dtype), plain_param = make_param(initial, dtype);
  const auto scaled = make({scaled_param});
  const auto plain = make({plain_param});
  for (uint32_t s = 0; s < uint32_t(steps); ++s) {
    const Values grad = random_values(70 + s, 48, dtype);
    Values grad_times_scale = grad;
    for (double& g : grad_times_scale) g *= 1024;  // exact: a power of two
    set_grad(scaled_param, grad_times_scale);
    set_grad(plain_param, grad);
    scaled->step_scaled(hg::scalar_tensor(1024.0, hg::kFloat32),
                        hg::scalar_tensor(0.0, hg::kFloat32));
    plain->step();
    CHECK(values_of(scaled_param.grad()) == grad_times_scale);
  }
  CHECK(bytes_of(scaled_param) == bytes_of(plain_param));
  CHECK(buffer_bytes(scaled->state(0, 0)) == buffer_bytes(plain->state(0, 0)));
  CHECK(scaled->state(0, 0).step == steps);
}

// After `steps` steps of a parameter of n values, a second optimizer over a copy of it that loads
// the first's state_dict takes the next step to the same bits; returns that state_dict for
// the caller's own checks of its keys.
inline hg::optim::OptimizerStateDict check_state_dict_round_trip(const OptimizerOver& make,
                                                                 hg::DType dtype, int64_t n,
                                                                 int steps) {
  Stepped first = stepped(make, dtype, n, steps);
  const hg::optim::OptimizerStateDict sd = first.opt->state_dict();
  hg::Tensor copy = make_param(values_of(first.param), dtype);
  const auto second = make({copy});
  second->load_state_dict(sd);
  CHECK(second->param_groups()[0].options == first.opt->param_groups()[0].options);
  CHECK(second->state(0, 0).step == steps);
  const Values grad = random_values(90, n, dtype);
  set_grad(first.param, grad);
  set_grad(copy, grad);
  first.opt->step();
  second->step();
  CHECK(bytes_of(first.param) == bytes_of(copy));
  CHECK(buffer_bytes(first.opt->state(0, 0)) == buffer_bytes(second->state(0, 0)));
  return sd;
}

// Three steps of a 70001-value float32 parameter (over the threads' grain) on one thread and on
// two or more give the same parameter and state bits.
inline void check_thread_count_independent(const OptimizerOver& make) {
  const int threads = hg::get_num_threads();
  std::vector<std::vector<unsigned char>> params;
  std::vector<std::map<std::string, std::vector<unsigned char>>> states;
  for (int t : {1, std::max(2, threads)}) {
    hg::set_num_threads(t);
    Stepped run = stepped(make, hg::kFloat32, 70001, 3);
    params.push_back(bytes_of(run.param));
    states.push_back(buffer_bytes(run.opt->state(0, 0)));
  }
  hg::set_num_threads(threads);
  CHECK(params[0] == params[1]);
  CHECK(states[0] == states[1]);
}

// Two one-value float32 parameters, a stepped twice and b never given a gradient: b keeps its
// value and no state. Returns them, for the caller's further steps.
struct TwoParams {
  hg::Tensor a, b;
  std::unique_ptr<hg::optim::Optimizer> opt;
};
inline TwoParams check_no_state_without_grad(const OptimizerOver& make) {
  TwoParams out{make_param({1.0}, hg::kFloat32), make_param({1.0}, hg::kFloat32), nullptr};
  out.opt = make({out.a, out.b});
  set_grad(out.a, {1.0});
  out.opt->step();
  out.opt->step();
  CHECK(out.opt->state(0, 0).step == 2);
  CHECK(out.opt->state(0, 1).empty());
  CHECK(out.b.item<double>() == 1.0);
  return out;
}

// `steps` steps of opt over its one parameter p and of the float64 reference beside it, on the
// gradients of seeds 200, 201, ... whose magnitude grows with the step, so that the averages
// move.
template <class Reference>
void step_beside(hg::optim::Optimizer& opt, Reference& reference, const hg::Tensor& p,
                 hg::DType dtype, int steps) {
  for (uint32_t s = 0; s < uint32_t(steps); ++s) {
    const Values grad = random_values(200 + s, p.numel(), dtype, -1.0 - s, 1.0 + s);
    set_grad(p, grad);
    opt.step();
    reference.step(grad);
  }
}

// A GradScaler over the optimizer, with `bad` (inf or NaN) put into the scaled gradient at
// iteration 1 of 4: that step is skipped (the parameter and its step count stay), and the
// parameter ends where a control ends that steps plainly on iterations 0, 2 and 3.
inline void check_grad_scaler_skips_overflow(const OptimizerOver& make, uint64_t seed, float bad) {
  hg::manual_seed(seed);
  const hg::Tensor w0 = hg::randn({6});
  const hg::Tensor x = hg::randn({6});
  hg::Tensor w = w0.clone().requires_grad_();
  hg::Tensor control = w0.clone().requires_grad_();
  const auto opt = make({w});
  const auto control_opt = make({control});
  hg::amp::GradScaler scaler(hg::amp::GradScalerOptions{.init_scale = 1024.0});
  for (int iteration = 0; iteration < 4; ++iteration) {
    opt->zero_grad();
    scaler.scale(hg::sum(hg::mul(hg::mul(w, w), x))).backward();
    if (iteration == 1) {
      hg::NoGradGuard no_grad;
      w.mutable_grad().select(0, 2).fill_(bad);
    }
    const std::vector<float> before = w.to_vector<float>();
    const bool stepped = scaler.step(*opt);
    scaler.update();
    CHECK(stepped == (iteration != 1));
    if (iteration == 1) {
      CHECK(w.to_vector<float>() == before);
      CHECK(opt->state(0, 0).step == 1);
      continue;
    }
    control_opt->zero_grad();
    hg::sum(hg::mul(hg::mul(control, control), x)).backward();
    control_opt->step();
  }
  const std::vector<float> a = w.to_vector<float>(), b = control.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-5));
  CHECK(opt->state(0, 0).step == 3);
}

}  // namespace optim_test
