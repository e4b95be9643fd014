// apex.fp16_utils' manual master-param utilities and loss scalers: the expected values are
// derived by hand (binary16 / bfloat16 round-to-nearest-even, apex's scale rule).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>

#include "halfgrad/amp/loss_scaler.h"
#include "halfgrad/amp/master_params.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

std::shared_ptr<nn::Sequential> make_net() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(nn::Linear(4, 6));
  net->push_back(nn::LayerNorm(6));
  net->push_back(nn::Linear(6, 8));
  net->push_back(nn::GroupNorm(2, 8));
  net->push_back(nn::BatchNorm2d(8));
  return net;
}

std::vector<double> values(const Tensor& t) { return t.detach().to(kFloat64).to_vector<double>(); }

}  // namespace

TEST_CASE("convert_network keeps normalization layers in float32", "[amp][apex]") {
  auto net = make_net();
  Tensor w0 = net->named_parameters()[0].second;
  amp::convert_network(*net, kFloat16);
  for (auto& [name, p] : net->named_parameters()) {
    INFO(name);
    bool norm = name.rfind("1.", 0) == 0 || name.rfind("3.", 0) == 0 || name.rfind("4.", 0) == 0;
    CHECK(p.dtype() == (norm ? kFloat32 : kFloat16));
  }
  for (auto& [name, b] : net->named_buffers()) {
    INFO(name);
    if (b.is_floating_point()) CHECK(b.dtype() == kFloat32);  // BatchNorm2d running stats
  }
  CHECK(net->named_parameters()[0].second.is_same(w0));  // identity kept

  auto bf = make_net();
  amp::convert_network(*bf, kBFloat16);
  CHECK(bf->named_parameters()[0].second.dtype() == kBFloat16);
  CHECK(bf->named_parameters()[2].second.dtype() == kFloat32);  // LayerNorm weight
}

TEST_CASE("prep_param_lists makes float32 masters", "[amp][apex]") {
  auto net = std::make_shared<nn::Sequential>(nn::Linear(3, 2), nn::Linear(2, 1));
  net->half();
  auto [model_params, master_params] = amp::prep_param_lists(*net);
  REQUIRE(model_params.size() == 4);
  REQUIRE(master_params.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(model_params[i].is_same(net->parameters()[i]));
    CHECK(master_params[i].dtype() == kFloat32);
    CHECK(master_params[i].requires_grad());
    CHECK(master_params[i].is_leaf());
    CHECK(master_params[i].sizes() == model_params[i].sizes());
    CHECK(values(master_params[i]) == values(model_params[i]));  // fp16 -> fp32 is exact
    CHECK_FALSE(master_params[i].shares_storage(model_params[i]));
  }

  auto [flat_model, flat_master] = amp::prep_param_lists(*net, /*flat_master=*/true);
  REQUIRE(flat_master.size() == 1);
  CHECK(flat_master[0].dtype() == kFloat32);
  CHECK(flat_master[0].sizes() == Shape{6 + 2 + 2 + 1});
  CHECK(flat_master[0].requires_grad());
  CHECK(flat_master[0].grad().defined());
  std::vector<double> expect;
  for (const Tensor& p : flat_model) {
    for (double v : values(p)) expect.push_back(v);
  }
  CHECK(values(flat_master[0]) == expect);

  // grads: model -> flat master, then flat master -> model
  for (size_t i = 0; i < flat_model.size(); ++i) {
    flat_model[i].mutable_grad() = full(flat_model[i].sizes(), double(i + 1), kFloat16);
  }
  amp::model_grads_to_master_grads(flat_model, flat_master, true);
  CHECK(values(flat_master[0].grad()) == std::vector<double>{1, 1, 1, 1, 1, 1, 2, 2, 3, 3, 4});
  {
    NoGradGuard no_grad;
    flat_master[0].detach().copy_(arange(11.0));
  }
  amp::master_params_to_model_params(flat_model, flat_master, true);
  CHECK(values(flat_model[0]) == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(values(flat_model[3]) == std::vector<double>{10});
  CHECK(flat_model[0].dtype() == kFloat16);
}

TEST_CASE("network_to_half puts a float16 cast in front, as apex's, so float32 input works",
          "[amp][apex]") {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(nn::Linear(4, 3));
  model->push_back(nn::LayerNorm(3));
  const Tensor w0 = model->named_parameters()[0].second;
  const std::shared_ptr<nn::Sequential> net = amp::network_to_half(model);
  CHECK(model->named_parameters()[0].second.is_same(w0));  // converted in place
  CHECK(w0.dtype() == kFloat16);
  // apex: Sequential(tofp16(), network): the model's keys under "1.".
  const auto params = net->named_parameters();
  REQUIRE(params.size() == 4);
  CHECK(params[0].first == "1.0.weight");
  CHECK(params[2].first == "1.1.weight");
  CHECK(params[2].second.dtype() == kFloat32);  // LayerNorm
  // A float32 input: cast to float16 by the first module; the Linear runs in float16 (without
  // the cast its float32 input and float16 weight would not multiply).
  const Tensor x = randn({2, 4});
  const Tensor y = net->forward(x);
  CHECK(y.sizes() == Shape{2, 3});
  CHECK_THROWS(model->forward(x));
  // The same as casting the input by hand.
  const Tensor by_hand = model->forward(x.to(kFloat16));
  CHECK(y.to(kFloat64).to_vector<double>() == by_hand.to(kFloat64).to_vector<double>());
  // bfloat16 the same way; integer input (embeddings' indices) passes as it is.
  CHECK(
      amp::network_to_bfloat16(std::make_shared<nn::Linear>(2, 2))->forward(ones({1, 2})).dtype() ==
      kBFloat16);
  CHECK(amp::InputCast(kFloat16).forward(ones({2}, kInt64)).dtype() == kInt64);
  CHECK_THROWS_WITH(amp::network_to_half(nullptr), Contains("expected a model"));
}

TEST_CASE("prep_param_lists flat_master rejects mixed dtypes", "[amp][apex]") {
  auto net = make_net();
  amp::convert_network(*net, kFloat16);
  CHECK_THROWS_WITH(amp::prep_param_lists(*net, true), Contains("float16") && Contains("float32"));
  CHECK_NOTHROW(amp::prep_param_lists(*net, false));
}

TEST_CASE("model_grads_to_master_grads copies and clears", "[amp][apex]") {
  auto lin = std::make_shared<nn::Linear>(2, 2);
  lin->half();
  auto [model_params, master_params] = amp::prep_param_lists(*lin);
  model_params[0].mutable_grad() = tensor({0.5, -1.0, 2.0, 65504.0}, {2, 2}, kFloat16);
  master_params[1].mutable_grad() = ones({2});
  amp::model_grads_to_master_grads(model_params, master_params);
  CHECK(master_params[0].grad().dtype() == kFloat32);
  CHECK(values(master_params[0].grad()) == std::vector<double>{0.5, -1.0, 2.0, 65504.0});
  CHECK_FALSE(master_params[1].grad().defined());  // model grad none -> master grad none

  std::vector<Tensor> short_list(master_params.begin(), master_params.begin() + 1);
  CHECK_THROWS_WITH(amp::model_grads_to_master_grads(model_params, short_list),
                    Contains("expected as many master params as model params (2), got 1"));
}

TEST_CASE("master_params_to_model_params rounds to nearest even", "[amp][apex]") {
  auto lin = std::make_shared<nn::Linear>(5, 1, false);
  lin->half();
  auto [model_params, master_params] = amp::prep_param_lists(*lin);
  const double u = std::ldexp(1.0, -10);  // fp16 spacing at 1
  {
    NoGradGuard no_grad;
    master_params[0].detach().copy_(
        tensor({1 + u / 2,                                      // tie -> 1 (even)
                1 + 3 * u / 2,                                  // tie -> 1 + 2u
                1 + u / 2 + std::ldexp(1.0, -20),               // above tie
                -(1 + u / 2 - std::ldexp(1.0, -20)), 70000.0},  // above max half -> inf
               {1, 5}, kFloat32));
  }
  amp::master_params_to_model_params(model_params, master_params);
  std::vector<double> got = values(model_params[0]);
  CHECK(got[0] == 1.0);
  CHECK(got[1] == 1 + 2 * u);
  CHECK(got[2] == 1 + u);
  CHECK(got[3] == -1.0);
  CHECK(std::isinf(got[4]));

  auto blin = std::make_shared<nn::Linear>(2, 1, false);
  blin->bfloat16();
  auto [bmodel, bmaster] = amp::prep_param_lists(*blin);
  const double b = std::ldexp(1.0, -7);  // bf16 spacing at 1
  {
    NoGradGuard no_grad;
    bmaster[0].detach().copy_(tensor({1 + b / 2, 1 + 3 * b / 2}, {1, 2}, kFloat32));
  }
  amp::master_params_to_model_params(bmodel, bmaster);
  CHECK(values(bmodel[0]) == std::vector<double>{1.0, 1 + 2 * b});
}

TEST_CASE("LossScaler is static", "[amp][apex]") {
  amp::LossScaler scaler(128.0);
  Tensor p = zeros({2}).requires_grad_();
  p.mutable_grad() = tensor({std::numeric_limits<double>::infinity(), 0.0});
  CHECK_FALSE(scaler.has_overflow({p}));  // apex: a static scaler never reports overflow
  scaler.update_scale(true);
  CHECK(scaler.loss_scale() == 128.0);
  CHECK(scaler.cur_iter() == 1);
  Tensor loss = sum(tensor({0.5}, kFloat16));
  Tensor scaled = scaler.scale_loss(loss);
  CHECK(scaled.dtype() == kFloat32);
  CHECK(scaled.item<double>() == 64.0);
  CHECK_THROWS_WITH(amp::LossScaler(0.0), Contains("positive finite scale, got 0"));
}

TEST_CASE("DynamicLossScaler follows apex's rule", "[amp][apex]") {
  amp::DynamicLossScaler scaler(16.0, 2.0, 3);
  CHECK(scaler.loss_scale() == 16.0);
  Tensor p = zeros({2}).requires_grad_();
  p.mutable_grad() = tensor({1.0, 2.0});
  CHECK_FALSE(scaler.has_overflow({p}));
  p.mutable_grad() = tensor({1.0, std::nan("")}, kFloat16);
  CHECK(scaler.has_overflow({p}));

  // scale_window clean iterations -> growth on the third
  scaler.update_scale(false);
  scaler.update_scale(false);
  CHECK(scaler.loss_scale() == 16.0);
  scaler.update_scale(false);
  CHECK(scaler.loss_scale() == 32.0);
  // overflow at iter 3: halve, then grow after three more clean iterations
  scaler.update_scale(true);
  CHECK(scaler.loss_scale() == 16.0);
  CHECK(scaler.last_overflow_iter() == 3);
  scaler.update_scale(false);
  scaler.update_scale(false);
  CHECK(scaler.loss_scale() == 16.0);
  scaler.update_scale(false);
  CHECK(scaler.loss_scale() == 32.0);

  amp::DynamicLossScaler low(2.0, 4.0, 10);
  low.update_scale(true);
  CHECK(low.loss_scale() == 1.0);  // not below 1
  low.update_scale(true);
  CHECK(low.loss_scale() == 1.0);

  amp::DynamicLossScaler defaults;
  CHECK(defaults.loss_scale() == 4294967296.0);
  CHECK(defaults.scale_factor() == 2.0);
  CHECK(defaults.scale_window() == 1000);
  CHECK_THROWS_WITH(amp::DynamicLossScaler(8.0, 1.0), Contains("scale_factor > 1, got 1"));
}

TEST_CASE("DynamicLossScaler state_dict round trip", "[amp][apex]") {
  amp::DynamicLossScaler a(64.0, 2.0, 5);
  a.update_scale(false);
  a.update_scale(true);
  amp::DynamicLossScaler b;
  b.load_state_dict(a.state_dict());
  CHECK(b.loss_scale() == 32.0);
  CHECK(b.cur_iter() == 2);
  CHECK(b.last_overflow_iter() == 1);
  CHECK(b.scale_window() == 5);
  std::map<std::string, double> broken = a.state_dict();
  broken.erase("scale_window");
  amp::DynamicLossScaler c(8.0);
  CHECK_THROWS_WITH(c.load_state_dict(broken), Contains("scale_window"));
  CHECK(c.loss_scale() == 8.0);
}
