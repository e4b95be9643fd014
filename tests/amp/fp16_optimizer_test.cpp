// FP16Optimizer (apex's FP16_Optimizer): half-precision models trained against float32
// references with the same optimizer and data, dynamic-scale overflow handling, clipping and
// the state dict.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>

#include "halfgrad/amp/fp16_optimizer.h"
#include "halfgrad/amp/master_params.h"
#include "halfgrad/halfgrad.h"
#include "halfgrad/ops/loss.h"

using namespace hg;
using Catch::Contains;

namespace {

std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(nn::Linear(4, 8), nn::Tanh(), nn::Linear(8, 2));
}

std::vector<double> values(const Tensor& t) { return t.detach().to(kFloat64).to_vector<double>(); }

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = values(a), y = values(b);
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

struct Batch {
  Tensor x, y;
};

std::vector<Batch> make_data(int n) {
  Generator gen(1234);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back({randn({16, 4}, {}, &gen), randn({16, 2}, {}, &gen)});
  return out;
}

using Factory = amp::FP16Optimizer::OptimizerFactory;

// Trains an fp32 reference and a low-precision copy (via FP16Optimizer) on the same batches;
// returns the largest difference between the reference params and the masters / model params.
void train_and_compare(DType dtype, const Factory& factory, double master_tol, double model_tol,
                       amp::FP16OptimizerOptions options) {
  auto ref = make_mlp();
  auto low = make_mlp();
  low->load_state_dict(ref->state_dict());
  low->to(dtype);
  std::vector<Tensor> initial;
  for (const Tensor& p : ref->parameters()) initial.push_back(p.detach().clone());
  std::unique_ptr<optim::Optimizer> ref_opt = factory(ref->parameters());
  amp::FP16Optimizer opt(low->parameters(), factory, options);

  for (const Batch& b : make_data(6)) {
    ref_opt->zero_grad();
    mse_loss((*ref)(b.x), b.y).backward();
    ref_opt->step();

    opt.zero_grad();
    Tensor loss = mse_loss((*low)(b.x.to(dtype)), b.y.to(dtype));
    opt.backward(loss);
    REQUIRE(opt.step());
  }
  std::vector<Tensor> ref_params = ref->parameters();
  std::vector<Tensor> low_params = low->parameters();
  std::vector<std::vector<Tensor>> masters;
  for (const optim::ParamGroup& g : opt.optimizer().param_groups()) masters.push_back(g.params);
  REQUIRE(masters.size() == 1);
  REQUIRE(masters[0].size() == ref_params.size());
  double moved = 0;
  for (size_t i = 0; i < ref_params.size(); ++i) {
    moved = std::max(moved, max_abs_diff(initial[i], ref_params[i]));
    UNSCOPED_INFO("diff master " << max_abs_diff(masters[0][i], ref_params[i]) << " model "
                                 << max_abs_diff(low_params[i], ref_params[i]));
  }
  CHECK(moved > 5 * master_tol);  // training moved the params well beyond the tolerance
  for (size_t i = 0; i < ref_params.size(); ++i) {
    INFO("param " << i);
    CHECK(masters[0][i].dtype() == kFloat32);
    CHECK(low_params[i].dtype() == dtype);
    CHECK(max_abs_diff(masters[0][i], ref_params[i]) < master_tol);
    CHECK(max_abs_diff(low_params[i], ref_params[i]) < model_tol);
    // the model param is the master rounded to its dtype
    CHECK(values(low_params[i]) == values(masters[0][i].to(dtype)));
  }
}

}  // namespace

TEST_CASE("FP16Optimizer with SGD matches float32 training", "[amp][apex]") {
  Factory sgd = [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(p),
                                        optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  };
  train_and_compare(kFloat16, sgd, 1e-3, 1e-3, {.static_loss_scale = 128.0});
  train_and_compare(kFloat16, sgd, 1e-3, 1e-3,
                    {.dynamic_loss_scale = true, .dynamic_loss_args = {.init_scale = 1024.0}});
}

TEST_CASE("FP16Optimizer with Adam on a bfloat16 model matches float32 training", "[amp][apex]") {
  Factory adam = [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 0.01});
  };
  train_and_compare(kBFloat16, adam, 5e-3, 1e-2, {.static_loss_scale = 1.0});
}

TEST_CASE("FP16Optimizer masters are float32 copies of the model params", "[amp][apex]") {
  auto model = make_mlp();
  model->half();
  Tensor before = model->parameters()[0];
  auto sgd = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1});
  amp::FP16Optimizer opt(std::move(sgd), {.static_loss_scale = 8.0});
  const optim::ParamGroup& group = opt.optimizer().param_groups()[0];
  REQUIRE(group.params.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(group.params[i].dtype() == kFloat32);
    CHECK(values(group.params[i]) == values(model->parameters()[i]));
  }
  CHECK(model->parameters()[0].is_same(before));

  // backward: master grads are the model grads unscaled
  Tensor x = randn({3, 4}).to(kFloat16);
  Tensor loss = sum((*model)(x));
  opt.backward(loss);
  for (size_t i = 0; i < 4; ++i) {
    Tensor g16 = model->parameters()[i].grad();
    REQUIRE(g16.defined());
    std::vector<double> expect = values(g16);
    for (double& v : expect) v /= 8.0;
    CHECK(values(opt.inspect_master_grad_data()[0][i]) == expect);
  }
  // clipping the masters returns their total norm
  double norm = 0;
  std::vector<std::vector<Tensor>> master_grads = opt.inspect_master_grad_data();
  for (const Tensor& g : master_grads[0]) {
    for (double v : values(g)) norm += v * v;
  }
  norm = std::sqrt(norm);
  CHECK(opt.clip_master_grads(1e9) == Approx(norm).epsilon(1e-5));
  opt.zero_grad();
  CHECK(values(model->parameters()[0].grad()) == std::vector<double>(32, 0.0));
  CHECK(values(group.params[0].grad()) == std::vector<double>(32, 0.0));
  opt.zero_grad(/*set_to_none=*/true);
  CHECK_FALSE(model->parameters()[0].grad().defined());
  CHECK_FALSE(group.params[0].grad().defined());
}

TEST_CASE("FP16Optimizer skips an overflowing step under dynamic scaling", "[amp][apex]") {
  auto model = make_mlp();
  model->half();
  Factory sgd = [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.1});
  };
  amp::FP16Optimizer opt(
      model->parameters(), sgd,
      {.dynamic_loss_scale = true, .dynamic_loss_args = {.init_scale = 256.0, .scale_window = 2}});
  std::vector<Batch> data = make_data(4);
  std::vector<std::vector<double>> model_before, master_before;
  for (const Tensor& p : model->parameters()) model_before.push_back(values(p));
  for (const Tensor& p : opt.optimizer().param_groups()[0].params) {
    master_before.push_back(values(p));
  }

  // injected overflow: an inf in one fp16 grad
  opt.zero_grad();
  opt.backward(mse_loss((*model)(data[0].x.to(kFloat16)), data[0].y.to(kFloat16)),
               /*update_master_grads=*/false);
  model->parameters()[1].mutable_grad().view({-1}).narrow(0, 0, 1).fill_(
      std::numeric_limits<double>::infinity());
  opt.update_master_grads();
  CHECK(opt.overflow());
  CHECK(opt.clip_master_grads(1.0) == -1.0);
  CHECK_FALSE(opt.inspect_master_grad_data()[0][0].defined());
  CHECK_FALSE(opt.step());
  CHECK(opt.loss_scale() == 128.0);
  for (size_t i = 0; i < model_before.size(); ++i) {
    CHECK(values(model->parameters()[i]) == model_before[i]);
    CHECK(values(opt.optimizer().param_groups()[0].params[i]) == master_before[i]);
  }

  // two clean steps (scale_window = 2) -> the scale grows back
  for (int i = 1; i <= 2; ++i) {
    opt.zero_grad();
    opt.backward(mse_loss((*model)(data[i].x.to(kFloat16)), data[i].y.to(kFloat16)));
    CHECK_FALSE(opt.overflow());
    CHECK(opt.step());
  }
  CHECK(opt.loss_scale() == 256.0);
  CHECK(values(model->parameters()[0]) != model_before[0]);
}

TEST_CASE("FP16Optimizer default dynamic scale overflows float16 and backs off", "[amp][apex]") {
  auto model = make_mlp();
  model->half();
  Factory sgd = [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.1});
  };
  amp::FP16Optimizer opt(model->parameters(), sgd, {.dynamic_loss_scale = true});
  CHECK(opt.loss_scale() == 4294967296.0);
  Batch b = make_data(1)[0];
  opt.zero_grad();
  opt.backward(mse_loss((*model)(b.x.to(kFloat16)), b.y.to(kFloat16)));
  CHECK(opt.overflow());  // 2^32 * grads exceed float16's range
  CHECK_FALSE(opt.step());
  CHECK(opt.loss_scale() == 2147483648.0);
}

TEST_CASE("FP16Optimizer state_dict round trip", "[amp][apex]") {
  Factory adam = [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 0.01});
  };
  amp::FP16OptimizerOptions options{.dynamic_loss_scale = true,
                                    .dynamic_loss_args = {.init_scale = 512.0, .scale_window = 3}};
  auto model = make_mlp();
  model->half();
  amp::FP16Optimizer opt(model->parameters(), adam, options);
  std::vector<Batch> data = make_data(5);
  auto train_step = [&](amp::FP16Optimizer& o, nn::Module& m, const Batch& b) {
    o.zero_grad();
    o.backward(mse_loss(m(b.x.to(kFloat16)), b.y.to(kFloat16)));
    return o.step();
  };
  for (int i = 0; i < 3; ++i) REQUIRE(train_step(opt, *model, data[i]));
  CHECK(opt.loss_scale() == 1024.0);
  amp::FP16OptimizerStateDict saved = opt.state_dict();
  CHECK(saved.dynamic_loss_scale);
  CHECK(saved.loss_scaler.at("cur_scale") == 1024.0);
  CHECK(saved.loss_scaler.at("cur_iter") == 3.0);
  REQUIRE(saved.fp32_from_fp16.size() == 1);
  REQUIRE(saved.fp32_from_fp16[0].size() == 4);
  CHECK(saved.optimizer_state_dict.state.size() == 4);

  // a fresh model + optimizer restored from the checkpoint continues identically
  auto model2 = make_mlp();
  model2->half();
  model2->load_state_dict(model->state_dict());
  amp::FP16Optimizer opt2(model2->parameters(), adam, {});
  opt2.load_state_dict(saved);
  CHECK(opt2.dynamic_loss_scale());
  CHECK(opt2.loss_scale() == 1024.0);
  for (int i = 3; i < 5; ++i) {
    REQUIRE(train_step(opt, *model, data[i]));
    REQUIRE(train_step(opt2, *model2, data[i]));
  }
  for (size_t i = 0; i < 4; ++i) {
    CHECK(values(model->parameters()[i]) == values(model2->parameters()[i]));
    CHECK(values(opt.optimizer().param_groups()[0].params[i]) ==
          values(opt2.optimizer().param_groups()[0].params[i]));
  }
  CHECK(opt.loss_scale() == opt2.loss_scale());

  // a mismatched checkpoint changes nothing
  amp::FP16OptimizerStateDict bad = opt.state_dict();
  bad.fp32_from_fp16[0].pop_back();
  double scale = opt2.loss_scale();
  std::vector<double> master0 = values(opt2.optimizer().param_groups()[0].params[0]);
  CHECK_THROWS_WITH(opt2.load_state_dict(bad), Contains("expected 4 masters in group 0, got 3"));
  CHECK(opt2.loss_scale() == scale);
  CHECK(values(opt2.optimizer().param_groups()[0].params[0]) == master0);
}

TEST_CASE("FP16Optimizer wraps an optimizer with mixed-dtype param groups", "[amp][apex]") {
  auto half_lin = std::make_shared<nn::Linear>(3, 2);
  auto float_lin = std::make_shared<nn::Linear>(2, 1);
  half_lin->half();
  auto sgd = std::make_unique<optim::SGD>(
      std::vector<optim::ParamGroup>{{half_lin->parameters(), {{"lr", 0.5}}},
                                     {float_lin->parameters(), {{"lr", 0.25}}}},
      optim::SGDOptions{.lr = 0.1});
  amp::FP16Optimizer opt(std::move(sgd), {.static_loss_scale = 4.0});
  auto& groups = opt.optimizer().param_groups();
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].params[0].dtype() == kFloat32);
  CHECK_FALSE(groups[0].params[0].is_same(half_lin->weight));
  CHECK(groups[1].params[0].is_same(float_lin->weight));  // float32 params are their own masters

  std::vector<double> hw = values(half_lin->weight), fw = values(float_lin->weight);
  // the fp16 backward sees float_lin's weight rounded to fp16; x and the scale are powers of
  // two, so the fp16 grads are exact products
  std::vector<double> fw16 = values(float_lin->weight.to(kFloat16));
  Tensor x = tensor({1.0, -2.0, 0.5}, {1, 3});
  Tensor out = (*float_lin)((*half_lin)(x.to(kFloat16)).to(kFloat32));
  opt.backward(sum(out));
  std::vector<std::vector<Tensor>> grads = opt.inspect_master_grad_data();
  // d out / d float_lin.weight = hidden (unscaled: the float32 grad was divided by 4 too)
  std::vector<double> hidden = values((*half_lin)(x.to(kFloat16)));
  CHECK(values(grads[1][0]) == hidden);
  REQUIRE(opt.step());
  for (size_t i = 0; i < fw.size(); ++i)
    CHECK(values(float_lin->weight)[i] == Approx(fw[i] - 0.25 * hidden[i]));
  // d out / d half_lin.weight[j][k] = fp16(float_lin.weight[j]) * x[k], step lr 0.5 on the master
  std::vector<double> xs{1.0, -2.0, 0.5};
  std::vector<double> master = values(groups[0].params[0]);
  for (size_t j = 0; j < 2; ++j) {
    for (size_t k = 0; k < 3; ++k) {
      CHECK(master[j * 3 + k] == Approx(hw[j * 3 + k] - 0.5 * fw16[j] * xs[k]).epsilon(1e-6));
    }
  }
  CHECK(values(half_lin->weight) == values(groups[0].params[0].to(kFloat16)));

  // an optimizer that has already stepped is refused
  auto lin = std::make_shared<nn::Linear>(2, 2);
  auto stepped = std::make_unique<optim::Adam>(lin->parameters());
  sum((*lin)(ones({1, 2}))).backward();
  stepped->step();
  CHECK_THROWS_WITH(amp::FP16Optimizer(std::move(stepped)), Contains("has not stepped yet"));
}
